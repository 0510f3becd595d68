"""An S3 store that goes away for a while — its server restarting, a network blip — mid-save: moto's S3 server on a
loopback port, stopped (its socket and every connection closed: connections are refused) and started again on the
same port. A save rides it out for about a minute (``UNREACHABLE_RIDE_OUT_S`` a try of each call, 3 tries), as one
to GCS does through gcsfs's own retries; before, it gave up after some 10 s of connection refused and the save
failed. A store that stays away still fails the save, in bounded time, saying so; and one that comes back without
the files written before it went is not committed."""

from __future__ import annotations

import logging
import threading
import time
import uuid

import boto3
import pytest
import torch
from testports import free_port

from checkpoint import Checkpointer, CheckpointError, TransferOptions, layout
from checkpoint.storage import UNREACHABLE_BACKOFF_MAX_S, UNREACHABLE_RIDE_OUT_S, open_storage, unreachable_wait

from loopback import cloud_env
from fakes import PassThrough


class RestartingMoto:
    """moto's S3 server on one loopback port, that can be stopped and started again on it. Its data is moto's, in
    this process: it outlasts a restart, as S3's outlasts a blip. ``ThreadedMotoServer.stop`` leaves the listening
    socket open (connections queue and hang) and HTTP/1.1 keep-alive connections served: not a store that is down."""

    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._server = None
        self._thread: threading.Thread | None = None
        self._open: set = set()

    def start(self) -> "RestartingMoto":
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
        from werkzeug.serving import ThreadedWSGIServer

        held = self._open

        class Server(ThreadedWSGIServer):
            def process_request(self, request, client_address):
                held.add(request)
                super().process_request(request, client_address)

        self._server = Server("127.0.0.1", self.port, DomainDispatcherApplication(create_backend_app),
                              handler=MotoRequestHandler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        import socket

        self._server.shutdown()
        self._server.server_close()
        for conn in list(self._open):
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()
        self._open.clear()
        self._thread.join()

    def restart_after(self, seconds: float) -> threading.Thread:
        """Stop now, start again on the same port ``seconds`` later (on a thread: the save goes on meanwhile)."""
        self.stop()
        again = threading.Thread(target=lambda: (time.sleep(seconds), self.start()), daemon=True)
        again.start()
        return again


class OutageAt(PassThrough):
    """The real store, whose server goes away right after ``trigger(path)`` is written, once, for ``outage_s``;
    ``lose`` first deletes those of the step's files already written (a server restarted without its data)."""

    def __init__(self, uri: str, server: RestartingMoto, outage_s: float, trigger, lose: bool = False):
        super().__init__(open_storage(uri))
        self._other = open_storage(uri, transfer=TransferOptions(retries=0))
        self._server, self._outage_s, self._trigger, self._lose = server, outage_s, trigger, lose
        self._lock = threading.Lock()
        self.went_at: float | None = None
        self.back: threading.Thread | None = None

    def write(self, path, data):
        self._inner.write(path, data)
        with self._lock:
            if self.went_at is None and self._trigger(path):
                if self._lose:
                    step_dir = path.split("/", 1)[0]
                    self._other.delete([p for p in self._other.list() if p.startswith(step_dir + "/") and p != path])
                self.went_at = time.monotonic()
                self.back = self._server.restart_after(self._outage_s)


@pytest.fixture
def restarting_s3(monkeypatch):
    server = RestartingMoto().start()
    bucket = f"outage-{uuid.uuid4().hex[:8]}"
    for k, v in cloud_env(s3=server.endpoint).items():
        monkeypatch.setenv(k, v)
    boto3.client("s3", endpoint_url=server.endpoint).create_bucket(Bucket=bucket)
    yield server, f"s3://{bucket}/run"
    try:
        server.stop()
    except Exception:  # noqa: BLE001 - stopped already, or its restart still pending
        pass


def _state(step: int) -> dict:
    return {"model": torch.arange(4096, dtype=torch.float32) * step, "extra": torch.full((8,), float(step)),
            "step": step}


def _data_file_of(step: int):
    return lambda path: (path.startswith(f"step-{step:012d}-") and path.endswith(".safetensors"))


def test_an_s3_server_restarting_mid_save_is_ridden_out_and_the_save_commits_and_restores(restarting_s3, caplog):
    """The server goes away right after the save's first file is written, for 12 s — longer than the library's 3
    tries of botocore's 3 tries took at most (some 10 s) — and comes back with its data: the other files,
    the manifest, the listing and the marker wait for it, and the checkpoint is committed whole."""
    server, uri = restarting_s3
    store = OutageAt(uri, server, 12.0, _data_file_of(1))
    ckpt = Checkpointer(storage=store, env={}, handle_sigterm=False, every_steps=1)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="checkpoint"):
        ckpt.save(1, _state(1), wait=True)
    assert store.went_at is not None, "the outage never started"
    assert time.monotonic() - store.went_at >= 11.5  # the commit came after the store was back
    assert time.monotonic() - started < 28
    ckpt.close()
    said = [r.getMessage() for r in caplog.records if r.name == "checkpoint"]
    assert any("got no answer" in m and "trying again for up to" in m for m in said), said

    entries = layout.scan(open_storage(uri).list())
    assert [(e.id.step, e.committed) for e in entries] == [(1, True)]
    restored = Checkpointer(uri, env={}, handle_sigterm=False).restore()
    assert restored.step == 1 and torch.equal(restored["model"], _state(1)["model"])


