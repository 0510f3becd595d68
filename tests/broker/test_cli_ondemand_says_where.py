"""`broker ondemand ID` on a stopped or failed job (it resumes it) says where the job stands, as `broker resume` does.

It answered "j-…: pinned to on-demand; queued" and no more, where `broker resume` says the queue position and roughly
when the job starts once the engine has weighed it (``broker/cli.py::_say_behind``). A job the switch only pins
(running, or already waiting) is answered as before, and ``--json`` stays the job alone.

Against a real ``broker serve`` (local launcher, a pool of one slot and a simulated on-demand zone of one node) and the
CLI as typed.
"""

from __future__ import annotations

import json
import re

import pytest
from broker_testing import cli_runner, start_broker, stop_broker, wait_for

CONFIG = """
pools:
  - {name: local, slots: 1, price_per_slot_hour: "0.36"}
zones:
  - {name: sim-od, tier: ondemand, instance_type: g5.xlarge, nodes: 1, price_per_hour: "1.00"}
tick_seconds: 0.2
stop_grace_seconds: 2
"""
FAILS = "name: {name}\nresources: {{cpus: 1, use_spot: false}}\nrun: exit 1\n"
HOLDS = "name: holder\nresources: {accelerators: A10G:1}\nrun: sleep 120\nbroker: {expected_hours: 0.5}\n"


@pytest.fixture
def run(tmp_path):
    """The CLI against a broker whose one on-demand node a job asking for an A10G can take; stopped after, with no
    local run left behind."""
    proc, url = start_broker(tmp_path, f"sqlite://{tmp_path / 'b.db'}", config=CONFIG)
    yield cli_runner(url)
    stop_broker(proc, url, timeout=15)


def _submitted(run, tmp_path, name: str, text: str) -> str:
    task = tmp_path / f"{name}.yaml"
    task.write_text(text)
    return json.loads(run("--json", "submit", str(task), "--budget", "2").stdout)["id"]


def _state(run, job_id: str) -> str:
    return json.loads(run("--json", "status", job_id).stdout)["state"]


def _lines(said: str) -> list[str]:
    return [line for line in said.splitlines() if line.strip()]


def test_a_switch_that_resumes_a_failed_job_says_its_place_in_the_queue_and_roughly_when_it_starts(run, tmp_path):
    first, second = (_submitted(run, tmp_path, name, FAILS.format(name=name)) for name in ("first", "second"))
    wait_for(lambda: _state(run, first) == _state(run, second) == "failed", timeout=60)
    held = _submitted(run, tmp_path, "holder", HOLDS)  # on the zone's one node: the pool has no A10G
    wait_for(lambda: _state(run, held) == "running", timeout=60)

    # the zone full: first in line, with why and roughly when, as a resume says it
    said = run("ondemand", first, "--force").stdout
    assert _lines(said)[0] == f"{first}: pinned to on-demand; queued", said
    assert "queued first in line: zone sim-od is full right now" in said, said
    assert re.search(r"; estimated start (\d\d-\d\d )?\d\d:\d\dZ$", said.strip()), said

    # behind it, the second is told how many wait ahead of it
    said = run("ondemand", second, "--force").stdout
    assert _lines(said)[-1] == "queued: 1 job waits ahead of it (position 2); `broker queue` shows roughly when it " \
                               "starts", said

    # a switch that only pins is answered as before: a running job, a job already waiting; --json is the job alone
    assert _lines(run("ondemand", held).stdout) == [f"{held}: pinned to on-demand; running"]
    assert _lines(run("ondemand", first).stdout) == [f"{first}: pinned to on-demand; queued"]
    job = json.loads(run("--json", "ondemand", second).stdout)
    assert (job["id"], job["state"], job["pinned_tier"]) == (second, "queued", "ondemand")
