"""What blocked a zone for a job, read from its attempts, and said in its reason while it waits.

A job preempted once in its only zone was told "every matching zone is blocked for this job after recent preemptions
or refused launches"; a job whose launch in a zone was refused (no capacity there), the same. The scheduler now reads
what happened from the job's attempts (:func:`broker.engine.schedule.block_causes`), and the reason says it: "zone
sim-1a after a preemption there". The queue's start estimate still follows such a job (it waits for capacity)."""

from __future__ import annotations

import time

import pytest

from broker.engine.schedule import SPOT_WAIT, Wait, block_causes, schedule
from broker.lifecycle import AttemptState, JobState
from broker.models import Attempt, Job
from broker.offers import Market
from broker.queue import waits_for_capacity
from pricing.offers import Offer, Tier
from pricing.placement import Blocked
from pricing.policy import Action, Decision

NOW = 1_700_000_000.0


def attempt(n: int, state: AttemptState, zone: str = "sim-1a", tier: str = "spot", *, ran: bool = True,
            stop_reason: str = "", cloud: str = "aws", ended: float = NOW - 60) -> Attempt:
    return Attempt(id=f"j-a{n}", job_id="j", n=n, state=state, launcher="local",
                   placement={"tier": tier, "zone": zone, "location": zone, "cloud": cloud}, price_per_hour=1,
                   created_at=ended - 100, started_at=ended - 90 if ran else None, ended_at=ended,
                   stop_reason=stop_reason)


def job(blocked: dict[str, float], **kw) -> Job:
    spec = {"run": "x", "resources": {"accelerators": "A10G:1", "use_spot": True}, "broker": {"budget_usd": "1"}}
    return Job(id="j", name="j", team="t", spec=spec, budget=1_000_000, priority=0, state=JobState.QUEUED,
               submitted_at=NOW - 1000, updated_at=NOW, reason="waiting", blocked_zones=blocked, **kw)


PREEMPTED, LOST, FAILED, STOPPED = AttemptState.PREEMPTED, AttemptState.LOST, AttemptState.FAILED, AttemptState.STOPPED

CASES = [
    ("one spot preemption in the zone is a preemption there", [attempt(1, PREEMPTED)], Blocked(preemptions=1)),
    ("two spot preemptions in the zone are 2 preemptions there",
     [attempt(1, PREEMPTED, ended=NOW - 4000), attempt(2, PREEMPTED)], Blocked(preemptions=2)),
    ("a launch refused there (failed before it ran) is a refused launch, not a preemption",
     [attempt(1, FAILED, ran=False)], Blocked(refused=1)),
    ("a spot node lost there is a lost node", [attempt(1, LOST)], Blocked(lost=1)),
    ("a spot run stopped for going silent is a run that went silent",
     [attempt(1, STOPPED, stop_reason="heartbeat")], Blocked(silent=1)),
    ("a preemption, then a refused launch there, are both said",
     [attempt(1, PREEMPTED, ended=NOW - 4000), attempt(2, FAILED, ran=False)], Blocked(preemptions=1, refused=1)),
    ("a broker that went silent is not the zone's doing: nothing known", [attempt(1, LOST, stop_reason="owner_silent")],
     Blocked()),
    ("an on-demand node lost there never blocks a zone: nothing known", [attempt(1, LOST, tier="ondemand")],
     Blocked()),
    ("an error exit after the run began is not a refused launch: nothing known", [attempt(1, FAILED)], Blocked()),
    ("a preemption in another zone says nothing of this one", [attempt(1, PREEMPTED, zone="sim-1f")], Blocked()),
    ("an attempt that ended after the block ends did not cause it", [attempt(1, PREEMPTED, ended=NOW + 9999)],
     Blocked()),
    ("no attempts read: nothing known", [], Blocked()),
]


