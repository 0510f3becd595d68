"""A job whose deadline passes while it is not ended is told so, and nothing says the deadline can still be met.

A QA walk-through (both spot zones down, a spot-only job with a 3 min deadline): the job's reason kept saying "zones
sim-spot-a and sim-spot-b are full right now" past its deadline, no event said the deadline had passed, and the
placement 37 s after it read "(safety net: anything else could miss the deadline)" — missed already. Now the engine
notes ``deadline_passed`` once per job (whichever broker sees it first, across restarts: read back from its events),
the reason shown for a queued job past its deadline says so, and a placement after it says the job runs late.

And a spot-only job (``use_spot: true``) waiting for spot with a deadline was told "if spot does not come, it moves to
on-demand (or a free pool) by about …": no such offer fits it (``broker ondemand`` refuses it). It is told instead
that, if spot has not come by then, it cannot meet its deadline.

The engine and service run in this process on SQLite, with the local launcher (real runner processes).
"""

from __future__ import annotations

import time
from dataclasses import replace

from broker_testing import local_broker, run_until

from broker.auth import Principal
from broker.engine.reconcile import Engine
from broker.store import Change
from broker.views import job_view

ADMIN = Principal("admin", None, admin=True)
CONFIG = """
zones:
  - {name: sim-spot-a, tier: spot, instance_type: g5.xlarge, grace_seconds: 2}
  - {name: sim-spot-b, tier: spot, instance_type: g5.xlarge, grace_seconds: 2}
  - {name: sim-od, tier: ondemand, instance_type: g5.xlarge}
changeover_seconds: 5
stop_grace_seconds: 2
tick_seconds: 0.05
"""
SPOT_ONLY = {"name": "spot-only", "run": "sleep 60", "resources": {"accelerators": "A10G:1", "use_spot": True},
             "broker": {"budget_usd": 50, "deadline": "6h", "expected_hours": "0.02"}}
ANY_TIER = {"name": "any-tier", "run": "sleep 60", "resources": {"accelerators": "A10G:1"},
            "broker": {"budget_usd": 50, "deadline": "6h", "expected_hours": "0.02"}}


def _shown(service, store, job_id):
    """The job's reason as its API view shows it (made when read)."""
    job = store.get_job(job_id)
    q = service.queue_waits(ADMIN, of=[job])
    return job_view(job, position=q.positions.get(job.id), estimated_start=q.starts.get(job.id),
                    waiting=q.waiting.get(job.id))["reason"]


def _due(store, job_id, deadline):
    job = store.get_job(job_id)
    store.commit(Change(job=replace(job, deadline=deadline), expected_version=job.version))


def _passed(store, job_id):
    return [e for e in store.events(job_id) if e.event == "deadline_passed"]


def _ticks(engine, n=5):
    for _ in range(n):
        engine.tick()
        time.sleep(0.02)


def _told_in_slack_if_asked(heard):
    """The note reached the engine's event hook once, and Slack says it to a team that asked for it (opt-in, as
    ``past_expected_length``), with a cancel button."""
    from broker.slack.config import DEFAULT_EVENTS, EVENTS
    from broker.slack.messages import notification

    assert "deadline_passed" in EVENTS and "deadline_passed" not in DEFAULT_EVENTS
    ((event, job),) = heard
    reply = notification(event, job, [], [], dashboard_url="http://127.0.0.1:1/")
    assert reply.text.startswith(":alarm_clock: ") and "passed while it waited in the queue" in reply.text, reply.text
    assert any(e["action_id"] == "broker_cancel" for b in reply.blocks if b["type"] == "actions"
               for e in b["elements"]), reply.blocks


