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


# -- health checks outlast the broker's wait for a stalled store --------------------------------------------

# What each check gives up after when the module sets no timeout: Cloud Run's probes 1 s (its API reference,
# timeoutSeconds); an ALB target group of target type ip 5 s (ELB developer guide, "Health checks for target
# groups", HealthCheckTimeoutSeconds).
CLOUD_RUN_DEFAULT_TIMEOUT = 1
ALB_IP_TARGET_DEFAULT_TIMEOUT = 5


def _gcp_probes() -> dict[str, dict]:
    container = cached_module(GCP).resources[("google_cloud_run_v2_service", "broker")]["template"][0]["containers"][0]
    return {name: container[name][0] for name in ("startup_probe", "liveness_probe") if container.get(name)}


def test_gcp_has_the_startup_and_the_liveness_probe():
    assert set(_gcp_probes()) == {"startup_probe", "liveness_probe"}


@pytest.mark.parametrize("probe", ["startup_probe", "liveness_probe"],
                         ids=["the GCP startup probe waits longer than the broker waits for a stalled store",
                              "the GCP liveness probe waits longer than the broker waits for a stalled store"])
def test_gcp_probes_wait_longer_than_the_broker_waits_for_a_stalled_store(probe):
    """/v1/healthz and /v1/readyz answer within PROBE_SECONDS even while the store stalls; a Cloud Run probe times
    out after 1 s unless told otherwise. The liveness probe would then restart every instance for a store outage,
    and the startup probe fail a new revision whose store answers slowly. Cloud Run takes a timeout of at most the
    probe's period."""
    from broker.api.probe import PROBE_SECONDS

    block = _gcp_probes()[probe]
    timeout = int(block.get("timeout_seconds", CLOUD_RUN_DEFAULT_TIMEOUT))
    assert timeout > PROBE_SECONDS, f"{probe}: timeout_seconds {timeout}"
    assert timeout <= int(block.get("period_seconds", 10)), f"{probe}: the timeout exceeds the period"


def test_aws_load_balancer_check_waits_longer_than_the_broker_waits_for_a_stalled_store():
    from broker.api.probe import PROBE_SECONDS

    group = cached_module(AWS).resources[("aws_lb_target_group", "broker")]
    assert unquote(group["target_type"]) == "ip"  # the default below is that of ip targets
    for check in group["health_check"]:
        timeout = int(check.get("timeout", ALB_IP_TARGET_DEFAULT_TIMEOUT))
        assert PROBE_SECONDS < timeout < int(check.get("interval", 30)), check


def test_the_images_healthcheck_waits_longer_than_the_broker_waits_for_a_stalled_store():
    """`docker run` of the image (ECS and Cloud Run ignore it): its HEALTHCHECK and the urlopen inside it."""
    from broker.api.probe import PROBE_SECONDS

    text = (TERRAFORM.parent / "deploy" / "Dockerfile").read_text()
    line = re.search(r"^HEALTHCHECK (.*?)\\?\n\s*CMD (.*)$", text, re.M)
    assert line, "no HEALTHCHECK"
    docker_timeout = int(re.search(r"--timeout=(\d+)s", line.group(1)).group(1))
    client_timeout = float(re.search(r"timeout=(\d+(?:\.\d+)?)\)", line.group(2)).group(1))
    assert PROBE_SECONDS < client_timeout < docker_timeout


# -- what a destroy and a long life need -------------------------------------------------------------------

