"""The cloud's spot interruption notice, read from instance metadata, saves and exits like SIGTERM.

The metadata service is the one boundary here we cannot reach (it lives on a cloud VM's
link-local address), so :class:`FakeMetadataService` stands in for it on loopback. It answers
the two requests each cloud documents — AWS IMDSv2 (token, then
``/latest/meta-data/spot/instance-action``: 404 until a reclaim is scheduled) and GCP
(``/computeMetadata/v1/instance/preempted`` with ``Metadata-Flavor: Google``: FALSE/TRUE) —
and refuses requests without the token or header, as the real services do.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from checkpoint import Checkpointer
from checkpoint.cloud_notice import MetadataError, MetadataWatcher
from checkpoint.preemption import PreemptionNotice

PYTHON = sys.executable
WRITER = str(Path(__file__).with_name("writer.py"))


class FakeMetadataService:
    """A stand-in for the AWS and GCP instance metadata services, on 127.0.0.1 (a fake: the
    real ones answer only on a cloud VM)."""

    def __init__(self):
        self.reclaim = False
        self.tokens: set[str] = set()
        self.requests: list[tuple[str, str]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _send(self, code: int, body: str = "") -> None:
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_PUT(self):  # noqa: N802 - http.server's naming
                fake.requests.append(("PUT", self.path))
                if self.path == "/latest/api/token" and self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                    token = f"token-{len(fake.tokens)}"
                    fake.tokens.add(token)
                    return self._send(200, token)
                return self._send(400)

            def do_GET(self):  # noqa: N802
                fake.requests.append(("GET", self.path))
                if self.path == "/latest/meta-data/spot/instance-action":
                    if self.headers.get("X-aws-ec2-metadata-token") not in fake.tokens:
                        return self._send(401)
                    if not fake.reclaim:
                        return self._send(404, "Not Found")
                    return self._send(200, json.dumps({"action": "terminate", "time": "2026-11-30T09:00:00Z"}))
                if self.path == "/computeMetadata/v1/instance/preempted":
                    if self.headers.get("Metadata-Flavor") != "Google":
                        return self._send(403)
                    return self._send(200, "TRUE" if fake.reclaim else "FALSE")
                return self._send(404)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def metadata():
    fake = FakeMetadataService()
    yield fake
    fake.close()


@pytest.mark.parametrize("cloud, action", [("aws", "terminate"), ("gcp", "preempted")])
def test_each_clouds_notice_is_read_as_documented(metadata, cloud, action):
    watcher = MetadataWatcher(cloud, lambda: None, base_url=metadata.url)
    assert watcher.check() is None
    metadata.reclaim = True
    assert watcher.check() == action


def test_aws_uses_an_imdsv2_token_and_fetches_a_new_one_when_it_expires(metadata):
    watcher = MetadataWatcher("aws", lambda: None, base_url=metadata.url)
    assert watcher.check() is None
    assert metadata.requests[0] == ("PUT", "/latest/api/token")
    metadata.tokens.clear()  # the token expired
    with pytest.raises(OSError):
        watcher.check()  # 401 once ...
    assert watcher.check() is None  # ... then a fresh token
    assert [r for r in metadata.requests if r[0] == "PUT"] == [("PUT", "/latest/api/token")] * 2


def test_the_watcher_notifies_once_and_stops(metadata):
    calls = []
    watcher = MetadataWatcher("gcp", lambda: calls.append(time.monotonic()), base_url=metadata.url, poll_s=0.05).start()
    time.sleep(0.2)
    assert calls == []
    metadata.reclaim = True
    deadline = time.monotonic() + 5
    while not calls and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.2)
    assert len(calls) == 1 and watcher.noticed == "preempted"
    watcher.stop()


def test_an_unreachable_endpoint_is_retried_quietly(caplog):
    watcher = MetadataWatcher("aws", lambda: None, base_url="http://127.0.0.1:9", poll_s=0.05).start()
    deadline = time.monotonic() + 10  # a few polls, however late the watcher's thread first runs
    while not any("cannot read" in r.getMessage() for r in caplog.records) and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.3)
    watcher.stop()
    assert watcher.noticed is None
    assert sum("cannot read the aws spot notice" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.parametrize("env, message", [
    ({"BROKER_PREEMPTION_METADATA": "azure"}, "aws, gcp or off"),
    ({"BROKER_PREEMPTION_METADATA": "aws", "BROKER_METADATA_POLL_S": "soon"}, "positive number"),
    ({"BROKER_PREEMPTION_METADATA": "aws", "BROKER_METADATA_POLL_S": "0"}, "positive number"),
    ({"BROKER_PREEMPTION_METADATA": "gcp", "BROKER_METADATA_URL": "metadata.internal"}, "http:// or https://"),
], ids=["an unknown cloud is named", "a poll interval that is not a number", "a zero poll interval", "a URL without a scheme"])
def test_bad_settings_fail_the_checkpointer_at_construction(env, message, tmp_path):
    with pytest.raises(MetadataError, match=message):
        Checkpointer(str(tmp_path), env=env)


def test_off_or_unset_polls_nothing(tmp_path):
    for env in ({}, {"BROKER_PREEMPTION_METADATA": "off"}):
        with Checkpointer(str(tmp_path), env=env) as ckpt:
            assert ckpt._cloud_notice is None


def test_the_sigterm_after_a_cloud_notice_does_not_cut_the_save_short():
    codes = []
    notice = PreemptionNotice(grace_s=60, force_exit=codes.append)
    notice.notify("cloud")
    assert notice.requested
    notice.notify("cloud")  # polled again: nothing new
    notice.notify("signal")  # the OS shutting the VM down: the save goes on
    assert codes == []
    notice.notify("signal")  # a second signal: now exit
    assert codes == [143]
    notice.uninstall()


def test_a_training_process_saves_and_exits_143_on_the_clouds_notice(metadata, tmp_path, subprocess_env):
    uri = str(tmp_path / "run")
    env = subprocess_env(uri, BROKER_PREEMPTION_METADATA="aws", BROKER_METADATA_URL=metadata.url,
                         BROKER_METADATA_POLL_S="0.05")
    proc = subprocess.Popen([PYTHON, WRITER, "--sleep", "0.05"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().startswith("ready")
        step = -1
        while step < 5:
            line = proc.stdout.readline()
            if line.startswith("saved"):
                step = int(line.split()[1])
        metadata.reclaim = True
        flipped_at = step
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err[-2000:]
    assert "aws metadata announces a spot reclaim (terminate)" in err
    assert "Traceback" not in err
    with Checkpointer(uri, env={}, handle_sigterm=False) as ckpt:
        saved = ckpt.restore()
    assert saved.step >= flipped_at  # committed at the step boundary after the notice
