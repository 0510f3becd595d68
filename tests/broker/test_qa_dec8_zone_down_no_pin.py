"""A spot zone going down under a running job is left to its preemption, not turned into a deadline pin.

QA walkthrough (Dec 8): a job with hours to spare ran on spot in sim-cheap ($1.00/h); `broker fault zone sim-cheap
--down` left only sim-exp ($3.00/h) up, and the policy, its figures now in that zone's price, found on-demand
($1.01/h) no dearer than spot: the engine moved the job off spot "to meet the deadline" and pinned it to on-demand,
so it never used spot again, even with sim-cheap back. The zone's own preemption now moves it, and its next placement
weighs the offers then, unpinned. Real runner processes of the local launcher.
"""

from __future__ import annotations

import time

from broker.auth import Principal
from broker_testing import local_broker, run_until

ADMIN = Principal("admin", None, admin=True)
CONFIG = """
zones:
  - {name: sim-exp, tier: spot, instance_type: g5.xlarge, grace_seconds: 2, price_per_hour: "3.00"}
  - {name: sim-cheap, tier: spot, instance_type: g5.xlarge, grace_seconds: 2, price_per_hour: "1.00"}
  - {name: sim-od, tier: ondemand, instance_type: g5.xlarge, price_per_hour: "1.01"}
changeover_seconds: 5
stop_grace_seconds: 2
tick_seconds: 0.05
"""


def test_a_job_whose_spot_zone_goes_down_is_preempted_not_pinned_to_on_demand(make_settings, tmp_path):
    with local_broker(make_settings, tmp_path, CONFIG) as (service, engine, store, launcher):
        task = {"name": "spare", "run": "sleep 120", "resources": {"instance_type": "g5.xlarge"},
                "broker": {"budget_usd": 50, "deadline": "2h", "expected_hours": "0.05"}}
        job = service.submit(ADMIN, task)[0]
        try:
            run_until(engine, store, job.id, {"running"}, timeout=200)
            (first,) = store.attempts(job.id)
            assert first.placement["zone"] == "sim-cheap", first.placement
            launcher.set_zone_available("sim-cheap", False)
            for _ in range(200):  # the zone's preemption comes (its notice, then the grace period)
                if store.get_job(job.id).state.value != "running":
                    break
                engine.tick()
                time.sleep(0.05)
            for _ in range(100):
                engine.tick()
                time.sleep(0.05)
            moved = store.get_job(job.id)
            assert moved.force_tier is None and moved.pinned_by is None, (moved.force_tier, moved.reason)
            assert not any(e.event == "migrate" for e in store.events(job.id)), \
                [(e.event, e.reason) for e in store.events(job.id)]
        finally:
            for attempt in store.attempts(job.id):
                launcher.kill(attempt.id)
