"""A launch refused for a reason that rules out where it was placed — no capacity in the zone, no access to the
cloud — blocks that zone or cloud for the job for a cool-down, so the job is placed elsewhere: placed again at the
same place, it was refused there again and again (a new attempt each time, every backoff up to five minutes) while
another zone, cloud or a free pool could run it. Real processes of the local launcher; its launch refuses as
SkyPilot's launcher would (its own refusals are read by :func:`launchers.skypilot.refusal_scope`, tested on
SkyPilot's real exceptions in tests/launchers/test_skypilot_refusal_scope.py)."""

from __future__ import annotations


import pytest

from broker.auth import Principal
from launchers.base import LaunchError

from broker_testing import local_broker, run_until

ADMIN = Principal("admin", None, admin=True)
CONFIG = """
pools:
  - {name: cpu, slots: 1, price_per_slot_hour: "3.00"}
zones:
  - {name: sim-a, tier: spot, instance_type: g5.xlarge, price_per_hour: "0.40", grace_seconds: 2}
  - {name: sim-b, tier: spot, instance_type: g5.xlarge, price_per_hour: "0.50", grace_seconds: 2}
zone_cooldown_seconds: 600
stop_grace_seconds: 1
tick_seconds: 0.05
"""


def _refusing(launcher, scope: str, where: str, said: str):
    real, refused = launcher.launch, []

    def launch(request):
        if request.placement.get("location") == where or request.placement.get("cloud") == where:
            refused.append(request.attempt_id)
            raise LaunchError(said, scope=scope)
        return real(request)

    launcher.launch = launch
    return refused


@pytest.mark.parametrize("scope, where, then, said", [
    pytest.param("zone", "sim-a", "sim-b", "sim-a is left out for this job until ",
                 id="no capacity in the cheapest zone: the next zone"),
    pytest.param("cloud", "aws", "cpu", "the cloud aws is left out for this job until ",
                 id="no access to the zones' cloud: the pool"),
])
def test_a_launch_refused_for_its_place_is_placed_elsewhere_not_refused_there_again(make_settings, tmp_path, scope,
                                                                                    where, then, said):
    with local_broker(make_settings, tmp_path, CONFIG) as (service, engine, store, launcher):
        refused = _refusing(launcher, scope, where, "SkyPilot finds no capacity or offer for g5.xlarge (spot)")
        job = service.submit(ADMIN, {"name": "t", "run": "echo ran", "resources": {"cpus": "1+"},
                                     "broker": {"budget_usd": 5}})[0]
        final = run_until(engine, store, job.id, {"succeeded", "failed"}, timeout=30)
        attempts = store.attempts(job.id)
        assert final.state.value == "succeeded", final.reason
        assert len(refused) == 1 and attempts[-1].placement["location"] == then, [a.placement for a in attempts]
        failed = [e for e in store.events(job.id) if e.event == "launch_failed"]
        assert len(failed) == 1 and said in failed[0].reason, failed[0].reason


def test_a_refusal_with_no_scope_blocks_nothing(make_settings, tmp_path):
    with local_broker(make_settings, tmp_path, CONFIG) as (service, engine, store, launcher):
        real, calls = launcher.launch, []

        def launch(request):
            calls.append(request.placement.get("location"))
            if len(calls) == 1:
                raise LaunchError("the API server did not answer")
            return real(request)

        launcher.launch = launch
        job = service.submit(ADMIN, {"name": "t", "run": "echo ran", "resources": {"cpus": "1+"},
                                     "broker": {"budget_usd": 5}})[0]
        run_until(engine, store, job.id, {"succeeded", "failed"}, timeout=30)
        assert calls == ["sim-a", "sim-a"] and store.get_job(job.id).blocked_zones == {}
