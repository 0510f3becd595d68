"""Slack walkthrough 2: refusals and notifications in Slack's own words."""

from __future__ import annotations

import time
from dataclasses import replace

from broker.lifecycle import JobState
from broker.models import Event

from .test_slack import PREEMPTED, command, engine_event, slack, slack_app, stub, text_of  # noqa: F401  (fixtures)


def test_a_budget_under_what_was_spent_is_refused_in_the_commands_word(slack):
    said = text_of(command(slack, "budget j-a2 $0.001").json())  # j-a2 spent $1.50
    assert "budget: " in said and "is below what the job already spent" in said, said
    assert "budget_usd" not in said


def test_a_preemption_says_the_tier_and_the_attempt_in_one_parenthesis(slack_app, store, stub):
    job = replace(store.get_job("j-a1"), last_checkpoint={"step": 2400, "uri": "file:///c/2400", "at": 0})
    slack_app.state.notifier.handle(engine_event(job, "recover", attempt=1, **PREEMPTED), job)
    (msg,) = stub.wait_for("/api/chat.postMessage")
    assert "was preempted in us-east-1a (spot, attempt 1).\n" in text_of(msg), text_of(msg)


def test_a_cancelled_jobs_end_says_who_cancelled_it(slack_app, slack, store, stub):
    assert "Cancelling j-a2" in text_of(command(slack, "cancel j-a2").json())  # running: the engine ends it later
    job = replace(store.get_job("j-a2"), state=JobState.CANCELLED)
    ended = Event(job_id="j-a2", time=time.time(), event="ended", from_state="cancelling", to_state="cancelled",
                  reason="cancelled", actor="engine", attempt=1)
    slack_app.state.notifier.handle(ended, job)
    (msg,) = stub.wait_for("/api/chat.postMessage")
    assert "train-j-a2 j-a2 (team-a) was cancelled by slack:U_A." in msg["text"], msg["text"]


def test_a_submit_budget_too_small_is_refused_in_the_commands_word(slack):
    """A submit's refusal named the task's field, "broker.budget_usd: the budget of $0.00001 cannot pay for a start",
    where docs/slack.md promises the command's own word, `budget`, as `budget=$0` was answered."""
    said = text_of(command(slack, "submit budget=$0.00001\nname: tiny\nrun: echo hi").json())
    assert said.startswith(":warning: budget: ") and "cannot pay for a start" in said, said
    assert "budget_usd" not in said, said
