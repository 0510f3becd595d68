"""Stores that fail: an S3 endpoint that never answers, a disk that cannot take a file, an S3 delete that refuses
some keys. Run against moto's S3 server, the GCS emulator and local files (conftest)."""

from __future__ import annotations

import errno
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from checkpoint import TransferOptions, commit, layout
from checkpoint.storage import open_storage

from conftest import PYTHON, REPO

CID = "step-000000000001-1733011200123"


@pytest.fixture
def silent_endpoint(monkeypatch):
    """An S3 endpoint on loopback that takes every connection and never answers (a hung store, a black hole)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.getsockname()[1]}"
    for k, v in {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                 "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}.items():
        monkeypatch.setenv(k, v)
    yield endpoint
    server.close()
    for conn in held:
        conn.close()


def test_s3_requests_have_bounded_timeouts_and_a_users_botocore_config_is_merged_not_a_type_error(silent_endpoint):
    """botocore waits 60 s a try for an answer (and retries, and the library retried that): a restore from an endpoint
    that took the connection and never answered hung silently for many minutes. And a user's own ``Config`` in
    ``client_kwargs`` was a TypeError (``config`` passed twice)."""
    from botocore.config import Config

    storage = open_storage("s3://bucket/run")
    config = storage._client.meta.config
    assert (config.connect_timeout, config.read_timeout) == (10, 20)  # a wait for a reply, not for a whole object

    mine = Config(connect_timeout=2, read_timeout=1, retries={"mode": "standard", "total_max_attempts": 2})
    storage = open_storage("s3://bucket/run", storage_options={"client_kwargs": {"config": mine}},
                           transfer=TransferOptions(retries=2, retry_backoff_s=0))
    config = storage._client.meta.config
    assert (config.connect_timeout, config.read_timeout) == (2, 1)  # the user's settings win
    assert config.max_pool_connections >= 10  # ours fill in the rest

    with pytest.raises(TypeError, match="must be a botocore.config.Config"):
        open_storage("s3://bucket/run", storage_options={"client_kwargs": {"config": {"read_timeout": 1}}})


def test_a_silent_s3_endpoint_fails_in_seconds_with_its_retries_logged(silent_endpoint, caplog):
    """Each try that got no answer, and each of the library's retries, is a warning while it lasts: a stuck store is
    seen in the log, not only when the last retry gives up."""
    from botocore.config import Config

    mine = Config(connect_timeout=1, read_timeout=1, retries={"mode": "standard", "total_max_attempts": 2})
    storage = open_storage("s3://bucket/run", storage_options={"client_kwargs": {"config": mine}},
                           transfer=TransferOptions(retries=2, retry_backoff_s=0))
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="checkpoint"), pytest.raises(OSError, match="Read timeout"):
        storage.list()
    assert time.monotonic() - started < 20
    said = [r.getMessage() for r in caplog.records if r.name == "checkpoint"]
    assert any("s3://bucket/run: S3 ListObjectsV2 got no answer on try 1: ReadTimeoutError" in m for m in said), said
    assert any("s3://bucket/run: ReadTimeoutError" in m and "trying again in 0.0 s (try 2 of 2)" in m
               for m in said), said


def test_gcs_requests_have_bounded_socket_timeouts_but_no_limit_on_a_whole_object(make_uri):
    """gcsfs's aiohttp session allowed 300 s a request in all (a large part going up slowly was cut at 300 s; a
    request that never got an answer waited 300 s, then again at each retry), saying nothing."""
    storage = open_storage(make_uri("gcs"))
    timeout = storage._fs.requests_timeout
    assert (timeout.total, timeout.sock_connect, timeout.sock_read) == (None, 10, 20)
    storage.write("x", b"1")  # the emulator still answers through them
    assert storage.read("x") == b"1"
    mine = open_storage(make_uri("gcs"), storage_options={"requests_timeout": 5})._fs.requests_timeout
    assert mine == 5


@pytest.mark.parametrize("code", ["ENOSPC", "EDQUOT", "EFBIG", "EROFS"])
def test_a_disk_error_no_retry_can_pass_is_raised_at_once_naming_the_file(tmp_path, code, caplog):
    """``f.write`` raises ``[Errno 28] No space left on device`` with no file named, and each was retried 3 times
    with backoff (0.2 s, 0.8 s) though a full disk does not empty itself in a second."""
    storage = open_storage(tmp_path / "run", transfer=TransferOptions(retries=3, retry_backoff_s=0.01))
    tries = []

    def refuse(full, data):
        tries.append(full)
        raise OSError(getattr(errno, code), os.strerror(getattr(errno, code)))

    storage._write_local = refuse
    with pytest.raises(OSError) as raised:
        storage.write(f"{CID}/00-w.safetensors", b"weights")
    assert len(tries) == 1
    assert raised.value.errno == getattr(errno, code)
    assert raised.value.filename == str(tmp_path / "run" / CID / "00-w.safetensors")
    assert str(tmp_path / "run" / CID / "00-w.safetensors") in str(raised.value)


def test_a_transient_disk_error_is_still_retried_with_a_warning_and_named(tmp_path, caplog):
    storage = open_storage(tmp_path / "run", transfer=TransferOptions(retries=3, retry_backoff_s=0))
    real, tries = storage._write_local, []

    def fail_twice(full, data):
        tries.append(full)
        if len(tries) < 3:
            raise OSError(errno.EIO, "Input/output error")
        real(full, data)

    storage._write_local = fail_twice
    with caplog.at_level(logging.WARNING, logger="checkpoint"):
        storage.write(f"{CID}/00-w.safetensors", b"weights")
    assert len(tries) == 3 and storage.read(f"{CID}/00-w.safetensors") == b"weights"
    said = [r.getMessage() for r in caplog.records if "trying again" in r.getMessage()]
    assert len(said) == 2 and f"{CID}/00-w.safetensors: OSError: [Errno 5] Input/output error" in said[0], said

    storage._write_local = lambda full, data: (_ for _ in ()).throw(OSError(errno.EIO, "Input/output error"))
    with pytest.raises(OSError, match=r"\[Errno 5\] Input/output error: '.*00-w.safetensors'"):
        storage.write(f"{CID}/00-w.safetensors", b"weights")


def test_a_file_over_the_processes_size_limit_names_it_and_is_not_retried(tmp_path):
    """The auditor's case, for real: ``ulimit -f`` under the file's size. Python ignores SIGXFSZ, so the write fails
    with EFBIG; the error named no file and came only after 3 tries and their backoff."""
    base = tmp_path / "run"
    script = f"""
