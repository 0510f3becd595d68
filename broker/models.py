"""The broker's records: a job, its attempts, and the events that moved it.

Plain dataclasses that round-trip through ``to_dict``/``from_dict`` (JSON-safe:
money as integer micro-dollars, times as float epoch seconds). Stores keep
these dicts; the API renders public views of them and never a raw row.

Brokers of two versions may share one store (a rolling upgrade). A job or an
attempt keeps the fields a newer version stored in ``extra`` and writes them
back unchanged; a state it does not know reads as a
:class:`~broker.lifecycle.ForeignState`, and such a record is not written back
(docs/architecture.md, "Brokers of different versions").
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from functools import cache, cached_property
from typing import Any

from broker.lifecycle import AttemptState, ForeignState, JobEvent, JobState, attempt_state, is_foreign, job_state


def _known(cls, d: dict[str, Any]) -> dict[str, Any]:
    """The stored record's fields this version knows: a field added by a newer broker sharing the store
    (during a rolling upgrade) is left out rather than failing the read."""
    names = _stored_names(cls)
    return {k: v for k, v in d.items() if k in names}


DEADLINE_PIN = "deadline"
"""``Job.pinned_by`` of a job the engine moved off spot to meet its deadline (its policy's safety net), held there
(``force_tier``) as a user's pin holds a job, and taken back the same way (``broker ondemand --off``)."""

EXTRA = "extra"
"""The field of a :class:`Job` and an :class:`Attempt` that holds what a newer broker stored and this version
does not know. It is never stored under its own name: its entries are written back beside the known fields."""


@cache
def _stored_names(cls) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls)) - {EXTRA}


def _split(cls, d: dict[str, Any]) -> dict[str, Any]:
    """The stored record's fields this version knows, with the others under ``extra``, as they were read: a
    field a newer broker added (a rolling upgrade runs both at once) survives this version's read-modify-write
    instead of being dropped from the record it writes back."""
    names = _stored_names(cls)
    known = {k: v for k, v in d.items() if k in names}
    known[EXTRA] = {k: v for k, v in d.items() if k not in names}
    return known


def _with_extra(d: dict[str, Any]) -> dict[str, Any]:
    """``to_dict``'s output: the known fields, then the unknown ones kept from the read (never over a known one)."""
    extra = d.pop(EXTRA)
    d.update((k, v) for k, v in extra.items() if k not in d)
    return d


@dataclass
class Event:
    """One state change (or notable fact) in a job's life, kept forever."""

    job_id: str
    time: float
    event: str
    from_state: str | None
    to_state: str | None
    reason: str
    actor: str
    attempt: int | None = None
    data: dict[str, Any] = field(default_factory=dict)
    seq: int | None = None  # assigned by the store, increasing per job

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Event:
        return cls(**_known(cls, d))


@dataclass
class Attempt:
    """One try at running a job on one placement.

    ``id`` is ``<job id>-a<n>``: launching is idempotent per attempt id, so a
    launcher asked twice for the same attempt runs it once.
    """

    id: str
    job_id: str
    n: int
    state: AttemptState | ForeignState  # ForeignState: set by a newer broker (lifecycle.ForeignState)
    launcher: str
    placement: dict[str, Any]
    price_per_hour: int  # micro-dollars per hour, all nodes
    created_at: float
    started_at: float | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    reason: str = ""
    cost: int = 0  # micro-dollars accrued so far
    billed_until: float | None = None
    slots: list[int] = field(default_factory=list)
    resume_from: str | None = None
    stop_requested_at: float | None = None
    stop_reason: str = ""
    first_step: int | None = None  # first progress step this attempt reported (restore point)
    first_report_at: float | None = None  # when it first reported: launch → training again is the changeover
    last_step: int | None = None
    checkpoint: dict[str, Any] = field(default_factory=dict)  # latest committed by this attempt
    steps_lost: int | None = None
    launched_in: str = ""  # the launcher's view it was launched in (``Launcher.domain``); "" = any
    limit_at: float | None = None  # when the launcher stops it by itself to keep the budget (engine clock)
    # a workdir that is a path on the broker's host, as this attempt's launch found it (broker.workdir.fingerprint):
    # the next attempt's launch says so when it differs. {}: no such workdir (a pack, a git ref), or an older broker's
    workdir: dict[str, Any] = field(default_factory=dict, repr=False)
    extra: dict[str, Any] = field(default_factory=dict, repr=False)  # fields a newer broker stored (EXTRA)

    @property
    def foreign(self) -> bool:
        """Its state is one a newer broker set, unknown here: shown, never written back."""
        return is_foreign(self.state)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["state"] = self.state.value
        return _with_extra(d)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Attempt:
        d = _split(cls, d)
        d["state"] = attempt_state(d["state"])
        return cls(**d)


