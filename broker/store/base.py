"""The ``JobStore`` port: where jobs, attempts and events live.

Two implementations pass one contract suite (``tests/broker/test_broker_store_contract.py``):
:mod:`broker.store.sqlite` (embedded default) and :mod:`broker.store.redis`
(several broker processes). Every write goes through :meth:`JobStore.commit`,
which applies one :class:`Change` atomically with compare-and-set on the job's
version — the mechanism that lets several brokers share a store without ever
launching the same attempt twice. The one deletion, :meth:`JobStore.prune` (the
retention policy's), is compare-and-set on that same version.
"""

from __future__ import annotations

import functools
import inspect
import json

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol, runtime_checkable

from broker.lifecycle import ForeignState, JobState
from broker.models import Attempt, CostAttempt, CostJob, Event, Job


BATCH_IDS = 500  # ids per round trip in the stores' batched reads


class StoreError(Exception):
    """Base for store failures the caller may handle."""


class StoreUnusable(StoreError):
    """The store's file cannot serve as one at all (not a database, damaged, not to be opened or written): the
    message names the file, why, and what to do. Raised as a store opens (SQLite's file), so the broker refuses to start in one
    line instead of a traceback (or, read-only, of a traceback per engine tick once started)."""


class StoreUnavailable(StoreError):
    """The store could not be reached or did not answer in time. For a write, ``written`` says what
    became of it: ``False`` (rolled back: nothing was stored) or ``None`` (unknown: the request may
    have reached the store and the answer been lost)."""

    def __init__(self, message: str, *, written: bool | None = None):
        self.written = written
        super().__init__(message)


def unavailable_on(errors: tuple[type[BaseException], ...], *,
                   written: Callable[[BaseException], bool | None] | bool | None,
                   when: Callable[[BaseException], bool] = lambda exc: True):
    """Class decorator for a store: its public methods raise :class:`StoreUnavailable` for the driver's
    ``errors`` that ``when`` accepts (connection refused or lost, a timeout, a locked or failing file), so
    callers handle one exception and never see the driver's; other errors pass through (a bug, a 500).
    ``written``: what a failed ``commit`` did (see there), or a function of the error that says."""

    def wrap(name: str, fn):
        @functools.wraps(fn)
        def method(self, *args, **kwargs):
            try:
                return fn(self, *args, **kwargs)
            except StoreUnavailable:
                raise
            except errors as exc:
                if not when(exc):
                    raise
                did = (written(exc) if callable(written) else written) if name == "commit" else None
                raise StoreUnavailable(f"the job store did not answer: {exc}", written=did) from exc
        return method

    def decorate(cls):
        for name, fn in list(vars(cls).items()):
            if inspect.isfunction(fn) and not name.startswith("_") and name != "close":  # plain methods only
                setattr(cls, name, wrap(name, fn))
        return cls

    return decorate


class VersionConflict(StoreError):
    """Someone else changed the job first; re-read it and decide again."""


class ForeignRecord(StoreError):
    """The change would write back a job or an attempt whose state this broker's version does not know (a
    newer broker sharing the store set it: :class:`~broker.lifecycle.ForeignState`). Nothing is written:
    what the state means, and what may follow it, is the newer broker's to decide."""


class DuplicateJob(StoreError):
    """A job with this id (or this team's idempotency key) exists; ``existing_id`` names it."""

    def __init__(self, existing_id: str):
        self.existing_id = existing_id
        super().__init__(f"job {existing_id} already exists")


@dataclass
class Change:
    """One atomic write: the job as it should become, plus what to append.

    ``expected_version`` is the version the caller read; the store writes only
    if the stored job still has it, and stores ``job`` with version + 1.
    ``expected_version=None`` creates the job (fails with :class:`DuplicateJob`
    if the id or the team's idempotency key is taken).

    ``expected_placements``, for a change that hands the job capacity (a placement): the count of
    placements (:meth:`JobStore.placements`) the caller read before the snapshot it decided on; the store
    writes only if no placement was committed since, and counts this one. Two engines deciding on
    snapshots a moment apart so never hand one slot to two jobs: the later write conflicts.

    ``team_fence``, for a change that may raise what a team's jobs can spend (a submit, a resume, a budget raised):
    ``(team, the count of such changes the caller read)`` (:meth:`JobStore.team_admissions`) before it weighed the
    team's monthly cap; the store writes only if no such change of that team was committed since, and counts this
    one. Two brokers admitting jobs of one team a moment apart so never both fit under the cap's last dollars.
    """

    job: Job
    expected_version: int | None
    events: Sequence[Event] = ()
    attempts: Sequence[Attempt] = ()
    metrics: Sequence[dict] = field(default_factory=tuple)
    expected_placements: int | None = None
    team_fence: tuple[str, int] | None = None


