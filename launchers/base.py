"""The ``Launcher`` port: run one attempt of a job somewhere, report on it, stop it.

A launcher knows nothing of jobs, budgets or policies: the engine decides
*where* (a placement) and asks a launcher to make it so. Two implementations:
:mod:`launchers.local` (real processes on this host: on-prem pools and
simulated cloud zones) and :mod:`launchers.skypilot` (clouds and Kubernetes).

Contracts every implementation keeps (each launcher's own tests in tests/launchers/ check them; there is no
suite shared by every launcher):

* ``launch`` is **idempotent per attempt id**: asked twice — by a broker that
  crashed and restarted, or by two brokers — it runs the attempt at most once.
* ``status`` never raises for an attempt it does not know: it answers
  :attr:`Phase.GONE`.
* ``stop`` is idempotent and does not block for the grace period; an attempt
  already gone is left alone silently.

Every launcher stops an attempt by itself at :attr:`LaunchRequest.stop_in_seconds`
(reason ``budget``), so a job's budget holds while every broker is down. One that
can move that limit on a running attempt also has ``set_stop_in(attempt_id,
seconds) -> bool`` (True: moved); the local launcher has it, SkyPilot's does not
(a cluster's limit is fixed at launch), and the router answers for the attempt's own.

An attempt may be billed after its run ends: a SkyPilot cluster idles ``autostop_minutes`` before
autodown and takes minutes to terminate when no broker tears it down, and its launcher stops the run
that much before the budget runs out (a budget that cannot pay for it launches no cluster). A
launcher that bills anything after the run says how long with ``after_run_seconds(placement) -> int``
(:func:`after_run_seconds` reads it, 0 for a launcher without it), so that placement and the
admission quote keep it out of the budget too instead of placing a job that would end at once.

A launcher keeps files of its own on this host for each attempt (the local launcher's run folder, with the
attempt's log; SkyPilot's state and fetched log), needed as long as the broker holds the job: ``broker logs`` reads
an old attempt's log, a failed job may be resumed. One that keeps such files has
``sweep_attempt_files(keep, *, limit) -> list[str]`` (:func:`sweep_attempt_files` calls it; nothing for one
without): it lists up to ``limit`` attempts it holds files of, asks ``keep(ids)`` — the caller's answer, from
the store, of which must stay — after the listing, and removes the others' files, never those a process of this
host still holds; it returns the ids whose files this call removed. Bounded and idempotent: the next call goes on
from where one stopped (:func:`next_round`); files another process on the same data dir removed first are not
counted again.
"""

from __future__ import annotations

import bisect
import os
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

BOOT_CLOCK = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)


def elapsed() -> float:
    """Seconds on a clock that a step of the wall clock never moves and that counts the time a suspended host
    slept (``CLOCK_BOOTTIME`` on Linux; ``time.monotonic`` elsewhere): billing and budget limits are timed on it,
    as a cloud keeps billing a cluster while the broker's host sleeps, which ``CLOCK_MONOTONIC`` would not count."""
    return time.clock_gettime(BOOT_CLOCK)


@dataclass(frozen=True)
class RunAs:
    """The Unix user an attempt on a pool of this host runs as (``pools[].run_as``), and the job's own
    folders the launcher gives that user besides the attempt's copies (the job's checkpoint folder when the
    broker keeps it on this host)."""

    user: str
    folders: tuple[str, ...] = ()


@dataclass(frozen=True)
class LaunchRequest:
    """Everything a launcher needs to run one attempt.

    ``task`` is the user's SkyPilot task as submitted (without the ``broker:``
    section). ``placement`` is the engine's choice (tier, cloud, region, zone,
    instance_type, location, price_per_hour, simulated). ``envs`` are the
    broker's variables only (``BROKER_JOB_ID``, ``BROKER_ATTEMPT``, ``BROKER_CHECKPOINT_URI``,
    ``BROKER_JOB_TOKEN``, ...: ``broker.engine.launch.broker_envs``): the engine does **not** merge the
    task's own ``envs`` or ``secrets`` into them. Each launcher must give the job's processes, each over
    the one before: the task's ``envs`` (``task["envs"]``), then its ``secrets`` (``task["secrets"]``, over
    ``envs`` as SkyPilot sets them), then the variables SkyPilot gives a node (``SKYPILOT_NODE_RANK``,
    ``SKYPILOT_NUM_NODES``, ...), then these ``envs``. The local runner does the merge itself
    (``launchers.local_runner.Runner.env``); the SkyPilot launcher gives SkyPilot the task's ``envs`` with
    these over them and the task's ``secrets`` with the broker's credentials (``BROKER_JOB_TOKEN``) moved
    into them, which SkyPilot sets over ``envs`` and redacts, and SkyPilot adds its own variables on the node
    (``launchers.skypilot_task.task_config``). Submit refuses a task whose ``envs`` or ``secrets`` name one
    of the broker's variables (``broker.spec.RESERVED_ENVS``), so the two orders give the job the same.
    ``task["secrets"]`` arrives unsealed: the store keeps their values sealed and the engine opens them for
    this request only (``broker.sealing.open_task``). A launcher keeps them out of what it logs or shows, and
    what it writes of them readable by the broker's user only (the local launcher's ``request.json``, 0600).
    ``slots`` are the GPU (or CPU-job) slots of an on-prem pool the attempt holds.
    ``run_as``: the user an attempt on a pool of this host runs as; ``None``: the broker's own.
    """

    attempt_id: str
    job_id: str
    attempt: int
    task: dict[str, Any]
    placement: dict[str, Any]
    envs: dict[str, str] = field(default_factory=dict)
    slots: tuple[int, ...] = ()
    stop_grace_seconds: float = 30.0
    #: seconds from now after which the launcher stops the attempt itself (reason ``budget``) if no
    #: broker has: the job's budget, kept while every broker is down. ``None``: no limit.
    stop_in_seconds: float | None = None
    run_as: RunAs | None = None