def test_a_spot_only_job_queued_past_its_deadline_is_told_once_and_its_late_placement_says_so(make_settings,
                                                                                              tmp_path):
    with local_broker(make_settings, tmp_path, CONFIG) as (service, engine, store, launcher):
        for zone in ("sim-spot-a", "sim-spot-b"):
            launcher.set_zone_available(zone, False)
        job = service.submit(ADMIN, SPOT_ONLY)[0]
        try:
            _ticks(engine)
            waiting = store.get_job(job.id)
            assert waiting.state.value == "queued", waiting.reason
            # issue 2: no on-demand or pool offer fits it: not told it moves there
            shown = _shown(service, store, job.id)
            assert "moves to on-demand" not in shown, shown
            assert "it may run only on spot (no on-demand or pool offer fits it): if spot does not come by about " \
                   in shown and shown.endswith(", it cannot meet its deadline"), shown
            assert _passed(store, job.id) == []

            # its deadline passes while it waits (as hours pass)
            heard = []  # what the engine hands its event hook (Slack's notifier)
            engine.on_event = lambda event, stored: heard.append((event, stored))
            deadline = time.time() - 5
            _due(store, job.id, deadline)
            _ticks(engine)
            (said,) = _passed(store, job.id)
            _told_in_slack_if_asked([h for h in heard if h[0].event == "deadline_passed"])
            at = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(int(deadline)))
            assert said.reason.startswith(f"its deadline at {at} passed while it waited in the queue ("), said.reason
            assert "sim-spot-a" in said.reason and "runs when it can start, late" in said.reason, said.reason
            assert said.data["state"] == "queued"
            shown = _shown(service, store, job.id)
            assert f"its deadline at {at} passed " in shown and "ago: it still runs when it can start, late" in shown, \
                shown
            assert "cannot meet its deadline" not in shown and "moves to on-demand" not in shown, shown

            # once: more ticks, and a broker started again (a new engine, nothing in memory), say nothing more
            _ticks(engine)
            again = Engine(engine.settings, store, launcher)
            _ticks(again)
            assert len(_passed(store, job.id)) == 1

            # spot comes back: placed on spot, late, and not "to meet the deadline"
            for zone in ("sim-spot-a", "sim-spot-b"):
                launcher.set_zone_available(zone, None)
            run_until(again, store, job.id, {"placed", "launching", "running"})
            (place,) = [e for e in store.events(job.id) if e.event == "place"]
            assert f"(its deadline at {at} has passed: it runs now, late)" in place.reason, place.reason
            assert "safety net" not in place.reason and "could miss" not in place.reason, place.reason
            run_until(again, store, job.id, {"running"})
            _ticks(again)
            assert len(_passed(store, job.id)) == 1, "said again once it ran"
        finally:
            for attempt in store.attempts(job.id):
                launcher.kill(attempt.id)


def test_a_running_job_whose_deadline_passes_is_told_once_and_a_late_placement_on_demand_says_it_runs_late(
        make_settings, tmp_path):
    with local_broker(make_settings, tmp_path, CONFIG) as (service, engine, store, launcher):
        running = service.submit(ADMIN, {**ANY_TIER, "name": "running",  # on-demand only: placed at once
                                         "resources": {"accelerators": "A10G:1", "use_spot": False}})[0]
        late = None
        try:
            run_until(engine, store, running.id, {"running"})
            deadline = time.time() - 1
            _due(store, running.id, deadline)
            _ticks(engine)
            (said,) = _passed(store, running.id)
            at = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(int(deadline)))
            assert said.reason.startswith(f"its deadline at {at} passed while it ran (attempt 1"), said.reason
            assert "it runs on to its end, late" in said.reason and said.data["state"] == "running", said.reason
            _ticks(engine)
            assert len(_passed(store, running.id)) == 1
            assert store.get_job(running.id).state.value == "running"

            # a job that may take on-demand, past its deadline before the engine weighed it: the safety net puts it
            # there, and its placement says the deadline has passed, not "anything else could miss the deadline"
            for zone in ("sim-spot-a", "sim-spot-b"):
                launcher.set_zone_available(zone, False)
            late = service.submit(ADMIN, ANY_TIER)[0]
            _due(store, late.id, time.time() - 1)
            run_until(engine, store, late.id, {"placed", "launching", "running"})
            (place,) = [e for e in store.events(late.id) if e.event == "place"]
            assert place.reason.startswith("placed on ondemand "), place.reason
            assert "has passed: it runs now, late)" in place.reason, place.reason
            assert "safety net" not in place.reason and "could miss" not in place.reason, place.reason
            (said,) = _passed(store, late.id)
            assert "passed while it waited in the queue; placed now, it runs late" in said.reason, said.reason
        finally:
            for job in (running, late):
                for attempt in store.attempts(job.id) if job else ():
                    launcher.kill(attempt.id)


def test_past_its_deadline_a_job_is_placed_as_one_without_a_deadline_and_is_not_moved_off_spot(make_settings,
                                                                                              tmp_path):
    """Past its deadline the safety net still sent a job to on-demand — placed there over spot that was up, or
    moved off spot mid-run ("leaving spot for ondemand to meet the deadline"), a changeover and the reliable tier's
    price spent on a deadline missed already. Now it is placed, and runs on, as a job without a deadline."""
    with local_broker(make_settings, tmp_path, CONFIG) as (service, engine, store, launcher):
        late = service.submit(ADMIN, ANY_TIER)[0]
        try:
            _due(store, late.id, time.time() - 1)
            run_until(engine, store, late.id, {"running"})
            (place,) = [e for e in store.events(late.id) if e.event == "place"]
            assert place.reason.startswith("placed on spot "), place.reason  # the cheapest: spot is up
            assert "has passed: it runs now, late)" in place.reason, place.reason
            _ticks(engine, 20)
            job = store.get_job(late.id)
            assert (job.state.value, job.force_tier, job.attempts) == ("running", None, 1), job
            assert not [e for e in store.events(late.id) if e.event == "migrate"]
        finally:
            for attempt in store.attempts(late.id):
                launcher.kill(attempt.id)
