"""`broker resume ID` says where the job stands once the engine has weighed it, as `broker submit` does.

It answered "j-…: queued — resumed by admin from step 400" and no more: neither that the job waits behind others nor
roughly when it starts, where a submit said both (``broker/cli.py::_say_behind``). A resumed job's version is past 1
long before, so "the engine has decided" is a write after the resume's own answer.

Against a real ``broker serve`` (local launcher, a pool of one slot and a simulated spot zone) and the CLI as typed.
"""

from __future__ import annotations

import json
import re

import pytest
from broker_testing import POOL_AND_SPOT, cli_runner, start_broker, stop_broker, wait_for

FAILS = "name: {name}\nresources: {{cpus: 1, use_spot: false}}\nrun: exit 1\n"
HOLDS = "name: holder\nresources: {cpus: 1, use_spot: false}\nrun: sleep 120\nbroker: {expected_hours: 0.5}\n"


@pytest.fixture
def brokers(tmp_path):
    """``start(engine)``: a broker on one data dir and store (a second start reads what the first left), the CLI
    against it; every broker stopped after, with no local run left behind."""
    started = []

    def start(engine="on"):
        proc, url = start_broker(tmp_path, f"sqlite://{tmp_path / 'b.db'}", config=POOL_AND_SPOT, engine=engine)
        started.append((proc, url, engine))
        return cli_runner(url)

    def stop(proc, url, engine):
        stop_broker(proc, url, wait_runs=engine == "on", timeout=15)  # its local runs gone before it stops

    start.stop = lambda: stop(*started[-1])
    yield start
    for broker in started:
        stop(*broker)


def _failed(run, tmp_path, name: str) -> str:
    """The id of a pool-only job that ran and failed in its own code (a resume of it needs --force)."""
    task = tmp_path / f"{name}.yaml"
    task.write_text(FAILS.format(name=name))
    job = json.loads(run("--json", "submit", str(task), "--budget", "2").stdout)
    wait_for(lambda: _state(run, job["id"]) == "failed", timeout=60)
    return job["id"]


def _state(run, job_id: str) -> str:
    return json.loads(run("--json", "status", job_id).stdout)["state"]


def _lines(said: str) -> list[str]:
    return [line for line in said.splitlines() if line.strip()]


def test_a_resume_says_its_place_in_the_queue_and_roughly_when_it_starts(brokers, tmp_path):
    run = brokers()
    first, second = _failed(run, tmp_path, "first"), _failed(run, tmp_path, "second")

    # the pool free: placed at the next tick, and nothing more is said than the resume's own line
    said = run("resume", first, "--force").stdout
    assert _lines(said)[0].startswith(f"{first}: queued — resumed by admin") and len(_lines(said)) == 1, said
    wait_for(lambda: _state(run, first) == "failed", timeout=60)

    holder = tmp_path / "holder.yaml"
    holder.write_text(HOLDS)
    held = json.loads(run("--json", "submit", str(holder), "--budget", "2").stdout)
    wait_for(lambda: _state(run, held["id"]) == "running", timeout=60)

    # the pool full: first in line, with why and roughly when, as a submit says it
    said = run("resume", first, "--force").stdout
    assert "queued first in line: the pool local is full right now" in said, said
    assert re.search(r"; estimated start (\d\d-\d\d )?\d\d:\d\dZ$", said.strip()), said

    # behind it, the second is told how many wait ahead of it
    said = run("resume", second, "--force").stdout
    assert _lines(said)[-1] == "queued: 1 job waits ahead of it (position 2); `broker queue` shows roughly when it " \
                               "starts", said


def test_a_resume_no_engine_has_weighed_yet_says_it_starts_at_the_next_tick_and_json_stays_the_job(brokers,
                                                                                                   tmp_path):
    """A broker process with no engine of its own (an API node beside the engines): the line says what it does not
    know rather than that the job waits; ``--json`` is the job alone, for a script."""
    run = brokers()
    first, second = _failed(run, tmp_path, "first"), _failed(run, tmp_path, "second")
    brokers.stop()
    run = brokers(engine="off")

    r = run("--json", "resume", first, "--force")
    job = json.loads(r.stdout)  # one JSON object and nothing else
    assert (job["id"], job["state"]) == (first, "queued"), r.stdout

    said = run("resume", second, "--force").stdout
    assert _lines(said)[-1] == ("queued at position 2 (1 job waits ahead of it): it starts at the engine's next tick "
                                "if capacity it can use is free; `broker queue` shows roughly when it starts"), said
