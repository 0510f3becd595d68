"""Every .tf file parses, and every reference in every module points at something real."""

import pytest

from hcl_model import cached_module, parse_text, problems, refs_of
from terraform_paths import MODULES, TF_FILES, rel


def test_there_are_modules_to_check():
    assert [path.name for path in MODULES] == ["aws", "gcp"]


@pytest.mark.parametrize("path", TF_FILES, ids=[f"{rel(p)} parses" for p in TF_FILES])
def test_file_parses(path):
    assert parse_text(path.read_text(), rel(path))


@pytest.mark.parametrize("module_dir", MODULES, ids=[f"references in {rel(p)} all resolve" for p in MODULES])
def test_references_resolve(module_dir):
    module = cached_module(module_dir)
    assert len(refs_of(module)) > 50, "the checker found almost no references: is it reading the files?"
    assert problems(module) == []
