"""The import rules of docs/architecture.md, checked on the source with ``ast``.

Each rule is a row: which modules may import a package. A violation names the
file and the line, so the fix is obvious.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("broker", "launchers", "checkpoint", "pricing")


def imports(path: Path) -> list[tuple[str, int]]:
    """Top-level names imported by a file (``import a.b`` → ``a``), with line numbers."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name.split(".")[0], node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module.split(".")[0], node.lineno))
    return found


def sources() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def rel(p: Path) -> str:
    return p.relative_to(ROOT).as_posix()


# (imported package, predicate on the importing file's path, why)
LAYER_RULES = [
    ("broker", lambda f: not f.startswith(("pricing/", "checkpoint/", "launchers/")),
     "pricing, checkpoint and launchers never import the broker: decisions and libraries stay reusable"),
    ("launchers", lambda f: not f.startswith(("pricing/", "checkpoint/")),
     "pricing and checkpoint know nothing of launchers"),
    ("checkpoint", lambda f: not f.startswith(("pricing/", "launchers/", "broker/")),
     "the checkpoint library is imported by training scripts, not by the broker"),
    ("pricing", lambda f: not f.startswith("checkpoint/"),
     "the checkpoint library stands alone"),
]

SDK_RULES = [
    ("sky", lambda f: f.startswith("launchers/skypilot"), "SkyPilot only in the SkyPilot launcher"),
    ("redis", lambda f: f == "broker/store/redis.py", "redis only in the Redis store"),
    ("fastapi", lambda f: f.startswith("broker/api/"), "FastAPI only in the HTTP edge"),
    ("starlette", lambda f: f.startswith("broker/api/"), "Starlette only in the HTTP edge"),
    ("fastapi_offline", lambda f: f == "broker/api/app.py", "the docs pages' local assets in the app module"),
    ("uvicorn", lambda f: f == "broker/cli.py", "the server is started by the CLI only"),
    ("prometheus_client", lambda f: f == "broker/api/metrics.py", "metrics in one module"),
    ("fsspec", lambda f: f in ("checkpoint/storage.py", "broker/workdir_store.py"),
     "object storage through one storage module each: the checkpoint library's, and the broker's for workdir packs"),
    ("s3fs", lambda f: f == "checkpoint/storage.py", "object storage through one storage module"),
    ("gcsfs", lambda f: f == "checkpoint/storage.py", "object storage through one storage module"),
    ("boto3", lambda f: f == "checkpoint/storage.py", "cloud SDKs only in the checkpoint storage module"),
    ("botocore", lambda f: f == "checkpoint/storage.py", "cloud SDKs only in the checkpoint storage module"),
    ("aiohttp", lambda f: f == "checkpoint/storage.py", "gcsfs's transport errors read in the storage module only"),
    ("slack_sdk", lambda f: f == "broker/slack/sdk.py", "Slack's SDK in one module"),
    ("cryptography", lambda f: f == "broker/sealing.py", "the cipher that seals task secrets in one module"),
    ("torch", lambda f: f == "checkpoint/serialization.py" or f.startswith("checkpoint/rng"),
     "PyTorch only where state is (de)serialized"),
]


@pytest.mark.parametrize("package, allowed, why", LAYER_RULES + SDK_RULES,
                         ids=[f"{r[0]}: {r[2]}" for r in LAYER_RULES + SDK_RULES])
def test_import_rule(package, allowed, why):
    offenders = [f"{rel(p)}:{line}" for p in sources() for name, line in imports(p)
                 if name == package and not allowed(rel(p))]
    assert not offenders, f"{why}; broken by {', '.join(offenders)}"


def test_slack_sdk_lives_in_one_module():
    users = {rel(p) for p in sources() for name, _ in imports(p) if name == "slack_sdk"}
    assert len(users) <= 1, f"slack_sdk imported in {sorted(users)}: keep it in one module"


def test_the_rules_catch_a_violation(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nfrom broker.service import BrokerService\nimport redis.client\n")
    assert imports(bad) == [("os", 1), ("broker", 2), ("redis", 3)]
    rule = dict((r[0], r[1]) for r in LAYER_RULES)["broker"]
    assert not rule("pricing/placement.py") and rule("broker/cli.py")


def test_the_flow_can_be_read_off_the_file_names():
    """submit → price → place → launch → monitor → preempt → resume, as docs/architecture.md draws it."""
    doc = (ROOT / "docs" / "architecture.md").read_text()
    for path in ["broker/admission.py", "broker/offers.py", "pricing/placement.py", "broker/engine/schedule.py",
                 "broker/engine/launch.py", "launchers/local.py", "broker/engine/monitor.py",
                 "broker/engine/reconcile.py", "broker/lifecycle.py"]:
        assert (ROOT / path).exists(), path
        assert path in doc, f"{path} is not in docs/architecture.md"
