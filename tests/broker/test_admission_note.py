"""The submit event's note names the cheapest way to run the job with that way's own figure."""

from __future__ import annotations

from broker.admission import admit
from broker.spec import parse
from pricing.offers import Offer, Tier


def cloud(tier, zone, price, region):
    return Offer(tier, "aws", region, zone, "g5.xlarge", "A10G", 1, price)


OFFERS = [
    cloud(Tier.SPOT, "us-west-2c", 482_900, "us-west-2"),
    cloud(Tier.SPOT, "us-east-2a", 138_900, "us-east-2"),
    cloud(Tier.ONDEMAND, "us-west-2c", 1_006_000, "us-west-2"),
    cloud(Tier.ONDEMAND, "us-east-2a", 1_006_000, "us-east-2"),
]


def test_an_ordered_jobs_submit_note_quotes_the_later_cheaper_alternative_it_names():
    spec = parse({"run": "python train.py",
                  "resources": {"ordered": [{"accelerators": "A10G", "infra": "aws/us-west-2"},
                                            {"accelerators": "A10G", "infra": "aws/us-east-2"}]},
                  "broker": {"expected_hours": 1}}, now=0.0)
    admitted = admit(spec, job_id="j-1", team="ml", budget=5_000_000, offers=OFFERS, now=0.0, actor="t",
                     checkpoint_uri="file:///tmp/x", idempotency_key=None)
    reason = admitted.event.reason
    assert "cheapest spot at $0.1389" in reason, reason
    assert "$0.4829" not in reason, "the figure is the cheapest way's, not the first tier's by $/h"
