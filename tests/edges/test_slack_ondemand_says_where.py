"""Slack's *Switch to on-demand* on a stopped or failed job (which resumes it) says where the job stands in the queue.

Its reply was "Switched to on-demand `j-…`. … — queued · spent …": neither the place in the queue nor roughly when it
starts, which the *Resume* button's reply says (``Dispatcher._looked_at`` and the service's ``queue_waits``). A job the
switch only pins (running, or already waiting) is answered as before.

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
from broker.slack import blocks, dispatch
from broker.store import Change
from broker.store.sqlite import SqliteStore
from launchers.base import AttemptStatus, Phase
from launchers.simzones import zones_from_config

from . import world
from .conftest import build_app
from .fakes import FakeLauncher
from .test_slack import press, slack_settings, stub, text_of  # noqa: F401
from .test_slack_resume_says_where import _failed  # a job failed for the infrastructure, checkpoint at 400

SWITCH = blocks.ACTIONS["switch_ondemand"]
ZONE = {"name": "sim-od", "tier": "ondemand", "instance_type": "g5.xlarge", "nodes": 1, "price_per_hour": "1.00"}
ON_ZONE = {"tier": "ondemand", "cloud": "aws", "region": "us-east-1", "zone": "sim-od", "location": "sim-od",
           "instance_type": "g5.xlarge", "price_per_hour": 1_000_000}


def _switched(client, stub, job_id: str, user: str, name: str, *, force: bool = False) -> str:  # noqa: F811
    """Press *Switch to on-demand* for ``job_id`` as ``user``: the reply Slack gets on the response URL, as text."""
    value = json.dumps({"job": job_id, **({"force": True} if force else {})})
    r = press(client, SWITCH, value, user=user, response_url=f"{stub.url}/respond/{name}")
    assert r.status_code == 200
    return text_of(stub.wait_for(f"/respond/{name}")[0])


@pytest.fixture
def no_engine(tmp_path, store, seeded, stub):  # noqa: F811
    """The seeded world (team A's j-a3 waiting, team B's j-b1 failed in its own code) and an on-demand zone, in a
    broker process that runs no engine (an API worker): its reply does not wait for a decision."""
    app = build_app(replace(slack_settings(tmp_path, stub), zones=zones_from_config([ZONE])), store)
    app.state.notifier.sleep = lambda s: None
    with TestClient(app) as client:
        yield client
    app.state.notifier.close()


def test_a_switch_that_resumes_a_failed_job_says_its_place_in_the_queue(no_engine, store, stub,  # noqa: F811
                                                                        monkeypatch):
    monkeypatch.setattr(dispatch, "SUBMIT_SETTLE_SECONDS", 30.0)
    started = time.monotonic()
    said = _switched(no_engine, stub, "j-b1", "U_B", "b1", force=True)
    assert "Switched to on-demand `j-b1`" in said and "#2 in queue" in said, said  # behind team A's j-a3
    assert time.monotonic() - started < 15  # it did not wait for a decision no engine here makes
    job = store.get_job("j-b1")
    assert (job.state, job.force_tier) == (JobState.QUEUED, "ondemand")


def test_a_switch_that_only_pins_a_waiting_job_is_answered_as_before(no_engine, store, stub):  # noqa: F811
    said = _switched(no_engine, stub, "j-a3", "U_A", "a3")
    assert "Switched to on-demand `j-a3`" in said and "in queue" not in said, said
    assert store.get_job("j-a3").force_tier == "ondemand"


@pytest.fixture
def ticking(tmp_path, stub, monkeypatch):  # noqa: F811
    """A fresh store whose one on-demand node a running job holds, two failed jobs of team A, and the app with its
    engine running (ticking every 0.2 s): returns the client, the store and when the holder should end."""
    monkeypatch.setattr(dispatch, "SUBMIT_SETTLE_SECONDS", 20.0)  # a loaded host's ticks; it returns at the decision
    store = SqliteStore(tmp_path / "ticking.db")
    launcher = FakeLauncher()
    since = time.time() - 600
    holder = world.job("j-hold", "team-b", JobState.RUNNING, submitted=since - 60, budget=5_000_000, spent=0,
                       attempts=1, reason="the attempt started", placement=ON_ZONE, updated=since)
    holder.running_since, holder.expected_hours = since, "1"
    store.commit(Change(job=holder, expected_version=None, attempts=[
        world.attempt("j-hold", 1, AttemptState.RUNNING, ON_ZONE, start=since, seconds=0, cost=0, running=True)]))
    launcher.statuses["j-hold-a1"] = AttemptStatus(Phase.RUNNING, started_at=since)
    for n, job_id in enumerate(("j-f1", "j-f2")):
        _failed(store, job_id, since - 3600 + n)
    settings = replace(slack_settings(tmp_path, stub), engine=True, tick_seconds=0.2, zones=zones_from_config([ZONE]))
    app = build_app(settings, store, launcher=launcher, engine=True)
    app.state.notifier.sleep = lambda s: None
    with TestClient(app) as client:  # its lifespan starts the engine's thread
        yield client, store, since + 3600
    app.state.notifier.close()
    store.close()


def test_a_switch_behind_a_full_zone_says_its_place_once_the_engine_has_weighed_it(ticking, stub):  # noqa: F811
    client, store, end = ticking
    said = _switched(client, stub, "j-f1", "U_A", "f1")
    assert "Switched to on-demand `j-f1`" in said, said
    found = re.search(r"#1 in queue, roughly starting at <!date\^(\d+)\^", said)
    assert found, said
    assert abs(int(found[1]) - end) <= 60, (found[1], end)  # when the job holding the zone's one node should end
    job = store.get_job("j-f1")
    assert (job.state, job.force_tier) == (JobState.QUEUED, "ondemand")
    assert not job.reason.startswith("resumed"), job.reason  # the engine weighed it before the reply was made

    said = _switched(client, stub, "j-f2", "U_A", "f2")
    assert "Switched to on-demand `j-f2`" in said and "#2 in queue" in said, said
