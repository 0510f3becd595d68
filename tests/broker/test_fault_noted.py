"""An injected fault is written into the job's events: who injected what, into which attempt.

Before, `broker fault preempt|kill JOB` left no trace on the job: its preemption (or lost node) read as the cloud's
in its events, its costs and /metrics alike. A zone fault has no job: the serve log says who set the zone. The engine,
the local launcher's simulated zones and real runner processes, on each store (SQLite and Redis).
"""

from __future__ import annotations

import logging
import time

import pytest

from broker.auth import Principal
from broker.engine.reconcile import Engine
from broker.lifecycle import JobState
from broker.runtime import open_launcher
from broker.service import BrokerService, Conflict

ADMIN = Principal("admin", None, admin=True)

CONFIG = """
pools: []
zones:
  - name: sim-spot
    tier: spot
    instance_type: g5.xlarge
    cloud_zone: us-east-1a
    grace_seconds: 1
tick_seconds: 0.05
stop_grace_seconds: 1
zone_cooldown_seconds: 600
"""


def _running(engine, store, job_id):
    for _ in range(200):
        engine.tick()
        if store.get_job(job_id).state is JobState.RUNNING:
            return store.get_job(job_id)
        time.sleep(0.05)
    raise AssertionError(f"{job_id} did not start: {store.get_job(job_id)}")


@pytest.mark.parametrize("kind, says", [
    ("preempt", "a preemption (notice, then its grace) injected into attempt 1 by admin (broker fault preempt)"),
    ("kill", "a lost node (killed without notice) injected into attempt 1 by admin (broker fault kill)"),
])
def test_an_injected_fault_is_an_event_on_the_job_naming_who_and_what(make_settings, store, kind, says):
    settings = make_settings(config=CONFIG)
    launcher = open_launcher(settings)
    engine, service = Engine(settings, store, launcher), BrokerService(settings, store, launcher)
    job = service.submit(ADMIN, {"run": "sleep 60", "resources": {"accelerators": "A10G:1", "use_spot": True},
                                 "broker": {"budget_usd": "5"}})[0]
    try:
        _running(engine, store, job.id)
        assert service.inject_fault(ADMIN, kind, job_id=job.id)["applied"]
        (note,) = [e for e in store.events(job.id) if e.event == "fault_injected"]
        assert (note.actor, note.reason, note.attempt, note.data) == ("admin", says, 1, {"fault": kind,
                                                                                      "attempt": 1})
        assert note.from_state == note.to_state == "running"  # a note: the job's state is the engine's to change
        for _ in range(200):  # the engine then recovers it as any preemption or lost node, after the note
            engine.tick()
            if store.get_job(job.id).state is JobState.QUEUED:
                break
            time.sleep(0.05)
        names = [e.event for e in store.events(job.id)]
        assert names.index("fault_injected") < names.index("recover"), names
    finally:
        for a in store.attempts(job.id):
            launcher.stop(a.id, grace_seconds=0)


def test_a_zone_fault_has_no_job_and_is_a_line_in_the_log(make_settings, store, caplog):
    settings = make_settings(config=CONFIG)
    service = BrokerService(settings, store, open_launcher(settings))
    with caplog.at_level(logging.INFO, logger="broker.service"):
        service.inject_fault(ADMIN, "zone", zone="sim-spot", available=False)
    assert "fault injected by admin: spot capacity in zone sim-spot set unavailable" in caplog.text


@pytest.mark.parametrize("available, says", [
    (None, "spot capacity in zone sim-spot follows its trace again"),
    (True, "spot capacity in zone sim-spot set available"),
    (False, "spot capacity in zone sim-spot set unavailable"),
], ids=["no flag gives the zone back to its trace, not 'unavailable'", "--available is logged as available",
        "--unavailable is logged as unavailable"])
def test_the_zone_fault_log_line_says_what_was_done(make_settings, store, caplog, available, says):
    settings = make_settings(config=CONFIG)
    service = BrokerService(settings, store, open_launcher(settings))
    with caplog.at_level(logging.INFO, logger="broker.service"):
        service.inject_fault(ADMIN, "zone", zone="sim-spot", available=available)
    assert f"fault injected by admin: {says}" in caplog.text


@pytest.mark.parametrize("kind", ["preempt", "kill"])
def test_a_fault_sent_to_a_broker_that_did_not_launch_the_run_is_refused_naming_the_one_that_did(
        make_settings, store, tmp_path, kind):
    """Two brokers on one store, each on its own host (a data dir each): `broker fault preempt J` sent to the one
    that did not launch the run answered "it was already ending" (applied: false) while the job ran on."""
    here = make_settings(config=CONFIG)
    there = make_settings(config=CONFIG, BROKER_DATA_DIR=str(tmp_path / "other-host"))
    launcher, other = open_launcher(here), open_launcher(there)
    engine, service = Engine(here, store, launcher), BrokerService(here, store, launcher)
    job = service.submit(ADMIN, {"run": "sleep 60", "resources": {"accelerators": "A10G:1", "use_spot": True},
                                 "broker": {"budget_usd": "5"}})[0]
    try:
        _running(engine, store, job.id)
        with pytest.raises(Conflict, match=r"attempt 1 was launched by another broker process, whose launcher "
                                           r"\(local#\w+\) runs it: send the fault to that broker") as refused:
            BrokerService(there, store, other).inject_fault(ADMIN, kind, job_id=job.id)
        assert refused.value.field == "job_id"
        assert not [e for e in store.events(job.id) if e.event == "fault_injected"]
        assert store.get_job(job.id).state is JobState.RUNNING
        assert service.inject_fault(ADMIN, kind, job_id=job.id)["applied"]  # the broker that launched it applies it
    finally:
        for a in store.attempts(job.id):
            launcher.stop(a.id, grace_seconds=0)