def check_writable(change: Change) -> None:
    """Refuse (:class:`ForeignRecord`) a change that would write back a record in a state unknown here: every
    store calls it before writing, so no path of this version (engine, API, Slack) can."""
    job = change.job
    if job.foreign:
        raise ForeignRecord(f"job {job.id} is {job.state.value}, a state this broker's version does not know (a "
                            "newer broker sharing the store set it): it is left as stored; change it through a "
                            "broker of that version")
    for attempt in change.attempts:
        if attempt.foreign:
            raise ForeignRecord(f"attempt {attempt.id} is {attempt.state.value}, a state this broker's version does "
                                "not know (a newer broker sharing the store set it): its job is left as stored; "
                                "change it through a broker of that version")


@dataclass
class Expired:
    """What the retention policy reads of a job it may delete (:meth:`JobStore.expired`): what :meth:`JobStore.prune`
    needs of it — its id, version and state (the compare-and-set), its team and idempotency key (the keys it
    deletes), and what :func:`broker.totals.of_job` and :func:`broker.costs.ledger_of` read (its submit time, its
    quote's tiers) — with the same names and values as on the :class:`~broker.models.Job`, and nothing else: a batch
    of 500 jobs decoded whole, spec and all, was most of the read. ``quote_tiers`` as the store gave them (JSON text,
    or the list), decoded only if the on-demand price rule needs them (as :class:`~broker.models.CostJob`)."""

    id: str
    team: str
    state: JobState | ForeignState
    version: int
    submitted_at: float
    updated_at: float
    idempotency_key: str | None
    quote_tiers: str | list | None = None

    @cached_property
    def quote(self) -> dict:
        tiers = json.loads(self.quote_tiers) if isinstance(self.quote_tiers, str) else self.quote_tiers
        return {"tiers": tiers or []}


@dataclass(frozen=True)
class Pruned:
    """What the retention policy has deleted, read at one moment: how many jobs (:meth:`JobStore.pruned`), and what
    they had added to the counters of ``/metrics`` (``totals``: a counter and its label values → an exact integer,
    as :func:`broker.totals.of_job` computes them), so that the counters do not fall when a job is pruned."""

    jobs: int = 0
    totals: Mapping[tuple[str, ...], int] = field(default_factory=dict)


@dataclass(frozen=True)
class PrunedCosts:
    """The pruned-cost ledger over a window, read at one moment (:meth:`JobStore.pruned_costs`): ``pruned``, how many
    jobs :meth:`JobStore.prune` deleted (:meth:`JobStore.pruned`); ``ledger_jobs``, how many of them left their costs
    in the ledger (those pruned by a broker before it kept one did not); ``buckets``, the ledger's entries in the
    window: ``(team, tier, hour, cost, ondemand_equivalent)``, ``hour`` the UTC hour's start in epoch seconds, the
    money exact integer micro-dollars (:func:`broker.costs.ledger_of`)."""

    pruned: int = 0
    ledger_jobs: int = 0
    buckets: Sequence[tuple[str, str, int, int, int]] = ()


