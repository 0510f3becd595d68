"""A job whose shape a pool has, waiting while the pool is partly busy: its reason says the pool is full for it, with
the slots free and needed, and it gets a start estimate.

Before, the pool's shapes larger than its free slots left the market until they freed up, the placement found no
offer of the job's shape at all and said "no offer has 4x A100 (no offers are configured)", and `broker queue` gave
no "starts ~". The launcher is the real local one (real processes); the engine's clock is the test's."""

from __future__ import annotations

from broker.auth import Principal
from broker.engine.reconcile import Engine
from broker.lifecycle import JobState
from broker.service import BrokerService
from broker.store import open_store
from launchers.local import LocalLauncher

ADMIN = Principal("admin", None, admin=True)
CONFIG = "pools: [{name: dgx, slots: 4, accelerator: A100, price_per_slot_hour: '1.10'}]\n"


def test_a_job_needing_more_slots_than_a_pool_has_free_says_the_pool_is_full_for_it(make_settings, tmp_path):
    settings = make_settings(config=CONFIG)
    store = open_store(f"sqlite://{tmp_path / 'b.db'}")
    launcher = LocalLauncher(settings.data_dir / "runs")
    now = [1_800_000_000.0]
    engine = Engine(settings, store, launcher, clock=lambda: now[0])
    service = BrokerService(settings, store, launcher, clock=lambda: now[0])
    try:
        one = service.submit(ADMIN, {"run": "sleep 60", "resources": {"accelerators": "A100:1"},
                                     "broker": {"budget_usd": "5", "expected_hours": 1}})[0]
        engine.tick()
        assert store.get_job(one.id).state in (JobState.LAUNCHING, JobState.RUNNING, JobState.PLACED)
        four = service.submit(ADMIN, {"run": "true", "resources": {"accelerators": "A100:4"},
                                      "broker": {"budget_usd": "20", "expected_hours": 1}})[0]
        now[0] += 1
        engine.tick()
        waiting = store.get_job(four.id)
        assert waiting.state is JobState.QUEUED
        # and, as the pool's head, that its free GPUs are kept for it (broker/engine/schedule.py::_Kept)
        assert waiting.reason == ("waiting: pool dgx is full for it right now (3 slots free, the job needs 4); the 3 "
                                  "free GPUs of pool dgx are kept for it meanwhile"), waiting.reason
        _, starts = service.queue()
        assert four.id in starts, "no start estimate for a job the pool will take once the first one ends"
    finally:
        for a in [*store.attempts(one.id)]:
            launcher.stop(a.id, grace_seconds=0)
        store.close()
