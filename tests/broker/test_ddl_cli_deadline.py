"""`broker deadline JOB WHEN` / `--none` (a deadline could not be changed after submit), and `broker submit
--expected-hours H` (Slack took `expected_hours=`, the CLI had no option): a real `broker serve` (engine off: the jobs
stay queued), the CLI run as a user types it."""

from __future__ import annotations

import json
import re
import signal
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from broker_testing import cli_runner, start_broker

CONFIG = """
zones:
  - {name: sim-a, tier: spot, instance_type: g5.xlarge, grace_seconds: 2}
  - {name: sim-od, tier: ondemand, instance_type: g5.xlarge}
changeover_seconds: 5
"""


@pytest.fixture(scope="module")
def cli(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ddl-cli")
    proc, url = start_broker(tmp, f"sqlite://{tmp / 'c.db'}", engine="off", config=CONFIG)
    task = tmp / "t.yaml"
    task.write_text("name: due\nresources: {accelerators: A10G:1}\nrun: sleep 600\n"
                    "broker: {budget_usd: 5, expected_hours: 0.05}\n")
    yield cli_runner(url), task
    proc.send_signal(signal.SIGTERM)
    proc.wait(15)


def _submit(run, task, *extra) -> str:
    return json.loads(run("--json", "submit", str(task), "--deadline", "6h", *extra).stdout)["id"]


def _deadline(run, job_id):
    given = json.loads(run("--json", "status", job_id).stdout)["deadline"]
    return None if given is None else datetime.fromisoformat(given.replace("Z", "+00:00"))


def test_a_deadline_moved_is_said_as_submit_says_one(cli):
    run, task = cli
    job = _submit(run, task)
    r = run("deadline", job, "12h")
    assert re.fullmatch(rf"{job}: deadline \d{{4}}-\d\d-\d\d \d\d:\d\dZ \(in 12(\.0)? h\)\n", r.stdout), r.stdout
    moved = _deadline(run, job)
    assert abs(moved.timestamp() - (datetime.now(timezone.utc) + timedelta(hours=12)).timestamp()) < 60
    events = json.loads(run("--json", "events", job).stdout)
    assert any(e["event"] == "deadline_changed" and e["reason"].endswith(" by admin") for e in events), events


def test_a_time_without_its_zone_is_read_on_this_machines_clock_as_submit_reads_it(cli):
    run, task = cli
    job = _submit(run, task)
    meant = (datetime.now(timezone.utc) + timedelta(days=3)).astimezone(ZoneInfo("Asia/Tokyo")).replace(
        second=0, microsecond=0)
    typed = meant.strftime("%Y-%m-%d %H:%M")
    r = run("deadline", job, typed, extra_env={"TZ": "Asia/Tokyo"})
    assert f"note: deadline {typed} gives no time zone: read on this machine's clock (Asia/Tokyo), as " \
           f"{meant.isoformat(timespec='minutes')}" in r.stderr, r.stderr
    assert _deadline(run, job) == meant
    assert f"{job}: deadline {meant.astimezone(timezone.utc):%Y-%m-%d %H:%M}Z (in 3 days)" in r.stdout, r.stdout


def test_a_deadline_is_removed_with_none(cli):
    run, task = cli
    job = _submit(run, task)
    assert run("deadline", job, "--none").stdout == f"{job}: no deadline\n"
    assert _deadline(run, job) is None
    assert json.loads(run("--json", "deadline", job, "3h").stdout)["deadline"] is not None


@pytest.mark.parametrize("args, says", [
    (("2m",), "deadline: is 120 s away, but the job needs 180 s (broker.expected_hours) and a changeover of 5 s to "
              "start: it cannot be met even on on-demand (65 s short)"),
    (("9:00",), "deadline '9:00': a time needs its date"),
    (("2020-01-01T00:00Z",), "deadline: is in the past"),
], ids=["too close to meet even on on-demand → the broker's figures", "a time alone → the CLI says what is missing",
        "in the past → refused"])
def test_a_deadline_refused_says_why_and_exits_1_leaving_the_job_as_it_was(cli, args, says):
    run, task = cli
    job = _submit(run, task)
    before = _deadline(run, job)
    r = run("deadline", job, *args, check=False)
    assert r.returncode == 1 and says in r.stderr, r.stderr
    assert _deadline(run, job) == before


def test_neither_or_both_of_a_deadline_and_none_is_a_usage_error(cli):
    run, task = cli
    job = _submit(run, task)
    assert run("deadline", job, check=False).returncode == 2
    both = run("deadline", job, "6h", "--none", check=False)
    assert both.returncode == 2 and "not both" in both.stderr, both.stderr


def test_an_ended_jobs_deadline_is_refused_naming_its_state(cli):
    run, task = cli
    job = _submit(run, task)
    run("cancel", job)
    r = run("--json", "deadline", job, "6h", check=False)
    said = json.loads(r.stdout)
    assert r.returncode == 1 and said["status"] == 409 and "has already ended (cancelled)" in said["error"], said


# -- submit --expected-hours ---------------------------------------------------------------------------------------

def test_expected_hours_sets_the_tasks_and_says_it_overrides_the_files(cli):
    run, task = cli
    r = run("--json", "submit", str(task), "--expected-hours", "0.5", "--dry-run")
    assert json.loads(r.stdout)["expected_hours"] in ("0.5", 0.5), r.stdout
    r = run("submit", str(task), "--expected-hours", "0.5")
    assert "note: --expected-hours 0.5 overrides the task's broker.expected_hours 0.05" in r.stderr, r.stderr


@pytest.mark.parametrize("given, says", [
    ("abc", "--expected-hours: must be a number of hours"),
    ("-1", "--expected-hours: must be a positive number of hours"),
], ids=["not a number → refused naming the option", "negative → refused naming the option"])
def test_expected_hours_is_refused_in_the_tasks_words_naming_the_option(cli, given, says):
    run, task = cli
    r = run("--json", "submit", str(task), "--expected-hours", given, "--dry-run", check=False)
    said = json.loads(r.stdout)
    assert r.returncode == 1 and said["field"] == "--expected-hours" and said["error"].startswith(says), said


def test_a_deadline_expected_hours_cannot_meet_names_both_options(cli):
    run, task = cli
    r = run("--json", "submit", str(task), "--expected-hours", "0.02", "--deadline", "74s", check=False)
    said = json.loads(r.stdout)
    assert r.returncode == 1 and said["field"] == "--deadline", said
    assert said["error"].startswith("--deadline: is 74 s away, but the job needs 72 s (--expected-hours) and a "
                                    "changeover of 5 s to start"), said
