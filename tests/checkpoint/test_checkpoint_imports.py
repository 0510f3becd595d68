"""The library's import rules, checked on its source: training scripts must run where the
broker is not installed, and each heavy SDK lives in exactly one module."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PYTHON = sys.executable
REPO = Path(__file__).resolve().parents[2]


PACKAGE = REPO / "checkpoint"

# module → the only file allowed to import it
CONFINED = {
    "fsspec": "storage.py", "s3fs": "storage.py", "gcsfs": "storage.py", "boto3": "storage.py",
    "botocore": "storage.py", "torch": "serialization.py", "safetensors": "serialization.py",
    "numpy": "serialization.py",
}
FORBIDDEN = ("broker", "launchers", "pricing")


def imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("path", sorted(PACKAGE.glob("*.py")), ids=lambda p: f"checkpoint/{p.name} obeys the import rules")
def test_import_rules(path):
    used = imports(path)
    assert not used & set(FORBIDDEN), f"{path.name} imports {used & set(FORBIDDEN)}"
    for module, home in CONFINED.items():
        assert module not in used or path.name == home, f"{module} may only be imported in {home}"


def test_importing_checkpoint_loads_neither_torch_nor_the_broker():
    code = ("import sys, checkpoint, checkpoint.progress, checkpoint.cli; "
            "print(sorted(m for m in ('torch', 'numpy', 'broker', 'boto3', 'gcsfs') if m in sys.modules))")
    out = subprocess.run([PYTHON, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
