"""The SkyPilot launcher: each attempt on its own SkyPilot cluster, in the clouds or on Kubernetes.

The broker decides *where* (tier, cloud, region, zone, instance type); SkyPilot
provisions it. The only module that imports ``sky`` (lazily, so ``broker
--help`` stays fast; ``skypilot==0.14.1`` is the ``skypilot`` extra).

Choices, and why:

* **One cluster per attempt**, named from the attempt id
  (:func:`cluster_name`). A launch repeated after a broker crash finds the
  cluster, or the launch request (in flight, or succeeded and its cluster
  since gone), and does nothing, so an attempt never runs twice; what
  SkyPilot's request history no longer holds is in docs/deploy.md. The
  broker, not SkyPilot's managed-jobs controller (``sky jobs launch``),
  decides recovery: it alone knows the budget, the deadline and which zones
  it has blocked, and resumes the next attempt wherever is cheapest then —
  possibly on-prem.
* **Serverless.** The cluster lives only while its attempt runs: the launcher
  tears it down as soon as it sees the attempt end (:meth:`status`), on
  :meth:`stop`, and :meth:`sweep` tears down clusters the broker no longer
  knows. A teardown is a request the API server runs later: a stopped
  attempt's cluster still there :data:`DOWN_RETRY_SECONDS` after it is asked again. SkyPilot's autodown (``down=True`` with ``autostop_minutes``) is the
  safety net for a broker that is down.
* **The budget holds without a broker.** An attempt with a budget limit
  (:attr:`LaunchRequest.stop_in_seconds`) runs its ``setup`` and ``run`` under a
  guard that stops them on the cluster itself (:func:`~launchers.skypilot_task.guarded_run`)
  :meth:`after_run_seconds` before the limit: what a cluster is billed after its
  run ends — the idle minutes before autodown and the teardown — is paid for
  within the budget too. A limit cannot be moved on a running cluster (there is
  no ``set_stop_in``; docs/deploy.md says why): a budget raised later takes effect
  on the next attempt.
* **Plan first.** :meth:`launch` asks SkyPilot for a dry run before the real
  launch and turns a refusal (unknown accelerator, no such zone, missing
  bucket) into :class:`~launchers.base.LaunchError` with a sentence — permanent when it is about the
  task itself (:data:`TASK_REFUSALS`), so a job no retry can run fails instead of being requeued for ever.
  SkyPilot's SDK checks, packs and uploads the task's local files on the broker's host before it sends a
  launch: what fails there (:class:`NotSent`: a path this host lacks or cannot read fails the job, naming it)
  is refused at once, never awaited as a request that may show up on the API server; so is a launch the API
  server, or a proxy in front of it, answers with a 4xx (:class:`Refused`, :func:`http_refusal`: too large fails
  the job, credentials, versions or a rate limit make it wait). A 5xx, a 408 or a cut connection may have been
  taken: that launch is awaited, never sent twice. The API server refusing the broker before a launch is sent —
  SkyPilot's health check, or the listing of the attempt's cluster, answered with a token revoked, versions that do
  not match, a 503 — is refused the same way (:func:`api_refusal`); an attempt already launched keeps its last phase
  meanwhile, never read gone. Each request is sent once (:func:`_send_once_on_503`): SkyPilot's own retry of a 503,
  for up to 600 s, held the engine's tick.

The launcher keeps one small JSON file per attempt in ``state_dir`` (launch
request id, spot or not, the last phase, a stop request, the logs fetched) so a
restarted broker reads status correctly; SkyPilot itself is reached through a
:class:`SkyClient` (:class:`SdkClient`: the SkyPilot SDK and its API server). They stay after the attempt has
ended (the fetched log is what ``broker logs`` shows) until the broker no longer holds its job:
:meth:`SkyPilotLauncher.sweep_attempt_files` removes them then.
"""

from __future__ import annotations

import contextvars
import copy
import fcntl
import functools
import hashlib
import html
import json
import logging
import math
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from launchers.base import (AttemptStatus, Capabilities, Keep, LaunchError, LaunchRequest, Phase, next_round,
                           state_domain)
from launchers.git_workdir import GitWorkdir
from launchers.skypilot_status import INIT_WAIT_SECONDS, KNOWN_JOBS, LAUNCH_STEPS, Launch, Observation, next_status
from launchers.skypilot_task import (
    KUBERNETES_CLOUDS,
    TaskConfigError,
    broker_owned_fields,
    budget_stop_in,
    budget_stopped_step,
    exit_code_in,
    task_config,
    without_broker_mounts,
)
from pricing.offers import Tier
from pricing.placement import what_runs

log = logging.getLogger(__name__)

CLUSTER_PREFIX = "broker"
"""The default first part of a cluster's name (``broker-<attempt id>``); a deployment sets its own
(``BROKER_CLUSTER_PREFIX``) when it shares a SkyPilot API server or identity with another."""
MAX_CLUSTER_NAME = 40
"""SkyPilot shortens long names on the cloud anyway; short ones stay readable in ``sky status``."""

DEFAULT_AUTOSTOP_MINUTES = 10
"""Autodown after this many idle minutes: the safety net when the broker cannot tear a cluster down."""

DOWN_RETRY_SECONDS = 300
"""A teardown is a request the API server runs later (``sky.down`` does not wait) and may fail there (a cloud
API error, expired credentials): a stopped attempt's cluster still listed this long after its teardown was
asked for is asked again. Longer than a teardown takes, so a slow one is not asked twice."""

JOB_READABLE = ("UP", "AUTOSTOPPING")
"""Cluster statuses in which SkyPilot 0.14.1 reads a cluster's jobs (``check_cluster_available``). A cluster is
``AUTOSTOPPING`` once it has idled ``autostop_minutes`` after its job ended, on its way down: a broker that was
away meanwhile still reads how the job ended, instead of taking the cluster for preempted and resuming a job
that had succeeded."""

LAUNCH_SETTLE_SECONDS = 120
"""How long a launch whose id did not come back (the SDK gives up on its POST after 5 s; a connection cut mid-way)
may take to show on the API server: it is not sent again meanwhile, since the server may have it, or be about to
record it, and two launches of one cluster name run the attempt twice."""

RECLAIM_WAIT_SECONDS = 150
"""How long a spot job that failed on a cluster still up waits to be read as failed: the longest warning a cloud
gives of a spot reclaim (AWS, two minutes) and a refresh of the cluster's status after it."""

LOG_REFRESH_SECONDS = 1.0
"""How stale a live cluster's kept log may be when a reader asks for output past its end: SkyPilot sends the whole
log on each fetch, so readers following a job (``broker logs -f``, several at once, each polling every 0.5 s) fetch
it at most this often, and a reader still behind the kept copy (paging through a long log) fetches nothing. Short:
a cluster that vanishes (a spot reclaim) takes with it what it wrote since the last fetch, and at 5 s a follower
missed a preempted run's last lines ("saved checkpoint") that a poll of its own would have fetched."""

STATE_SUFFIXES = (".json.tmp", ".json", ".lock", ".log")
"""The files the launcher keeps per attempt in its state directory: ``<attempt id><suffix>``."""

AUTODOWN_MARGIN_SECONDS = 300
"""Billed after the idle minutes, at most: SkyPilot's skylet looks at idleness once a minute and counts
whole minutes, then terminating the VMs takes a minute or two."""


# --- validation (``broker submit``) ------------------------------------------------------------


class TaskError(ValueError):
    """A task SkyPilot refuses: ``field`` is the dotted path SkyPilot names, ``reason`` its message."""

    def __init__(self, field: str, reason: str):
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")


_PROBLEM_FIELD = re.compile(r"problematic field\(s\): \$\.?([\w.\[\]-]*)")
_UNKNOWN_FIELD = re.compile(r"(?:Instead of|unsupported field) '([^']+)'")


def validate_task(task: Mapping[str, Any]) -> None:
    """Refuse a task SkyPilot would refuse, with SkyPilot's message and the field it names.

    Settings the broker decides itself are refused first (:data:`BROKER_OWNED_REASONS`: ``resources.autostop``,
    ``resources.max_hourly_cost``, in an ``any_of`` / ``ordered`` alternative too, and ``service``). Then runs
    the real ``sky.Task.from_yaml_config`` on a deep copy (it empties the
    dict it is given). A ``broker:`` section and ``broker:checkpoint`` mounts
    are the broker's and are left out. SkyPilot checks that a cloud bucket used
    as a ``file_mounts`` source exists, so that case reaches the storage.
    """
    import sky

    for field, key in broker_owned_fields(task)[:1]:
        raise TaskError(field, BROKER_OWNED_REASONS[key])
    config = without_broker_mounts({k: v for k, v in task.items() if k != "broker"})
    try:
        sky.Task.from_yaml_config(config)
    except Exception as exc:  # SkyPilot raises ValueError subclasses and its own exceptions
        message = _one_line(exc)
        raise TaskError(_field_of(message), message) from None


BROKER_OWNED_REASONS = {
    "autostop": "cannot be set: the broker tears each cluster down itself, and asks SkyPilot to tear it down "
                f"{DEFAULT_AUTOSTOP_MINUTES} idle minutes after its job ends should no broker be there to; a task's own "
                "autostop would change that (false: a cluster left up, billed without limit; wait_for: none: the "
                "cluster torn down while the job runs). Leave it out",
    "max_hourly_cost": "is not read by the broker, which picks the instance itself: give broker.max_price_per_hour "
                       "instead (US dollars an hour, for all the job's nodes together)",
    "service": "cannot be run by the broker, which runs a task on a cluster of its own (sky launch), not as a "
               "SkyServe service (sky serve up): leave it out",
}
"""Why :func:`validate_task` refuses each setting of :func:`launchers.skypilot_task.broker_owned_fields`."""


def _field_of(message: str) -> str:
    match = _PROBLEM_FIELD.search(message)
    if match and match.group(1):
        within = "resources." if message.startswith("Invalid resources YAML") else ""
        return within + match.group(1)
    match = _UNKNOWN_FIELD.search(message)
    if match:
        return ("resources." if message.startswith("Invalid resources YAML") else "") + match.group(1)
    if "`envs` field" in message:
        return "envs"
    lowered = message.lower()
    for field in ("file_mounts", "accelerator", "instance", "zone", "region", "infra", "envs", "workdir",
                  "num_nodes", "setup", "run", "resources"):
        if field in lowered:
            return {"accelerator": "resources.accelerators", "instance": "resources.instance_type",
                    "zone": "resources.infra", "region": "resources.infra",
                    "infra": "resources.infra"}.get(field, field)
    return "task"


