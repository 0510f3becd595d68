"""House rules for every module: typed, described, validated inputs; pinned providers; a README example that works."""

import re

import hcl2
import pytest

from hcl_model import code_of, cached_module, unquote
from terraform_paths import MODULES, rel

REQUIRED_OUTPUTS = {"broker_url", "checkpoint_bucket", "checkpoint_root", "environment", "secret_environment"}
PINNED = re.compile(r"^(~>|=)\s*\d+\.\d+(\.\d+)?$")


def module_cases(sentence):
    return pytest.mark.parametrize("module_dir", MODULES, ids=[sentence.format(rel(p)) for p in MODULES])


def bare(value) -> str:
    """A scalar as written in the source: no quotes, no ${} wrapper."""
    return code_of(unquote(str(value))).strip() if str(value).startswith("${") else unquote(str(value))


@module_cases("every variable in {} has a type and a description")
def test_variables_are_typed_and_described(module_dir):
    module = cached_module(module_dir)
    missing = [name for name, body in module.variables.items() if "type" not in body or not bare(body.get("description", ""))]
    assert missing == []


@module_cases("every non-bool variable in {} has a validation block")
def test_variables_are_validated(module_dir):
    module = cached_module(module_dir)
    missing = [name for name, body in module.variables.items() if bare(body["type"]) != "bool" and not body.get("validation")]
    assert missing == []


@module_cases("every output in {} has a description")
def test_outputs_are_described(module_dir):
    module = cached_module(module_dir)
    assert [name for name, body in module.outputs.items() if not bare(body.get("description", ""))] == []


@module_cases("outputs of {} that expose generated or sensitive values are sensitive")
def test_secret_outputs_are_sensitive(module_dir):
    module = cached_module(module_dir)
    sensitive_vars = {name for name, body in module.variables.items() if body.get("sensitive") in (True, "true")}
    leaking = []
    for name, body in module.outputs.items():
        code = code_of(str(body["value"]))
        secret = "random_password." in code or any(f"var.{v}" in code for v in sensitive_vars)
        if secret and body.get("sensitive") not in (True, "true"):
            leaking.append(name)
    assert leaking == []


@module_cases("{} has the outputs the broker's operators need")
def test_required_outputs(module_dir):
    assert REQUIRED_OUTPUTS <= set(cached_module(module_dir).outputs)


@module_cases("{} pins terraform and every provider's version")
def test_versions_are_pinned(module_dir):
    module = cached_module(module_dir)
    assert any(block.get("required_version") for block in module.terraform)
    assert module.required_providers, "no required_providers block"
    loose = {
        name: spec for name, spec in module.required_providers.items()
        if not PINNED.match(unquote(spec.get("version", ""))) or not unquote(spec.get("source", ""))
    }
    assert loose == {}


@module_cases("the example terraform.tfvars in {}/README.md sets every required variable and only declared ones")
def test_readme_example(module_dir):
    readme = (module_dir / "README.md").read_text()
    blocks = re.findall(r"```hcl\n(.*?)```", readme, flags=re.S)
    examples = [block for block in blocks if "terraform.tfvars" in block]
    assert len(examples) == 1, "README.md needs one ```hcl block marked # terraform.tfvars"
    example = {key for key in hcl2.loads(examples[0]) if not key.startswith("__")}
    variables = cached_module(module_dir).variables
    required = {name for name, body in variables.items() if "default" not in body}
    assert example - set(variables) == set(), "the example sets variables the module does not declare"
    assert required - example == set(), "the example leaves required variables unset"
