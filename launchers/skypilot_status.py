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
| launch done → cluster INIT for :data:`INIT_WAIT_SECONDS` | pending → pending → preempted (spot) or lost |
| on-demand: UP, job RUNNING → cluster gone | running → lost |
| launch in flight → launch failed (no capacity) | pending → lost (the engine requeues) |
| launch in flight → launch failed with the cluster UP and no job, for a reason another try may not meet (an ssh or network error while syncing, words not known) | pending → lost, its cluster torn down |
| launch in flight → launch failed with the cluster UP: SkyPilot's clone of the git workdir failed | pending → failed (step ``workdir``) |
| launch in flight → launch failed with the cluster UP: a ``file_mounts`` source could not be copied or mounted (unreadable on the broker's host, no such bucket, access denied, the node's disk full) | pending → failed (step ``file_mounts``), its cluster torn down |
| launch in flight → launch failed with the cluster UP: the workdir (a path) could not be copied (unreadable, not writable on the node, its disk full) | pending → failed (step ``workdir_sync``), its cluster torn down |
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
"""How long a cluster may stay ``INIT`` while its job runs, or once its launch has ended, before the attempt counts
as preempted or lost.
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
    init_seconds: float = 0.0  # how long the cluster has been seen INIT since its job was seen running, or its launch done
    init_wait_seconds: float = INIT_WAIT_SECONDS  # how long that may last before it is a loss
    adopted: bool = False  # the launch was found (sent before a crash, or before the launcher's state was lost)
    git_workdir: str = ""  # the task's git workdir as a sentence shows it ("<url> at <ref>"), if it has one
    mounts: tuple[tuple[str, str], ...] = ()  # the task's file_mounts copied: (destination, source: path or bucket URL)


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

LAUNCH_STEPS = frozenset({"workdir", "workdir_sync", "file_mounts"})
"""The steps of a launch that end an attempt before its job exists: SkyPilot cloning the git workdir (``workdir``, as
the local launcher names its clone), copying a workdir that is a path (``workdir_sync``: not a clone, which the
diagnosis's hint for ``workdir`` is about) and the ``file_mounts`` onto the cluster. Nothing of the job ran, so there is
no exit code and no reclaim to wait for."""

LAUNCH_ERROR_SHOWN = 500
"""How much of SkyPilot's message a lost attempt's reason quotes (the launcher reads more, to tell what failed)."""

RSYNC_FAILED = re.compile(r"Failed to rsync up: (?P<src>.+?) -> (?P<dst>\S+?)\.(?=\s|$)")
"""SkyPilot 0.14.1's words (``CommandRunner._rsync``) when its rsync of the workdir or of a local ``file_mounts``
source to a node failed, after its one retry: ``Command rsync … failed with return code N. Failed to rsync up:
<source> -> <destination>. Ensure that the network is stable, then retry.`` and rsync's own output."""

BEFORE_SYNC_FAILED = re.compile(r"Failed to run command before rsync (?P<src>.+?) -> (?P<dst>\S+?)\.(?=\s|$)")
"""SkyPilot 0.14.1's words (``backend_utils.parallel_data_transfer_to_nodes``) when the command it runs on a node for
a ``file_mounts`` entry failed: the ``mkdir`` before an rsync, the copy of a bucket URL (``aws s3 sync``, ``gsutil``),
or — as ``Command to mount failed`` — the mount of a storage (``mode: MOUNT``, the broker's checkpoint bucket)."""

RETURN_CODE = re.compile(r"\bfailed with return code (-?\d+)\.")

RSYNC_TASK_CODES = {3: "a destination could not be made", 11: "a file could not be written",
                    23: "some files could not be copied"}
"""rsync's exit codes that say the files themselves could not be copied (unreadable, the node's disk full, a
destination that cannot be made): another cluster copies the same files, and fails the same way. Its others
(12: the connection closed, 255: ssh failed, 30: a timeout, 24: files vanished while copied) may not repeat."""

SSH_FAILED = 255
"""The exit code of ssh itself failing (a command that may never have run on the node): not the task's doing."""

NETWORK_ERROR = re.compile(
    r"Connection (?:refused|timed out|reset|closed)|connection unexpectedly closed|Could not resolve|"
    r"Name or service not known|Temporary failure in name resolution|No route to host|Network is unreachable|"
    r"(?:kex|ssh)_exchange_identification|Could not connect to the endpoint URL|Failed to establish a new connection|"
    r"timed out|Broken pipe|EndpointConnectionError|SlowDown|ServiceUnavailable|RequestTimeout|i/o timeout|"
    r"deadline exceeded|TLS handshake timeout|InternalError|Internal Server Error|Service Unavailable|Bad Gateway|"
    r"Gateway Time-?out|(?:status code|error|HTTP)\W{0,3}(?:50[0-4]|429)\b|\((?:50[0-4]|429)\)|Throttl|TooManyRequests|"
    r"Too Many Requests|temporarily unavailable|"
    r"Could not get lock", re.I)
"""Words of a failure of the network, or of a cloud's service for a moment, in a sync's output: another try may not
meet it, so the attempt is lost (the engine requeues the job), not failed."""

TASK_FAULT = re.compile(
    r"NoSuchBucket|NoSuchKey|AccessDenied|Access Denied|AllAccessDisabled|InvalidBucketName|"
    r"(?:status code|error|HTTP)\W{0,3}40[134]\b|\(40[134]\)|Forbidden|"
    r"Unauthorized|Permission denied|No such file or directory|does not exist|"
    r"(?:bucket|object|key|file|path|directory)\b[^.\n]{0,80}\bnot found|No URLs matched|No space left|Disk quota|"
    r"not authorized|does not have [^.]{0,80}permission|matched no objects|BucketNotFound", re.I)
"""Words of the task's own fault in the output of a command SkyPilot ran on a node for a ``file_mounts`` entry (a
bucket's copy, a storage's mount): no such bucket or path, access refused, the node's disk full. Only with one of
them is such a failure the task's; any other (a cloud's 500, a mount's ``i/o timeout``, words not known) may pass,
and is lost."""

SKY_SCRIPT_WORDS = re.compile(r"Mount path \S+ does not exist\. Creating\.\.\.|"
                              r"(?:Rclone|hf-mount) log directory \S+ not found|No \S+ log file found in \S+")
"""SkyPilot's own mounting script's progress lines (``mounting_utils.get_mounting_script``), printed on a fresh mount
path or by a mount that left no log: not the task's fault, whatever words they hold (a mount that failed for a
passing reason on a new path read "does not exist", and failed the job for good)."""

BUCKET_REFUSED = re.compile(
    r"\((?P<code>NoSuchBucket|NoSuchKey|AccessDenied|AllAccessDisabled|InvalidBucketName|403|404)\) when calling the "
    r"(?:ListObjects(?:V2)?|HeadObject|GetObject|HeadBucket) operation(?:: (?P<said>[^.]*))?")
"""S3's refusal of a bucket URL ``file_mounts`` source, which SkyPilot 0.14.1 reads on its API server before it copies
it (``S3CloudStorage.is_directory``: ``CloudError: botocore error (NoSuchBucket): …``). Neither a submit nor the dry
run looks at such a source: the cluster is up by then."""

AFTER_FIX = "then submit the job again, or resume it with --force"
"""The end of each such sentence: the failure is the task's, so a resume (which the diagnosis does not take for the
infrastructure's) needs ``--force`` once what was wrong outside the task (a bucket's policy, a file's mode) is fixed."""


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
    if obs.launch is Launch.IN_FLIGHT:
        return AttemptStatus(Phase.PENDING)
    if obs.launch is Launch.DONE and obs.cluster == "INIT" and obs.init_seconds < obs.init_wait_seconds:
        # launched, yet not UP (a failed health check, perhaps): waited for as a running job's cluster is (bounded)
        return AttemptStatus(Phase.PENDING, reason=f"the cluster is INIT after its launch ended, for "
                                                   f"{int(obs.init_seconds)} s: waiting up to {int(obs.init_wait_seconds)} "
                                                   "s for it to be UP before taking it as lost")
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
    unsynced = _sync_failed(obs)
    if unsynced is not None:
        return unsynced
    why = _clip(obs.launch_error, LAUNCH_ERROR_SHOWN) or "no reason given"
    return AttemptStatus(Phase.LOST, reason=f"SkyPilot could not provision the cluster: {why}")


def _sync_failed(obs: Observation) -> AttemptStatus | None:
    """The attempt failed, when SkyPilot's launch failed copying or mounting the task's own files onto the cluster in
    a way that another cluster would meet again (step ``workdir_sync`` or ``file_mounts``, a sentence naming what
    could not be synced and what to do); None when it may not: a network or ssh failure, or words this does not know.
    Lost, the job was placed again, on a new cluster paid for each time up to the engine's attempts, for a path the
    broker's host cannot read, or a bucket that does not exist or that the cluster may not read."""
    text = obs.launch_error
    if not text or NETWORK_ERROR.search(text):
        return None
    code = RETURN_CODE.search(text)
    rc = int(code.group(1)) if code else None
    copied = RSYNC_FAILED.search(text)
    if copied:
        if rc not in RSYNC_TASK_CODES:
            return None
        said, receiving = _rsync_said(text)
        return _unsynced(obs, copied.group("src"), copied.group("dst"), "copied",
                         said or f"rsync exit code {rc}: {RSYNC_TASK_CODES[rc]}", receiving=receiving)
    ran = BEFORE_SYNC_FAILED.search(text)
    if ran:
        if rc is None or rc == SSH_FAILED or not TASK_FAULT.search(SKY_SCRIPT_WORDS.sub(" ", text[ran.end():])):
            return None
        said = re.sub(r"^View logs: sky api logs -l \S+\s*", "", text[ran.end():].strip())
        said = _clip(said, 300, tail=True) or f"exit code {rc}"
        how = "mounted" if "Command to mount failed" in text else "copied"
        return _unsynced(obs, ran.group("src"), ran.group("dst"), how, said)
    refused = BUCKET_REFUSED.search(text)
    if refused:
        buckets = [f"{d} ({s})" for d, s in obs.mounts if "://" in s]
        which = buckets[0] if len(buckets) == 1 else \
            f"one of {', '.join(buckets)}" if buckets else "a bucket URL source"
        said = f"{refused.group('code')}" + (f": {refused.group('said').strip()}" if refused.group("said") else "")
        return AttemptStatus(Phase.FAILED, step="file_mounts", reason=(
            f"file_mounts {which} could not be read from its bucket ({said}): check that the bucket and path exist "
            f"and that SkyPilot's cloud credentials may read them, {AFTER_FIX}"))
    return None


def _unsynced(obs: Observation, source: str, destination: str, how: str, said: str, *,
              receiving: bool = False) -> AttemptStatus:
    """The attempt failed at copying (or mounting) ``source`` to ``destination``, as SkyPilot names them."""
    if destination == WORKDIR and not any(s == source for _, s in obs.mounts):
        fix = _fix(said, source, workdir=True, receiving=receiving)
        return AttemptStatus(Phase.FAILED, step="workdir_sync", reason=(
            f"the workdir could not be copied onto the cluster from {source} ({said}): {fix}, {AFTER_FIX}"))
    dest = _destination(obs, source, destination)
    if how == "mounted":
        what = f"the bucket {source} could not be mounted on the cluster"
        fix = "check that the bucket exists and that the cluster's cloud credentials may read it"
    else:
        what = f"{source} could not be copied onto the cluster"
        fix = _fix(said, source, workdir=False, receiving=receiving)
    return AttemptStatus(Phase.FAILED, step="file_mounts", reason=f"file_mounts {dest}: {what} ({said}): {fix}, "
                                                                    f"{AFTER_FIX}")


WORKDIR = "~/sky_workdir"
"""Where SkyPilot 0.14.1 puts the workdir on each node (``SKY_REMOTE_WORKDIR``): a sync there is the workdir's."""


def _destination(obs: Observation, source: str, destination: str) -> str:
    """The task's own ``file_mounts`` destination for a sync SkyPilot names by ``source`` and its (perhaps rewritten:
    a path outside ``~`` and ``/tmp`` is copied under ``~`` and linked) ``destination``."""
    for dest, src in obs.mounts:
        if src.rstrip("/") == source.rstrip("/") and source:
            return dest
    for dest, _ in obs.mounts:
        if dest in (destination, f"{WORKDIR}/{destination}") or destination == f"{WORKDIR}/{dest}":
            return dest
    return destination


def _fix(said: str, source: str, *, workdir: bool, receiving: bool = False) -> str:
    """What to do about a copy that failed, from what rsync (or the command) said; ``receiving``: rsync on the node
    complained (it could not write), not rsync reading the source."""
    if "No space left" in said or "Disk quota" in said or "could not be written" in said:
        return ("the node's disk is full: give the task a larger disk (resources.disk_size), or "
                + ("keep large files out of the workdir" if workdir else "mount large data from a bucket instead"))
    if "://" in source:
        return "check that the bucket and path exist and that the cluster's cloud credentials may read them"
    if receiving:
        return ("the cluster's node could not write it there: "
                + ("its image's home folder must be writable, and its disk hold the workdir" if workdir else
                   "use a destination under ~ or /tmp, or a larger disk (resources.disk_size)"))
    if "Permission denied" in said:
        return "make it readable by the user the broker runs as"
    return "check that it exists and that the user the broker runs as may read it"


_RSYNC_SAID = re.compile(r"rsync: (?:\[(?P<side>\w+)\] )?(?P<said>.+?)(?= rsync(?: error)?: |$)")


def _rsync_said(text: str) -> tuple[str, bool]:
    """rsync's own first complaint in SkyPilot's message (``send_files failed to open "…": Permission denied``), and
    whether the receiving rsync (on the node) made it."""
    found = _RSYNC_SAID.search(text)
    if not found:
        return "", False
    return _clip(found.group("said"), 300), (found.group("side") or "").lower() in ("receiver", "generator")


def _clip(text: str, limit: int, *, tail: bool = False) -> str:
    """``text`` shortened to ``limit`` characters (its end, with ``tail``: where a command's error is)."""
    text = text.strip()
    if len(text) <= limit:
        return text
    return "…" + text[-(limit - 1):] if tail else text[: limit - 1] + "…"


def _stopped(reason: str) -> Phase:
    return Phase.PREEMPTED if reason == "preempted" else Phase.STOPPED


def _describe(cluster: str | None) -> str:
    return "gone" if cluster is None else cluster
