"""A job with a deadline runs on the cheapest spot zone up, and the policy's figures are in that zone's price.

QA walkthrough (Dec 8): on a broker with two simulated spot zones, sim-a-pricey at $3.00/h and sim-b-cheap at $1.00/h,
a job with a deadline ran on sim-a-pricey (without a deadline it went to sim-b-cheap): the spot policy chose its zone by
how long spot had been seen up there, then by name, never by price; and its figures were in the cheapest spot price of
all, whether or not that zone was up, so a dearer zone was costed as the cheap one.
"""

from __future__ import annotations

import json

import pytest

from broker.engine.spot import policy_input
from broker.lifecycle import JobState
from broker.models import Job
from broker_testing import cli_runner, start_broker, stop_broker, wait_for
from pricing.offers import Offer, Tier
from pricing.policy import Holding

NOW = 10_000.0


def offer(tier, zone, price):
    return Offer(tier=tier, cloud="aws", region="r", zone=zone, instance_type="g", accelerator="A10G",
                 accelerator_count=1, price_per_hour=price)


OFFERS = [offer(Tier.SPOT, "z1", 1_000_000), offer(Tier.SPOT, "z1", 1_100_000), offer(Tier.SPOT, "z2", 1_250_000),
          offer(Tier.ONDEMAND, "od", 3_000_000)]
JOB = Job(id="j", name="t", team="a", state=JobState.QUEUED, spec={}, budget=100_000_000, priority=0, submitted_at=0.0,
          updated_at=0.0, deadline=NOW + 7200, expected_hours="2", spent=2_500_000)
CAPACITY = {"z1": 1, "z2": 1, "od": 1}


@pytest.mark.parametrize("up, holding, unit", [
    pytest.param({"z1", "z2"}, None, 1_000_000, id="both zones up → in the cheaper one's price"),
    pytest.param({"z2"}, None, 1_250_000, id="only the dearer zone up → in its price, the one the job would pay"),
    pytest.param({"z1", "z2"}, Holding(Tier.SPOT, "z2"), 1_250_000, id="holding the dearer zone → in its price"),
    pytest.param(set(), None, 1_000_000, id="no zone up → in the cheapest spot price"),
])
def test_the_policys_figures_are_in_the_price_of_the_spot_zone_it_would_run_on(up, holding, unit):
    inp = policy_input(JOB, [], OFFERS, CAPACITY, frozenset(up), now=NOW, changeover=120, holding=holding)
    assert inp.price_ratio == pytest.approx(3_000_000 / unit)
    assert inp.spent == pytest.approx(2_500_000 / unit)
    assert {z: inp.spot_price(z) for z in ("z1", "z2")} == pytest.approx({"z1": 1_000_000 / unit,
                                                                          "z2": 1_250_000 / unit})


CONFIG = """
pools: []
zones:
  - {name: sim-a-pricey, tier: spot, instance_type: g5.xlarge, price_per_hour: "3.00"}
  - {name: sim-b-cheap, tier: spot, instance_type: g5.xlarge, price_per_hour: "1.00"}
tick_seconds: 0.2
stop_grace_seconds: 2
"""
TASK = """
name: dl
resources: {accelerators: A10G:1}
run: sleep 120
broker: {budget_usd: 5, expected_hours: 0.05, deadline: 2h}
"""


def test_a_job_with_a_deadline_runs_on_the_cheaper_spot_zone(tmp_path):
    proc, url = start_broker(tmp_path, f"sqlite://{tmp_path / 'b.db'}", config=CONFIG)
    try:
        run = cli_runner(url)
        task = tmp_path / "task.yaml"
        task.write_text(TASK)
        job_id = json.loads(run("--json", "submit", str(task)).stdout)["id"]
        # with nothing saved yet, the policy takes spot from idle once it has seen it up for two of its 60 s ticks
        job = wait_for(lambda: (j := json.loads(run("--json", "status", job_id).stdout))["attempt_list"] and j,
                       timeout=240, interval=1)
        placement = job["attempt_list"][-1]["placement"]
        assert (placement["tier"], placement["zone"]) == ("spot", "sim-b-cheap"), placement
    finally:
        stop_broker(proc, url)
