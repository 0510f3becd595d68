"""What the live engine tells the spot policy: seconds, the job's own progress and changeover."""


from dataclasses import replace

import pytest

from broker.engine.spot import measured_changeover, policy_input, work_done
from broker.lifecycle import AttemptState, JobState
from broker.models import Attempt, Job
from pricing.offers import Offer, Tier
from pricing.policy import Action, Decision, Holding

NOW = 10_000.0


def job(**kw) -> Job:
    base = dict(id="j", name="t", team="a", state=JobState.QUEUED, spec={}, budget=100_000_000, priority=0,
                submitted_at=0.0, updated_at=0.0, deadline=NOW + 7200, expected_hours="2")
    return Job(**{**base, **kw})


def attempt(n, created, started=None, ended=None, first_report=None) -> Attempt:
    return Attempt(id=f"j-a{n}", job_id="j", n=n, state=AttemptState.RUNNING, launcher="local", placement={},
                   price_per_hour=1, created_at=created, started_at=started, ended_at=ended,
                   first_report_at=first_report)


def offer(tier, zone, price):
    return Offer(tier=tier, cloud="aws", region="r", zone=zone, instance_type="g", accelerator="A10G",
                 accelerator_count=1, price_per_hour=price)


OFFERS = [offer(Tier.SPOT, "z1", 1_000_000), offer(Tier.SPOT, "z2", 1_200_000), offer(Tier.ONDEMAND, "od", 3_000_000)]


@pytest.mark.parametrize("attempts, expected", [
    pytest.param([], 120.0, id="no attempt has reported yet → the configured default"),
    pytest.param([attempt(1, 100, first_report=190)], 90.0, id="one attempt took 90 s to train again → 90 s"),
    pytest.param([attempt(1, 0, first_report=60), attempt(2, 1000, first_report=1300), attempt(3, 2000, first_report=2100)],
                 100.0, id="three restarts → their median"),
])
def test_changeover_is_measured_from_the_jobs_own_restarts(attempts, expected):
    assert measured_changeover(attempts, 120.0) == expected


def test_work_done_follows_the_last_committed_checkpoint_when_steps_are_reported():
    j = job(progress={"step": 900, "total_steps": 1000}, last_checkpoint={"step": 500, "uri": "x"})
    assert work_done(j, [], NOW, 60) == pytest.approx(3600.0)  # half of 2 h: only committed work counts


def test_policy_input_prices_tiers_as_ratios_and_hides_blocked_or_full_zones():
    j = job(blocked_zones={"z2": NOW + 600})
    inp = policy_input(j, [], OFFERS, {"z1": 1, "z2": 1, "od": 1}, frozenset({"z1", "z2"}), now=NOW,
                       changeover=120, holding=None)
    assert inp.spot_zones_available == frozenset({"z1"})
    assert inp.price_ratio == pytest.approx(3.0) and inp.work_total == 7200 and inp.deadline == NOW + 7200
    full = policy_input(j, [], OFFERS, {"z1": 0, "z2": 1, "od": 1}, frozenset({"z1", "z2"}), now=NOW, changeover=120)
    assert full.spot_zones_available == frozenset()


def test_a_job_without_deadline_or_length_is_not_the_policys_business():
    assert policy_input(job(deadline=None), [], OFFERS, {}, frozenset(), now=NOW, changeover=1) is None
    assert policy_input(job(expected_hours=None), [], OFFERS, {}, frozenset(), now=NOW, changeover=1) is None


def test_the_zone_a_job_holds_stays_visible_while_it_runs_there():
    inp = policy_input(job(), [], OFFERS, {"z1": 0, "z2": 0, "od": 1}, frozenset({"z1"}), now=NOW, changeover=60,
                       holding=Holding(Tier.SPOT, "z1"))
    assert "z1" in inp.spot_zones_available and inp.on_spot


def test_the_policy_sees_spent_money_and_the_budget_in_spot_hours():
    inp = policy_input(job(budget=50_000_000, spent=4_000_000), [], OFFERS, {"z1": 1, "z2": 1, "od": 1}, frozenset({"z1"}),
                       now=NOW, changeover=60)
    assert inp.spent == pytest.approx(4.0) and inp.budget == pytest.approx(50.0)  # the cheapest spot is $1/h


def test_a_stored_jobs_price_cap_holds_at_placement_not_only_at_submit():
    """The cap is kept on the job (the stored broker: section does not repeat it): the engine's placement
    must still honour it — the dearer free offer is not taken while the cheaper one is full."""
    from broker.engine.schedule import Place, Wait, request_of, schedule
    from broker.offers import Market

    capped = job(deadline=None, expected_hours=None, spec={"run": "x", "resources": {"accelerators": "A10G:1"}},
                 max_price_per_hour=1_100_000)
    assert request_of(capped).max_price_per_hour == 1_100_000
    mk = Market(offers=tuple(OFFERS), free_capacity={"z1": 0, "z2": 1, "od": 1}, free_slots={})
    (decision,) = schedule([capped], mk, now=NOW)
    assert isinstance(decision, Wait) and "full" in decision.reason, decision  # not z2 at $1.20/h
    mk = Market(offers=tuple(OFFERS), free_capacity={"z1": 1, "z2": 1, "od": 1}, free_slots={})
    (decision,) = schedule([capped], mk, now=NOW)
    assert isinstance(decision, Place) and decision.placement["zone"] == "z1"


