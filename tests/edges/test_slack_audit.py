"""Slack answers an auditor found wrong against a real broker: which jobs `status` lists as recently ended, a
mistyped job id in `costs`, a budget warning's time left, Slack's retry of a command, a malformed `broker:`
section under submit options, and "Not now" on refusals that never pass.

Each goes through the real app with signed requests, as ``test_slack.py`` does (its helpers and fixtures)."""

from __future__ import annotations

import re

import time
from dataclasses import replace

from broker.lifecycle import AttemptState, JobState
from broker.store import Change
from broker.store.base import StoreUnavailable

from . import world
from .test_slack import (  # noqa: F401  (fixtures: pytest finds them by name in this module)
    command, engine_app, engine_event, retried, running, slack, slack_app, stub, text_of,
)

H = 3600


def ended(store, job_id: str, state: JobState, *, submitted: float, ended_at: float, team: str = "team-a"):
    job = world.job(job_id, team, state, submitted=submitted, budget=5_000_000, spent=100_000, attempts=1,
                    reason=f"{state.value}: test", updated=ended_at)
    store.commit(Change(job=job, expected_version=None, attempts=[
        world.attempt(job_id, 1, AttemptState.SUCCEEDED if state is JobState.SUCCEEDED else AttemptState.FAILED,
                      world.onprem(200_000), start=submitted, seconds=int(ended_at - submitted), cost=100_000)]))


# -- 1. status: the jobs that ended most recently, not the ended jobs submitted most recently ---------------


def test_status_lists_a_long_job_that_just_failed_among_the_recently_ended(slack, store):
    now = time.time()
    # five short jobs, submitted in the last hour and ended within minutes of it
    for i in range(5):
        ended(store, f"j-short{i}", JobState.SUCCEEDED, submitted=now - H + i * 60, ended_at=now - H + i * 60 + 300)
    # a long job submitted two days ago that failed a moment ago
    ended(store, "j-long", JobState.FAILED, submitted=now - 48 * H, ended_at=now - 10)
    said = text_of(command(slack, "status").json())
    assert "j-long" in said, said
    assert "2 active job(s), 5 recently ended" in said
    # the five that ended last, latest first: the long job, then the short ones from the newest
    shown = [i for i in ("j-long", "j-short4", "j-short3", "j-short2", "j-short1") if i in said]
    assert shown == ["j-long", "j-short4", "j-short3", "j-short2", "j-short1"]
    assert said.index("j-long") < said.index("j-short4") < said.index("j-short1")
    assert "j-short0" not in said and "j-a1" not in said  # ended earlier than those five


def test_status_still_lists_jobs_that_ended_long_ago_when_few_ended_lately(slack, store):
    now = time.time()
    ended(store, "j-old", JobState.CANCELLED, submitted=now - 90 * 24 * H, ended_at=now - 80 * 24 * H)
    said = text_of(command(slack, "status").json())
    assert "2 recently ended" in said and "j-old" in said and "j-a1" in said
    assert said.index("j-a1") < said.index("j-old")  # j-a1 ended three days ago, j-old eighty


# -- 2. costs <a mistyped job id>: a job id, not a team ------------------------------------------------------


def test_costs_of_a_mistyped_or_partial_job_id_says_no_such_job_not_a_team(slack, store):
    said = text_of(command(slack, "costs j-a").json())
    assert "only your team" not in said
    assert "No job `j-a` that you can see. Did you mean `j-a3` or `j-a2` or `j-a1`?" in said, said
    said = text_of(command(slack, "costs j-a1x").json())
    assert "No job `j-a1x` that you can see." in said and "only your team" not in said
    said = text_of(command(slack, "costs J-A2 30d").json())  # an id in capitals is an id too
    assert "No job `J-A2` that you can see. Did you mean `j-a2`?" in said, said
    # as `status <id>` answers the same word
    assert "No job `j-a1x` that you can see." in text_of(command(slack, "status j-a1x").json())
    # an admin's typo is a job id too, not "there is no team 'j-b'"
    said = text_of(command(slack, "costs j-b", user="U_ADMIN").json())
    assert "Did you mean `j-b1`?" in said and "no team" not in said, said
    # another team's job is still not named to a team member
    said = text_of(command(slack, "costs j-b", user="U_A").json())
    assert "No job `j-b` that you can see." in said and "j-b1" not in said


