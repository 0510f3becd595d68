"""What a broker starting with the SkyPilot launcher warns of, once, instead of refusing job after job at launch:
a Kubernetes pool without SkyPilot's Kubernetes support, a cloud of ``clouds:`` with no catalog, a cloud SkyPilot's
last ``sky check`` left disabled (``launchers/skypilot.py``: :func:`setup_warnings`; logged by
``broker/runtime.py``: :func:`open_launcher`).

Real SkyPilot, offline: the catalogs are the test catalog of ``conftest.py`` under a ``SKY_RUNTIME_DIR`` of the
test's own, and SkyPilot's cached enabled clouds are written by SkyPilot itself
(``sky.global_user_state.set_enabled_clouds``, in a process of its own so the package's SkyPilot state is left
alone) into that folder's ``.sky/state.db``.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from broker.config import load_settings
from broker.runtime import open_launcher
from launchers.skypilot import setup_warnings

REPO = Path(__file__).resolve().parents[2]
K8S = "pip install \"skypilot[kubernetes]=="
NOT_ENABLED = "not enabled in SkyPilot"


def pinned_version() -> str:
    found = re.search(r'"skypilot==([^"]+)"', (REPO / "pyproject.toml").read_text())
    assert found, "pyproject.toml pins skypilot"
    return found.group(1)


@pytest.fixture
def runtime(sky, sky_env, tmp_path, monkeypatch):
    """A ``SKY_RUNTIME_DIR`` of the test's own, with SkyPilot's catalog of ``clouds`` (``runtime(...)``) in it."""
    root = tmp_path / "runtime"
    monkeypatch.setenv("SKY_RUNTIME_DIR", str(root))
    monkeypatch.delenv("SKYPILOT_API_SERVER_ENDPOINT", raising=False)

    def make(*clouds: str) -> Path:
        for cloud in clouds:
            folder = root / ".sky" / "catalogs" / "v8" / cloud
            folder.mkdir(parents=True, exist_ok=True)
            shutil.copy(Path(sky_env["catalog"]) / cloud / "vms.csv", folder / "vms.csv")
        return root
    return make


def sky_checked(root: Path, enabled: list[str]) -> None:
    """What ``sky check`` leaves in SkyPilot's state database under ``root``: these clouds enabled for compute."""
    env = {**os.environ, "SKY_RUNTIME_DIR": str(root), "SKYPILOT_DISABLE_USAGE_COLLECTION": "1"}
    env.pop("SKYPILOT_API_SERVER_ENDPOINT", None)
    code = ("from sky import global_user_state as g\n"
            "from sky.clouds import cloud\n"
            f"g.set_enabled_clouds({enabled!r}, cloud.CloudCapability.COMPUTE, 'default')\n"
            "print(sorted(repr(c) for c in g.get_cached_enabled_clouds(cloud.CloudCapability.COMPUTE, 'default')))\n")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == repr(sorted(enabled))


@pytest.fixture
def no_kubernetes(monkeypatch):
    """``import kubernetes`` fails, as without SkyPilot's Kubernetes extra."""
    monkeypatch.setitem(sys.modules, "kubernetes", None)


@pytest.fixture
def with_kubernetes(tmp_path, monkeypatch):
    """A ``kubernetes`` package importable (never imported: only looked up)."""
    site = tmp_path / "site"
    (site / "kubernetes").mkdir(parents=True)
    (site / "kubernetes" / "__init__.py").write_text("")
    monkeypatch.delitem(sys.modules, "kubernetes", raising=False)
    monkeypatch.syspath_prepend(str(site))


def matching(found: list[str], text: str) -> list[str]:
    return [s for s in found if text in s]


# --- 1. a Kubernetes pool without SkyPilot's Kubernetes support -------------------------------------------------


def test_a_kubernetes_pool_without_kubernetes_support_says_what_to_install(runtime, no_kubernetes):
    runtime("aws", "gcp")
    found = matching(setup_warnings(clouds=("aws", "gcp"), kubernetes_contexts=["lab-gpus"]), K8S)
    assert len(found) == 1
    assert f'pip install "skypilot[kubernetes]=={pinned_version()}"' in found[0]
    assert "lab-gpus" in found[0]


def test_kubernetes_support_installed_or_no_kubernetes_pool_is_not_warned(runtime, with_kubernetes):
    runtime("aws", "gcp")
    assert matching(setup_warnings(clouds=("aws", "gcp"), kubernetes_contexts=["lab-gpus"]), K8S) == []


def test_no_kubernetes_pool_is_not_warned_without_kubernetes_support(runtime, no_kubernetes):
    runtime("aws", "gcp")
    assert setup_warnings(clouds=("aws", "gcp"), kubernetes_contexts=[]) == []


# --- 2. a cloud with no catalog ---------------------------------------------------------------------------------