def test_gcp_service_deletion_protection_is_a_variable_the_readme_says_to_turn_off():
    """google provider 6.0 made deletion_protection default to true on google_cloud_run_v2_service: the README's
    `terraform destroy` failed on the service. The module names it (as the AWS module does for its load
    balancer), and the README says to set it false and apply before destroying."""
    service = cached_module(GCP).resources[("google_cloud_run_v2_service", "broker")]
    assert service.get("deletion_protection") == "${var.deletion_protection}"
    variable = cached_module(GCP).variables["deletion_protection"]
    assert unquote(variable["type"]).strip("${}") == "bool"
    readme = (GCP / "README.md").read_text()
    blocks = [b for b in re.findall(r"^```sh\n(.*?)^```", readme, flags=re.M | re.S) if "terraform destroy" in b]
    assert blocks, "the README shows no `terraform destroy`"
    lines = [line.split("#")[0].split() for line in blocks[0].splitlines()]
    destroy = next(i for i, words in enumerate(lines) if words[:2] == ["terraform", "destroy"])
    assert any(words[:2] == ["terraform", "apply"] and "deletion_protection=false" in words
               for words in lines[:destroy]), blocks[0]


# Fargate's sizes and Cloud Run's: a CPU takes memory up to these (MiB). Cloud Run: more than 4 GiB needs 2 CPUs.
CLOUD_RUN_MAX_MEMORY = {"1": 4096, "2": 8192, "4": 16384, "8": 32768}


def _mebibytes(size: str) -> int:
    number, unit = re.fullmatch(r"(\d+)(Mi|Gi)", size).groups()
    return int(number) * (1024 if unit == "Gi" else 1)


def test_the_default_memory_holds_skypilots_api_server_beside_the_broker():
    """An idle broker with SkyPilot's API server measured ~1.2 GiB; SkyPilot's server warns at 2 GB or less
    (MIN_AVAIL_MEM_GB) and Cloud Run's filesystem is in memory (a workdir unpacks to 640 MiB): 2 GiB left
    nothing for a launch. Both modules default to 4 GiB, at a CPU size that runs it. SkyPilot's figure is read from
    its source as text: ``sky`` may be imported in a test process only under tests/launchers (tests/conftest.py)."""
    import ast
    import importlib.util
    from pathlib import Path

    found = importlib.util.find_spec("sky")
    assert found is not None and found.submodule_search_locations, "SkyPilot is not installed"
    source = Path(next(iter(found.submodule_search_locations)), "server", "constants.py").read_text()
    (min_avail_gb,) = [node.value.value for node in ast.parse(source).body if isinstance(node, ast.Assign)
                       and [getattr(t, "id", None) for t in node.targets] == ["MIN_AVAIL_MEM_GB"]]

    aws = cached_module(AWS).variables
    gcp = cached_module(GCP).variables
    aws_memory, aws_cpu = int(aws["task_memory"]["default"]), int(aws["task_cpu"]["default"])
    gcp_memory, gcp_cpu = _mebibytes(unquote(gcp["memory"]["default"])), unquote(gcp["cpu"]["default"])
    for memory in (aws_memory, gcp_memory):
        assert memory >= 4096 and memory > min_avail_gb * 1024
    assert FARGATE_MEMORY[aws_cpu][0] <= aws_memory <= FARGATE_MEMORY[aws_cpu][1]
    assert gcp_memory <= CLOUD_RUN_MAX_MEMORY[gcp_cpu]


def test_gcp_store_keeps_rdb_snapshots_by_default():
    """ElastiCache keeps snapshot_retention_limit days of snapshots; Memorystore had no persistence, so a primary and
    replica lost together restarted the store empty. redis_persistence (default true) turns on hourly RDB snapshots."""
    module = cached_module(GCP)
    assert module.variables["redis_persistence"]["default"] is True
    config = module.resources[("google_redis_instance", "store")]["persistence_config"][0]
    assert config["persistence_mode"] == '${var.redis_persistence ? "RDB" : "DISABLED"}'
    assert config["rdb_snapshot_period"] == '${var.redis_persistence ? "ONE_HOUR" : null}'


def test_gcp_mounts_every_redis_ca_for_a_rotation():
    """Memorystore lists a second CA five years in and moves its certificate to it; a file of server_ca_certs[0]
    alone failed every connection from then on."""
    data = cached_module(GCP).resources[("google_secret_manager_secret_version", "redis_ca")]["secret_data"]
    assert "[0]" not in data
    assert re.search(r"for \w+ in google_redis_instance\.store\.server_ca_certs\s*:", data), data