def test_costs_of_a_team_whose_name_begins_like_a_job_id_is_that_team(slack, store):
    now = time.time()
    ended(store, "j-ops1", JobState.SUCCEEDED, submitted=now - 2 * H, ended_at=now - H, team="j-ops")
    said = text_of(command(slack, "costs j-ops", user="U_ADMIN").json())
    assert "Spend for j-ops" in said, said
    assert "Spend for team-a" in text_of(command(slack, "costs team-a", user="U_ADMIN").json())
    assert "only your team's costs (team-a)" in text_of(command(slack, "costs team-b").json())


# -- 3. a budget warning says how little is left ------------------------------------------------------------


def test_an_engine_budget_warning_seconds_from_the_end_says_seconds_and_that_it_is_stopping(engine_app, stub):
    store, engine = engine_app.state.service.store, engine_app.state.engine
    # $3.60/h for an hour: $3.60 of $3.604, four seconds of budget left at that price (less the part of a second
    # the tick came after the hour, billed too)
    running(engine_app, "j-cap", "team-b", world.onprem(3_600_000), budget=3_604_000, checkpoint_step=900,
            last_step=950)
    engine.tick()
    job = store.get_job("j-cap")
    assert job.state is JobState.STOPPING and 3_600_000 <= job.spent < 3_601_000, job.spent
    said = text_of(stub.wait_for("/webhook/b")[0])
    assert "has used 99% of its budget" in said
    assert "6 minutes" not in said, said
    left = (job.budget - job.spent) * 3600 // 3_600_000  # whole seconds, rounded down: 4, or 3 a moment past the hour
    assert f"Under {left + 1} s left at $3.60/h" in said and "it is checkpointing and stopping now" in said, said


def warning(slack_app, store, stub, job) -> str:
    slack_app.state.notifier.handle(engine_event(job, "budget_warning", percent=90), job)
    return text_of(stub.wait_for("/api/chat.postMessage")[-1])


def test_a_budget_warning_never_rounds_the_time_left_up(slack_app, store, stub):
    job = store.get_job("j-a2")  # running on-demand at $3.00/h
    # 2 minutes 30 seconds left: under 3 minutes, not "under 6"
    said = warning(slack_app, store, stub, replace(job, budget=job.spent + 125_000))
    assert "Under 3 minutes left at $3.00/h" in said and "6 minutes" not in said, said
    assert "stopping" not in said  # still running: nothing says it stops


def test_a_budget_warning_an_hour_from_the_end_still_says_hours(slack_app, store, stub):
    job = store.get_job("j-a2")
    said = warning(slack_app, store, stub, replace(job, budget=job.spent + 3_300_000))  # 1.1 h at $3.00/h
    assert "About 1.1 h left at $3.00/h" in said, said


# -- 4. Slack's retry of a command ----------------------------------------------------------------------------


def test_a_retried_read_only_command_answers_again(slack, store):
    for text in ("status", "status j-a2", "queue", "costs", "costs j-a1", "help"):
        first, again = retried(slack, text, f"T.read.{text}")
        assert "not run twice" not in text_of(again), text
        assert text_of(again) == text_of(first), text


def _store_down_once(store, monkeypatch) -> None:
    """The store's first read of a job fails as a store that did not answer (a 503), the next ones work."""
    real, calls = store.get_job, []

    def down_once(job_id):
        calls.append(job_id)
        if len(calls) == 1:
            raise StoreUnavailable("the job store did not answer: timed out")
        return real(job_id)

    monkeypatch.setattr(store, "get_job", down_once)


def test_a_command_whose_first_try_failed_runs_when_slack_retries_it(slack_app, slack, store, monkeypatch):
    _store_down_once(store, monkeypatch)
    from urllib.parse import urlencode

    from .test_slack import signed
    body = urlencode({"command": "/broker", "text": "budget j-a2 $30", "user_id": "U_A", "trigger_id": "T.down",
                      "team_id": "T1", "channel_id": "C_A"})
    first = slack.post("/slack/commands", content=body, headers=signed(body))
    assert first.status_code == 503 and store.get_job("j-a2").budget == 2_000_000
    again = slack.post("/slack/commands", content=body, headers={**signed(body), "X-Slack-Retry-Num": "1"})
    assert "Budget raised from $2.00 to $30.00" in text_of(again.json()), again.text
    assert store.get_job("j-a2").budget == 30_000_000
    # taken now: a third copy is not run again
    third = slack.post("/slack/commands", content=body, headers={**signed(body), "X-Slack-Retry-Num": "2"})
    assert "not run twice" in text_of(third.json())
    assert [e.event for e in store.events("j-a2")].count("budget_changed") == 1


