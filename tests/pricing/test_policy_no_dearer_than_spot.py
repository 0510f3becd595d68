"""A reliable tier no dearer than spot is taken at once: waiting for spot could not make the job cheaper.

Found in a sweep on the local launcher: CPU jobs with a deadline queued behind a busy pool at $0.20 a slot-hour while
the simulated spot zone ($0.42/h) was full. When pool slots came free, some of the queued jobs took them and others,
ahead of them in the queue, went on "waiting for spot" for minutes: the plan weighs waiting and running on the pool
as equal (the pool costs the same later), and a float's rounding, different for each job's history, chose.
"""

from __future__ import annotations

import pytest

from pricing.deadline import Action, Holding, PolicyInput
from pricing.offers import Tier
from pricing.policy import make_policy

SPOT_PRICE, OD_PRICE = 0.4246, 1.006  # the simulated g5.xlarge zones' $/h


def look(t: float, *, pool: bool, spot: frozenset[str] = frozenset(), pool_price: float = 0.20,
         ondemand_price: float = OD_PRICE, holding: Holding | None = None) -> PolicyInput:
    return PolicyInput(now=t, deadline=4 * 3600, work_total=72, work_done=0, changeover=5, holding=holding,
                       spot_zones_available=spot, ondemand_available=True, onprem_available=pool,
                       tick=60, started_at=0, price_ratio=ondemand_price / SPOT_PRICE,
                       onprem_ratio=pool_price / SPOT_PRICE, spent=0, budget=1 / SPOT_PRICE)


def decision_after(name: str, busy_looks: int, last: PolicyInput):
    """The policy's decision at ``last``, after ``busy_looks`` looks (every half second, as the demo's engine ticks)
    at a full pool and a full spot zone."""
    policy = make_policy(name)
    for i in range(busy_looks):
        x = look(i * 0.5, pool=False)
        policy.observe(x)
        policy.decide(x)
    policy.observe(last)
    return policy.decide(last)


@pytest.mark.parametrize("name", ["broker", "slack_reserve"])
@pytest.mark.parametrize("pool_price", [0.10, 0.20, SPOT_PRICE], ids=["pool at a quarter of spot", "pool at half of spot",
                                                                      "pool at spot's price"])
def test_a_queued_job_takes_a_free_pool_no_dearer_than_spot_whatever_it_saw_before(name, pool_price):
    waited = [n for n in range(0, 120, 7)
              if decision_after(name, n, look(n * 0.5, pool=True, pool_price=pool_price)).action is not Action.ONPREM]
    assert waited == [], f"after these many looks at a full pool the job still waited: {waited}"


def test_the_reason_says_why_it_runs_on_the_pool_now():
    d = decision_after("broker", 14, look(7.0, pool=True))
    assert d.action is Action.ONPREM
    assert d.reason.startswith("the free on-prem pool costs no more an hour than spot: run there now")


@pytest.mark.parametrize("name", ["broker", "slack_reserve"])
def test_on_demand_no_dearer_than_spot_is_taken_at_once_too(name):
    d = decision_after(name, 30, look(15.0, pool=False, ondemand_price=SPOT_PRICE))
    assert d.action is Action.ONDEMAND and "on-demand costs no more an hour than spot" in d.reason


@pytest.mark.parametrize("name", ["broker", "slack_reserve"])
def test_a_pool_dearer_than_spot_leaves_the_choice_to_the_policy(name):
    # 1.5x spot, 4 h of slack for a minute's work: waiting for spot is the policy's call, not this rule's
    d = decision_after(name, 0, look(0.0, pool=True, pool_price=1.5 * SPOT_PRICE))
    assert "costs no more an hour than spot" not in d.reason


@pytest.mark.parametrize("name", ["broker", "slack_reserve"])
def test_a_full_pool_is_no_reason_to_buy_on_demand(name):
    d = decision_after(name, 10, look(5.0, pool=False))
    assert d.action is Action.WAIT  # on-demand at 2.4x spot, 4 h of slack: it waits, as before


@pytest.mark.parametrize("name", ["broker", "slack_reserve"])
def test_a_job_on_spot_stays_there_though_the_pool_is_cheaper(name):
    # moving costs a changeover and the run it has; the rule is for jobs off spot
    d = decision_after(name, 0, look(0.0, pool=True, spot=frozenset({"z"}), holding=Holding(Tier.SPOT, "z")))
    assert d.action is Action.SPOT and d.zone == "z"