import json, resource, sys, time
from checkpoint import TransferOptions
from checkpoint.storage import open_storage
resource.setrlimit(resource.RLIMIT_FSIZE, (2**20, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
storage = open_storage({str(base)!r}, transfer=TransferOptions(retries=3, retry_backoff_s=1.0))
started = time.monotonic()
try:
    storage.write("{CID}/00-w.safetensors", [bytes(3 * 2**20)])
except OSError as e:
    print(json.dumps({{"errno": e.errno, "filename": e.filename, "message": str(e), "s": time.monotonic() - started}}))
"""
    out = subprocess.run([PYTHON, "-c", script], capture_output=True, text=True, timeout=120, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["errno"] == errno.EFBIG
    assert result["filename"] == str(base / CID / "00-w.safetensors"), result
    assert result["s"] < 1.0, result  # no retry (the first backoff alone is 1 s)
    assert os.listdir(base / CID) == []  # the temporary file is gone


def test_an_s3_delete_that_refuses_a_key_raises_and_leaves_a_committed_checkpoint_whole(make_uri):
    """DeleteObjects answers 200 and lists the keys it could not delete (``Errors``), which were ignored: when
    ``COMMITTED`` was one of them while the data beside it went, a committed but partial checkpoint was left, and
    every restore skipped it as damaged. The marker goes first in a request of its own, and its error stops the
    deletion there."""
    uri = make_uri("s3")
    storage = open_storage(uri, transfer=TransferOptions(retries=1))
    for name in ("00-w.safetensors", "state.json", "manifest.json", "COMMITTED"):
        storage.write(f"{CID}/{name}", b"x")
    refused = []

    def keep_the_marker(params, **_):  # botocore's hook before the request is built: the marker is not deleted...
        for o in params["Delete"]["Objects"]:
            if o["Key"].endswith("/COMMITTED"):
                refused.append(o["Key"])
                o["Key"] += "-absent"  # (a request needs a key)

    def report_it(parsed, **_):  # ...and is reported as S3 reports a key it could not delete
        parsed.setdefault("Errors", []).extend(
            {"Key": k, "Code": "AccessDenied", "Message": "Access Denied"} for k in refused)
        refused.clear()

    storage._client.meta.events.register("provide-client-params.s3.DeleteObjects", keep_the_marker)
    storage._client.meta.events.register("after-call.s3.DeleteObjects", report_it)
    entries = layout.scan(storage.list())
    with pytest.raises(OSError, match=f"did not delete 1 of 1 object.*{CID}/COMMITTED: AccessDenied"):
        commit.delete_entries(storage, entries)
    assert storage.list() == [f"{CID}/{n}" for n in ("00-w.safetensors", "COMMITTED", "manifest.json", "state.json")]

    storage._client.meta.events.unregister("provide-client-params.s3.DeleteObjects", keep_the_marker)
    commit.delete_entries(storage, entries)
    assert storage.list() == []
    storage.delete([f"{CID}/COMMITTED"])  # a key already gone is not an error
