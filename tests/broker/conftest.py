"""Fixtures for the broker's tests: real stores (SQLite file, a redis-server of our own), settings."""

from __future__ import annotations

import os
import time

import pytest
from broker_testing import ADMIN, RedisServer

from broker.config import load_settings


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture
def make_settings(tmp_path):
    """Settings for a broker under ``tmp_path``; keyword arguments become env/config values."""

    def make(store_url: str | None = None, config: str | None = None, **env):
        values = {
            "BROKER_DATA_DIR": str(tmp_path / "data"),
            "BROKER_ADMIN_TOKEN": ADMIN,
            "BROKER_TEAM_TOKENS": '{"vision": "vision-token", "nlp": "nlp-token"}',
        }
        if store_url:
            values["BROKER_STORE_URL"] = store_url
        cfg_path = None
        if config is not None:
            cfg_path = tmp_path / "config.yaml"
            cfg_path.write_text(config)
        values.update(env)
        return load_settings(values, config_path=cfg_path)

    return make


@pytest.fixture(params=["sqlite", "redis"])
def store(request, tmp_path, redis_server):
    """Each store implementation, fresh: one contract, two backends."""
    from broker.store import open_store

    if request.param == "sqlite":
        s = open_store(f"sqlite://{tmp_path / 'store.db'}")
    else:
        from broker.store.redis import RedisStore

        s = RedisStore(redis_server.url, prefix=f"t{os.getpid()}-{time.monotonic_ns()}")
    yield s
    s.close()


@pytest.fixture(scope="session")
def s3_endpoint():
    """A moto S3 server over HTTP (the bucket ``runs``): what s3fs and boto3 talk to as they would to AWS."""
    import boto3
    from broker_testing import free_port
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="test",
                 aws_secret_access_key="test").create_bucket(Bucket="runs")
    yield endpoint
    server.stop()


@pytest.fixture
def packs_in_tmp_path(tmp_path, monkeypatch):
    """``pack`` writes a temporary file its caller removes: here the test's own directory takes them (the
    workdir and file_mounts tests use it for every test: ``pytestmark``)."""
    import tempfile

    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