def test_a_cloud_without_its_catalog_says_to_fetch_it(runtime):
    root = runtime("aws")  # no gcp/vms.csv under SKY_RUNTIME_DIR (HOME's catalog has one: not read)
    found = setup_warnings(clouds=("aws", "gcp"), kubernetes_contexts=[])
    assert len(found) == 1, found
    assert "sky show-gpus --cloud gcp" in found[0]
    assert "refused" in found[0]
    assert str(root / ".sky" / "catalogs" / "v8" / "gcp" / "vms.csv") in found[0]


def test_a_header_only_catalog_is_missing_too(runtime):
    root = runtime("aws", "gcp")
    gcp = root / ".sky" / "catalogs" / "v8" / "gcp" / "vms.csv"
    gcp.write_text(gcp.read_text().splitlines(True)[0])  # a download cut short
    assert matching(setup_warnings(clouds=("aws", "gcp"), kubernetes_contexts=[]), "sky show-gpus --cloud gcp")


def test_every_cloud_with_its_catalog_is_not_warned(runtime):
    runtime("aws", "gcp")
    assert setup_warnings(clouds=("aws", "gcp"), kubernetes_contexts=[]) == []


def test_aws_is_priced_from_the_shipped_snapshot_and_is_not_warned(runtime):
    runtime()  # no SkyPilot catalog at all: AWS has the snapshot, GCP nothing
    found = setup_warnings(clouds=("aws", "gcp"), kubernetes_contexts=[])
    assert [s for s in found if "show-gpus" in s] == [s for s in found if "--cloud gcp" in s]
    assert len(found) == 1


# --- 3. a cloud SkyPilot's last check left disabled -------------------------------------------------------------


def test_a_cloud_sky_check_left_disabled_is_warned(runtime):
    root = runtime("aws", "gcp")
    sky_checked(root, ["AWS"])
    found = matching(setup_warnings(clouds=("aws", "gcp"), kubernetes_contexts=[]), NOT_ENABLED)
    assert len(found) == 1
    assert "gcp" in found[0] and "aws" not in found[0]
    assert "sky check" in found[0]


def test_clouds_sky_check_enabled_are_not_warned(runtime):
    root = runtime("aws", "gcp")
    sky_checked(root, ["AWS", "GCP"])
    assert setup_warnings(clouds=("aws", "gcp"), kubernetes_contexts=[]) == []


def test_no_sky_check_yet_is_not_read_as_nothing_enabled(runtime):
    runtime("aws", "gcp")  # no state.db: nothing known, nothing said
    assert matching(setup_warnings(clouds=("aws", "gcp"), kubernetes_contexts=[]), NOT_ENABLED) == []


def test_an_api_server_elsewhere_is_not_judged_from_the_local_cache(runtime, monkeypatch):
    root = runtime("aws", "gcp")
    sky_checked(root, ["AWS"])
    monkeypatch.setenv("SKYPILOT_API_SERVER_ENDPOINT", "http://127.0.0.1:9")  # never contacted
    assert matching(setup_warnings(clouds=("aws", "gcp"), kubernetes_contexts=[]), NOT_ENABLED) == []


# --- the broker: logged once at start -----------------------------------------------------------------------------


K8S_POOL = """\
clouds: [aws, gcp]
pools:
  - {name: lab, slots: 8, accelerator: A100, price_per_slot_hour: "1.10", kubernetes_context: lab-gpus}
"""


def test_the_broker_logs_each_warning_once_when_it_opens_the_skypilot_launcher(runtime, no_kubernetes, tmp_path,
                                                                               caplog):
    root = runtime("aws")
    sky_checked(root, ["AWS"])
    cfg = tmp_path / "broker.yaml"
    cfg.write_text(K8S_POOL)
    settings = load_settings({"BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_LAUNCHER": "skypilot",
                              "BROKER_ADMIN_TOKEN": "t"}, config_path=cfg)
    with caplog.at_level(logging.WARNING, logger="broker.runtime"):
        open_launcher(settings)
    said = [r.getMessage() for r in caplog.records if r.name == "broker.runtime" and r.levelno == logging.WARNING]
    assert len(said) == 3, said
    assert len(matching(said, K8S)) == 1
    assert len(matching(said, "sky show-gpus --cloud gcp")) == 1
    assert len(matching(said, NOT_ENABLED)) == 1


def test_the_local_launcher_is_not_checked(runtime, tmp_path, caplog):
    runtime()
    settings = load_settings({"BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_LAUNCHER": "local",
                              "BROKER_ADMIN_TOKEN": "t"})
    with caplog.at_level(logging.WARNING, logger="broker.runtime"):
        open_launcher(settings)
    assert [r for r in caplog.records if r.name == "broker.runtime"] == []