def zone(tier, name, price, nodes):
    return Offer(tier=tier, cloud="aws", region="us-east-1", zone=name, instance_type="g5.xlarge",
                 accelerator="A10G", accelerator_count=1, price_per_hour=price, max_nodes=nodes)


# the QA's zones: sim-a spot of 4 nodes, sim-b spot of 2, sim-od on-demand of 4
SIM = [zone(Tier.SPOT, "sim-a", 424_600, 4), zone(Tier.SPOT, "sim-b", 424_600, 2),
       zone(Tier.ONDEMAND, "sim-od", 1_006_000, 4)]
UP = frozenset({"sim-a", "sim-b"})


@pytest.mark.parametrize("num_nodes, capacity, spot_up, ondemand_up", [
    pytest.param(1, {"sim-a": 2, "sim-b": 2, "sim-od": 4}, {"sim-a", "sim-b"}, True,
                 id="a one-node job → every zone with a node free is up, as before"),
    pytest.param(4, {"sim-a": 2, "sim-b": 2, "sim-od": 4}, set(), True,
                 id="4 nodes, 2 of sim-a's free and sim-b of 2 nodes → no spot zone up"),
    pytest.param(4, {"sim-a": 4, "sim-b": 2, "sim-od": 4}, {"sim-a"}, True,
                 id="4 nodes, sim-a all free → sim-a up, never sim-b of 2 nodes"),
    pytest.param(2, {"sim-a": 1, "sim-b": 2, "sim-od": 1}, {"sim-b"}, False,
                 id="2 nodes, 1 free in sim-a and sim-od → only sim-b up, on-demand not"),
])
def test_a_zone_is_up_for_the_policy_only_with_the_jobs_nodes_free(num_nodes, capacity, spot_up, ondemand_up):
    inp = policy_input(job(), [], SIM, capacity, UP, now=NOW, changeover=60, num_nodes=num_nodes)
    assert inp.spot_zones_available == frozenset(spot_up)
    assert inp.ondemand_available is ondemand_up


def test_the_policy_reads_the_nodes_of_the_jobs_placement_when_not_told():
    # the engine's safety net for a running job asks without num_nodes: a 4-node job's placement says 4
    inp = policy_input(job(placement={"num_nodes": 4}), [], SIM, {"sim-a": 4, "sim-b": 2, "sim-od": 4}, UP,
                       now=NOW, changeover=60)
    assert inp.spot_zones_available == frozenset({"sim-a"})


def _four_nodes(**kw) -> Job:
    spec = {"run": "x", "num_nodes": 4, "resources": {"accelerators": "A10G:1"},
            "broker": {"budget_usd": "5", "expected_hours": 0.02}}
    return job(spec=spec, expected_hours="0.02", deadline=NOW + 7200, budget=5_000_000, **kw)


def test_a_four_node_job_with_two_nodes_free_on_spot_is_not_placed_on_ondemand_under_a_spot_plan():
    """QA: with 2 of sim-a's 4 nodes free, a 4-node job with 2 h of slack went on-demand at 2.4x, its event quoting
    "plan: spot in sim-a ... is cheapest"; after a preemption it was told "plan: spot in sim-b" (a zone of 2)."""
    from broker.engine.schedule import Place, Wait, schedule
    from broker.engine.spot import RealTime
    from broker.offers import Market
    from pricing.policy import make_policy

    mk = Market(offers=tuple(SIM), free_capacity={"sim-a": 2, "sim-b": 2, "sim-od": 4}, free_slots={},
                spot_available=UP)
    (decision,) = schedule([_four_nodes()], mk, now=NOW, policies={"j": RealTime(make_policy())})
    # no spot zone holds 4 nodes now: the plan it states is the one it follows, and never names sim-b
    said = decision.reason
    assert "sim-b" not in said, said
    assert not (isinstance(decision, Place) and decision.placement["tier"] == "ondemand" and "plan: spot" in said), said
    assert isinstance(decision, Wait) and "plan: wait for spot" in said, said
    # sim-a all free: placed there, on spot
    mk = replace(mk, free_capacity={"sim-a": 4, "sim-b": 2, "sim-od": 4})
    (decision,) = schedule([_four_nodes()], mk, now=NOW, policies={"j": RealTime(make_policy())})
    assert isinstance(decision, Place) and decision.placement["zone"] == "sim-a", decision


def test_a_placement_that_falls_back_from_the_policys_choice_says_so_not_the_plan_alone():
    """The policy's tier cannot take the job (here: spot in sim-a is over the job's price cap, which the policy does
    not weigh): it is placed on the cheapest offer that fits, and its event says why, not "plan: spot in sim-a"."""
    from broker.engine.schedule import Place, schedule
    from broker.offers import Market

    class Spot:  # a policy that plans spot in sim-a
        def observe(self, inp):
            pass

        def decide(self, inp):
            return Decision(Action.SPOT, "sim-a", "plan: spot in sim-a is cheapest in expectation")

    one = job(spec={"run": "x", "resources": {"accelerators": "A10G:1"}}, expected_hours="0.02", budget=5_000_000)
    mk = Market(offers=tuple(SIM), free_capacity={"sim-a": 0, "sim-b": 2, "sim-od": 4}, free_slots={},
                spot_available=UP)
    (decision,) = schedule([one], mk, now=NOW, policies={"j": Spot()})
    assert isinstance(decision, Place) and decision.placement["zone"] == "sim-b", decision
    assert "its spot policy chose spot in sim-a, which cannot take it now: zone sim-a is full right now; so the " \
           "cheapest offer that fits now; its plan: spot in sim-a is cheapest" in decision.reason, decision.reason
