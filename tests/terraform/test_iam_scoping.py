"""Who may stop, terminate, tag and re-key which instances: the modules' IAM, evaluated offline.

SkyPilot's autodown runs on the cluster itself, as the training identity (sky/skylet/events.py), and
is the broker's safety net while no broker runs: the training identity must be able to stop and
delete its cluster. The broker's identity and the training one may touch only the broker's own
clusters, named ``<cluster_prefix>-j-<job>-a<n>`` (launchers/skypilot.py ``cluster_name``).

The policies are read from the HCL and evaluated here for requests SkyPilot makes (a small model of
IAM's Allow evaluation: actions, resource ARNs, the String* condition operators the modules use; of
GCP's IAM conditions: ``!=``, ``||``, ``&&``, ``extract`` and ``startsWith``), and the tag and call
names are read from the SkyPilot the broker pins, so a SkyPilot that renames them fails here.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from fnmatch import fnmatchcase
from pathlib import Path

import pytest

from hcl_model import Module, cached_module, unquote
from terraform_paths import TERRAFORM

AWS = TERRAFORM / "aws"
GCP = TERRAFORM / "gcp"
ACCOUNT = "123456789012"
REGION = "us-east-1"

SKY = Path(importlib.util.find_spec("sky").origin).parent


def sky_source(relative: str) -> str:
    return (SKY / relative).read_text()


def sky_constant(relative: str, name: str) -> str:
    match = re.search(rf"^{name} = '([^']*)'", sky_source(relative), re.M)
    assert match, f"{name} is gone from sky/{relative}"
    return match.group(1)


RAY_CLUSTER_TAG = sky_constant("provision/constants.py", "TAG_RAY_CLUSTER_NAME")


def own_cluster(prefix: str = "broker") -> str:
    """A cluster name as the broker makes it, as SkyPilot names it on the cloud (a user hash after it)."""
    from launchers.skypilot import cluster_name

    return f"{cluster_name('j-0a1b2c3d4e-a2', prefix)}-1a2b3c4d"


# -- the module's values, resolved -------------------------------------------------------------------

def _default(module: Module, name: str):
    value = module.variables[name]["default"]
    return [unquote(v) for v in value] if isinstance(value, list) else unquote(value)


def resolve(module: Module, text: str) -> str:
    """A string of the module with its locals, variable defaults and account data filled in."""
    text = unquote(text)
    for _ in range(5):
        text = re.sub(r"\$\{local\.(\w+)\}", lambda m: unquote(module.locals[m.group(1)]), text)
    text = re.sub(r"\$\{var\.(\w+)\}", lambda m: _default(module, m.group(1)), text)
    return (text.replace("${data.aws_partition.current.partition}", "aws")
            .replace("${data.aws_caller_identity.current.account_id}", ACCOUNT))


def values_of(module: Module, values) -> list[str]:
    if isinstance(values, str):  # a whole list variable: "${var.launch_regions}"
        match = re.fullmatch(r"\$\{var\.(\w+)\}", values)
        assert match, values
        return _default(module, match.group(1))
    return [resolve(module, v) for v in values]


# -- AWS: a model of an Allow statement's evaluation -------------------------------------------------

def role_statements(role: str) -> list[dict]:
    """Every statement of the inline policies of aws_iam_role.<role>."""
    module = cached_module(AWS)
    statements = []
    for (type_, _), body in module.resources.items():
        if type_ == "aws_iam_role_policy" and body["role"] == f"${{aws_iam_role.{role}.id}}":
            document = re.fullmatch(r"\$\{data\.aws_iam_policy_document\.(\w+)\.json\}", body["policy"])
            assert document, body["policy"]
            statements += module.data[("aws_iam_policy_document", document.group(1))]["statement"]
    assert statements, f"no inline policy on aws_iam_role.{role}"
    return statements


def _condition_holds(module: Module, condition: dict, context: dict[str, str]) -> bool:
    test, key = unquote(condition["test"]), unquote(condition["variable"])
    wanted = values_of(module, condition["values"])
    if key not in context:
        return test.endswith("IfExists")
    value = context[key]
    if test.startswith("StringLike"):
        return any(fnmatchcase(value, pattern) for pattern in wanted)
    if test.startswith("StringEquals"):
        return value in wanted
    raise AssertionError(f"the model does not know the operator {test}")


def aws_allows(role: str, action: str, arn: str, context: dict[str, str]) -> bool:
    """Whether an Allow statement of the role grants ``action`` on ``arn`` in this request context."""
    module = cached_module(AWS)
    context = {"aws:RequestedRegion": REGION, **context}
    for statement in role_statements(role):
        if unquote(statement.get("effect", '"Allow"')) != "Allow":
            continue
        if not any(fnmatchcase(action, unquote(a)) for a in statement["actions"]):
            continue
        if not any(fnmatchcase(arn, resolve(module, r)) for r in statement["resources"]):
            continue
        if all(_condition_holds(module, c, context) for c in statement.get("condition", [])):
            return True
    return False


def instance(instance_id: str = "i-0123456789abcdef0") -> str:
    return f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/{instance_id}"


def security_group(group_id: str = "sg-0123456789abcdef0") -> str:
    return f"arn:aws:ec2:{REGION}:{ACCOUNT}:security-group/{group_id}"


def tagged(cluster: str | None) -> dict[str, str]:
    return {} if cluster is None else {f"ec2:ResourceTag/{RAY_CLUSTER_TAG}": cluster}


OTHERS = {
    "an instance of no cluster": None,
    "another team's SkyPilot cluster": "dev-notebook-1a2b3c4d",
    "a broker-staging cluster, for a broker named broker": own_cluster("broker-staging"),
}


# -- 1. the training identity can autodown its own cluster, nothing else -----------------------------

def test_skypilot_autodown_on_aws_uses_the_instance_role_and_these_calls():
    """What the grants below are for: the skylet drops any AWS keys to use the instance's role, then
    calls stop_instances / terminate_instances, which find the cluster by its ray-cluster-name tag."""
    events = sky_source("skylet/events.py")
    assert "os.environ.pop('AWS_ACCESS_KEY_ID', None)" in events
    assert "provision_lib.terminate_instances" in events and "provision_lib.stop_instances" in events
    provisioner = sky_source("provision/aws/instance.py")
    assert "f'tag:{constants.TAG_RAY_CLUSTER_NAME}'" in provisioner
    for call in ("instances.terminate()", "instances.stop()", "instance.modify_attribute(Groups=",
                 "describe_vpcs(", "ec2.security_groups.filter("):
        assert call in provisioner or call in sky_source("provision/aws/config.py"), call


@pytest.mark.parametrize("action", ["ec2:TerminateInstances", "ec2:StopInstances", "ec2:ModifyInstanceAttribute"])
def test_aws_training_role_may_stop_and_terminate_its_own_cluster(action):
    assert aws_allows("training", action, instance(), tagged(own_cluster()))


@pytest.mark.parametrize("action", ["ec2:DescribeInstances", "ec2:DescribeSecurityGroups", "ec2:DescribeVpcs"])
def test_aws_training_role_may_find_its_cluster(action):
    assert aws_allows("training", action, "*", {})


def test_aws_training_role_may_move_its_instances_onto_skypilots_default_group():
    """terminate_instances moves a cluster that had its own sky-sg-<cluster> group onto the VPC's
    sky-sg-<hash> one first; SkyPilot tags the groups it creates skypilot=true."""
    assert aws_allows("training", "ec2:ModifyInstanceAttribute", security_group(), {"ec2:ResourceTag/skypilot": "true"})
    assert not aws_allows("training", "ec2:ModifyInstanceAttribute", security_group(), {})


@pytest.mark.parametrize("action", ["ec2:TerminateInstances", "ec2:StopInstances", "ec2:ModifyInstanceAttribute"])
@pytest.mark.parametrize("cluster", list(OTHERS.values()), ids=list(OTHERS))
def test_aws_training_role_may_not_touch_other_instances(action, cluster):
    assert not aws_allows("training", action, instance(), tagged(cluster))


@pytest.mark.parametrize("action", ["ec2:RunInstances", "ec2:CreateTags", "ec2:StartInstances",
                                    "ec2:AuthorizeSecurityGroupIngress"])
def test_aws_training_role_may_not_launch_tag_or_open_anything(action):
    context = {**tagged(own_cluster()), f"aws:RequestTag/{RAY_CLUSTER_TAG}": own_cluster()}
    assert not aws_allows("training", action, instance(), context)
    assert not aws_allows("training", action, security_group(), {"ec2:ResourceTag/skypilot": "true"})


def test_aws_training_role_is_described_with_what_it_may_do():
    description = cached_module(AWS).resources[("aws_iam_role", "training")]["description"]
    assert "stop or terminate" in description


# -- 2. the broker's role: only its own clusters, only SkyPilot's security groups ---------------------

@pytest.mark.parametrize("action", ["ec2:TerminateInstances", "ec2:StopInstances", "ec2:StartInstances",
                                    "ec2:ModifyInstanceAttribute", "ec2:CreateTags"])
def test_aws_broker_role_manages_its_own_clusters(action):
    assert aws_allows("task", action, instance(), tagged(own_cluster()))


@pytest.mark.parametrize("action", ["ec2:TerminateInstances", "ec2:StopInstances", "ec2:StartInstances",
                                    "ec2:ModifyInstanceAttribute", "ec2:CreateTags", "ec2:DeleteTags"])
@pytest.mark.parametrize("cluster", list(OTHERS.values()), ids=list(OTHERS))
def test_aws_broker_role_may_not_touch_other_instances(action, cluster):
    assert not aws_allows("task", action, instance(), tagged(cluster))


def test_aws_broker_role_may_not_rename_its_instance_into_another_cluster():
    """Re-tagging its own instance (SkyPilot re-tags the head with the tags it has) is allowed; writing a
    cluster name that is not the broker's would hand the instance out of (or another into) its scope."""
    own = tagged(own_cluster())
    assert aws_allows("task", "ec2:CreateTags", instance(), {**own, f"aws:RequestTag/{RAY_CLUSTER_TAG}": own_cluster()})
    for key in (RAY_CLUSTER_TAG, sky_constant("provision/constants.py", "TAG_SKYPILOT_CLUSTER_NAME")):
        assert not aws_allows("task", "ec2:CreateTags", instance(), {**own, f"aws:RequestTag/{key}": "prod-db"})