LAUNCH_ERROR_LIMIT = 4000
"""How much of a failed launch's message the launcher reads: what failed (an rsync's own complaint, a bucket's
refusal) comes after SkyPilot's command and its output, past the 500 characters a reason shows."""

_COMMAND_BLOCK = re.compile(r"-{5} CMD -{5}.*?-{5} CMD END -{5}", re.S)


def launch_error_text(exc: BaseException) -> str:
    """A failed launch request's error as the launcher reads it: SkyPilot's exception type and message
    (:func:`_launch_message`)."""
    text = _launch_message(str(exc))
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _launch_message(message: str) -> str:
    """A failed launch's message on one line, without the commands SkyPilot quotes whole (a storage mount's is a
    script of kilobytes, before the error it explains), and at most :data:`LAUNCH_ERROR_LIMIT` characters: its start
    (what failed) and its end (a command's last words: why) — a bucket copy prints a line per file, and the network
    error that ended it comes last."""
    text = _plain(_COMMAND_BLOCK.sub(" ", message))
    if len(text) > LAUNCH_ERROR_LIMIT:
        head = LAUNCH_ERROR_LIMIT // 4
        text = text[:head] + " … " + text[-(LAUNCH_ERROR_LIMIT - head - 3):]
    return text


def _plain(text: str) -> str:
    """``text`` on one line, SkyPilot's colour codes dropped."""
    return " ".join(re.sub(r"\x1b\[[0-9;]*m", "", text).split())


def _one_line(exc: BaseException, limit: int = 500) -> str:
    """SkyPilot's message on one line (colour codes dropped), shortened to ``limit`` characters."""
    text = _plain(str(exc))
    if not text:
        return type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- building the task ---------------------------------------------------------------------------


def cluster_name(attempt_id: str, prefix: str = CLUSTER_PREFIX) -> str:
    """The attempt's cluster: ``broker-<attempt id>``, lowercased; long ids end in a short hash."""
    if not attempt_id:
        raise ValueError("empty attempt id")
    body = re.sub(r"[^a-z0-9-]+", "-", attempt_id.lower()).strip("-")
    name = f"{prefix}-{body}"
    if len(name) > MAX_CLUSTER_NAME or body != attempt_id:
        digest = hashlib.sha256(attempt_id.encode()).hexdigest()[:6]
        name = f"{name[: MAX_CLUSTER_NAME - 7].rstrip('-')}-{digest}"
    return name


def is_own_cluster(name: str, prefix: str = CLUSTER_PREFIX) -> bool:
    """Whether :func:`cluster_name` with ``prefix`` could have made ``name`` from a broker attempt id
    (``j-<hex>-a<n>``, the short hash ending a long one): ``broker-dev``, or another deployment's
    ``broker-staging-j-…``, is not ``broker``'s."""
    return re.fullmatch(rf"{re.escape(prefix)}-j-[0-9a-z]+-a[0-9]+(?:-[0-9a-f]{{6}})?", name) is not None


def attempt_config(request: LaunchRequest, *, stop_at: int | None = None) -> dict[str, Any]:
    """The SkyPilot task config for ``request`` (raises :class:`LaunchError` if it cannot be made);
    ``stop_at``: when the cluster stops its ``run`` by itself (epoch seconds)."""
    try:
        return task_config(request.task, request.placement, request.envs,
                           job_id=request.job_id, attempt_id=request.attempt_id, stop_at=stop_at,
                           grace_seconds=request.stop_grace_seconds)
    except TaskConfigError as exc:
        raise LaunchError(str(exc), permanent=True) from None


def file_mounts_of(config: Mapping[str, Any]) -> list[list[str]]:
    """The task's ``file_mounts`` copied from a path or a bucket URL, as ``[destination, source]`` pairs, for a
    sentence naming the one SkyPilot could not sync (SkyPilot names a path by the broker's copy of it, and a
    destination outside ``~`` and ``/tmp`` by where it copies it first). A storage (``source:``/``mode:``, the
    broker's checkpoint bucket) is left out: SkyPilot names its mount by the task's own destination."""
    return [[str(destination), source] for destination, source in (config.get("file_mounts") or {}).items()
            if isinstance(source, str)]


def build_task(config: Mapping[str, Any]) -> Any:
    """A real ``sky.Task`` from a config, or :class:`LaunchError` with SkyPilot's reason."""
    import sky

    try:
        return sky.Task.from_yaml_config(copy.deepcopy(dict(config)))
    except Exception as exc:  # SkyPilot rejects the task itself (no other placement would take it) — unless
        # it is about reaching the cloud, which an admin may fix: then the job waits in the queue
        raise LaunchError(refusal(exc, config), permanent=type(exc).__name__ not in TRANSIENT_REFUSALS,
                          scope=refusal_scope(exc)) from None


def placed_on(placement: Mapping[str, Any]) -> str:
    """What the placement runs on, for a sentence, as placement's refusals name it: ``an AWS cluster``,
    ``a GCP cluster``, ``a Kubernetes pool`` (a pool's pods, whatever tier the placement says)."""
    cloud = str(placement.get("cloud") or "")
    if not cloud:
        return "a cluster"
    pool = cloud.lower() in KUBERNETES_CLOUDS or placement.get("tier") == Tier.ONPREM.value
    return what_runs(cloud, Tier.ONPREM if pool else Tier.ONDEMAND)


TRANSIENT_REFUSALS = frozenset({"NoCloudAccessError", "CloudUserIdentityError", "ResourcesUnavailableError"})
"""SkyPilot errors that say nothing against the task itself (credentials, capacity): the job is requeued."""


TASK_REFUSALS = (
    re.compile(r"does not have enough (?:memory|vCPUs)\b"),
    re.compile(r"does not have the requested (?:memory|number of vCPUs)\b"),
)
"""SkyPilot's dry-run refusals of what the task itself asks, against the instance type it was placed on
(``sky.Resources``: ``p4d.24xlarge does not have enough memory … 4096+ is requested``; an exact ``memory: 15``
on a 16 GB type). Placement already took the offers that meet the task's size, so the job would be placed
the same way and refused again: the job fails, with SkyPilot's reason. Every other refusal — no capacity or
quota, no cloud access, a missing bucket, a zone, region or instance type SkyPilot's catalog does not know
(the broker's price table is older) — sends the job back to the queue."""


CLOUD_REFUSALS = frozenset({"NoCloudAccessError", "CloudUserIdentityError"})
"""SkyPilot errors that rule a whole cloud out for the broker until an admin acts (``sky check``)."""
MISSING_DEPENDENCIES = re.compile(r"Failed to import dependencies for (?P<cloud>\w+)")
"""SkyPilot installed without the extra a cloud needs (``skypilot[kubernetes]``, ``[gcp]``): that cloud is out."""


def refusal_scope(exc: BaseException) -> str | None:
    """What SkyPilot's refusal ``exc`` rules out for a while (:attr:`LaunchError.scope`): ``"cloud"`` for no access
    to the cloud or its missing dependencies, ``"zone"`` for no capacity there, else ``None``. Placed again at the
    same place, a job was refused there again and again, a new attempt each time, while another cloud, zone or a
    free pool could have run it."""
    kind = type(exc).__name__
    if kind in CLOUD_REFUSALS or MISSING_DEPENDENCIES.search(_one_line(exc, limit=2000)):
        return "cloud"
    if kind == "ResourcesUnavailableError":
        return "zone"
    return None


def never_satisfiable(exc: BaseException) -> bool:
    """Whether SkyPilot's plan refusal ``exc`` is about the task itself, so no retry can succeed."""
    if type(exc).__name__ in TRANSIENT_REFUSALS:
        return False
    message = _one_line(exc, limit=2000)
    return any(rule.search(message) for rule in TASK_REFUSALS)


def refusal(exc: BaseException, config: Mapping[str, Any] | None = None) -> str:
    """SkyPilot's refusal of a placement as one sentence for the user."""
    kind = type(exc).__name__
    message = _one_line(exc).rstrip(".")
    where = _describe(config or {})
    if kind.startswith("Storage"):
        return f"SkyPilot cannot mount the storage for {where}: {message}."
    if kind == "ResourcesUnavailableError":
        return f"SkyPilot finds no capacity or offer for {where}: {message}."
    if kind in ("NoCloudAccessError", "CloudUserIdentityError"):
        return f"SkyPilot has no access to the cloud for {where} (run `sky check`): {message}."
    return f"SkyPilot cannot satisfy {where}: {message}."


def _describe(config: Mapping[str, Any]) -> str:
    r = config.get("resources") or {}
    what = r.get("instance_type") or r.get("accelerators") or "the task"
    if isinstance(what, dict):
        what = ", ".join(f"{k}:{v}" for k, v in what.items())
    spot = " (spot)" if r.get("use_spot") else ""
    return f"{what}{spot} in {r.get('infra', 'any cloud')}"


# --- the port to SkyPilot ------------------------------------------------------------------------


@dataclass(frozen=True)
class Cluster:
    """What SkyPilot says of one cluster."""

    name: str
    status: str  # ClusterStatus value: INIT, UP, AUTOSTOPPING, STOPPED
    spot: bool = False


class SkyClient(Protocol):
    """The few SkyPilot calls the launcher makes. :class:`SdkClient` is the real one."""

    def plan(self, task: Any, cluster: str) -> None:
        """Dry-run the launch; raise SkyPilot's error if it cannot be satisfied (:class:`NotSent` from it when it
        failed before the dry run was sent). Blocks (seconds)."""

    def launch(self, task: Any, cluster: str, *, autostop_minutes: int) -> str:
        """Start provisioning and the job, autodown as the safety net; return the request id. Does not wait.
        :class:`NotSent` when it failed before the request was sent, or the API server refused it (:class:`Refused`);
        any other error: it may have been."""

    def launch_state(self, request_id: str) -> tuple[Launch, str]:
        """The launch request's state and, if it failed, SkyPilot's message."""

    def launch_in_flight(self, cluster: str) -> bool:
        """Whether a launch request for ``cluster`` is pending or running (found after a crash)."""

    def earlier_launch(self, cluster: str) -> str | None:
        """The id of the newest launch request sent for ``cluster`` that is in flight or has succeeded, found
        after a crash inside :meth:`launch` or a lost state file; None when there is none. A dry run
        (:meth:`plan`) is not one, nor a failed or cancelled launch: nothing ran."""

    def cancel_launch(self, cluster: str, request_id: str | None) -> None:
        """Abort the launch request ``request_id`` (None: any launch request for ``cluster`` still in
        flight, found after a crash). Does not wait; a request already ended is no error."""

    def clusters(self, names: list[str] | None = None) -> list[Cluster]:
        """Clusters SkyPilot knows (refreshed from the cloud for spot and autostop ones)."""

    def job_status(self, cluster: str) -> str | None:
        """The JobStatus value of the cluster's latest job, or None."""

    def down(self, cluster: str) -> None:
        """Tear the cluster down. Does not wait; a cluster already gone is no error."""

    def logs(self, cluster: str) -> bytes:
        """The latest job's output so far."""


