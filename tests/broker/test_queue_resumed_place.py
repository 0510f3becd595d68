"""Where a job resumed by a user stands in the queue: behind the jobs submitted since, as a job submitted then would.

A job that failed or was stopped at its budget had left the queue; resumed hours later it sorted by its submit time,
ahead of every job submitted since — a pool's head that had waited for its GPUs included, whose kept GPU it then took.
The broker's own requeues (a preemption, a lost node, a retry) are not the job's doing: it keeps its place."""

from __future__ import annotations

import pytest
from broker_testing import set_fields

from broker.auth import Principal
from broker.lifecycle import JobState
from broker.service import BrokerService
from broker.store import open_store

VISION = Principal("vision", "vision")


@pytest.fixture
def service(make_settings, tmp_path):
    clock = [1_000_000.0]
    store = open_store(f"sqlite://{tmp_path / 'q.db'}")
    svc = BrokerService(make_settings(), store, clock=lambda: clock[0])

    def submit(name):
        clock[0] += 60
        return svc.submit(VISION, {"name": name, "run": "sleep 60", "broker": {"budget_usd": "5"}})[0]

    svc.submit_at, svc.clock_now = submit, clock
    yield svc
    store.close()


def _order(svc):
    return [job_id for job_id, _ in sorted(svc.queue_positions().items(), key=lambda p: p[1])]


def test_a_job_a_user_resumes_joins_behind_the_jobs_submitted_since(service):
    first = service.submit_at("first")
    later = service.submit_at("later")
    set_fields(service.store, first, state=JobState.FAILED, attempts=1, reason="failed: exit 1")
    last = service.submit_at("last")
    service.clock_now[0] += 3600
    resumed = service.resume(VISION, first.id, force=True)
    assert resumed.resumed_at == service.clock_now[0]
    assert _order(service) == [later.id, last.id, first.id]
    assert service.store.get_job(first.id).submitted_at == first.submitted_at  # what it shows is unchanged


def test_a_job_the_broker_requeues_keeps_its_place(service):
    first = service.submit_at("first")
    later = service.submit_at("later")
    # preempted and put back in the queue by the engine: queued again, never resumed by a user
    set_fields(service.store, first, attempts=1, queued_at=service.clock_now[0] + 600)
    assert _order(service) == [first.id, later.id]


def test_priority_still_comes_first_for_a_resumed_job(service):
    urgent = service.submit_at("urgent")
    set_fields(service.store, urgent, state=JobState.FAILED, attempts=1, priority=5, reason="failed: exit 1")
    other = service.submit_at("other")
    service.resume(VISION, urgent.id, force=True)
    assert _order(service) == [urgent.id, other.id]
