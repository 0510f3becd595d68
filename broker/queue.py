"""Queue order and positions. Pure.

Order: higher ``priority`` first, then earlier submit time (then id, for a
total order). The scheduler walks the queue in this order and lets a later job
start when an earlier one does not fit (best-effort FIFO, as Kueue's default):
capacity is never left idle behind a job that cannot start.
"""

from __future__ import annotations

from collections.abc import Iterable

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
