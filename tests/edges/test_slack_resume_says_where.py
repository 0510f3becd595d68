"""Slack's resume (the `resume` command and the *Resume* button) says the job's place in the queue and its rough start.

Its reply was "Resumed `j-…`. … — queued · spent …": neither the place in the queue nor roughly when it starts, which
the submit's reply says once this broker's engine has weighed the job (``Dispatcher._looked_at``). A resumed job's
version is past 1 long before the resume, so the reply waits for a write after the resume's own.

Through the real app with signed requests, as ``test_slack.py`` does (its helpers and fixtures).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import replace

import pytest
from fastapi.testclient import TestClient

from broker.lifecycle import AttemptState, JobState
from broker.models import Event
from broker.slack import dispatch
from broker.store import Change
from broker.store.sqlite import SqliteStore
from launchers.base import AttemptStatus, Phase

from . import world
from .conftest import build_app
from .fakes import FakeLauncher
from .test_slack import command, press, set_job, slack, slack_app, slack_settings, stub, text_of  # noqa: F401

NODE_LOST = {"class": "node_lost", "infrastructure": True, "text": "The node was lost."}


def _failed(store, job_id: str, at: float) -> None:
    """A job of team A that failed for the infrastructure's doing (a resume needs no force), checkpoint at step 400."""
    job = world.job(job_id, "team-a", JobState.FAILED, submitted=at, budget=5_000_000, spent=100_000, attempts=1,
                    reason="failed: the node was lost", diagnosis=NODE_LOST, updated=at + 600,
                    checkpoint={"step": 400, "uri": f"file:///ckpt/{job_id}/400", "at": at + 300})
    store.commit(Change(job=job, expected_version=None, events=[Event(
        job_id=job_id, time=at, event="submit", from_state=None, to_state="queued", reason="submitted", actor="test")],
        attempts=[world.attempt(job_id, 1, AttemptState.FAILED, world.onprem(200_000), start=at, seconds=600,
                                cost=100_000)]))


@pytest.fixture
def ticking(tmp_path, stub, monkeypatch):  # noqa: F811
    """A fresh store whose one pool (2 slots) a job expected to take an hour holds, two failed jobs of team A, and the
    app with its engine running (ticking every 0.2 s): returns the client, the store and when that job should end."""
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
    for n, job_id in enumerate(("j-f1", "j-f2")):
        _failed(store, job_id, since - 3600 + n)
    settings = replace(slack_settings(tmp_path, stub), engine=True, tick_seconds=0.2)
    app = build_app(settings, store, launcher=launcher, engine=True)
    app.state.notifier.sleep = lambda s: None
    with TestClient(app) as client:  # its lifespan starts the engine's thread
        yield client, store, since + 3600
    app.state.notifier.close()
    store.close()


def test_a_slack_resume_behind_a_full_pool_says_roughly_when_it_starts(ticking, stub):  # noqa: F811
    client, store, end = ticking
    said = text_of(command(client, "resume j-f1").json())
    assert "Resumed `j-f1`" in said, said
    found = re.search(r"#1 in queue, roughly starting at <!date\^(\d+)\^", said)
    assert found, said
    assert abs(int(found[1]) - end) <= 60, (found[1], end)  # when the job holding the pool is expected to end

    # the Resume button says it too: the second waits behind the first
    r = press(client, "broker_resume", json.dumps({"job": "j-f2"}), response_url=f"{stub.url}/respond/f2")
    assert r.status_code == 200
    said = text_of(stub.wait_for("/respond/f2")[0])
    assert "Resumed `j-f2`" in said and "#2 in queue" in said, said
    assert store.get_job("j-f2").state is JobState.QUEUED


def test_a_slack_resume_with_no_engine_to_weigh_it_says_its_position_at_once(slack, store, monkeypatch):  # noqa: F811
    """A broker process without an engine (an API worker) answers at once: the position, as the submit's reply."""
    monkeypatch.setattr(dispatch, "SUBMIT_SETTLE_SECONDS", 30.0)
    set_job(store, "j-b1", diagnosis=NODE_LOST)
    started = time.monotonic()
    said = text_of(command(slack, "resume j-b1", user="U_B").json())
    assert "Resumed `j-b1`" in said and "#2 in queue" in said, said  # behind team A's j-a3
    assert time.monotonic() - started < 15  # it did not wait for a decision no engine here makes