def test_aws_broker_role_tags_instances_only_in_runinstances_or_its_own():
    """Tags in RunInstances' TagSpecifications are authorized as CreateTags with ec2:CreateAction; the
    RunInstances statement then checks the cluster name in them."""
    assert aws_allows("task", "ec2:CreateTags", instance(), {"ec2:CreateAction": "RunInstances"})
    assert not aws_allows("task", "ec2:CreateTags", instance(), {"ec2:CreateAction": "CreateSecurityGroup"})


def test_aws_broker_role_launches_only_instances_named_for_its_clusters():
    """SkyPilot puts ray-cluster-name in RunInstances' tags (sky/provision/aws/instance.py
    _create_instances): an instance launched untagged, or for another cluster, could not be managed."""
    assert "constants.TAG_RAY_CLUSTER_NAME: cluster_name" in sky_source("provision/aws/instance.py")
    gpu = {"ec2:InstanceType": "g5.xlarge"}
    assert aws_allows("task", "ec2:RunInstances", instance("*"), {**gpu, f"aws:RequestTag/{RAY_CLUSTER_TAG}": own_cluster()})
    assert not aws_allows("task", "ec2:RunInstances", instance("*"), gpu)
    assert not aws_allows("task", "ec2:RunInstances", instance("*"), {**gpu, f"aws:RequestTag/{RAY_CLUSTER_TAG}": "prod-db"})


