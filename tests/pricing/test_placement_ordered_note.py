"""What placement's sentences say beyond where a job went: with ``ordered`` alternatives, the cheapest later one it
passed over though that fit (a user who listed them in the wrong order learns it), and, for a job placed again, the
minute's run its budget must pay for — words pricing owns, so that a change to its sentence cannot leave a rewrite of
it elsewhere silently behind."""

from __future__ import annotations

from decimal import Decimal

import pytest

from pricing.offers import JobRequest, Offer, ResourceRequest, Tier
from pricing.placement import NoFit, Placement, place, start_shortfall, start_words


def cloud(tier, zone, price, acc, count=1, region="us-west-2"):
    return Offer(tier, "aws", region, zone, f"{acc}x{count}", acc, count, price)


# per hour: 8x A100 on-demand $24.00; A10G on-demand $1.006 in us-west-2 and us-east-2; A10G spot $0.4829 in
# us-west-2c and $0.1389 in us-east-2a
A100_OD = cloud(Tier.ONDEMAND, "us-west-2a", 24_000_000, "A100", 8)
A10G_OD_WEST = cloud(Tier.ONDEMAND, "us-west-2c", 1_006_000, "A10G")
A10G_OD_EAST = cloud(Tier.ONDEMAND, "us-east-2a", 1_006_000, "A10G", region="us-east-2")
A10G_SPOT_WEST = cloud(Tier.SPOT, "us-west-2c", 482_900, "A10G")
A10G_SPOT_EAST = cloud(Tier.SPOT, "us-east-2a", 138_900, "A10G", region="us-east-2")
OFFERS = [A100_OD, A10G_OD_WEST, A10G_OD_EAST, A10G_SPOT_WEST, A10G_SPOT_EAST]

A100 = ResourceRequest("A100", 8)
A10G = ResourceRequest("A10G", 1)
A10G_OD = ResourceRequest("A10G", 1, use_spot=False)
WEST = ResourceRequest("A10G", 1, region="us-west-2")
EAST = ResourceRequest("A10G", 1, region="us-east-2")


def ordered(*alternatives, **kw):
    return JobRequest(alternatives=alternatives, ordered=True, **kw)


LATER = "is cheaper but comes later in `ordered`"

NOTE_CASES = [
    pytest.param(ordered(A100, A10G), {}, A100_OD,
                 f"; spot 1x A10G A10Gx1 in aws/us-east-2a at $0.1389/h {LATER}",
                 id="eight A100s listed before an A10G name the cheapest A10G they passed over"),
    pytest.param(ordered(A100, A10G_OD), {}, A100_OD,
                 f"; ondemand 1x A10G A10Gx1 in aws/us-east-2a at $1.006/h {LATER}",
                 id="of two later offers at one price the one named is placement's own tie-break"),
    pytest.param(ordered(WEST, EAST), {}, A10G_SPOT_WEST,
                 f"; spot 1x A10G A10Gx1 in aws/us-east-2a at $0.1389/h {LATER}",
                 id="a region listed first names the cheaper region listed after it"),
    pytest.param(ordered(A100, A10G, num_nodes=2), {}, A100_OD,
                 f"; spot 1x A10G A10Gx1 in aws/us-east-2a at $0.2778/h {LATER}",
                 id="the price of the one passed over is for all the job's nodes"),
    pytest.param(ordered(A100, A10G, expected_hours=Decimal(2)), {}, A100_OD,
                 f"; spot 1x A10G A10Gx1 in aws/us-east-2a estimated at $0.2778 for 2 h {LATER}",
                 id="with the hours known the one passed over is named by its estimate for them"),
    pytest.param(ordered(A100, A10G), dict(free_capacity={"us-east-2a": 0}), A100_OD,
                 f"; spot 1x A10G A10Gx1 in aws/us-west-2c at $0.4829/h {LATER}",
                 id="a later offer that is full is not named; the cheapest that fits is"),
    pytest.param(ordered(A100, A10G), dict(blocked_zones=frozenset({"us-east-2a"})), A100_OD,
                 f"; spot 1x A10G A10Gx1 in aws/us-west-2c at $0.4829/h {LATER}",
                 id="a later offer in a zone blocked for the job is not named"),
    pytest.param(ordered(A100, A10G), dict(free_capacity={"us-east-2a": 0, "us-west-2c": 0}), A100_OD, "",
                 id="with every later offer full there is nothing to name"),
    pytest.param(ordered(A10G, A100), {}, A10G_SPOT_EAST, "",
                 id="a first choice that is the cheapest anyway names nothing"),
    pytest.param(ordered(A100, A10G), dict(free_capacity={"us-west-2a": 0}), A10G_SPOT_EAST, "",
                 id="a placement that fell to the later alternative names nothing"),
    pytest.param(ordered(EAST, WEST), {}, A10G_SPOT_EAST, "",
                 id="a later alternative that is dearer is not named"),
    pytest.param(JobRequest(alternatives=(A100, A10G)), {}, A10G_SPOT_EAST, "",
                 id="any_of takes the cheapest and passes over nothing"),
    pytest.param(ordered(A100, A10G), dict(preemption_risk={"us-east-2a": Decimal(200), "us-west-2c": Decimal(100)}),
                 A100_OD, f"; ondemand 1x A10G A10Gx1 in aws/us-east-2a at $1.006/h {LATER}",
                 id="cheaper is weighed as placement weighs it: spot zones risky enough are dearer than on-demand"),
]


