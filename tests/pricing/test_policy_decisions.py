"""The broker's policy and its safety net, decision by decision (seconds, not ticks)."""

from __future__ import annotations

import numpy as np
import pytest

from pricing.deadline import Action, Decision, Holding, PolicyInput, changeover_allowance, cost_headroom
from pricing.offers import Tier
from pricing.policy import POLICIES, make_policy

H = 3600.0
BASE = dict(now=0.0, deadline=80 * H, work_total=48 * H, work_done=0.0, changeover=0.2 * H, tick=600.0, price_ratio=3.145)


def inp(**kw) -> PolicyInput:
    return PolicyInput(**{**BASE, **kw})


SPOT_A = Holding(Tier.SPOT, "a")
OD = Holding(Tier.ONDEMAND)
SAVED = dict(work_done=10 * H, spent=4.0)  # 10 h done for 4 spot-hours: well under the on-demand line

CASES = [
    ("idle with spot in a zone, money saved → runs on spot there", inp(spot_zones_available=frozenset({"a"}), **SAVED), Action.SPOT, "a"),
    ("idle, spot just appeared, nothing saved yet → waits a tick to see it last", inp(spot_zones_available=frozenset({"a"})), Action.WAIT, None),
    ("on spot that is still there → stays", inp(holding=SPOT_A, spot_zones_available=frozenset({"a", "b"})), Action.SPOT, "a"),
    ("preempted with 32 h of slack → waits for spot", inp(holding=None), Action.WAIT, None),
    ("preempted in zone a while b has spot → moves to b", inp(holding=SPOT_A, spot_zones_available=frozenset({"b"}), **SAVED), Action.SPOT, "b"),
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
def test_slack_reserve_decides(given, action, zone):
    policy = make_policy("slack_reserve")
    policy.observe(given)
    decision = policy.decide(given)
    assert (decision.action, decision.zone) == (action, zone), decision.reason
    assert decision.reason


def test_a_spot_run_that_has_lasted_twenty_minutes_lures_the_job_off_on_demand():
    policy = make_policy("slack_reserve")
    for i in range(3):  # three 10-minute ticks with spot up in zone a
        state = inp(now=(30 + i / 6) * H, work_done=2.2 * H, holding=OD, spot_zones_available=frozenset({"a"}))
        policy.observe(state)
        decision = policy.decide(state)
    assert (decision.action, decision.zone) == (Action.SPOT, "a")


def test_spot_that_lasted_two_ticks_is_taken_even_with_nothing_saved():
    policy = make_policy("slack_reserve")
    for i in range(2):
        state = inp(now=i * 600.0, spot_zones_available=frozenset({"a"}))
        policy.observe(state)
        decision = policy.decide(state)
    assert (decision.action, decision.zone) == (Action.SPOT, "a"), decision.reason


def hop_after(minutes: int, spent: float) -> Decision:
    """On on-demand at 30 h with 2.2 h done; spot up in zone a for ``minutes``."""
    policy = make_policy("slack_reserve")
    for i in range(minutes // 10):
        state = inp(now=30 * H + i * 600, work_done=2.2 * H, holding=OD, spent=spent, spot_zones_available=frozenset({"a"}))
        policy.observe(state)
        decision = policy.decide(state)
    return decision


def test_a_hop_paid_from_the_allowance_waits_for_an_hour_of_spot_not_twenty_minutes():
    # spent 7 spot-hours: 0.9 saved against the on-demand line, less than a hop's two changeovers (1.4)
    assert hop_after(30, spent=7.0).action is Action.ONDEMAND
    assert (hop_after(60, spent=7.0).action, hop_after(60, spent=7.0).zone) == (Action.SPOT, "a")
    assert hop_after(30, spent=0.0).action is Action.SPOT  # 7.9 saved: 20 minutes of proof do


def test_cost_headroom_and_allowance_in_spot_hours():
    # on-demand only: ceil((48 h + 0.2 h) / 10 min) = 290 ticks at k
    assert cost_headroom(inp()) == pytest.approx(0.0)
    assert cost_headroom(inp(work_done=10 * H, spent=4.0)) == pytest.approx(60 / 6 * 3.145 - 4.0)
    assert changeover_allowance(inp()) == pytest.approx(2 / 6 * (1 + 3.145))


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_registered_policy_takes_the_net_when_no_time_is_left_to_spare(name):
    state = inp(now=31.9 * H, work_done=0.0)
    policy = make_policy(name)
    policy.observe(state)
    assert policy.decide(state).action is Action.ONDEMAND


def test_unknown_policy_names_the_known_ones():
    with pytest.raises(ValueError, match="broker"):
        make_policy("nope")


def up(**kw) -> Decision:
    policy = make_policy("uniform_progress", cost_cap=False)
    state = inp(**kw)
    policy.observe(state)
    return policy.decide(state)


def test_uniform_progress_follows_the_papers_evaluated_variant_rule_by_rule():
    # behind the line C·t/R (at 10 h the line is at 6 h), no spot: catch up on on-demand
    assert up(now=10 * H, work_done=5 * H).action is Action.ONDEMAND
    # ahead of the line, no spot: wait
    assert up(now=10 * H, work_done=7 * H).action is Action.WAIT
    # on on-demand and well ahead of the line, no spot: keeps on-demand (no hysteresis)
    assert up(now=10 * H, work_done=8 * H, holding=OD).action is Action.ONDEMAND
    # spot available takes it, from on-demand too, even while behind
    assert up(now=10 * H, work_done=5 * H, holding=OD, spot_zones_available=frozenset({"a"})).action is Action.SPOT
    # the 2d net: 32 h to go, 31.6 h of work (+ 2d = 32 h): on-demand even with spot
    assert up(now=48 * H, work_done=16.4 * H, spot_zones_available=frozenset({"a"})).action is Action.ONDEMAND
    # ... but a live spot instance is kept there
    assert up(now=48 * H, work_done=16.4 * H, holding=SPOT_A, spot_zones_available=frozenset({"a"})).action is Action.SPOT
    # the d net: a finish on on-demand needs every tick left: on-demand even with spot
    assert up(now=31.8 * H, work_done=0.0, spot_zones_available=frozenset({"a"})).action is Action.ONDEMAND


# --- the default policy: model-predictive control over an availability model learnt online ---

from pricing.spot_policy import AGE_EDGES, ModelPredictive, _Plan, _transition, cached_plan, solve_plan  # noqa: E402


def mpc_after(history: list[bool], **kw) -> tuple[ModelPredictive, Decision]:
    """A fresh ModelPredictive fed ``history`` (spot up or not, one 10-minute tick each), then asked."""
    policy = make_policy("broker")
    state = None
    for i, is_up in enumerate(history):
        state = inp(now=i * 600.0, **{**kw, "spot_zones_available": frozenset({"a"}) if is_up else frozenset()})
        policy.observe(state)
    return policy.inner, policy.decide(state)


def test_the_learnt_hazards_follow_the_jobs_own_history():
    flickery, _ = mpc_after([True, False] * 30)
    steady, _ = mpc_after([True] * 50 + [False] * 10)
    assert flickery.alphas()[0] > 1.0 > steady.alphas()[0]  # up-runs of one tick vs one of 50


def test_plans_idle_on_a_long_deadline_run_on_steady_spot_and_go_reliable_at_the_end():
    _, d = mpc_after([True] * 30, work_done=0.0)
    assert (d.action, d.zone) == (Action.SPOT, "a")
    _, d = mpc_after([True] * 30 + [False])  # just lost, 31 h of slack: wait for spot
    assert d.action is Action.WAIT
    _, d = mpc_after([True] * 3 + [False] * 20, work_done=0.0, deadline=50 * H)  # under 2 h of slack left
    assert d.action is Action.ONDEMAND


def test_transition_rows_are_distributions_and_hazards_fall_with_age():
    t = _transition(1.0, 1.0, 2.0)
    assert np.allclose(t.sum(1), 1.0) and (t >= 0).all()
    n = len(AGE_EDGES)
    ends = [t[n + b, 0] for b in range(n)]  # up bucket b → down, age 1
    assert all(a > b for a, b in zip(ends, ends[1:]))


def test_plan_rows_round_trip_through_their_change_points():
    dec = np.random.default_rng(0).integers(0, 3, size=(3, 2, 4, 9)).astype(np.int8)
    plan = _Plan(dec)
    assert all(plan.get(*i, w) == dec[(*i, w)] for i in np.ndindex(dec.shape[:3]) for w in range(9))


def test_the_plan_knows_a_hopeless_state_goes_reliable_and_a_finished_one_costs_nothing():
    plan = solve_plan(_transition(1.0, 1.0, 2.0), 3.0, 6, 5, n_steps=20, w_max=120)
    down, up = 0, len(AGE_EDGES)
    assert plan.get(3, 0, up, 100) == 2  # 100 units of work in 3 steps cannot be done: reliable
    assert plan.get(20, 0, down, 10) == 0  # 2 steps of work in 20 with no spot now: wait
    assert plan.get(20, 0, up + len(AGE_EDGES) - 1, 10) == 1  # long-lived spot and slack: spot


def test_a_plan_given_a_chain_follows_that_chain():
    # benchmarks/policy_bound.py hands the plan a chain measured on the window instead of the model's
    kw = dict(n_steps=30, w_max=100)
    model = cached_plan(1.0, 1.0, 2.0, 0.0, 3.145, 6, 5, **kw)  # what the broker's policy plans on
    same = solve_plan(_transition(1.0, 1.0, 2.0), 3.145, 6, 5, **kw)
    states = [(n, h, s, w) for n in range(1, 31) for h in range(model.shape[1]) for s in range(2 * len(AGE_EDGES)) for w in range(101)]
    assert all(model.get(*x) == same.get(*x) for x in states)
    never_back = _transition(1.0, 1.0, 2.0)
    never_back[:len(AGE_EDGES)] = 0.0
    never_back[np.arange(len(AGE_EDGES)), np.minimum(np.arange(len(AGE_EDGES)) + 1, len(AGE_EDGES) - 1)] = 1.0  # outages never end
    hopeless = solve_plan(never_back, 3.145, 6, 5, **kw)
    assert model.get(30, 0, 0, 50) == 0 and hopeless.get(30, 0, 0, 50) == 2  # in an outage: wait, unless it never ends


def mpc_zones_after(history: list[set[str]], **kw) -> tuple[ModelPredictive, Decision]:
    """A fresh ModelPredictive fed ``history`` (the zones with spot, one 10-minute tick each), then asked."""
    policy = make_policy("broker")
    state = None
    for i, zones in enumerate(history):
        state = inp(now=i * 600.0, **{**kw, "spot_zones_available": frozenset(zones)})
        policy.observe(state)
    return policy.inner, policy.decide(state)


def test_several_zones_the_job_takes_the_one_whose_spot_run_has_lasted_longest():
    # b has been up for 12 ticks, a only for the last two: hazards fall with age, so b
    _, d = mpc_zones_after([{"b"}] * 10 + [{"a", "b"}] * 2, work_done=0.0)
    assert (d.action, d.zone) == (Action.SPOT, "b"), d.reason
    _, d = mpc_zones_after([{"a"}] * 10 + [{"a", "b"}] * 2, work_done=0.0)
    assert (d.action, d.zone) == (Action.SPOT, "a"), d.reason


def test_several_zones_up_runs_are_each_zones_own_so_zone_flicker_counts_as_preemption():
    # Some zone always has spot, but each zone's runs last two ticks: an instance would be
    # lost every two ticks, and the learnt up-run hazard says so (one merged "any zone" run
    # would look like one long, steady run).
    flicker, _ = mpc_zones_after([{"a"}, {"a"}, {"b"}, {"b"}] * 15, work_done=0.0)
    steady, _ = mpc_zones_after([{"a"}] * 60, work_done=0.0)
    assert flicker.alphas()[0] > 1.0 > steady.alphas()[0]
    assert flicker.model.up and flicker.model.age_seconds == 2 * 600.0  # the plan sees b's age, not the merged run's


def test_leaving_on_demand_to_wait_needs_money_saved_not_the_allowance():
    from pricing.deadline import within_cost_cap

    # 10 h done on on-demand alone (its changeover and 10 h: 62 ticks at k): nothing saved
    on_od = inp(work_done=10 * H, spent=62 / 6 * 3.145, holding=OD)
    assert cost_headroom(on_od) == pytest.approx(0.0)
    assert not within_cost_cap(on_od, Action.WAIT)  # a wait back to on-demand would cost a second changeover
    assert within_cost_cap(on_od, Action.SPOT, "a")  # a hop to spot may use the allowance
    # the same job with a few spot-hours saved may wait
    saved = inp(work_done=10 * H, spent=62 / 6 * 3.145 - 3.0, holding=OD)
    assert within_cost_cap(saved, Action.WAIT)
    # idle (just preempted, say): waiting keeps the allowance, as before
    assert within_cost_cap(inp(work_done=10 * H, spent=62 / 6 * 3.145), Action.WAIT)


@pytest.mark.parametrize("deadline", [52, 56, 60, 70, 80])
def test_with_no_spot_at_all_a_job_costs_exactly_on_demand_only(deadline):
    # It waits for spot while slack lasts, then runs on on-demand; it used to leave on-demand
    # again to wait and come back, one changeover above on-demand only.
    from pricing.simulate import simulate

    none = np.zeros((1, 80 * 6), bool)
    run = simulate(make_policy("broker"), none, gap=600, work=48 * H, deadline=deadline * H, changeover=0.2 * H, price_ratio=3.145)
    assert run.finished and "S" not in run.actions
    assert run.cost == pytest.approx(290 / 6 * 3.145), run.actions


def test_several_zones_the_model_learns_how_often_another_zone_is_up_when_the_held_one_ends():
    # a's runs end while b is up, then b's while a is up: every loss finds another zone
    both, _ = mpc_zones_after([{"a"}] * 3 + [{"a", "b"}] + [{"b"}] * 3 + [{"a", "b"}] + [{"a"}] * 3 + [{"a", "b"}] + [{"b"}] * 3)
    alone, _ = mpc_zones_after([{"a"}] * 3 + [set()] * 2 + [{"b"}] * 3 + [set()] * 2 + [{"a"}] * 3)
    single, _ = mpc_after([True] * 3 + [False] * 2 + [True] * 3 + [False] * 2 + [True] * 3)
    assert both.failover() >= 0.7 and alone.failover() == 0.0 and single.failover() == 0.0


def test_failover_sends_an_ended_up_run_to_a_new_up_run_instead_of_down():
    n = len(AGE_EDGES)
    plain, fail = _transition(1.0, 1.0, 2.0), _transition(1.0, 1.0, 2.0, failover=0.6)
    assert np.allclose(fail.sum(1), 1.0) and (fail >= 0).all()
    for b in range(n):
        assert fail[n + b, n] == pytest.approx(0.6 * plain[n + b, 0] + plain[n + b, n])
        assert fail[n + b, 0] == pytest.approx(0.4 * plain[n + b, 0])
    assert np.allclose(fail[:n], plain[:n])  # down-runs end in an up-run either way


def test_a_plan_that_can_fail_over_leaves_on_demand_more_readily():
    # On on-demand with spot up somewhere, losing a young spot run usually means another zone
    # rather than a wait, so staying on on-demand is the plan's choice in fewer states.
    kw = dict(n_steps=60, w_max=200)
    alone, fail = solve_plan(_transition(1.2, 1.0, 2.0), 3.145, 6, 5, **kw), solve_plan(_transition(1.2, 1.0, 2.0, failover=0.8), 3.145, 6, 5, **kw)
    on_od = 2  # jmax = ceil(6 / 5) = 2: holding 2 is the reliable tier past its changeover
    up = len(AGE_EDGES)
    states = [(n, on_od, up + b, w) for n in range(1, 61) for b in range(3) for w in range(0, 201, 5)]
    stay_alone = sum(alone.get(*s) == 2 for s in states)
    stay_fail = sum(fail.get(*s) == 2 for s in states)
    assert stay_fail < stay_alone


def test_a_budget_that_covers_on_demand_only_bounds_the_cap_allowance():
    od_only = 290 / 6 * 3.145  # 48 h + a 0.2 h changeover on 600 s ticks
    full = 2 / 6 * (1 + 3.145)
    assert changeover_allowance(inp(budget=od_only + 10)) == pytest.approx(full)
    assert changeover_allowance(inp(budget=od_only + 0.5)) == pytest.approx(0.5)
    assert changeover_allowance(inp(budget=od_only)) == pytest.approx(0.0)
    assert changeover_allowance(inp(budget=od_only - 1)) == pytest.approx(full)  # cannot be kept anyway: the engine stops it



def test_a_hop_off_on_demand_on_the_caps_credit_waits_for_spot_to_last_an_hour_unless_another_zone_is_up():
    # On on-demand with nothing saved, a hop's worst case (a spot tick lost, a second changeover
    # back) comes out of the cap's allowance; a few of those lost and the job could never leave
    # on-demand again.
    broke = dict(holding=OD, work_done=10 * H, spent=62 / 6 * 3.145)
    _, young = mpc_zones_after([set()] * 20 + [{"a"}] * 2, **broke)
    assert young.action is Action.ONDEMAND and "wait for it to last 60 min" in young.reason
    _, proven = mpc_zones_after([set()] * 20 + [{"a"}] * 7, **broke)  # 70 min
    assert (proven.action, proven.zone) == (Action.SPOT, "a"), proven.reason
    _, backed = mpc_zones_after([set()] * 20 + [{"a", "b"}] * 2, **broke)  # losing one zone would likely be a failover
    assert backed.action is Action.SPOT, backed.reason
    _, saved = mpc_zones_after([set()] * 20 + [{"a"}] * 2, **{**broke, "spent": 62 / 6 * 3.145 - 3.0})  # savings pay for it
    assert saved.action is Action.SPOT, saved.reason
    _, idle = mpc_zones_after([set()] * 20 + [{"a"}] * 2, work_done=0.0)  # not a hop: from idle the worst case is a tick
    assert idle.action is Action.SPOT, idle.reason


@pytest.mark.parametrize("seconds, text", [(0, "0 s"), (45, "45 s"), (60, "1 min"), (720, "12 min"), (3600, "1.0 h"),
                                           (12_600, "3.5 h")])
def test_reasons_give_durations_in_units_a_person_reads(seconds, text):
    from pricing.spot_policy import span

    assert span(seconds) == text


def test_a_spot_decision_says_in_plain_words_how_long_the_zone_has_been_up_and_the_time_to_spare():
    """The reason is what `broker events` and a placement show a user: it read "(up-run hazard scale 0.98, down
    1.00)", the model's inner numbers; it says how long the zone's spot has lasted and the slack left instead."""
    _, d = mpc_zones_after([{"b"}] * 12, work_done=0.0)
    assert (d.action, d.zone) == (Action.SPOT, "b"), d.reason
    assert d.reason.startswith("plan: spot in b (seen up for 2.0 h) is cheapest in expectation, with "), d.reason
    assert "hazard" not in d.reason and d.reason.endswith("to spare before on-demand would have to finish the job")
    # 80 h to the deadline from 1 h 50 min in, 48 h of work and one 0.2 h changeover: 30.0 h to spare
    assert "with 30.0 h to spare" in d.reason, d.reason


@pytest.mark.parametrize("seconds, text", [
    (45, "45 s"), (59.6, "1 min"), (600, "10 min"), (3570, "1.0 h"), (3600, "1.0 h"), (5400, "1.5 h"), (-3, "0 s"),
], ids=["under a minute in seconds", "59.6 s rounds to a minute, not '60 s'", "minutes",
        "3570 s is an hour, not '60 min'", "an hour", "hours with a tenth", "never negative"])
def test_a_reasons_durations_read_as_a_person_would_write_them(seconds, text):
    from pricing.spot_policy import span

    assert span(seconds) == text


def test_a_deadline_too_close_to_plan_spot_for_is_said_in_minutes_not_in_the_models_words():
    """A 150 s deadline's job read "(no planning step left before the deadline)" in its dry run and place event."""
    policy = make_policy()
    short = PolicyInput(now=0.0, deadline=150.0, work_total=60.0, work_done=0.0, changeover=20.0, tick=1.0,
                        price_ratio=3.145, spot_zones_available=frozenset({"a"}))
    policy.observe(short)
    decision = policy.decide(short)
    assert decision.action is Action.ONDEMAND
    assert decision.reason == ("the deadline is 2 min away, less than the 10 min this policy plans spot in: too close "
                               "to risk losing spot"), decision.reason
