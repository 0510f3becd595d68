"""QA, Dec 8: a job of ``ordered`` alternatives is quoted on the offer placement takes with its budget.

``ordered: [{A100:8, infra: gcp}, {A100:8, infra: aws}]`` with a $10 budget for 1 h was quoted on GCP's $14.70 spot
alone ("the budget covers no tier"), then admitted and placed on AWS's p4d.24xlarge at $2.47/h, which it covers:
placement falls back to a later alternative when the budget cannot pay the earlier. Each tier is now quoted on the
alternative placement takes there with that budget, else on its cheapest way (what the budget must cover for it).
Priced from the AWS snapshot the broker ships and a GCP a2-highgpu-8g as SkyPilot's catalog prices it.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from pricing.loading import SNAPSHOT_DIR, load_price_table
from pricing.money import to_micros
from pricing.offers import JobRequest, Offer, ResourceRequest, Tier
from pricing.placement import Placement, place
from pricing.quote import quote

STOP = 36  # a clean stop, as the engine keeps it of every budget
AWS = [o for o in load_price_table(SNAPSHOT_DIR, clouds=("aws",)) if o.accelerator == "A100" and o.accelerator_count == 8]
GCP = [Offer(tier, "gcp", "us-central1", "us-central1-a", "a2-highgpu-8g", "A100", 8, price, vcpus=Decimal(96),
             memory_gib=Decimal(680)) for tier, price in ((Tier.SPOT, 14_700_000), (Tier.ONDEMAND, 29_388_000))]
OFFERS = [*GCP, *AWS]
GCP_FIRST = JobRequest(alternatives=(ResourceRequest("A100", 8, cloud="gcp"), ResourceRequest("A100", 8, cloud="aws")),
                       ordered=True, expected_hours=Decimal(1))
AWS_SPOT = min((o for o in AWS if o.tier is Tier.SPOT), key=lambda o: o.price_per_hour)  # $2.4655/h, us-east-1a/d
AWS_ON_DEMAND = min((o for o in AWS if o.tier is Tier.ONDEMAND), key=lambda o: o.price_per_hour)


@pytest.mark.parametrize("budget, spot_cloud, on_demand_cloud, fits", [
    pytest.param("10", "aws", "aws", True,
                 id="a budget only the later alternative fits is quoted there on spot, where it is placed"),
    pytest.param("25", "gcp", "aws", True,
                 id="a budget that pays for gcp spot but not gcp on-demand quotes each tier where placement takes it"),
    pytest.param("40", "gcp", "gcp", True, id="a budget that pays for the earlier alternative quotes it on each tier"),
    pytest.param("2", "aws", "aws", False,
                 id="a budget that pays for nothing quotes each tier at its cheapest way, the least it must cover"),
])
def test_each_tier_of_an_ordered_job_is_quoted_where_placement_takes_it_with_the_budget(budget, spot_cloud,
                                                                                         on_demand_cloud, fits):
    micros = to_micros(budget)
    q = quote(GCP_FIRST, OFFERS, budget=micros, stop_seconds=STOP)
    tiers = {t.tier: t for t in q.tiers}
    assert (tiers[Tier.SPOT].offer.cloud, tiers[Tier.ONDEMAND].offer.cloud) == (spot_cloud, on_demand_cloud)
    assert q.fits(micros, stop_seconds=STOP) is fits
    for tier, quoted in tiers.items():
        placed = place(GCP_FIRST, [o for o in OFFERS if o.tier is tier], budget_left=micros, min_run_seconds=STOP)
        if isinstance(placed, Placement):
            assert placed.offer == quoted.offer, "the tier's quote is the offer placement takes on it"
    placed = place(GCP_FIRST, OFFERS, budget_left=micros, min_run_seconds=STOP)
    if fits:
        assert isinstance(placed, Placement) and placed.offer == tiers[placed.tier].offer, \
            "the job is placed on the offer quoted for its tier"


def test_the_qa_job_is_quoted_on_the_aws_spot_offer_it_is_placed_on_and_its_budget_covers_it():
    q = quote(GCP_FIRST, OFFERS, budget=10_000_000, stop_seconds=STOP)
    spot = next(t for t in q.tiers if t.tier is Tier.SPOT)
    assert spot.offer.price_per_hour == AWS_SPOT.price_per_hour == 2_465_500
    assert spot.estimate == 2_465_500 and spot.estimate + 2_466 <= 10_000_000  # a clean stop on top: covered
    on_demand = next(t for t in q.tiers if t.tier is Tier.ONDEMAND)
    assert on_demand.offer.price_per_hour == AWS_ON_DEMAND.price_per_hour, "on-demand at its cheapest, not GCP's"


def test_without_a_budget_each_tier_is_still_quoted_on_the_earliest_alternative():
    q = quote(GCP_FIRST, OFFERS)
    assert {t.tier: t.offer.cloud for t in q.tiers} == {Tier.SPOT: "gcp", Tier.ONDEMAND: "gcp"}