@pytest.mark.parametrize("attempts, cause", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_what_blocked_a_zone_is_read_from_the_jobs_attempts(attempts, cause):
    assert block_causes(job({"sim-1a": NOW + 600}), attempts, {"sim-1a"}) == {"sim-1a": cause}


def test_a_cloud_blocked_after_a_refused_launch_counts_the_refusals_in_any_of_its_zones():
    attempts = [attempt(1, FAILED, ran=False, zone="us-east-1a"), attempt(2, FAILED, ran=False, zone="us-east-1b"),
                attempt(3, PREEMPTED, zone="us-east-1c"), attempt(4, FAILED, ran=False, cloud="gcp")]
    assert block_causes(job({"cloud:aws": NOW + 600}), attempts, {"cloud:aws"}) == {"cloud:aws": Blocked(refused=2)}


Z1 = Offer(Tier.SPOT, "aws", "us-east-1", "sim-1a", "g5.xlarge", "A10G", 1, 425_000, simulated=True)
Z2 = Offer(Tier.SPOT, "aws", "us-east-1", "sim-1f", "g5.xlarge", "A10G", 1, 426_000, simulated=True)
MARKET = Market(offers=(Z1, Z2), free_capacity={"sim-1a": 1, "sim-1f": 1}, free_slots={})


def _at(seconds: float) -> str:
    return time.strftime("%H:%M:%SZ", time.gmtime(NOW + seconds))


def test_a_job_whose_zones_are_blocked_for_different_causes_is_told_each_and_still_waits_for_capacity():
    """sim-1a after a preemption, sim-1f after a refused launch: each is named with its cause and its end, and the
    queue's estimate still follows the job (its reason says it waits for capacity)."""
    waiting = job({"sim-1a": NOW + 600, "sim-1f": NOW + 608})
    attempts = [attempt(1, PREEMPTED, ended=NOW - 300), attempt(2, FAILED, zone="sim-1f", ran=False, ended=NOW - 8)]
    (decision,) = schedule([waiting], MARKET, now=NOW, attempts_of=lambda job_id: attempts)
    assert isinstance(decision, Wait)
    assert decision.reason == ("waiting: every matching zone is blocked for this job: zone sim-1a after a preemption "
                               "there, zone sim-1f after a refused launch there; "
                               f"sim-1a until {_at(600)}, sim-1f until {_at(608)}"), decision.reason
    assert waits_for_capacity(Job(**{**vars(waiting), "reason": decision.reason}))


@pytest.mark.parametrize("reason, waits", [
    ("waiting: every matching zone is blocked for this job: zone sim-1a after a preemption there; sim-1a until 12:00Z",
     True),
    ("waiting: zone us-east-1b is blocked for this job after 2 preemptions there and the rest are over the job's "
     "max_price_per_hour of $0.92", True),
    ("waiting: every matching zone is blocked for this job after recent preemptions or refused launches", True),
    ("waiting: zones a and b are blocked for this job after recent preemptions and the rest are over the cap", True),
    (f"{SPOT_WAIT} (no spot); spot is up in sim-1a, which this job may not use until 12:00:00Z, after a preemption "
     "there", False),
    (f"{SPOT_WAIT} (no spot); spot is up in us-east-1a, blocked for this job after its preemptions there until 12:00Z",
     False),
    ("waiting: the budget left does not cover it", False),
], ids=["the new words for a zone blocked after one preemption wait for capacity",
        "the new words for a zone blocked beside the price cap wait for capacity",
        "the generic words, when the cause is not known, wait for capacity",
        "an earlier broker's stored words wait for capacity still",
        "a spot policy's wait naming a blocked zone does not wait for capacity",
        "an earlier broker's spot policy wait does not either",
        "a budget's wait does not"])
def test_a_blocked_zone_is_waited_for_as_capacity_whatever_cause_it_names(reason, waits):
    assert waits_for_capacity(Job(**{**vars(job({})), "reason": reason})) is waits


def test_a_job_its_policy_holds_while_spot_is_up_in_a_zone_blocked_after_one_preemption_is_told_that_one():
    class Waits:  # the spot policy waits: no spot it may use
        def observe(self, inp):
            pass

        def decide(self, inp):
            return Decision(Action.WAIT, None, "no spot")

    spec = {"run": "x", "resources": {"accelerators": "A10G:1"}, "broker": {"budget_usd": "10", "expected_hours": 1}}
    waiting = Job(id="j", name="j", team="t", spec=spec, budget=10_000_000, priority=0, state=JobState.QUEUED,
                  submitted_at=NOW - 100, updated_at=NOW, expected_hours="1", deadline=NOW + 3 * 3600,
                  blocked_zones={"sim-1a": NOW + 600}, reason="waiting")
    od = Offer(Tier.ONDEMAND, "aws", "us-east-1", "sim-1a", "g5.xlarge", "A10G", 1, 1_000_000, simulated=True)
    mk = Market(offers=(Z1, od), free_capacity={}, free_slots={}, spot_available=frozenset({"sim-1a"}))
    (decision,) = schedule([waiting], mk, now=NOW, policies={"j": Waits()},
                           attempts_of=lambda job_id: [attempt(1, PREEMPTED)])
    assert decision.reason.endswith(f"; spot is up in sim-1a, which this job may not use until {_at(600)}, after a "
                                    f"preemption there"), decision.reason
    assert not waits_for_capacity(Job(**{**vars(waiting), "reason": decision.reason}))
