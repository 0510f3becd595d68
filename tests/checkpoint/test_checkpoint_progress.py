"""The progress reporter: what it posts, how often, and that it never hurts training."""

from __future__ import annotations

import json
import queue
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch
from testports import free_port

from checkpoint import Checkpointer
from checkpoint.progress import Reporter
from checkpoint.storage import open_storage


@pytest.fixture
def broker():
    """A loopback HTTP server that records each POST as (authorization, json body)."""
    received: queue.Queue = queue.Queue()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.put((self.headers.get("Authorization"), json.loads(body)))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)  # a post never waits behind another
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/jobs/j-1/progress", received
    server.shutdown()


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_progress_is_posted_with_the_bearer_token_at_most_every_interval(broker):
    url, received = broker
    clock = FakeClock()
    reporter = Reporter(url, "tok", interval_s=5, clock=clock)
    assert reporter.report(10, 300, {"loss": 1.25})
    clock.now = 4.9
    assert not reporter.report(11, 300, {"loss": 1.0})  # too soon: dropped
    clock.now = 5.0
    assert reporter.report(12, 300, {"loss": torch.tensor(0.5)})
    got = [received.get(timeout=5), received.get(timeout=5)]
    assert sorted(got, key=lambda g: g[1]["step"]) == [
        ("Bearer tok", {"step": 10, "total_steps": 300, "metrics": {"loss": 1.25}}),
        ("Bearer tok", {"step": 12, "total_steps": 300, "metrics": {"loss": 0.5}}),
    ]


def test_the_last_report_held_back_by_the_rate_limit_is_sent_as_the_script_exits(broker, tmp_path):
    """A script reporting every step ends: the broker hears its last step, not one up to 5 s older."""
    import os
    import subprocess
    import sys

    url, received = broker
    script = tmp_path / "train.py"
    script.write_text("from checkpoint.progress import report\n"
                      "for step in range(1, 401):\n    report(step, 400)\n")
    env = {**os.environ, "BROKER_PROGRESS_URL": url, "BROKER_JOB_TOKEN": "tok"}
    subprocess.run([sys.executable, str(script)], env=env, check=True, timeout=60)
    steps = []
    while not received.empty():
        steps.append(received.get()[1]["step"])
    assert max(steps) == 400 and len(steps) <= 2  # the last at exit (and the first, if its post finished in time)


def test_a_report_held_back_does_not_read_its_metrics(broker):
    """float() of a GPU tensor waits for the GPU: a report the rate limit drops must not pay for it."""
    url, received = broker
    reads = []

    class Loss:
        def __float__(self):
            reads.append(1)
            return 0.5

    clock = FakeClock()
    reporter = Reporter(url, "tok", interval_s=5, clock=clock)
    assert reporter.report(1, 10, {"loss": Loss()}) and len(reads) == 1
    for step in range(2, 10):
        assert not reporter.report(step, 10, {"loss": Loss()})
    assert len(reads) == 1  # held back, not converted
    assert reporter.flush() and len(reads) == 2  # the last one, converted as it is sent


@pytest.mark.parametrize("env", [{}, {"BROKER_PROGRESS_URL": "http://127.0.0.1:9/x"}],
                         ids=["without a URL nothing is sent", "without a token nothing is sent"])
def test_reporting_is_off_unless_url_and_token_are_set(env):
    assert not Reporter.from_env(env).report(1, 2)


def test_a_broker_that_is_down_never_raises():
    port = free_port()  # nothing listens there: connection refused
    assert Reporter(f"http://127.0.0.1:{port}/p", "tok").post({"step": 1}) is False


def test_each_commit_is_reported_with_its_uri(broker):
    url, received = broker
    env = {"BROKER_PROGRESS_URL": url, "BROKER_JOB_TOKEN": "tok"}
    storage = open_storage(f"memory://ckpt-progress/{uuid.uuid4().hex}")
    with Checkpointer(storage=storage, env=env, handle_sigterm=False, every_steps=1) as ckpt:
        ckpt.save(5, {"x": torch.ones(2)})
        uri = ckpt.wait()
    assert received.get(timeout=5) == ("Bearer tok", {"checkpoint": {"step": 5, "uri": uri}})


def test_each_report_names_the_attempt_that_sends_it(broker):
    # the broker refuses a report of an attempt it has moved past (a preempted attempt's process still running)
    url, received = broker
    reporter = Reporter.from_env({"BROKER_PROGRESS_URL": url, "BROKER_JOB_TOKEN": "tok", "BROKER_ATTEMPT": "3"})
    assert reporter.report(7, 10) and reporter.report_checkpoint(7, "file:///c/7", wait=True)
    bodies = sorted((received.get(timeout=5)[1] for _ in range(2)), key=lambda b: "checkpoint" in b)
    assert bodies == [{"step": 7, "total_steps": 10, "metrics": {}, "attempt": 3},
                      {"checkpoint": {"step": 7, "uri": "file:///c/7"}, "attempt": 3}]
    assert Reporter.from_env({"BROKER_PROGRESS_URL": url, "BROKER_JOB_TOKEN": "t", "BROKER_ATTEMPT": "x"}).attempt is None