@pytest.mark.parametrize("request_, kwargs, offer, note", NOTE_CASES)
def test_an_ordered_placement_names_the_cheapest_later_alternative_it_passed_over(request_, kwargs, offer, note):
    result = place(request_, OFFERS, **kwargs)
    assert isinstance(result, Placement), result
    assert result.offer == offer and result.note == note


def test_a_later_alternative_the_budget_left_cannot_pay_for_is_not_named():
    # $0.45 pays for a minute on 8 A100s ($0.40) and on the A10G spot offer in us-west-2c ($0.0081), not for the
    # 4 h billed after a run in us-east-2a ($0.5579 in all) nor the hour after a run on on-demand ($1.02)
    after = {A10G_SPOT_EAST: 14_400, A10G_OD_EAST: 3600, A10G_OD_WEST: 3600}
    result = place(ordered(A100, A10G), OFFERS, budget_left=450_000, min_run_seconds=60, after_run_seconds=after)
    assert isinstance(result, Placement) and result.offer == A100_OD, result
    assert result.note == f"; spot 1x A10G A10Gx1 in aws/us-west-2c at $0.4829/h {LATER}"


# --- what a start must pay for, named by pricing for a first start and for a job placed again -----------------

@pytest.mark.parametrize("placed_again, words", [
    pytest.param(False, "a start and a clean stop (61 s)", id="a first start pays for a start and a clean stop"),
    pytest.param(True, "a minute's run and a clean stop (61 s, as a job placed again must)",
                 id="a job placed again pays for a minute's run and a clean stop, and says why"),
])
def test_what_a_start_pays_for_is_named_by_whether_the_job_is_placed_again(placed_again, words):
    assert start_words(61, placed_again=placed_again) == words
    short = start_shortfall(ordered(A10G), [A10G_SPOT_EAST], 1_000, min_run_seconds=61, placed_again=placed_again)
    assert short == f"cannot pay for {words} on any offer: the cheapest, {A10G_SPOT_EAST.describe()}, costs $0.1389/h"
    fit = place(ordered(A10G), [A10G_SPOT_EAST], budget_left=1_000, min_run_seconds=61, placed_again=placed_again)
    assert isinstance(fit, NoFit) and fit.reason == (
        f"the budget left, $0.0010, cannot pay for {words} on the cheapest free match, "
        f"{A10G_SPOT_EAST.describe()}, which costs $0.0024")


def test_the_billing_after_the_run_names_what_a_job_placed_again_pays_for():
    fit = place(ordered(A10G), [A10G_SPOT_EAST], budget_left=10_000, min_run_seconds=61, placed_again=True,
                after_run_seconds={A10G_SPOT_EAST: 900})
    assert isinstance(fit, NoFit) and fit.reason.endswith(
        "on top of $0.0024 for a minute's run and a clean stop (61 s, as a job placed again must)"), fit.reason


def test_a_job_with_its_hours_known_is_named_by_them_placed_again_or_not():
    request = ordered(A10G, expected_hours=Decimal(1))
    first, again = (place(request, [A10G_SPOT_EAST], budget_left=100_000, min_run_seconds=61, placed_again=p)
                    for p in (False, True))
    # a first start covers its hours and the clean stop after them (Quote.fits' rule); a job placed again is held to
    # its own minute's run and clean stop, which already counts part of its run
    assert isinstance(first, NoFit) and isinstance(again, NoFit)
    assert "does not cover 1 h and a clean stop (61 s) on" in first.reason, first.reason
    assert "does not cover 1 h on" in again.reason and "minute" not in again.reason, again.reason
