"""A job's deadline changed after its submit (QA, a PhD student working to deadlines: there was no way to, and
``PATCH /v1/jobs/{id}`` was a 405): ``POST /v1/jobs/{id}/deadline`` with ``{"deadline": "12h"}`` or ``null``, read as a
submit's ``broker.deadline`` is, refused as it is, one write with a ``deadline_changed`` event; and the engine's spot
policy and safety net use the new deadline from their next tick.

The API runs in this process on SQLite (its engine off); the engine tests run the service and engine in this process
with the local launcher (real runner processes) on simulated spot and on-demand zones."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest
from fastapi.testclient import TestClient

from broker.api.app import create_app
from broker.auth import Principal
from broker.engine.schedule import SPOT_WAIT
from broker.lifecycle import JobState
from broker.service import Conflict, Invalid
from broker.store import open_store

from broker_testing import ADMIN, TEAM_TOKENS, local_broker, wait_for

CONFIG = """
zones:
  - {name: sim-a, tier: spot, instance_type: g5.xlarge, grace_seconds: 2}
  - {name: sim-od, tier: ondemand, instance_type: g5.xlarge}
changeover_seconds: 5
"""
TASK = {"name": "train", "resources": {"accelerators": "A10G:1"}, "run": "echo hi",
        "broker": {"budget_usd": "5", "expected_hours": "0.05", "deadline": "6h"}}  # 180 s of work


@pytest.fixture
def client(make_settings, tmp_path):
    settings = make_settings(config=CONFIG)
    app = create_app(settings, store=open_store(f"sqlite://{tmp_path / 'api.db'}"), engine=False)
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def auth(token=ADMIN):
    return {"Authorization": f"Bearer {token}"}


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _submit(client, token=ADMIN, **broker):
    r = client.post("/v1/jobs", json={**TASK, "broker": {**TASK["broker"], **broker}}, headers=auth(token))
    assert r.status_code == 201, r.text
    return r.json()


def _changes(client, job_id, token=ADMIN):
    events = client.get(f"/v1/jobs/{job_id}/events", headers=auth(token)).json()["events"]
    return [e for e in events if e["event"] == "deadline_changed"]


def test_a_deadline_moved_after_submit_is_stored_with_an_event_naming_who_and_both(client):
    job = _submit(client)
    before = _epoch(job["deadline"])
    r = client.post(f"/v1/jobs/{job['id']}/deadline", json={"deadline": "12h"}, headers=auth())
    assert r.status_code == 200, r.text
    after = _epoch(r.json()["deadline"])
    assert after == pytest.approx(time.time() + 12 * 3600, abs=60)
    assert _epoch(client.get(f"/v1/jobs/{job['id']}", headers=auth()).json()["deadline"]) == after
    (change,) = _changes(client, job["id"])
    say = lambda t: time.strftime("%Y-%m-%d %H:%MZ", time.gmtime((int(t) + 30) // 60 * 60))  # noqa: E731
    assert change["reason"] == f"deadline {say(before)} → {say(after)} by admin", change
    assert change["actor"] == "admin" and change["from"] == change["to"] == "queued", change
    assert change["data"] == {"old": pytest.approx(before, abs=1), "new": pytest.approx(after, abs=1)}, change


def test_a_deadline_is_removed_with_null_and_set_again_on_a_job_that_had_none(client):
    job = _submit(client)
    r = client.post(f"/v1/jobs/{job['id']}/deadline", json={"deadline": None}, headers=auth())
    assert r.status_code == 200 and r.json()["deadline"] is None, r.text
    assert _changes(client, job["id"])[-1]["reason"].endswith(" → none by admin")
    at = (datetime.now(timezone.utc) + timedelta(days=2)).replace(second=0, microsecond=0)
    r = client.post(f"/v1/jobs/{job['id']}/deadline", json={"deadline": at.strftime("%Y-%m-%dT%H:%MZ")},
                    headers=auth())
    assert r.status_code == 200 and _epoch(r.json()["deadline"]) == at.timestamp(), r.text
    assert _changes(client, job["id"])[-1]["reason"].startswith("deadline none → ")
    # the same time again: nothing to change, no second event
    again = client.post(f"/v1/jobs/{job['id']}/deadline", json={"deadline": at.isoformat()}, headers=auth())
    assert again.status_code == 200 and len(_changes(client, job["id"])) == 2, again.text


def test_a_team_cannot_change_another_teams_jobs_deadline_and_a_job_no_one_has_is_a_404(client):
    job = _submit(client, TEAM_TOKENS["vision"])
    r = client.post(f"/v1/jobs/{job['id']}/deadline", json={"deadline": "12h"}, headers=auth(TEAM_TOKENS["nlp"]))
    assert r.status_code == 404 and r.json()["field"] == "job_id", r.text
    assert client.get(f"/v1/jobs/{job['id']}", headers=auth()).json()["deadline"] == job["deadline"]
    assert _changes(client, job["id"]) == []
    mine = client.post(f"/v1/jobs/{job['id']}/deadline", json={"deadline": "12h"}, headers=auth(TEAM_TOKENS["vision"]))
    assert mine.status_code == 200, mine.text
    assert client.post("/v1/jobs/j-0000000000/deadline", json={"deadline": "1h"}, headers=auth()).status_code == 404


def test_an_ended_jobs_deadline_is_refused_with_a_409_naming_its_state(client):
    job = _submit(client)
    assert client.post(f"/v1/jobs/{job['id']}/cancel", headers=auth()).json()["state"] == "cancelled"
    r = client.post(f"/v1/jobs/{job['id']}/deadline", json={"deadline": "12h"}, headers=auth())
    assert r.status_code == 409 and r.json()["field"] == "state", r.text
    assert "has already ended (cancelled)" in r.json()["detail"], r.text
    assert _changes(client, job["id"]) == []


@pytest.mark.parametrize("body, says", [
    pytest.param({"deadline": "-2h"}, "deadline: -2h is negative", id="a negative duration → refused as at submit"),
    pytest.param({"deadline": "2020-01-01T00:00Z"}, "deadline: is in the past", id="a time past → refused"),
    pytest.param({"deadline": "400d"}, "deadline: is more than 366 days away", id="over a year away → refused"),
    pytest.param({"deadline": "2099-01-01 09:00"}, "deadline: has no timezone", id="a time with no zone → refused"),
    pytest.param({"deadline": "6"}, "deadline: 6 has no unit", id="a number with no unit → refused"),
    pytest.param({"deadline": "2m"}, "deadline: is 120 s away, but the job needs 180 s (broker.expected_hours) and a "
                                     "changeover of 5 s to start: it cannot be met even on on-demand (65 s short)",
                 id="sooner than the job can finish even on on-demand → refused with the figures"),
    pytest.param({"deadline": "3m"}, "deadline: is 180 s away, but the job needs 180 s (broker.expected_hours) and a "
                                     "changeover of 5 s to start: it cannot be met even on on-demand (5 s short)",
                 id="its work fits but not the changeover → refused"),
    pytest.param({"deadlin": "6h"}, "deadline: is required: send {\"deadline\": \"6h\"}, or {\"deadline\": null} to "
                                    "remove it; 'deadlin' is not a field this takes (did you mean 'deadline'?)",
                 id="a misspelt key → the field is required, the key named"),
    pytest.param({"deadline": "6h", "budget_usd": "3"}, "budget_usd: is not a field this takes",
                 id="another key → refused, nothing half-applied"),
])
def test_a_deadline_the_broker_refuses_at_submit_is_refused_here_and_nothing_changes(client, body, says):
    job = _submit(client)
    r = client.post(f"/v1/jobs/{job['id']}/deadline", json=body, headers=auth())
    assert r.status_code == 422 and r.json()["detail"].startswith(says), r.text
    assert client.get(f"/v1/jobs/{job['id']}", headers=auth()).json()["deadline"] == job["deadline"]
    assert _changes(client, job["id"]) == []


ADMIN_P = Principal("admin", None, admin=True)
ZONES = """
zones:
  - {name: sim-a, tier: spot, instance_type: g5.xlarge, grace_seconds: 2}
  - {name: sim-od, tier: ondemand, instance_type: g5.xlarge}
