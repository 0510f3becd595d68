"""Preempt and resume: what the broker records when an attempt is lost, and how the next one starts. Pure.

A preempted (or lost) attempt blocks its zone for this job for a cool-down,
records the steps lost since the last committed checkpoint, and sends the job
back to the queue; the next attempt starts with ``BROKER_RESUME_FROM`` set to
the job's latest committed checkpoint (see ``Engine._launch``).

Recovery as an event sequence (SkyPilot documents its strategies this way)::

    A1 spot us-east-1a  ──preempted (notice, saved step 400)──▶  zone blocked 30 min
    A2 spot us-east-1b  resumes from step 400 ──preempted──▶  zone blocked
    A3 on-demand        resumes (the policy's safety net) ──▶ succeeded
"""

from __future__ import annotations

from broker.models import Attempt, Job


def steps_lost(job: Job, attempt: Attempt, seen: int | None = None) -> int | None:
    """Steps trained since the last committed checkpoint: the work the next attempt redoes. ``seen``: a later
    step the attempt's log showed (progress reports are rate-limited), the step its diagnosis names — counted
    from the last report alone, "lost at step 70; resumes from step 50 (10 steps lost)" did not add up."""
    known = [s for s in (attempt.last_step, seen) if s is not None]
    if not known:
        return None
    saved = job.last_checkpoint.get("step")
    return max(max(known) - int(saved), 0) if saved is not None else max(known)


LAUNCH_BACKOFF_FIRST = 5.0
LAUNCH_BACKOFF_MAX = 300.0


def launch_backoff(failures: int) -> float:
    """Seconds before a job whose launch was refused ``failures`` times in a row (for a reason that may pass) is
    placed again: 5 s, doubling, at most 5 min. Placed again at the next tick, a job met a SkyPilot API server that was
    down once a second, and each time stored a new attempt and three events (an hour: 3,600 attempts)."""
    return min(LAUNCH_BACKOFF_MAX, LAUNCH_BACKOFF_FIRST * 2 ** min(max(failures - 1, 0), 16))  # no float overflow


def block_zone(job: Job, zone: str | None, *, now: float, cooldown: float) -> dict[str, float]:
    """The job's blocked zones with ``zone`` added for ``cooldown`` seconds; expired blocks dropped."""
    blocked = {z: until for z, until in job.blocked_zones.items() if until > now}
    if zone:
        blocked[zone] = now + cooldown
    return blocked