@dataclass
class Job:
    """A submitted job: its spec, money, and where it stands.

    ``version`` increases by one on every stored change; stores refuse a write
    whose expected version is stale (compare-and-set), which is what keeps two
    broker processes from both launching the same attempt.
    """

    id: str
    name: str
    team: str
    state: JobState | ForeignState  # ForeignState: set by a newer broker (lifecycle.ForeignState)
    spec: dict[str, Any]  # the SkyPilot task as submitted, with its broker: section
    budget: int  # micro-dollars, the cap
    priority: int
    submitted_at: float
    updated_at: float
    version: int = 0
    deadline: float | None = None
    max_price_per_hour: int | None = None
    expected_hours: str | None = None  # Decimal as text
    spent: int = 0  # micro-dollars, sum of attempts' cost
    attempts: int = 0  # number of attempts created
    reason: str = ""  # why it is where it is (waiting for capacity, failed because ...)
    quote: dict[str, Any] = field(default_factory=dict)
    placement: dict[str, Any] = field(default_factory=dict)  # where the current/next attempt runs
    slots: list[int] = field(default_factory=list)  # on-prem slots reserved for it
    retry: dict[str, Any] = field(default_factory=dict)
    errors_retried: int = 0
    launch_failures: int = 0  # launches refused in a row for a reason that may pass (none since an attempt ran)
    launches_failed: int = 0  # attempts whose launch was refused so: they ran nothing, and MAX_ATTEMPTS leaves them out
    launch_retry_at: float | None = None  # after a refused launch, not placed again before this (a backoff)
    progress: dict[str, Any] = field(default_factory=dict)  # last report: step, total_steps, at, metrics
    last_checkpoint: dict[str, Any] = field(default_factory=dict)  # {"step", "uri", "at"}: latest committed
    blocked_zones: dict[str, float] = field(default_factory=dict)  # zone → blocked until (after preemptions)
    budget_warned: bool = False
    force_tier: str | None = None  # "ondemand" after a user's "switch to on-demand"; the reliable tier the engine moved it to
    pinned_by: str | None = None  # who set force_tier: a user's name, or DEADLINE_PIN (the engine, to meet the deadline)
    diagnosis: dict[str, Any] = field(default_factory=dict)  # how the last attempt ended, in plain words
    running_since: float | None = None  # when the current attempt started training
    queued_at: float | None = None  # when it last entered the queue (submitted, requeued, resumed); None: before 12-06
    resumed_at: float | None = None  # when a user last resumed it: its place in the queue counts from then (queue.order_key)
    checkpoint_uri: str = ""
    idempotency_key: str | None = None
    submitted_by: str = ""
    job_token_version: int = 1  # of the BROKER_JOB_TOKEN its current attempt was launched with (broker/auth.py)
    job_token_key: str | None = None  # the key id of the secrets key that token is keyed by; None: before 12-07
    extra: dict[str, Any] = field(default_factory=dict, repr=False)  # fields a newer broker stored (EXTRA)

    @property
    def attempts_run(self) -> int:
        """Attempts that got past their launch: those whose launch was refused for a reason that may pass (SkyPilot's
        API server down, say) ran nothing, and do not use up the job's :data:`~broker.engine.monitor.MAX_ATTEMPTS`."""
        return self.attempts - self.launches_failed

    @property
    def current_attempt_id(self) -> str | None:
        return attempt_id(self.id, self.attempts) if self.attempts else None

    @property
    def foreign(self) -> bool:
        """Its state is one a newer broker set, unknown here: shown, never written back, left alone by the engine."""
        return is_foreign(self.state)

    def blocked_at(self, now: float) -> frozenset[str]:
        """The zones (or pools) this job may not be placed in at ``now``: each blocked for it after a preemption
        there until its cool-down ends (``blocked_zones`` maps each to that end; one ending at ``now`` is free)."""
        return frozenset(z for z, until in self.blocked_zones.items() if until > now)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["state"] = self.state.value
        return _with_extra(d)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Job:
        d = _split(cls, d)
        d["state"] = job_state(d["state"])
        return cls(**d)


