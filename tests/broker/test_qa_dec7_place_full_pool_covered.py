"""Placement weighs a budget as the quote does, and a job whose budget covers only a busy pool waits for it, saying so.

QA walkthrough (Dec 7), `good2.yaml`: an 8-GPU pool dgx at $0.36 a GPU-hour, a simulated spot zone ($0.4259/h) and a
simulated on-demand zone ($1.006/h).

* With the pool full, a 1-GPU job of 0.01 h with $0.0050 — the pool's $0.0036 and its clean stop, not spot's — was
  placed on spot, where the budget paid for the run but not the clean stop after it: the dry run said "the budget
  covers on-prem, not spot or on-demand" and "would be placed on spot"; the job was stopped at its budget at step 33
  of 36, and the pool came free seconds later.
* With the spot zone down and the pool full, a job whose $0.0060 covers the pool but not on-demand ($0.0101) waited
  with "the budget left, $0.0060, does not cover 0.01 h on the cheapest free match, ondemand …", telling its user to
  raise a budget that sufficed, and was placed on the pool when it came free.

Real runner processes of the local launcher; the engine's clock is the test's.
"""

from __future__ import annotations

import time
from contextlib import contextmanager

from broker.auth import Principal
from broker.engine.reconcile import Engine
from broker.lifecycle import JobState
from broker.runtime import open_launcher
from broker.service import BrokerService
from broker.store import open_store

ADMIN = Principal("admin", None, admin=True)
CONFIG = """
pools:
  - {name: dgx, gpus: 8, accelerator: A10G, price_per_gpu_hour: "0.36"}
zones:
  - {name: sim-spot, tier: spot, instance_type: g5.xlarge, region: us-east-1, cloud_zone: us-east-1f, grace_seconds: 5}
  - {name: sim-od, tier: ondemand, instance_type: g5.xlarge, region: us-east-1}
default_budget_usd: "2"
tick_seconds: 0.5
stop_grace_seconds: 5
changeover_seconds: 5
"""
FILL = {"name": "fill", "run": "sleep 120", "resources": {"accelerators": "A10G:8"},
        "broker": {"budget_usd": "1", "expected_hours": "0.015"}}
ACTIVE = (JobState.PLACED, JobState.LAUNCHING, JobState.RUNNING)


@contextmanager
def _broker(make_settings, tmp_path):
    """(service, engine, store, launcher, now): a broker of the QA config whose clock is ``now[0]``, with its pool
    full (an 8-GPU job placed on it); every attempt is killed at the end."""
    settings = make_settings(config=CONFIG)
    store = open_store(f"sqlite://{tmp_path / 'b.db'}")
    launcher = open_launcher(settings)
    now = [1_800_000_000.0]
    engine = Engine(settings, store, launcher, clock=lambda: now[0])
    service = BrokerService(settings, store, launcher, clock=lambda: now[0])
    try:
        fill = service.submit(ADMIN, FILL)[0]
        engine.tick()
        assert store.get_job(fill.id).state in ACTIVE and store.get_job(fill.id).placement["zone"] == "dgx"
        yield service, engine, store, launcher, now
    finally:
        for job in store.list_jobs(limit=100):
            for a in store.attempts(job.id):
                launcher.kill(a.id)
        store.close()


def _small(budget: str) -> dict:
    return {"name": "small", "run": "sleep 30", "resources": {"accelerators": "A10G:1"},
            "broker": {"budget_usd": budget, "expected_hours": "0.01"}}


def test_a_budget_that_covers_the_pool_but_not_spots_clean_stop_waits_for_the_pool(make_settings, tmp_path):
    with _broker(make_settings, tmp_path) as (service, engine, store, launcher, now):
        dry = service.submit_dry_run(ADMIN, _small("0.0050"))
        assert dry.placement is None, dry.placement  # it said "would be placed on spot"
        assert dry.reason.startswith(
            "waiting: the pool dgx is busy right now, and it is what the budget covers: the budget left, $0.0050, "
            "does not cover 0.01 h and a clean stop (10 s) on the cheapest free match, spot 1x A10G g5.xlarge in "
            "aws/sim-spot (simulated), estimated at $0.0043, plus $0.0012 for the stop"), dry.reason
        small = service.submit(ADMIN, _small("0.0050"))[0]
        now[0] += 1
        engine.tick()
        waiting = store.get_job(small.id)
        assert waiting.state is JobState.QUEUED, waiting.placement
        assert waiting.reason == dry.reason, (waiting.reason, dry.reason)  # the dry run and the engine agree


def test_a_budget_that_covers_the_busy_pool_and_not_on_demand_says_it_waits_for_the_pool(make_settings, tmp_path):
    with _broker(make_settings, tmp_path) as (service, engine, store, launcher, now):
        launcher.set_zone_available("sim-spot", False)
        small = service.submit(ADMIN, _small("0.0060"))[0]
        now[0] += 1
        engine.tick()
        waiting = store.get_job(small.id)
        assert waiting.state is JobState.QUEUED, waiting.placement
        assert waiting.reason.startswith(
            "waiting: the pool dgx and zone sim-spot are busy right now, and they are what the budget covers: the "
            "budget left, $0.0060, does not cover 0.01 h and a clean stop (10 s) on the cheapest free match, "
            "ondemand 1x A10G g5.xlarge in aws/sim-od (simulated), estimated at $0.0101"), waiting.reason
        # the queue's estimate counts every offer the job may take, the free one over its budget too: it would say
        # "now", which the job is not; none is given (broker.queue.WAITS_FOR_CAPACITY)
        _, starts = service.queue()
        assert small.id not in starts or starts[small.id] > now[0] + 30, starts
        # the pool comes free: it is placed there
        fill = next(j for j in store.list_jobs(limit=100) if j.name == "fill")
        service.cancel(ADMIN, fill.id)
        for _ in range(300):
            now[0] += 0.5
            engine.tick()
            if store.get_job(small.id).state in ACTIVE:
                break
            time.sleep(0.02)
        placed = store.get_job(small.id)
        assert placed.state in ACTIVE and placed.placement["zone"] == "dgx", (placed.state, placed.reason,
                                                                              store.get_job(fill.id).state)
