"""A resume that falls back past the checkpoint the broker named tells the broker which one it restored.

QA: the broker named step 55 (``BROKER_RESUME_FROM``), which was damaged; restore skipped it and restored step 40,
and the broker — told only of a newer checkpoint of the job's own — kept naming step 55 (damaged, later deleted) as
the job's last checkpoint, "resuming from step 55". Now the checkpoint actually restored is reported through the
library's report path (``BROKER_PROGRESS_URL``). Tested at the library boundary, against a loopback server that
records what it is sent (the broker's own handling of such a report, a lower step recorded and noted as
``resume_not_restored``: ``tests/broker/test_qa_dec7_resume_not_restored.py``).
"""

from __future__ import annotations

import json
import queue
import threading
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from checkpoint import Checkpointer, layout
from checkpoint.storage import open_storage


@pytest.fixture
def broker():
    """A loopback HTTP server that records each POST's JSON body."""
    received: queue.Queue = queue.Queue()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            received.put(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/v1/jobs/j-1/progress", received
    server.shutdown()


def _saved(base: str, *steps: int) -> dict[int, str]:
    uris = {}
    with Checkpointer(base, env={}, handle_sigterm=False, every_steps=1, keep_last=None) as ckpt:
        for step in steps:
            ckpt.save(step, {"w": np.full(4, float(step))}, wait=True)
            uris[step] = ckpt.last_committed
    return uris


def _damage(base: str, step: int) -> None:
    storage = open_storage(base)
    entry = next(e for e in layout.scan(storage.list()) if e.id.step == step)
    path = layout.path(entry.id, next(f for f in sorted(entry.files) if f.endswith(".safetensors")))
    data = bytearray(storage.read(path))
    data[-1] ^= 0xFF
    storage.write(path, bytes(data))


def _restore(base: str, url: str, resume_from: str):
    env = {"BROKER_RESUME_FROM": resume_from, "BROKER_PROGRESS_URL": url, "BROKER_JOB_TOKEN": "tok"}
    w = np.zeros(4)
    with Checkpointer(base, env=env, handle_sigterm=False) as ckpt, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        restored = ckpt.restore(into={"w": w})
    return restored, w


def test_a_damaged_named_checkpoint_falls_back_and_the_one_restored_is_reported(tmp_path, broker):
    url, received = broker
    base = str(tmp_path / "run")
    uris = _saved(base, 40, 55)
    _damage(base, 55)
    restored, w = _restore(base, url, uris[55])
    assert restored.step == 40 and w.tolist() == [40.0] * 4
    assert received.get(timeout=5) == {"checkpoint": {"step": 40, "uri": uris[40]}}


def test_a_named_checkpoint_that_is_gone_reports_the_one_restored_instead(tmp_path, broker):
    url, received = broker
    base = str(tmp_path / "run")
    uris = _saved(base, 40)
    restored, _ = _restore(base, url, f"{base}/step-000000000055-1796416711111")
    assert restored.step == 40
    assert received.get(timeout=5) == {"checkpoint": {"step": 40, "uri": uris[40]}}


def test_restoring_the_named_checkpoint_itself_sends_nothing(tmp_path, broker):
    url, received = broker
    base = str(tmp_path / "run")
    uris = _saved(base, 40, 55)
    restored, _ = _restore(base, url, uris[55])
    assert restored.step == 55
    with pytest.raises(queue.Empty):
        received.get(timeout=1)
