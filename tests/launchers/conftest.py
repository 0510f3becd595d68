"""SkyPilot, in process and offline: a temporary HOME, the catalog subset (and a GCP catalog made for the
test), AWS served by moto.

Everything here is real SkyPilot 0.14.1 code running against a real catalog and a real (moto)
AWS API on loopback. The one thing faked is the answer to "which clouds are enabled", the way
SkyPilot's own test suite fakes it, since ``sky check`` would need real credentials.

``HOME`` and ``SKY_RUNTIME_DIR`` must point at the temporary folder before ``sky`` is imported;
the environment is set for this package only and restored when it ends. Proxies point at a
closed loopback port, so anything that tries to leave the machine fails instead of leaking.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from skyports import clear_server_caches, sky_api_port, sky_queue_port
from testports import free_port

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CATALOG = REPO.parent / "shared" / "data" / "skypilot-catalog" / "v8"
FIXTURES = HERE / "fixtures"
BUCKET = "broker-ckpt"


def _write_catalog(home: Path) -> Path:
    catalog = home / ".sky" / "catalogs" / "v8"
    shutil.copytree(CATALOG, catalog)
    with open(catalog / "aws" / "images.csv", "a") as images:
        images.writelines((FIXTURES / "made_for_test_images_cuda13.csv").read_text().splitlines(True)[1:])
    shutil.copy(FIXTURES / "made_for_test_instance_quota_mapping.csv", catalog / "aws" / "instance_quota_mapping.csv")
    # GCP: the shared data has only a schema sample (no GPU rows), so the whole GCP catalog is made for the test
    (catalog / "gcp" / "vms.sample.csv").unlink()
    for name in ("vms", "images", "accelerator_quota_mapping"):
        shutil.copy(FIXTURES / f"made_for_test_gcp_{name}.csv", catalog / "gcp" / f"{name}.csv")
    return catalog


def _amis(catalog: Path, path: Path) -> None:
    """Every image of the catalog, in the form ``MOTO_AMIS_PATH`` expects."""
    rows = list(csv.DictReader((catalog / "aws" / "images.csv").open()))
    path.write_text(json.dumps([
        {"ami_id": r["ImageId"], "name": r["Tag"], "description": "catalog image (test)", "owner_id": "123456789012",
         "public": True, "virtualization_type": "hvm", "architecture": "arm64" if "arm64" in r["Tag"] else "x86_64",
         "state": "available", "platform": None, "hypervisor": "xen", "root_device_name": "/dev/sda1",
         "root_device_type": "ebs", "sriov": "simple"}
        for r in rows
    ]))


@pytest.fixture(scope="package")
def moto_endpoint(tmp_path_factory):
    """A moto server (S3, STS, EC2) on loopback, in its own process, serving the catalog's images."""
    home = tmp_path_factory.mktemp("moto")
    catalog = _write_catalog(home)
    _amis(catalog, home / "amis.json")
    port = free_port()
    env = {**os.environ, "MOTO_AMIS_PATH": str(home / "amis.json")}
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    else:
        server.kill()
        raise RuntimeError("moto server did not start")
    yield f"http://127.0.0.1:{port}"
    server.terminate()
    server.wait(timeout=10)


@pytest.fixture(scope="package")
def sky_env(tmp_path_factory, moto_endpoint):
    """Environment for ``sky``: a temporary HOME with the catalog, AWS pointed at moto, no usage reports."""
    home = tmp_path_factory.mktemp("skyhome")
    catalog = _write_catalog(home)
    dead = f"http://127.0.0.1:{free_port()}"
    env = {
        "HOME": str(home), "SKY_RUNTIME_DIR": str(home), "SKYPILOT_DISABLE_USAGE_COLLECTION": "1",
        # An SDK call with no endpoint set starts a local API server: on a port of its own, never
        # the default 46580 where a developer's real server may be listening.
        "SKYPILOT_API_SERVER_LOCAL_PORT": str(sky_api_port()),
        "AWS_ENDPOINT_URL": moto_endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true",
        "HTTP_PROXY": dead, "HTTPS_PROXY": dead, "http_proxy": dead, "https_proxy": dead,
        "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
    }
    _SKY_ENV["env"] = env
    _apply_sky_env()
    yield {"home": home, "catalog": catalog, "endpoint": moto_endpoint, "env": env}
    # ... and stop that server (it outlives the test run otherwise: its own session, six processes).
    _stop_local_server(env)
    _undo_sky_env()
    _SKY_ENV["env"] = None


def _stop_local_server(env: dict) -> None:
    sky_cli = Path(sys.executable).with_name("sky")
    subprocess.run([str(sky_cli), "api", "stop"], env={**os.environ, **env}, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=120, check=False)


# tests/launchers has no __init__.py (it would shadow the project's launchers package), so pytest holds a
# package-scoped fixture to the end of the session: sky_env's HOME, proxies and AWS settings stayed set for
# every test run after this folder's (a broker subprocess started by tests/broker then read this test catalog
# from HOME and placed jobs on other zones). The environment is applied while this folder's tests run only.
_SKY_ENV: dict = {"env": None, "patch": None}


