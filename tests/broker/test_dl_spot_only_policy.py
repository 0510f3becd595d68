"""A job with no reliable tier (its task asks for spot only: no on-demand or pool offer fits it) and a deadline, as its
live policy weighs it (QA, Dec 7):

* it waited for spot to "prove" itself — "spot in sim-b has not yet been seen to last: … no money is saved yet against
  on-demand; it takes spot once it has seen it up for 2 min" — and was placed only by the safety net 2.5 min before
  its deadline. With no on-demand there is nothing to save against and nothing to fall back on: it takes spot as soon
  as spot is up (``pricing.spot_policy.SlackReserve``, the fallback where there is no on-demand price);
* placed on spot by the safety net, its place event said "the budget left pays for the rest of the expected run and a
  clean stop on spot only: on on-demand, … the job would be stopped at its budget before its end" of a $1.00 budget
  that on-demand would have cost $0.02 of: it says the real reason, that it may run only on spot
  (``broker.engine.spot.within_budget``).

The policy objects the engine runs, on the inputs :func:`broker.engine.spot.policy_input` builds for such a job (no
on-demand price: ``price_ratio`` 1e9, no pool, on-demand not available). A job with a reliable tier is unchanged (the
benchmark's figures are byte-identical: checked by replaying the windows)."""

from __future__ import annotations

from broker.engine.spot import RealTime, decide, within_budget
from pricing.deadline import Action, Decision, PolicyInput
from pricing.policy import make_policy
from pricing.spot_policy import SlackReserve

NOW = 1_796_658_000.0


def _spot_only(**kw) -> PolicyInput:
    given = dict(now=NOW, deadline=NOW + 600, work_total=36.0, work_done=0.0, changeover=5.0,
                 spot_zones_available=frozenset({"sim-b"}), ondemand_available=False, onprem_available=False,
                 tick=60.0, started_at=NOW, price_ratio=1e9, onprem_ratio=None, spent=0.0, budget=1_000_000 / 426_000,
                 stop_seconds=3.0)
    return PolicyInput(**{**given, **kw})


def test_a_spot_only_job_takes_spot_as_soon_as_it_is_up():
    inp = _spot_only()
    for policy in (RealTime(make_policy()), RealTime(make_policy("slack_reserve"))):
        d = decide(policy, inp)  # its first look at the zone: up for one tick
        assert d.action is Action.SPOT and d.zone == "sim-b", d
        assert "not yet been seen to last" not in d.reason and "saved" not in d.reason, d.reason
        assert "may run only on spot" in d.reason, d.reason


def test_with_on_demand_the_zone_must_still_prove_itself_first():
    inp = _spot_only(ondemand_available=True, price_ratio=2.36)
    policy = SlackReserve()
    policy.observe(inp)
    d = policy.decide(inp)
    assert d.action is Action.WAIT and "has not yet been seen to last" in d.reason, d


def test_placed_on_spot_by_the_safety_net_it_says_it_may_run_only_on_spot_not_that_its_budget_is_short():
    # 2.5 min left for 36 s of work and a 2 min changeover: the safety net's "anything else could miss the deadline"
    inp = _spot_only(deadline=NOW + 150, changeover=120.0)
    net = make_policy()
    net.observe(inp)
    chosen = net.decide(inp)
    assert chosen.action is Action.ONDEMAND and "safety net" in chosen.reason, chosen
    d = within_budget(inp, chosen)
    assert d.action is Action.SPOT and d.zone == "sim-b", d
    assert "budget" not in d.reason, d.reason
    assert d.reason.startswith("the job may run only on spot (no on-demand or pool offer fits it)"), d.reason
    # no spot up: the decision stays as it was (the scheduler finds nothing to place it on and says so)
    down = _spot_only(deadline=NOW + 150, changeover=120.0, spot_zones_available=frozenset())
    assert within_budget(down, chosen) is chosen


def test_a_budget_short_of_on_demand_still_says_so():
    inp = _spot_only(ondemand_available=True, price_ratio=2.36, budget=0.03 / 0.426 * 1.0, work_total=180.0)
    chosen = Decision(Action.ONDEMAND, None, "safety net: anything else could miss the deadline")
    d = within_budget(inp, chosen)
    assert d.action is Action.SPOT and "the budget left pays for the rest of the expected run" in d.reason, d
