"""A checkpoint report the broker could not take (it was down) is kept and sent again, and said on stderr.

A real HTTP server on a loopback port, which first is not there (the connection is refused) and then answers.
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

from checkpoint import progress
from checkpoint.progress import UNDELIVERED_LINE, Reporter
from testports import free_port

REPO = Path(__file__).resolve().parents[2]


class Broker:
    """A stand-in for the broker's progress endpoint: records each report's body, answers ``status``."""

    def __init__(self, port: int, status: int = 200):
        self.port, self.status, self.bodies = port, status, []
        self.server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/jobs/j1/progress"

    def start(self) -> Broker:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.bodies.append(body)
                self.send_response(owner.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def checkpoints(self) -> list[int]:
        return [b["checkpoint"]["step"] for b in self.bodies if "checkpoint" in b]


def wait_for(predicate, timeout: float = 10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    raise AssertionError("timed out")


@pytest.fixture
def broker():
    b = Broker(free_port())  # this worker's own slice: a fixed range collided with another test file's
    yield b
    b.stop()


@pytest.fixture(autouse=True)
def _fresh_held():
    progress._held.clear()
    yield
    progress._held.clear()


def test_a_commit_the_broker_was_down_for_is_said_once_and_sent_with_the_next_report(broker, capsys):
    reporter = Reporter(broker.url, "tok", interval_s=0, attempt=2)
    uri = "file:///ckpt/j1/step-000000000100-abc"
    assert reporter.report_checkpoint(100, uri, wait=True) is False  # nothing listens: refused
    err = capsys.readouterr().err
    assert err.count("[checkpoint] committed step 100: " + uri + " (not yet told to the broker: ") == 1, err
    assert reporter._undelivered() == {"checkpoint": {"step": 100, "uri": uri}}

    broker.start()
    assert reporter.report(101, 900, {"loss": 0.5})
    wait_for(lambda: len(broker.bodies) == 2)
    assert broker.bodies[0] == {"checkpoint": {"step": 100, "uri": uri}, "attempt": 2}  # the commit first
    assert broker.bodies[1]["step"] == 101
    assert reporter._undelivered() is None
    reporter.report(102)
    wait_for(lambda: len(broker.bodies) == 3)
    time.sleep(0.2)
    assert broker.checkpoints() == [100]  # taken: not sent again
    assert "committed step" not in capsys.readouterr().err


def test_only_the_latest_undelivered_commit_is_kept_and_a_newer_commit_replaces_it(broker, capsys):
    reporter = Reporter(broker.url, "tok", interval_s=0)
    reporter.report_checkpoint(100, "file:///c/step-100", wait=True)
    reporter.report_checkpoint(200, "file:///c/step-200", wait=True)
    err = capsys.readouterr().err
    assert "committed step 100: file:///c/step-100" in err and "committed step 200: file:///c/step-200" in err
    assert reporter._undelivered()["checkpoint"]["step"] == 200
    broker.start()
    assert reporter.report_checkpoint(300, "file:///c/step-300", wait=True)
    assert broker.checkpoints() == [300]
    assert reporter._undelivered() is None


def test_the_checkpointers_reporter_and_report_share_the_undelivered_commit(broker):
    mine, theirs = Reporter(broker.url, "tok", interval_s=0), Reporter(broker.url, "tok", interval_s=0)
    mine.report_checkpoint(40, "file:///c/step-40", wait=True)
    broker.start()
    theirs.report(41)
    wait_for(lambda: len(broker.bodies) == 2)
    assert broker.checkpoints() == [40]


def test_a_refusal_by_the_broker_is_not_sent_again_nor_said(broker, capsys):
    broker.status = 409  # e.g. a report from an attempt the broker moved past
    broker.start()
    reporter = Reporter(broker.url, "tok", interval_s=0, attempt=1)
    assert reporter.report_checkpoint(7, "file:///c/step-7", wait=True) is False
    assert reporter._undelivered() is None
    assert "committed step" not in capsys.readouterr().err


def test_a_server_error_is_kept_and_tried_again_at_exit(broker, capsys):
    broker.status = 503
    broker.start()
    reporter = Reporter(broker.url, "tok", interval_s=0)
    assert reporter.report_checkpoint(9, "file:///c/step-9", wait=True) is False
    assert "(not yet told to the broker: HTTP 503)" in capsys.readouterr().err
    broker.status = 200
    progress._deliver_held_at_exit()
    assert broker.checkpoints() == [9, 9]
    assert reporter._undelivered() is None


SCRIPT = """
import sys, time
from checkpoint.progress import Reporter
r = Reporter(sys.argv[1], "tok", interval_s=0)
r.report_checkpoint(5, "file:///c/step-5", wait=True)
r.report_checkpoint(900, "file:///c/step-000000000900-x")   # on its thread: the exit waits for no thread
print("done", flush=True)
"""


def test_at_exit_the_last_commit_is_tried_again_within_about_a_second_and_said_if_still_not_taken(broker):
    started = time.monotonic()
    r = subprocess.run([sys.executable, "-c", SCRIPT, broker.url], cwd=REPO, capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - started < 10
    lines = [line for line in r.stderr.splitlines() if line.startswith("[checkpoint] committed step")]
    assert lines[-1].startswith("[checkpoint] committed step 900: file:///c/step-000000000900-x "
                                "(not yet told to the broker: ")
    assert lines.count(lines[-1]) == 1


def test_at_exit_a_commit_the_broker_was_down_for_reaches_it_once_it_is_back(broker):
    script = SCRIPT.replace('print("done", flush=True)', 'time.sleep(0.3)\nopen(sys.argv[2], "w").write("up?")\n'
                                                          'time.sleep(1.0)\nprint("done", flush=True)')
    ready = Path(f"/tmp/undelivered-{broker.port}-{time.monotonic_ns()}")
    proc = subprocess.Popen([sys.executable, "-c", script, broker.url, str(ready)], cwd=REPO,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_for(ready.exists)
        broker.start()
        _, err = proc.communicate(timeout=30)
    finally:
        ready.unlink(missing_ok=True)
    assert proc.returncode == 0, err
    assert broker.checkpoints()[-1] == 900, (broker.bodies, err)


def test_the_line_format_is_the_documented_one():
    assert UNDELIVERED_LINE.format(step=900, uri="file:///x/step-000000000900-ab", why="refused") == \
        "[checkpoint] committed step 900: file:///x/step-000000000900-ab (not yet told to the broker: refused)"