@dataclass(frozen=True)
class CostAttempt:
    """What the cost report reads of an :class:`Attempt` (same names, same values), and nothing else.

    :meth:`JobStore.cost_history <broker.store.base.JobStore.cost_history>` reads these instead of whole
    attempts: a 90-day report over tens of thousands of jobs otherwise spends most of its time decoding
    checkpoints, slots and spec fields it never shows. ``placement`` holds only ``tier``,
    ``ondemand_price_per_hour``, ``zone``, ``location`` and ``region`` (``None`` when not stored).
    """

    n: int
    state: AttemptState | ForeignState  # ForeignState: set by a newer broker (lifecycle.ForeignState)
    placement: dict[str, Any]
    price_per_hour: int
    created_at: float
    started_at: float | None
    ended_at: float | None
    billed_until: float | None
    cost: int


@dataclass(frozen=True)
class CostJob:
    """What the cost report reads of a :class:`Job` (same names, same values), and nothing else.

    ``placement`` holds only ``price_per_hour``. The quote's tiers are kept as the store
    gave them (JSON text, or the list) and decoded only if the on-demand-price rule needs them.
    """

    id: str
    name: str
    team: str
    state: JobState | ForeignState  # ForeignState: set by a newer broker (lifecycle.ForeignState)
    submitted_at: float
    priority: int
    reason: str
    budget: int
    spent: int
    placement: dict[str, Any]
    quote_tiers: str | list | None
    updated_at: float | None = None  # a final job's end: a preemption it never resumed from stops counting there
    queued_at: float | None = None  # when it last entered the queue (Job.queued_at)

    @cached_property
    def quote(self) -> dict[str, Any]:
        tiers = json.loads(self.quote_tiers) if isinstance(self.quote_tiers, str) else self.quote_tiers
        return {"tiers": tiers or []}


COST_PLACEMENT_KEYS = ("tier", "ondemand_price_per_hour", "zone", "location", "region")


def attempt_id(job_id: str, n: int) -> str:
    return f"{job_id}-a{n}"


def event_for(job: Job, event: JobEvent, to_state: JobState, *, time: float, reason: str, actor: str,
              from_state: JobState | None, data: dict[str, Any] | None = None) -> Event:
    return Event(
        job_id=job.id,
        time=time,
        event=event.value,
        from_state=from_state.value if from_state else None,
        to_state=to_state.value,
        reason=reason,
        actor=actor,
        attempt=job.attempts or None,
        data=data or {},
    )


def noted(events: Iterable[Event], name: str, job: Job) -> bool:
    """Whether ``events`` already hold the note ``name`` of ``job``'s current attempt: for a note said once an
    attempt, whichever broker saw it first (:func:`note_event` records the attempt)."""
    return any(e.event == name and e.attempt == (job.attempts or None) for e in events)


def note_event(job: Job, name: str, reason: str, *, time: float, actor: str, data: dict[str, Any] | None = None) -> Event:
    """An event that records a fact without changing the job's state (a budget warning, a tier switch)."""
    return Event(job_id=job.id, time=time, event=name, from_state=job.state.value, to_state=job.state.value,
                 reason=reason, actor=actor, attempt=job.attempts or None, data=data or {})
