"""What `broker submit` and `broker status` say of a job's start and deadline, on a real broker (its local launcher's
real processes):

* `broker status` of a job that had ended went on counting down to its deadline ("deadline … (in 51 s)"): it now says
  whether the job met it ("met, 2 min before it", "missed by 5 min");
* a job due in 2 minutes, third in line, was told at its submit only "queued: 2 jobs wait ahead of it (position 3)":
  the submit now says its estimated start is too late for its deadline, in the words `queue` and `status` say it;
* `broker submit --dry-run` of a job that would start at once said "queue: position 1 (no job waits ahead of it)": it
  now says it would start now."""

from __future__ import annotations

import json
import re

import pytest
from broker_testing import cli_runner, start_broker, stop_broker, wait_for

from broker.views import deadline_met_words

CONFIG = """
pools:
  - {name: cpu, slots: 2, price_per_slot_hour: "0.36"}
  - {name: gpu, slots: 1, accelerator: A10G, price_per_slot_hour: "1.00"}
tick_seconds: 0.2
stop_grace_seconds: 1
"""


@pytest.mark.parametrize("state, ended, said", [
    ("succeeded", -125, "met, 2 min before it"),
    ("succeeded", 300, "missed by 5 min"),
    ("failed", 300, "missed by 5 min"),
    ("failed", -40, "not met: it failed 40 s before it"),
    ("cancelled", -3 * 3600, "not met: it was cancelled 3.0 h before it"),
    ("stopped_budget", -60, "not met: it was stopped at its budget 1 min before it"),
    ("running", -60, None),
    ("queued", 60, None),
], ids=lambda v: str(v))
def test_an_ended_job_says_whether_it_met_its_deadline(state, ended, said):
    assert deadline_met_words(state, 1_000_000.0, 1_000_000.0 + ended) == said


def test_status_of_a_job_that_ended_says_it_met_its_deadline_not_how_far_off_it_is():
    from broker.cli import _deadline_moment

    job = {"state": "succeeded", "updated_at": "2026-12-07T06:28:00Z"}
    assert _deadline_moment("2026-12-07T06:30:30Z", job) == "2026-12-07 06:30Z (met, 2 min before it)"
    assert _deadline_moment("2026-12-07T06:20:00Z", job) == "2026-12-07 06:20Z (missed by 8 min)"
    # a job not ended: from now, as before
    assert _deadline_moment("2020-01-01T00:00:00Z", {**job, "state": "running"}).endswith(" days ago)")


@pytest.fixture(scope="module")
def cli(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("h7-submit-words")
    proc, url = start_broker(tmp, f"sqlite://{tmp / 'c.db'}", config=CONFIG)
    run = cli_runner(url)

    def task(name: str, text: str):
        path = tmp / f"{name}.yaml"
        path.write_text(text)
        return str(path)

    try:
        yield run, task
    finally:
        stop_broker(proc, url)


def test_status_of_a_succeeded_job_says_it_met_its_deadline(cli):
    run, task = cli
    quick = task("quick", "name: quick\nresources: {cpus: 1}\nrun: sleep 0.3\n")
    job = json.loads(run("--json", "submit", quick, "--budget", "1", "--deadline", "10m").stdout)
    wait_for(lambda: json.loads(run("--json", "status", job["id"]).stdout)["state"] == "succeeded", timeout=30)
    out = run("status", job["id"]).stdout
    assert re.search(r"deadline \d{4}-\d\d-\d\d \d\d:\d\dZ \(met, (9|10) min before it\)", out), out
    assert "(in " not in out, out


def test_a_submit_behind_others_says_its_start_is_too_late_for_its_deadline(cli):
    run, task = cli
    blocker = task("blocker", "name: blocker\nresources: {accelerators: A10G:1}\nrun: sleep 120\n"
                              "broker: {expected_hours: 0.5}\n")
    first = json.loads(run("--json", "submit", blocker, "--budget", "5").stdout)
    wait_for(lambda: json.loads(run("--json", "status", first["id"]).stdout)["state"] == "running", timeout=30)
    behind = task("behind", "name: behind\nresources: {accelerators: A10G:1}\nrun: sleep 1\n"
                            "broker: {expected_hours: 0.1}\n")
    for _ in range(2):
        run("submit", behind, "--budget", "5")
    due = task("due", "name: due\nresources: {accelerators: A10G:1}\nrun: sleep 1\nbroker: {expected_hours: 0.01}\n")
    out = run("submit", due, "--budget", "5", "--deadline", "2m").stdout
    line = next((x for x in out.splitlines() if x.startswith("queued:")), out)
    assert line.startswith("queued: 2 jobs wait ahead of it (position 3); estimated to start at "), out
    assert re.search(r"estimated to start at [-\d]+ [\d:]+Z, after its deadline at [-\d]+ [\d:]+Z; `broker queue` "
                     r"shows roughly when it starts$", line), line
    # the same words `broker queue` says
    queued = {j["name"]: j for j in json.loads(run("--json", "queue").stdout)}
    words = re.search(r"estimated to start at [^;]*", line).group(0)
    assert words in queued["due"]["reason"], (words, queued["due"]["reason"])


def test_a_dry_run_of_a_job_that_would_start_at_once_says_it_would_start_now(cli):
    """The free cpu pool takes it at once: it would start now (past any jobs waiting for the gpu meanwhile)."""
    run, task = cli
    quick = task("quick2", "name: quick2\nresources: {cpus: 1}\nrun: sleep 0.3\n")
    out = run("submit", quick, "--budget", "1", "--dry-run").stdout
    assert re.search(r"^would be placed on onprem", out, re.M), out
    assert re.search(r"^queue: it would start now( \(no job waits ahead of it\)|, past the (1 job that waits|\d+ jobs "
                     r"that wait) ahead of it for capacity it does without)$", out, re.M), out
    assert "queue: position" not in out, out
