"""Queue order and start estimates (``broker/queue.py``), pure: jobs built by hand, times in seconds."""

import pytest

from broker.lifecycle import JobState
from broker.models import Job
from broker.queue import estimated_starts, positions

NOW = 1_000_000.0


def job(job_id, state, *, at=0.0, hours=None, since=None, where="gpus", reason="waiting: the pool is full"):
    return Job(id=job_id, name=job_id, team="t", spec={}, budget=1, priority=0, state=state, submitted_at=NOW - 1000 + at,
               updated_at=NOW, expected_hours=hours, running_since=since,
               placement={"location": where} if state is not JobState.QUEUED else {},
               reason=reason if state is JobState.QUEUED else "")


def test_the_jobs_in_line_follow_the_running_job_and_each_other_when_they_say_how_long_they_run():
    jobs = [job("run", JobState.RUNNING, hours="1", since=NOW - 1800),            # ends in 30 min
            job("a", JobState.QUEUED, at=1, hours="0.5"),                          # starts then, runs 30 min
            job("b", JobState.QUEUED, at=2),                                        # no length given
            job("c", JobState.QUEUED, at=3)]
    starts = estimated_starts(jobs, NOW)
    assert positions(jobs) == {"a": 1, "b": 2, "c": 3}
    assert starts["a"] == pytest.approx(NOW + 1800)
    assert starts["b"] == pytest.approx(NOW + 3600)   # after a, which said how long it runs
    assert "c" not in starts                            # b did not say: nothing to follow


def test_a_chained_end_stays_on_the_capacity_it_was_handed_from():
    jobs = [job("gpu-run", JobState.RUNNING, hours="1", since=NOW, where="gpus"),
            job("cpu-run", JobState.RUNNING, hours="0.1", since=NOW, where="cpu"),
            job("gpu-a", JobState.QUEUED, at=1, hours="1"),
            job("gpu-b", JobState.QUEUED, at=2, hours="1"),
            job("cpu-a", JobState.QUEUED, at=3)]
    where = {"gpu-a": {"gpus"}, "gpu-b": {"gpus"}, "cpu-a": {"cpu"}}
    starts = estimated_starts(jobs, NOW, lambda j: where[j.id])
    assert starts["gpu-a"] == pytest.approx(NOW + 3600)
    assert starts["gpu-b"] == pytest.approx(NOW + 7200)   # gpu-a's end, not the CPU job's
    assert starts["cpu-a"] == pytest.approx(NOW + 360)


def test_jobs_waiting_for_something_else_than_capacity_get_no_estimate_and_pass_nothing_on():
    jobs = [job("run", JobState.RUNNING, hours="1", since=NOW),
            job("spot", JobState.QUEUED, at=1, hours="1", reason="the spot policy waits for spot capacity"),
            job("next", JobState.QUEUED, at=2)]
    starts = estimated_starts(jobs, NOW)
    assert "spot" not in starts and starts["next"] == pytest.approx(NOW + 3600)


def test_an_overdue_running_job_gives_now_never_a_time_in_the_past():
    jobs = [job("run", JobState.RUNNING, hours="0.5", since=NOW - 7200), job("a", JobState.QUEUED, at=1)]
    assert estimated_starts(jobs, NOW) == {"a": NOW}


def test_a_job_still_launching_holds_its_capacity_and_is_followed_from_its_expected_length():
    jobs = [job("starting", JobState.LAUNCHING, hours="0.25"), job("a", JobState.QUEUED, at=1)]
    assert estimated_starts(jobs, NOW) == {"a": pytest.approx(NOW + 900)}


def test_a_resumed_job_is_priced_for_what_is_left_of_its_expected_length():
    """Admitted for 1 h at $1/h with $0.60 left after a preemption half-way: the half left fits."""
    from pricing.offers import Offer, Tier

    from broker.engine.schedule import Place, Wait, schedule
    from broker.offers import Market

    od = Offer(Tier.ONDEMAND, "aws", "us-east-1", "us-east-1a", "g5.xlarge", "A10G", 1, 1_000_000)
    mk = Market(offers=(od,), free_capacity={}, free_slots={})
    spec = {"run": "x", "resources": {"accelerators": "A10G:1"}, "broker": {"budget_usd": "1", "expected_hours": 1}}

    def queued(**kw):
        base = dict(id="j", name="j", team="t", spec=spec, budget=1_000_000, priority=0, state=JobState.QUEUED,
                    submitted_at=NOW - 100, updated_at=NOW, expected_hours="1", spent=400_000, attempts=1,
                    reason="waiting")
        return Job(**{**base, **kw})

    half_done = queued(progress={"step": 55, "total_steps": 100}, last_checkpoint={"step": 50})
    assert isinstance(schedule([half_done], mk, now=NOW)[0], Place)  # $0.50 for the half left, $0.60 to spend
    no_total = queued(progress={"step": 55})
    assert isinstance(schedule([no_total], mk, now=NOW)[0], Place)  # the budget stop guards it from here
    barely_begun = queued(progress={"step": 5, "total_steps": 100}, last_checkpoint={"step": 0})
    waits = schedule([barely_begun], mk, now=NOW)[0]
    assert isinstance(waits, Wait) and "does not cover" in waits.reason  # 1 h left, $0.60: the estimate still says no


def test_a_job_the_policy_holds_while_spot_is_up_only_in_zones_blocked_for_it_is_told_so():
    from pricing.deadline import Decision
    from pricing.offers import Offer, Tier
    from pricing.policy import Action

    from broker.engine.schedule import Wait, schedule
    from broker.offers import Market

    class Waits:  # a policy that decides to wait (what the spot policy does when it sees no usable spot)
        def observe(self, inp):
            self.zones = inp.spot_zones_available

        def decide(self, inp):
            return Decision(Action.WAIT, None, "no spot")

    spot = Offer(Tier.SPOT, "aws", "us-east-1", "us-east-1a", "g5.xlarge", "A10G", 1, 400_000)
    od = Offer(Tier.ONDEMAND, "aws", "us-east-1", "us-east-1a", "g5.xlarge", "A10G", 1, 1_000_000)
    mk = Market(offers=(spot, od), free_capacity={}, free_slots={}, spot_available=frozenset({"us-east-1a"}))
    spec = {"run": "x", "resources": {"accelerators": "A10G:1"}, "broker": {"budget_usd": "10", "expected_hours": 1}}
    job = Job(id="j", name="j", team="t", spec=spec, budget=10_000_000, priority=0, state=JobState.QUEUED,
              submitted_at=NOW - 100, updated_at=NOW, expected_hours="1", deadline=NOW + 3 * 3600,
              blocked_zones={"us-east-1a": NOW + 600}, reason="waiting")
    policy = Waits()
    (decision,) = schedule([job], mk, now=NOW, policies={"j": policy})
    assert policy.zones == frozenset()  # the policy is not offered the blocked zone
    assert isinstance(decision, Wait)
    assert "spot is up in us-east-1a, blocked for this job after its preemptions there until" in decision.reason
