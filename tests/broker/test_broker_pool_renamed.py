"""A pool renamed (or removed) in the config under running jobs: the broker counts held slots by pool name, so the
slots of ``gpu`` renamed ``gpu-a100`` were free again under the new name, and a second job was placed on the one GPU
of a 1-slot pool beside the first. The broker cannot tell a rename from a new pool; the engine says, at its start,
which jobs hold slots on a pool the config no longer names, and what that means. Real runner processes."""

from __future__ import annotations

import logging

from broker.auth import Principal
from broker.engine.reconcile import Engine
from broker.lifecycle import JobState
from broker.runtime import open_launcher
from broker.service import BrokerService
from broker.store import open_store

from broker_testing import run_until

ADMIN = Principal("admin", None, admin=True)
BEFORE = "pools:\n  - {name: gpu, slots: 1, accelerator: A100, price_per_slot_hour: '2.00'}\ntick_seconds: 0.05\n"
AFTER = BEFORE.replace("name: gpu,", "name: gpu-a100,")


def _running(settings, store, launcher):
    """A job on the pool's one A100, running (a real process)."""
    job = BrokerService(settings, store, launcher).submit(
        ADMIN, {"name": "t", "run": "sleep 30", "resources": {"accelerators": "A100:1"}, "broker": {"budget_usd": 5}})[0]
    run_until(Engine(settings, store, launcher), store, job.id, {"running"})
    return job


def test_the_engine_says_at_its_start_which_jobs_hold_slots_on_a_pool_the_config_no_longer_names(
        make_settings, tmp_path, caplog):
    store = open_store(f"sqlite://{tmp_path / 'e.db'}")
    settings = make_settings(config=BEFORE)
    launcher = open_launcher(settings)
    try:
        job = _running(settings, store, launcher)
        renamed = make_settings(config=AFTER)
        with caplog.at_level(logging.WARNING, logger="broker.engine.reconcile"):
            engine = Engine(renamed, store, open_launcher(renamed))
            engine.tick()
            engine.tick()
        said = [r.getMessage() for r in caplog.records if "is not in this config" in r.getMessage()]
        assert len(said) == 1, said  # once, at the engine's start
        assert said[0].startswith(f"pool 'gpu' is not in this config, yet 1 job still holds its slots ({job.id})")
        assert "If the pool was renamed" in said[0] and "put the old name back until they end" in said[0]
        assert store.get_job(job.id).state is JobState.RUNNING  # left running: nothing is decided for the operator
    finally:
        for run in launcher.runs_dir.glob("j*"):
            launcher.kill(run.name)
        store.close()


def test_nothing_is_said_while_every_held_pool_is_configured(make_settings, tmp_path, caplog):
    store = open_store(f"sqlite://{tmp_path / 'e.db'}")
    settings = make_settings(config=BEFORE)
    launcher = open_launcher(settings)
    try:
        job = _running(settings, store, launcher)
        with caplog.at_level(logging.WARNING, logger="broker.engine.reconcile"):
            Engine(settings, store, launcher).tick()
        assert not [r for r in caplog.records if "is not in this config" in r.getMessage()]
    finally:
        for run in launcher.runs_dir.glob("j*"):
            launcher.kill(run.name)
        store.close()


def test_a_queued_job_whose_pool_was_removed_says_nothing_offered_now_has_what_it_asks(make_settings, tmp_path):
    """Its reason said "no offer has 1x A100 (no offers are configured)" of a broker with a pool and a zone, tick
    after tick, and nothing said it would not start as the config stood."""
    store = open_store(f"sqlite://{tmp_path / 'e.db'}")
    settings = make_settings(config=BEFORE)
    launcher = open_launcher(settings)
    try:
        service = BrokerService(settings, store, launcher)
        first = service.submit(ADMIN, {"name": "t", "run": "sleep 30", "resources": {"accelerators": "A100:1"},
                                       "broker": {"budget_usd": 5}})[0]
        second = service.submit(ADMIN, {"name": "u", "run": "echo hi", "resources": {"accelerators": "A100:1"},
                                        "broker": {"budget_usd": 5}})[0]
        run_until(Engine(settings, store, launcher), store, first.id, {"running"})
        without = make_settings(config="pools:\n  - {name: cpu, slots: 2, price_per_slot_hour: '0.10'}\n"
                                        "zones:\n  - {name: sim-od, tier: ondemand, instance_type: g5.xlarge}\n"
                                        "tick_seconds: 0.05\n")
        engine = Engine(without, store, open_launcher(without))
        engine.tick()
        waiting = store.get_job(second.id)
        assert waiting.state is JobState.QUEUED
        assert waiting.reason.startswith("waiting: no offer has 1x A100 (accelerators offered: A10G). Nothing this "
                                         "broker offers now has what it asks"), waiting.reason
        assert "no offers are configured" not in waiting.reason
        assert "cancel it, or have a pool or zone with it added" in waiting.reason
    finally:
        for run in launcher.runs_dir.glob("j*"):
            launcher.kill(run.name)
        store.close()
