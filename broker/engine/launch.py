"""Launch step: build the launcher request for a job's next attempt. Pure.

The attempt id is derived from the job id and the attempt number, so the
launcher can make launching idempotent.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from broker.config import Pool
from broker.models import Attempt, Job
from launchers.base import LaunchRequest, RunAs


def broker_envs(job: Job, attempt: Attempt, *, public_url: str, job_token: str | None = None) -> dict[str, str]:
    """The variables every attempt sees (names documented in the README)."""
    envs = {
        "BROKER_JOB_ID": job.id,
        "BROKER_ATTEMPT": str(attempt.n),
        "BROKER_CHECKPOINT_URI": job.checkpoint_uri,
        "BROKER_PROGRESS_URL": f"{public_url.rstrip('/')}/v1/jobs/{job.id}/progress",
    }
    if attempt.resume_from:
        envs["BROKER_RESUME_FROM"] = attempt.resume_from
    if job_token:
        envs["BROKER_JOB_TOKEN"] = job_token
    return envs


def run_as_for(job: Job, pools: Iterable[Pool], checkpoint_root: str) -> RunAs | None:
    """The user the job runs as on the pool of this host it is placed on (its ``run_as`` for the job's team),
    with its checkpoint folder when that is the broker's own on this host (``<file:// root>/<job id>``; a
    ``broker.checkpoint`` the team chose is not given to anyone: the job reaches it as its user may)."""
    placement = job.placement or {}
    if placement.get("tier") != "onprem" or placement.get("cloud") != "local":
        return None
    user = next((p.user_for(job.team) for p in pools if p.name == placement.get("zone")), None)
    if user is None:
        return None
    own = f"{checkpoint_root.rstrip('/')}/{job.id}"
    parts = urlsplit(own)
    mine = job.checkpoint_uri == own and parts.scheme == "file" and parts.path
    return RunAs(user=user, folders=(parts.path,) if mine else ())


def launch_request(job: Job, attempt: Attempt, *, public_url: str, stop_grace_seconds: float,
                   job_token: str | None = None, now: float | None = None, workdir: str | None = None,
                   mounts: dict[str, str] | None = None, run_as: RunAs | None = None) -> LaunchRequest:
    """``workdir``: the attempt's local copy of the job's uploaded workdir pack (``broker.workdir``), given
    to the launcher as the task's ``workdir`` — the local launcher runs the job there, SkyPilot syncs it.
    ``mounts``: destination → the attempt's local copy of each uploaded file_mounts source
    (``broker.file_mounts``), given to the launcher as the task's ``file_mounts`` entries. ``run_as``:
    :func:`run_as_for`."""
    task = {k: v for k, v in job.spec.items() if k != "broker"}
    if workdir is not None:
        task["workdir"] = workdir
    if mounts:
        task["file_mounts"] = {**(task.get("file_mounts") or {}), **mounts}
    return LaunchRequest(
        attempt_id=attempt.id,
        job_id=job.id,
        attempt=attempt.n,
        task=task,
        placement=dict(attempt.placement),
        envs=broker_envs(job, attempt, public_url=public_url, job_token=job_token),
        slots=tuple(attempt.slots),
        stop_grace_seconds=stop_grace_seconds,
        stop_in_seconds=None if attempt.limit_at is None or now is None else attempt.limit_at - now,
        run_as=run_as,
    )
