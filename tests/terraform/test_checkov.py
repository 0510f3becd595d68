"""checkov scans terraform/ offline: zero failed checks, and every skip says why.

checkov lives in its own virtual environment (it pins an old boto3 that breaks
s3fs); `make test` builds it and passes its path in CHECKOV. checkov exits 0 on
files it cannot parse, so test_terraform_references.py is what catches syntax;
here CKV_PARSE_ERROR_FAIL and the parsing_errors list guard it a second time.
"""

import json
import os
import re
import subprocess

import pytest

from terraform_paths import MODULES, ROOT, TERRAFORM, TF_FILES, rel

SKIP = re.compile(r"#\s*checkov:skip=(?P<check>[A-Z0-9_]+)(?::(?P<reason>.*))?")

# No network, no platform: no Prisma Cloud API key, no mapping or update downloads.
OFFLINE_ENV = {
    "BC_SKIP_MAPPING": "TRUE",
    "CKV_SKIP_PACKAGE_UPDATE_CHECK": "TRUE",
    "CHECKOV_RUN_SCA_PACKAGE_SCAN_V2": "false",
    "CKV_PARSE_ERROR_FAIL": "true",
}
SECRET_ENV = ("BC_API_KEY", "PRISMA_API_URL", "BC_API_URL")


def checkov_path() -> str:
    """$CHECKOV, else .venv-checkov/bin/checkov; failing (not skipping) when neither exists."""
    candidates = [os.environ.get("CHECKOV"), str(ROOT / ".venv-checkov" / "bin" / "checkov")]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    pytest.fail("checkov not found: run `make checkov-venv` or set CHECKOV=/path/to/checkov")


@pytest.fixture(scope="module")
def report():
    env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV} | OFFLINE_ENV
    command = [
        checkov_path(), "-d", str(TERRAFORM), "--framework", "terraform",
        "--skip-download", "--compact", "--output", "json",
    ]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=280, cwd=ROOT)
    assert result.stdout.strip(), f"checkov printed nothing (exit {result.returncode}): {result.stderr[-2000:]}"
    data = json.loads(result.stdout)
    reports = data if isinstance(data, list) else [data]
    (terraform,) = [r for r in reports if r.get("check_type") == "terraform"]
    return terraform


def test_checkov_finds_no_failed_checks(report):
    failed = [f"{c['check_id']} {c['resource']} ({c['file_path']}): {c['check_name']}" for c in report["results"]["failed_checks"]]
    assert failed == []


def test_checkov_parsed_every_file(report):
    assert report["summary"]["parsing_errors"] == 0
    assert report["results"]["parsing_errors"] == []


@pytest.mark.parametrize("module_dir", MODULES, ids=[f"checkov ran checks on {rel(p)}" for p in MODULES])
def test_checkov_ran_checks_on(report, module_dir):
    passed_files = {c["file_path"].lstrip("/").split("/")[0] for c in report["results"]["passed_checks"]}
    assert report["summary"]["passed"] > 0
    assert module_dir.name in passed_files


SKIPS = [
    (path, number, match)
    for path in TF_FILES
    for number, line in enumerate(path.read_text().splitlines(), 1)
    if (match := SKIP.search(line))
]


@pytest.mark.parametrize(
    "path, number, match", SKIPS, ids=[f"{m['check']} in {rel(p)}:{n} gives a reason" for p, n, m in SKIPS]
)
def test_skip_gives_a_reason(path, number, match):
    assert len((match["reason"] or "").strip()) >= 20, f"{rel(path)}:{number}: say why {match['check']} is skipped"


def test_every_skip_in_the_files_is_one_checkov_applied(report):
    applied = {c["check_id"] for c in report["results"]["skipped_checks"]}
    annotated = {m["check"] for _, _, m in SKIPS}
    assert annotated <= applied, f"skips checkov never matched (typo, or wrong resource?): {annotated - applied}"
