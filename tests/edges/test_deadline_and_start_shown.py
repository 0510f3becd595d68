"""A job's deadline and rough start, said where a user looks for them.

Slack's `status` and `queue` lists said no job's deadline (`broker status` has its due column, `status <id>` its Due
field); the dashboard's open job said none either (its queue row did). Slack's submit reply gave a queue position but
no rough start, where `broker submit` said one once the engine had looked at the job.

Through the real app with signed requests, as ``test_slack.py`` does (its helpers and fixtures).
"""

from __future__ import annotations

import re
import time
from dataclasses import replace
from datetime import datetime, timezone

import pytest
from fastapi.testclient import TestClient

from broker.lifecycle import AttemptState, JobState
from broker.slack import dispatch
from broker.slack.blocks import local_time
from broker.store import Change
from broker.store.sqlite import SqliteStore
from launchers.base import AttemptStatus, Phase

from . import world
from .conftest import build_app
from .fakes import FakeLauncher
from .test_dashboard import chromium, server  # noqa: F401  (fixture: found by name)
from .test_slack import command, slack, slack_app, slack_settings, stub, text_of  # noqa: F401  (fixtures)


def _with_deadline(store, job_id: str, deadline: float) -> None:
    job = store.get_job(job_id)
    store.commit(Change(job=replace(job, deadline=float(deadline)), expected_version=job.version))


def _line_of(said: str, job_id: str) -> str:
    return next(line for line in said.splitlines() if f"`{job_id}`" in line)


# -- Slack's lists: the deadline of a job not ended ------------------------------------------------------------


def test_slacks_status_and_queue_lists_say_a_live_jobs_deadline_on_the_readers_clock(slack, store, seeded):
    due = int(seeded.now + 6 * 3600)
    _with_deadline(store, "j-a3", due)  # queued
    _with_deadline(store, "j-a1", due)  # succeeded: its deadline is history
    shown = f" · due {local_time(due)}"
    listed = text_of(command(slack, "status").json())
    assert shown in _line_of(listed, "j-a3"), listed
    assert "due" not in _line_of(listed, "j-a1") and "due" not in _line_of(listed, "j-a2"), listed  # none: no words
    assert shown in _line_of(text_of(command(slack, "queue").json()), "j-a3")
    # a job's own reply keeps its Due field, and says it once
    own = text_of(command(slack, "status j-a3").json())
    assert own.count(f"{due}^") == 1 and "*Due*" in own, own


# -- Slack's submit reply: the rough start, once the engine has weighed the job --------------------------------


@pytest.fixture
def ticking(tmp_path, stub, monkeypatch):
    """A fresh store whose one pool (2 slots) a job expected to take an hour holds, and the app with its engine
    running (``engine: on``, ticking every 0.2 s): returns the client and when that job should end."""
    monkeypatch.setattr(dispatch, "SUBMIT_SETTLE_SECONDS", 20.0)  # a loaded host's ticks; it returns at the decision
    store = SqliteStore(tmp_path / "ticking.db")
    launcher = FakeLauncher()
    since = time.time() - 600
    holder = world.job("j-hold", "team-b", JobState.RUNNING, submitted=since - 60, budget=5_000_000, spent=0,
                       attempts=1, reason="the attempt started", placement=world.onprem(200_000), updated=since)
    holder.running_since, holder.expected_hours, holder.slots = since, "1", [0, 1]
    store.commit(Change(job=holder, expected_version=None, attempts=[
        world.attempt("j-hold", 1, AttemptState.RUNNING, world.onprem(200_000), start=since, seconds=0, cost=0,
                      running=True)]))
    launcher.statuses["j-hold-a1"] = AttemptStatus(Phase.RUNNING, started_at=since)
    settings = replace(slack_settings(tmp_path, stub), engine=True, tick_seconds=0.2)
    app = build_app(settings, store, launcher=launcher, engine=True)
    app.state.notifier.sleep = lambda s: None
    with TestClient(app) as client:  # its lifespan starts the engine's thread
        yield client, since + 3600
    app.state.notifier.close()
    store.close()


def test_a_slack_submit_behind_a_full_pool_says_roughly_when_it_starts(ticking):
    client, end = ticking
    said = text_of(command(client, "submit budget=$4\nname: behind\nrun: echo hi").json())
    found = re.search(r"#1 in queue, roughly starting at <!date\^(\d+)\^", said)
    assert found, said
    assert abs(int(found[1]) - end) <= 60, (found[1], end)  # when the job holding the pool is expected to end
    assert "may start sooner" not in said, said  # the engine weighed it: the estimate, not the hedge


def test_a_slack_submit_with_no_engine_to_weigh_it_says_its_position_alone(slack, monkeypatch):
    """A broker process without an engine (an API worker) answers at once, as before: the position, hedged."""
    monkeypatch.setattr(dispatch, "SUBMIT_SETTLE_SECONDS", 30.0)
    started = time.monotonic()
    said = text_of(command(slack, "submit budget=$4\nname: behind\nrun: echo hi").json())
    assert "#2 in queue; it may start sooner" in said and "roughly" not in said, said
    assert time.monotonic() - started < 15  # it did not wait for a decision no engine here makes


# -- the dashboard's open job ----------------------------------------------------------------------------------


def test_the_dashboards_open_job_says_its_deadline_until_it_ends(server, store, seeded):  # noqa: F811
    from playwright.sync_api import expect

    due = int(seeded.now + 6 * 3600)
    _with_deadline(store, "j-a3", due)
    _with_deadline(store, "j-a1", due)
    shown = "· due " + datetime.fromtimestamp(due, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    with chromium() as browser:
        page = browser.new_page()
        page.goto(f"{server}/dashboard?token={world.TOKENS['team-a']}#job=j-a3")
        expect(page.locator("#job-summary")).to_contain_text(shown)
        assert page.text_content("#job-summary").startswith("queued · due ")
        page.goto(f"{server}/dashboard?token={world.TOKENS['team-a']}#job=j-a1")
        expect(page.locator("#job-title")).to_have_text("train-j-a1 (j-a1)")
        expect(page.locator("#job-summary")).to_contain_text("succeeded · spent")
        assert "due" not in page.text_content("#job-summary")
