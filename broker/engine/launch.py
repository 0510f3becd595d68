"""Launch step: build the launcher request for a job's next attempt. Pure, but for :func:`workdir_seen`, which
lists a host workdir's files.

The attempt id is derived from the job id and the attempt number, so the
launcher can make launching idempotent.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from urllib.parse import urlsplit

from broker.config import Pool
from broker.models import Attempt, Job
from broker.workdir import changed_note, fingerprint
from launchers.base import LaunchRequest, RunAs


def broker_envs(job: Job, attempt: Attempt, *, public_url: str, job_token: str | None = None,
                fallback_urls: Sequence[str] = ()) -> dict[str, str]:
    """The variables every attempt sees (names documented in the README); ``fallback_urls``, the other brokers a
    job's reports may go to when ``public_url``'s does not answer (``BROKER_PROGRESS_URLS``)."""
    envs = {
        "BROKER_JOB_ID": job.id,
        "BROKER_ATTEMPT": str(attempt.n),
        "BROKER_CHECKPOINT_URI": job.checkpoint_uri,
        "BROKER_PROGRESS_URL": f"{public_url.rstrip('/')}/v1/jobs/{job.id}/progress",
    }
    if fallback_urls:
        envs["BROKER_PROGRESS_URLS"] = ",".join(f"{u.rstrip('/')}/v1/jobs/{job.id}/progress" for u in fallback_urls)
    if attempt.resume_from:
        envs["BROKER_RESUME_FROM"] = attempt.resume_from
    if job_token:
        envs["BROKER_JOB_TOKEN"] = job_token
    return envs


def host_workdir(job: Job) -> str | None:
    """The job's workdir when it is a path on the broker's host (an admin's submit): read from there at each launch,
    so what an attempt runs is the directory as it is then. ``None`` for an uploaded pack (``broker.workdir``: the
    same files every attempt) and a git repository (``{url, ref}``: its ref pins them)."""
    workdir = job.spec.get("workdir")
    if not isinstance(workdir, str) or not workdir or (job.spec.get("broker") or {}).get("workdir"):
        return None
    return workdir


def workdir_seen(job: Job) -> dict:
    """The fingerprint of the job's host workdir now (:func:`broker.workdir.fingerprint`), for the attempt being
    launched (``Attempt.workdir``); ``{}`` when it has none. Lists the files (a capped walk), never reads them."""
    workdir = host_workdir(job)
    try:  # never what stops a launch: the directory's own absence is the launcher's to say (before the setup)
        return fingerprint(workdir) if workdir is not None else {}
    except (OSError, ValueError):
        return {}


def workdir_changed(job: Job, seen: dict, attempts: Iterable[Attempt]) -> str | None:
    """What the launch of an attempt whose host workdir is ``seen`` says when the directory differs from what the job's
    latest earlier attempt with a fingerprint found (the user edited ``train.py`` since): the attempt runs the code as
    it is now, on a checkpoint the older code wrote. ``None`` when nothing differs or nothing is known to compare."""
    if not seen:
        return None
    before = max((a for a in attempts if a.workdir and a.n <= job.attempts), key=lambda a: a.n, default=None)
    if before is None:
        return None
    step = job.last_checkpoint.get("step")
    resumes = f"on the checkpoint from step {step}" if job.last_checkpoint.get("uri") and step is not None else \
        "on the checkpoint it resumes from" if job.last_checkpoint.get("uri") else \
        "from the start (no checkpoint was committed)"
    return changed_note(before.workdir, seen, since=before.n, resumes=resumes)


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
                   mounts: dict[str, str] | None = None, run_as: RunAs | None = None,
                   fallback_urls: Sequence[str] = ()) -> LaunchRequest:
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
        envs=broker_envs(job, attempt, public_url=public_url, job_token=job_token, fallback_urls=fallback_urls),
        slots=tuple(attempt.slots),
        stop_grace_seconds=stop_grace_seconds,
        stop_in_seconds=None if attempt.limit_at is None or now is None else attempt.limit_at - now,
        run_as=run_as,
    )
