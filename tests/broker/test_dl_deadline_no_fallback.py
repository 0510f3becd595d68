"""What a queued job with a deadline is told of the move to on-demand when spot does not come (QA, Dec 7: spot zones
sim-a and sim-b down, an on-demand zone, a job of expected_hours 0.05 — spot $0.0213, on-demand $0.0503 — with a
budget of $0.03 and a 30 min deadline):

* ``broker queue`` (and Slack) said "if spot does not come, it moves to on-demand (or a free pool) by about 16:08Z to
  meet its deadline", while ``broker ondemand`` of the same job was refused, its budget left not covering on-demand. It
  is told, as a spot-only job is, that if spot does not come by then it cannot meet its deadline, and that its budget
  does not cover on-demand (the expected run left and a clean stop: the ondemand refusal's own figure);
* once its policy sent it to the reliable tier, its reason became "zones … are busy right now, and they are what the
  budget covers: …", which said nothing of its deadline at risk: it is said too;
* ``submit --dry-run`` said only "would wait: the spot policy waits for spot capacity (plan: …)", where the job it
  stores is told by when it moves to on-demand: the dry run says the same as the queue.

The engine and service run in this process on SQLite, with the local launcher (real runner processes)."""

from __future__ import annotations

import time
from dataclasses import replace

from broker_testing import local_broker

from broker.auth import Principal
from broker.engine.schedule import SPOT_WAIT
from broker.service import Conflict
from broker.store import Change
from broker.views import dry_run_view, job_view, minute

ADMIN = Principal("admin", None, admin=True)
CONFIG = """
zones:
  - {name: sim-a, tier: spot, instance_type: g5.xlarge, grace_seconds: 2}
  - {name: sim-b, tier: spot, instance_type: g5.xlarge, grace_seconds: 2}
  - {name: sim-od, tier: ondemand, instance_type: g5.xlarge}
changeover_seconds: 5
stop_grace_seconds: 2
tick_seconds: 0.05
"""
LONG = {"name": "t_long", "run": "sleep 600", "resources": {"accelerators": "A10G:1"},
        "broker": {"budget_usd": "0.03", "deadline": "30m", "expected_hours": "0.05"}}
MOVES = "if spot does not come, it moves to on-demand (or a free pool) by about "


def _shown(service, store, job_id):
    job = store.get_job(job_id)
    q = service.queue_waits(ADMIN, of=[job])
    return job_view(job, position=q.positions.get(job.id), estimated_start=q.starts.get(job.id),
                    waiting=q.waiting.get(job.id))["reason"]


def _ticks(engine, n=5):
    for _ in range(n):
        engine.tick()
        time.sleep(0.02)


def _latest(service, job):
    s = service.settings
    return job.deadline - 0.05 * 3600 - s.changeover_seconds - s.tick_seconds


def test_a_job_whose_budget_does_not_cover_on_demand_is_not_promised_the_move(make_settings, tmp_path):
    with local_broker(make_settings, tmp_path, CONFIG) as (service, engine, store, launcher):
        for zone in ("sim-a", "sim-b"):
            launcher.set_zone_available(zone, False)
        job = service.submit(ADMIN, LONG)[0]
        try:
            _ticks(engine)
            waiting = store.get_job(job.id)
            assert waiting.state.value == "queued" and waiting.reason.startswith(SPOT_WAIT), waiting.reason
            # the move it would be promised is refused
            try:
                service.switch_to_ondemand(ADMIN, job.id)
                raise AssertionError("moved to on-demand")
            except Conflict as exc:
                refused = str(exc)
            assert "does not cover" in refused, refused
            shown = _shown(service, store, job.id)
            assert "moves to on-demand" not in shown, shown
            assert "its budget does not cover on-demand (the budget left, $0.03, does not cover 0.05 h and a clean " \
                   "stop" in shown, shown
            assert shown.endswith(f": if spot does not come by about {minute(_latest(service, waiting))}, it cannot "
                                  f"meet its deadline"), shown

            # close to its deadline its policy sends it to on-demand, which it cannot pay for: it waits for the spot
            # zones its budget covers, and is told its deadline is at risk
            close = time.time() + 0.05 * 3600 + 20
            now = store.get_job(job.id)
            store.commit(Change(job=replace(now, deadline=close), expected_version=now.version))
            _ticks(engine)
            twin = store.get_job(job.id)
            assert twin.state.value == "queued", twin.reason
            assert not twin.reason.startswith(SPOT_WAIT) and "what the budget covers" in twin.reason, twin.reason
            shown = _shown(service, store, job.id)
            assert shown.startswith(twin.reason + "; its budget covers only spot: "), shown
            assert shown.endswith(", it cannot meet its deadline") or shown.endswith("and may miss it now"), shown
        finally:
            for attempt in store.attempts(job.id):
                launcher.kill(attempt.id)


def test_a_job_that_may_move_is_still_told_so_and_the_dry_run_says_it_too(make_settings, tmp_path):
    with local_broker(make_settings, tmp_path, CONFIG) as (service, engine, store, launcher):
        for zone in ("sim-a", "sim-b"):
            launcher.set_zone_available(zone, False)
        task = {**LONG, "broker": {**LONG["broker"], "budget_usd": "5"}}
        run = service.submit_dry_run(ADMIN, task)
        said = dry_run_view(run)["reason"]
        assert said.startswith(SPOT_WAIT), said
        assert f"; {MOVES}{minute(_latest(service, run.job))} to meet its deadline" in said, said
        # the job the submit stores is told the same
        job = service.submit(ADMIN, task)[0]
        try:
            _ticks(engine)
            shown = _shown(service, store, job.id)
            assert shown.startswith(SPOT_WAIT) and f"; {MOVES}" in shown, shown
            assert shown.split("; ")[-1] == said.split("; ")[-1].replace(
                minute(_latest(service, run.job)), minute(_latest(service, store.get_job(job.id)))), (shown, said)
            # and a dry run whose budget cannot pay on-demand says that, as the queue does
            short = dry_run_view(service.submit_dry_run(ADMIN, LONG))["reason"]
            assert "moves to on-demand" not in short and "its budget does not cover on-demand (" in short, short
        finally:
            for attempt in store.attempts(job.id):
                launcher.kill(attempt.id)