class NotSent(Exception):
    """SkyPilot failed on the broker's host before the launch request (or the dry run) left for its API server, raised
    from SkyPilot's own error: checking the task's paths, packing its workdir and ``file_mounts`` sources for a remote
    API server, uploading them, the server's health check or its ``/validate``. Nothing was sent, so the launch is
    refused or tried again (:class:`~launchers.base.LaunchError`), never waited for as a request that may show up."""


def _raised_before_sending(exc: BaseException) -> bool:
    """Whether ``sky.launch`` raised ``exc`` before its ``POST /launch`` could reach the API server, read from where
    it was raised (SkyPilot 0.14.1's ``sky/client/sdk.py``): in ``_launch`` before the POST (``validate``, the packing
    and upload of the task's files, the request's body), or in the health check ``sky.launch`` makes first. Anything
    else — the POST itself (a connection cut, its 5 s timeout while the server may have taken it), the reading of its
    answer, a frame this does not know — is taken as maybe sent: a launch sent twice would run the attempt twice. (A 4xx
    answer that refuses it is told apart before this, by :func:`_refusing_answer`.)"""
    from sky.client import sdk
    from sky.server import common as server_common

    launching = getattr(getattr(sdk, "_launch", None), "__code__", None)
    if launching is None:  # another SkyPilot than this reads: every failure may have been sent
        return False
    sending = {server_common.make_authenticated_request.__code__, server_common.get_request_id.__code__}
    health_check = server_common.check_server_healthy_or_start(_raised_before_sending).__code__  # its wrapper's code
    for frame, inner in _calls(exc):
        callee = inner.f_code if inner is not None else None
        if frame.f_code is launching:
            return callee not in sending
        if frame.f_code is health_check and callee is server_common.check_server_healthy_or_start_fn.__code__:
            return True
    return False


def _calls(exc: BaseException) -> Iterator[tuple[Any, Any]]:
    """Each frame of ``exc``'s traceback, outermost first, with the frame it called (None for the one that raised):
    where SkyPilot raised an error is what says whether its launch was sent (:func:`_raised_before_sending`,
    :func:`_refusing_answer`)."""
    tb = exc.__traceback__
    while tb is not None:
        yield tb.tb_frame, tb.tb_next.tb_frame if tb.tb_next is not None else None
        tb = tb.tb_next


class Refused(NotSent):
    """SkyPilot's API server, or a proxy in front of it, answered a launch's (or a dry run's) ``POST /launch`` with a
    4xx that refuses the request (:func:`_refusing_answer`): it was not taken, so it is not awaited as a request that
    may show up — taken for one, the attempt read gone 120 s later and the job was launched again every two minutes,
    for ever, no one told why. ``status``: the HTTP status; ``heard``: the status and what the answer said, one line;
    ``mismatch``: the answer is SkyPilot's own "client and server versions do not match"."""

    def __init__(self, status: int, heard: str, *, mismatch: bool = False):
        super().__init__(heard)
        self.status = status
        self.heard = heard
        self.mismatch = mismatch


ANSWERED_MAYBE_TAKEN = frozenset({408})
"""4xx answers to the ``POST /launch`` that do not say the request was refused. A 408 Request Timeout is what Envoy
(Istio, many Kubernetes gateways) answers when its stream idle timeout fires before the upstream answered — after it
forwarded the request, which SkyPilot's API server may have taken: it stays a launch that may have been sent. Every
other 4xx is said before a request reaches the API server's queue (a proxy's body limit, 413, or rate limit, 429;
SkyPilot's own middleware: a bad or missing token, 401, a role without the right, 403, a client of another version,
400; FastAPI's check of the body, 422): SkyPilot's ``/launch`` queues the request only once all of them passed, and
answers 200 then."""


def _refusing_answer(exc: BaseException) -> Any | None:
    """The 4xx answer to ``sky.launch``'s ``POST /launch`` that ``exc`` was raised over, when it refuses the request
    (not :data:`ANSWERED_MAYBE_TAKEN`); None for anything else. Read from where ``exc`` was raised (SkyPilot 0.14.1):
    in ``_launch``'s ``get_request_id``, which raises on a status ≥ 400 (``requests``' ``HTTPError``, or SkyPilot's
    ``PermissionDeniedError`` for a 403 that gives a reason), the answer in hand."""
    from sky.client import sdk
    from sky.server import common as server_common

    launching = getattr(getattr(sdk, "_launch", None), "__code__", None)
    for frame, callee in _calls(exc):
        if frame.f_code is launching:
            if callee is None or callee.f_code is not server_common.get_request_id.__code__:
                return None
            answer = callee.f_locals.get("response")
            status = getattr(answer, "status_code", None)
            refused = isinstance(status, int) and 400 <= status < 500 and status not in ANSWERED_MAYBE_TAKEN
            return answer if refused else None
    return None


def _heard(status: int, reason: str, text: str) -> str:
    """An HTTP answer on one line for a sentence: ``HTTP 413 Request Entity Too Large``, then what its body says when
    that adds something (SkyPilot's ``detail`` or ``message``, a proxy's page title, else the text, shortened)."""
    said = ""
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    if isinstance(body, dict):
        said = body.get("message") or body.get("detail") or ""
        if isinstance(said, list):  # FastAPI's 422: what is wrong where, without the values (the task, its envs)
            said = "; ".join(f"{'.'.join(map(str, d.get('loc') or ()))}: {d.get('msg')}" for d in said
                             if isinstance(d, dict))
        said = said if isinstance(said, str) else ""
    elif text:
        title = re.search(r"<title[^>]*>(.*?)</title>", text, re.I | re.S)
        said = html.unescape(title.group(1)) if title else text
    said = _plain(said)
    said = said if len(said) <= 300 else said[:299] + "…"
    line = f"{status} {reason}" if reason else str(status)
    if said.startswith(f"{status} ") and (not reason or said.lower() == line.lower()):
        line, said = said, ""  # a proxy's page that says its status line, no more
    elif said.lower() == (reason or "").lower():
        said = ""
    return f"HTTP {line}: {said}" if said else f"HTTP {line}"


_LAUNCH_POSTS: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("skypilot_launch_posts", default=None)
"""While :func:`_unless_unsent` watches a call into SkyPilot: each ``POST /launch`` SkyPilot's session sent."""


def _count_launch_posts() -> bool:
    """Make SkyPilot's HTTP session note, once, each ``POST /launch`` it sends (:data:`_LAUNCH_POSTS`); False when this
    SkyPilot has no such session (another version than this reads), and nothing is counted.

    A 4xx proves only that the request it answers was refused. SkyPilot's SDK sends a request again by itself after a
    503, for up to 600 s (``rest.request``); the launcher's calls turn that off (:func:`_send_once_on_503`), and this
    count stays for a SkyPilot where that cannot be done. Envoy answers 503 when the API server reset after it got the
    request, so an earlier send may have been taken, and a 4xx to a later one (the new replica's version check, a rate
    limit) says nothing of it. So only a launch sent once is read as refused; the counting is at the session's
    ``send``, so a send that got no answer counts too."""
    from sky.server import rest

    session = getattr(rest, "_session", None)
    if session is None:
        return False
    if getattr(session, "_spot_broker_counts_launches", False):
        return True
    send = session.send

    def counted(prepared, **kwargs):
        seen = _LAUNCH_POSTS.get()
        if seen is not None and prepared.method == "POST" and \
                urlsplit(prepared.url).path.rstrip("/").endswith("/launch"):
            seen.append(prepared.url)
        return send(prepared, **kwargs)

    session.send = counted
    session._spot_broker_counts_launches = True
    return True


@contextmanager
def _unless_unsent(cluster: str) -> Iterator[None]:
    """SkyPilot's error, as it is, unless nothing was sent (:class:`NotSent`, from it) or the request, sent once, was
    refused (:class:`Refused`; sent more than once, an earlier send may have been taken: :func:`_count_launch_posts`)."""
    seen: list[str] | None = [] if _count_launch_posts() else None
    token = _LAUNCH_POSTS.set(seen)
    try:
        yield
    except Exception as exc:
        answer = _refusing_answer(exc) if seen is not None and len(seen) == 1 else None
        if answer is not None:
            try:
                mismatch = answer.status_code == 400 and answer.json().get("error") == "version_mismatch"
            except (ValueError, AttributeError):
                mismatch = False
            raise Refused(answer.status_code, _heard(answer.status_code, answer.reason, answer.text),
                          mismatch=mismatch) from exc
        if _raised_before_sending(exc):
            raise NotSent(f"SkyPilot sent nothing for {cluster}: {_one_line(exc)}") from exc
        raise
    finally:
        _LAUNCH_POSTS.reset(token)


_MISSING_SOURCE = re.compile(r"File mount source '(?P<path>.+?)' does not exist locally|"
                             r"Workdir must be a valid directory \(or a symlink to a directory\)\. "
                             r"(?P<workdir>.+?) not found\.|^(?P<zipped>/.+?) does not exist\.$")
"""SkyPilot 0.14.1's words for a task's local path the broker's host lacks: its client's check of a ``file_mounts``
source and of the workdir (``Task.expand_and_validate_*``), and its packing of them for a remote API server
(``storage_utils.zip_files_and_folders``)."""


