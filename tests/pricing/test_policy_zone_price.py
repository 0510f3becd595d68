"""Live, spot zones are priced apart: the policy takes the cheapest one up, not the first by name.

QA walkthrough (Dec 8): a job with a deadline went to spot in aws/us-east-1a at $8.20/h while us-east-1d had the same
p4d.24xlarge at $2.47/h ("spot in us-east-1a … is cheapest in expectation"), and on a local broker to sim-a-pricey
($3.00/h) over sim-b-cheap ($1.00/h): the zone was chosen by how long its spot had been seen up, then by name, and
never by price. In a trace replay every zone costs the same, so there the choice is as before.
"""

from __future__ import annotations

import pytest

from pricing.deadline import Action, Holding, PolicyInput
from pricing.offers import Tier
from pricing.policy import make_policy

H = 3600.0
SAVED = dict(work_done=10 * H, spent=4.0)  # money saved already: the policy takes spot at once


def decide(policy, i: PolicyInput):
    policy.observe(i)  # as the engine and the simulator ask: the tick seen, then the decision
    return policy.decide(i)


def inp(**kw) -> PolicyInput:
    return PolicyInput(**{**dict(now=0.0, deadline=80 * H, work_total=48 * H, work_done=0.0, changeover=0.2 * H,
                                 tick=600.0, price_ratio=3.145), **kw})


@pytest.mark.parametrize("name", ["broker", "slack_reserve"])
@pytest.mark.parametrize("prices, zone", [
    pytest.param({"a": 3.3}, "b", id="zone a first by name but 3.3 times b's price → b"),
    pytest.param({"b": 1.02}, "a", id="b a little dearer → a"),
    pytest.param({}, "a", id="the same price everywhere (a trace replay) → the first by name, as before"),
])
def test_the_policy_takes_the_cheapest_zone_up(name, prices, zone):
    policy = make_policy(name)
    decision = decide(policy, inp(spot_zones_available=frozenset({"a", "b"}), spot_prices=prices, **SAVED))
    assert (decision.action, decision.zone) == (Action.SPOT, zone)


def test_a_dearer_zone_up_longer_does_not_win_over_a_cheaper_one():
    policy = make_policy("broker")
    for t in range(6):  # zone a up for an hour, b just come up
        decide(policy, inp(now=t * 600.0, spot_zones_available=frozenset({"a"}), spot_prices={"a": 2.0}, **SAVED))
    decision = decide(policy, inp(now=3600.0, spot_zones_available=frozenset({"a", "b"}), spot_prices={"a": 2.0},
                                 **SAVED))
    assert (decision.action, decision.zone) == (Action.SPOT, "b")


def test_held_spot_is_kept_even_where_another_zone_is_cheaper():
    decision = decide(make_policy("broker"), inp(holding=Holding(Tier.SPOT, "a"), spot_zones_available=frozenset(
        {"a", "b"}), spot_prices={"a": 1.5}, **SAVED))
    assert (decision.action, decision.zone) == (Action.SPOT, "a")  # a move spends a changeover


def test_the_cost_cap_weighs_a_tick_of_spot_at_its_zones_price():
    from pricing.deadline import cap_margin

    i = inp(spot_zones_available=frozenset({"a", "b"}), spot_prices={"b": 1.5}, **SAVED)
    assert cap_margin(i, Action.SPOT, "a") - cap_margin(i, Action.SPOT, "b") == pytest.approx(0.5 * 600 / 3600)
