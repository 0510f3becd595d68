"""The broker's settings have one set of names: docs/deploy.md, both modules and their outputs agree."""

import re
from fnmatch import fnmatchcase

import pytest

from hcl_model import cached_module, code_of, unquote
from terraform_paths import DEPLOY_DOC, MODULES, TERRAFORM, TF_FILES, rel

# The settings the broker reads (name -> secret?). Changing one is an
# interface change: the broker, docs/deploy.md and terraform/ move together.
SETTINGS = {
    "BROKER_STORE_URL": True,
    "BROKER_CONFIG": False,
    "BROKER_CHECKPOINT_ROOT": False,
    "BROKER_PUBLIC_URL": False,
    "BROKER_ADMIN_TOKEN": True,
    "BROKER_TEAM_TOKENS": True,
    "BROKER_SECRETS_KEY": True,
    "BROKER_SLACK_SIGNING_SECRET": True,
    "BROKER_SLACK_BOT_TOKEN": True,
    "BROKER_METRICS_TOKEN": True,  # the modules serve every path to the internet: /metrics names teams and their spend
    "BROKER_LAUNCHER": False,
    "BROKER_ENGINE": False,
    "BROKER_CLOUDS": False,  # each module prices its own cloud only (no "clouds: gcp has no price catalog" at start)
    "BROKER_LAUNCH_REGIONS": False,  # AWS: the task role's launch_regions
    "BROKER_INSTANCE_TYPES": False,  # AWS: the task role's gpu_instance_types
    "BROKER_CLUSTER_PREFIX": False,  # the cluster names the IAM conditions hold the roles to (iam*.tf)
}
# Plain settings a module does not pass: GCP's IAM limits neither regions nor machine types.
NOT_PASSED = {"gcp": {"BROKER_LAUNCH_REGIONS", "BROKER_INSTANCE_TYPES"}, "aws": set()}
SETTING = re.compile(r"\bBROKER_[A-Z_]+\b")