changeover_seconds: 5
stop_grace_seconds: 2
tick_seconds: 0.05
"""
LONG = {"name": "t_long", "run": "sleep 600", "resources": {"accelerators": "A10G:1"},
        "broker": {"budget_usd": "5", "deadline": "30m", "expected_hours": "0.05"}}


def _kill_runs(store, launcher, job_id):
    """Every run of the job killed, each once its runner is up: a launch's runner takes its lock a moment after the
    tick that launched it, and a kill before that found nothing to kill (the run went on after the test)."""
    for attempt in store.attempts(job_id):
        wait_for(lambda: launcher.status(attempt.id).phase.value != "pending", timeout=10)
        launcher.kill(attempt.id)


def _ticks(engine, n=5):
    for _ in range(n):
        engine.tick()
        time.sleep(0.02)


def test_a_queued_job_waiting_for_spot_goes_to_on_demand_at_the_next_tick_once_its_deadline_is_tight(
        make_settings, tmp_path):
    """30 min away, the job's spot policy waits for spot (its zone down); moved to 200 s away (180 s of work and a
    5 s changeover: it fits on on-demand, not after another minute's wait), the engine's next tick places it on
    on-demand: it reads the job's deadline afresh, nothing of the old one kept."""
    with local_broker(make_settings, tmp_path, ZONES) as (service, engine, store, launcher):
        launcher.set_zone_available("sim-a", False)
        job = service.submit(ADMIN_P, LONG)[0]
        try:
            _ticks(engine)
            waiting = store.get_job(job.id)
            assert waiting.state is JobState.QUEUED and waiting.reason.startswith(SPOT_WAIT), waiting.reason
            moved = service.set_deadline(ADMIN_P, job.id, "200s")
            assert moved.deadline == pytest.approx(time.time() + 200, abs=5)
            wait_for(lambda: engine.tick() or store.get_job(job.id).state is not JobState.QUEUED, timeout=10)
            placed = store.get_job(job.id)
            assert placed.placement.get("tier") == "ondemand", (placed.state, placed.reason, placed.placement)
        finally:
            _kill_runs(store, launcher, job.id)