def test_an_s3_server_back_without_the_files_written_before_it_went_is_not_committed(restarting_s3):
    """Retries never commit a torn checkpoint: the server loses step 2's data files and goes away as its manifest is
    written; the manifest's write rides the outage out, and the listing before the marker finds the files gone."""
    server, uri = restarting_s3
    store = OutageAt(uri, server, 3.0, lambda p: p.startswith("step-000000000002-") and p.endswith(layout.MANIFEST),
                     lose=True)
    ckpt = Checkpointer(storage=store, env={}, handle_sigterm=False, every_steps=1)
    ckpt.save(1, _state(1), wait=True)
    with pytest.raises(CheckpointError, match=r"step 2.*not committed.*missing \(00-model.safetensors"):
        ckpt.save(2, _state(2), wait=True)
    assert store.went_at is not None
    ckpt.close()
    entries = {e.id.step: e for e in layout.scan(open_storage(uri).list())}
    assert entries[1].committed and (2 not in entries or not entries[2].committed)  # (its debris may be gone)
    restored = Checkpointer(uri, env={}, handle_sigterm=False).restore()
    assert restored.step == 1


def test_an_s3_store_that_stays_away_fails_the_save_in_bounded_time_saying_so(monkeypatch):
    """Nothing listens on the port: with ``retries=1`` the save rides the refusals out for ``UNREACHABLE_RIDE_OUT_S``
    (20 s), then fails, naming the step, the file and how long the store could not be reached."""
    for k, v in cloud_env(s3=f"http://127.0.0.1:{free_port()}").items():
        monkeypatch.setenv(k, v)
    ckpt = Checkpointer("s3://gone/run", env={}, handle_sigterm=False, every_steps=1,
                        transfer=TransferOptions(retries=1))
    started = time.monotonic()
    with pytest.raises(CheckpointError) as raised:
        ckpt.save(1, _state(1), wait=True)
    took = time.monotonic() - started
    assert UNREACHABLE_RIDE_OUT_S - 1 <= took < UNREACHABLE_RIDE_OUT_S + 8, took
    said = str(raised.value)
    assert "step 1" in said and "s3://gone/run/step-000000000001-" in said, said
    assert "Could not connect to the endpoint URL" in said, said
    assert "could not be reached for 2" in said and "over 1 try" in said and "is the endpoint right" in said, said
    ckpt.close()


def test_retries_0_does_not_ride_an_s3_outage_out(monkeypatch):
    """``retries=0``: the request fails after botocore's own 3 tries (about 3 s at most), as a script that would
    rather fail fast asks."""
    for k, v in cloud_env(s3=f"http://127.0.0.1:{free_port()}").items():
        monkeypatch.setenv(k, v)
    storage = open_storage("s3://gone/run", transfer=TransferOptions(retries=0))
    started = time.monotonic()
    with pytest.raises(OSError, match="could not be reached"):
        storage.write("x", b"1")
    assert time.monotonic() - started < 6


@pytest.mark.parametrize("since, now, attempts, wait", [
    pytest.param(0.0, 0.5, 1, 1.0, id="first refusal → 1 s (botocore's own handler answers first while it has tries)"),
    pytest.param(0.0, 3.0, 3, 2.0, id="after botocore's 3 tries → 2 s"),
    pytest.param(0.0, 5.0, 4, 4.0, id="then 4 s"),
    pytest.param(0.0, 9.0, 5, UNREACHABLE_BACKOFF_MAX_S, id="then the cap, every time"),
    pytest.param(0.0, 12.0, 400, UNREACHABLE_BACKOFF_MAX_S, id="a request tried 400 times still waits the cap"),
    pytest.param(0.0, UNREACHABLE_RIDE_OUT_S - 0.5, 9, 0.5, id="never waits past the end of the ride-out"),
    pytest.param(0.0, UNREACHABLE_RIDE_OUT_S, 9, None, id="at its end → the request fails (nothing retries forever)"),
    pytest.param(100.0, 100.0 + UNREACHABLE_RIDE_OUT_S + 3, 2, None, id="counted from the first refusal"),
])
def test_how_long_an_s3_request_waits_for_a_store_it_cannot_reach(since, now, attempts, wait):
    assert unreachable_wait(since, now, attempts) == wait
