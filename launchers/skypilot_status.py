"""What SkyPilot's view of a cluster means for an attempt. Pure: no ``sky`` import, no I/O.

The SkyPilot launcher runs each attempt on its own cluster and observes three
things: its launch request (in flight, failed, done), the cluster's status
(``INIT``, ``UP``, ``AUTOSTOPPING``, ``STOPPED``, or no record at all) and the status of the
cluster's job (read while the cluster is ``UP`` or ``AUTOSTOPPING``, and asked for while it is ``INIT``). :func:`next_status` folds one :class:`Observation` into the
attempt's phase, given the phase reported before — the one piece of memory the
mapping needs, because a spot cluster that disappears is a preemption only if
the job was running on it.

Sequences, read left to right (each arrow is one poll):

| observed | phases |
|---|---|
| launch in flight → cluster INIT → UP, job RUNNING → job SUCCEEDED | pending → pending → running → succeeded |
| UP, job RUNNING → UP, job status unknown or unread → UP, job RUNNING | running → running → running |
| UP, job RUNNING → (no broker for the idle minutes) AUTOSTOPPING, job SUCCEEDED | running → succeeded |
| spot: UP, job RUNNING → cluster gone (or STOPPED) | running → preempted |
| UP, job RUNNING → INIT, job RUNNING or unreadable (a failed health check) → UP, job RUNNING | running → running → running |
| UP, job RUNNING → INIT for :data:`INIT_WAIT_SECONDS`, its job not seen to end | running → running → preempted (spot) or lost |
| on-demand: UP, job RUNNING → cluster gone | running → lost |
| launch in flight → launch failed (no capacity) | pending → lost (the engine requeues) |
| launch in flight → launch failed with the cluster UP and no job (a workdir or file_mounts sync failed) | pending → lost, its cluster torn down |
| launch in flight → launch failed with the cluster UP: SkyPilot's clone of the git workdir failed | pending → failed (step ``workdir``) |
| stop requested → cluster gone | stopped |
| past the cluster's own budget limit: cluster gone (autodown after the guard stopped the run) | stopped (budget) |

A final phase is sticky: once an attempt has ended, later observations (the
cluster being torn down) do not change what it ended as.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from launchers.base import AttemptStatus, Phase


class Launch(str, Enum):
    """The state of the attempt's ``sky.launch`` request, as far as the launcher knows."""

    NONE = "none"  # never sent (or the launcher has no record of it)
    IN_FLIGHT = "in_flight"  # pending or running on the API server
    FAILED = "failed"  # SkyPilot gave up: no capacity, quota, bad credentials
    DONE = "done"  # the cluster was provisioned and the job submitted
    FORGOTTEN = "forgotten"  # sent, but the API server no longer knows it (it restarted, or collected the request)


INIT_WAIT_SECONDS = 180
"""How long a cluster may stay ``INIT`` while its job runs before the attempt counts as preempted or lost.
SkyPilot sets ``INIT`` on a failed health check too (its Ray cluster or skylet not answering for a moment), and
its managed jobs take a job still running for a live cluster; through the API server a job cannot be read while
its cluster is ``INIT`` (``ClusterNotUpError``, after SkyPilot re-ran its health check), so the job is given this
long to be seen again. A cluster gone or ``STOPPED`` is a loss at once."""


@dataclass(frozen=True)
class Observation:
    """One poll of SkyPilot for one attempt.

    ``cluster`` is SkyPilot's ``ClusterStatus`` value (``"INIT"``, ``"UP"``, ``"AUTOSTOPPING"``,
    ``"STOPPED"``) or None when SkyPilot has no record of the cluster (never
    made, terminated, preempted and cleaned up). ``job`` is the ``JobStatus``
    value of the cluster's job, or None when it could not be read.
    """

    launch: Launch = Launch.NONE
    cluster: str | None = None
    job: str | None = None
    spot: bool = False
    stop_reason: str | None = None  # set once the broker asked for the attempt to stop
    launch_error: str = ""
    limit_passed: bool = False  # the time the cluster stops its run by itself (the budget) has come
    init_seconds: float = 0.0  # how long the cluster has been seen INIT since its job was seen running
    init_wait_seconds: float = INIT_WAIT_SECONDS  # how long that may last before it is a loss
    adopted: bool = False  # the launch was found (sent before a crash, or before the launcher's state was lost)
    git_workdir: str = ""  # the task's git workdir as a sentence shows it ("<url> at <ref>"), if it has one