def test_aws_broker_role_opens_only_skypilots_security_groups():
    """SkyPilot opens SSH and a task's ports on the groups it created (sky-sg-..., tagged skypilot=true);
    any other group of the account (the load balancer's, the database's) stays shut."""
    config = sky_source("provision/aws/config.py")
    assert sky_constant("provision/aws/config.py", "SKYPILOT") == "skypilot"
    assert "'Key': SKYPILOT,\n                    'Value': 'true'," in config
    skypilot_group = {"ec2:ResourceTag/skypilot": "true"}
    assert aws_allows("task", "ec2:AuthorizeSecurityGroupIngress", security_group(), skypilot_group)
    assert not aws_allows("task", "ec2:AuthorizeSecurityGroupIngress", security_group(), {})
    assert not aws_allows("task", "ec2:AuthorizeSecurityGroupIngress", security_group(), {"ec2:ResourceTag/skypilot": "no"})
    assert aws_allows("task", "ec2:ModifyInstanceAttribute", security_group(), skypilot_group)
    assert not aws_allows("task", "ec2:ModifyInstanceAttribute", security_group(), {})


def test_aws_broker_role_creates_security_groups_only_tagged_as_skypilots():
    """CreateSecurityGroup is authorized on the new group and on its VPC; tagging at creation is
    authorized as CreateTags with ec2:CreateAction (without it the tagged create was refused)."""
    vpc = f"arn:aws:ec2:{REGION}:{ACCOUNT}:vpc/vpc-0123456789abcdef0"
    assert aws_allows("task", "ec2:CreateSecurityGroup", vpc, {})
    assert aws_allows("task", "ec2:CreateSecurityGroup", security_group("*"), {"aws:RequestTag/skypilot": "true"})
    assert not aws_allows("task", "ec2:CreateSecurityGroup", security_group("*"), {})
    assert aws_allows("task", "ec2:CreateTags", security_group("*"), {"ec2:CreateAction": "CreateSecurityGroup"})
    assert not aws_allows("task", "ec2:CreateTags", security_group(), {})


