"""Slack's submit reply says roughly when the job starts ("#1 in queue, roughly starting at …"), but not that this start
is too late for the job's deadline, which `status` and `queue` say ("estimated to start at …, after its deadline at
…"): now it does, in those words (``broker/slack/dispatch.py``, the submit's reply). Through the real app with signed
requests and its engine ticking, as ``tests/edges/test_slack_resume_says_where.py`` does (its helpers)."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from edges import world
from edges.conftest import build_app
from edges.fakes import FakeLauncher
from edges.test_slack import command, slack_settings, stub, text_of  # noqa: F401
from fastapi.testclient import TestClient

from broker.lifecycle import AttemptState, JobState
from broker.slack import dispatch
from broker.store import Change
from broker.store.sqlite import SqliteStore
from launchers.base import AttemptStatus, Phase


@pytest.fixture
def full_pool(tmp_path, stub, monkeypatch):  # noqa: F811
    """The one pool (2 slots) held by a job expected to end in 50 min; the app with its engine ticking."""
    monkeypatch.setattr(dispatch, "SUBMIT_SETTLE_SECONDS", 20.0)
    store = SqliteStore(tmp_path / "late.db")
    launcher = FakeLauncher()
    since = time.time() - 600
    holder = world.job("j-hold", "team-b", JobState.RUNNING, submitted=since - 60, budget=5_000_000, spent=0,
                       attempts=1, reason="the attempt started", placement=world.onprem(200_000), updated=since)
    holder.running_since, holder.expected_hours, holder.slots = since, "1", [0, 1]
    store.commit(Change(job=holder, expected_version=None, attempts=[
        world.attempt("j-hold", 1, AttemptState.RUNNING, world.onprem(200_000), start=since, seconds=0, cost=0,
                      running=True)]))
    launcher.statuses["j-hold-a1"] = AttemptStatus(Phase.RUNNING, started_at=since)
    app = build_app(replace(slack_settings(tmp_path, stub), engine=True, tick_seconds=0.2), store, launcher=launcher,
                    engine=True)
    app.state.notifier.sleep = lambda s: None
    with TestClient(app) as client:
        yield client
    app.state.notifier.close()
    store.close()


def test_a_slack_submit_whose_start_is_too_late_for_its_deadline_says_so(full_pool):
    said = text_of(command(full_pool, "submit budget=$4 deadline=10min expected_hours=0.05\nname: due\n"
                                      "run: echo hi").json())
    assert "#1 in queue, roughly starting at" in said, said
    assert "; estimated to start at " in said and ", after its deadline at " in said, said


def test_one_that_meets_its_deadline_is_told_nothing_more(full_pool):
    said = text_of(command(full_pool, "submit budget=$4 deadline=3h expected_hours=0.05\nname: due\n"
                                      "run: echo hi").json())
    assert "#1 in queue, roughly starting at" in said and "estimated to start at" not in said, said
