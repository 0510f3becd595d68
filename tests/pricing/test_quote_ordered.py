"""The admission quote of a job with ``ordered`` alternatives: each tier is quoted on the alternative placement takes,
the earliest with an offer, not on the cheapest of them — while the budget check still knows the cheapest way, which
placement falls back to when the budget cannot pay the earlier ones."""

from __future__ import annotations

from decimal import Decimal

import pytest

from pricing.offers import JobRequest, Offer, ResourceRequest, Tier
from pricing.placement import Placement, place
from pricing.quote import quote


def cloud(tier, zone, price, acc, count=1, region="us-west-2"):
    return Offer(tier, "aws", region, zone, f"{acc}x{count}", acc, count, price)


OFFERS = [
    cloud(Tier.SPOT, "us-west-2c", 482_900, "A10G"),
    cloud(Tier.SPOT, "us-east-2a", 138_900, "A10G", region="us-east-2"),
    cloud(Tier.ONDEMAND, "us-west-2c", 1_006_000, "A10G"),
    cloud(Tier.ONDEMAND, "us-east-2a", 1_006_000, "A10G", region="us-east-2"),
    cloud(Tier.ONDEMAND, "us-west-2a", 24_000_000, "A100", 8),
]
WEST_FIRST = JobRequest(alternatives=(ResourceRequest("A10G", 1, region="us-west-2"),
                                      ResourceRequest("A10G", 1, region="us-east-2")),
                        ordered=True, expected_hours=Decimal(1))


@pytest.mark.parametrize("request_, tier, zone", [
    pytest.param(WEST_FIRST, Tier.SPOT, "us-west-2c", id="spot is quoted in the region listed first, not the cheaper one after it"),
    pytest.param(JobRequest(alternatives=WEST_FIRST.alternatives, expected_hours=Decimal(1)), Tier.SPOT, "us-east-2a",
                 id="the same alternatives as any_of are quoted at the cheapest"),
    pytest.param(JobRequest(alternatives=(ResourceRequest("A100", 8), ResourceRequest("A10G", 1)), ordered=True,
                            expected_hours=Decimal(1)), Tier.ONDEMAND, "us-west-2a",
                 id="eight A100s listed first are quoted at their price, not the A10G's listed second"),
])
def test_each_tier_is_quoted_on_the_alternative_placement_takes(request_, tier, zone):
    q = quote(request_, OFFERS)
    quoted = next(t for t in q.tiers if t.tier is tier)
    assert quoted.offer.zone == zone
    placed = place(request_, [o for o in OFFERS if o.tier is tier])
    assert isinstance(placed, Placement) and placed.offer == quoted.offer, "the quote is what placement chooses"


def test_a_budget_only_a_later_alternative_fits_is_admitted_and_the_refusal_leads_with_the_cheapest_way():
    q = quote(WEST_FIRST, OFFERS)
    spot = next(t for t in q.tiers if t.tier is Tier.SPOT)
    assert spot.estimate == 482_900 and q.least is not None and q.least.estimate == 138_900
    assert q.fits(200_000), "placement falls back to us-east-2 when the budget cannot pay us-west-2"
    assert not q.fits(100_000)
    assert q.refusal(100_000).startswith("estimated $0.1389 on spot")