# -- GCP: a model of the IAM conditions the module writes ---------------------------------------------

class _Name(str):
    """A resource name with the CEL functions IAM conditions give it."""

    def startsWith(self, prefix: str) -> bool:  # noqa: N802 - CEL's name
        return self.startswith(prefix)

    def extract(self, template: str) -> "_Name":
        before, after = re.fullmatch(r"(.*)\{\w+\}(.*)", template).groups()
        at = self.find(before)
        if at < 0:
            return _Name("")
        rest = self[at + len(before):]
        return _Name(rest[: rest.find(after)] if after and after in rest else rest)


class _Resource:
    def __init__(self, type_: str, name: str):
        self.type, self.name = type_, _Name(name)


def gcp_condition_holds(expression: str, resource_type: str, name: str) -> bool:
    code = resolve(cached_module(GCP), expression)
    assert re.fullmatch(r"[\w\s.'/(){}!=|&-]*", code), code
    code = code.replace("||", " or ").replace("&&", " and ")
    return bool(eval(code, {"__builtins__": {}}, {"resource": _Resource(resource_type, name)}))  # noqa: S307


INSTANCE = "compute.googleapis.com/Instance"


def gcp_instance(name: str) -> str:
    return f"projects/my-project/zones/us-central1-a/instances/{name}"


def gcp_grants(member: str) -> list[tuple[set[str], str | None]]:
    """(permissions, condition expression or None) of each project binding of the member's account."""
    module = cached_module(GCP)
    grants = []
    for (type_, _), body in module.resources.items():
        if type_ != "google_project_iam_member" or f"google_service_account.{member}.email" not in body["member"]:
            continue
        role = re.fullmatch(r"\$\{google_project_iam_custom_role\.(\w+)\.id\}", body["role"])
        assert role, body["role"]
        permissions = {unquote(p) for p in module.resources[("google_project_iam_custom_role", role.group(1))]["permissions"]}
        conditions = body.get("condition", [])
        grants.append((permissions, conditions[0]["expression"] if conditions else None))
    return grants


def gcp_allows(member: str, permission: str, resource_type: str, name: str) -> bool:
    return any(permission in permissions and (expression is None or gcp_condition_holds(expression, resource_type, name))
               for permissions, expression in gcp_grants(member))


GCP_OTHERS = {"another VM of the project": "prod-db-1", "a broker-staging cluster": f"{own_cluster('broker-staging')}-head"}


def test_skypilot_autodown_on_gcp_makes_these_calls():
    provisioner = sky_source("provision/gcp/instance.py")
    utils = sky_source("provision/gcp/instance_utils.py")
    assert "handler.stop(project_id, zone, instance)" in provisioner
    assert "handler.terminate(project_id, zone, instance)" in provisioner
    for call in ("instances().stop(", "instances().delete(", "instances().list(", "zoneOperations()"):
        assert call in utils, call


@pytest.mark.parametrize("permission", ["compute.instances.stop", "compute.instances.delete"])
def test_gcp_training_account_may_stop_and_delete_its_own_cluster(permission):
    assert gcp_allows("training", permission, INSTANCE, gcp_instance(f"{own_cluster()}-3f2a-head"))


