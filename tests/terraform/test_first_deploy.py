"""What a first `terraform apply` and the brokers' first start depend on, read offline from the modules.

Each test names the provider or SkyPilot behaviour it guards; the model cannot run Terraform, so a
check here reads the expression the module writes (a reference, a regular expression, a condition).
"""

import re

import pytest

from hcl_model import cached_module, code_of, unquote
from terraform_paths import MODULES, TERRAFORM, rel

AWS = TERRAFORM / "aws"
GCP = TERRAFORM / "gcp"


def module_cases(sentence):
    return pytest.mark.parametrize("module_dir", MODULES, ids=[sentence.format(rel(p)) for p in MODULES])


# -- secrets reach running brokers ------------------------------------------------------------------

def test_aws_tasks_pin_the_secret_version_so_a_new_value_rolls_them():
    """ECS reads a secret once, when a task starts: with valueFrom the bare secret ARN, a rotated token
    (a tainted random_password, a new Slack secret) changes no task definition, so no task restarts and
    the old token stays valid. ``<arn>:::<version id>`` (json-key and version-stage empty, as the ECS
    docs and CDK's Secret.fromSecretsManagerVersion write it) makes a new value a new task definition."""
    text = code_of(cached_module(AWS).resources[("aws_ecs_task_definition", "broker")]["container_definitions"])
    secrets = re.search(r"secrets\s*=\s*\[(.*?)\]\s*,\s*logConfiguration", text, re.S)
    assert secrets, "no secrets list in the container definition"
    assert "aws_secretsmanager_secret_version.broker[key].version_id" in secrets.group(1)


def test_gcp_service_pins_the_secret_versions_so_a_new_value_rolls_it():
    """Cloud Run resolves ``latest`` when an instance starts; a new secret version changes no revision, so
    running instances keep the old value. Naming the version makes a new value a new revision."""
    text = str(cached_module(GCP).resources[("google_cloud_run_v2_service", "broker")])
    versions = re.findall(r"'version': '([^']*)'", text)
    assert len(versions) == 2, versions  # the secret settings, and the Redis CA file
    assert all("google_secret_manager_secret_version." in v and v.endswith(".version}") for v in versions), versions


def _actions(document: dict) -> set[str]:
    return {unquote(a) for statement in document["statement"] for a in statement.get("actions", [])}


def test_aws_task_role_does_not_read_secrets_manager():
    """ECS injects the secrets with the execution role; the broker never calls Secrets Manager (no
    code of broker/, launchers/ or checkpoint/ does). The task role is what SkyPilot and every
    process in the container run as: it should not read the store URL, the tokens and the secrets key."""
    module = cached_module(AWS)
    for name in ("task_storage", "task_skypilot"):
        granted = _actions(module.data[("aws_iam_policy_document", name)])
        assert not {a for a in granted if a.startswith("secretsmanager:")}, name


# -- SkyPilot can use the broker's identity ----------------------------------------------------------

# SkyPilot 0.14.1's `sky check gcp` asks testIamPermissions on the project for these
# (sky/provision/gcp/constants.py: VM_MINIMAL_PERMISSIONS + FIREWALL_PERMISSIONS, no custom VPC,
# + GCP_MINIMAL_PERMISSIONS) and leaves GCP disabled, so nothing launches there, if one is missing.
# iam.serviceAccounts.actAs is not asked: it may be granted on one service account, as the module does.
SKYPILOT_GCP_CHECKED = {
    "compute.disks.create", "compute.disks.list", "compute.firewalls.get", "compute.instances.create",
    "compute.instances.delete", "compute.instances.get", "compute.instances.list", "compute.instances.setLabels",
    "compute.instances.setServiceAccount", "compute.instances.start", "compute.instances.stop",
    "compute.networks.get", "compute.networks.list", "compute.networks.getEffectiveFirewalls",
    "compute.globalOperations.get", "compute.subnetworks.use", "compute.subnetworks.list",
    "compute.subnetworks.useExternalIp", "compute.projects.get", "compute.zoneOperations.get", "iam.roles.get",
    "iam.serviceAccounts.get", "serviceusage.services.use", "resourcemanager.projects.get",
    "resourcemanager.projects.getIamPolicy",
    "compute.firewalls.create", "compute.firewalls.delete",
    "serviceusage.services.enable", "serviceusage.services.list",
}


def test_gcp_skypilot_role_has_every_permission_sky_check_asks_for():
    role = cached_module(GCP).resources[("google_project_iam_custom_role", "skypilot")]
    granted = {unquote(p) for p in role["permissions"]}
    assert SKYPILOT_GCP_CHECKED - granted == set()


def test_gcp_enables_the_apis_sky_check_needs():
    """`sky check gcp` fails while Compute, Cloud Resource Manager or IAM is disabled (it tries to enable
    them with gcloud first); new projects do not have Cloud Resource Manager on."""
    text = str(cached_module(GCP).resources[("google_project_service", "needed")]["for_each"])
    for api in ("compute.googleapis.com", "cloudresourcemanager.googleapis.com", "iam.googleapis.com"):
        assert api in text