JOB_ENDS: dict[str, tuple[Phase, str | None]] = {
    "SUCCEEDED": (Phase.SUCCEEDED, "run"),
    "FAILED": (Phase.FAILED, "run"),
    "FAILED_SETUP": (Phase.FAILED, "setup"),
    "FAILED_DRIVER": (Phase.FAILED, "run"),
    "FAILED_PRECHECKS": (Phase.FAILED, "setup"),
}
"""Terminal job states of SkyPilot's job queue: phase and which command ended it."""

JOB_END_REASONS = {
    "FAILED_DRIVER": "SkyPilot's job driver on the cluster ended before it recorded how the run command ended "
                     "(the driver was killed, or the head node ran out of memory), so no exit code is known",
}
"""What a terminal job state says happened, where its exit code cannot (the logs may still hold one)."""

JOB_RUNNING = {"SETTING_UP": "setup", "RUNNING": "run"}
"""Job states in which the user's code runs (setup counts, as it does for the local launcher)."""

JOB_WAITING = {"INIT", "PENDING"}

KNOWN_JOBS = frozenset({*JOB_ENDS, *JOB_RUNNING, *JOB_WAITING, "CANCELLED"})
"""Every job state the mapping reads; another (a newer SkyPilot's) tells nothing about the job."""

CLONE_FAILED = re.compile(r"Git clone failed on .*?: \S+")
"""SkyPilot 0.14.1's words (``CommandRunner.git_clone``) when its clone of a git workdir failed on a node, after
three tries: the launch request fails once the cluster is up, before its job exists."""