def test_a_button_press_whose_first_try_failed_acts_when_slack_retries_it(slack, store, stub, monkeypatch):
    import json
    from urllib.parse import urlencode

    from .test_slack import signed
    _store_down_once(store, monkeypatch)
    payload = {"type": "block_actions", "user": {"id": "U_A"}, "trigger_id": "T.press.down",
               "response_url": stub.url + "/respond/down",
               "actions": [{"action_id": "broker_raise_budget", "value": '{"job":"j-a2","budget":3000000}'}]}
    body = urlencode({"payload": json.dumps(payload)})
    assert slack.post("/slack/interactions", content=body, headers=signed(body)).status_code == 503
    assert store.get_job("j-a2").budget == 2_000_000
    again = slack.post("/slack/interactions", content=body, headers={**signed(body), "X-Slack-Retry-Num": "1"})
    assert again.status_code == 200
    assert "Budget raised from $2.00 to $3.00" in text_of(stub.wait_for("/respond/down")[0])
    assert store.get_job("j-a2").budget == 3_000_000


def test_a_refused_command_is_answered_again_when_retried(slack, store):
    # refused, nothing done: the retry answers (here: the same refusal), not "already taken"
    first, again = retried(slack, "budget j-a2 $1", "T.refused")
    # (its running attempt billed to now: $1.55 a moment after the fixture's start, where the engine last recorded
    # $1.50; a slow host reads it a cent later, $1.56, as a fresh-clone CI run did)
    spent = re.search(r"already spent \(\$(1\.5[5-9])\)", text_of(first))
    assert spent, text_of(first)
    assert re.search(r"already spent \(\$1\.5[5-9]\)", text_of(again)) and "not run twice" not in text_of(again)
    assert store.get_job("j-a2").budget == 2_000_000


# -- 5. submit options do not hide a malformed broker: section ------------------------------------------------


def test_submit_options_with_a_broker_section_that_is_not_a_mapping_are_refused(slack, store):
    before = len(store.list_jobs())
    without = text_of(command(slack, "submit\nname: bad\nrun: echo\nbroker: 5").json())
    assert "broker: must be a mapping" in without
    said = text_of(command(slack, "submit budget=$1\nname: bad\nrun: echo\nbroker: 5").json())
    assert "broker: must be a mapping" in said and "Submitted" not in said, said
    said = text_of(command(slack, "submit budget=$1 name=x\nrun: echo\nbroker: [1, 2]").json())
    assert "broker: must be a mapping" in said, said
    assert len(store.list_jobs()) == before
    # an empty broker: section (null) is no section, as without options; a mapping is merged with the options
    said = text_of(command(slack, "submit budget=$1\nname: empty\nrun: echo\nbroker:").json())
    assert "Submitted" in said, said
    said = text_of(command(slack, "submit budget=$2\nname: both\nrun: echo\nbroker:\n  priority: 3").json())
    assert "Submitted" in said, said
    job = next(j for j in store.list_jobs() if j.name == "both")
    assert (job.budget, job.priority) == (2_000_000, 3)


# -- 6. "Not now" only where it can pass ---------------------------------------------------------------------


def test_a_refusal_that_never_passes_does_not_say_not_now(slack, store):
    said = text_of(command(slack, "budget j-a1 $50").json())
    assert "Not now" not in said, said
    assert "j-a1 has already ended (succeeded): its budget no longer changes" in said
    said = text_of(command(slack, "cancel j-a1").json())
    assert "Not now" not in said and "j-a1 has already ended (succeeded): there is nothing to cancel" in said, said
    said = text_of(command(slack, "resume j-a1").json())
    assert "Not now" not in said and "only a failed or budget-stopped job resumes" in said, said