def section(heading: str) -> str:
    text = DEPLOY_DOC.read_text()
    match = re.search(rf"^## {heading}\n(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    assert match, f"docs/deploy.md has no '## {heading}' section"
    return match.group(1)


def documented() -> dict[str, bool]:
    rows = re.findall(r"^\| `(BROKER_[A-Z_]+)` \| (yes|no) \|", section("Settings"), flags=re.M)
    return {name: secret == "yes" for name, secret in rows}


@pytest.mark.parametrize("heading", ["Settings", "AWS", "GCP"], ids=lambda h: f"docs/deploy.md has a '## {h}' section")
def test_deploy_doc_sections(heading):
    assert section(heading).strip()


def test_settings_table_lists_every_setting_once_with_its_secrecy():
    rows = re.findall(r"^\| `(BROKER_[A-Z_]+)`", section("Settings"), flags=re.M)
    assert len(rows) == len(set(rows)), "a setting is listed twice"
    assert documented() == SETTINGS


@pytest.mark.parametrize("module_dir", MODULES, ids=[f"{rel(p)} passes plain settings as environment" for p in MODULES])
def test_module_plain_settings(module_dir):
    environment = cached_module(module_dir).locals["environment"]
    plain = {k for k, secret in SETTINGS.items() if not secret} - NOT_PASSED[module_dir.name]
    assert {k for k in environment if not k.startswith("__")} == plain


@pytest.mark.parametrize("module_dir", MODULES, ids=[f"{rel(p)} passes secret settings from its secret store" for p in MODULES])
def test_module_secret_settings(module_dir):
    module = cached_module(module_dir)
    secret = {k for k, is_secret in SETTINGS.items() if is_secret}
    assert {k for k in module.locals["secret_values"] if not k.startswith("__")} == secret
    assert set(SETTING.findall(str(module.locals["secret_names"]))) == secret


@pytest.mark.parametrize("path", TF_FILES, ids=[f"every setting named in {rel(p)} is documented" for p in TF_FILES])
def test_no_undocumented_setting_names(path):
    assert set(SETTING.findall(path.read_text())) - set(SETTINGS) == set()


@pytest.mark.parametrize("module_dir", MODULES, ids=[f"{rel(p)} outputs the metrics token for Prometheus" for p in MODULES])
def test_module_outputs_the_metrics_token(module_dir):
    text = (module_dir / "outputs.tf").read_text()
    assert re.search(r'output "metrics_token" \{[^}]*random_password\.metrics_token\.result[^}]*sensitive\s*=\s*true', text, re.S)


@pytest.mark.parametrize("module_dir", MODULES, ids=[f"{rel(p)} has the broker price its own cloud only" for p in MODULES])
def test_module_prices_only_its_own_cloud(module_dir, tmp_path):
    """Both modules left ``clouds`` at its default, every cloud: each start logged "clouds: gcp has no price
    catalog" on AWS (the image ships AWS's prices only), and offers on a cloud the module gives SkyPilot no
    identity for were quoted. The module passes BROKER_CLOUDS, which the broker reads over the config file."""
    from broker.config import load_settings

    value = unquote(cached_module(module_dir).locals["environment"]["BROKER_CLOUDS"])
    settings = load_settings({"BROKER_CLOUDS": value, "BROKER_DATA_DIR": str(tmp_path)})
    assert settings.clouds == (module_dir.name,)


def _iam_condition_values(module, key: str) -> str:
    statement = module.data[("aws_iam_policy_document", "task_skypilot")]["statement"][0]
    values = [c["values"] for c in statement["condition"] if unquote(c["variable"]) == key]
    assert len(values) == 1, statement
    return values[0]


@pytest.mark.parametrize("setting, iam_key", [("BROKER_LAUNCH_REGIONS", "aws:RequestedRegion"),
                                              ("BROKER_INSTANCE_TYPES", "ec2:InstanceType")],
                         ids=["the AWS module places in the regions its task role may launch in",
                              "the AWS module places the instance types its task role may launch"])
def test_aws_passes_the_task_roles_launch_limits(setting, iam_key, tmp_path):
    """IAM refuses RunInstances outside launch_regions and gpu_instance_types; a broker that did not know quoted
    and placed offers there, and each launch failed. The setting is the same variable the condition reads, joined
    with commas, and the broker reads the variable's default back whole."""
    from broker.config import load_settings

    module = cached_module(TERRAFORM / "aws")
    variable = re.fullmatch(r"\$\{var\.(\w+)\}", _iam_condition_values(module, iam_key)).group(1)
    assert module.locals["environment"][setting] == f'${{join(",", var.{variable})}}'
    default = [unquote(v) for v in module.variables[variable]["default"]]
    settings = load_settings({setting: ",".join(default), "BROKER_DATA_DIR": str(tmp_path),
                              "BROKER_LAUNCHER": "skypilot", "BROKER_CLOUDS": "aws"})
    read = settings.launch_regions if setting == "BROKER_LAUNCH_REGIONS" else settings.instance_types
    assert list(read) == default


def test_aws_instance_type_patterns_mean_the_same_to_iam_and_fnmatch():
    """IAM's StringLike knows ``*`` and ``?``; the broker reads BROKER_INSTANCE_TYPES with fnmatch, where ``[`` also
    opens a class. gpu_instance_types' validation lets neither ``[`` nor ``?`` through, and each default pattern
    matches the types of its family only."""
    module = cached_module(TERRAFORM / "aws")
    condition = code_of(module.variables["gpu_instance_types"]["validation"][0]["condition"])
    raw = module.variables["gpu_instance_types"]["validation"][0]["condition"]
    pattern = re.search(r'regex\("(.*?)", t\)', raw).group(1).replace("\\\\", "\\")
    assert "can(regex(" in condition
    assert not re.search(pattern, "g5.[x]large") and not re.search(pattern, "g5.?xlarge")
    defaults = [unquote(p) for p in module.variables["gpu_instance_types"]["default"]]
    assert all(re.search(pattern, p) for p in defaults)
    assert any(fnmatchcase("g5.xlarge", p) for p in defaults)
    assert not any(fnmatchcase("m5.xlarge", p) for p in defaults)
