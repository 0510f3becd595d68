"""What a user is told about the queue is true, against a real ``broker serve`` (local launcher, a pool of one slot
and a simulated spot zone) and the CLI as typed.

``broker submit`` said "queued: 2 jobs wait ahead of it (position 3)" of a job the engine placed at its next tick on
the free spot zone: the position counts the whole queue, and the scheduler starts a job past those ahead of it that
wait for capacity it can do without (best-effort FIFO, ``broker/queue.py``). Now the CLI waits for the engine's
decision before it says where the job stands (``broker/cli.py::_say_behind``).

``starts ~`` left out a job waiting out a backoff after its run failed and is retried (``launch_retry_at``): blank
while the backoff ran, its capacity counted free for the jobs behind it. Now it is the backoff's end, or later when
what it needs is held (``broker/queue.py::waits``).
"""

from __future__ import annotations

import json
import re
import time

import httpx
import pytest
from broker_testing import ADMIN, POOL_AND_SPOT, cli_runner, start_broker, stop_broker, wait_for

CONFIG = POOL_AND_SPOT
POOL_ONLY = "name: {name}\nresources: {{cpus: 1, use_spot: false}}\nrun: sleep 60\nbroker: {{expected_hours: 0.5}}\n"


@pytest.fixture
def broker(tmp_path):
    started = []

    def start(engine="on"):
        home = tmp_path / f"broker{len(started)}"
        home.mkdir()
        proc, url = start_broker(home, f"sqlite://{home / 'b.db'}", config=CONFIG, engine=engine)
        started.append((proc, url))
        return cli_runner(url)

    yield start
    for proc, url in started:  # no local run left behind: cancelled, and gone before the broker stops
        stop_broker(proc, url, timeout=15)


def _task(tmp_path, name, text):
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return str(path)


def test_a_job_that_starts_at_once_on_capacity_nobody_ahead_waits_for_is_not_told_it_waits(broker, tmp_path):
    run = broker()
    blocker = json.loads(run("--json", "submit", _task(tmp_path, "blocker", POOL_ONLY.format(name="blocker")),
                             "--budget", "2").stdout)
    wait_for(lambda: json.loads(run("--json", "status", blocker["id"]).stdout)["state"] == "running", timeout=30)
    pool_only = _task(tmp_path, "pool-only", POOL_ONLY.format(name="pool-only"))
    said = run("submit", pool_only, "--budget", "2").stdout  # first in line, the pool full: it waits, and is told so
    assert "ahead of it" not in said and "queued first in line: the pool local is full right now" in said, said
    # the start as the tables show it: "00:12Z" today (UTC), "12-07 00:12Z" past midnight (this read "\S+$" and
    # failed a CI run made at 23:50Z)
    assert re.search(r"; estimated start (\d\d-\d\d )?\d\d:\d\dZ$", said.strip()), said
    said = run("submit", pool_only, "--budget", "2").stdout
    # it does wait behind the first for the pool, the only capacity it may use
    assert "queued: 1 job waits ahead of it (position 2); `broker queue` shows roughly when it starts" in said, said

    # the pool full, two jobs waiting for it: a job that may also run on the spot zone starts at once there
    any_tier = _task(tmp_path, "any-tier", "name: any-tier\nresources: {cpus: 1}\nrun: sleep 60\n")
    said = run("submit", any_tier, "--budget", "2").stdout
    assert "submitted " in said and "ahead of it" not in said and "queued" not in said, said
    job_id = said.split("submitted ", 1)[1].split()[0]
    job = json.loads(run("--json", "status", job_id).stdout)
    assert job["state"] != "queued" and job["placement"]["tier"] == "spot", job
    # and the queue's order, the scheduler's, is as it was
    queue = json.loads(run("--json", "queue").stdout)
    assert [(j["name"], j["queue_position"]) for j in queue] == [("pool-only", 1), ("pool-only", 2)]


def test_a_job_the_engine_has_not_looked_at_yet_is_told_it_starts_at_its_next_tick_if_capacity_is_free(broker,
                                                                                                       tmp_path):
    """A broker process with no engine of its own (an API node beside the engines): no decision comes within the
    submit's wait, and the line says what it does not know rather than that the job waits."""
    run = broker(engine="off")
    task = _task(tmp_path, "any-tier", "name: any-tier\nresources: {cpus: 1}\nrun: sleep 60\n")
    run("submit", task, "--budget", "1")
    said = run("submit", task, "--budget", "1").stdout
    assert ("queued at position 2 (1 job waits ahead of it): it starts at the engine's next tick if capacity it can "
            "use is free; `broker queue` shows roughly when it starts") in said, said
    assert "queued: 1 job waits" not in said


def test_a_job_waiting_out_a_backoff_starts_no_earlier_than_it_ends_and_after_what_holds_its_capacity(broker,
                                                                                                     tmp_path):
    run = broker()
    headers = {"Authorization": f"Bearer {ADMIN}"}
    flaky = json.loads(run("--json", "submit", _task(tmp_path, "flaky", (
        "name: flaky\nresources: {cpus: 1, use_spot: false}\nrun: exit 1\n"
        "broker: {retry: {recover_on_exit_codes: [1]}}\n")), "--budget", "2").stdout)

    def in_backoff():
        """The job as read while a backoff of its runs: the read made well before its end (backoffs grow, 5 s, 10 s,
        20 s…: a slow read misses one, not all), with the time it tries again as its reason says it."""
        asked = time.time()
        job = httpx.get(f"{run.url}/v1/jobs/{flaky['id']}", headers=headers).json()
        if job["state"] != "queued" or "tries again at " not in job["reason"]:
            return None
        at = job["reason"].split("tries again at ", 1)[1][:20]
        return (job, at) if _epoch(at) - asked > 1.5 else None

    job, at = wait_for(in_backoff, timeout=90, interval=0.1)
    # the pool is free: it starts when its backoff ends, not "now" (nor, as before, with no estimate)
    assert job["estimated_start"] == at, job

    # a job behind it takes the pool meanwhile (the scheduler passes a job in backoff), for half an hour
    behind = json.loads(run("--json", "submit", _task(tmp_path, "behind", POOL_ONLY.format(name="behind")),
                            "--budget", "2").stdout)
    wait_for(lambda: json.loads(run("--json", "status", behind["id"]).stdout)["state"] == "running", timeout=30)
    job = json.loads(run("--json", "status", flaky["id"]).stdout)
    assert job["state"] == "queued" and _epoch(job["estimated_start"]) > time.time() + 25 * 60, job


def _epoch(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