def _forget_price_tables() -> None:
    """The broker keeps the price tables it read in the process (and looks at the catalog files again only once a
    minute): read under the real HOME by another folder's test, they would stand for this folder's catalog, whose
    AWS zone names are the moto account's, for a minute (or the other way round)."""
    from broker import offers

    with offers._table_lock:
        offers._tables.clear()
        offers._checked.clear()
        offers._joined.clear()


def _apply_sky_env() -> None:
    if _SKY_ENV["env"] is None or _SKY_ENV["patch"] is not None:
        return
    _forget_price_tables()
    mp = pytest.MonkeyPatch()
    for key, value in _SKY_ENV["env"].items():
        mp.setenv(key, value)
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "SKYPILOT_API_SERVER_ENDPOINT"):
        mp.delenv(key, raising=False)
    _SKY_ENV["patch"] = mp


def _undo_sky_env() -> None:
    if _SKY_ENV["patch"] is not None:
        _SKY_ENV["patch"].undo()
        _SKY_ENV["patch"] = None
        _forget_price_tables()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Set sky_env's environment again for a test of this folder run after tests elsewhere took it away:
    before any fixture of the test is set up, since a module-scoped one (the API server of
    test_skypilot_server.py) copies the environment into a process of its own. Under pytest-xdist a
    worker runs this folder's files between other folders' files, so this happens mid-session."""
    _apply_sky_env()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    """Take sky_env's environment away once this folder's tests are done in this worker: last, after the test's
    fixtures are torn down. Run before them, a test's own ``monkeypatch.setenv("SKY_RUNTIME_DIR", …)`` was undone
    after it, putting back sky_env's value, which then stayed for every test of other folders the worker ran next
    (the price table read from there, not their HOME's catalog)."""
    if nextitem is None or HERE not in Path(nextitem.path).resolve().parents:
        _undo_sky_env()


@pytest.fixture(scope="package")
def sky(sky_env):
    """The ``sky`` package, imported under :func:`sky_env`, with AWS as the enabled cloud."""
    if "sky" in sys.modules:
        pytest.fail("sky was imported before its HOME was set; only launchers/skypilot*.py may import it")
    import sky
    import sky.check
    from sky import clouds

    from sky.server.requests.queues import mp_queue

    port = int(os.environ["SKYPILOT_API_SERVER_LOCAL_PORT"])
    assert mp_queue.get_queue_manager_port() == sky_queue_port(port), "SkyPilot moved its queue port: update sky_queue_port"
    mp = pytest.MonkeyPatch()
    mp.setattr(sky.check, "get_cached_enabled_clouds_or_refresh", lambda *_a, **_k: [clouds.AWS()])
    yield sky
    mp.undo()


LOCAL_SERVER_TRIES = 3


@pytest.fixture(scope="package")
def local_sky_server(sky, sky_env):
    """The API server the SDK starts on this host by itself when no endpoint is set (a broker run with no
    ``SKYPILOT_API_SERVER_ENDPOINT`` has one), started before the test's first SDK call. A start can fail
    for a reason of this shared host rather than SkyPilot's (its queue-manager port lies in the ephemeral
    range, where a client connection of a neighbour may hold it; a start under load): it is tried again on a
    fresh port pair, and a start that fails for good shows the server's log."""
    from sky.server import common

    log = Path(sky_env["home"]) / ".sky" / "api_server" / "server.log"
    failures = []
    for _ in range(LOCAL_SERVER_TRIES):
        clear_server_caches()
        try:
            common.check_server_healthy_or_start_fn()
            return common.get_server_url()
        except RuntimeError as exc:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
            failures.append(f"port {sky_env['env']['SKYPILOT_API_SERVER_LOCAL_PORT']}: {exc}\n{tail}")
            _stop_local_server(sky_env["env"])
            port = str(sky_api_port())
            sky_env["env"]["SKYPILOT_API_SERVER_LOCAL_PORT"] = port  # the same dict _apply_sky_env sets
            _SKY_ENV["patch"].setenv("SKYPILOT_API_SERVER_LOCAL_PORT", port)
    clear_server_caches()
    pytest.fail("SkyPilot's local API server did not start:\n" + "\n---\n".join(failures))


@pytest.fixture(scope="package")
def bucket(sky_env):
    """The checkpoint bucket, made in moto's S3."""
    import boto3

    boto3.client("s3", endpoint_url=sky_env["endpoint"], region_name="us-east-1").create_bucket(Bucket=BUCKET)
    return BUCKET


@pytest.fixture
def gcp(sky):
    """GCP enabled beside AWS, as ``sky check`` would find it with GCP credentials. Its catalog is on disk
    (:func:`_write_catalog`) and the dry run stops before GCP's API; the one call to the cloud on the way,
    the quota check (``gcloud compute regions describe``), answers "available", as SkyPilot itself
    assumes when it cannot ask."""
    from sky import clouds

    mp = pytest.MonkeyPatch()
    mp.setattr(sky.check, "get_cached_enabled_clouds_or_refresh", lambda *_a, **_k: [clouds.AWS(), clouds.GCP()])
    mp.setattr(clouds.GCP, "check_quota_available", classmethod(lambda cls, resources: True))
    yield clouds.GCP()
    mp.undo()
