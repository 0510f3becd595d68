"""Why a zone is blocked for a job, in the placement's sentence: what happened there, not "recent preemptions".

Every blocked zone was said to be blocked "after recent preemptions or refused launches" (or, beside a full pool,
"after recent preemptions") — after a single preemption, or when no preemption happened at all and a launch there was
refused. Given what is known of each (:class:`Blocked`), the sentence says it; given only the names, the old words."""

from __future__ import annotations

import pytest

from pricing.catalog import onprem_offer
from pricing.offers import JobRequest, Offer, ResourceRequest, Tier
from pricing.placement import BLOCKED_WORDS, Blocked, NoFit, Placement, place


def spot(zone: str, price: int, cloud: str = "aws") -> Offer:
    return Offer(Tier.SPOT, cloud, zone[:-1], zone, "V100x1", "V100", 1, price)


POOL = onprem_offer("lab", 1, "V100", "0.80")
OFFERS = [POOL, spot("us-east-1a", 970_000), spot("us-east-1b", 900_000), spot("us-west-2a", 950_000)]
ZONES = ("us-east-1a", "us-east-1b", "us-west-2a")
SPOT_ONLY = JobRequest(alternatives=(ResourceRequest("V100", 1, use_spot=True),))
ANY = JobRequest(alternatives=(ResourceRequest("V100", 1),))
ONE = Blocked(preemptions=1)

CASES = [
    ("one preemption in the only zone it may use says a preemption there",
     JobRequest(alternatives=(ResourceRequest("V100", 1, use_spot=True, zone="us-east-1a"),)),
     dict(blocked_zones={"us-east-1a": ONE}),
     "every matching zone is blocked for this job: zone us-east-1a after a preemption there"),
    ("two preemptions in a zone say 2 preemptions there",
     JobRequest(alternatives=(ResourceRequest("V100", 1, use_spot=True, zone="us-east-1a"),)),
     dict(blocked_zones={"us-east-1a": Blocked(preemptions=2)}),
     "every matching zone is blocked for this job: zone us-east-1a after 2 preemptions there"),
    ("a refused launch says a refused launch there, not preemptions",
     JobRequest(alternatives=(ResourceRequest("V100", 1, use_spot=True, zone="us-east-1a"),)),
     dict(blocked_zones={"us-east-1a": Blocked(refused=1)}),
     "every matching zone is blocked for this job: zone us-east-1a after a refused launch there"),
    ("a lost node says a lost node there",
     JobRequest(alternatives=(ResourceRequest("V100", 1, use_spot=True, zone="us-east-1a"),)),
     dict(blocked_zones={"us-east-1a": Blocked(lost=1)}),
     "every matching zone is blocked for this job: zone us-east-1a after a lost node there"),
    ("a run that went silent and a preemption in one zone are both said",
     JobRequest(alternatives=(ResourceRequest("V100", 1, use_spot=True, zone="us-east-1a"),)),
     dict(blocked_zones={"us-east-1a": Blocked(preemptions=1, silent=1)}),
     "every matching zone is blocked for this job: zone us-east-1a after a preemption and a run that went silent "
     "there"),
    ("mixed zones name each zone with its own cause, the unknown one last",
     SPOT_ONLY, dict(blocked_zones={"us-east-1a": Blocked(preemptions=2), "us-east-1b": Blocked(refused=1),
                                    "us-west-2a": Blocked()}),
     "every matching zone is blocked for this job: zone us-east-1a after 2 preemptions there, zone us-east-1b after "
     "a refused launch there, zone us-west-2a after recent preemptions or refused launches"),
    ("zones blocked for the same cause are said together, after one in each",
     SPOT_ONLY, dict(blocked_zones={"us-east-1a": ONE, "us-east-1b": ONE, "us-west-2a": Blocked(refused=2)}),
     "every matching zone is blocked for this job: zones us-east-1a and us-east-1b after a preemption in each, "
     "zone us-west-2a after 2 refused launches there"),
    ("a cloud blocked after a refused launch says so of its zones",
     SPOT_ONLY, dict(blocked_zones={"cloud:aws": Blocked(refused=1)}),
     "every matching zone is blocked for this job: zones us-east-1a, us-east-1b and us-west-2a after a refused "
     "launch in aws"),
    ("zones given by name only keep the words that do not guess a cause",
     SPOT_ONLY, dict(blocked_zones=frozenset(ZONES)),
     "every matching zone is blocked for this job after recent preemptions or refused launches"),
    ("a mapping to what is not a cause (the job's zone → until) is read as names only",
     SPOT_ONLY, dict(blocked_zones={z: 1e9 for z in ZONES}),
     "every matching zone is blocked for this job after recent preemptions or refused launches"),
    ("a full pool beside a zone blocked after one preemption says which is full and why the zone is blocked",
     ANY, dict(free_capacity={"lab": 0}, blocked_zones={"us-east-1a": ONE, "us-east-1b": ONE,
                                                        "us-west-2a": Blocked(refused=1)}),
     "the pool lab is full right now and zones us-east-1a and us-east-1b are blocked for this job after a "
     "preemption in each, zone us-west-2a after a refused launch there"),
    ("the one zone under the price cap, blocked after a preemption, says so and that the rest are over the cap",
     JobRequest(alternatives=(ResourceRequest("V100", 1, use_spot=True),), max_price_per_hour=920_000),
     dict(blocked_zones={"us-east-1b": ONE}),
     "zone us-east-1b is blocked for this job after a preemption there and the rest are over the job's "
     "max_price_per_hour of $0.92"),
]


@pytest.mark.parametrize("request_, kwargs, reason", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_blocked_zone_is_said_with_what_happened_there(request_, kwargs, reason):
    result = place(request_, OFFERS, **kwargs)
    assert isinstance(result, NoFit), result
    assert result.reason == reason
    # whatever the cause, a job waiting for blocked zones is told so in the words its start estimate follows
    assert any(words in result.reason for words in BLOCKED_WORDS)


def test_what_blocked_a_zone_does_not_change_where_the_job_goes():
    """The causes are for the sentence only: a zone is left out whether its name or its cause is given."""
    by_name = place(ANY, OFFERS, free_capacity={"lab": 0}, blocked_zones=frozenset({"us-east-1b"}))
    by_cause = place(ANY, OFFERS, free_capacity={"lab": 0}, blocked_zones={"us-east-1b": Blocked(refused=1)})
    assert isinstance(by_name, Placement) and by_name == by_cause
    assert by_cause.offer.location == "us-west-2a"
