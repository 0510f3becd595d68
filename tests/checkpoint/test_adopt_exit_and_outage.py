"""A script dead of a save's error, then the exit flush: it spent minutes on a store known to fail, said nothing of the
queued step it lost, and a SIGTERM then said "saving at the next step" and turned the crash's status 1 into 143. The
store-outage wording on GCS, the bound on S3's multipart abort, and the preemption lines that lose a save."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from testports import free_port

from checkpoint.storage import TransferOptions, open_storage

from loopback import cloud_env

TESTS = str(Path(__file__).resolve().parent)

# a store whose step 20 fails once the script has queued step 30 behind it, and whose step 30 hangs (an unreachable
# store's retries); the script then dies of step 20's error, raised by due()
DYING = """
import os, sys, threading, time
sys.path.insert(0, {tests!r})
from fakes import PassThrough, memory_store
from checkpoint import Checkpointer
import numpy as np

release, started = threading.Event(), threading.Event()

class Failing(PassThrough):
    def write(self, path, data):
        if path.startswith("step-000000000020-"):
            started.set()
            release.wait()
            raise OSError("Could not connect to the endpoint URL")
        if path.startswith("step-000000000030-"):
            time.sleep(600)
        self._inner.write(path, data)

ckpt = Checkpointer(storage=Failing(memory_store()), env={{}}, every_steps=10, grace_s={grace})
ckpt.save(10, {{"w": np.zeros(4)}}, wait=True)
ckpt.save(20, {{"w": np.ones(4)}})
started.wait()  # uploading: step 30 waits behind it, not in its place
ckpt.save(30, {{"w": np.ones(4) * 3}})
release.set()
while not ckpt._runner._error:
    time.sleep(0.01)
print("dying", flush=True)
ckpt.due(31)
"""


def _run_dying(grace: float = 30.0, sigterm_after_death: bool = False):
    script = DYING.format(tests=TESTS, grace=grace)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    started = time.monotonic()
    try:
        if sigterm_after_death:
            assert proc.stdout.readline().strip() == "dying"
            time.sleep(1.0)  # the traceback is out, the exit flush waits for step 30
            proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out, err, time.monotonic() - started


def test_a_script_dead_of_a_save_error_does_not_wait_minutes_and_says_which_queued_step_was_lost():
    code, _, err, took = _run_dying()
    assert code == 1, err[-3000:]
    assert took < 30, (took, err[-3000:])
    assert "CheckpointError: background checkpoint save failed: the checkpoint of step 20" in err, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("checkpoint upload failed at exit: The last checkpoint (step 30) was not saved to "), last
    assert "the script died of the failed save of step 20" in last, last
    assert "a resume uses the checkpoint of step 10 (memory://" in last, last


def test_a_sigterm_during_the_exit_flush_of_a_dead_script_saves_nothing_and_keeps_status_1():
    code, _, err, _ = _run_dying(grace=1.5, sigterm_after_death=True)
    assert "saving at the next step" not in err, err[-3000:]
    assert "after the script ended: nothing more is saved" in err, err[-3000:]
    assert code == 1, (code, err[-3000:])


PREEMPTED = """
import os, signal, sys, time
import numpy as np
from checkpoint import Checkpointer
ckpt = Checkpointer({base!r}, env={{}}, every_steps=10, grace_s=1.5)
ckpt.save(10, {{"w": np.zeros(4)}}, wait=True)
print(ckpt.last_committed, flush=True)
os.kill(os.getpid(), signal.SIGTERM)
{second}
time.sleep(30)  # a step that never ends: no due() comes
"""


@pytest.mark.parametrize("second", [False, True], ids=["grace over", "second notice"])
def test_an_exit_that_loses_the_preemption_save_names_the_checkpoint_a_resume_uses(tmp_path, second):
    script = PREEMPTED.format(base=str(tmp_path / "run"),
                              second="time.sleep(0.3); os.kill(os.getpid(), signal.SIGTERM)" if second else "")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 143, done.stderr[-3000:]
    committed = done.stdout.split()[0]
    if second:
        said = f"second preemption notice: exiting now; a checkpoint still being saved is lost, a resume uses the " \
               f"checkpoint of step 10 ({committed})"
    else:
        said = f"preemption grace period (1.5 s) is over: exiting without a final checkpoint; a resume uses the " \
               f"checkpoint of step 10 ({committed})"
    assert said in done.stderr, done.stderr[-3000:]


def test_a_gcs_store_that_cannot_be_reached_says_so_as_s3_does(make_uri):
    storage = open_storage(make_uri("gcs"), transfer=TransferOptions(retries=2, retry_backoff_s=0))

    def refuse(*_, **__):
        raise ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 9)")

    storage._fs.call = refuse  # the request that sends the object (checkpoint/storage.py, FsspecStorage._gcs_put)
    with pytest.raises(OSError) as raised:
        storage.write("step-000000000001-1/00-w.safetensors", b"weights")
    said = str(raised.value)
    assert said.startswith(storage.uri("step-000000000001-1/00-w.safetensors") + ": ConnectionRefusedError"), said
    assert said.endswith("(the store could not be reached for 0 s, over 2 tries: is the endpoint right, and up?)"), said


def test_a_failed_s3_multipart_upload_aborts_without_riding_the_outage_out_again(monkeypatch):
    """Each part rides an unreachable store out (20 s); its abort did too, so a multipart save in an outage failed after
    82 s, not the minute the docs said."""
    from botocore.exceptions import EndpointConnectionError

    for k, v in cloud_env(s3=f"http://127.0.0.1:{free_port()}").items():
        monkeypatch.setenv(k, v)
    storage = open_storage("s3://gone/run", transfer=TransferOptions(retries=1, part_size=5 * 2**20))
    monkeypatch.setattr(storage._client, "create_multipart_upload", lambda **_: {"UploadId": "u"})

    def part(**_):
        raise EndpointConnectionError(endpoint_url="http://127.0.0.1:9")

    monkeypatch.setattr(storage._client, "upload_part", part)
    started = time.monotonic()
    with pytest.raises(OSError, match="could not be reached"):
        storage.write("big", b"x" * (11 * 2**20))
    # about 1 s here (botocore's own tries of the abort); ridden out, the abort alone took the store's 20 s
    assert time.monotonic() - started < 15
