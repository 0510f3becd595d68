"""The engine leaving spot to meet a job's deadline, through real processes of the local launcher.

The policy's safety net, checked each tick for a job running on spot with a deadline, moves it to the reliable tier
when one more tick on spot would leave too little time to finish there; the job is then held to that tier
(``force_tier``), as a user's ``broker ondemand`` holds it. Its view said "pinned to on-demand" as if the user had
pinned it: ``pinned_by`` now says who did, and the pin is taken back the same way either way."""

from __future__ import annotations

import time
from dataclasses import replace

from broker.auth import Principal
from broker.lifecycle import JobState
from broker.models import DEADLINE_PIN
from broker.store import Change
from broker.views import job_view

from broker_testing import local_broker, run_until

ADMIN = Principal("admin", None, admin=True)
CONFIG = """
zones:
  - {name: sim-spot, tier: spot, instance_type: g5.xlarge, grace_seconds: 2}
  - {name: sim-od, tier: ondemand, instance_type: g5.xlarge}
changeover_seconds: 5
stop_grace_seconds: 2
tick_seconds: 0.05
"""


def test_a_job_the_engine_moves_off_spot_for_its_deadline_says_the_deadline_pinned_it(make_settings, tmp_path):
    with local_broker(make_settings, tmp_path, CONFIG) as (service, engine, store, launcher):
        task = {"name": "tight", "run": "sleep 60", "resources": {"instance_type": "g5.xlarge"},
                "broker": {"budget_usd": 50, "deadline": "6h", "expected_hours": "0.05"}}
        job = service.submit(ADMIN, task)[0]
        try:
            running = run_until(engine, store, job.id, {"running"})
            (first,) = store.attempts(job.id)
            assert first.placement["tier"] == "spot", first.placement
            assert job_view(running)["pinned_tier"] is None and job_view(running)["pinned_by"] is None
            # the deadline comes close (as hours pass): 180 s of work left, a changeover of 5 s, 200 s to go
            store.commit(Change(job=replace(running, deadline=time.time() + 200), expected_version=running.version))
            for _ in range(100):  # the next ticks: the safety net sees it, and the attempt is stopped to move
                moved = store.get_job(job.id)
                if moved.force_tier:
                    break
                engine.tick()
                time.sleep(0.05)
            assert moved.force_tier == "ondemand" and moved.pinned_by == DEADLINE_PIN, (moved.force_tier, moved.reason)
            assert any(e.event == "migrate" and "to meet the deadline" in e.reason for e in store.events(job.id))
            view = job_view(moved)
            assert (view["pinned_tier"], view["pinned_by"]) == ("ondemand", "deadline")
            # `broker status JOB` says it was the broker, and how to let it use spot again
            from broker.cli import _pinned_by
            assert _pinned_by(view) == (f" (by the broker, to meet the deadline; `broker ondemand {job.id} --off` "
                                        "lets it use spot again)")
            # taken back as a user's pin is: placed where it is cheapest again
            back = service.unpin(ADMIN, job.id)
            assert (job_view(back)["pinned_tier"], job_view(back)["pinned_by"]) == (None, None)
        finally:
            for attempt in store.attempts(job.id):
                launcher.kill(attempt.id)


def test_a_users_pin_names_the_user(make_settings, tmp_path):
    with local_broker(make_settings, tmp_path, CONFIG) as (service, engine, store, launcher):
        task = {"name": "mine", "run": "sleep 60", "resources": {"instance_type": "g5.xlarge"},
                "broker": {"budget_usd": 50, "expected_hours": "0.05"}}
        job = service.submit(ADMIN, task)[0]
        pinned = service.switch_to_ondemand(ADMIN, job.id)
        assert (pinned.force_tier, pinned.pinned_by) == ("ondemand", "admin")
        assert job_view(pinned)["pinned_by"] == "admin"
        from broker.cli import _pinned_by
        assert _pinned_by(job_view(pinned)) == " (by admin)"
        assert store.get_job(job.id).state is JobState.QUEUED


def test_a_forced_move_to_on_demand_says_it_was_forced_as_a_forced_resume_does(make_settings, tmp_path):
    with local_broker(make_settings, tmp_path, CONFIG) as (service, engine, store, launcher):
        task = {"name": "own", "run": "exit 3", "resources": {"instance_type": "g5.xlarge"},
                "broker": {"budget_usd": 50}}
        job = service.submit(ADMIN, task)[0]
        failed = run_until(engine, store, job.id, {"failed"})
        assert not failed.diagnosis.get("infrastructure"), failed.diagnosis
        moved = service.switch_to_ondemand(ADMIN, job.id, force=True)
        assert moved.reason == "resumed on on-demand by admin (forced)", moved.reason
        assert (moved.force_tier, moved.pinned_by) == ("ondemand", "admin")



def test_a_spot_only_job_is_not_moved_to_a_tier_it_cannot_run_on_for_its_deadline(make_settings, tmp_path):
    """``use_spot: true`` has no on-demand offer: pinned there for its deadline, it waited for ever ("no offer ... on
    spot") with on-demand idle, its deadline missed all the same. It stays on spot, the only place it can run."""
    with local_broker(make_settings, tmp_path, CONFIG) as (service, engine, store, launcher):
        # submitted with no deadline: with no on-demand price, the policy (its rules) waits a minute of real time to
        # see new spot last before it takes it, and this is about the ticks after the start, when the deadline nears
        task = {"name": "spot-only", "run": "sleep 60", "resources": {"instance_type": "g5.xlarge", "use_spot": True},
                "broker": {"budget_usd": 50, "expected_hours": "0.05"}}
        job = service.submit(ADMIN, task)[0]
        try:
            running = run_until(engine, store, job.id, {"running"})
            store.commit(Change(job=replace(running, deadline=time.time() + 200), expected_version=running.version))
            for _ in range(40):  # the ticks in which a job that may use on-demand was moved (the test above)
                engine.tick()
                time.sleep(0.05)
            kept = store.get_job(job.id)
            assert kept.state is JobState.RUNNING and kept.force_tier is None and kept.pinned_by is None, kept.reason
            assert not [e for e in store.events(job.id) if e.event == "migrate"]
            assert [a.placement["tier"] for a in store.attempts(job.id)] == ["spot"]
        finally:
            for attempt in store.attempts(job.id):
                launcher.kill(attempt.id)