def test_a_running_job_on_spot_whose_deadline_is_tightened_is_moved_by_the_safety_net(make_settings, tmp_path):
    """Running on spot with 30 min to go; its deadline moved to 200 s away: the safety net, at the engine's next
    look, moves it to on-demand to meet it (pinned there by the deadline), with no other word from anyone."""
    with local_broker(make_settings, tmp_path, ZONES) as (service, engine, store, launcher):
        job = service.submit(ADMIN_P, LONG)[0]
        try:
            wait_for(lambda: engine.tick() or store.get_job(job.id).state is JobState.RUNNING, timeout=15)
            running = store.get_job(job.id)
            assert running.placement.get("tier") == "spot", running.placement
            _ticks(engine)
            assert store.get_job(job.id).force_tier is None  # 30 min away, spot is kept
            service.set_deadline(ADMIN_P, job.id, "200s")
            wait_for(lambda: engine.tick() or store.get_job(job.id).force_tier == "ondemand", timeout=10)
            moved = store.get_job(job.id)
            assert moved.pinned_by == "deadline", (moved.pinned_by, moved.reason)
        finally:
            _kill_runs(store, launcher, job.id)


def test_a_job_being_cancelled_keeps_its_deadline_409(make_settings, tmp_path):
    with local_broker(make_settings, tmp_path, ZONES) as (service, engine, store, launcher):
        job = service.submit(ADMIN_P, LONG)[0]
        try:
            wait_for(lambda: engine.tick() or store.get_job(job.id).state is JobState.RUNNING, timeout=15)
            assert service.cancel(ADMIN_P, job.id).state is JobState.CANCELLING
            with pytest.raises(Conflict) as refused:
                service.set_deadline(ADMIN_P, job.id, "2h")
            assert refused.value.field == "state" and "(cancelling)" in str(refused.value), refused.value
        finally:
            _kill_runs(store, launcher, job.id)


def test_a_running_job_is_refused_a_deadline_it_cannot_meet_from_where_it_stands(make_settings, tmp_path):
    """The check counts the work left and a changeover to on-demand from now, as the safety net does."""
    with local_broker(make_settings, tmp_path, ZONES) as (service, engine, store, launcher):
        job = service.submit(ADMIN_P, LONG)[0]
        try:
            wait_for(lambda: engine.tick() or store.get_job(job.id).state is JobState.RUNNING, timeout=15)
            with pytest.raises(Invalid) as refused:
                service.set_deadline(ADMIN_P, job.id, "90s")
            assert refused.value.field == "deadline", refused.value
            assert "(broker.expected_hours) and a changeover of 5 s to start" in refused.value.reason, refused.value
            assert "cannot be met even on on-demand" in refused.value.reason, refused.value
            assert store.get_job(job.id).deadline == job.deadline
        finally:
            _kill_runs(store, launcher, job.id)


def test_a_retry_of_the_submit_after_its_deadline_was_moved_is_still_the_same_submit(client):
    """The Idempotency-Key compares a retry with the deadline the job was admitted with, as it does the budget (which
    may have been raised since): after `broker deadline`, a retry of the submit as it was was a 422 "already used
    ... with a different task"."""
    headers = {**auth(), "Idempotency-Key": "ddl-retry-1"}
    first = client.post("/v1/jobs", json=TASK, headers=headers)
    assert first.status_code == 201, first.text
    job = first.json()
    assert client.post(f"/v1/jobs/{job['id']}/deadline", json={"deadline": "12h"}, headers=auth()).status_code == 200
    retry = client.post("/v1/jobs", json=TASK, headers=headers)
    assert retry.status_code == 200 and retry.json()["id"] == job["id"], retry.text
    other = client.post("/v1/jobs", json={**TASK, "broker": {**TASK["broker"], "deadline": "12h"}}, headers=headers)
    assert other.status_code == 422 and other.json()["field"] == "Idempotency-Key", other.text
