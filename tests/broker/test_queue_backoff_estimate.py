"""A queued job waiting out a launch backoff (its launch refused for a reason that may pass, or its failed run retried)
is not placed before the backoff ends (``broker/engine/schedule.py``), so its rough start is no earlier: before, the
estimate (``broker/queue.py::waits``) skipped such a job — "starts ~" blank, its capacity counted free for the jobs
behind it — or, where its reason happened to say "full", told it "now". Pure: jobs built by hand, times in seconds;
the end to end check, with a real broker's engine and launcher, is in ``test_queue_submit_honest.py``."""

from __future__ import annotations

from dataclasses import replace

import pytest

from broker.lifecycle import JobState
from broker.models import Job
from broker.queue import backoff_until, estimated_starts, positions, waits

NOW = 1_000_000.0
REFUSED = "launch failed: SkyPilot's API server did not answer; tries again at 1970-01-12T13:48:20Z"


def job(job_id, state, *, at=0.0, hours=None, since=None, where="gpus", reason="waiting: the pool is full",
        retry_at=None):
    return Job(id=job_id, name=job_id, team="t", spec={}, budget=1, priority=0, state=state,
               submitted_at=NOW - 1000 + at, updated_at=NOW, expected_hours=hours, running_since=since,
               placement={"location": where} if state is not JobState.QUEUED else {},
               reason=reason if state is JobState.QUEUED else "", launch_retry_at=retry_at)


def test_a_job_in_backoff_with_capacity_free_now_starts_when_its_backoff_ends_not_now():
    backing_off = job("a", JobState.QUEUED, at=1, reason=REFUSED, retry_at=NOW + 40)
    assert estimated_starts([backing_off], NOW, free={"gpus": 1}) == {"a": pytest.approx(NOW + 40)}


def test_a_job_in_backoff_whose_reason_says_full_is_not_told_now():
    backing_off = job("a", JobState.QUEUED, at=1, retry_at=NOW + 300)  # its reason: "waiting: the pool is full"
    assert estimated_starts([backing_off], NOW, free={"gpus": 1}) == {"a": pytest.approx(NOW + 300)}


def test_a_job_in_backoff_waits_for_the_later_of_its_backoff_and_the_capacity_it_needs():
    running = job("run", JobState.RUNNING, hours="1", since=NOW - 1800)  # ends in 30 min
    short = job("a", JobState.QUEUED, at=1, hours="1", reason=REFUSED, retry_at=NOW + 20)
    assert estimated_starts([running, short], NOW) == {"a": pytest.approx(NOW + 1800)}
    long_ = replace(short, launch_retry_at=NOW + 2400)
    assert estimated_starts([running, long_], NOW) == {"a": pytest.approx(NOW + 2400)}


def test_the_backoff_counts_on_every_location_and_after_a_blocked_zone():
    """Its backoff holds wherever it may run; a zone blocked for it after a preemption until later still waits for
    the block (``not_before``)."""
    backing_off = job("a", JobState.QUEUED, at=1, reason=REFUSED, retry_at=NOW + 60)
    free = {"pool": 1, "zone-a": 1, "zone-b": 1}
    need = lambda _j: {"pool": 1, "zone-a": 1, "zone-b": 1}  # noqa: E731
    blocked = lambda _j: {"zone-a": NOW + 600}  # noqa: E731
    assert estimated_starts([backing_off], NOW, need, free, not_before=blocked) == {"a": pytest.approx(NOW + 60)}
    assert estimated_starts([backing_off], NOW, lambda _j: {"zone-a": 1}, free,
                            not_before=blocked) == {"a": pytest.approx(NOW + 600)}


def test_a_job_in_backoff_holds_its_place_in_line_and_the_job_behind_follows_its_end():
    running = job("run", JobState.RUNNING, hours="1", since=NOW - 1800)  # ends in 30 min
    first = job("a", JobState.QUEUED, at=1, hours="0.5", reason=REFUSED, retry_at=NOW + 2400)
    second = job("b", JobState.QUEUED, at=2)
    found = waits([running, first, second], NOW)
    assert found.starts == {"a": pytest.approx(NOW + 2400), "b": pytest.approx(NOW + 2400 + 1800)}
    assert positions([running, first, second]) == {"a": 1, "b": 2}  # the queue's order is the scheduler's, as before


def test_a_backoff_that_has_ended_changes_nothing():
    ended = job("a", JobState.QUEUED, at=1, reason=REFUSED, retry_at=NOW - 1)
    assert backoff_until(ended, NOW) is None
    assert estimated_starts([ended], NOW, free={"gpus": 1}) == {}  # waits for the scheduler's next look, not capacity
    waiting = job("b", JobState.QUEUED, at=1, retry_at=NOW - 1)
    assert estimated_starts([waiting], NOW, free={"gpus": 1}) == {"b": pytest.approx(NOW)}