@runtime_checkable
class JobStore(Protocol):
    """Durable record of jobs. Every method may be called from any thread."""

    def commit(self, change: Change) -> Job:
        """Apply ``change`` atomically and durably; return the stored job (new version).

        Raises :class:`VersionConflict` if the job's version moved on, or a placement was
        committed since ``expected_placements`` (nothing is written), :class:`DuplicateJob` on a create whose id or idempotency
        key exists. When it returns, the change survives a crash of the process.
        """

    def get_job(self, job_id: str) -> Job | None:
        """The job, or ``None`` if there is no such job."""

    def find_idempotent(self, team: str, key: str) -> Job | None:
        """The job this team submitted with this ``Idempotency-Key``, if any."""

    def list_jobs(self, *, states: Sequence[str] | None = None, team: str | None = None,
                  limit: int = 1000, active_since: float | None = None,
                  before: tuple[float, str] | None = None, name_prefix: str | None = None) -> list[Job]:
        """Jobs, newest first (``submitted_at`` then ``id``, both descending), optionally filtered by state(s),
        team and the start of their name (``name_prefix``: case-sensitive, as given; the limit counts the jobs that
        match, so a page of a filtered listing is full while more match). With ``active_since``, only jobs not in a
        final state or last updated at or after that time (what a cost window or an incremental scrape needs;
        finished history is not read). With ``before``
        (a ``(submitted_at, id)`` key, the last job of a page), only the jobs after it in that order: the next
        page, read on from the key itself, so a job submitted or deleted meanwhile neither repeats nor skips one."""

    def events(self, job_id: str, *, after_seq: int = 0) -> list[Event]:
        """The job's events in order (``seq`` ascending), after ``after_seq``."""

    def attempts(self, job_id: str) -> list[Attempt]:
        """The job's attempts, oldest first."""

    def attempts_of(self, job_ids: Sequence[str]) -> dict[str, list[Attempt]]:
        """Each job's attempts, oldest first, in a few round trips (every id is a key; a job
        with none, or no such job, maps to ``[]``): what a cost report over many jobs reads."""

    def cost_history(self, *, team: str | None, since: float,
                     until: float) -> tuple[list[CostJob], dict[str, list[CostAttempt]]]:
        """What a cost report over ``[since, until)`` reads: the jobs of ``team`` (all when ``None``)
        submitted before ``until`` and not final or updated at or after ``since`` (the ``list_jobs``
        order: newest first), with each one's attempts, oldest first — only the fields the report
        shows (:class:`~broker.models.CostJob`, :class:`~broker.models.CostAttempt`), no limit."""

    def cost_page(self, *, limit: int, active_since: float | None = None,
                  before: tuple[float, str] | None = None) -> tuple[list[CostJob], dict[str, list[CostAttempt]]]:
        """A page of :meth:`list_jobs` of every team (the same ``active_since`` filter, order, ``limit`` and
        ``before`` key) as :meth:`cost_history` gives its jobs — only the fields a cost report shows — with each
        one's attempts, oldest first (every job a key): what ``/metrics`` reads of each job (``broker.totals.of_job``
        needs nothing else), without decoding whole jobs and attempts (most of the time of its first read, when it
        reads every job)."""

    def cost_records(self, job_ids: Sequence[str]) -> tuple[list[CostJob], dict[str, list[CostAttempt]]]:
        """:meth:`cost_page`'s records of those of ``job_ids`` still stored (newest first; a missing id is left out):
        how ``/metrics`` reads again the jobs it was not shown by the update-time index (:meth:`job_ids`)."""

    def job_count(self) -> int:
        """How many jobs are stored, from an index (one count, nothing decoded): what ``/metrics`` compares with the
        jobs it holds, to find those written with an update time it had already read past (an import, a broker
        whose clock lags)."""

    def job_ids(self) -> set[str]:
        """The ids of every job stored, from an index (nothing decoded)."""

    def metrics(self, job_id: str, *, limit: int = 10_000) -> list[dict]:
        """Reported progress/metric points, oldest first."""

    def placements(self) -> int:
        """How many changes with ``expected_placements`` were committed: read before a snapshot that
        placements are decided on (see :class:`Change`)."""

    def team_admissions(self, team: str) -> int:
        """How many changes carrying a ``team_fence`` of ``team`` were committed (the fence of ``Change.team_fence``)."""

    def expired(self, *, before: float, limit: int) -> list[Expired]:
        """Up to ``limit`` jobs in a final state of this version last updated before ``before``, the least recently
        updated first: what the retention policy deletes (:meth:`prune`, ``broker/retention.py``). Read from the
        update-time index; a job not final, in a state a newer broker set among them, is never one of them. Each as
        an :class:`Expired`, what :meth:`prune` needs of it (which takes a whole :class:`Job` as well)."""

    def prune_sizes(self, jobs: Sequence[Job | Expired]) -> list[int]:
        """What deleting each of ``jobs`` weighs in one write of :meth:`prune`, in records, from counts the store
        keeps (nothing decoded): what the retention policy sizes its writes by, so that each holds the store about
        as long. SQLite: the job's row, its attempts, events and metric points (each counted by a seek or two in its
        index); Redis: 1 (a job is one script whose ``UNLINK`` leaves freeing its lists to the server's background)."""

    def prune(self, jobs: Sequence[Job | Expired], *, rows: int | None = None) -> list[str]:
        """Delete each of ``jobs`` with everything of it — its attempts, events, metric points, its idempotency key
        (a new job may take it) and its entries in every index — if it is still stored at the version it was read
        at, in a final state; return the ids deleted. Compare-and-set, as :meth:`commit`: a job changed since it was
        read (a resume, a budget raised) stays whole, and one already gone (another broker pruned it) is not
        counted again, neither being an error. A job goes wholly or not at all; so does the batch in SQLite (one
        transaction). In the same atomic write, each job deleted adds one to :meth:`pruned` and what it added to the
        counters of ``/metrics`` (:func:`broker.totals.of_job` of it and its attempts as stored) to
        :meth:`pruned_totals`, and its attempts' costs, by team, tier and UTC hour (:func:`broker.costs.ledger_of`),
        to the pruned-cost ledger that cost reports read (:meth:`pruned_costs`), counting it in that ledger's jobs.

        ``rows`` bounds the write, in the records :meth:`prune_sizes` counts: the metric points that would take it
        past ``rows`` (a job that reported for weeks) are left, recorded, for :meth:`prune_leftovers` to delete in
        writes of their own. They go after their job, never before it: the job's row is the compare-and-set, so a
        job changed since it was read keeps every point, and once it is gone no write can bring it back (a commit
        on it conflicts). Nothing reads them meanwhile (every read of points is of a job that exists). A store that
        deletes a job's points whole at no cost to others (Redis) leaves none."""

    def prune_leftovers(self, *, limit: int) -> int:
        """Delete up to ``limit`` of the metric points :meth:`prune` left of the jobs it deleted (``rows``), in one
        write; how many it deleted: 0 when none are left. Brokers may call it at once (each point goes once), and a
        broker stopped halfway leaves them to the next call, its own or another's."""

    def pruned(self) -> int:
        """How many jobs :meth:`prune` deleted, by every broker sharing the store (``/metrics``)."""

    def pruned_totals(self) -> Pruned:
        """:meth:`pruned` and the totals of what the jobs deleted had added to the counters, read at one moment."""

    def pruned_costs(self, *, team: str | None, since: float, until: float) -> PrunedCosts:
        """The pruned-cost ledger's entries of ``team`` (all when ``None``) whose hour begins in ``[since, until)``,
        with :meth:`pruned` and the count of jobs the ledger holds the costs of, read at one moment: what a cost
        report adds for the jobs pruned (``broker/costs.py``)."""

    def existing(self, job_ids: Sequence[str]) -> set[str]:
        """Which of ``job_ids`` are stored, from an index, in a few round trips (nothing decoded): how ``/metrics``
        finds the jobs it has read that were pruned since."""

    def beat(self, domain: str, now: float) -> None:
        """Record that an engine whose launcher has ``domain`` was alive at ``now`` (not a job write:
        no version, no event; the last beat per domain is kept, even one earlier than the beat before it:
        a beat that changes is what tells the other engines this one is alive, whatever its clock says)."""

    def beats(self) -> dict[str, float]:
        """Each engine domain's last beat."""

    # Optional: ``clock_offset(clock) -> float``, how far ``clock`` (this host's) is ahead of the store server's own
    # (negative: behind), read at the middle of one round trip; raises StoreUnavailable as every read does. Only a
    # store that several hosts share has it (Redis); read through :func:`clock_offset`, which gives None without it.

    def close(self) -> None:
        """Release connections. Idempotent."""


def clock_offset(store: object, clock) -> float | None:
    """This host's clock (``clock``) less the store server's, in seconds, where the store is shared by several hosts
    and can say its time (Redis ``TIME``); ``None`` for a store of one process and one clock (SQLite)."""
    measure = getattr(store, "clock_offset", None)
    return None if measure is None else measure(clock)
