"""A job placed again after a preemption is held to what a manual resume is: its budget left must pay for a minute's
run and a clean stop on the offer it is placed on.

Before, a job preempted on spot with $0.0233 of its $0.03 left, its spot zone in cool-down, was placed on on-demand at
$7.20/h, where its budget paid for 2 s: the attempt never reached its first step. The engine and the local launcher's
simulated zones, real runner processes.
"""

from __future__ import annotations

from dataclasses import replace

from broker_testing import wait_for

from broker.auth import Principal
from broker.engine import budget as budget_rules
from broker.engine.reconcile import Engine
from broker.engine.schedule import Place, Wait, schedule
from broker.runtime import open_launcher
from broker.service import BrokerService
from broker.store import open_store

ADMIN = Principal("admin", None, admin=True)


def config(spot_price: str, od_price: str = "36") -> str:
    # grace 1 s and ticks of 0.05 s: a first start pays for 5 s (reserve_seconds), a placement again for 61 s
    return f"""
pools: []
zones:
  - name: sim-spot
    tier: spot
    instance_type: g5.xlarge
    cloud_zone: us-east-1a
    grace_seconds: 1
    price_per_hour: "{spot_price}"
  - name: sim-od
    tier: ondemand
    instance_type: g5.xlarge
    price_per_hour: "{od_price}"
tick_seconds: 0.05
stop_grace_seconds: 1
zone_cooldown_seconds: 600
"""


def spec(budget: str) -> dict:
    return {"name": "t", "resources": {"accelerators": "A10G:1"}, "run": "sleep 120",
            "broker": {"budget_usd": budget}}


def preempted(tmp_path, make_settings, spot_price: str, budget: str):
    """Submit, run on spot, preempt it (its zone blocked for 600 s), and tick the engine until the job is past its
    first attempt: (job as stored, store, engine, launcher)."""
    settings = make_settings(f"sqlite://{tmp_path / 'e.db'}", config=config(spot_price))
    store = open_store(f"sqlite://{tmp_path / 'e.db'}")
    launcher = open_launcher(settings)
    api, engine = BrokerService(settings, store, launcher), Engine(settings, store, launcher)
    job_id = api.submit(ADMIN, spec(budget))[0].id
    running = wait_for(lambda: engine.tick() or ((j := store.get_job(job_id)).state.value == "running" and j),
                       timeout=30)
    assert running.placement["zone"] == "sim-spot", running.placement
    api.inject_fault(ADMIN, "preempt", job_id=job_id)
    wait_for(lambda: engine.tick() or store.attempts(job_id)[0].state.is_final, timeout=30)
    for _ in range(20):  # what the next ticks decide: placed again, waiting, or stopped
        engine.tick()
    return store.get_job(job_id), store, engine, launcher


def _cleanup(store, launcher):
    for run in launcher.runs_dir.glob("j*"):
        try:
            launcher.kill(run.name)
        except Exception:
            pass
    store.close()


def test_preempted_with_a_budget_that_pays_on_demand_only_seconds_it_waits_for_the_spot_zone_it_can_pay(
        tmp_path, make_settings):
    # spot at $1.80/h: a minute and a clean stop there is $0.031; on-demand at $36/h ($0.01 a second) would be
    # $0.61 — the $0.10 budget paid for 5 s of it, which the placement took before
    job, store, engine, launcher = preempted(tmp_path, make_settings, "1.80", "0.10")
    try:
        attempts = store.attempts(job.id)
        assert len(attempts) == 1, [(a.id, a.placement) for a in attempts]  # not placed on on-demand
        assert job.state.value == "queued", (job.state, job.reason)
        assert "minute" in job.reason and "sim-od" in job.reason, job.reason
        assert job.spent < job.budget
    finally:
        _cleanup(store, launcher)


def test_preempted_with_a_budget_no_offer_can_run_a_minute_on_it_stops_at_its_budget_and_says_so(
        tmp_path, make_settings):
    # spot at $35/h: $0.10 starts it (5 s is under $0.05), and after the preemption a minute is paid on no offer
    job, store, engine, launcher = preempted(tmp_path, make_settings, "35", "0.10")
    try:
        assert len(store.attempts(job.id)) == 1
        assert job.state.value == "stopped_budget", (job.state, job.reason)
        assert "a minute's run and a clean stop" in job.reason and "raise the budget to resume" in job.reason, job.reason
        assert job.spent <= job.budget
    finally:
        _cleanup(store, launcher)


def test_a_first_start_is_still_weighed_on_a_start_and_a_clean_stop(tmp_path, make_settings):
    """The minute is asked of a job placed again; a first start keeps the rule its submit is checked by."""
    from broker.models import Job
    from broker.lifecycle import JobState
    from broker.offers import market

    settings = make_settings(config=config("36"))
    mk = market(settings, [])
    fresh = Job(id="j", name="j", team="t", spec=spec("0.10"), budget=100_000, priority=0, state=JobState.QUEUED,
                submitted_at=0.0, updated_at=0.0)
    kwargs = dict(now=1.0, min_run_seconds=budget_rules.reserve_seconds(1, 0.05),
                  rerun_seconds=budget_rules.rerun_seconds(1, 0.05))
    (first,) = schedule([fresh], mk, **kwargs)
    assert isinstance(first, Place), first
    (again,) = schedule([replace(fresh, attempts=1, spent=1_000)], mk, **kwargs)
    assert isinstance(again, Wait) and again.budget_spent, again
    assert budget_rules.rerun_seconds(1, 0.05) == 61 and budget_rules.rerun_seconds(120, 5) == 180