class Phase(str, Enum):
    """Where an attempt stands, as the launcher sees it."""

    PENDING = "pending"  # accepted, not running yet (provisioning, setup starting)
    RUNNING = "running"
    SUCCEEDED = "succeeded"  # the run command exited 0
    FAILED = "failed"  # the run (or setup) exited non-zero
    PREEMPTED = "preempted"  # the capacity was taken back (spot), with or without notice
    LOST = "lost"  # the node or process vanished without recording an exit
    STOPPED = "stopped"  # stopped on the broker's request
    GONE = "gone"  # the launcher has no record of this attempt

    @property
    def is_final(self) -> bool:
        return self not in (Phase.PENDING, Phase.RUNNING)


@dataclass(frozen=True)
class AttemptStatus:
    phase: Phase
    exit_code: int | None = None
    signal: int | None = None
    reason: str = ""
    started_at: float | None = None
    ended_at: float | None = None
    step: str | None = None  # "setup" or "run": which command was running at the end ("workdir": its git clone)
    # False for an end its zone did not cause, or not known to: the engine then keeps the zone open to the job
    # (a preempted or lost spot attempt otherwise closes its zone to the job for a cooldown)
    zone_to_blame: bool = True
    # True when the launcher could not look at the attempt this time (its API server refused or did not answer):
    # ``phase`` is then the last one seen, and ``reason`` says why it could not look. The engine shows that on the
    # job's reason while it lasts, so a running job whose launcher cannot see it does not read as fine
    unseen: bool = False


@dataclass(frozen=True)
class Capabilities:
    """Optional abilities, as data rather than ``NotImplementedError``.

    Only ``simulated`` is read: the broker allows fault injection (``broker fault``) only with a launcher that
    has it (``BrokerService.inject_fault``). ``preemption_notice`` and ``follow_logs`` are informational: set by
    the launchers, read by nothing (``broker logs -f`` follows every launcher's attempts through ``logs``)."""

    simulated: bool = False  # processes on this host standing in for cloud capacity
    preemption_notice: bool = True  # SIGTERM before the end
    follow_logs: bool = True


@runtime_checkable
class Launcher(Protocol):
    """Runs attempts. ``domain`` (optional, default ``""``) names the view of attempts this launcher
    has: two launchers with the same domain see the same attempts (the local launcher: one host and
    data directory; SkyPilot: one API server). A launcher that combines views (the router) gives
    ``domains`` (all of them) and ``domain_for(placement)`` (the one an attempt is launched in). The
    engine monitors only attempts launched in its own domains while the engine that launched them is
    alive (:func:`domains_of`, :func:`domain_for`)."""

    name: str
    capabilities: Capabilities

    def launch(self, request: LaunchRequest) -> None:
        """Start the attempt unless it was started before. Idempotent; returns quickly.

        Raises :class:`LaunchError` with a sentence when the placement cannot be
        satisfied (the engine requeues the job and records the reason).
        """

    def status(self, attempt_id: str) -> AttemptStatus:
        """Current phase of the attempt. Never raises for unknown ids (→ ``GONE``)."""

    def stop(self, attempt_id: str, *, grace_seconds: float, reason: str = "stopped") -> None:
        """Ask the attempt to end: SIGTERM (the preemption-notice path), SIGKILL after
        ``grace_seconds``. Does not wait. Idempotent; an attempt already gone is ignored."""

    def logs(self, attempt_id: str, *, offset: int = 0, limit: int = 1 << 20) -> tuple[bytes, int]:
        """Up to ``limit`` bytes of output from ``offset``; returns (bytes, next offset)."""


