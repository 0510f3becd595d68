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
    assert "cheapest spot, estimated $0.1389 for the run" in reason, reason
    assert "$0.4829" not in reason, "the figure is the cheapest way's, not the first tier's by $/h"


def test_a_budget_of_exactly_the_estimate_is_refused_for_the_clean_stop_it_must_keep_saying_how_much_to_give():
    """The engine stops a job once what is left of its budget pays only for a clean stop (the grace period, two
    ticks, the launcher's margin): a budget of exactly the estimate was taken, and the job that ran its expected
    length was stopped short of its end (29 of 35 steps at $1 a second)."""
    from broker.admission import Refused
    import pytest

    pool = [Offer(Tier.ONPREM, "local", "local", "prem", "prem-1slot", "H100", 1, 3_600_000_000)]  # $1 a second
    spec = parse({"run": "python train.py", "resources": {"accelerators": "H100"},
                  "broker": {"expected_hours": "0.01"}}, now=0.0)  # 36 s: $36.00
    kw = dict(job_id="j-1", team="ml", offers=pool, now=0.0, actor="t", checkpoint_uri="file:///tmp/x",
              idempotency_key=None, min_run_seconds=7)
    with pytest.raises(Refused) as refused:
        admit(spec, budget=36_000_000, **kw)
    assert refused.value.field == "broker.budget_usd"
    assert "estimated $36.00 on onprem 1x H100" in str(refused.value)
    assert "plus $7.00 for a clean stop at its end (7 s" in str(refused.value)
    assert "give at least $43.00" in str(refused.value), refused.value
    assert admit(spec, budget=43_000_000, **kw).job.budget == 43_000_000


def test_the_submit_note_says_an_estimate_is_the_runs_and_a_price_per_hour_is_a_price():
    """"cheapest spot at $0.0085" was the estimate for the whole run, read as a price."""
    kw = dict(job_id="j-1", team="ml", budget=5_000_000, offers=OFFERS, now=0.0, actor="t",
              checkpoint_uri="file:///tmp/x", idempotency_key=None)
    estimated = parse({"run": "x", "resources": {"accelerators": "A10G"}, "broker": {"expected_hours": 1}}, now=0.0)
    per_hour = parse({"run": "x", "resources": {"accelerators": "A10G"}}, now=0.0)
    assert admit(estimated, **kw).event.reason == "submitted (budget $5.00; cheapest spot, estimated $0.1389 for the run)"
    assert admit(per_hour, **kw).event.reason == "submitted (budget $5.00; cheapest spot at $0.1389/h)"