def local_sources(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The task's paths on the broker's host that SkyPilot reads: ``(what a sentence calls it, path)`` for a workdir
    that is a path and each ``file_mounts`` source that is not a bucket URL (a storage's local ``source`` too)."""
    found = []
    workdir = config.get("workdir")
    if isinstance(workdir, str) and workdir:
        found.append(("the workdir", workdir))
    for destination, source in (config.get("file_mounts") or {}).items():
        if isinstance(source, dict):
            source = source.get("source")
        for path in source if isinstance(source, list) else [source]:
            if isinstance(path, str) and path and "://" not in path:
                found.append((f"file_mounts {destination}", path))
    return found


_UPLOAD_REFUSED = re.compile(r"Failed to upload chunk: \d+ / \d+: (?P<said>.*) \(Status code: (?P<status>4\d\d)\)")
"""SkyPilot 0.14.1's words when its API server, or a proxy in front of it, refused an upload of the task's files
(``sky/client/common.py``, ``_upload_chunk_with_retry``, after its three tries): made before the launch is sent."""


def http_refusal(status: int, heard: str, *, mismatch: bool = False, upload: bool = False,
                 what: str | None = None) -> LaunchError:
    """What the launcher says of a request SkyPilot's API server, or a proxy in front of it, refused with a 4xx
    (``heard``: the answer, one line; ``upload``: the upload of the task's files, not the launch request itself;
    ``what``: another request, named so, that the launch waited on — :func:`api_refusal`), and whether the job fails
    for it.

    Only the task's own size fails the job (413): the same task makes the same request at every placement, so it would
    be refused for ever; once the proxy's limit is raised, ``broker resume --force`` runs it. Everything else is the
    deployment's — the broker's SkyPilot credentials (401) or rights (403), a client and server of other versions, a
    rate limit (429), a proxy's rule — and passes once an operator fixes it: the job waits, placed again after the
    launch backoff (5 s doubling to 5 min), and its reason says why each time."""
    what = what or ("the upload of the task's files" if upload else "the launch request")
    if status == 413:
        fix = ("raise the proxy's body limit (nginx: client_max_body_size; SkyPilot uploads in parts of up to 95 MB) or "
               "make the workdir and file_mounts smaller: keep data and checkpoints in a bucket") if upload else \
              ("raise the proxy's body limit (nginx: client_max_body_size) or make the task smaller: its run and setup "
               "scripts, envs and file_mounts entries go in that request")
        return LaunchError(f"SkyPilot's API server, or the proxy in front of it, refused {what} as too large "
                           f"({heard}): {fix}", permanent=True)
    if mismatch:
        import sky

        return LaunchError(f"SkyPilot's API server refused {what}: its SkyPilot version and the broker's "
                           f"({sky.__version__}) do not match ({heard}): upgrade the broker's SkyPilot or the API "
                           f"server so that they match")
    if status == 401:
        return LaunchError(f"SkyPilot's API server refused the broker's credentials ({heard}): give the broker a valid "
                           f"SkyPilot API token (SKYPILOT_SERVICE_ACCOUNT_TOKEN, or `sky api login` as the broker's "
                           f"user)")
    if status == 403:
        return LaunchError(f"SkyPilot's API server refused the broker's SkyPilot user {what} ({heard}): give that user "
                           f"the right to launch clusters (its role, its workspace)")
    if status == 429:
        return LaunchError(f"SkyPilot's API server, or the proxy in front of it, is limiting the broker's requests "
                           f"({heard}): {what} is tried again later")
    return LaunchError(f"SkyPilot's API server, or a proxy in front of it, refused {what} ({heard}): check "
                       f"SKYPILOT_API_SERVER_ENDPOINT and that proxy")


def unsent_refusal(exc: NotSent, config: Mapping[str, Any]) -> LaunchError:
    """What the launcher says of a launch (or dry run) SkyPilot failed before sending it, or that its API server
    refused (:class:`Refused`, :func:`http_refusal`; and as such a 4xx to the upload of the task's files, made before
    the launch is sent). The task's own files at fault — a path the broker's host lacks or cannot read — fail the job,
    with a sentence naming the entry and the fix: every placement reads the same files on the same host, and a job
    requeued for it was placed and refused for ever. Anything else is SkyPilot refusing the placement, as a dry run's
    refusal is."""
    if isinstance(exc, Refused):
        return http_refusal(exc.status, exc.heard, mismatch=exc.mismatch)
    cause = exc.__cause__ if exc.__cause__ is not None else exc
    refused = api_refusal(cause, "a request made before the launch was sent")  # health check, /validate, upload check
    if refused is not None:
        return refused
    upload = _UPLOAD_REFUSED.search(_one_line(cause, limit=2000)) if isinstance(cause, RuntimeError) else None
    if upload and int(upload["status"]) not in ANSWERED_MAYBE_TAKEN:
        status = int(upload["status"])
        return http_refusal(status, _heard(status, "", upload["said"]), upload=True)
    sources = [(what, path, os.path.abspath(os.path.expanduser(path))) for what, path in local_sources(config)]
    missing = _MISSING_SOURCE.search(_one_line(cause, limit=2000)) if isinstance(cause, ValueError) else None
    if missing:
        named = next(value for value in missing.groups() if value)
        for what, path, full in sources:
            if named in (path, full):
                return LaunchError(f"{what}: {path} does not exist on the broker's host, where SkyPilot reads the "
                                   f"task's files: correct the path, or put the files there",
                                   permanent=True)
    read = getattr(cause, "filename", None) if isinstance(cause, OSError) else None
    if isinstance(read, str):
        for what, path, full in sources:
            if read == full or read.startswith(full.rstrip("/") + "/"):
                said = cause.strerror or type(cause).__name__
                inside = "" if read == full else f", at {read}"
                if isinstance(cause, PermissionError):
                    return LaunchError(f"{what}: {path} cannot be read on the broker's host, where SkyPilot reads the "
                                       f"task's files ({said}{inside}): make it readable by the user the broker runs "
                                       f"as", permanent=True)
                # a file that vanished while it was packed (the task's files changing meanwhile), an I/O error: the
                # next placement reads them again
                return LaunchError(f"{what}: {path} could not be read on the broker's host, where SkyPilot reads the "
                                   f"task's files ({said}{inside})")
    return LaunchError(refusal(cause, config), permanent=never_satisfiable(cause))


LISTING = "the listing of the attempt's cluster"
SWEEP_LISTING = "the listing of the broker's clusters"
"""The requests :meth:`SkyPilotLauncher._unreachable` names when the API server does not answer them."""


CATALOG_FETCH = re.compile(r"raw\.githubusercontent\.com|skypilot-catalog|catalogs/v\d+/")
"""What SkyPilot's error names when it failed fetching a price catalog (its ``sky/catalog/common.py`` downloads one
from GitHub the first time a cloud is planned on a host without it)."""


def api_refusal(exc: BaseException, what: str) -> LaunchError | None:
    """What the launcher says when SkyPilot's API server, or a proxy in front of it, refused or could not answer a
    request a launch waits on (``what`` names it: the SDK's health check, the listing of the attempt's cluster), read
    from SkyPilot 0.14.1's error ``exc``; None for an error that is not about reaching the API server. Never permanent:
    a token revoked (401), a user's rights (403), SkyPilot versions that do not match, a server down or restarting
    (503) pass once an operator fixes them, so the job waits with the launch backoff, its reason saying why.

    SkyPilot's health check, which each SDK call makes first, raises its own errors without the answer
    (``ApiServerAuthenticationError`` for a 401, ``APIVersionMismatchError``, ``ApiServerConnectionError`` for any
    other status or none): the answer is read again from SkyPilot's cache of it (:func:`_health_answer`)."""
    import requests
    from sky import exceptions as sky_errors

    said = _one_line(exc, limit=300)
    if isinstance(exc, sky_errors.ServerTemporarilyUnavailableError):
        return LaunchError(f"SkyPilot's API server, or the proxy in front of it, is temporarily unavailable (HTTP 503: "
                           f"{_one_line(exc.message, limit=300) if exc.message else 'Service Unavailable'}): "
                           f"{what} is tried again later")
    if isinstance(exc, sky_errors.PermissionDeniedError):
        return http_refusal(403, f"HTTP 403 Forbidden: {said}", what=what)
    if isinstance(exc, requests.HTTPError) and exc.response is not None:
        answer = exc.response
    elif isinstance(exc, (sky_errors.ApiServerAuthenticationError, sky_errors.APIVersionMismatchError,
                          sky_errors.ApiServerConnectionError)):
        answer = _health_answer()
    elif isinstance(exc, (requests.ConnectionError, requests.Timeout)):
        if CATALOG_FETCH.search(_one_line(exc, limit=2000)):
            # SkyPilot fetching a cloud's price catalog it has none of, from a host with no way out: read as "the API
            # server cannot be reached" it sent the operator to a server that was up
            return LaunchError(f"SkyPilot could not download its price catalog ({said}): the host its API server runs "
                               f"on has no catalog for this cloud and cannot fetch one; put the catalog in "
                               f"~/.sky/catalogs/v8 (under $SKY_RUNTIME_DIR when set) of that host, or let it reach "
                               f"raw.githubusercontent.com; tried again later")
        answer = None
    else:
        return None
    status = getattr(answer, "status_code", None)
    heard = _heard(status, answer.reason, answer.text) if isinstance(status, int) and status >= 400 else said
    mismatch = isinstance(exc, sky_errors.APIVersionMismatchError)
    if isinstance(status, int) and status == 400 and not mismatch:
        try:
            mismatch = answer.json().get("error") == "version_mismatch"
        except (ValueError, AttributeError):
            pass
    if mismatch:
        return http_refusal(400, heard, mismatch=True, what=what)
    if isinstance(exc, sky_errors.ApiServerAuthenticationError) or status == 401:
        return http_refusal(401, heard, what=what)
    if status == 429 or (status == 403 and not isinstance(exc, sky_errors.ApiServerConnectionError)):
        return http_refusal(status, heard, what=what)  # (a 403 to the health check is a proxy's: SkyPilot's is open)
    if isinstance(status, int) and 400 <= status < 500:
        return LaunchError(f"SkyPilot's API server, or a proxy in front of it, refused {what} ({heard}): check "
                           f"SKYPILOT_API_SERVER_ENDPOINT and that proxy")
    return LaunchError(f"SkyPilot's API server cannot be reached or failed {what} ({heard}): check that it runs and "
                       f"SKYPILOT_API_SERVER_ENDPOINT; tried again later")


def _health_answer() -> Any | None:
    """SkyPilot's answer to its last health check of the API server (``GET /api/health``): SkyPilot keeps it 5 s, so
    this is the answer its error was raised over, read again without asking (a new check once it has expired); None
    when there was none (no connection) or it cannot be read."""
    from sky.server import common as server_common

    try:
        with _unretried():
            return server_common.get_api_server_status_response(server_common.get_local_server_dial_url("127.0.0.1"))
    except Exception:  # another SkyPilot than this reads, or the check failed again: the error's own words are used
        return None


_ONE_SEND: contextvars.ContextVar[bool] = contextvars.ContextVar("skypilot_one_send", default=False)
"""While the launcher's call into SkyPilot runs (:func:`_unretried`): SkyPilot sends each request once."""


def _send_once_on_503() -> bool:
    """Make SkyPilot's requests (``rest.request``, through which every SDK call goes) sent once while
    :data:`_ONE_SEND` is set: a 503 raises SkyPilot's ``ServerTemporarilyUnavailableError`` at once. Elsewhere, and
    unset, SkyPilot retries a 503 for up to 600 s itself (``_retry_on_server_unavailable``), and the launcher's calls
    are made inside an engine tick: a server restarting, or a proxy with no upstream ready, held the tick — every
    job's monitoring, preemption and budget stops — 10 minutes per call. The engine's next tick (monitoring), the
    launch backoff and the wait for a launch that may have been sent (:data:`LAUNCH_SETTLE_SECONDS`) try again
    instead; and a launch answered 503 is no longer sent again by SkyPilot while the first send may have been taken.
    False when this SkyPilot has no such function (another version than this reads): nothing is changed."""
    from sky.server import rest

    if getattr(rest.request, "_spot_broker_once", False):
        return True
    retried = rest.request
    if not callable(getattr(rest, "request_without_retry", None)):
        return False

    def request(method, url, **kwargs):
        if _ONE_SEND.get():
            return rest.request_without_retry(method, url, **kwargs)
        return retried(method, url, **kwargs)

    request._spot_broker_once = True
    rest.request = request
    return True


@contextmanager
def _unretried() -> Iterator[None]:
    """SkyPilot's requests within, each sent once (:func:`_send_once_on_503`)."""
    _send_once_on_503()
    token = _ONE_SEND.set(True)
    try:
        yield
    finally:
        _ONE_SEND.reset(token)


def _sent_once(method: Callable) -> Callable:
    """A :class:`SdkClient` call whose requests SkyPilot sends once (:func:`_unretried`)."""

    @functools.wraps(method)
    def call(*args, **kwargs):
        with _unretried():
            return method(*args, **kwargs)

    return call


class SdkClient:
    """:class:`SkyClient` through the SkyPilot SDK: each call is a request to the API server, sent once: a 503 is an
    error at once, not SkyPilot's own retry for up to 600 s inside an engine tick (:func:`_send_once_on_503`).

    The SDK starts a local API server on first use unless ``SKYPILOT_API_SERVER_ENDPOINT``
    (or ``sky api login``) points at a shared one.
    """

    @_sent_once
    def plan(self, task: Any, cluster: str) -> None:
        import sky

        with _unless_unsent(cluster):
            request_id = sky.launch(task, cluster_name=cluster, dryrun=True)
        sky.get(request_id)

    @_sent_once
    def launch(self, task: Any, cluster: str, *, autostop_minutes: int) -> str:
        import sky

        with _unless_unsent(cluster):  # checked, and the task's files packed and uploaded, on this host before sending
            return str(sky.launch(task, cluster_name=cluster, idle_minutes_to_autostop=autostop_minutes, down=True))

    @_sent_once
    def launch_state(self, request_id: str) -> tuple[Launch, str]:
        import sky

        payloads = sky.api_status([request_id])
        if not payloads:
            return Launch.NONE, ""
        status, error = payloads[0].status, payloads[0].error
        if status in ("PENDING", "WAITING", "RUNNING"):
            return Launch.IN_FLIGHT, ""
        if status == "SUCCEEDED":
            return Launch.DONE, ""
        if status == "CANCELLED":
            return Launch.FAILED, "the launch request was cancelled"
        try:
            detail = json.loads(error) or {}
            message = detail.get("message") or detail.get("type") or ""
        except (TypeError, ValueError):
            message = str(error or "")
        if not message:
            # The server leaves ``error`` out of /api/status; the request's own result carries
            # SkyPilot's exception (a finished request answers at once).
            try:
                sky.get(request_id)
            except Exception as exc:
                return Launch.FAILED, launch_error_text(exc)
            else:
                message = status.lower()
        return Launch.FAILED, _launch_message(message)

    @_sent_once
    def launch_in_flight(self, cluster: str) -> bool:
        import sky

        return any(
            "launch" in (p.name or "") and p.status in ("PENDING", "WAITING", "RUNNING")
            and getattr(p, "cluster_name", cluster) in (cluster, None)  # an older server ignores the filter
            for p in sky.api_status(cluster_name=cluster)
        )

    @_sent_once
    def earlier_launch(self, cluster: str) -> str | None:
        import sky

        found = []
        for p in sky.api_status(cluster_name=cluster, all_status=True):
            if p.name != "sky.launch" or p.status not in ("PENDING", "WAITING", "RUNNING", "SUCCEEDED"):
                continue
            body = _launch_body(p)
            # by the request's own cluster: an older server ignores the filter and lists every request
            if body.get("dryrun") is not True and cluster in (getattr(p, "cluster_name", None), body.get("cluster_name")):
                found.append(p)
        return max(found, key=lambda p: p.created_at or 0).request_id if found else None

    @_sent_once
    def cancel_launch(self, cluster: str, request_id: str | None) -> None:
        import sky

        ids = [request_id] if request_id else [
            p.request_id for p in sky.api_status(cluster_name=cluster)
            if "launch" in (p.name or "") and p.status in ("PENDING", "WAITING", "RUNNING")
            and getattr(p, "cluster_name", None) == cluster  # never another cluster's (an older server's list)
        ]
        if ids:
            sky.api_cancel(ids, silent=True)

    @_sent_once
    def clusters(self, names: list[str] | None = None) -> list[Cluster]:
        import sky
        from sky.utils import common

        records = sky.get(sky.status(names, refresh=common.StatusRefreshMode.AUTO))
        out = []
        for r in records:
            handle = r["handle"] if isinstance(r, dict) else r.handle
            resources = getattr(handle, "launched_resources", None)
            status = r["status"] if isinstance(r, dict) else r.status
            name = r["name"] if isinstance(r, dict) else r.name
            out.append(Cluster(name, getattr(status, "value", str(status)), bool(getattr(resources, "use_spot", False))))
        return out

    @_sent_once
    def job_status(self, cluster: str) -> str | None:
        import sky

        statuses = sky.get(sky.job_status(cluster))
        if not statuses:
            return None
        latest = statuses[max(statuses, key=lambda k: -1 if k is None else k)]
        return getattr(latest, "value", None if latest is None else str(latest))

    @_sent_once
    def down(self, cluster: str) -> None:
        import sky

        sky.down(cluster)

    @_sent_once
    def logs(self, cluster: str) -> bytes:
        import io

        import sky

        buffer = io.StringIO()
        sky.tail_logs(cluster, None, follow=False, output_stream=buffer)
        return buffer.getvalue().encode()


def _launch_body(payload: Any) -> dict[str, Any]:
    """A listed request's body (a launch's ``dryrun`` and ``cluster_name``); ``{}`` where the server hides it: it
    shows a body to the user who sent it only. A hidden one counts as a real launch (adopting it costs an attempt
    taken as lost; launching beside it could run the attempt twice)."""
    try:
        body = json.loads(getattr(payload, "request_body", None) or "null")
    except (TypeError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


# --- start-up checks ----------------------------------------------------------------------------------

SKYPILOT_PIN = "0.14.1"
"""The SkyPilot version the ``skypilot`` extra pins (pyproject.toml): what an install hint names."""


def setup_warning_sentences(*, clouds: Sequence[str], kubernetes_contexts: Sequence[str],
                            kubernetes_installed: bool, clouds_without_catalog: Sequence[str],
                            enabled_clouds: Sequence[str] | None) -> list[str]:
    """What a broker starting with the SkyPilot launcher is told about its setting, each a sentence saying what to
    do; pure: the facts are given (:func:`setup_warnings` gathers them). Without these, each mistake showed only
    job by job, at launch.

    ``kubernetes_contexts``: the pools' ``kubernetes_context`` values; ``clouds``: the ``clouds`` setting;
    ``clouds_without_catalog``: those of ``clouds`` with no ``vms.csv`` anywhere in the price table's search path;
    ``enabled_clouds``: the clouds SkyPilot's last ``sky check`` found enabled (lower case), ``None`` when that is
    not known here (no check cached, or an API server elsewhere)."""
    out = []
    contexts = list(dict.fromkeys(kubernetes_contexts))
    if contexts and not kubernetes_installed:
        out.append(f"pools on Kubernetes ({', '.join(contexts)}) need SkyPilot's Kubernetes support, which is not "
                   f"installed (import kubernetes fails): every launch there is refused until you run "
                   f"pip install \"skypilot[kubernetes]=={SKYPILOT_PIN}\" in the broker's environment")
    for cloud in dict.fromkeys(clouds_without_catalog):
        out.append(f"clouds: {cloud} has no price catalog on this host ({_catalog_hint(cloud)}): jobs for {cloud} "
                   f"are refused (and any-cloud jobs placed elsewhere) until SkyPilot fetches it: run "
                   f"sky show-gpus --cloud {cloud} as the broker's user")
    if enabled_clouds is not None:
        enabled = {c.lower() for c in enabled_clouds}
        off = [c for c in dict.fromkeys(clouds) if c.lower() not in enabled]
        if off:
            out.append(f"clouds: {', '.join(off)} {'is' if len(off) == 1 else 'are'} not enabled in SkyPilot (its "
                       f"last sky check): jobs placed there are refused at launch; run sky check as the broker's "
                       f"user and give it credentials, or leave {'it' if len(off) == 1 else 'them'} out of clouds:")
    return out


def _catalog_hint(cloud: str) -> str:
    from pricing.loading import skypilot_catalog_dir

    return str(skypilot_catalog_dir() / cloud / "vms.csv")


def kubernetes_installed() -> bool:
    """Whether SkyPilot's Kubernetes support can be imported (``import kubernetes``), looked up without importing
    it."""
    import importlib.util

    try:
        return importlib.util.find_spec("kubernetes") is not None
    except (ImportError, ValueError):
        return False


def clouds_without_catalog(clouds: Sequence[str], home: Path | None = None) -> list[str]:
    """Those of ``clouds`` with no catalog the price table would read (SkyPilot's, under ``$SKY_RUNTIME_DIR`` when
    set, or the shipped snapshot): the same search :func:`pricing.loading.catalog_files` makes."""
    from pricing.loading import catalog_files

    return [c for c in dict.fromkeys(clouds) if not catalog_files(clouds=(c,), home=home)]


def cached_enabled_clouds(env: Mapping[str, str] | None = None) -> list[str] | None:
    """The clouds SkyPilot's last ``sky check`` found enabled for compute, read from its local state database
    (``$SKY_RUNTIME_DIR/.sky/state.db``, table ``config``: what ``sky.global_user_state.get_cached_enabled_clouds``
    reads), opened read-only: no network, no API server, no check run, nothing written. ``None`` when not known
    here: an API server elsewhere (``SKYPILOT_API_SERVER_ENDPOINT``, or ``api_server.endpoint`` in SkyPilot's
    config: its enabled clouds are on that server), no database, no check cached, or anything unreadable."""
    import sqlite3

    env = os.environ if env is None else env
    if (env.get("SKYPILOT_API_SERVER_ENDPOINT") or "").strip():
        return None
    runtime = env.get("SKY_RUNTIME_DIR")
    db = (Path(runtime).expanduser() if runtime else Path.home()) / ".sky" / "state.db"
    if not db.is_file():
        return None
    try:
        from sky import skypilot_config

        if skypilot_config.get_nested(("api_server", "endpoint"), None):
            return None
        key = f"enabled_clouds_{skypilot_config.get_active_workspace()}_compute"
        conn = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True, timeout=2)
        try:
            row = conn.execute("SELECT value FROM config WHERE key = ?", (key,)).fetchone()
        finally:
            conn.close()
        if row is None:
            return None
        names = json.loads(row[0])
        return [str(n).lower() for n in names] if isinstance(names, list) else None
    except Exception:  # an unreadable cache says nothing: the warning is a help, never a reason not to start
        log.debug("SkyPilot's cached enabled clouds not read", exc_info=True)
        return None


def setup_warnings(*, clouds: Sequence[str], kubernetes_contexts: Sequence[str]) -> list[str]:
    """:func:`setup_warning_sentences` for this host: the facts gathered offline and cheaply (a module looked up,
    catalog files looked at, SkyPilot's local cache read)."""
    return setup_warning_sentences(
        clouds=clouds, kubernetes_contexts=kubernetes_contexts,
        kubernetes_installed=kubernetes_installed() if kubernetes_contexts else True,
        clouds_without_catalog=clouds_without_catalog(clouds), enabled_clouds=cached_enabled_clouds())


# --- the launcher ----------------------------------------------------------------------------------


def sky_domain(env: Mapping[str, str], state_dir: Path, prefix: str = CLUSTER_PREFIX) -> str:
    """Whose clusters this launcher sees: one shared API server (``SKYPILOT_API_SERVER_ENDPOINT``) is
    one view for every broker pointed at it with the same cluster prefix; otherwise this broker's own
    SkyPilot state, named after its state directory (:func:`launchers.base.state_domain`). The default
    prefix keeps the domain it always had, so an existing deployment's attempts stay in view."""
    endpoint = (env.get("SKYPILOT_API_SERVER_ENDPOINT") or "").strip().rstrip("/")
    if endpoint:
        return f"skypilot:{endpoint}" + ("" if prefix == CLUSTER_PREFIX else f"#{prefix}")
    return state_domain("skypilot", state_dir)


class SkyPilotLauncher:
    """:class:`~launchers.base.Launcher` running each attempt on its own SkyPilot cluster."""

    name = "skypilot"
    capabilities = Capabilities(simulated=False, preemption_notice=False, follow_logs=False)

    def __init__(self, state_dir: str | Path, *, client: SkyClient | None = None,
                 autostop_minutes: int = DEFAULT_AUTOSTOP_MINUTES, prefix: str = CLUSTER_PREFIX):
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.client = client if client is not None else SdkClient()
        self.autostop_minutes = autostop_minutes
        self.prefix = prefix
        self.down_retry_seconds = DOWN_RETRY_SECONDS
        self.reclaim_wait_seconds = RECLAIM_WAIT_SECONDS
        self.init_wait_seconds = INIT_WAIT_SECONDS
        self.launch_settle_seconds = LAUNCH_SETTLE_SECONDS
        self.log_refresh_seconds = LOG_REFRESH_SECONDS
        self._unknown_jobs: set[str] = set()  # job states logged as unknown (once each)
        self._logs_fetched: dict[str, float] = {}  # attempt → when logs() last fetched its output (monotonic)
        self._swept_after = ""  # where the last sweep of state files stopped (next_round)
        self._unanswered: dict[str, str] = {}  # why SkyPilot last failed to answer each kind of call (logged once a cause)
        self.domain = sky_domain(os.environ, self.state_dir, prefix)

    def cluster(self, attempt_id: str) -> str:
        return cluster_name(attempt_id, self.prefix)

    def after_run_seconds(self, placement: Mapping[str, Any] | None = None) -> int:
        """What a cluster may be billed after its run ends when no broker tears it down: the idle
        minutes before autodown and :data:`AUTODOWN_MARGIN_SECONDS` — the same for every placement
        (a Kubernetes pool's pods autodown too). Placement keeps it of the budget
        (:func:`launchers.base.after_run_seconds`)."""
        return self.autostop_minutes * 60 + AUTODOWN_MARGIN_SECONDS

    def cluster_stop_at(self, stop_in_seconds: float | None, now: float) -> int | None:
        """When the cluster stops the attempt's run by itself (epoch seconds), so that the run, its grace
        period (already within ``stop_in_seconds``) and the billing after it all fit before the limit."""
        if stop_in_seconds is None:
            return None
        return int(now + stop_in_seconds) - self.after_run_seconds()

    # -- launch ---------------------------------------------------------------------------------

    def launch(self, request: LaunchRequest) -> None:
        """Plan, then start the attempt's cluster unless it was started before.

        Blocks for SkyPilot's dry run (seconds), not for provisioning. Raises
        :class:`LaunchError` when SkyPilot refuses the placement.
        """
        now = time.time()
        stop_at = self.cluster_stop_at(request.stop_in_seconds, now)
        config = attempt_config(request, stop_at=stop_at)
        name = self.cluster(request.attempt_id)
        pod = str(request.placement.get("cloud") or "").lower() in KUBERNETES_CLOUDS  # deleted with a notice too
        repo = GitWorkdir.of(config.get("workdir"))
        kept: dict[str, Any] = {"git_workdir": repo.at} if repo else {}  # named, credentials hidden, if its clone fails
        mounts = file_mounts_of(config)
        if mounts:  # named by the task's own destinations, if one cannot be synced
            kept["mounts"] = mounts
        with self._locked(request.attempt_id) as state:
            if state.get("request_id") or state.get("adopted") or state.get("phase"):
                return
            # a launch sent before (the broker died inside client.launch, or lost this file) is adopted, never
            # sent again: the request may be in flight, or may have made a cluster that ran the attempt and is
            # gone by now (autodown), which a second launch would run again
            try:
                adopted = self._adopt_sent(name, state)
            except Exception as exc:
                if state.get("sent_at") is not None or state.get("cluster") is not None:
                    # a launch of it may be in flight (no id came back, or the broker died inside the launch call after
                    # saving its intent): followed, tried again on this attempt's cluster name, never ended from here
                    # to be placed anew under another name beside a request that may still run
                    raise
                # nothing of this attempt was sent: refused with why, the job waits with the launch backoff. Raised
                # as SkyPilot's own error, the attempt stayed launching, billed, with no reason, while nothing ran
                raise api_refusal(exc, LISTING) or LaunchError(
                    f"SkyPilot could not tell whether this attempt was launched before ({type(exc).__name__}: "
                    f"{_one_line(exc)}): "
                    f"tried again later") from None
            if adopted:
                # the limit the cluster was launched with, when it is known, is the one its guard keeps
                state.setdefault("stop_at", stop_at)
                state.update(cluster=name, spot=bool(config["resources"].get("use_spot")), pod=pod,
                             grace_seconds=request.stop_grace_seconds, **kept)
                return
            if self._sent_lately(state):
                return  # sent a moment ago, its id lost on the way back: it may still show up, and is not sent twice
            if stop_at is not None and stop_at <= now:
                # the budget left cannot pay for the cluster's billing after its run: not launched
                self._path(request.attempt_id, ".log").write_text(
                    f"[spot-broker] not launched: the budget left pays for {int(request.stop_in_seconds or 0)} s "
                    f"on this placement, no more than {placed_on(request.placement)} may be billed after its run "
                    f"ends while no broker tears it down ({self.after_run_seconds()} s: autostop_minutes {self.autostop_minutes} "
                    f"idle, then {AUTODOWN_MARGIN_SECONDS} s to notice and terminate); raise the budget\n")
                state.update(cluster=name, phase=Phase.STOPPED.value, reason="budget", ended_at=now, down=True)
                return
            try:
                self.client.plan(build_task(config), name)
            except LaunchError:
                raise
            except NotSent as exc:
                raise unsent_refusal(exc, config) from None
            except Exception as exc:
                raise api_refusal(exc, "the dry run of the launch") or \
                    LaunchError(refusal(exc, config), permanent=never_satisfiable(exc), scope=refusal_scope(exc)) from None
            state.update(cluster=name, spot=bool(config["resources"].get("use_spot")), pod=pod, phase=None, stop_at=stop_at,
                         grace_seconds=request.stop_grace_seconds, **kept)
            self._save(request.attempt_id, state)  # the intent, before the request exists
            try:
                state["request_id"] = self.client.launch(build_task(config), name,
                                                         autostop_minutes=self.autostop_minutes)
            except NotSent as exc:
                # failed on this host before sending (a file changed since the dry run read it, the upload refused), or
                # the API server refused it (a 4xx: too large, a token or version refused): refused or tried again now,
                # never taken for a request that may show up — it never would, and the attempt, read gone then, was
                # launched again and again
                state.pop("sent_at", None)
                raise unsent_refusal(exc, config) from None
            except Exception as exc:
                # no id came back: the API server may have the request, or record it in a moment. Followed as a
                # launch sent (status: pending) until it shows up, or for launch_settle_seconds, when it was not
                # sent after all and the next launch sends it
                state["sent_at"] = time.time()
                log.warning("launch of %s sent, no request id came back (%s): not sent again for %d s while it may "
                            "still show up on the API server", name, _one_line(exc), self.launch_settle_seconds)
                return
            state.pop("sent_at", None)

    def _sent_lately(self, state: Mapping[str, Any]) -> bool:
        """Whether a launch whose id did not come back was sent less than :attr:`launch_settle_seconds` ago."""
        sent = state.get("sent_at")
        return sent is not None and time.time() - float(sent) < self.launch_settle_seconds

    def _adopt_sent(self, name: str, state: dict[str, Any], found: list | None = None) -> bool:
        """Whether SkyPilot has a launch of cluster ``name`` this state has no id of (sent before a crash inside
        ``client.launch``, or before this state file was lost): a launch request in flight or succeeded, or the
        cluster. Found, it is adopted into ``state``, with the request's id when known; a cluster with no such
        request is one whose request died (its API server restarted) or was collected: followed while it is up,
        lost while it is left ``INIT``. SkyPilot keeps finished requests for a day, and an API server that
        restarts forgets them: a launch found by neither then is taken as never sent (docs/deploy.md). ``found``: the
        cluster's listing, when the caller has it."""
        if found is None:
            found = self.client.clusters([name])  # first: it starts a local API server that is not running
        earlier = self.client.earlier_launch(name)
        if earlier is not None:
            state.update(request_id=earlier, adopted=True)
            return True
        if self.client.launch_in_flight(name):  # an older server's request, by its name only
            state["adopted"] = True
            return True
        if found:
            state.update(adopted=True, request_gone=True)
            return True
        return False

    # -- status ---------------------------------------------------------------------------------

    def observe(self, attempt_id: str, state: dict[str, Any], found: list | None = None) -> Observation:
        """Poll SkyPilot for the attempt (the launch request, the cluster, its job); ``found``: the cluster's
        listing, when the caller has just taken it. A request id the server answered for in the cluster's place
        is kept in ``state``."""
        name = self.cluster(attempt_id)
        if found is None:
            found = self.client.clusters([name])
        cluster = found[0] if found else None
        launch, error = Launch.NONE, ""
        if state.get("request_id"):
            launch, error = self.client.launch_state(state["request_id"])
            if launch is Launch.NONE:  # the server does not know it: the cluster's own requests say more, if any
                again = self.client.earlier_launch(name)
                if again is not None and again != state["request_id"]:
                    state["request_id"] = again
                    launch, error = self.client.launch_state(again)
                elif self.client.launch_in_flight(name):
                    launch = Launch.IN_FLIGHT
                if launch is Launch.NONE:
                    launch = Launch.FORGOTTEN
        elif state.get("adopted"):
            launch = Launch.IN_FLIGHT if self.client.launch_in_flight(name) else \
                Launch.FORGOTTEN if state.get("request_gone") else Launch.DONE
        job = None
        if cluster is not None and cluster.status in JOB_READABLE:
            job = self.client.job_status(name)
        elif cluster is not None and cluster.status == "INIT" and state.get("phase") == Phase.RUNNING.value:
            job = self._job_on_init(name)
        stop_at = state.get("stop_at")
        return Observation(launch=launch, cluster=cluster.status if cluster else None, job=job,
                           spot=cluster.spot if cluster else bool(state.get("spot")),
                           stop_reason=state.get("stop_reason"), launch_error=error, adopted=bool(state.get("adopted")),
                           limit_passed=stop_at is not None and time.time() >= stop_at,
                           init_seconds=time.time() - float(state.get("init_seen_at") or time.time()),
                           init_wait_seconds=self.init_wait_seconds, git_workdir=state.get("git_workdir", ""),
                           mounts=tuple((str(d), str(s)) for d, s in state.get("mounts") or ()))

    def _job_on_init(self, name: str) -> str | None:
        """The job of a cluster ``INIT`` while its job ran: SkyPilot re-runs its health check first (the cluster
        may be UP again), else refuses (``ClusterNotUpError``: unreadable, None). Other errors propagate."""
        try:
            return self.client.job_status(name)
        except Exception as exc:
            if type(exc).__name__ == "ClusterNotUpError":
                return None
            raise

    def status(self, attempt_id: str) -> AttemptStatus:
        """The attempt's phase. Never raises: unknown → ``GONE``; SkyPilot unreachable → the last phase.

        When the attempt has ended, its logs are kept and its cluster torn down.
        """
        with self._locked(attempt_id) as state:
            previous = Phase(state["phase"]) if state.get("phase") else None
            if previous is not None and previous.is_final:
                return AttemptStatus(previous, exit_code=state.get("exit_code"), signal=state.get("signal"),
                                     reason=state.get("reason", ""), step=state.get("step"),
                                     ended_at=state.get("ended_at"), zone_to_blame=state.get("zone_to_blame", True))
            try:
                found = None
                if not (state.get("request_id") or state.get("adopted") or state.get("phase")):
                    # no request id kept: the broker died inside client.launch (its intent saved), or this state
                    # file was lost, or it never launched. A launch SkyPilot has is followed from here; an
                    # attempt that read gone would be launched again, and billed from then
                    name = self.cluster(attempt_id)
                    found = self.client.clusters([name])
                    if not self._adopt_sent(name, state, found) and self._sent_lately(state) \
                            and not state.get("stop_reason"):  # a stopped one's late request is cancelled or swept
                        return AttemptStatus(Phase.PENDING, reason="its launch was sent and no request id came back: "
                                                                   "waiting for the request to show on SkyPilot's API server")
                obs = self.observe(attempt_id, state, found)  # one listing of the cluster for both
            except Exception as exc:  # API server down or refusing, network: report what was known, never gone
                said = self._unreachable(exc, LISTING)
                return AttemptStatus(previous or Phase.PENDING, reason=said, unseen=True)
            if self._unanswered.pop(LISTING, None) is not None:
                log.info("SkyPilot's API server answers the launcher again")
            if obs.job is not None and obs.job not in KNOWN_JOBS and obs.job not in self._unknown_jobs:
                self._unknown_jobs.add(obs.job)
                log.warning("SkyPilot gave a job status the launcher does not know, %r (cluster %s): the attempt "
                            "keeps its last phase while it lasts", obs.job, self.cluster(attempt_id))
            result = next_status(previous, obs)
            if result.phase is Phase.GONE:
                return result
            if result.phase is previous and result.step is None:
                result = replace(result, step=state.get("step"))  # kept, as it was (the step is the launcher's memory)
            if obs.cluster == "INIT" and (result.phase is Phase.RUNNING or (
                    result.phase is Phase.PENDING and obs.launch is Launch.DONE)):
                state.setdefault("init_seen_at", time.time())  # the wait for a failed health check starts
            else:
                state.pop("init_seen_at", None)
            if state.get("stop_reason") and obs.cluster is not None and (
                    not state.get("down") or time.time() - float(state.get("down_at") or 0) >= self.down_retry_seconds):
                # stopped, yet its cluster outlived the teardown: the API server could not be reached to ask for
                # it, or the request failed there. Nothing else would ask again (stop() is called once, and the
                # sweep keeps the cluster of an attempt still being stopped)
                if not state.get("down"):  # stop() could not fetch them either: the teardown takes them
                    self._keep_logs(attempt_id, state)
                self._down(attempt_id, state)
            if result.phase is Phase.FAILED and (obs.spot or state.get("pod")) and obs.cluster in ("UP", "INIT") \
                    and not obs.stop_reason and result.step not in LAUNCH_STEPS:
                # AUTOSTOPPING: up idle autostop_minutes since, so not reclaimed; a workdir or file_mounts that could
                # not be synced is SkyPilot's launch failing before any job, not a job that may have heeded a
                # reclaim's notice
                result = self._unless_reclaimed(attempt_id, state, result)
            if result.phase.is_final and not state.get("down"):
                self._keep_logs(attempt_id, state)
                self._down(attempt_id, state)
                if result.phase is Phase.FAILED and result.step in LAUNCH_STEPS:
                    # no job, so no log of its own: what `broker logs` shows, and what the diagnosis reads
                    with open(self._path(attempt_id, ".log"), "a") as kept:
                        kept.write(f"[spot-broker] the job was not started: {result.reason}\n")
            if result.phase is Phase.FAILED and result.exit_code is None:
                result = self._with_exit_code(attempt_id, result)
            if result.phase in (Phase.SUCCEEDED, Phase.FAILED, Phase.STOPPED) and state.get("stop_at") is not None:
                result = self._at_budget(attempt_id, state, result)
            state.update(phase=result.phase.value, exit_code=result.exit_code, signal=result.signal,
                         reason=result.reason, step=result.step, ended_at=result.ended_at)
            if not result.zone_to_blame:
                state["zone_to_blame"] = False
            return result

    def _unreachable(self, exc: BaseException, what: str) -> str:
        """Why SkyPilot's API server did not answer ``what`` (refused it, or could not be reached), as a sentence;
        logged once per new cause, not at every tick while it lasts."""
        refused = api_refusal(exc, what)
        said = str(refused) if refused is not None else f"SkyPilot unreachable: {_one_line(exc)}"
        if said != self._unanswered.get(what):
            log.warning("%s (attempts keep their last phase until it answers; stopped ones' clusters are torn down then)", said)
            self._unanswered[what] = said
        return said

    # -- stop -----------------------------------------------------------------------------------

    def stop(self, attempt_id: str, *, grace_seconds: float, reason: str = "stopped") -> None:
        """Cancel the attempt's launch if it is still in flight, and tear its cluster down. Does not wait;
        idempotent; an unknown attempt is ignored.

        The cancel comes first: SkyPilot's teardown cancels a launch only once the cluster has a record,
        and a launch request still queued on the API server has none — it would make the cluster after
        the teardown. SkyPilot gives the job no notice before the VMs go, so ``grace_seconds`` is not
        used; jobs rely on their periodic checkpoints.
        """
        with self._locked(attempt_id) as state:
            if not state:  # no file of this attempt: a cluster SkyPilot has under its name is still torn down
                try:
                    if not self.client.clusters([self.cluster(attempt_id)]):
                        return
                except Exception as exc:  # API server down or refusing: the stop is kept, and status() or the
                    # sweep tears the cluster down once it answers (a stopped attempt's cluster that outlived it)
                    self._unreachable(exc, LISTING)
                    state["stop_reason"] = reason
                    return
            state.setdefault("stop_reason", reason)
            if not state.get("down"):
                self._cancel_launch(attempt_id, state)
                self._keep_logs(attempt_id, state)
                self._down(attempt_id, state)

    # -- logs -----------------------------------------------------------------------------------

    def logs(self, attempt_id: str, *, offset: int = 0, limit: int = 1 << 20) -> tuple[bytes, int]:
        """The job's output from ``offset``: from the kept copy, fetched again from SkyPilot while the cluster lives
        when the reader asks past its end and the copy is older than :attr:`log_refresh_seconds`."""
        kept = self._path(attempt_id, ".log")
        if offset + limit > (kept.stat().st_size if kept.exists() else 0):
            with self._locked(attempt_id) as state:
                fetched = time.monotonic() - self._logs_fetched.get(attempt_id, -math.inf)
                if state and not state.get("down") and not 0 <= fetched < self.log_refresh_seconds:
                    self._keep_logs(attempt_id, state)
                    self._logs_fetched[attempt_id] = time.monotonic()
        data = kept.read_bytes() if kept.exists() else b""
        chunk = data[offset: offset + limit]
        return chunk, offset + len(chunk)

    # -- sweep ----------------------------------------------------------------------------------

    def sweep(self, known_attempt_ids: Iterable[str] | Callable[[], Iterable[str]]) -> list[str]:
        """Tear down this deployment's clusters whose attempt the broker no longer runs; return their names.

        Only names this launcher's prefix makes from an attempt id (:func:`is_own_cluster`) are touched: the
        same SkyPilot user sees every cluster of another deployment (another prefix) and a person's own.
        ``known_attempt_ids`` may be a function reading them: it is called after the clusters are listed, so a
        cluster another broker launched while the sweep ran is kept (its attempt is recorded before its launch,
        so a read after the listing sees it; a read before it did not, and the sweep tore the new cluster down)."""
        try:
            listed = [c.name for c in self.client.clusters() if is_own_cluster(c.name, self.prefix)]
        except Exception as exc:  # API server down or refusing: swept on a later round, once it answers
            self._unreachable(exc, SWEEP_LISTING)
            return []
        self._unanswered.pop(SWEEP_LISTING, None)
        known = known_attempt_ids() if callable(known_attempt_ids) else known_attempt_ids
        keep = {self.cluster(a) for a in known}
        stale = sorted(name for name in listed if name not in keep)
        for name in stale:
            self.client.down(name)
        return stale

    # -- state files nothing needs any more ---------------------------------------------------------

    def attempt_files(self) -> list[str]:
        """The attempts that have files in the state directory (hidden names are the launcher's own: ``.domain``)."""
        found = set()
        try:
            names = [e.name for e in os.scandir(self.state_dir) if not e.name.startswith(".")]
        except FileNotFoundError:
            return []
        for name in names:
            suffix = next((x for x in STATE_SUFFIXES if name.endswith(x)), None)
            if suffix is not None and len(name) > len(suffix):
                found.add(name[: -len(suffix)])
        return sorted(found)

    def sweep_attempt_files(self, keep: Keep, *, limit: int) -> list[str]:
        """Remove the state files (``.json``, ``.lock``, the fetched ``.log``) of up to ``limit`` attempts (the next
        ones after the last sweep's) that ``keep`` does not keep — asked after the listing — each under the
        attempt's lock: an attempt a call of this launcher in any process is working on (its lock held) is left to
        the next sweep. Its cluster needs none of them: :meth:`sweep` tears a cluster down by its name. Returns the
        attempts whose files this call removed (not one another broker on this state directory removed first),
        logged when there are any."""
        listed, self._swept_after = next_round(self.attempt_files(), self._swept_after, limit)
        if not listed:
            return []
        kept = keep(listed)
        removed = [a for a in listed if a not in kept and self._remove_state(a)]
        if removed:
            log.info("removed the SkyPilot state files of %d attempt(s) whose job the broker no longer holds: %s",
                     len(removed), ", ".join(removed))
        return removed

    def _remove_state(self, attempt_id: str) -> bool:
        """Remove the attempt's files, its lock last, while holding that lock; whether this call removed any."""
        lock = self._path(attempt_id, ".lock")
        others = [self._path(attempt_id, x) for x in STATE_SUFFIXES if x != ".lock"]
        found = True
        try:
            fd = os.open(lock, os.O_RDWR)  # not made again when another broker on this state directory removed it
        except FileNotFoundError:
            found = False
        except OSError:  # not the broker's to open: left as it is
            return False
        if not found:
            if not any(p.exists() for p in others):
                return False  # removed meanwhile, by another broker on this state directory
            try:
                fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError:
                return False
        with os.fdopen(fd, "r+") as guard:
            try:
                fcntl.flock(guard, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False  # a call of the launcher is working on it: left to the next sweep
            try:
                if os.fstat(fd).st_ino != os.stat(lock).st_ino:
                    return False  # removed, and made again by a call since it was opened: left to the next sweep
            except FileNotFoundError:
                return False  # removed meanwhile, by another broker on this state directory
            removed = found
            for path in others:
                try:
                    path.unlink()
                    removed = True
                except FileNotFoundError:
                    pass
            lock.unlink(missing_ok=True)
        self._logs_fetched.pop(attempt_id, None)
        return removed

    # -- state ----------------------------------------------------------------------------------

    def _path(self, attempt_id: str, suffix: str) -> Path:
        if not attempt_id or "/" in attempt_id or attempt_id.startswith("."):
            raise ValueError(f"bad attempt id {attempt_id!r}")
        return self.state_dir / f"{attempt_id}{suffix}"

    @contextmanager
    def _locked(self, attempt_id: str) -> Iterator[dict[str, Any]]:
        """The attempt's state, under a lock across processes; saved on exit if changed."""
        path = self._path(attempt_id, ".json")
        with open(self._path(attempt_id, ".lock"), "a+") as guard:
            fcntl.flock(guard, fcntl.LOCK_EX)
            state = json.loads(path.read_text()) if path.exists() else {}
            before = dict(state)
            try:
                yield state
            finally:
                if state != before:
                    self._save(attempt_id, state)

    def _save(self, attempt_id: str, state: Mapping[str, Any]) -> None:
        path = self._path(attempt_id, ".json")
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(state, sort_keys=True))
        os.replace(tmp, path)

    def _keep_logs(self, attempt_id: str, state: Mapping[str, Any]) -> None:
        try:
            data = self.client.logs(self.cluster(attempt_id))
        except Exception:  # no cluster yet, or gone: keep what was fetched before
            return
        if data:
            self._path(attempt_id, ".log").write_bytes(data)

    def _with_exit_code(self, attempt_id: str, result: AttemptStatus) -> AttemptStatus:
        """``result`` with the exit status the wrapped run (or guarded setup, for a ``FAILED_SETUP``) reported
        in its kept logs (bash's 128 + N is a kill by signal N, as the local launcher reports it)."""
        kept = self._path(attempt_id, ".log")
        code = exit_code_in(kept.read_bytes(), result.step or "run") if kept.exists() else None
        if code is None:
            return result
        return replace(result, exit_code=code, signal=code - 128 if code > 128 else None)

    def _unless_reclaimed(self, attempt_id: str, state: dict[str, Any], result: AttemptStatus) -> AttemptStatus:
        """A spot job that failed on a cluster still up is a failure only once the cluster has stayed up for
        :attr:`reclaim_wait_seconds`; until then it reads as still running. The cloud warns of a spot reclaim
        ahead (AWS two minutes, GCP 30 s) while the VMs still run, as the broker's hook on a Kubernetes pod
        being deleted does (a node drained, an eviction), and a job that heeds the warning — the checkpoint
        library saves and exits 143 — ends ``FAILED`` before its cluster goes: taken for a failure, it would
        end the job instead of resuming it. So a Kubernetes attempt's failure waits the same. A cluster gone (or no longer up) within the wait
        is a preemption (:func:`~launchers.skypilot_status.next_status`). A stop at the budget is not waited for,
        nor a failure found on a cluster already ``AUTOSTOPPING``: it stayed up idle since the job ended, so it was
        not reclaimed, and autodown taking it within the wait would read as a preemption."""
        self._keep_logs(attempt_id, state)
        kept = self._path(attempt_id, ".log")
        if kept.exists() and budget_stop_in(kept.read_bytes()) is not None:
            return result
        seen = float(state.setdefault("failed_seen_at", time.time()))
        if time.time() - seen >= self.reclaim_wait_seconds:
            return result
        return AttemptStatus(Phase.RUNNING, step=result.step,
                             reason="its job ended failed on a spot cluster still up: waiting to see whether the "
                                    "cloud reclaims it (a job that saves on the cloud's notice ends before its VMs)")

    def _at_budget(self, attempt_id: str, state: Mapping[str, Any], result: AttemptStatus) -> AttemptStatus:
        """``result`` as a budget stop when the cluster's guard stopped the setup or the run (its line in the
        kept logs; SkyPilot says ``FAILED_SETUP`` or ``FAILED``), ending when the cluster's billing did: at
        teardown — now, or autodown's at the latest."""
        kept = self._path(attempt_id, ".log")
        logs = kept.read_bytes() if kept.exists() else b""
        stopped = budget_stop_in(logs)
        if stopped is None and not (result.phase is Phase.STOPPED and result.reason == "budget"):
            return result
        if stopped is None:  # the cluster is gone past its limit (autodown, its logs with it)
            stopped = int(state["stop_at"]) + int(state.get("grace_seconds") or 0)
        ended = min(time.time(), stopped + self.after_run_seconds())
        return replace(result, phase=Phase.STOPPED, reason="budget", step=budget_stopped_step(logs) or "run",
                       ended_at=ended)

    def _cancel_launch(self, attempt_id: str, state: Mapping[str, Any]) -> None:
        """Abort the attempt's launch request while it is in flight (best effort: the teardown follows,
        and the sweep takes a cluster a launch made after all)."""
        name = self.cluster(attempt_id)
        try:
            if state.get("request_id"):
                if self.client.launch_state(state["request_id"])[0] is Launch.IN_FLIGHT:
                    self.client.cancel_launch(name, state["request_id"])
            elif self.client.launch_in_flight(name):  # adopted, or the broker died inside ``client.launch``
                self.client.cancel_launch(name, None)  # (its intent saved, no request id): found by the cluster
        except Exception:  # API server unreachable: the teardown and the sweep still follow
            return

    def _down(self, attempt_id: str, state: dict[str, Any]) -> None:
        try:
            self.client.down(self.cluster(attempt_id))
        except Exception:  # the sweep retries
            return
        state["down"] = True
        state["down_at"] = time.time()
