"""What the live engine tells the spot policy: seconds, the job's own progress and changeover."""


import pytest

from broker.engine.spot import measured_changeover, policy_input, work_done
from broker.lifecycle import AttemptState, JobState
from broker.models import Attempt, Job
from pricing.offers import Offer, Tier
from pricing.policy import Holding

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
