"""The broker's policy and its safety net, decision by decision (seconds, not ticks)."""

from __future__ import annotations

import pytest

from pricing.deadline import Action, Holding, PolicyInput
from pricing.offers import Tier
from pricing.policy import POLICIES, make_policy

H = 3600.0
BASE = dict(now=0.0, deadline=80 * H, work_total=48 * H, work_done=0.0, changeover=0.2 * H, tick=600.0, price_ratio=3.145)


def inp(**kw) -> PolicyInput:
    return PolicyInput(**{**BASE, **kw})


SPOT_A = Holding(Tier.SPOT, "a")
OD = Holding(Tier.ONDEMAND)

CASES = [
    ("idle with spot in a zone → runs on spot there", inp(spot_zones_available=frozenset({"a"})), Action.SPOT, "a"),
    ("on spot that is still there → stays", inp(holding=SPOT_A, spot_zones_available=frozenset({"a", "b"})), Action.SPOT, "a"),
    ("preempted with 32 h of slack → waits for spot", inp(holding=None), Action.WAIT, None),
    ("preempted in zone a while b has spot → moves to b", inp(holding=SPOT_A, spot_zones_available=frozenset({"b"})), Action.SPOT, "b"),
    ("no spot and slack down to the reserve → on-demand", inp(now=30 * H, work_done=2.2 * H), Action.ONDEMAND, None),
    ("no spot, too late for anything else → the safety net picks on-demand", inp(now=31.5 * H, work_done=0.0), Action.ONDEMAND, None),
    (
        "no spot, a free on-prem pool cheaper than on-demand → on-prem is the fallback",
        inp(now=30 * H, work_done=2.2 * H, onprem_available=True, onprem_ratio=2.0),
        Action.ONPREM,
        None,
    ),
    (
        "no spot, an on-prem pool dearer than on-demand → on-demand",
        inp(now=30 * H, work_done=2.2 * H, onprem_available=True, onprem_ratio=5.0),
        Action.ONDEMAND,
        None,
    ),
    ("on on-demand, spot just came back (not yet proven) → stays on on-demand", inp(now=30 * H, work_done=2.2 * H, holding=OD, spot_zones_available=frozenset({"a"})), Action.ONDEMAND, None),
    (
        "spot available but a changeover now would miss the deadline → on-demand",
        inp(now=31.9 * H, work_done=0.0, holding=OD, spot_zones_available=frozenset({"a"})),
        Action.ONDEMAND,
        None,
    ),
    (
        "spot available but spot spending would break the on-demand-only cost cap → on-demand",
        inp(spot_zones_available=frozenset({"a"}), spent=153.0),
        Action.ONDEMAND,
        None,
    ),
]


@pytest.mark.parametrize("given, action, zone", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_broker_decides(given, action, zone):
    policy = make_policy("broker")
    policy.observe(given)
    decision = policy.decide(given)
    assert (decision.action, decision.zone) == (action, zone), decision.reason
    assert decision.reason


def test_a_spot_run_that_has_lasted_twenty_minutes_lures_the_job_off_on_demand():
    policy = make_policy("broker")
    for i in range(3):  # three 10-minute ticks with spot up in zone a
        state = inp(now=(30 + i / 6) * H, work_done=2.2 * H, holding=OD, spot_zones_available=frozenset({"a"}))
        policy.observe(state)
        decision = policy.decide(state)
    assert (decision.action, decision.zone) == (Action.SPOT, "a")


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_registered_policy_takes_the_net_when_no_time_is_left_to_spare(name):
    state = inp(now=31.9 * H, work_done=0.0)
    policy = make_policy(name)
    policy.observe(state)
    assert policy.decide(state).action is Action.ONDEMAND


def test_unknown_policy_names_the_known_ones():
    with pytest.raises(ValueError, match="broker"):
        make_policy("nope")
