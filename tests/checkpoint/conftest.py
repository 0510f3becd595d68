"""Real stores on loopback for the checkpoint suite: moto's S3 server, the GCS emulator,
a temporary directory and fsspec's memory store. Servers start once per session.

``store_uri`` is parametrized over all four, so one contract suite runs against each. The
cloud variables are set per test (monkeypatch), and passed explicitly to subprocesses, so
other test packages never see them.
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import pytest
from testports import free_port
from loopback import cloud_env  # noqa: F401  (kept here for the fixtures below; tests import it from loopback)

# gcsfs picks its experimental filesystem class at import time; the emulator needs the plain one.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
BUCKET = "ckpt-tests"
STORES = ["file", "memory", "s3", "gcs"]


@pytest.fixture(scope="session")
def s3_endpoint():
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    import boto3

    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="test",
                 aws_secret_access_key="test").create_bucket(Bucket=BUCKET)
    yield endpoint
    server.stop()


@pytest.fixture(scope="session")
def gcs_endpoint():
    from gcp_storage_emulator.server import create_server

    port = free_port()
    server = create_server("127.0.0.1", port, in_memory=True, default_bucket=BUCKET)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture
def make_uri(request, tmp_path, monkeypatch):
    """``make_uri(kind)`` → a fresh, unique base URI on that store, env pointed at it."""

    def make(kind: str) -> str:
        unique = f"{request.node.name[:40]}-{uuid.uuid4().hex[:8]}".replace("[", "-").replace("]", "")
        if kind == "file":
            return str(tmp_path / "ckpt" / unique)
        if kind == "memory":
            return f"memory://ckpt-tests/{unique}"
        if kind == "s3":
            endpoint = request.getfixturevalue("s3_endpoint")
            for k, v in cloud_env(s3=endpoint).items():
                monkeypatch.setenv(k, v)
            return f"s3://{BUCKET}/{unique}"
        if kind == "gcs":
            endpoint = request.getfixturevalue("gcs_endpoint")
            for k, v in cloud_env(gcs=endpoint).items():
                monkeypatch.setenv(k, v)
            return f"gs://{BUCKET}/{unique}"
        raise ValueError(kind)

    return make


@pytest.fixture(params=STORES)
def store_uri(request, make_uri) -> str:
    """A unique base URI on each store in turn."""
    return make_uri(request.param)


@pytest.fixture
def subprocess_env(request):
    """``subprocess_env(uri, **extra)`` → an environment for a child writing to ``uri``."""

    def make(uri: str, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
        env["PYTHONUNBUFFERED"] = "1"
        s3 = request.getfixturevalue("s3_endpoint") if uri.startswith("s3://") else None
        gcs = request.getfixturevalue("gcs_endpoint") if uri.startswith("gs://") else None
        env |= cloud_env(s3, gcs)
        env["BROKER_CHECKPOINT_URI"] = uri
        env |= extra
        return env

    return make
