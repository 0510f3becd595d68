"""The admission quote: an honest total for the expected length, or a per-hour figure."""

from __future__ import annotations

from decimal import Decimal

import pytest

from pricing.catalog import onprem_offer
from pricing.offers import JobRequest, Offer, ResourceRequest, Tier
from pricing.quote import quote

OFFERS = [
    onprem_offer("lab", 1, "V100", "2.00"),
    Offer(Tier.ONDEMAND, "aws", "us-east-1", "us-east-1a", "p3.2xlarge", "V100", 1, 3_060_000),
    Offer(Tier.SPOT, "aws", "us-east-1", "us-east-1a", "p3.2xlarge", "V100", 1, 1_000_000),
]


@pytest.mark.parametrize(
    "hours, risk, free, best_tier, best_estimate",
    [
        pytest.param(Decimal(10), {}, {}, Tier.SPOT, 10_000_000, id="ten hours on spot at $1 cost $10"),
        pytest.param(Decimal(10), {"us-east-1a": Decimal("0.25")}, {}, Tier.SPOT, 12_500_000, id="a quarter of time lost to preemptions adds a quarter to the spot estimate"),
        pytest.param(Decimal(10), {"us-east-1a": Decimal("1.5")}, {}, Tier.ONPREM, 20_000_000, id="a very risky spot zone makes the on-prem pool the estimate"),
        pytest.param(None, {}, {}, Tier.SPOT, None, id="without expected hours the quote is per hour"),
    ],
)
def test_quote_estimates_the_total(hours, risk, free, best_tier, best_estimate):
    q = quote(JobRequest(alternatives=(ResourceRequest("V100", 1),), expected_hours=hours), OFFERS, free_capacity=free, preemption_risk=risk)
    assert q.best is not None and q.best.tier is best_tier
    assert q.best.estimate == best_estimate
    assert q.per_hour is (hours is None)
    assert ("per hour" in q.summary()) is (hours is None)
    assert {t.tier for t in q.tiers} == set(Tier)


def test_budget_refusal_names_every_tier():
    q = quote(JobRequest(alternatives=(ResourceRequest("V100", 1),), expected_hours=Decimal(10)), OFFERS)
    assert q.fits(10_000_000) and not q.fits(9_999_999)
    text = q.refusal(5_000_000)
    assert "$30.60" in text and "on-prem is estimated at $20.00" in text and "spot is estimated at $10.00" in text
