"""The import and purity rules of docs/architecture.md, checked on the source with ``ast``.

Each rule is a row: which modules may import a package (or one module of it). A violation names the
file and the line, so the fix is obvious. Every source file is read and parsed once per session
(:func:`parsed`), not once per rule.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("broker", "launchers", "checkpoint", "pricing")


def imported_modules(tree: ast.AST) -> list[tuple[str, int]]:
    """Every module a tree imports, as a dotted name, with line numbers: ``import a.b`` → ``a.b``;
    ``from a.b import c`` → ``a.b``, and ``a.b.c`` too, since ``c`` may be a module (``from pricing import loading``)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module, node.lineno))
            found += [(f"{node.module}.{alias.name}", node.lineno) for alias in node.names if alias.name != "*"]
    return found


def top_level(found: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """The packages of :func:`imported_modules`' names (``a.b`` → ``a``), one per import statement and package."""
    seen, out = set(), []
    for name, line in found:
        key = (name.split(".")[0], line)
        if key not in seen:
            seen.add(key)
            out.append(key)
    return out


def imports(path: Path) -> list[tuple[str, int]]:
    """Top-level names imported by a file (``import a.b`` → ``a``), with line numbers."""
    return top_level(imported_modules(ast.parse(path.read_text(), filename=str(path))))


def rel(p: Path) -> str:
    return p.relative_to(ROOT).as_posix()


@cache
def parsed() -> tuple[tuple[str, ast.AST], ...]:
    """Every source file of our packages, by its path from the repository root, parsed once."""
    return tuple((rel(p), ast.parse(p.read_text(), filename=str(p)))
                 for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py")))


@cache
def all_imports() -> tuple[tuple[str, tuple[tuple[str, int], ...]], ...]:
    """(file, its imported modules with line numbers as :func:`imported_modules` gives them), for every file."""
    return tuple((f, tuple(imported_modules(tree))) for f, tree in parsed())


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

#: The modules of ``pricing`` a launcher may import, and which launchers may: docs/architecture.md's packages table.
LAUNCHER_PRICING = {
    "pricing.money": lambda f: True,  # the money type (simulated zones' prices)
    "pricing.offers": lambda f: True,  # Tier
    "pricing.placement": lambda f: True,  # what_runs
    "pricing.loading": lambda f: f == "launchers/skypilot.py",  # the SkyPilot launcher's catalog lookups
}
#: The pricing modules that may read files, print or parse a command line; every other one is pure.
PRICING_IO = ("pricing/loading.py", "pricing/simulate_cli.py")
IO_MODULES = {"argparse", "os", "sys", "pathlib", "shutil", "subprocess", "socket", "tempfile", "glob",
              "logging", "urllib", "http", "requests", "sqlite3", "pickle", "shelve"}
IO_BUILTINS = {"open", "print", "input", "exec", "eval", "__import__"}
IO_METHODS = {"open", "read_text", "read_bytes", "write_text", "write_bytes", "loadtxt", "savetxt", "genfromtxt",
              "fromfile", "tofile", "load", "save", "savez"}


def launcher_pricing_offenders(files) -> list[str]:
    """``file:line module`` for each import of a pricing module by a launcher that the table does not allow."""
    out = []
    for f, found in files:
        if not f.startswith("launchers/"):
            continue
        for name, line in found:
            if name == "pricing" or not name.startswith("pricing."):
                continue  # `from pricing import x` is judged by its `pricing.x`
            module = ".".join(name.split(".")[:2])
            allowed = LAUNCHER_PRICING.get(module)
            if allowed is None or not allowed(f):
                out.append(f"{f}:{line} {module}")
    return sorted(set(out))


def io_uses(tree: ast.AST) -> list[tuple[str, int]]:
    """What in a tree reads or writes outside the process: an import of an I/O module (:data:`IO_MODULES`; not
    ``io``, whose ``StringIO`` the catalog parser reads a CSV string through), a call of ``open``/``print``/``input``,
    a ``.open()``/``.read_text()``/``np.load()``... call, ``sys.argv``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names if a.name.split(".")[0] in IO_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in IO_MODULES:
            found += [(f"{node.module}.{a.name}", node.lineno) for a in node.names]
        elif isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name) and node.func.id in IO_BUILTINS:
                found.append((f"{node.func.id}()", node.lineno))
            elif isinstance(node.func, ast.Attribute) and node.func.attr in IO_METHODS:
                found.append((f".{node.func.attr}()", node.lineno))
        elif isinstance(node, ast.Attribute) and node.attr == "argv":
            found.append(("argv", node.lineno))
    return found


def pricing_io_offenders(files) -> list[str]:
    return [f"{f}:{line} {what}" for f, tree in files
            if f.startswith("pricing/") and f not in PRICING_IO for what, line in io_uses(tree)]


def store_api_offenders(files) -> list[str]:
    return sorted({f"{f}:{line}" for f, found in files if f.startswith("broker/store/")
                   for name, line in found if name == "broker.api" or name.startswith("broker.api.")})


@pytest.mark.parametrize("package, allowed, why", LAYER_RULES + SDK_RULES,
                         ids=[f"{r[0]}: {r[2]}" for r in LAYER_RULES + SDK_RULES])
def test_import_rule(package, allowed, why):
    offenders = [f"{f}:{line}" for f, found in all_imports() for name, line in top_level(list(found))
                 if name == package and not allowed(f)]
    assert not offenders, f"{why}; broken by {', '.join(offenders)}"


def test_launchers_import_only_the_named_parts_of_pricing():
    offenders = launcher_pricing_offenders(all_imports())
    assert not offenders, ("launchers import from pricing only its money type (pricing.money), Tier (pricing.offers), "
                           "what_runs (pricing.placement) and, in launchers/skypilot.py, the catalog lookups of "
                           f"pricing.loading (docs/architecture.md); broken by {', '.join(offenders)}")


def test_pricing_is_pure_but_for_loading_and_the_simulator_cli():
    offenders = pricing_io_offenders(parsed())
    assert not offenders, ("pricing/ is pure functions: only pricing/loading.py and pricing/simulate_cli.py read "
                           f"files, print or parse a command line (docs/architecture.md); broken by {', '.join(offenders)}")


def test_the_store_never_imports_the_api_layer():
    offenders = store_api_offenders(all_imports())
    assert not offenders, ("the store never imports the API layer: what both need is in a module of its own "
                           f"(broker/totals.py); broken by {', '.join(offenders)}")


def test_slack_sdk_lives_in_one_module():
    users = {f for f, found in all_imports() for name, _ in top_level(list(found)) if name == "slack_sdk"}
    assert len(users) <= 1, f"slack_sdk imported in {sorted(users)}: keep it in one module"


def test_the_rules_catch_a_violation(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nfrom broker.service import BrokerService\nimport redis.client\n")
    assert imports(bad) == [("os", 1), ("broker", 2), ("redis", 3)]
    rule = dict((r[0], r[1]) for r in LAYER_RULES)["broker"]
    assert not rule("pricing/placement.py") and rule("broker/cli.py")


def _source(text: str) -> ast.AST:
    return ast.parse(text)


def test_the_launcher_pricing_rule_catches_a_violation():
    def files(f, text):
        return [(f, tuple(imported_modules(_source(text))))]

    assert launcher_pricing_offenders(files("launchers/local.py", "from pricing.quote import quote\n")) == \
        ["launchers/local.py:1 pricing.quote"]
    assert launcher_pricing_offenders(files("launchers/local.py", "from pricing import loading\n")) == \
        ["launchers/local.py:1 pricing.loading"]  # loading: the SkyPilot launcher's alone
    assert launcher_pricing_offenders(files("launchers/x.py", "def f():\n    import pricing.simulate_cli\n")) == \
        ["launchers/x.py:2 pricing.simulate_cli"]
    assert launcher_pricing_offenders(files("launchers/skypilot.py", "from pricing.loading import catalog_files\n"
                                            "from pricing.offers import Tier\nfrom pricing import money\n")) == []
    assert launcher_pricing_offenders(files("broker/offers.py", "from pricing.loading import catalog_files\n")) == []


def test_the_pricing_purity_rule_catches_a_violation():
    for text, what in [("def f(p):\n    return open(p).read()\n", "open()"),
                       ("def f(x):\n    print(x)\n", "print()"),
                       ("import argparse\n", "argparse"),
                       ("from pathlib import Path\n", "pathlib.Path"),
                       ("import sys\nARGS = sys.argv\n", "sys"),
                       ("def f(p):\n    return p.read_text()\n", ".read_text()"),
                       ("import numpy as np\ndef f(p):\n    return np.load(p)\n", ".load()")]:
        found = pricing_io_offenders([("pricing/quote.py", _source(text))])
        assert found and what in found[0], (text, found)
    assert pricing_io_offenders([("pricing/loading.py", _source("print(open('x').read())\n"))]) == []
    assert pricing_io_offenders([("pricing/catalog.py", _source("import io\nbuf = io.StringIO('a,b')\n"))]) == []


def test_the_store_rule_catches_a_violation():
    def files(text):
        return [("broker/store/sqlite.py", tuple(imported_modules(_source(text))))]

    assert store_api_offenders(files("from broker.api.metrics import totals\n")) == ["broker/store/sqlite.py:1"]
    assert store_api_offenders(files("from broker import api\n")) == ["broker/store/sqlite.py:1"]
    assert store_api_offenders(files("def f():\n    import broker.api.app\n")) == ["broker/store/sqlite.py:2"]
    assert store_api_offenders(files("from broker.totals import job_totals\nimport broker.apis\n")) == []


def test_the_flow_can_be_read_off_the_file_names():
    """submit → price → place → launch → monitor → preempt → resume, as docs/architecture.md draws it."""
    doc = (ROOT / "docs" / "architecture.md").read_text()
    for path in ["broker/admission.py", "broker/offers.py", "pricing/placement.py", "broker/engine/schedule.py",
                 "broker/engine/launch.py", "launchers/local.py", "broker/engine/monitor.py",
                 "broker/engine/reconcile.py", "broker/lifecycle.py"]:
        assert (ROOT / path).exists(), path
        assert path in doc, f"{path} is not in docs/architecture.md"


def _section(title: str) -> str:
    doc = (ROOT / "docs" / "architecture.md").read_text()
    assert f"\n## {title}\n" in doc, f"docs/architecture.md has no section {title!r}"
    return doc.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_adding_a_launcher_says_which_capabilities_are_read():
    """A ``Capabilities`` flag nothing reads is said to be informational there, and one that is read is not."""
    from dataclasses import fields

    from launchers.base import Capabilities

    read = {node.attr for f, tree in parsed() if f.startswith(("broker/", "launchers/")) for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
            and node.value.attr == "capabilities" and isinstance(node.ctx, ast.Load)}
    section = _section("Adding a launcher")
    said = next(line for line in section.split("\n* ") if line.startswith("**`Capabilities`**"))
    informational = said.split("informational")[0].rsplit(".", 1)[-1] if "informational" in said else ""
    for name in (f.name for f in fields(Capabilities)):
        assert f"`{name}`" in said, f"docs/architecture.md, Adding a launcher: Capabilities.{name} is not named"
        if name in read:
            assert f"`{name}`" not in informational, f"Capabilities.{name} is read, not informational"
        else:
            assert f"`{name}`" in informational, f"nothing reads Capabilities.{name}: say it is informational"


def test_adding_a_launcher_names_files_that_exist():
    import re

    section = _section("Adding a launcher")
    named = set(re.findall(r"[\w/]+\.py", section))
    assert {"launchers/base.py", "broker/config.py", "broker/runtime.py", "launchers/router.py", "broker/offers.py",
            "tests/edges/fakes.py", "broker/api/app.py"} <= named
    assert not [p for p in named if "/" in p and not (ROOT / p).exists()], named
    # the names it says are fixed are fixed there: a registry replacing them makes this section out of date
    assert "'skypilot'" in (ROOT / "broker/config.py").read_text()
    assert '"skypilot"' in (ROOT / "broker/runtime.py").read_text()


def test_the_local_runner_merges_the_environment_in_the_order_launch_request_documents(tmp_path):
    """``LaunchRequest``: the task's envs, then its secrets, then SkyPilot's variables, then the broker's ``envs``."""
    import json
    import sys

    from launchers.local_runner import Runner

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    task = {"run": f"{sys.executable} -c 'import os; print(os.environ[\"A\"], os.environ[\"B\"], "
                   "os.environ[\"SKYPILOT_NUM_NODES\"], os.environ[\"BROKER_JOB_ID\"])'",
            "envs": {"A": "env", "B": "env", "SKYPILOT_NUM_NODES": "9", "BROKER_JOB_ID": "task's"},
            "secrets": {"B": "secret", "SKYPILOT_NUM_NODES": "8"}}
    request = {"attempt_id": "j-1-a1", "task": task, "placement": {}, "envs": {"BROKER_JOB_ID": "j-1"}}
    (run_dir / "request.json").write_text(json.dumps(request))
    assert Runner(run_dir).run()["exit_code"] == 0
    assert (run_dir / "output.log").read_text().split() == ["env", "secret", "1", "j-1"]


def test_policy_doc_lists_every_policy_input_field():
    """docs/policy.md's ``PolicyInput(...)`` names the fields of ``pricing/deadline.py``'s, in order."""
    import re
    from dataclasses import fields

    from pricing.deadline import PolicyInput

    doc = (ROOT / "docs" / "policy.md").read_text()
    listed = re.search(r"`PolicyInput\(([^)]*)\)`", doc)
    assert listed, "docs/policy.md lists no `PolicyInput(...)`"
    assert [n.strip() for n in listed.group(1).split(",")] == [f.name for f in fields(PolicyInput)]


def test_make_bench_runs_the_policy_benchmark_as_documented():
    """``make bench`` reproduces docs/benchmarks.md's policy tables: the same options as the command above them."""
    import re
    import shlex

    doc = (ROOT / "docs" / "benchmarks.md").read_text().split("## Spot policy (`benchmarks/policy.py`)", 1)[1]
    command = re.search(r"Command: `([^`]*)`", doc).group(1)
    recipe = (ROOT / "Makefile").read_text().split("\nbench:", 1)[1].split("\n\n", 1)[0]
    line = next(x for x in recipe.splitlines() if "benchmarks/policy.py" in x)

    def options(text: str) -> list[str]:
        words = shlex.split(text.split("#")[0])
        return words[words.index("benchmarks/policy.py") + 1:]

    assert options(line) == options(command), f"make bench runs {line.strip()!r}; docs/benchmarks.md: {command!r}"