def domains_of(launcher: Any) -> frozenset[str]:
    """Every view of attempts ``launcher`` has: its ``domains`` (a router: its host's and its cloud's),
    else its one ``domain``; empty for a launcher that names none."""
    given = getattr(launcher, "domains", None)
    if given is None:
        given = (getattr(launcher, "domain", "") or "",)
    return frozenset(d for d in given if d)


def domain_for(launcher: Any, placement: dict[str, Any]) -> str:
    """The view an attempt with ``placement`` is launched in (what ``Attempt.launched_in`` records)."""
    pick = getattr(launcher, "domain_for", None)
    return pick(placement) if pick is not None else (getattr(launcher, "domain", "") or "")


def after_run_seconds(launcher: Any, placement: dict[str, Any]) -> int:
    """Seconds an attempt with ``placement`` may be billed after its run ends, as ``launcher`` says (a
    router: the launcher the placement goes to); 0 for one that says nothing (nothing is billed after
    a process on this host ends)."""
    ask = getattr(launcher, "after_run_seconds", None)
    return int(ask(placement)) if ask is not None else 0


def live_attempts(launcher: Any) -> list[str]:
    """The attempts ``launcher`` runs on this host that may still be running (its ``live_attempts``; a router: its
    ``local`` launcher's); none for a launcher that cannot say. A cloud launcher's clusters of attempts the broker
    no longer runs go by its ``sweep`` instead."""
    ask = getattr(launcher, "live_attempts", None)
    if ask is not None:
        return list(ask())
    local = getattr(launcher, "local", None)
    return live_attempts(local) if local is not None and local is not launcher else []


Keep = Callable[[list[str]], set[str]]
"""What :func:`sweep_attempt_files` asks: of the attempt ids given, those whose files must stay."""


def sweep_attempt_files(launcher: Any, keep: Keep, *, limit: int) -> list[str]:
    """Remove the files ``launcher`` keeps on this host for attempts ``keep`` does not keep (its
    ``sweep_attempt_files``, see the module's docstring); the ids removed, none for a launcher that keeps none."""
    sweep = getattr(launcher, "sweep_attempt_files", None)
    return list(sweep(keep, limit=limit)) if sweep is not None else []


def next_round(names: Sequence[str], after: str, limit: int) -> tuple[list[str], str]:
    """Up to ``limit`` of ``names``, taken in order from just after ``after`` and round to the start: what one
    bounded sweep looks at; and the ``after`` for the next one (``""`` when this one took them all), so that
    successive sweeps go through every name, however many there are.

    >>> next_round(["a", "b", "c", "d"], "", 3)
    (['a', 'b', 'c'], 'c')
    >>> next_round(["a", "b", "c", "d"], "c", 3)
    (['d', 'a', 'b'], 'b')
    """
    ordered = sorted(names)
    if len(ordered) <= limit:
        return ordered, ""
    start = bisect.bisect_right(ordered, after)
    taken = (ordered[start:] + ordered[:start])[:limit]
    return taken, taken[-1]


def state_domain(kind: str, state_dir: Path) -> str:
    """A launcher domain tied to the directory that holds its state: ``<kind>#<id>``, where the id is
    made once and kept in ``<dir>/.domain`` — every process using that directory shares it, a restart
    (even under a new host name, or with the directory mounted elsewhere) keeps it, another host's
    directory at the same path does not."""
    path = Path(state_dir) / ".domain"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w") as fh:
            fh.write(uuid.uuid4().hex[:12])
            fh.flush()
            os.fsync(fh.fileno())
    for _ in range(50):  # another process may be writing it this instant
        made = path.read_text().strip()
        if made:
            return f"{kind}#{made}"
        time.sleep(0.01)
    raise OSError(f"{path} is empty: delete it and start again")


class LaunchError(Exception):
    """The launcher cannot run this placement; the message is a sentence for the user.

    ``permanent``: the task itself cannot be run (no command, a config SkyPilot rejects), so
    trying again elsewhere cannot help and the job fails; otherwise (no capacity, no cloud access
    yet) the job goes back to the queue to be placed again. ``scope``: what the refusal rules out for a while,
    so that the job is placed elsewhere meanwhile rather than refused at the same place again and again —
    ``"zone"`` (no capacity there now), ``"cloud"`` (the broker cannot use that cloud: no access, or SkyPilot lacks
    its dependencies), or ``None`` (nothing in particular)."""

    def __init__(self, message: str, *, permanent: bool = False, scope: str | None = None):
        super().__init__(message)
        self.permanent = permanent
        self.scope = scope