def next_status(previous: Phase | None, obs: Observation) -> AttemptStatus:
    """The attempt's status after ``obs``, given the phase reported before (None: not known)."""
    if previous is not None and previous.is_final and previous is not Phase.GONE:
        return AttemptStatus(previous)
    if obs.job in JOB_ENDS:
        phase, step = JOB_ENDS[obs.job]
        if phase is Phase.FAILED and obs.stop_reason:
            return AttemptStatus(_stopped(obs.stop_reason), reason=obs.stop_reason, step=step)
        return AttemptStatus(phase, exit_code=0 if phase is Phase.SUCCEEDED else None, step=step,
                             reason=JOB_END_REASONS.get(obs.job, ""))
    if obs.job == "CANCELLED" or (obs.stop_reason and obs.cluster != "UP"):
        reason = obs.stop_reason or "the job was cancelled outside the broker"
        return AttemptStatus(_stopped(reason), reason=reason)
    if obs.launch is Launch.FAILED and obs.job is None and previous is not Phase.RUNNING:
        # the launch ended before it submitted the job: nothing runs, and nothing will. A cluster it leaves UP (its
        # workdir or file_mounts could not be synced) has no autostop either — SkyPilot sets it just before the job —
        # so the attempt ends here, and its cluster is torn down
        if obs.stop_reason:
            return AttemptStatus(_stopped(obs.stop_reason), reason=obs.stop_reason)
        return _launch_failed(obs)
    if obs.cluster == "UP":
        if obs.job in JOB_RUNNING:
            return AttemptStatus(Phase.RUNNING, step=JOB_RUNNING[obs.job])
        if obs.job in JOB_WAITING or previous in (None, Phase.PENDING, Phase.GONE):
            return AttemptStatus(Phase.PENDING)
        # a job state this mapping does not know, or none read (an API error): it says nothing new, so the
        # attempt keeps the phase it had — a running attempt does not step back to pending
        what = f"an unknown status {obs.job!r}" if obs.job else "no status"
        return AttemptStatus(previous, reason=f"SkyPilot gave {what} for the job on its cluster (UP)")
    # The cluster is not UP: provisioning, or the capacity went away.
    if (previous is Phase.RUNNING and obs.cluster == "INIT" and obs.job not in JOB_WAITING
            and obs.init_seconds < obs.init_wait_seconds):
        # a failed health check, perhaps: not a loss while the job may still run (bounded)
        step = JOB_RUNNING.get(obs.job or "")  # unreadable: the launcher keeps the step it knew
        seen = f"its job still {obs.job}" if obs.job in JOB_RUNNING else "its job unreadable"
        return AttemptStatus(Phase.RUNNING, step=step,
                             reason=f"the cluster is INIT ({seen}) after {int(obs.init_seconds)} s: waiting up to "
                                    f"{int(obs.init_wait_seconds)} s for it to be UP again before taking it as lost")
    if obs.limit_passed and obs.launch not in (Launch.IN_FLIGHT, Launch.FAILED):
        # its guard stopped the run at the budget and autodown took the cluster (or the capacity went
        # first: either way the budget's limit came, and the job must not be resumed beyond it)
        return AttemptStatus(Phase.STOPPED, reason="budget", step="run")
    if previous is Phase.RUNNING:
        if obs.spot:
            return AttemptStatus(Phase.PREEMPTED, reason="the spot cluster is no longer up", step="run")
        return AttemptStatus(Phase.LOST, reason=f"the cluster is {_describe(obs.cluster)} while its job was running")
    if obs.launch is Launch.FORGOTTEN:
        # never launched again (it may have run): a cluster left INIT by a request that died with its server
        # stays INIT, and is torn down as the attempt ends
        where = "has no cluster for it" if obs.cluster is None else f"its cluster is {_describe(obs.cluster)}"
        return AttemptStatus(Phase.LOST, reason="SkyPilot's API server no longer knows this attempt's launch request "
                                                f"(it restarted, or collected the request) and {where}: how its run "
                                                "went is not known", zone_to_blame=False)
    if obs.launch is Launch.IN_FLIGHT or (obs.launch is Launch.DONE and obs.cluster == "INIT"):
        return AttemptStatus(Phase.PENDING)
    if obs.adopted and obs.launch is Launch.DONE and obs.cluster is None and previous is None:
        return AttemptStatus(Phase.LOST, reason="SkyPilot launched its cluster while no broker watched it, and the "
                                                "cluster is gone: how its run ended is not known", zone_to_blame=False)
    if obs.launch is Launch.FAILED:
        return _launch_failed(obs)
    if obs.launch is Launch.NONE and obs.cluster is None:
        return AttemptStatus(Phase.GONE, reason="SkyPilot has no cluster for this attempt")
    if obs.spot and obs.launch is Launch.DONE:
        return AttemptStatus(Phase.PREEMPTED, reason=f"the spot cluster is {_describe(obs.cluster)} before its job ran")
    return AttemptStatus(Phase.LOST, reason=f"the cluster is {_describe(obs.cluster)} and no job ended on it")


def _launch_failed(obs: Observation) -> AttemptStatus:
    """A launch request that failed: lost (the engine places the job again: no capacity, a quota, credentials), but
    for a git workdir SkyPilot could not clone, which fails the attempt as the local launcher's clone does (step
    ``workdir``): a resume would clone the same ref, and fail the same way, on a cluster paid for each time."""
    clone = CLONE_FAILED.search(obs.launch_error)
    if clone:
        return AttemptStatus(Phase.FAILED, step="workdir", reason=(
            f"the git repository {obs.git_workdir or 'of the task'} could not be cloned on the cluster (no such "
            f"repository, branch, tag or commit, no access to it, or no network there; SkyPilot: {clone.group(0)})"))
    why = obs.launch_error or "no reason given"
    return AttemptStatus(Phase.LOST, reason=f"SkyPilot could not provision the cluster: {why}")


def _stopped(reason: str) -> Phase:
    return Phase.PREEMPTED if reason == "preempted" else Phase.STOPPED


def _describe(cluster: str | None) -> str:
    return "gone" if cluster is None else cluster
