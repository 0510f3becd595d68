"""The broker's settings have one set of names: docs/deploy.md, both modules and their outputs agree."""

import re

import pytest

from hcl_model import cached_module
from terraform_paths import DEPLOY_DOC, MODULES, TF_FILES, rel

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
}
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
    assert {k for k in environment if not k.startswith("__")} == {k for k, secret in SETTINGS.items() if not secret}


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
