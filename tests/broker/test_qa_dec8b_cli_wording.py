"""Words a QA walk (Dec 8) found read wrong:

* a dry run's "the budget runs it for about 31 s on spot …; it cannot start it on on-demand at all" (two "it"s);
* a submit too late for its deadline said its start twice: "queued first in line: the pool gpu2 is full right now;
  estimated to start at … 07:40Z, after its deadline at … 07:38Z; estimated start 07:40Z";
* `teams: {~: …}` said "a team is named None", Python's word for YAML's null;
* `broker status`'s `next:` stacked two brackets: "continues it from the start (it saved no checkpoint) (not the
  job's own error)"."""

from __future__ import annotations

import io

import pytest
from broker_testing import ADMIN
from rich.console import Console

from broker import cli as broker_cli
from broker.config import ConfigError, load_settings

QUOTE = {"per_hour_only": True, "stop_seconds": 30,
         "tiers": [{"tier": "spot", "price_per_hour": 3_600_000, "after_run_seconds": 0},
                   {"tier": "ondemand", "price_per_hour": 10_000_000, "after_run_seconds": 3600}]}


def test_a_budget_that_runs_on_one_tier_and_cannot_start_on_another_says_it_once():
    said = broker_cli._budget_lasts({"quote": QUOTE, "budget": {"micros": 100_000}})
    assert "until its budget stop, a clean stop kept out of it; it cannot start on on-demand at all (" in said, said
    assert "cannot start it on" not in said, said


def test_a_budget_that_starts_it_on_no_tier_still_says_what_it_cannot_start():
    said = broker_cli._budget_lasts({"quote": QUOTE, "budget": {"micros": 1_000}})
    assert said.startswith(" — the budget cannot start it on spot or on-demand at all ("), said


class _Client:
    def __init__(self, job: dict):
        self._job = job

    def job(self, job_id: str) -> dict:
        return self._job


def _behind(job: dict) -> str:
    con = Console(file=io.StringIO(), width=400)
    broker_cli._say_behind(con, _Client(job), "j-1", since=1)
    return con.file.getvalue().strip()


LATE = ("waiting: the pool gpu2 is full right now; estimated to start at 2026-12-07 07:40Z, after its deadline at "
        "2026-12-07 07:38Z")


def test_a_submit_too_late_for_its_deadline_says_its_estimated_start_once():
    said = _behind({"state": "queued", "queue_position": 1, "version": 2, "reason": LATE,
                    "estimated_start": "2026-12-07T07:40:00Z"})
    assert said == ("queued first in line: the pool gpu2 is full right now; estimated to start at 2026-12-07 07:40Z, "
                    "after its deadline at 2026-12-07 07:38Z"), said


def test_a_submit_first_in_line_whose_reason_gives_no_start_still_says_its_estimated_start():
    said = _behind({"state": "queued", "queue_position": 1, "version": 2,
                    "reason": "waiting: the pool gpu2 is full right now", "estimated_start": "2026-12-07T07:40:00Z"})
    assert said.startswith("queued first in line: the pool gpu2 is full right now; estimated start ") \
        and said.endswith("07:40Z"), said


def test_a_team_named_null_is_said_to_be_named_null_not_none(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("teams: {~: {default_budget_usd: '5'}}\n")
    with pytest.raises(ConfigError) as caught:
        load_settings({"BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_ADMIN_TOKEN": ADMIN}, config_path=cfg)
    said = caught.value.located()
    assert said.endswith("teams: a team is named null: give each team a name"), said
    assert "None" not in said


def test_the_next_step_of_a_failure_not_the_jobs_own_has_one_bracket():
    job = {"id": "j-0123456789", "name": "n", "team": "t", "state": "failed", "reason": "r", "spent": {"usd": "$1"},
           "budget": {"usd": "$1"}, "attempt_list": [], "last_checkpoint": None,
           "diagnosis": {"class": "preempted", "infrastructure": True, "text": "Lost."}}
    assert broker_cli._next_step(job) == ("not the job's own error: `broker resume j-0123456789` continues it from "
                                          "the start (it saved no checkpoint)")
    job["last_checkpoint"] = {"step": 1200, "uri": "s3://b/run/step-1200"}
    assert broker_cli._next_step(job) == ("not the job's own error: `broker resume j-0123456789` continues it from "
                                          "its last checkpoint (step 1200)")
