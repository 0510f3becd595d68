"""The spot policy on cloud offers (``BROKER_LAUNCHER=skypilot``): a cloud's spot zones count as up until the job is
preempted there (or a launch there fails), so a job with a deadline is placed on spot rather than told "no spot"
and left waiting through its slack or sent to on-demand at several times the price."""

from __future__ import annotations

import time
from dataclasses import replace

from broker.auth import Principal
from broker.engine.schedule import Place, Wait, schedule
from broker.offers import market
from pricing.policy import make_policy
from test_skypilot_broker_wiring import service  # noqa: F401 (fixture)

ADMIN = Principal("admin", None, admin=True)
TASK = {"resources": {"accelerators": "A10G:1"}, "run": "python train.py",
        "broker": {"budget_usd": 100, "expected_hours": 10, "deadline": "1d"}}


def _decide(svc, job, now):
    mk = market(svc.settings, [])
    [decision] = schedule([job], mk, now=now, policies={job.id: make_policy("broker")})
    return mk, decision


def test_a_cloud_jobs_deadline_with_room_to_spare_is_placed_on_spot_not_left_waiting_for_it(service):  # noqa: F811
    job, _ = service.submit(ADMIN, TASK)
    mk, decision = _decide(service, job, time.time())
    spot_zones = {o.zone for o in mk.offers if o.tier.value == "spot" and o.cloud == "aws"}
    assert spot_zones and spot_zones <= mk.spot_available, "a cloud spot zone is up until tried and found wanting"
    assert isinstance(decision, Place), decision.reason
    assert decision.placement["tier"] == "spot" and decision.placement["cloud"] == "aws"
    assert "no spot" not in decision.reason and "waits for spot" not in decision.reason


def test_zones_blocked_after_preemptions_are_not_spot_the_policy_can_take(service):  # noqa: F811
    job, _ = service.submit(ADMIN, TASK)
    now = time.time()
    mk = market(service.settings, [])
    a10g = {o.zone for o in mk.offers if o.tier.value == "spot" and o.accelerator == "A10G"}
    blocked = replace(job, blocked_zones={z: now + 3600 for z in a10g})
    _, decision = _decide(service, blocked, now)
    placed = decision.placement.get("tier") if isinstance(decision, Place) else None
    assert placed != "spot", "every A10G spot zone is in its cool-down for this job"
    assert isinstance(decision, Wait) or placed in ("ondemand", "onprem")
