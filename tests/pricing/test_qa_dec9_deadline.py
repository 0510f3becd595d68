"""The deadline arithmetic live, where the deadline falls between the policy's ticks (QA walkthrough, Dec 9).

A 30 s job (a simulated spot zone at $18/h, on-demand at $54/h): with a 45 s deadline it was placed on on-demand with
"safety net: the deadline can no longer be met, even on on-demand (32 s short)" — and met it, 14 s before it:
:func:`pricing.deadline.slack` counted the 45 s left as no whole 60 s tick. With a 10 min deadline it went to on-demand
as "too close to risk losing spot" (under one 10 min planning step left), where a dry run a second earlier, a whole step
left, said spot. A trace replay, on the tick grid, is unchanged.
"""

from __future__ import annotations

import pytest

from pricing.deadline import PolicyInput, slack
from pricing.policy import Action, make_policy

SPOT_UP = frozenset({"sim-spot"})


def job(left: float, *, changeover: float = 2.0, work: float = 30.0) -> PolicyInput:
    return PolicyInput(now=1000.0, deadline=1000.0 + left, work_total=work, work_done=0.0, changeover=changeover,
                       spot_zones_available=SPOT_UP, tick=60.0, started_at=1000.0, price_ratio=3.0)


def decide(inp: PolicyInput):
    policy = make_policy("broker")
    policy.observe(inp)
    return policy.decide(inp)


def test_the_time_to_spare_counts_the_seconds_left_between_ticks():
    assert slack(job(45)) == pytest.approx(45 - 32)
    d = decide(job(45))
    assert "can no longer be met" not in d.reason, d.reason
    assert d.action is Action.ONDEMAND and "too close to risk losing spot" in d.reason, d


def test_on_the_tick_grid_the_time_to_spare_is_whole_ticks_as_a_trace_replay_counts():
    assert slack(job(600)) == 600 - 32
    # a replay's tick, now and deadline in whole ticks, its float products a hair off the grid
    inp = PolicyInput(now=7 * 600.0, deadline=52 * 3600.0, work_total=3600.0, work_done=0.0, changeover=720.0,
                      tick=600.0)
    assert slack(inp) == (52 * 6 - 7) * 600.0 - 3600.0 - 720.0


@pytest.mark.parametrize("left", [600.0, 599.0, 540.0, 300.0])
def test_a_short_job_well_before_its_deadline_takes_spot_with_or_without_a_whole_planning_step_left(left):
    d = decide(job(left, changeover=120.0))
    assert d.action is Action.SPOT and d.zone == "sim-spot", d
    assert "too close" not in d.reason, d.reason


def test_under_a_planning_step_spot_is_refused_where_losing_it_would_leave_on_demand_too_little_time():
    # 150 s a run (30 s of work and a 120 s changeover): spot lost just before the end leaves 250 - 150 = 100 s
    d = decide(job(250.0, changeover=120.0))
    assert d.action is Action.ONDEMAND and "too close to risk losing spot" in d.reason, d


def test_a_deadline_out_of_reach_says_the_changeover_it_counted():
    """A 30 s job 45 s before its deadline, with the default 2 min changeover: "the deadline can no longer be met, even
    on on-demand (2 min short)" — then a zone that starts a job at once met it. The changeover is the broker's estimate,
    and the words now say it was counted."""
    from pricing.policy import SafetyNet, make_policy

    inp = PolicyInput(now=0.0, deadline=45.0, work_total=30.0, work_done=0.0, changeover=120.0, tick=60.0)
    policy = SafetyNet(make_policy("broker"))
    policy.observe(inp)
    decision = policy.decide(inp)
    assert decision.reason.startswith("safety net: the deadline can no longer be met, even on on-demand ("), decision
    assert ", counting a changeover of 2 min)" in decision.reason, decision.reason


@pytest.mark.parametrize("deadline", [600.0, 599.0], ids=["a whole planning step left", "under a step left"])
@pytest.mark.parametrize("budget, unpaid", [(0.015, True), (1.0, False), (None, False)],
                         ids=["a budget that pays for spot only", "one that pays for on-demand", "no budget"])
def test_spot_taken_on_the_time_on_demand_would_need_says_where_the_budget_would_not_pay_for_it(deadline, budget,
                                                                                                 unpaid):
    """A 30 s job with a budget that covers spot only was told "9 min to spare before on-demand would have to finish
    the job" (or that losing spot "would still leave on-demand the time"), as if on-demand were its way out."""
    inp = PolicyInput(now=0.0, deadline=deadline, work_total=30.0, work_done=0.0, changeover=2.0, tick=60.0,
                      spot_zones_available=frozenset({"sim-a"}), price_ratio=3.0, budget=budget)
    policy = make_policy("broker")
    policy.observe(inp)
    decision = policy.decide(inp)
    assert decision.action is Action.SPOT, decision
    assert ("in time, not in money: the budget left would not pay for on-demand" in decision.reason) is unpaid, \
        decision.reason


def test_a_deadline_under_a_planning_step_away_is_said_to_the_second_where_rounded_it_reads_as_far_as_the_step():
    """"the deadline is 10 min away, less than the 10 min this policy plans spot in", with 9 min 52 s left."""
    inp = PolicyInput(now=0.0, deadline=592.0, work_total=30.0, work_done=0.0, changeover=2.0, tick=60.0,
                      spot_zones_available=frozenset({"sim-a"}), price_ratio=3.0)
    policy = make_policy("broker")
    policy.observe(inp)
    decision = policy.decide(inp)
    assert "the deadline is 592 s away, less than the 10 min this policy plans spot in" in decision.reason, decision