# -- inputs: what the validation lets through must apply --------------------------------------------

def _name_ok(module_dir, name: str) -> bool:
    """var.name's validation, evaluated: ``length(var.name)``, ``can(regex(...))`` and ``&&`` only."""
    condition = code_of(cached_module(module_dir).variables["name"]["validation"][0]["condition"])
    raw = cached_module(module_dir).variables["name"]["validation"][0]["condition"]
    patterns = [p.replace("\\\\", "\\") for p in re.findall(r'regex\("(.*?)", var\.name\)', raw)]
    assert patterns, raw
    for pattern in patterns:  # Terraform's regex() searches; every pattern here is anchored
        condition = re.sub(r"can\(regex\(\s*,\s*var\.name\)\)", str(bool(re.search(pattern, name))), condition, count=1)
    code = condition.replace("&&", " and ").replace("length(var.name)", str(len(name)))
    assert re.fullmatch(r"[\w\s<>=]*", code), code
    return bool(eval(code, {"__builtins__": {}}))  # noqa: S307 - checked above


@module_cases("{} refuses a name its resources would refuse at apply")
@pytest.mark.parametrize("name", ["abc-", "spot-broker-", "spot--broker", "ab", "1abc", "Spot", "a-", "a" * 22])
def test_name_validation_refuses(module_dir, name):
    """The name prefixes resources that refuse a trailing hyphen or two hyphens in a row: the load balancer
    and target group ("must not begin or end with a hyphen"), ElastiCache's replication group id ("must not
    contain two consecutive hyphens"), the Cloud Run service (must not end with a hyphen)."""
    assert not _name_ok(module_dir, name)


@module_cases("{} accepts a sane name")
@pytest.mark.parametrize("name", ["spot-broker", "sb-prod", "abc", "broker-staging-2", "a" * 21])
def test_name_validation_accepts(module_dir, name):
    assert _name_ok(module_dir, name)


# Fargate's task sizes (ECS developer guide, "Task CPU and memory"): memory per CPU, in MiB, 1 GiB steps.
FARGATE_MEMORY = {512: (1024, 4096), 1024: (2048, 8192), 2048: (4096, 16384), 4096: (8192, 30720)}


def _evaluate(condition: str, values: dict[str, int]) -> bool:
    """A precondition written with var.x, numbers, min/max, comparisons, && and || (no other syntax)."""
    code = code_of(condition)
    assert re.fullmatch(r"[\w.\s()<>=!&|*+,-]*", code), code
    code = code.replace("&&", " and ").replace("||", " or ")
    code = re.sub(r"var\.(\w+)", lambda m: str(values[m.group(1)]), code)
    return bool(eval(code, {"__builtins__": {}}, {"min": min, "max": max}))  # noqa: S307 - checked above


def test_aws_refuses_a_task_size_fargate_does_not_run():
    """task_cpu and task_memory are validated apart (Terraform 1.6 cannot compare two variables in a
    validation), so 512 CPU with 8 GiB passed both and failed at RegisterTaskDefinition. A precondition
    on the task definition must accept exactly Fargate's combinations."""
    body = cached_module(AWS).resources[("aws_ecs_task_definition", "broker")]
    conditions = [p["condition"] for block in body.get("lifecycle", []) for p in block.get("precondition", [])]
    conditions = [c for c in conditions if "var.task_cpu" in c and "var.task_memory" in c]
    assert len(conditions) == 1, "no precondition compares task_memory with task_cpu"
    for cpu, (low, high) in FARGATE_MEMORY.items():
        for memory in range(1024, 30721, 1024):
            expected = low <= memory <= high
            assert _evaluate(conditions[0], {"task_cpu": cpu, "task_memory": memory}) == expected, (cpu, memory)


# -- one account or project, several deployments -------------------------------------------------------

@module_cases("the training identity of {} is named after var.name")
def test_training_identity_follows_the_name(module_dir):
    """Every other IAM role or service account is prefixed with var.name; the training one was fixed
    (spot-broker-training), so a second deployment (staging beside prod, or another region) in the same
    account or project failed at apply (the role, instance profile or service account already exists),
    and could not have been given only its own bucket. The default name keeps spot-broker-training."""
    local = "training_role_name" if module_dir == AWS else "training_account_id"
    assert cached_module(module_dir).locals[local] == '"${var.name}-training"'


def test_gcp_liveness_probe_waits_longer_than_the_broker_waits_for_a_stalled_store():
    """/v1/healthz answers 200 within PROBE_SECONDS even while the store stalls; Cloud Run's liveness probe
    times out after 1 s unless told otherwise, and would restart every instance for a store outage."""
    from broker.api.probe import PROBE_SECONDS

    text = str(cached_module(GCP).resources[("google_cloud_run_v2_service", "broker")])
    at = text.find("'liveness_probe'")
    assert at >= 0, "no liveness probe"
    block = text[at:text.find("'__is_block__': True}]", text.find("'period_seconds'", at))]  # the probe's own keys
    timeout = re.search(r"'timeout_seconds': '?(\d+)", block)
    assert timeout and int(timeout.group(1)) > PROBE_SECONDS, block[:300]
