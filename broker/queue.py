"""Queue order and positions. Pure.

Order: higher ``priority`` first, then earlier submit time (then id, for a
total order). The scheduler walks the queue in this order and lets a later job
start when an earlier one does not fit (best-effort FIFO, as Kueue's default):
capacity is never left idle behind a job that cannot start.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Collection, Iterable
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
    """When a running job should finish: from its reported step rate, else from ``expected_hours``; a job
    placed or launching (it holds its capacity already) from ``expected_hours`` counted from now."""
    if job.state in (JobState.PLACED, JobState.LAUNCHING):
        return now + float(Decimal(job.expected_hours) * 3600) if job.expected_hours else None
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


def estimated_starts(jobs: Iterable[Job], now: float,
                     usable: Callable[[Job], Collection[str]] | None = None) -> dict[str, float]:
    """Roughly when each queued job waiting for capacity starts: in queue order, each takes the earliest
    expected end not yet taken among running jobs that hold capacity it could use (``usable(job)``: the
    pools and zones a queued job may run in, asked only while ends are left to hand out; absent: any) —
    with one pool, the k-th job in line gets the k-th expected end. A queued job that says how long it
    runs (``expected_hours``) hands its own expected end on to the jobs behind it, so positions past the
    number of running jobs get an estimate too. Jobs that wait for another reason (the spot policy, a
    blocked zone) or with no end to follow get no estimate."""
    jobs = list(jobs)
    ends = sorted(((e, j.placement.get("location")) for j in jobs if (e := expected_end(j, now)) is not None),
                  key=lambda end: end[0])
    out: dict[str, float] = {}
    for job in ordered(jobs):
        if not ends:
            break
        if "full" not in job.reason:
            continue
        where = usable(job) if usable is not None else None
        i = next((i for i, (_, loc) in enumerate(ends) if where is None or loc in where), None)
        if i is not None:
            end, location = ends.pop(i)
            out[job.id] = start = max(end, now)
            if job.expected_hours:
                bisect.insort(ends, (start + float(Decimal(job.expected_hours) * 3600), location),
                              key=lambda e: e[0])
    return out
