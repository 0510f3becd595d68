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
    assert text.startswith("estimated $10.00 on spot")  # the cheapest first: the least budget that would do
    assert "on-prem is estimated at $20.00" in text and "on-demand is estimated at $30.60" in text


def _offer(tier: Tier, cloud: str, region: str, zone: str, price: int, kind: str = "p3.2xlarge") -> Offer:
    return Offer(tier, cloud, region, zone, kind, "V100", 1, price)


@pytest.mark.parametrize("ondemand, named", [
    pytest.param([_offer(Tier.ONDEMAND, "aws", "us-east-1", "us-east-1a", 3_060_000)],
                 "ondemand 1x V100 p3.2xlarge in aws/us-east-1a", id="a single offer is named with its cloud and zone"),
    pytest.param([_offer(Tier.ONDEMAND, "gcp", "us-central1", "us-central1-a", 3_060_000, "n1-standard-8+V100:1")],
                 "ondemand 1x V100 n1-standard-8+V100:1 in gcp/us-central1-a", id="an offer on GCP is named as on GCP"),
    pytest.param([_offer(Tier.ONDEMAND, "aws", "us-east-1", "us-east-1a", 3_060_000),
                  _offer(Tier.ONDEMAND, "aws", "us-east-1", "us-east-1b", 3_060_000)],
                 "ondemand 1x V100 p3.2xlarge in aws/us-east-1 (2 zones)",
                 id="two zones of one region at the same price name the region, not one of the zones"),
    pytest.param([_offer(Tier.ONDEMAND, "aws", "us-east-1", "us-east-1a", 3_060_000),
                  _offer(Tier.ONDEMAND, "aws", "us-west-2", "us-west-2a", 3_060_000)],
                 "ondemand 1x V100 p3.2xlarge in aws (2 regions)",
                 id="two regions of one cloud at the same price name the cloud"),
    pytest.param([_offer(Tier.ONDEMAND, "aws", "us-east-1", "us-east-1a", 3_060_000),
                  _offer(Tier.ONDEMAND, "gcp", "us-central1", "us-central1-a", 3_060_000, "n1-standard-8+V100:1")],
                 "ondemand 1x V100 in aws or gcp", id="two clouds at the same price name both"),
    pytest.param([_offer(Tier.ONDEMAND, "aws", "us-east-1", "us-east-1a", 3_060_000),
                  _offer(Tier.ONDEMAND, "aws", "us-east-1", "us-east-1b", 3_500_000)],
                 "ondemand 1x V100 p3.2xlarge in aws/us-east-1a", id="a dearer zone of the same tier is not counted"),
])
def test_a_budget_refusal_names_the_offers_cloud_and_zone(ondemand, named):
    offers = [*ondemand, _offer(Tier.SPOT, "aws", "us-east-1", "us-east-1a", 4_000_000)]  # dearer: on-demand leads
    q = quote(JobRequest(alternatives=(ResourceRequest("V100", 1),), expected_hours=Decimal(10)), offers)
    assert q.refusal(5_000_000) == (f"estimated $30.60 on {named} exceeds the budget of $5.00: give at least "
                                    f"$30.60; spot is estimated at $40.00")


# A cloud cluster is billed 15 minutes after its run (idle before autodown, then the teardown); a
# simulated zone on this host, nothing. Spot $1/h in the cloud: $0.25 after the run.
SIM_SPOT = Offer(Tier.SPOT, "aws", "us-east-1", "sim-spot", "p3.2xlarge", "V100", 1, 1_100_000, simulated=True)
AFTER_RUN = {o: 900 for o in OFFERS if o.cloud == "aws"}


@pytest.mark.parametrize("hours, offers, spot_offer, spot_estimate, spot_after", [
    pytest.param(Decimal(10), OFFERS, "us-east-1a", 10_250_000, 250_000,
                 id="ten hours on cloud spot at $1 cost $10 and $0.25 billed after the run"),
    pytest.param(Decimal(1), [*OFFERS, SIM_SPOT], "sim-spot", 1_100_000, 0,
                 id="for one hour a simulated zone at $1.10 is cheaper than cloud spot at $1 and its $0.25 after"),
    pytest.param(Decimal(10), [*OFFERS, SIM_SPOT], "us-east-1a", 10_250_000, 250_000,
                 id="for ten hours cloud spot and its $0.25 after are cheaper than the simulated zone"),
    pytest.param(None, OFFERS, "us-east-1a", None, 250_000,
                 id="without expected hours the billing after the run is a figure of its own"),
])
def test_the_quote_counts_the_billing_after_a_clusters_run(hours, offers, spot_offer, spot_estimate, spot_after):
    q = quote(JobRequest(alternatives=(ResourceRequest("V100", 1),), expected_hours=hours), offers,
              after_run_seconds=AFTER_RUN)
    spot = next(t for t in q.tiers if t.tier is Tier.SPOT)
    assert (spot.offer.location, spot.estimate, spot.after_run) == (spot_offer, spot_estimate, spot_after)
    onprem = next(t for t in q.tiers if t.tier is Tier.ONPREM)
    assert onprem.after_run == 0


def test_the_billing_after_the_run_is_named_in_the_quotes_words():
    ten = quote(JobRequest(alternatives=(ResourceRequest("V100", 1),), expected_hours=Decimal(10)), OFFERS,
                after_run_seconds=AFTER_RUN)
    assert ten.summary() == ("estimated $10.25 ($0.25 of it billed after the run) for 10 h on spot 1x V100 "
                             "p3.2xlarge in aws/us-east-1a")
    assert ten.fits(10_250_000) and not ten.fits(10_249_999)
    assert ten.refusal(5_000_000).startswith("estimated $10.25 ($0.25 of it billed after the run) on spot")
    per_hour = quote(JobRequest(alternatives=(ResourceRequest("V100", 1),)), OFFERS, after_run_seconds=AFTER_RUN)
    assert per_hour.summary().startswith("$1.00/h + $0.25 billed after the run on spot 1x V100 p3.2xlarge in "
                                         "aws/us-east-1a")


def test_a_budget_placement_fits_is_one_the_quote_admits_to_the_micro_dollar():
    """The quote rounded the run and the billing after it up apart ($0.500001 + $0.250001), placement their sum
    once ($0.750001): a budget of exactly what placement would spend was refused at submit."""
    from pricing.placement import Placement, place
    spot = Offer(Tier.SPOT, "aws", "us-east-1", "us-east-1a", "p3.2xlarge", "V100", 1, 1_000_001)  # odd µ$/h
    request = JobRequest(alternatives=(ResourceRequest("V100", 1),), expected_hours=Decimal("0.5"))
    after = {spot: 900}
    q = quote(request, [spot], after_run_seconds=after)
    assert (q.cheapest().estimate, q.cheapest().after_run) == (750_001, 250_000)
    assert q.fits(750_001) and not q.fits(750_000)
    assert isinstance(place(request, [spot], budget_left=750_001, after_run_seconds=after), Placement)
    assert not isinstance(place(request, [spot], budget_left=750_000, after_run_seconds=after), Placement)
