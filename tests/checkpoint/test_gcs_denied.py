"""A GCS bucket the job's credentials may not use. gcsfs answers GCS's 403 with ``OSError("Forbidden: <request URL>\\n
<GCS's reason>")``: the library retried it like a dropped connection (with backoff, delaying a preemption's last save),
and the job's log ended in a two-line ``OSError`` naming an upload URL, which the broker diagnosed as the training
script's own error ("Fix the error in the code"). Now it fails at once as a ``PermissionError`` naming the object and
the bucket, and the broker calls it the checkpoint location's, which a resume without --force runs past.

The gcp-storage-emulator checks no credentials, so the store here is a loopback HTTP server that denies every request
as GCS does (a named fake, at the boundary: what GCS answers); gcsfs and the library around it are the real ones."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest import PYTHON, REPO

from broker.diagnosis import Ending, diagnose
from checkpoint import TransferOptions
from checkpoint.storage import open_storage

REASON = ("ckpt-writer@proj.iam.gserviceaccount.com does not have storage.objects.list access to the Google Cloud "
          "Storage bucket. Permission 'storage.objects.list' denied on resource (or it may not exist).")


@pytest.fixture
def denying_gcs(monkeypatch):
    """A loopback GCS endpoint that answers every request 403 with GCS's JSON error body; gcsfs pointed at it."""
    body = json.dumps({"error": {"code": 403, "message": REASON,
                                 "errors": [{"message": REASON, "domain": "global", "reason": "forbidden"}]}}).encode()
    asked: list[str] = []

    class Deny(BaseHTTPRequestHandler):
        def _deny(self) -> None:
            asked.append(f"{self.command} {self.path}")
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            self.send_response(403)
            self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_DELETE = _deny

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Deny)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", endpoint)
    monkeypatch.setenv("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    yield asked
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("call", ["list", "write", "read"],
                         ids=["a listing", "a write", "a read"])
def test_a_gcs_403_fails_at_once_as_a_permission_naming_the_object_and_bucket(denying_gcs, call):
    storage = open_storage("gs://team-ckpt/runs/x", transfer=TransferOptions(retries=3, retry_backoff_s=2))
    run = {"list": storage.list, "write": lambda: storage.write("a/b.bin", b"x"),
           "read": lambda: storage.read("a/b.bin")}[call]
    started = time.monotonic()
    with pytest.raises(PermissionError) as denied:
        run()
    assert time.monotonic() - started < 2  # not retried: with a 2 s backoff a retry alone takes longer
    said = str(denied.value)
    assert "\n" not in said
    assert said.startswith("gs://team-ckpt/runs/x")
    assert f"GCS denied these credentials access to bucket 'team-ckpt' (403 Forbidden): {REASON}" in said, said
    assert len(denying_gcs) == len(set(denying_gcs)), denying_gcs  # no request sent twice: not retried (gcsfs's read
    # asks for the object's metadata in up to three ways of its own)


def test_a_training_script_denied_by_gcs_is_diagnosed_as_its_checkpoint_location_not_its_code(denying_gcs, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        from checkpoint import Checkpointer
        with Checkpointer("gs://team-ckpt/runs/x", env={}, handle_sigterm=False) as ckpt:
            state = ckpt.restore() or {"step": 0}
            for step in range(state["step"] + 1, 4):
                print(f"step {step}", flush=True)
                ckpt.save(step, {"step": step}, wait=True)
    """))
    env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run([PYTHON, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    d = diagnose(Ending("failed", done.returncode, log_tail=done.stdout + done.stderr))
    assert (d.cls, d.infrastructure) == ("checkpoint_location", True), (d, done.stderr[-2000:])
    assert d.sentence.startswith("The checkpoint location gs://team-ckpt/runs/x cannot be used"), d.sentence
    assert d.sentence.endswith("GCS denies the job's credentials access to the bucket team-ckpt (403 Forbidden)."), d
    assert "no --force" in d.hint and "Fix the error in the code" not in d.text


def test_a_credentials_file_that_is_not_there_is_one_error_naming_the_uri_and_the_setting(make_uri, tmp_path,
                                                                                         monkeypatch):
    """GOOGLE_APPLICATION_CREDENTIALS naming a key file that is not there, with ``token="google_default"``: some 15
    frames of gcsfs and google-auth traceback from ``Checkpointer()``, naming neither the checkpoint URI nor the
    setting. google-auth fails on the missing file before any request (the emulator is the only endpoint anyway)."""
    from checkpoint import Checkpointer

    uri = make_uri("gcs")
    missing = tmp_path / "nope-key.json"
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(missing))
    with pytest.raises(OSError) as failed:
        Checkpointer(uri, storage_options={"token": "google_default"}, env={}, handle_sigterm=False)
    said = str(failed.value)
    assert said.startswith(f"{uri}: the GCS credentials could not be loaded (storage_options token "
                           f"'google_default', which reads GOOGLE_APPLICATION_CREDENTIALS={missing}): "
                           f"DefaultCredentialsError: File {missing} was not found; point GOOGLE_APPLICATION_CREDENTIALS"), said
    assert failed.value.__cause__ is None and failed.value.__suppress_context__  # google-auth's frames not chained
    # the broker still reads it as the job's missing credentials, naming what to give it
    d = diagnose(Ending("failed", 1, log_tail=f"Traceback (most recent call last):\nOSError: {said}\n"))
    assert d.cls == "credentials", d
