"""Queue order and positions. Pure.

Order: higher ``priority`` first, then earlier submit time (then id, for a
total order). The scheduler walks the queue in this order and lets a later job
start when an earlier one does not fit (best-effort FIFO, as Kueue's default):
capacity is never left idle behind a job that cannot start.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal

from broker.lifecycle import JobState
from broker.models import Job


def order_key(job: Job) -> tuple:
    return (-job.priority, job.submitted_at, job.id)


def ordered(jobs: Iterable[Job]) -> list[Job]:
    """Queued jobs in the order the scheduler considers them."""
    return sorted((j for j in jobs if j.state is JobState.QUEUED), key=order_key)


def positions(jobs: Iterable[Job]) -> dict[str, int]:
    """1-based position of each queued job (1 = next to be considered)."""
    return {job.id: i for i, job in enumerate(ordered(jobs), start=1)}


def expected_end(job: Job, now: float) -> float | None:
    """When a running job should finish: from its reported step rate, else from ``expected_hours``."""
    if job.state is not JobState.RUNNING or job.running_since is None:
        return None
    elapsed = max(now - job.running_since, 0.0)
    p = job.progress
    step, total, first = p.get("step"), p.get("total_steps"), p.get("first_step", 0)
    if step and total and elapsed > 0 and step > (first or 0):
        rate = (step - (first or 0)) / elapsed
        return now + max(total - step, 0) / rate
    if job.expected_hours:
        return job.running_since + float(Decimal(job.expected_hours) * 3600)
    return None


def estimated_starts(jobs: Iterable[Job], now: float) -> dict[str, float]:
    """Roughly when each queued job waiting for capacity starts: the k-th job in line gets the k-th
    expected end among running jobs. Jobs that wait for another reason (the spot policy, a blocked
    zone) or with no running job to follow get no estimate."""
    jobs = list(jobs)
    ends = sorted(e for j in jobs if (e := expected_end(j, now)) is not None)
    out: dict[str, float] = {}
    k = 0
    for job in ordered(jobs):
        if "full" not in job.reason:
            continue
        if k < len(ends):
            out[job.id] = max(ends[k], now)
        k += 1
    return out