@pytest.mark.parametrize("permission", ["compute.instances.stop", "compute.instances.delete"])
@pytest.mark.parametrize("name", list(GCP_OTHERS.values()), ids=list(GCP_OTHERS))
def test_gcp_training_account_may_not_stop_other_instances(permission, name):
    assert not gcp_allows("training", permission, INSTANCE, gcp_instance(name))


@pytest.mark.parametrize("permission", ["compute.instances.list", "compute.zoneOperations.get"])
def test_gcp_training_account_may_find_its_cluster_and_wait(permission):
    """instances.list is checked on the project; the operations are not instances."""
    assert gcp_allows("training", permission, "cloudresourcemanager.googleapis.com/Project", "projects/my-project")


def test_gcp_training_account_gets_no_launch_or_metadata_rights():
    granted = set().union(*(permissions for permissions, _ in gcp_grants("training")))
    assert granted <= {"compute.instances.delete", "compute.instances.list", "compute.instances.stop",
                       "compute.zoneOperations.get"}


# -- 3. the broker's GCP account: instance rights on its own instances only ----------------------------

INSTANCE_RIGHTS = ["compute.instances.setMetadata", "compute.instances.delete", "compute.instances.stop",
                   "compute.instances.start", "compute.instances.setServiceAccount", "compute.instances.setLabels",
                   "compute.instances.create", "compute.instances.get"]


@pytest.mark.parametrize("permission", INSTANCE_RIGHTS)
def test_gcp_broker_may_manage_its_own_instances(permission):
    assert gcp_allows("broker", permission, INSTANCE, gcp_instance(f"{own_cluster()}-3f2a-head"))


@pytest.mark.parametrize("permission", INSTANCE_RIGHTS)
@pytest.mark.parametrize("name", list(GCP_OTHERS.values()), ids=list(GCP_OTHERS))
def test_gcp_broker_may_not_touch_other_instances(permission, name):
    """setMetadata adds SSH keys: on any VM of the project it was a way into all of them."""
    assert not gcp_allows("broker", permission, INSTANCE, gcp_instance(name))


@pytest.mark.parametrize("permission", ["compute.instances.list", "compute.firewalls.create", "compute.disks.create",
                                        "serviceusage.services.use"])
def test_gcp_broker_keeps_its_rights_on_other_resource_types(permission):
    """`sky check gcp` asks testIamPermissions on the project: the condition must hold there."""
    resource = ("cloudresourcemanager.googleapis.com/Project", "projects/my-project")
    assert gcp_allows("broker", permission, *resource)


def test_gcp_cluster_names_keep_the_prefix_on_the_cloud(tmp_path):
    """GCP names are cut to 35 characters (a hash and the user hash after): a 20-character prefix and
    "-j-" still begin every instance name. SkyPilot's own name function runs in a process of its own, under a HOME
    of its own: in this one only the launchers' tests may import ``sky`` (tests/launchers/conftest.py)."""
    assert sky_source("clouds/gcp.py").count("_MAX_CLUSTER_NAME_LEN_LIMIT = 35") == 1
    prefix = "a" * 20
    code = ("from sky.utils.common_utils import make_cluster_name_on_cloud\n"
            "from launchers.skypilot import cluster_name\n"
            f"print(make_cluster_name_on_cloud(cluster_name('j-0a1b2c3d4e-a12', {prefix!r}), 35, add_user_hash=False))")
    env = {**os.environ, "HOME": str(tmp_path), "SKY_RUNTIME_DIR": str(tmp_path), "SKYPILOT_DISABLE_USAGE_COLLECTION": "1"}
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=TERRAFORM.parent, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    on_cloud = done.stdout.strip()
    assert on_cloud.startswith(f"{prefix}-j-"), on_cloud


@pytest.mark.parametrize("module_dir", [AWS, GCP], ids=["aws", "gcp"])
def test_cluster_prefix_defaults_to_the_brokers(module_dir):
    """The broker's cluster_prefix setting defaults to broker; the module's scope must name the same."""
    import dataclasses

    from broker.config import Settings
    from launchers.skypilot import CLUSTER_PREFIX

    (field,) = [f for f in dataclasses.fields(Settings) if f.name == "cluster_prefix"]
    assert _default(cached_module(module_dir), "cluster_prefix") == field.default == CLUSTER_PREFIX
