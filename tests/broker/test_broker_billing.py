"""Per-second accrual (``broker/engine/billing.py``) against the cost report's reading of it."""

import pytest

from broker import costs
from broker.engine.billing import accrue
from broker.lifecycle import AttemptState, JobState
from broker.models import Attempt, Job

T0 = 1_700_000_000.0
PRICE = 36_000_000  # $36/h: $0.01 a second
OD = 72_000_000


def attempt(**kw) -> Attempt:
    return Attempt(id="j-a1", job_id="j", n=1, state=AttemptState.RUNNING, launcher="local",
                   placement={"tier": "spot", "zone": "z", "ondemand_price_per_hour": OD},
                   price_per_hour=PRICE, created_at=T0, **kw)


JOB = Job(id="j", name="n", team="t", state=JobState.RUNNING, spec={}, budget=10**9, priority=0, submitted_at=T0,
          updated_at=T0)


@pytest.mark.parametrize("ticks, cost, billed_seconds", [
    pytest.param([100, 200], 2_000_000, 200, id="ticks 100 s then 200 s → 200 s billed, $2.00"),
    pytest.param([3700, 100], 37_000_000, 3700, id="clock stepped back an hour after 3700 s → cost and span stay"),
    pytest.param([3700, 100, 3800], 38_000_000, 3800, id="then forward past it again → billed on from there"),
])
def test_accrual_never_moves_the_cost_or_the_span_it_covers_backwards(ticks, cost, billed_seconds):
    a = attempt()
    for t in ticks:
        a = accrue(a, T0 + t)
    assert a.cost == cost and costs.billed_span(a) == (int(T0), billed_seconds)
    # the report reads the same seconds: the on-demand equivalent is those seconds at on-demand, the saving exact
    assert costs.ondemand_equivalent(a, JOB) == 2 * cost
    assert costs.job_costs(JOB, [a])["attempts"][0]["seconds"] == billed_seconds


def test_an_end_read_on_a_wall_clock_stepped_forward_is_billed_only_as_far_as_the_billing_clock_came():
    # the launcher read the end on the host's clock an hour ahead; the engine's billing clock counted 100 s
    a = accrue(attempt(ended_at=T0 + 3700), T0 + 100)
    assert a.cost == 1_000_000 and costs.billed_span(a) == (int(T0), 100)


def test_an_end_seen_after_a_later_accrual_keeps_the_span_the_cost_paid_for():
    a = accrue(attempt(), T0 + 11)  # the tick saw it running at 11 s
    ended = accrue(attempt(cost=a.cost, billed_until=a.billed_until, ended_at=T0 + 10), T0 + 12)
    assert ended.cost == 110_000 and costs.billed_span(ended) == (int(T0), 11)


@pytest.mark.parametrize("first, second, noted", [
    pytest.param(3_913, 16_767, True, id="$0.0040 and $0.0168 shown beside a total of $0.0207: the note says why"),
    pytest.param(4_000, 16_700, False, id="rows that add up as shown: no note"),
])
def test_one_jobs_attempts_that_do_not_add_up_as_shown_carry_the_rounding_note(first, second, noted):
    """`broker costs JOB` showed attempts of $0.0040 and $0.0168 and a total of $0.0207 with no word of why, though
    the cost report says it of its own rows; the job's costs now carry the same note, and every edge shows it."""
    rows = [Attempt(id=f"j-a{n}", job_id="j", n=n, state=AttemptState.STOPPED, launcher="local",
                    placement={"tier": "ondemand", "zone": "z"}, price_per_hour=PRICE, created_at=T0,
                    ended_at=T0 + 10, cost=cost) for n, cost in ((1, first), (2, second))]
    c = costs.job_costs(JOB, rows)
    assert [a["cost"]["usd"] for a in c["attempts"]] == [costs.money(first)["usd"], costs.money(second)["usd"]]
    assert (c["rounding_note"] == costs.ROUNDING_NOTE) is noted and (c["rounding_note"] is None) is not noted


def test_a_job_with_no_on_demand_price_for_any_attempt_has_nothing_to_compare_not_a_saving_of_0_percent():
    """An on-prem job whose max_price_per_hour kept on-demand out of its quote read "saved $0.00 (0%) against on-demand
    ($0.0023)", the pool's own price named as on-demand's; the same job without the cap, "saved $0.0089 (80%)"."""
    from dataclasses import replace

    from broker.cli import _saving_line
    from broker.views import NOTHING_TO_COMPARE

    pool = Attempt(id="j-a1", job_id="j", n=1, state=AttemptState.SUCCEEDED, launcher="local",
                   placement={"tier": "onprem", "zone": "cpu"}, price_per_hour=200_000, created_at=T0,
                   ended_at=T0 + 41, cost=2_300)
    capped = costs.job_costs(replace(JOB, quote={"tiers": [{"tier": "onprem", "price_per_hour": 200_000}]}), [pool])
    assert capped["saving_percent"] is None and capped["saving"]["micros"] == 0
    line = _saving_line(capped["spent"], capped["ondemand_equivalent"], capped["saving"], capped["saving_percent"])
    assert line == f"  spent $0.0023; {NOTHING_TO_COMPARE}", line
    quoted = costs.job_costs(replace(JOB, quote={"tiers": [{"tier": "ondemand", "price_per_hour": 1_000_000}]}), [pool])
    assert quoted["saving_percent"] == 79, quoted  # an on-demand price in its quote: compared, as before


def test_a_spend_beside_a_budget_of_more_than_cents_is_shown_to_its_decimals_never_above_it():
    """A budget of $11.005 all spent read "$11.005 of $11.005" in `broker status`, but "$11.01" in `broker costs`, the
    cost report's top jobs, the dashboard and the job's attempt lines: a cent over the cap the user set."""
    from dataclasses import replace

    from broker.views import job_view

    job = replace(JOB, budget=11_005_000, spent=11_005_000, attempts=1)
    spent = Attempt(id="j-a1", job_id="j", n=1, state=AttemptState.STOPPED, launcher="local",
                    placement={"tier": "onprem", "zone": "prem"}, price_per_hour=3_600_000_000, created_at=T0,
                    ended_at=T0 + 12, cost=11_005_000)
    c = costs.job_costs(job, [spent])
    assert c["spent"]["usd"] == "$11.005" and c["attempts"][0]["cost"]["usd"] == "$11.005"
    assert job_view(job, attempts=[spent])["attempt_list"][0]["cost"]["usd"] == "$11.005"
    # a budget in whole cents: as before, rounded up to the cent
    assert costs.job_costs(replace(job, budget=20_000_000), [spent])["spent"]["usd"] == "$11.01"
    report = costs.report([job], {"j": [spent]}, win=costs.Window(T0 - 10, T0 + 100, "x"), now=T0 + 100,
                          positions={}, team=None)
    assert report["top_jobs"][0]["spent"]["usd"] == "$11.005"
