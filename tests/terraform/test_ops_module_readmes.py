"""Each module's README lists its inputs, as docs/deploy.md says it does: every variable, with its default."""

import json
import re

import pytest

from hcl_model import cached_module, unquote
from terraform_paths import MODULES, rel


def inputs_table(module_dir) -> dict[str, str]:
    """``{variable: default cell}`` of the README's ``## Inputs`` table."""
    text = (module_dir / "README.md").read_text()
    match = re.search(r"^## Inputs\n(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    assert match, f"{rel(module_dir)}/README.md has no '## Inputs' section"
    rows = re.findall(r"^\| `(\w+)` \| (.*?) \| .+ \|$", match.group(1), flags=re.M)
    assert len(rows) == len({name for name, _ in rows}), "a variable is listed twice"
    return dict(rows)


def written(default) -> str:
    """A default as the table writes it: ``"spot-broker"``, ``4096``, ``true``, ``["us-east-1", ...]``, ``{}``."""
    if isinstance(default, bool):
        return "true" if default else "false"
    if isinstance(default, (int, float)):
        return str(default)
    if isinstance(default, list):
        return json.dumps([unquote(v) for v in default])
    if isinstance(default, dict):
        return json.dumps({k: unquote(v) for k, v in default.items() if not k.startswith("__")})
    return f'"{unquote(default)}"'


@pytest.mark.parametrize("module_dir", MODULES, ids=[f"{rel(p)}/README.md lists every variable with its default"
                                                     for p in MODULES])
def test_readme_lists_every_input_with_its_default(module_dir):
    table = inputs_table(module_dir)
    variables = cached_module(module_dir).variables
    assert set(table) == set(variables), (f"missing {sorted(set(variables) - set(table))}, "
                                          f"not a variable {sorted(set(table) - set(variables))}")
    for name, body in variables.items():
        expected = f"`{written(body['default'])}`" if "default" in body else "required"
        assert table[name] == expected, f"{name}: the README says {table[name]}, variables.tf {expected}"


def test_aws_readme_says_to_narrow_the_open_ingress():
    """allowed_ingress_cidrs defaults to the whole internet: the README says so, and to narrow it."""
    aws = next(p for p in MODULES if p.name == "aws")
    row = re.search(r"^\| `allowed_ingress_cidrs` \|.*$", (aws / "README.md").read_text(), flags=re.M).group(0)
    assert "0.0.0.0/0" in row and "narrow" in row
