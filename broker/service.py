"""The service layer: every edge (HTTP API, CLI through the API, Slack, dashboard) calls this.

It checks who may do what, parses and admits specs, and reads the store.
State changes go through :mod:`broker.lifecycle` and are committed with
compare-and-set; the engine does the rest.
"""

from __future__ import annotations

import difflib
import json
import logging
import math
import re
import secrets
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any, NamedTuple

from broker import costs
from broker.admission import Admitted, Refused, admit, broker_echo
from broker.auth import JOB_TOKEN_V2, Principal, Unauthorized, job_token_valid
from broker.config import Settings
from broker.engine import budget as budget_rules
from broker.engine.billing import accrue
from broker.engine.budget import attempt_limit, reserve_seconds
from broker.engine.spot import POLICY_TICK_SECONDS, measured_changeover, work_done
from broker.engine.schedule import (SPOT_WAIT, Place, Wait, block_causes, left_to_run, placeable, placeable_key,
                                    request_of, schedule_now)
from broker.lifecycle import IllegalTransition, JobEvent, JobState, apply
from broker.models import Attempt, Event, Job, event_for, note_event, noted
from broker.offers import after_run, all_offers, market, matching_offers, slots_of, usable_by
from broker.queue import Waits, positions, waits, work_left_seconds
from broker.runtime import validate_task
from broker.sealing import (SHORT_SECRET, KeyInvalid, Unsealable, job_secret_values, open_task, redact, seal_spec,
                            sealer_for, secret_values)
from broker.spec import (MAX_CHECKPOINT_URI, TEAM_CONFIG_KEYS, JobSpec, SpecError, admin_only_settings, check_env_map,
                         check_env_total, check_name, deadline_out_of_reach, local_pool_refusal, parse_deadline,
                         checkpoint_base, checkpoint_uri_problem, host_paths, in_own_base, parse, typed_text)
from broker.store import Change, DuplicateJob, ForeignRecord, JobStore, VersionConflict, check_writable
from broker.team_budget import TeamMonth, as_of, month_of, refusal, room_later, team_month
from broker.views import (TASK_FIX_CLASSES, holders_words, minute, passed_words, resubmit_keep_words,
                          resume_from_words, task_fix_words)
from broker.workdir import UNPACK_RATIO, PackError, parse_digest, parse_mount, unpack
from launchers.base import Launcher, domains_of
from pricing.money import MAX_DOLLARS, MICROS_PER_DOLLAR, cost_for_seconds, fmt, fmt_left, fmt_limit, fmt_rate, shown
from pricing.offers import Offer, Tier
from pricing.placement import budget_shortfall, cap_for_all, start_shortfall, under_cap
from pricing.deadline import Holding, PolicyInput, slack
from pricing.policy import make_policy


RESUMABLE = (JobState.FAILED, JobState.STOPPED_BUDGET)
"""States a user may resume from."""
CAS_RETRIES = 10

log = logging.getLogger("broker.service")


class NotFound(Exception):
    """No such job, or one the caller may not see (the same answer, so ids don't leak). ``like``: the ids of the
    caller's own jobs it may have meant (a part of one copied, the ``j-`` left out)."""

    def __init__(self, job_id: str, like: Sequence[str] = ()):
        super().__init__(job_id)
        self.like = list(like)

    def __str__(self) -> str:
        shown = " or ".join(self.like[:3]) + (" or another" if len(self.like) > 3 else "")
        return f"no job {self.args[0]}" + (f" (did you mean {shown}?)" if self.like else "")


LIKE_RECENT = 1000
"""How many of the caller's latest jobs an unknown id is matched against, for a 404 that names the one meant."""


def ids_like(given: str, ids: Sequence[str]) -> list[str]:
    """The ``ids`` that ``given`` begins (a part of one, ``j-`` left out or not): a user copies a part of an id; else
    the whole ids one or two characters off it (a typo, a character dropped or swapped: `j-a9f5e61915` for
    `j-a9f5e61914` was told only "no job")."""
    given = given.strip().lower()
    if not given.removeprefix("j-"):
        return []  # `j-` begins every id
    heads = {given, given if given.startswith("j-") else "j-" + given}
    begun = [i for i in ids if any(i.startswith(h) for h in heads)]  # the whole id in capitals too
    if begun:
        return begun
    whole = given if given.startswith("j-") else "j-" + given
    # two edits off a whole id of the broker's (12 characters); one off a shorter one, which two would match too often
    near = [(distance, i) for i in ids if (distance := _edits(whole, i.lower(), most=2 if len(i) >= 10 else 1))
            is not None]
    return [i for distance, i in near if distance == min(d for d, _ in near)]  # the nearest: one off, else two


def _edits(a: str, b: str, *, most: int) -> int | None:
    """The edit distance (insert, delete, change, or swap two neighbours) of ``a`` and ``b`` when it is at most
    ``most``; ``None`` beyond (and early: the length alone may say so)."""
    if abs(len(a) - len(b)) > most:
        return None
    before, row = None, list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        now = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            now[j] = min(row[j] + 1, now[j - 1] + 1, row[j - 1] + (ca != cb))
            if before is not None and i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                now[j] = min(now[j], before[j - 2] + 1)
        if min(now) > most:
            return None
        before, row = row, now
    return row[-1] if row[-1] <= most else None


class Invalid(Exception):
    """Bad input: ``field`` and a reason."""

    def __init__(self, field: str, reason: str, status: int = 422):
        self.field = field
        self.reason = reason
        self.status = status
        super().__init__(f"{field}: {reason}")


class Conflict(Exception):
    """The request is not allowed in the job's current state: the reason, and the field it is about where there is one
    (the job's ``state``, ``budget``, ``broker.checkpoint``, the ``Idempotency-Key``, ...), which the API's 409 names
    as its 4xx answers do."""

    def __init__(self, reason: str, field: str | None = None):
        super().__init__(reason)
        self.field = field


class QueueWaits(NamedTuple):
    """:meth:`BrokerService.queue_waits`: each queued job's position (``positions``), rough start (``starts``, epoch
    seconds), and for one that gets no start estimate though it waits for capacity, why in words (``waiting``); and
    the queued jobs these were worked out from (``queued``, by id), for a view that read only some of a job's
    fields (the cost report's queue) to say its reason as :func:`broker.views.shown_reason` does."""
    positions: dict[str, int]
    starts: dict[str, float]
    waiting: dict[str, str]
    queued: dict[str, Job]


class CancelBatch(NamedTuple):
    """What :meth:`BrokerService.cancel_many` did: the jobs cancelled (or being cancelled), those that had already
    ended, and each refused with why (``(job id, the refusal's sentence)``: not found, not the caller's, ...);
    ``already``: the ids of those in ``cancelled`` that another cancel was stopping before this one came (two bulk
    cancels at once each counted them as their own)."""
    cancelled: list[Job]
    ended: list[Job]
    refused: list[tuple[str, str]]
    already: Sequence[str] = ()


CANCEL_PAGE = 1000
"""Jobs read at a time when a cancel picks them by name or takes all."""

QUEUE_REUSE_SECONDS = 1.0
"""How long a worked-out queue is reused while nothing it was worked out from changed, at most (and at most the
engine's tick, when that is shorter): its start estimates are counted from the time it was worked out, so a reused one
is up to that much older. The CLI, dashboard and Slack show a start to the minute, so it is not seen there, and in the
API's epoch seconds it is less than two reads a second apart differ by anyway; a deadline's "passed … ago", told to
the second, is worked out on every read with that read's own clock."""

_HOLDING = (JobState.QUEUED, JobState.PLACED, JobState.LAUNCHING, JobState.RUNNING, JobState.CANCELLING,
            JobState.STOPPING)
"""The states whose jobs the queue is worked out from: a job being cancelled or stopped holds its slots until its
process is gone (the grace period)."""


class _Queue(NamedTuple):
    """The queue worked out once for every reader (:meth:`BrokerService._shared_queue`): what it was worked out from
    (``fingerprint``: each job's id and version, as read; the launcher's ``availability``; the ``settings``), when
    (``at``, the service's clock), and what of it is the same for every viewer — the jobs, their positions, the
    :class:`~broker.queue.Waits`, and for each queued job with a deadline its spot policy waits for spot on, when it
    moves off (``spot``: :meth:`BrokerService._spot_latest`); all of it read, never changed, by every reader of this
    queue. ``words``: each viewer team's words for the holders lists (:func:`broker.views.holders_words`), by the
    list's ``id``, filled in by the first reader of that team, so that the lists are put in words once per team."""
    fingerprint: tuple[tuple[str, int], ...]
    availability: dict
    settings: Settings
    at: float
    jobs: list[Job]
    positions: dict[str, int]
    waits: Waits
    spot: dict[str, str]
    words: dict[str | None, dict[int, str | None]]


class _Round:
    """One run of a :class:`_SharedRun`, and those who wait for it."""

    def __init__(self) -> None:
        self.finished = False
        self.value: Any = None
        self.failed = False


class _SharedRun:
    """Calls ``fn`` once for all the callers that come while an earlier call runs, as group commit writes the changes
    that come while an earlier write syncs: the first of them waits for that call to end, then calls ``fn`` for all
    of them. Every caller came before the call it gets the answer of began, so that answer is never older than one
    it would have worked out alone (a job submitted before the read was asked for is in it). A call that fails is
    not shared: each caller that waited for it calls ``fn`` itself, and hears of its own failure."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._fn = fn
        self._cond = threading.Condition()
        self._next: _Round | None = None  # the round callers join now: not begun
        self._running = False

    def __call__(self) -> Any:
        with self._cond:
            mine, first = self._next, self._next is None
            if first:
                mine = self._next = _Round()
            else:
                while not mine.finished:
                    self._cond.wait()
            if first:
                while self._running:
                    self._cond.wait()
                self._running, self._next = True, None  # who comes from now on waits for the next round
        if not first:
            return self._fn() if mine.failed else mine.value
        try:
            mine.value = self._fn()
        except BaseException:
            mine.failed = True
            raise
        finally:
            with self._cond:
                self._running, mine.finished = False, True
                self._cond.notify_all()
        return mine.value


class _Admission(NamedTuple):
    """:meth:`BrokerService._admission`: the parsed task, its team, and what admission made of it, not stored
    (``admitted``); or, for a retry of a used Idempotency-Key, the job that key made (``existing``)."""
    spec: JobSpec
    team: str
    admitted: Admitted | None
    existing: Job | None
    fence: tuple[str, int] | None = None  # the team's admissions count read before its monthly cap was weighed


class DryRun(NamedTuple):
    """:meth:`BrokerService.submit_dry_run`: the job a submit would queue (``job``, never stored: its id is drawn and
    thrown away), or with ``existing`` the job a used Idempotency-Key made, which the submit would answer with; where
    the scheduler would place it now (``placement``, a placement record), or ``None`` and ``reason`` (the
    scheduler's) why it would wait; its queue position, rough start (epoch seconds) and, waiting for capacity held
    until ends nobody can tell, what it waits for in words (``waiting``), as :meth:`BrokerService.queue_waits`."""
    job: Job
    existing: bool
    placement: dict[str, Any] | None
    reason: str
    position: int | None
    start: float | None
    waiting: str | None
    stop_seconds: int = 0  # the clean stop the engine keeps of a budget: a tier's estimate and it are what it covers


def _same_submit(existing: Job, spec, settings: Settings, now: float, events: Sequence[Event] = ()) -> Job:
    """The job an Idempotency-Key already made, if this submit asks for the same task (a retry); a
    different task under a used key is refused, never silently answered with the first job
    (as the IETF Idempotency-Key draft asks: 422 for a reused key with another payload). The task is
    compared as stored — everything but the budget, which may have been raised since — its secrets opened
    (a broker that cannot open them cannot tell a retry from another task: 409, naming the key setting),
    and the deadline as :func:`_same_deadline` reads it: the one it was admitted with, which a ``deadline_changed``
    event among the job's ``events`` keeps when it was changed since (as the budget, which may have been raised
    since: a retry of the submit after ``broker deadline`` was a 422 "with a different task")."""
    try:
        opened = open_task(existing.spec, settings, existing.id)
    except Unsealable as exc:
        raise Conflict(f"the Idempotency-Key was already used for job {existing.id}, whose task this broker cannot "
                       f"compare with this one: {exc}", field="Idempotency-Key") from None
    stored = {k: v for k, v in opened.items() if k != "broker"}
    # a key left empty (`envs: {}`, `file_mounts: null`) runs as one left out: a retry written either way is the same
    # task (it was a 422 "with a different task")
    given = {k: v for k, v in spec.task.items() if v not in (None, {}, [])}
    stored = {k: v for k, v in stored.items() if v not in (None, {}, [])}
    same_task = json.dumps(given, sort_keys=True, default=str) == json.dumps(stored, sort_keys=True, default=str)
    section, echo = existing.spec.get("broker") or {}, broker_echo(spec)
    if "budget_usd" not in section:  # stored by a broker that kept no budget here: compared without it, as then
        echo.pop("budget_usd", None)
    differs = _submit_differs(existing, spec, echo, section)
    admitted = next((e.data.get("old") for e in events if e.event == "deadline_changed"), existing.deadline)
    if not same_task or echo != section or differs or \
            not _same_deadline(existing, spec.broker.deadline, now, admitted):
        raise Invalid("Idempotency-Key", f"was already used for job {existing.id} with a different "
                                         f"{differs or 'task'}; use a new key to submit this one")
    return existing


def _submit_differs(existing: Job, spec, echo: dict, section: dict) -> str | None:
    """What of the broker: section a retry changes that a person would want named: the budget (a retry asking $3
    was answered with the $2 job, without a word) or the price cap (kept as a field of the job, so not compared
    before either)."""
    if echo.get("budget_usd") != section.get("budget_usd"):
        said = lambda v: f"${v}" if v is not None else "the team's default"  # noqa: E731
        return (f"budget ({said(section.get('budget_usd'))} at submit; this one asks "
                f"{said(echo.get('budget_usd'))})")
    if spec.broker.max_price_per_hour != existing.max_price_per_hour:
        return "max_price_per_hour"
    return None


def _same_deadline(existing: Job, given: float | None, now: float, admitted: float | None) -> bool:
    """Whether a retry's deadline is the one the job was admitted with: the same time, or the same length from
    each submit (``6h`` retried a minute later is the same submit). The deadline is kept beside the task, not in
    it, so it went uncompared: a retry adding one, dropping it or moving it was answered with the first job, as
    if its deadline were the one asked."""
    if given is None or admitted is None:
        return given is None and admitted is None
    return given == admitted or abs((given - now) - (admitted - existing.submitted_at)) < 1


def _checkpoint_step_ahead(job: Job, point: dict[str, Any]) -> int | None:
    """The step a report of a committed checkpoint (and no step) shows the run has reached, when it is past the
    last step reported (else ``None``): only within the attempt whose progress the job shows."""
    step = (point.get("checkpoint") or {}).get("step")
    current = job.progress.get("step")
    if not isinstance(step, int) or isinstance(step, bool) or not isinstance(current, int):
        return None
    if job.progress.get("attempt") != job.attempts or step <= current:
        return None
    return step


def _why_not_cancelled(job: Job) -> str | None:
    """A refused cancel in plain words ('cannot cancel a job that is succeeded' read as a slip of grammar, and
    did not say that there is nothing left to stop); None for a state these do not cover."""
    if job.state is JobState.CANCELLING:
        return f"{job.id} is already being cancelled"
    if isinstance(job.state, JobState) and job.state.is_final:
        return _ended(job, "there is nothing to cancel")
    return None


def _deadline_words(deadline: float | None) -> str:
    """A deadline as a change of it is recorded: ``2026-12-08 09:00Z``, or ``none``."""
    return "none" if deadline is None else minute(deadline)


def _ended(job: Job, so: str) -> str:
    """A refusal for a job that has ended, in the words a cancel's has: "the job is succeeded" (a switch to
    on-demand) and "cannot change the budget of a job that is succeeded" read as slips of grammar."""
    return f"{job.id} has already ended ({job.state.value}): {so}"


def typed_states(given: str) -> list[str]:
    """The job states a user named, one or several with commas between (``queued,running``), each checked: a 422
    naming the first that is not one (a state said twice is read once)."""
    known = [s.value for s in JobState]
    wanted = [part.strip() for part in given.split(",")]
    for part in wanted:
        if part not in known:
            # "succeded" listed the states and left the reader to find it among them, as no other typo does
            close = difflib.get_close_matches(part.lower(), known, n=1)
            meant = f" (did you mean {close[0]!r}?)" if close else ""
            said = f"{part!r} is not a job state{meant}" if part else "holds an empty state (a comma too many)"
            raise Invalid("state", f"{said}: each must be one of {', '.join(known)}")
    return list(dict.fromkeys(wanted))


def new_job_id() -> str:
    return "j-" + secrets.token_hex(5)


_JOB_ID_FORM = re.compile(r"j-[0-9a-f]+")
"""The form of the broker's job ids (:func:`new_job_id`): a checkpoint base under the root by that name is a job's."""


_BASES_ONE_BY_ONE = 100
"""Jobs stored since a process last read the checkpoint bases up to this many are read one by one; more, in pages of
the whole listing (:meth:`BrokerService._stored_bases`)."""


def _others_base(base: str) -> Invalid:
    """A team's refusal of a checkpoint base another team's job has used: which job, and in what state, is not the
    team's to know (it was told "cancel it, and continue from its checkpoints")."""
    return Invalid("broker.checkpoint", f"{base!r} is, or is inside, a checkpoint base a job of another team has "
                                        "used: its checkpoints are that team's to read and write. Name another base, "
                                        "or leave broker.checkpoint out (the job gets a base of its own)", status=403)


class BrokerService:
    def __init__(self, settings: Settings, store: JobStore, launcher: Launcher | None = None, *,
                 clock: Callable[[], float] = time.time, on_event: Callable[[Event, Job], None] | None = None):
        self.settings = settings
        self.store = store
        self.launcher = launcher
        self.clock = clock
        self.on_event = on_event  # as the engine's: the app's Slack notifier sees a cancel or resume too
        self._workdirs = None
        # each stored job's team and checkpoint base, by id (both are set at submit and never change): a submit
        # naming a base reads only the jobs stored since the last one, not every job (the store has no index of bases)
        self._bases: dict[str, tuple[str, str]] = {}
        self._bases_lock = threading.Lock()
        # the queue as last worked out, and one working out at a time shared by the reads that come meanwhile: each
        # read of a queued job (a job's page, a list, every `submit --wait` poll) weighed every active job anew, and
        # ten at once took ten times as long (:meth:`_shared_queue`)
        self._queue_last: _Queue | None = None
        self._queue_run = _SharedRun(self._queue_now)

    def _commit(self, change: Change) -> Job:
        """Commit, then hand each of its events to ``on_event`` (which queues and returns). A job or attempt in a
        state a newer broker set is not written back (409 saying so): it is that broker's to change."""
        try:
            stored = self.store.commit(change)
        except ForeignRecord as exc:
            raise Conflict(str(exc), field="state") from None
        if self.on_event:
            for e in change.events:
                try:
                    self.on_event(e, stored)
                except Exception:  # a notification never fails the request that changed the job
                    log.exception("event hook failed")
        return stored

    def _changeable(self, job: Job) -> Job:
        """The job, if this version may change it: one in a state a newer broker set, or whose latest attempt is
        in one, is refused (409) up front, with the reason the store gives, rather than with a rule of this
        version about states it knows. The attempt counts too: a queued job cancelled here would go straight
        to ``cancelled`` (final), and the newer broker, which may hold that attempt live, would never stop it."""
        attempts = self.store.attempts(job.id)[-1:] if job.attempts else []
        try:
            check_writable(Change(job=job, expected_version=job.version, attempts=attempts))
        except ForeignRecord as exc:
            raise Conflict(str(exc), field="state") from None
        return job

    # -- submit ----------------------------------------------------------------------------------

    def submit(self, principal: Principal, raw: dict[str, Any], *, idempotency_key: str | None = None) -> tuple[Job, bool]:
        """Admit a job; returns (job, created). A repeated Idempotency-Key returns the first job."""
        for _ in range(CAS_RETRIES):
            now = self.clock()
            found = self._admission(principal, raw, idempotency_key=idempotency_key, now=now)
            if found.existing is not None:
                return found.existing, False
            spec, team, admitted = found.spec, found.team, found.admitted
            job_id = admitted.job.id
            sealed = self._sealed(admitted.job.spec, job_id)
            try:
                job = self._commit(Change(job=replace(admitted.job, spec=sealed), expected_version=None,
                                          events=[admitted.event], team_fence=found.fence))
                break
            except VersionConflict:  # another submit, resume or raise of the team was weighed against its cap since
                continue
            except DuplicateJob as dup:
                existing = self.store.get_job(dup.existing_id)
                if existing is not None and idempotency_key is not None and existing.team == team \
                        and existing.idempotency_key == idempotency_key:  # the same key's submit, committed first
                    return _same_submit(existing, spec, self.settings, now, self.store.events(existing.id)), False
                # the random id drawn is taken (another job's, or a pruned job's still being deleted): never answer
                # with that job; submit again under a new id
                return self.submit(principal, raw, idempotency_key=idempotency_key)
        else:
            raise Conflict(f"team {team}'s jobs are being submitted too fast to weigh this one against the team's "
                           "monthly cap; try again", field="broker.budget_usd")
        return job, True

    def _admission(self, principal: Principal, raw: dict[str, Any], *, idempotency_key: str | None,
                   now: float) -> _Admission:
        """Every check of a submit, and its admission (:func:`broker.admission.admit`), writing nothing: shared by
        :meth:`submit` and :meth:`submit_dry_run`, so that a dry run is refused exactly where a submit is, with the
        same field and sentence, and quotes what the submit then stores."""
        checked = self._check_named_base_first(principal, raw)
        try:
            spec = parse(raw, now=now)
        except SpecError as exc:
            raise Invalid(exc.field, exc.reason) from None
        if spec.broker.deadline is not None and spec.broker.expected_hours is not None:
            far = self._out_of_reach(spec.broker.deadline, now, spec.broker.expected_hours,
                                     offers=matching_offers(spec.request, all_offers(self.settings)))
            if far is not None:
                raise Invalid("broker.deadline", far)
        # a pool the broker has not (infra: local/dgx), in its own words before SkyPilot's: to SkyPilot `local` is no
        # cloud, and a broker with no pools answered with its schema error and its whole pattern of cloud names
        unknown_pool = local_pool_refusal(spec.task.get("resources"), [pool.name for pool in self.settings.pools])
        if unknown_pool is not None:
            raise Invalid(unknown_pool.field, unknown_pool.reason)
        try:
            validate_task(self.settings, spec.task)
        except ValueError as exc:  # SkyPilot's own message, naming the field (never a secret's value)
            reason = redact(getattr(exc, "reason", str(exc)), secret_values(spec.task))
            raise Invalid(getattr(exc, "field", "body"), reason) from None
        team = spec.broker.team or principal.team or self.settings.default_team
        if not principal.admin and team != principal.team:
            raise Invalid("broker.team", f"you can submit only for your team ({principal.team})", status=403)
        if self.settings.teams and team not in self.settings.teams and team != self.settings.default_team:
            known = ", ".join(sorted({*self.settings.teams, self.settings.default_team}))
            raise Invalid("broker.team", f"there is no team {team!r} (teams: {known})")
        most = getattr(self.settings.teams.get(team), "max_priority", None)
        if not principal.admin and most is not None and spec.broker.priority > most:
            section = raw.get("broker") if isinstance(raw, dict) else None
            if not (isinstance(section, dict) and "priority" in section):
                # none given: the team's highest, below the default 0 (every submit of a team capped at -10 that gave
                # no priority was refused for a broker.priority it did not give)
                spec = replace(spec, broker=replace(spec.broker, priority=most))
            else:
                raise Invalid("broker.priority", f"is {spec.broker.priority}, above the most team {team} may give, "
                                                 f"{most} (teams.{team}.max_priority in the broker's config): give at "
                                                 f"most {most}, or ask an admin to submit it", status=403)
        if not self.may_name_host_paths(principal):
            for field, path in host_paths(spec.task)[:1]:
                raise Invalid(field, f"names {path!r}, a path on the broker's host, which only an admin's submit may "
                                     "(the launcher would read it there, and SkyPilot upload it to the job's cluster): "
                                     "`broker submit` uploads the workdir and local file_mounts sources instead "
                                     "(--upload-workdir)", status=403)
            for field, what in admin_only_settings(spec.task)[:1]:
                raise Invalid(field, f"is {what}, which only an admin's submit may set: the cluster runs on the "
                                     "broker's cloud and cluster credentials, shared by every team (a team may set "
                                     f"config: {', '.join(sorted('.'.join(k) for k in TEAM_CONFIG_KEYS))})",
                              status=403)
        if idempotency_key is not None:
            if not 1 <= len(idempotency_key) <= 200:
                raise Invalid("Idempotency-Key", "must be 1 to 200 characters")
            existing = self.store.find_idempotent(team, idempotency_key)
            if existing is not None:
                return _Admission(spec, team, None, _same_submit(existing, spec, self.settings, now,
                                                                 self.store.events(existing.id)))
        if spec.broker.checkpoint is not None:
            if spec.broker.checkpoint != checked:
                self._check_base_theirs(principal, spec.broker.checkpoint, team)
            self._check_base_free(principal, spec.broker.checkpoint, team, now)
        if spec.broker.workdir is not None:
            self._check_workdir(spec.broker.workdir)
        for destination, value in sorted((spec.broker.file_mounts or {}).items()):
            self._check_mount(destination, value)
        job_id = new_job_id()
        offers = all_offers(self.settings)
        if spec.request.num_nodes > 1 and not matching_offers(spec.request, offers) \
                and matching_offers(replace(spec.request, num_nodes=1), offers):
            raise Invalid("num_nodes", f"is {spec.request.num_nodes}, but an on-prem pool runs a job on one node (this host) "
                                       "and no cloud or zone of this broker offers these resources; ask for one node "
                                       "with all the GPUs in resources.accelerators")
        budget = spec.broker.budget if spec.broker.budget is not None else self.settings.budget_for(team)
        checkpoint = spec.broker.checkpoint or f"{self.settings.checkpoint_root.rstrip('/')}/{job_id}"

        def admitted_with(amount: int) -> Admitted:
            return admit(spec, job_id=job_id, team=team, budget=amount, offers=usable_by(offers, spec.request), now=now,
                         actor=principal.name, checkpoint_uri=checkpoint, idempotency_key=idempotency_key,
                         min_run_seconds=self._stop_seconds(),
                         after_run_seconds=after_run(self.launcher, offers))

        try:
            admitted = admitted_with(budget)
        except Refused as exc:
            raise Invalid(exc.field, str(exc)) from None

        def fits_words(fits: int) -> str:
            """What fits, when it runs the job: "give it at most $0.0008" was then refused for the estimate."""
            try:
                admitted_with(fits)
            except Refused as exc:
                return (f"the {fmt_left(fits)} free would not run this job ({exc}): wait for the team's jobs to end, "
                        "or cancel one or lower its budget")
            return f"give broker.budget_usd at most {fmt_left(fits)}, or wait for the team's jobs to end"

        capped = self._capped(team)
        # the count read before the standing: a change committed after it conflicts (no read for a team with no cap)
        fence = self.store.team_admissions(team) if capped else 0
        standing = self.team_standing(team, now) if capped else None
        if standing is not None:
            why = refusal(standing, budget, what=f"this job's {fmt_limit(budget)} budget", instead=fits_words)
            if why is not None:
                raise Invalid("broker.budget_usd", why)
        return _Admission(spec, team, admitted, None, (team, fence) if standing is not None else None)

    def monthly_caps(self, team: str | None, now: float) -> list[dict]:
        """Where each team in view (``team``; ``None``: every configured team) with a monthly cap stands this month,
        as ``GET /v1/costs``' ``monthly_caps`` and Slack's ``costs`` show it."""
        capped = [team] if team is not None else sorted(self.settings.teams)
        return [s.record() for t in capped if (s := self.team_standing(t, now)) is not None]

    def _capped(self, team: str) -> bool:
        return team in self.settings.teams and self.settings.teams[team].monthly_budget is not None

    def team_standing(self, team: str, now: float, *, spent: int | None = None) -> TeamMonth | None:
        """Where ``team`` stands against its monthly cap (:mod:`broker.team_budget`); ``None`` when it has none. Its
        jobs not ended are read before its spend, so spending between the two reads is counted twice (never in
        neither): the standing errs toward less free. ``spent``: the team's spend this month where the caller read
        it already (``/metrics``, from the cost records its scrape reads: read before the jobs, it may err toward
        more free, which a gauge may and an admission must not), else it is read here: the month's cost report's
        total (:func:`broker.costs.spent`: the report's figure, without the rest of the report)."""
        if not self._capped(team):
            return None
        cap = self.settings.teams[team].monthly_budget
        jobs = self.store.list_jobs(team=team, active_since=now, limit=100_000)  # those not final (and a few more)
        month = month_of(now)
        if spent is None:
            win = costs.Window(month.since, month.until, month.name)
            history = costs.gather(self.store, team=team, win=win, retention_days=self.settings.job_retention_days)
            spent = costs.spent(history.jobs, history.attempts, win=win, team=team, ledger=history.ledger)
        return team_month(team, cap, month, jobs, spent)

    def _sealed(self, spec: dict[str, Any], job_id: str, *, create: bool = True) -> dict[str, Any]:
        """``spec`` with its secrets' values sealed, as they are stored (broker/sealing.py), opened only for a launch.
        ``create=False`` (a dry run): no key file is made where there is none yet, and the secrets stay as given;
        a key that is there but cannot be used refuses the dry run as it refuses the submit."""
        if not spec.get("secrets"):
            return spec
        try:
            sealer = sealer_for(self.settings, create=create)
            return seal_spec(spec, sealer, job_id) if sealer is not None else spec
        except (KeyInvalid, OSError) as exc:
            raise Conflict(f"the job was not stored: this broker cannot seal its secrets ({exc})") from None

    def submit_dry_run(self, principal: Principal, raw: dict[str, Any], *,
                       idempotency_key: str | None = None) -> DryRun:
        """What :meth:`submit` would do with this task, storing nothing: no job, no event, no Idempotency-Key taken,
        no secrets key made (``sky launch --dryrun`` for the broker). Refused where the submit is refused, with the
        same :class:`Invalid` or :class:`Conflict` (both go through :meth:`_admission`), so a CI job can check task
        files with it; else the job the submit would queue, with the quote the submit stores, where the scheduler
        would place it now and where it would stand in the queue. Two brokers, or a submit between the dry run and
        the real one, may change the placement and the queue; the quote and the refusals follow the task alone."""
        now = self.clock()
        found = self._admission(principal, raw, idempotency_key=idempotency_key, now=now)
        if found.existing is not None:
            job = found.existing
            q = self.queue_waits(principal)
            return DryRun(job, True, job.placement or None, job.reason or "", q.positions.get(job.id),
                          q.starts.get(job.id), q.waiting.get(job.id), self._stop_seconds())
        job = found.admitted.job
        self._sealed(job.spec, job.id, create=False)
        decision = self._decision_now(job, now)
        if isinstance(decision, Place):
            _, positions_, _ = self._waits(extra=[job])
            return DryRun(job, False, decision.placement, decision.reason, positions_.get(job.id), now, None,
                          self._stop_seconds())
        job = replace(job, reason=decision.reason)  # what the queue's estimate reads: whether it waits for capacity
        _, positions_, found_waits = self._waits(extra=[job])
        team = None if principal.admin else principal.team or ""
        holders = found_waits.holders.get(job.id)
        # what the queue would add (queue_waits): what holds its capacity, or by when it moves off spot's wait
        waiting = holders_words(holders, team) if holders else None
        return DryRun(job, False, None, decision.reason, positions_.get(job.id), found_waits.starts.get(job.id),
                      waiting if waiting is not None else self._spot_latest(job, now), self._stop_seconds())

    def _stop_seconds(self) -> int:
        """What a clean stop takes, as the engine keeps it of every budget (:func:`broker.engine.budget.reserve_seconds`):
        what a start, a resume and a lowered budget must leave room for, and what a dry run's tiers are covered with."""
        return reserve_seconds(self.settings.stop_grace_seconds, self.settings.tick_seconds)

    def _decision_now(self, job: Job, now: float) -> Place | Wait:
        """What the scheduler would decide for ``job`` (not stored) if the engine's tick ran now: its own
        :func:`~broker.engine.schedule.schedule`, over the queue with the job in it, against the capacity the jobs
        placed and running hold, with the engine's settings. Each queued job's spot policy starts fresh here (the
        engine's have watched spot capacity a while), so a deadline job's tier is its policy's first word."""
        jobs = self.store.list_jobs(states=[s.value for s in _HOLDING], limit=100_000)
        mk = market(self.settings, [j for j in jobs if j.state.is_active],
                    getattr(self.launcher, "availability", dict)(), now=now)
        queued = [*(j for j in jobs if j.state is JobState.QUEUED), job]
        ran = [j.id for j in queued if j.attempts]
        attempts = self.store.attempts_of(ran) if ran else {}
        decisions = schedule_now(queued, mk, self.settings, self.launcher, now=now,
                                 policies={j.id: make_policy() for j in queued},
                                 attempts_of=lambda job_id: attempts.get(job_id, ()))
        return next(d for d in decisions if d.job.id == job.id)

    def _sharing(self, base: str, now: float, but: str | None = None) -> Job | None:
        """A job not final (other than ``but``) whose checkpoint base is ``base``, as the library reads bases."""
        wanted = checkpoint_base(base)
        for other in self.store.list_jobs(active_since=now, limit=100_000):
            if other.id != but and not other.state.is_final and other.checkpoint_uri \
                    and checkpoint_base(other.checkpoint_uri) == wanted:
                return other
        return None

    def _check_base_theirs(self, principal: Principal, base: str, team: str) -> None:
        """A ``broker.checkpoint`` the submitter may name (403 or 422 otherwise): :meth:`_check_base_place`, and for
        a team, no base another team's job still stored has used, whether that job lives or has ended (a team named
        the base another team chose, once that job had succeeded, and its first attempt restored the other team's
        weights). The refusal names neither that job nor its state: it tells the team to name another base."""
        self._check_base_place(principal, base, team)
        if not principal.admin and self._used_by_another_team(base, team):
            raise _others_base(base)

    def _check_base_place(self, principal: Principal, base: str, team: str) -> None:
        """Where a ``broker.checkpoint`` may be, read from its text alone (nothing on the host or in a bucket is
        looked at). For every submitter, not in the broker's store of workdir packs (a team read every team's code
        there, and a job's retention or a partial write would damage packs). For a team (403 otherwise, an admin's
        is not held to this): not the broker's checkpoint root itself, nor inside the base the broker gave another
        team's job there (a team continued, and wrote into, another team's finished job's checkpoints), nor a path
        on the broker's host outside the root (the runner wrote ``step-*`` folders into ``/etc``). A base under the
        root for one of the team's own jobs (to continue a cancelled one), a new name under it, and a bucket URL
        are the team's to name."""
        given, root = checkpoint_base(base), checkpoint_base(self.settings.checkpoint_root)
        packs = checkpoint_base(f"{self.settings.checkpoint_root.rstrip('/')}/workdirs")  # broker.workdir_store's
        if given == packs or given.startswith(packs + "/"):
            raise Invalid("broker.checkpoint", f"{base!r} is in the broker's store of uploaded workdir packs "
                                               f"({packs}), which holds every team's code: a job's checkpoints may "
                                               "not be read or written there. Leave broker.checkpoint out (the job "
                                               "gets a base of its own) or name another base")
        if principal.admin:
            return
        if given == root:
            raise Invalid("broker.checkpoint", f"{base!r} is the broker's checkpoint root, which holds every job's "
                                               "checkpoints: leave broker.checkpoint out (the job gets a base of its "
                                               "own inside it) or name a base of your own", status=403)
        if given.startswith(root.rstrip("/") + "/"):
            first = given[len(root.rstrip("/")) + 1:].split("/", 1)[0]
            other = self.store.get_job(first)
            # a name of the broker's job ids that is no job of the team's is refused whether or not the job exists:
            # refused only where it existed, the answer told a team which other teams' job ids there were (and a
            # name of that form taken now could be a later job's own base)
            if (other is not None and other.team != team) or (other is None and _JOB_ID_FORM.fullmatch(first)):
                raise Invalid("broker.checkpoint", f"{base!r} is inside the checkpoint base of a job of another team "
                                                   "or of no job: under the broker's checkpoint root, a team names "
                                                   "the base of one of its own jobs, or a name not of the job-id "
                                                   "form (j-…); leave broker.checkpoint out, or name a base of your "
                                                   "own", status=403)
        elif given.startswith("file://") and not self._own_base(given, team):
            raise Invalid("broker.checkpoint", f"{base!r} is a path on the broker's host outside its checkpoint root "
                                               f"({self.settings.checkpoint_root}), which only an admin's submit may "
                                               "name: leave broker.checkpoint out, or name a bucket (s3://, gs://) "
                                               "or a base inside the root", status=403)

    def _check_named_base_first(self, principal: Principal, raw: Any) -> str | None:
        """A team's ``broker.checkpoint`` that is a path on the broker's host, checked by :meth:`_check_base_theirs`
        before the task is parsed, and returned (``None`` where there is none to check). The parse looks at the
        path on the host (:func:`broker.spec.checkpoint_uri_problem`: a file there is refused, 422), and a team's
        token learned from the two answers which files the host had outside the checkpoint root
        (``file:///etc/passwd``: "a file"; ``file:///etc/nonexistent``: "outside its checkpoint root"). Refused
        first, a team is answered the same whatever is there. A value the parse refuses by its text alone (too long,
        not a string) is left to the parse, which says so."""
        section = raw.get("broker") if isinstance(raw, dict) else None
        given = section.get("checkpoint") if isinstance(section, dict) else None
        if principal.admin or not isinstance(given, str) or not given.strip() or len(given) > MAX_CHECKPOINT_URI:
            return None
        given = given.strip()
        if not checkpoint_base(given).startswith("file:///"):  # a bucket, or a relative path: nothing on the host
            return None
        self._check_base_theirs(principal, given, principal.team or self.settings.default_team)
        return given

    def _used_by_another_team(self, base: str, team: str) -> bool:
        """Whether a stored job of a team other than ``team`` has ``base`` as its checkpoint base, or a base that
        ``base`` is inside (a base inside another's is written into that job's folders, and one of its ``step-*``
        folders is its checkpoint), as the library reads bases."""
        wanted = checkpoint_base(base)
        for other_team, used in self._stored_bases().values():
            if used and other_team != team and (wanted == used
                                                or wanted.startswith(used if used.endswith("/") else used + "/")):
                return True
        return False

    def _stored_bases(self) -> dict[str, tuple[str, str]]:
        """Every stored job's team and checkpoint base (``""``: none), by id. The store has no index of bases, and
        a submit decoding every job stored was slow with many: the ids are read from the store's index (nothing
        decoded), a pruned job's base is forgotten (free again), and only the jobs this process has not read are
        decoded — one by one while they are few (those submitted since the last submit that named a base), else
        in pages of the whole listing (the first, after a start)."""
        def entry(job: Job) -> tuple[str, str]:
            return job.team, checkpoint_base(job.checkpoint_uri) if job.checkpoint_uri else ""

        with self._bases_lock:
            ids = self.store.job_ids()
            known = {job_id: seen for job_id, seen in self._bases.items() if job_id in ids}
            new = ids - known.keys()
            if len(new) > _BASES_ONE_BY_ONE:
                page = self.store.list_jobs(limit=1000)
                while page:
                    known.update((job.id, entry(job)) for job in page if job.id in ids)
                    page = self.store.list_jobs(limit=1000, before=(page[-1].submitted_at, page[-1].id))
            else:
                for job_id in new:
                    if (job := self.store.get_job(job_id)) is not None:
                        known[job_id] = entry(job)
            self._bases = known
            return known

    def _own_base(self, given: str, team: str) -> bool:
        """Whether ``given`` is the very checkpoint base the broker gave one of ``team``'s own jobs, under a checkpoint
        root since moved: ``broker status`` tells a cancelled or failed job to be submitted again with it, and the
        team was refused (403) for naming it once the operator changed ``checkpoint_root``."""
        name = given.rstrip("/").rsplit("/", 1)[-1]
        job = self.store.get_job(name) if _JOB_ID_FORM.fullmatch(name) else None
        return job is not None and job.team == team and bool(job.checkpoint_uri) \
            and checkpoint_base(job.checkpoint_uri) == given

    def _check_base_free(self, principal: Principal, base: str, team: str, now: float) -> None:
        """Two live jobs on one checkpoint base lose each other's checkpoints (each one's retention takes the
        other's for its own) and a restore may take the other's. The check is a read before the submit's write,
        not part of it: two submits racing on two brokers may both pass; the checkpoint library then keeps each
        job's retention to its own checkpoints (docs/checkpoint.md). Another team's job is refused to a team by
        :meth:`_check_base_theirs` already (one stored between the two reads too, here), never named."""
        other = self._sharing(base, now)
        if other is None:
            return
        if not principal.admin and other.team != team:
            raise _others_base(base)
        raise Invalid("broker.checkpoint", f"{base!r} is the checkpoint base of job {other.id}, which is "
                                           f"{other.state.value}: two jobs writing one base delete each other's "
                                           "checkpoints, and a restore may take the other's. Leave broker.checkpoint "
                                           "out (each job gets a base of its own), name another base, or wait until "
                                           "that job ends (cancel it) and submit again to continue from its "
                                           "checkpoints", status=409)

    # -- workdir packs ---------------------------------------------------------------------------

    @property
    def workdirs(self):
        if self._workdirs is None:
            from broker.workdir_store import WorkdirStore

            self._workdirs = WorkdirStore(self.settings)
        return self._workdirs

    def _stored_size(self, digest: str, field: str) -> int | None:
        try:
            return self.workdirs.size(parse_digest(digest))
        except PackError as exc:
            raise Invalid(field, str(exc)) from None
        except OSError as exc:
            raise Invalid(field, f"the store of workdir packs ({self.workdirs.root}) did not answer: {exc}; "
                                 "nothing was changed: retry in a moment", status=503) from None

    def _check_workdir(self, digest: str) -> None:
        """A job may name only a pack that is there: one missing at launch would fail every attempt."""
        if self._stored_size(digest, "broker.workdir") is None:
            raise Invalid("broker.workdir", f"no uploaded workdir {digest} on this broker: upload it first "
                                            f"(PUT /v1/workdirs/{digest}; `broker submit` does it for you)")

    def _check_mount(self, destination: str, value: str) -> None:
        """The same for an uploaded ``file_mounts`` source (each pack within ``max_workdir_bytes`` on its own:
        the upload checked it)."""
        field = f"broker.file_mounts.{destination}"
        digest = "sha256:" + parse_mount(value)[0]  # well formed: the spec was parsed
        if self._stored_size(digest, field) is None:
            raise Invalid(field, f"no uploaded pack {digest} on this broker: upload it first "
                                 f"(PUT /v1/workdirs/{digest}; `broker submit` does it for you)")

    def _resumable_workdir(self, job: Job) -> None:
        """A resumed job runs its uploaded workdir (and file_mounts) again: refused, saying so, when a pack was
        collected (its job ended more than ``workdir_retention_seconds`` ago), rather than failing at launch."""
        section = job.spec.get("broker") or {}
        named = [("workdir", section["workdir"])] if section.get("workdir") else []
        mounts = section.get("file_mounts")
        for dest, value in sorted(mounts.items() if isinstance(mounts, dict) else ()):
            try:
                named.append((f"file_mounts {dest}", "sha256:" + parse_mount(value)[0]))
            except PackError:  # a form this version cannot read (a newer broker's): the launch will say so
                continue
        for what, digest in named:
            field = "broker." + what.replace(" ", ".")  # broker.workdir, broker.file_mounts.<dest>: a submit's names
            if self._stored_size(digest, f"broker.{what.split()[0]}") is None:
                days = self.settings.workdir_retention_seconds / 86400
                raise Conflict(f"not resumed: its uploaded {what} {digest} is no longer stored (a pack is kept "
                               f"{days:g} days after the last job naming it ended: workdir_retention_seconds); submit "
                               f"the job again with its files", field=field)

    def workdir(self, principal: Principal, digest: str) -> dict[str, Any]:
        """An uploaded pack's size; 404 when there is none. Packs are named by their content's SHA-256,
        which only someone holding the content knows, so any caller may ask."""
        size = self._stored_size(digest, "digest")
        if size is None:
            raise Invalid("digest", f"no uploaded workdir {digest}", status=404)
        return {"digest": digest, "bytes": size, "max_bytes": self.settings.max_workdir_bytes}

    def upload_workdir(self, principal: Principal, digest: str, body: Path, size: int, sha256: str) -> tuple[dict, bool]:
        """Store a pack the API received at ``body`` (``size`` bytes, hashed to ``sha256`` on the way in)
        after checking it is the pack it claims to be and unpacks safely; (answer, created)."""
        try:
            hex_digest = parse_digest(digest)
        except PackError as exc:
            raise Invalid("digest", str(exc)) from None
        if sha256 != hex_digest:
            raise Invalid("digest", f"the body's SHA-256 is sha256:{sha256}, not {digest}: the upload was changed "
                                    "or cut short, or the digest is wrong")
        answer = {"digest": digest, "bytes": size, "max_bytes": self.settings.max_workdir_bytes}
        if self._stored_size(digest, "digest") is not None:
            return answer, False
        with tempfile.TemporaryDirectory(prefix="broker-workdir-check-") as scratch:
            try:  # unpacked the way a launch will, then thrown away
                files, unpacked = unpack(body, Path(scratch) / "w", max_bytes=self.settings.max_workdir_bytes * UNPACK_RATIO)
            except PackError as exc:
                raise Invalid("body", f"the pack {exc}") from None
            except OSError as exc:  # the broker's own disk (full, say), not the pack: try again later
                raise Invalid("body", f"the broker could not unpack it to check it ({exc.strerror or exc}); retry in "
                                      "a moment", status=503) from None
        try:
            self.workdirs.put(hex_digest, body)
        except OSError as exc:
            raise Invalid("body", f"the store of workdir packs ({self.workdirs.root}) refused it: {exc}; retry "
                                  "in a moment", status=503) from None
        log.info("workdir pack %s stored by %s: %d bytes, %d files, %d bytes unpacked", digest, principal.name, size,
                 files, unpacked)
        return {**answer, "files": files}, True

    # -- read ------------------------------------------------------------------------------------

    def get(self, principal: Principal, job_id: str) -> Job:
        job = self.store.get_job(job_id)
        if job is None or not principal.can_see(job.team):
            recent = self.store.list_jobs(team=None if principal.admin else principal.team, limit=LIKE_RECENT)
            raise NotFound(job_id, ids_like(job_id, [j.id for j in recent]))
        return job

    def list(self, principal: Principal, *, state: str | None = None, team: str | None = None,
             limit: int = 200, states: Sequence[JobState] | None = None,
             active_since: float | None = None, before: tuple[float, str] | None = None,
             name: str | None = None) -> list[Job]:
        """``principal``'s jobs (an admin's: any team's, or ``team``'s), newest first; ``state`` is a job state's
        name as a user typed it, or several with commas between (``queued,running``, as ``squeue -t PD,R``; each
        checked), ``states`` a set of them from code. ``name``: only jobs whose name begins so (checked as a name
        is: a prefix of a name is one). ``active_since``: only jobs still live or last changed since then
        (:meth:`JobStore.list_jobs`: an ended job's last change is its end). ``before``: only jobs after this place
        in the order, ``(submitted_at, id)`` (a page's cursor)."""
        wanted = (typed_states(state) if state is not None
                  else [s.value for s in states] if states is not None else None)
        if name is not None:
            try:
                check_name(name)
            except SpecError as exc:
                raise Invalid("name", f"is the start of a job's name, so it {exc.reason}") from None
        if not principal.admin:
            if team and team != principal.team:  # was an empty list, as if that team had no jobs
                raise Invalid("team", f"you can see only your team's jobs ({principal.team})", status=403)
            team = principal.team
        self.check_team(team)
        return self.store.list_jobs(states=wanted, team=team, limit=limit, active_since=active_since, before=before,
                                    name_prefix=name)

    @staticmethod
    def may_name_host_paths(principal: Principal) -> bool:
        """Whether a submit of ``principal``'s may name paths on the broker's host (a workdir, a file_mounts
        source): an admin's only. A team's token reaches the broker from anywhere, and the broker's disk holds
        what no team should read (its cloud credentials, the secrets key, other jobs' copies)."""
        return principal.admin

    def check_team(self, team: str | None) -> None:
        """A team filter naming no team the broker knows — not in its config, no job ever submitted for it (a
        team taken out of the config, or any team where none are configured, still has its jobs) — is refused
        with the teams there are: a typo read as a team with nothing to show."""
        known = {*self.settings.teams, self.settings.default_team}
        if not team or team in known or self.store.list_jobs(team=team, limit=1):
            return
        raise Invalid("team", f"there is no team {team!r} (teams: {', '.join(sorted(known))})")

    def events(self, principal: Principal, job_id: str) -> list[Event]:
        self.get(principal, job_id)
        return self.store.events(job_id)

    def attempts(self, principal: Principal, job_id: str) -> list[Attempt]:
        self.get(principal, job_id)
        return self.store.attempts(job_id)

    def queue_positions(self) -> dict[str, int]:
        return positions(self.store.list_jobs(states=[JobState.QUEUED.value], limit=100_000))

    def queue(self) -> tuple[dict[str, int], dict[str, float]]:
        """Queue positions and rough start estimates (epoch seconds) of queued jobs (shared: to be read only)."""
        q = self._shared_queue()
        return q.positions, q.waits.starts

    def queue_waits(self, principal: Principal | None = None, *, of: Sequence[Job] | None = None,
                    fresh: bool = False) -> QueueWaits:
        """:meth:`queue`, and for each queued job waiting for capacity that gets no estimate because what it needs
        is held until ends nobody can tell, what it waits for in words (``waiting``, for
        :func:`broker.views.job_view`): its estimate vanished unsaid while a job ran past its expected length; and for
        one its spot policy keeps waiting for spot with a deadline, by when it moves off (:meth:`_spot_latest`).
        Said to ``principal`` (a team's member: other teams' jobs are not named to it; an admin or None: all are).
        ``of``: the jobs a view shows; when none of them is queued, the queue is not worked out (nothing of it is
        shown), and the answer is empty — reading a running or ended job read and weighed every active job, a
        quarter of a second at 3,000 queued. The queue is worked out once for the reads that come together, and
        reused while nothing it is worked out from changed (:meth:`_shared_queue`; its ``positions`` and ``starts``
        are shared, to be read only); ``fresh``: worked out for this read alone, as every read did before (what a
        test or a benchmark compares the shared answer with)."""
        if of is not None and not any(job.state is JobState.QUEUED for job in of):
            return QueueWaits({}, {}, {}, {})
        q = self._queue_at(*self._queue_read()) if fresh else self._shared_queue()
        team = None if principal is None or principal.admin else principal.team or ""
        # by list: the jobs waiting for the same holders share one (Waits), put in words once per team and queue
        said = q.words.setdefault(team, {})
        waiting = {}
        for job_id, holders in q.waits.holders.items():
            if id(holders) not in said:
                said[id(holders)] = holders_words(holders, team)
            if said[id(holders)] is not None:
                waiting[job_id] = said[id(holders)]
        now = self.clock()  # this read's own: "passed … ago" is told to the second
        queued = {}
        for job in q.jobs:
            if job.state is not JobState.QUEUED:
                continue
            queued[job.id] = job
            if job.id not in waiting and job.id in q.spot:
                waiting[job.id] = q.spot[job.id]
            if passed := passed_words(job, now):  # first: what it waits for after it, as before
                waiting[job.id] = f"{passed}; {waiting[job.id]}" if job.id in waiting else passed
        return QueueWaits(q.positions, q.waits.starts, waiting, queued)

    def _shared_queue(self) -> _Queue:
        """The queue as every reader sees it now: one working out for all the reads that come while another runs
        (:class:`_SharedRun`: each of them gets one whose store read began after it came), which reuses the last one
        while nothing it is worked out from changed (:meth:`_queue_now`). Ten reads of a queued job at once each
        weighed every active job (0.67 s each at 1,100 queued), and twenty ``submit --wait`` followers kept a core
        busy weighing the same queue."""
        return self._queue_run()

    def _queue_now(self) -> _Queue:
        """The queue worked out from the store and launcher as they are now, or the last one where it was worked
        out from the same: the same active jobs at the same versions (every commit moves a job's version, its
        attempts' included), the same spot availability and settings, and no more than :data:`QUEUE_REUSE_SECONDS`
        (or a tick) ago by the service's clock — the estimates are counted from then. A job just submitted, or one
        that just left the queue, changes what is read, and the queue is worked out anew."""
        jobs, availability, now = self._queue_read()
        last = self._queue_last
        if (last is not None and last.settings is self.settings and last.availability == availability
                and 0 <= now - last.at <= min(self.settings.tick_seconds, QUEUE_REUSE_SECONDS)
                and last.fingerprint == tuple((job.id, job.version) for job in jobs)):
            return last
        self._queue_last = q = self._queue_at(jobs, availability, now)
        return q

    def _queue_read(self) -> tuple[list[Job], dict, float]:
        """What the queue is worked out from: the jobs holding or waiting for capacity, the launcher's spot
        availability, and the time."""
        jobs = self.store.list_jobs(states=[s.value for s in _HOLDING], limit=100_000)
        availability = getattr(self.launcher, "availability", dict)()
        return jobs, availability, self.clock()

    def _queue_at(self, jobs: list[Job], availability: dict, now: float) -> _Queue:
        """The queue worked out from what :meth:`_queue_read` read: what of it is the same for every viewer."""
        positions_, found = self._weigh(jobs, availability, now)
        reliable: dict[tuple, Any] = {}  # per shape (placeable_key): the on-demand or pool offers that fit it
        spot = {job.id: words for job in jobs
                if job.state is JobState.QUEUED and (words := self._spot_latest(job, now, reliable))}
        return _Queue(tuple((job.id, job.version) for job in jobs), availability, self.settings, now, jobs,
                      positions_, found, spot, {})

    def _spot_latest(self, job: Job, now: float, reliable: dict[tuple, Any] | None = None) -> str | None:
        """For a queued job with a deadline that its spot policy keeps waiting for spot: roughly when, if spot does
        not come, its safety net moves it to the reliable tier to meet the deadline — its deadline less its work left,
        a changeover and a tick (:func:`pricing.deadline.is_safe`; the changeover the job measured may differ).
        Such a job gets no start estimate, and "waits for spot" alone left its user to guess whether it would start
        in time. A job that has no reliable tier to move to is told instead that, if spot has not come by then, it
        cannot meet its deadline, and why: no on-demand or pool offer fits it (``use_spot: true``: spot only), or its
        budget left does not pay for one (the expected run left and a clean stop, as ``broker ondemand`` refuses it:
        :meth:`_budget_shortfall`) — both were told they would move to on-demand, which ``broker ondemand`` then
        refused. Such a job is told so too once its policy has sent it to the reliable tier it cannot use, and it waits
        for the spot zones its budget covers ("zones … are busy right now, and they are what the budget covers" said
        nothing of its deadline). ``reliable``: what is worked out per shape, kept across the jobs of one read.
        The dry run says the same of the job it would queue (:meth:`submit_dry_run`)."""
        if job.deadline is None or now >= job.deadline or not job.reason.startswith("waiting: "):
            return None
        spot_wait = job.reason.startswith(SPOT_WAIT)
        work = work_left_seconds(job)
        if work is None:
            return None
        seen = {} if reliable is None else reliable
        fallback = self._no_fallback(job, now, seen)
        if not spot_wait and (fallback is None or not self._spot_payable(job, now, seen)):
            return None  # it waits for something else than spot (a pool, its budget), or it has a tier to move to
        latest = job.deadline - work - self.settings.changeover_seconds - self.settings.tick_seconds
        if fallback is None:
            if latest <= now:
                return None
            return f"if spot does not come, it moves to on-demand (or a free pool) by about {minute(latest)} to meet " \
                   "its deadline"
        if not spot_wait and fallback.startswith("its budget does not cover"):
            fallback = "its budget covers only spot"  # its reason says already what the budget does not cover
        if latest <= now:
            return f"{fallback}: it needed spot by about {minute(latest)} to meet its deadline, and may miss it now"
        return f"{fallback}: if spot does not come by about {minute(latest)}, it cannot meet its deadline"

    def _no_fallback(self, job: Job, now: float, seen: dict[tuple, Any]) -> str | None:
        """Why ``job`` has no reliable tier to move to if spot does not come, in words, or ``None`` when it has one:
        no on-demand or pool offer is among those the scheduler may place it on
        (:func:`~broker.engine.schedule.placeable`), or its budget left pays for none of them — the expected run
        left and a clean stop, as :meth:`switch_to_ondemand` refuses the move (:meth:`_budget_shortfall`)."""
        request, key, offers = self._placeable_seen(job, now, seen)
        mine = [o for o in offers if o.tier in (Tier.ONDEMAND, Tier.ONPREM)]
        if not mine:
            return "it may run only on spot (no on-demand or pool offer fits it)"
        paid = ("reliable", key, job.budget - job.spent, left_to_run(job, request))
        if paid not in seen:
            seen[paid] = self._budget_shortfall(job, mine)
        if seen[paid] is None:
            return None
        tiers = {o.tier for o in mine}
        what = "a pool" if tiers == {Tier.ONPREM} else "on-demand or a pool" if Tier.ONPREM in tiers else "on-demand"
        return f"its budget does not cover {what} ({seen[paid]})"

    def _spot_payable(self, job: Job, now: float, seen: dict[tuple, Any]) -> bool:
        """Whether the budget left of ``job`` pays for one of the spot offers the scheduler may place it on (what it
        waits for when its policy has sent it to a reliable tier it has none of)."""
        request, key, offers = self._placeable_seen(job, now, seen)
        paid = ("spot", key, job.budget - job.spent, left_to_run(job, request))
        if paid not in seen:
            spot = [o for o in offers if o.tier is Tier.SPOT]
            seen[paid] = bool(spot) and self._budget_shortfall(job, spot) is None
        return seen[paid]

    def _placeable_seen(self, job: Job, now: float, seen: dict[tuple, Any]) -> tuple[Any, tuple, list]:
        """``job``'s request, its shape (:func:`~broker.engine.schedule.placeable_key`) and the offers the scheduler
        may place it on, worked out once per shape in ``seen`` (one read of the queue) for :meth:`_no_fallback` and
        :meth:`_spot_payable` alike."""
        request = request_of(job)
        key = placeable_key(job, request, now=now)
        if ("offers", key) not in seen:
            seen[("offers", key)] = placeable(job, request, all_offers(self.settings), now=now)
        return request, key, seen[("offers", key)]

    def _waits(self, extra: Sequence[Job] = ()) -> tuple[list[Job], dict[str, int], Waits]:
        """The queue worked out for this call alone, with ``extra``: jobs not stored counted as queued too (a dry
        run's: :meth:`submit_dry_run`)."""
        jobs, availability, now = self._queue_read()
        jobs = [*jobs, *extra]
        return jobs, *self._weigh(jobs, availability, now)

    def _weigh(self, jobs: Sequence[Job], availability: dict, now: float) -> tuple[dict[str, int], Waits]:
        """Each queued job's position and :class:`~broker.queue.Waits` among ``jobs`` (those holding or waiting for
        capacity), with the launcher's spot ``availability``, at ``now``."""
        offers = all_offers(self.settings)
        # a spot zone down now (its trace, a fault) has no free nodes: counting them would say "now", tick after tick
        mk = market(self.settings, jobs, availability)
        free = {**mk.free_capacity, **{pool: len(slots) for pool, slots in mk.free_slots.items()}}

        def blocked(job: Job) -> dict[str, float]:
            """The zones (or pools) blocked for the job after its preemptions there, each until when."""
            return {z: until for z, until in job.blocked_zones.items() if until > now}

        def usable(job: Job) -> dict[str, int]:
            """The pools and zones the job may run in, and how many slots (pools) or nodes (zones) it takes there:
            not one over its ``max_price_per_hour``, and a zone blocked for it after a preemption only from when
            the block ends (``blocked``), as placement takes it (a free zone it may not take yet read as "starts
            now", tick after tick, for a job waiting for a full pool)."""
            request = request_of(job)
            at = max(blocked(job).values(), default=now)
            # once per shape (what placeable reads of a job), not per job: thousands queued are a few shapes
            key = placeable_key(job, request, now=at)
            need = shapes.get(key)
            if need is None:
                need = shapes[key] = {}
                # the scheduler's own rules, at the time the last block ends: never drift apart
                for o in placeable(job, request, offers, now=at):
                    units = slots_of(o) * request.num_nodes if o.tier is Tier.ONPREM else request.num_nodes
                    need[o.location] = min(need.get(o.location, units), units)
            return need  # shared by the jobs of its shape: waits only reads it

        shapes: dict[tuple, dict[str, int]] = {}

        # a stop's grace period runs from when the attempt was asked to stop: the job's updated_at moves on with
        # each write of the engine (every tick bills the attempt), so counted from it the end never came nearer
        stops_asked = {}
        for job in jobs:
            if job.state in (JobState.CANCELLING, JobState.STOPPING):
                attempts = self.store.attempts(job.id)
                if attempts and attempts[-1].stop_requested_at is not None:
                    stops_asked[job.id] = attempts[-1].stop_requested_at
        # a pool's slots are kept for the first job that waits for them, as the scheduler keeps them
        return positions(jobs), waits(jobs, now, usable, free, self.settings.stop_grace_seconds, stops_asked, blocked,
                                      kept_in={pool.name for pool in self.settings.pools})

    def _launched_elsewhere(self, launched_in: str) -> bool:
        """Whether an attempt launched in the view ``launched_in`` (``Attempt.launched_in``) is another broker
        process's, which this one's launcher does not see (a host's data dir of its own): its logs and its faults
        are that broker's. An attempt that names no view (an older broker's) is taken for this one's."""
        return bool(launched_in) and launched_in not in domains_of(self.launcher)

    def logs(self, principal: Principal, job_id: str, *, attempt: int | None = None, offset: int = 0) -> dict:
        job = self.get(principal, job_id)
        n = attempt or job.attempts
        if n < 1 or n > job.attempts:
            if attempt is None:
                return {"attempt": None, "data": "", "offset": 0, "done": job.state.is_final}
            if not job.attempts:  # was "must be between 1 and 0"
                raise Invalid("attempt", f"is {attempt}, but {job.id} has had no attempt (it is {job.state.value}): "
                                         "leave attempt out to read the newest once it runs", status=404)
            which = "1" if job.attempts == 1 else f"1 to {job.attempts}"
            raise Invalid("attempt", f"is {attempt}, but {job.id} has had {job.attempts} attempt"
                                     f"{'s' if job.attempts > 1 else ''}: give {which}", status=404)
        if self.launcher is None:
            raise Invalid("logs", "this broker process has no launcher to read logs from", status=503)
        where = next((a.launched_in for a in self.store.attempts(job.id) if a.n == n), "")
        if self._launched_elsewhere(where):
            raise Invalid("logs", f"attempt {n} was launched by another broker process, whose launcher ({where}) "
                          "keeps its output; read it through that broker, or give the brokers one shared launcher "
                          "state (docs/architecture.md, 'Several broker processes')", status=409)
        hidden = [v.encode("utf-8", "surrogatepass") for v in job_secret_values(job.spec, self.settings, job.id)]
        data, next_offset = self.launcher.logs(f"{job.id}-a{n}", offset=offset)
        # an older attempt has ended (a newer one ran after it): its output grows no more. Reported "not done" for
        # ever, a client following one attempt never stopped
        done = n < job.attempts or job.state.is_final
        # a page ends on a character: one cut mid-character read as two U+FFFD, one at the end of this page and one
        # at the start of the next, and the character was lost. The partial one is left to the next read (the
        # writer may be in the middle of it), unless it is all that is left of an attempt that has ended
        cut = _partial_utf8_tail(data)
        if cut and cut == len(data) and done:
            cut = 0
        if not hidden:
            data, next_offset = data[:len(data) - cut], next_offset - cut
            return {"attempt": n, "data": data.decode("utf-8", "replace"), "offset": next_offset, "done": done}
        # the job's secrets are hidden as in its events (`set -x` printed a token), the offsets still the raw
        # output's, which a follower reads on from. A secret is matched with what came before the page (up to one
        # secret's length, where the output runs on there), so that a page starting inside one shows none of it,
        # and a page ending in what may be the start of one leaves that to the next read
        back = min(offset, max(len(v) for v in hidden) - 1)
        before = b""
        if back:
            before, at = self.launcher.logs(f"{job.id}-a{n}", offset=offset - back, limit=back)
            if at != offset or len(before) != back:  # not the bytes right before: a capped log's left-out line
                before = b""
        if not done:
            cut = max(cut, min(len(data), _secret_start_tail(before + data, hidden)))
        text = _hide_secrets(before + data[:len(data) - cut], len(before), hidden)
        return {"attempt": n, "data": text, "offset": next_offset - cut, "done": done}


    # -- change ----------------------------------------------------------------------------------

    def _retrying(self, once: Callable[[], Job]) -> Job:
        """Run a read-decide-commit step until its compare-and-set lands (the engine may move the job
        between our read and our write; we then decide again on the fresh state)."""
        for _ in range(CAS_RETRIES):
            try:
                return once()
            except VersionConflict:
                continue
        raise Conflict("the job is changing too fast; try again", field="state")

    def cancel(self, principal: Principal, job_id: str, *, reason: str = "cancelled by the user") -> Job:
        def once() -> Job:
            job = self._changeable(self.get(principal, job_id))
            try:
                t = apply(job.state, JobEvent.CANCEL)
            except IllegalTransition as exc:
                raise Conflict(_why_not_cancelled(job) or str(exc), field="state") from None
            now = self.clock()
            new = replace(job, state=t.to_state, reason=reason, updated_at=now)
            if t.to_state is JobState.CANCELLED:
                new = replace(new, placement={}, slots=[])
            event = event_for(new, JobEvent.CANCEL, t.to_state, time=now, reason=reason, actor=principal.name,
                              from_state=job.state)
            return self._commit(Change(job=new, expected_version=job.version, events=[event]))

        return self._retrying(once)

    def cancel_many(self, principal: Principal, *, ids: Sequence[str] = (), name: str | None = None,
                    team: str | None = None, every: bool = False,
                    reason: str = "cancelled by the user") -> CancelBatch:
        """Cancel the jobs ``ids``, or every job not ended whose name begins with ``name``, or (``every``) every job
        not ended of the caller's team (an admin's: of ``team``, which an admin must give, so that one slip does not
        cancel every team's jobs), as ``sky jobs cancel`` and ``scancel --name`` do. Each is :meth:`cancel`'s own
        step; a job that has ended (before or while this ran) is skipped as such, not refused, so a cancel run again
        over the same jobs does what it did; a job another cancel is already stopping counts as cancelled."""
        if sum((bool(ids), name is not None, every)) != 1:
            raise Invalid("ids", "give the jobs to cancel one way: their ids, the start of their name (name), or "
                                 "all (every job of a team that has not ended)")
        if ids and team is not None:
            raise Invalid("team", "is for name or all; jobs given by id are cancelled whichever team's they are")
        if every and principal.admin and not team:
            raise Invalid("team", "an admin cancelling all must name the team (--team T): all, alone, would "
                                  "cancel every team's jobs")
        if not ids:
            live = [st for st in JobState if not st.is_final]
            ids, before = [], None
            while True:  # page by page, every match: a sweep may be thousands of jobs
                page = self.list(principal, states=live, team=team, name=name, limit=CANCEL_PAGE, before=before)
                ids += [j.id for j in page]
                if len(page) < CANCEL_PAGE:
                    break
                before = (page[-1].submitted_at, page[-1].id)
        cancelled, ended, refused, already = [], [], [], []
        for job_id in dict.fromkeys(ids):
            try:
                cancelled.append(self.cancel(principal, job_id, reason=reason))
            except Conflict as exc:
                job = self.store.get_job(job_id)
                if job is not None and job.state is JobState.CANCELLING:
                    cancelled.append(job)
                    already.append(job.id)
                elif job is not None and isinstance(job.state, JobState) and job.state.is_final:
                    ended.append(job)
                else:
                    refused.append((job_id, str(exc)))
            except (NotFound, Invalid) as exc:
                refused.append((job_id, str(exc)))
        return CancelBatch(cancelled, ended, refused, already)

    # -- recovery, money and progress ------------------------------------------------------------

    def resume(self, principal: Principal, job_id: str, *, force: bool = False,
               reason: str | None = None, tier: str | None = None, envs: dict[str, Any] | None = None,
               secrets: dict[str, Any] | None = None, switching: bool = False) -> Job:
        """One-click resume: a failed or budget-stopped job runs again as a new attempt from its last checkpoint.

        Infrastructure failures (preempted, node lost, budget stop, network) resume without question; a
        failure in the user's code is refused (409, with the diagnosis) unless ``force``. ``tier`` pins the
        tier of the attempts from now on, in the same write. ``envs`` and ``secrets`` set those of the task from
        now on (checked as a submit checks them; secrets sealed): a job that failed for a token it lacked goes on
        from its checkpoint with one — it changed, so no ``force`` is asked. Its events name them, never their values.
        ``switching``: the resume is :meth:`switch_to_ondemand`'s, whose refusals speak of the switch (a switch was
        told to "resume it with --force", and the CLI spliced its ``broker ondemand … --force`` into that).
        """
        given: dict[str, dict[str, Any]] = {}
        for key, values in (("envs", envs), ("secrets", secrets)):
            if values is None:
                continue
            try:
                check_env_map(key, values, "--env" if key == "envs" else "--secret", command="resume")
            except SpecError as exc:
                raise Invalid(exc.field, exc.reason) from None
            if values:  # a number typed with an exponent is that text, as at submit (broker.spec.typed_text)
                given[key] = {k: typed_text(v) or v for k, v in values.items()}

        def once() -> Job:
            job = self._changeable(self.get(principal, job_id))
            if job.state not in RESUMABLE:
                again = ""
                if job.state is JobState.CANCELLED and job.last_checkpoint and job.checkpoint_uri:
                    # the way forward, which a user found only by reading the docs
                    again = (f"; to continue it from its checkpoint (step {job.last_checkpoint.get('step', '?')}), "
                             f"submit its task again with broker.checkpoint: {job.checkpoint_uri}")
                elif job.state is JobState.CANCELLED:  # no checkpoint to go on from: said, not left to be guessed
                    again = "; it saved no checkpoint, so to run it again, submit its task again (it starts over)"
                raise Conflict(_ended(job, "only a failed or budget-stopped job resumes" + again)
                               if job.state.is_final else
                               f"{job.id} is {job.state.value}, not ended: only a failed or budget-stopped job resumes",
                               field="state")
            diagnosis = job.diagnosis or {}
            if job.state is JobState.FAILED and not diagnosis.get("infrastructure") and not force and not given:
                text = diagnosis.get("text") or job.reason
                asked = diagnosis.get("secrets")  # a credentials failure's (absent from an earlier broker's)
                names = [n for n in asked if isinstance(n, str) and n] if isinstance(asked, list) else []
                if names and switching:  # a switch cannot give secrets: the resume that does, then the switch
                    flags = " ".join(f"--secret {n}" for n in dict.fromkeys(names))
                    raise Conflict(f"not switched to on-demand: the job failed for credentials it was not given: "
                                   f"{text} Resume it with them (broker resume {job.id} {flags}), then switch it "
                                   f"(broker ondemand {job.id}); switched with force it runs again unchanged, which "
                                   "fails the same way unless the credentials outside the task changed",
                                   field="secrets")
                step = (job.last_checkpoint or {}).get("step")
                # it said "it goes on from its last checkpoint" of a job that saved none
                goes_on = f"it goes on from its last checkpoint (step {step})" if step is not None else \
                    "it starts over (it saved no checkpoint)"
                if switching:
                    raise Conflict(f"not switched to on-demand: the job failed for a reason of its own that on-demand "
                                   f"capacity would not change: {text} Change what made it fail, then switch it with "
                                   f"--force: {goes_on} on on-demand with the code as it is "
                                   "then (a workdir that is a path on this host is read anew at each attempt, a git "
                                   "workdir cloned again at its ref; an uploaded one stays as it was, so submit the "
                                   f"job again); where an env is the cause, broker resume {job.id} --env NAME=value "
                                   f"needs no --force, and broker ondemand {job.id} then pins it to on-demand. "
                                   "Forced with nothing changed, it fails the same way.",
                                   field="force")
                if names:  # "change the job and resubmit" sent the user to a new submit, "force" to the same failure
                    flags = " ".join(f"--secret {n}" for n in dict.fromkeys(names))
                    raise Conflict(f"not resumed: the job failed for credentials it was not given: {text} Resume it "
                                   f"with them (broker resume {job.id} {flags}); resumed with force it runs again "
                                   "unchanged, which fails the same way unless the credentials outside the task "
                                   "changed",
                                   field="secrets")
                if diagnosis.get("class") in TASK_FIX_CLASSES:  # "change it, then resume with --force" failed alike
                    said = task_fix_words(job.id, resume_from_words(step), resubmit_keep_words(job.checkpoint_uri, step))
                    raise Conflict(f"not resumed: {text} {said}.", field="force")
                # "resumed with force it runs again unchanged" was not so: a workdir on this host is read anew at each
                # attempt (its launch says what changed), a git one cloned again at its ref; an uploaded one is not
                if "--force" in str(diagnosis.get("hint") or ""):
                    # its hint says already how to go on (with --force, or an env): said once, not twice over
                    raise Conflict(f"not resumed: the job failed for a reason of its own that a resume would likely "
                                   f"meet again: {text} Resumed with --force, {goes_on}; forced with nothing changed, "
                                   "it fails the same way.", field="force")
                raise Conflict(f"not resumed: the job failed for a reason of its own that a resume would likely meet "
                               f"again: {text} Change what made it fail, then resume it with --force: {goes_on} "
                               "with the code as it is then (a workdir that is a path on this "
                               "host is read anew at each attempt, a git workdir cloned again at its ref; an uploaded "
                               f"one stays as it was, so submit the job again); where an env is the cause, broker "
                               f"resume {job.id} --env NAME=value needs no --force. Forced with nothing "
                               "changed, it fails the same way.",
                               field="force")
            waits = None
            if job.state is JobState.STOPPED_BUDGET:
                # a minute at the cheapest price it may run at: priced at its last attempt's, a job stopped on a
                # $36/h zone while the $0.20/h pool was full was refused a resume the pool would run for hours
                mine = self._offers_for(job, tier or job.force_tier)
                minute = self._minute_shortfall(job, mine)
                if minute is not None:
                    raise Conflict(minute, field="budget")
                short = self._start_shortfall(job, mine)
                if short is not None:  # the engine would stop it again at once (a job stopped before any attempt)
                    left = fmt_left(job.budget - job.spent, budget=job.budget)
                    raise Conflict(f"not resumed: the budget left, {left}, {short}: raise the budget first",
                                   field="budget")
                waits = self._blocked_wait(job, mine)  # resumed, it waits for a zone blocked for it: said
            self._resumable_workdir(job)
            now = self.clock()
            sharing = self._sharing(job.checkpoint_uri, now, but=job.id) if job.checkpoint_uri else None
            if sharing is not None:
                who = f"job {sharing.id}" if principal.admin or sharing.team == job.team else "a job of another team"
                raise Conflict(f"not resumed: its checkpoint base {job.checkpoint_uri!r} is also that of {who}, which "
                               f"is {sharing.state.value}: two jobs writing one base delete each other's checkpoints. "
                               "Resume it once that job has ended (or cancel that job)", field="broker.checkpoint")
            fence = self._fits_team_cap(job, max(job.budget - job.spent, 0), now, resume=True)
            step = job.last_checkpoint.get("step")
            named = "; ".join(f"{key} {', '.join(sorted(values))} set" for key, values in given.items())
            why = (reason or (f"resumed by {principal.name}" + (f" from step {step}" if step is not None else "")
                              + (" (forced)" if force else "") + (f" ({named})" if named else ""))) \
                + (f"; {waits}" if waits else "")
            spec = self._spec_with(job, given)
            if given:
                self._check_env_total(job, spec, "secrets" if "secrets" in given else "envs")
            t = apply(job.state, JobEvent.RESUME)
            new = replace(job, state=t.to_state, reason=why, updated_at=now, queued_at=now, resumed_at=now,
                          errors_retried=0, placement={}, slots=[],
                          force_tier=tier or job.force_tier, pinned_by=principal.name if tier else job.pinned_by,
                          launch_failures=0, launch_retry_at=None, spec=spec)
            names = {f"{key}_set": sorted(values) for key, values in given.items()}  # never the values
            event = event_for(new, JobEvent.RESUME, t.to_state, time=now, reason=why, actor=principal.name,
                              from_state=job.state, data={"checkpoint_step": step, "force": force, **names})
            return self._commit(Change(job=new, expected_version=job.version, events=[event], team_fence=fence))

        return self._retrying(once)

    def _fits_team_cap(self, job: Job, adding: int, now: float, *, resume: bool) -> tuple[str, int] | None:
        """Refuse (409 on ``budget``, 422 on ``budget_usd`` for a raise) a resume of ``job`` or a raise of its budget
        by ``adding`` that could take its team's month past the team's cap; else the fence its write carries
        (``Change.team_fence``), ``None`` when the team has no cap."""
        if not self._capped(job.team):
            return None
        fence = self.store.team_admissions(job.team)  # before the standing, as a submit reads it
        standing = self.team_standing(job.team, now)
        if standing is None:
            return None
        if resume:
            unspent = fmt_left(adding, budget=job.budget)
            why = refusal(standing, adding, what=f"resuming it, with {unspent} of its budget unspent,",
                          instead=lambda fits: self._resume_room(job, standing))
            if why is not None:
                raise Conflict(f"not resumed: {why}", field="budget")
        else:
            why = refusal(standing, adding, what=f"raising the budget by {fmt(adding)}",
                          instead=lambda fits: f"raise it to at most {fmt_left(job.budget + fits)}")
            if why is not None:
                raise Invalid("budget_usd", why)
        return job.team, fence

    def _resume_room(self, job: Job, standing: TeamMonth) -> str:
        """What lets a resume of ``job`` go on that its team's cap (``standing``) refuses: its budget lowered to what
        is free, when that still pays for a minute's run and a clean stop (the resume's own test next: "lower it to
        $0.0616" was followed by "raise the budget to at least $0.0924"), or room made later (:func:`room_later`:
        "wait for the team's jobs to end" was said to a team with no job holding anything). No CLI syntax: Slack and
        the dashboard say this too."""
        fits = max(standing.free, 0)
        later = f"wait until {room_later(standing)}"
        if fits <= 0:
            return later
        if self._minute_shortfall(replace(job, budget=job.spent + fits), self._offers_for(job, job.force_tier)):
            return f"the {fmt_left(fits)} free would not pay for a minute's run and a clean stop: {later}"
        return f"lower its budget to {fmt_left(job.spent + fits)} first, or {later}"

    def _spec_with(self, job: Job, given: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """The job's stored task with ``given`` envs and secrets set over its own, the secrets sealed as a submit seals
        them (a broker that cannot seal: 409, and nothing changes)."""
        if not given:
            return job.spec
        spec = dict(job.spec)
        if "envs" in given:
            spec["envs"] = {**(spec.get("envs") or {}), **given["envs"]}
        if "secrets" in given:
            try:
                sealed = seal_spec({"secrets": given["secrets"]}, sealer_for(self.settings, create=True), job.id)
            except (KeyInvalid, OSError) as exc:
                raise Conflict(f"not resumed: this broker cannot seal the job's secrets ({exc})",
                               field="secrets") from None
            spec["secrets"] = {**(spec.get("secrets") or {}), **sealed["secrets"]}
        return spec

    def _check_env_total(self, job: Job, spec: dict[str, Any], where: str) -> None:
        """A resume's envs or secrets, set over the job's own: all of them together within the environment a process
        may be started with (each given map alone was checked before). Its sealed secrets are opened to be counted;
        a broker that cannot open them leaves the check to the launch (which fails saying why)."""
        try:
            opened = open_task(spec, self.settings, job.id)
        except Unsealable:
            return
        try:
            check_env_total(opened.get("envs"), opened.get("secrets"), where)
        except SpecError as exc:
            raise Invalid(exc.field, exc.reason) from None

    def _offers_for(self, job: Job, tier: str | None) -> list[Offer]:
        """The offers the job's resources match, on ``tier`` when it is pinned to one."""
        offers = matching_offers(request_of(job), all_offers(self.settings))
        return [o for o in offers if tier is None or o.tier.value == tier]

    @staticmethod
    def _cheapest_price(job: Job, mine: list[Offer]) -> int:
        """The price per hour, all its nodes, of the cheapest of ``mine`` (:meth:`_offers_for`) the job may take (at
        or under its ``max_price_per_hour``): what a resume's first minute costs at the least; 0 when none is."""
        request = request_of(job)
        return min((o.price_per_hour * request.num_nodes for o in under_cap(request, mine)), default=0)

    def resume_needs(self, job: Job) -> int | None:
        """The least budget (micro-dollars) a resume of budget-stopped ``job`` needs to run now — a minute's run and a
        clean stop at the cheapest price it may run at, :meth:`resume`'s own test, on the offers it may use now: a
        zone blocked for it after a preemption there is not (:meth:`_usable_now`; every offer when it may use none) —
        or ``None`` when its budget pays for that (or it is not stopped at its budget): the figure Slack's *Raise
        budget* button proposes at least. Priced on a blocked zone, the figure resumed a job that then waited, unsaid,
        for that zone's block to end."""
        if job.state is not JobState.STOPPED_BUDGET:
            return None
        mine = self._offers_for(job, job.force_tier)
        needed = max(self._minute_needed(job, mine), self._minute_needed(job, self._usable_now(job, mine) or mine))
        return None if job.budget - job.spent >= needed else job.spent + needed

    def _usable_now(self, job: Job, mine: list[Offer]) -> list[Offer]:
        """Those of ``mine`` in no zone (nor cloud) blocked for ``job`` now (after a preemption or a refused launch)."""
        return budget_rules.usable_now(mine, job.blocked_zones, self.clock())

    def _blocked_cheaper(self, job: Job, mine: list[Offer]) -> tuple[str, list[Offer]] | None:
        """When the cheapest of ``mine`` the job may take is in a zone blocked for it now: that zone in words
        (:func:`broker.engine.budget.block_until_words`, with what blocked it) and the offers it may use now; else
        ``None``."""
        request = request_of(job)
        priced = under_cap(request, mine)
        if not priced:
            return None
        now = self.clock()
        cheapest = min(priced, key=lambda o: o.price_per_hour)
        if budget_rules.block_on(cheapest, job.blocked_zones, now) is None:
            return None
        blocked = job.blocked_at(now)
        causes = block_causes(job, self.store.attempts(job.id), blocked)
        return budget_rules.block_until_words(cheapest, job.blocked_zones, now, causes), \
            budget_rules.usable_now(mine, job.blocked_zones, now)

    def _blocked_wait(self, job: Job, mine: list[Offer]) -> str | None:
        """For a budget-stopped job whose budget left pays for a minute's run and a clean stop only in a zone blocked
        for it (:meth:`_minute_shortfall` passes on it): that it waits for that zone, until when, and what runs it now;
        ``None`` otherwise (nothing it may use now: its queued reason says every zone is blocked, and until when)."""
        found = self._blocked_cheaper(job, mine)
        if found is None or not under_cap(request_of(job), found[1]):
            return None
        words, free = found
        needed = self._minute_needed(job, free)
        if job.budget - job.spent >= needed:
            return None
        return (f"its budget left pays for a minute's run and a clean stop only in {words}: it waits for it; "
                f"a budget of {fmt(job.spent + needed)} runs it now ({fmt(needed)} at "
                f"{fmt_rate(self._cheapest_price(job, free))}/h)")

    def _minute_needed(self, job: Job, mine: list[Offer]) -> int:
        """A minute's run and a clean stop at the cheapest price ``job`` may run at on ``mine``, micro-dollars."""
        return cost_for_seconds(self._cheapest_price(job, mine), int(self.settings.stop_grace_seconds) + 60)

    def _minute_shortfall(self, job: Job, mine: list[Offer]) -> str | None:
        """Why the budget left of a budget-stopped job cannot resume it on ``mine`` (:meth:`_offers_for`): it does not
        pay for a minute and a clean stop at the cheapest price it may run at, said with the figure to raise it to;
        ``None`` when it does. Priced at its last attempt's, a job stopped on a $36/h zone while the $0.20/h pool was
        full was refused a resume the pool would run for hours."""
        price = self._cheapest_price(job, mine)
        needed = self._minute_needed(job, mine)
        if job.budget - job.spent >= needed:
            return None
        # say the figure: "raise the budget" alone left a user guessing by how much; what is left rounded down
        # (fmt_left), never up to more than is left, nor read as more than the cap
        left = fmt_left(job.budget - job.spent, budget=job.budget)
        head = (f"{left if left.startswith('under ') else 'only ' + left} of the {fmt_limit(job.budget)} budget is "
                "left, not enough to run a minute and stop cleanly")
        # priced on the zone that just preempted it, blocked for it, the figure resumed a job that then waited for
        # that zone unsaid: the figure that runs it now first (Slack's Raise button reads the first "at least $X")
        found = self._blocked_cheaper(job, mine)
        free = found[1] if found is not None and under_cap(request_of(job), found[1]) else []
        if found is not None and not free:
            return (f"{head} ({fmt(needed)} at {fmt_rate(price)}/h, in {found[0]}): raise the budget to at least "
                    f"{fmt(job.spent + needed)} first; it runs there once it may")
        if found is not None:
            now_needed = self._minute_needed(job, free)
            return (f"{head}: raise the budget to at least {fmt(job.spent + now_needed)} first to run now "
                    f"({fmt(now_needed)} at {fmt_rate(self._cheapest_price(job, free))}/h), or to "
                    f"{fmt(job.spent + needed)} to wait for {found[0]}, and run there ({fmt(needed)} at "
                    f"{fmt_rate(price)}/h)")
        return (f"{head} ({fmt(needed)} at {fmt_rate(price)}/h): raise the "
                f"budget to at least {fmt(job.spent + needed)} first")

    def _start_shortfall(self, job: Job, mine: list[Offer]) -> str | None:
        """Why the job's budget left cannot start it on any of ``mine`` (:meth:`_offers_for`), as the engine weighs
        a start (a start and a clean stop, plus a cloud cluster's billing after its run): ``None`` when it can."""
        request = request_of(job)
        return start_shortfall(request, mine, job.budget - job.spent,
                               min_run_seconds=self._stop_seconds(),
                               after_run_seconds=after_run(self.launcher, mine))

    def _budget_shortfall(self, job: Job, mine: list[Offer]) -> str | None:
        """Why the job's budget left pays for its next attempt on none of ``mine``, as placement weighs it (what is
        left of its ``expected_hours``, else a start and a clean stop, plus a cluster's billing after its run)."""
        return budget_shortfall(left_to_run(job, request_of(job)), mine, job.budget - job.spent,
                                min_run_seconds=self._stop_seconds(),
                                after_run_seconds=after_run(self.launcher, mine))

    def raise_budget(self, principal: Principal, job_id: str, new_budget: int, *, only_up: bool = False) -> Job:
        """Set a job's budget cap, up, or down to no less than it spent (raising it lets a budget-stopped
        job resume). With ``only_up`` (a "Raise budget to $X" button), a budget already at X or above stays.
        A budget lowered under a running attempt moves the attempt's own limit down at once (:meth:`_lower_limit`)."""
        if new_budget <= 0:
            raise Invalid("budget_usd", "must be more than $0")
        if new_budget > MAX_DOLLARS * MICROS_PER_DOLLAR:  # every edge reads it so; a Slack button's value is a number
            raise Invalid("budget_usd", f"must be at most ${MAX_DOLLARS:,}")
        had: list[int] = []  # the budget the committed change replaced

        def once() -> Job:
            job = self.get(principal, job_id)
            if job.state.is_final and job.state not in RESUMABLE:
                raise Conflict(_ended(job, "its budget no longer changes (only a failed or budget-stopped job's does, "
                                           "as it may resume)"), field="state")
            live, spent = self._spent_to_now(job)
            price = live.price_per_hour if live is not None else None
            # a running job stopped at a budget lowered to its spend ran on through its stop (the grace period to
            # checkpoint, the ticks to notice), billed beyond the budget and counted nowhere: its team's monthly
            # cap could pass unseen. It keeps what a budget stop keeps (broker/engine/budget.py::check) — a job
            # being cancelled or stopped too, whose run goes on through its grace period all the same
            stop = cost_for_seconds(price, self._stop_seconds()) if live is not None and price > 0 else 0
            least = spent + stop
            # the least said as the sum of the parts shown beside it, each rounded up for display (pricing.money.fmt):
            # "spent $0.0004, and stopping it costs up to $0.0010 …: lower it to no less than $0.0013" added up to
            # $0.0014; never below the exact least, so the figure said is always taken
            lowest = max(shown(spent) + (shown(stop) if stop else 0), least)
            stopping = (f"stopping it (its {self.settings.stop_grace_seconds:g} s grace period to checkpoint, and the "
                        f"moments to notice) costs up to {fmt(stop)} at {fmt_rate(price)}/h") if stop else ""
            if new_budget < spent:
                # "is below what the job already spent ($0.0005)" named no budget that works
                raise Invalid("budget_usd", f"is below what the job already spent ({fmt(spent)})"
                                            + (f", and {stopping}" if stopping else "")
                                            + f": lower it to no less than {fmt_limit(lowest)}"
                                            + (", or cancel the job" if stopping else ""))
            if stop and new_budget < job.budget and new_budget < least:
                raise Invalid("budget_usd", f"{fmt_limit(new_budget)} would not pay for the running job's clean "
                                            f"stop: it has spent {fmt(spent)}, and {stopping}: lower it to no less "
                                            f"than {fmt_limit(lowest)}, or cancel the job")
            if only_up and new_budget <= job.budget:
                raise Conflict(f"the budget is already {fmt_limit(job.budget)}, not below {fmt_limit(new_budget)}",
                               field="budget_usd")
            if new_budget == job.budget:  # nothing to change: no write, and no "budget $0.20 → $0.20" event
                return job
            changed = replace(job, budget=new_budget)
            if job.state is JobState.QUEUED and new_budget < job.budget:
                # the scheduler stops a queued job whose budget cannot start it: the lowered budget stopped the job at
                # once, unsaid, where a submit with that budget is refused
                short = self._start_shortfall(changed, self._offers_for(changed, changed.force_tier))
                if short is not None:
                    left = fmt_left(new_budget - job.spent, budget=new_budget)
                    raise Invalid("budget_usd", f"{fmt_limit(new_budget)} is too small for the job to start: the "
                                                f"budget left, {left}, {short}; nothing was changed")
            now = self.clock()
            # a job not ended holds its unspent budget against its team's monthly cap: a raise holds more (an ended
            # job's is weighed when it is resumed)
            fence = None if job.state.is_final or new_budget <= job.budget else \
                self._fits_team_cap(job, new_budget - job.budget, now, resume=False)
            note = note_event(job, "budget_changed", f"budget {fmt_limit(job.budget)} → {fmt_limit(new_budget)} by {principal.name}",
                              time=now, actor=principal.name, data={"old": job.budget, "new": new_budget})
            had[:] = [job.budget]
            fields: dict[str, Any] = {"budget": new_budget, "budget_warned": False, "updated_at": now}
            if job.state is JobState.STOPPED_BUDGET and new_budget != job.budget:
                # its reason still said the old budget left and "raise the budget", under a budget raised already (and,
                # lowered after a raise, "since raised to $0.004: resume it to continue" under $0.003 a resume refused)
                fields["reason"] = self._raised_reason(changed, principal, lowered=new_budget < job.budget)
            return self._commit(Change(job=replace(job, **fields), expected_version=job.version, events=[note],
                                       team_fence=fence))

        job = self._retrying(once)
        if had and new_budget < had[0]:
            job = self._lower_limit(job, principal)
        return job

    def set_deadline(self, principal: Principal, job_id: str, given: Any) -> Job:
        """Set, move or remove (``given`` ``None``) a job's deadline after its submit: read as a submit's
        ``broker.deadline`` is (:func:`broker.spec.parse_deadline`: an ISO time with its timezone, or a duration from
        now), with its refusals (past, more than a year away, no timezone ...) on the field ``deadline``, and refused
        where the job cannot meet it even on on-demand from now (:meth:`_out_of_reach`, a submit's check). A job not
        ended may change it (queued, placed, launching, running, and stopping at its budget, which may be resumed);
        one being cancelled or ended may not (409 naming its state). One compare-and-set write with a
        ``deadline_changed`` event (who, old → new), as a budget change records its. The engine reads the job's
        deadline afresh at every tick (its spot policy's input, the safety net, the queue's words), so the new one
        counts from its next: a running job on spot whose deadline is now tighter is moved by the safety net."""
        def once() -> Job:
            job = self.get(principal, job_id)
            if job.state.is_final:
                raise Conflict(_ended(job, "its deadline no longer changes"), field="state")
            if job.state is JobState.CANCELLING:
                raise Conflict(f"{job.id} is being cancelled (cancelling): its deadline no longer changes",
                               field="state")
            now = self.clock()
            new = None
            if given is not None:
                try:
                    new = parse_deadline(given, now=now, where="deadline")
                except SpecError as exc:
                    raise Invalid(exc.field, exc.reason) from None
                far = self._out_of_reach(new, now, job.expected_hours, offers=self._offers_for(job, job.force_tier),
                                         job=job)
                if far is not None:
                    raise Invalid("deadline", far)
            if new == job.deadline:  # nothing to change: no write, and no "deadline none → none" event
                return job
            note = note_event(job, "deadline_changed", f"deadline {_deadline_words(job.deadline)} → "
                                                       f"{_deadline_words(new)} by {principal.name}",
                              time=now, actor=principal.name, data={"old": job.deadline, "new": new})
            return self._commit(Change(job=replace(job, deadline=new, updated_at=now), expected_version=job.version,
                                       events=[note]))

        return self._retrying(once)

    def _out_of_reach(self, deadline: float, now: float, expected_hours: Any, *, offers: Sequence[Offer],
                      job: Job | None = None) -> str | None:
        """Why a job with ``expected_hours`` of work cannot meet ``deadline`` even on on-demand from ``now``, else
        ``None`` (and ``None`` with no estimate): the arithmetic of the engine's safety net
        (:func:`pricing.deadline.slack`: the work left and a changeover against the time left, on the spot policy's
        tick) with this broker's ``changeover_seconds``. Shared by a submit (and its dry run: :meth:`_admission`) and a
        deadline changed after it (:meth:`set_deadline`), where ``job`` gives what it did: the work done (its
        checkpointed fraction, else its time run: :func:`broker.engine.spot.work_done`), the changeover it measured,
        and none to pay where it runs on a reliable tier already. The changeover counts only where the job has a spot
        offer among ``offers`` (those it matches): the safety net plans those jobs alone
        (:func:`broker.engine.spot.policy_input`), and a job on the team's pool alone was refused a deadline it met."""
        if not expected_hours:
            return None
        work = float(Decimal(str(expected_hours)) * 3600)
        spot = any(o.tier is Tier.SPOT for o in offers)
        changeover, done, holding = float(self.settings.changeover_seconds) if spot else 0.0, 0.0, None
        if job is not None and job.attempts:
            attempts = self.store.attempts(job.id)
            changeover = measured_changeover(attempts, changeover) if spot else 0.0
            done = work_done(job, attempts, now, changeover)
            live = attempts[-1] if attempts and not getattr(attempts[-1].state, "is_final", False) else None
            tier = live.placement.get("tier") if live is not None and live.started_at is not None else None
            if tier in (Tier.ONDEMAND.value, Tier.ONPREM.value):
                holding = Holding(Tier(tier))
        inp = PolicyInput(now=now, deadline=deadline, work_total=work, work_done=done, changeover=changeover,
                          holding=holding, tick=POLICY_TICK_SECONDS)
        short = -slack(inp)
        if short <= 1e-6 or inp.remaining <= 0:
            return None
        return deadline_out_of_reach(deadline - now, work, done, 0.0 if inp.on_reliable else changeover, short,
                                     even=" even on on-demand" if spot else "")

    def _spent_to_now(self, job: Job) -> tuple[Attempt | None, int]:
        """The job's live attempt (its newest, not ended: launching, running, or being stopped or cancelled through
        its grace period), if it has one, and what the job has spent to now, that attempt billed to this moment as
        the engine bills it (:func:`broker.engine.billing.accrue`). The stored ``spent`` moves only when an engine
        looks: with none watching (the API with its engine off, the worker down), a budget was lowered under a spend
        24 s stale, the run was stopped at once, and what it had run under the old budget was counted nowhere."""
        attempts = self.store.attempts(job.id) if job.attempts else []
        live = attempts[-1] if attempts and attempts[-1].n == job.attempts \
            and not getattr(attempts[-1].state, "is_final", False) else None
        if live is None:
            return None, job.spent
        return live, max(job.spent, sum(a.cost for a in attempts[:-1]) + accrue(live, self.clock()).cost)

    def _raised_reason(self, job: Job, principal: Principal, *, lowered: bool = False) -> str:
        """The reason of a budget-stopped job whose budget ``principal`` just raised (or ``lowered``; ``job`` holds the
        new budget): whether it now pays for a resume (:meth:`resume`'s own tests), and so what to do next."""
        mine = self._offers_for(job, job.force_tier)
        short = self._minute_shortfall(job, mine) or self._start_shortfall(job, mine)
        raised = (f"stopped at its budget, since {'lowered' if lowered else 'raised'} to {fmt_limit(job.budget)} by "
                  f"{principal.name}")
        if short is not None:
            return f"{raised}, {'' if lowered else 'still '}not enough to resume: {short}"
        now = self.clock()
        standing = self.team_standing(job.team, now)
        unspent = max(job.budget - job.spent, 0)
        if standing is not None and unspent > standing.free:
            # "resume it to continue" was then refused by the team's monthly cap. Nothing resumes a stopped job by
            # itself ("it resumes once that covers it" promised what never came), and the standing is dated: kept in
            # the reason, it goes stale as the team's jobs run and its cap changes
            return (f"{raised}; a resume is refused while team {job.team}'s monthly cap has no room for its "
                    f"{fmt_left(unspent, budget=job.budget)} unspent (as of {as_of(now)}: {standing.words()}): "
                    f"{self._resume_room(job, standing)}; then resume it (it does not resume by itself)")
        point = job.last_checkpoint.get("step")
        waits = self._blocked_wait(job, mine)  # resumed, it would wait for a zone blocked for it
        return (f"{raised}: resume it to continue "
                + (f"from its last checkpoint (step {point})" if point is not None else "(it saved no checkpoint)")
                + (f"; {waits}" if waits else ""))

    def _lower_limit(self, job: Job, principal: Principal) -> Job:
        """After a budget lowered (committed): move the job's live attempt's own limit — the stop its launcher makes
        by itself while no broker watches (``Attempt.limit_at``) — down to the new budget now, where this broker's
        launcher holds the attempt (a run on this host, of this data dir), then record it (compare-and-set; an
        engine's next look records it otherwise). Not left to an engine's next tick: with no engine watching (the
        API with its engine off and the worker down) none comes, and the run went on to the old budget's limit. The
        run stops at its limit as at any budget stop — its notice, then the grace period to checkpoint — so no work
        since its last checkpoint is lost. Moved after the budget is committed, never before: a limit lowered for
        a change that did not land would stop the job under a budget it still has. An engine moving it meanwhile
        computes the same limit from the same stored budget (one that read the budget before it was lowered fails
        its commit, and gives the launcher the lowered limit again at its next look: ``Engine._keep_limit``). Only down: a budget raised while no engine watches takes effect when the old limit comes
        (the job is resumed from its checkpoint with the new one). Where the limit cannot be moved from here (the
        attempt runs on another host, or on a cloud cluster, whose limit is fixed at launch), a
        ``budget_limit_not_moved`` event says so. Returns the job as stored after."""
        if job.state not in (JobState.LAUNCHING, JobState.RUNNING):
            return job
        attempts = self.store.attempts(job.id)
        attempt = attempts[-1] if attempts else None
        if attempt is None or attempt.n != job.attempts or attempt.state.is_final or attempt.foreign \
                or attempt.stop_requested_at is not None or attempt.limit_at is None:
            return job
        limit = attempt_limit(attempt=attempt, attempts=attempts, budget=job.budget,
                              grace_seconds=self.settings.stop_grace_seconds)
        if limit is None or limit > attempt.limit_at - 1:
            return job
        now = self.clock()
        until = now if attempt.billed_until is None else max(now, attempt.billed_until)  # the attempt's timeline
        mine = self.launcher is not None and not self._launched_elsewhere(attempt.launched_in)
        setter = getattr(self.launcher, "set_stop_in", None) if mine else None
        if setter is not None and setter(attempt.id, limit - until) is not False:
            return self._record_limit(job, attempt.id, limit)
        why = ("this broker process has no launcher" if self.launcher is None else
               f"it runs where this broker's launcher cannot reach ({attempt.launched_in})" if not mine else
               "its launcher cannot move it (a cloud cluster's is set at launch), or its run has not started yet")
        text = (f"the run's own limit (its stop while no broker watches it) still holds the old budget: {why}; the "
                f"broker watching the attempt stops it at the new budget, and with none watching it stops at the old "
                f"limit, what it ran beyond the new budget then said by the broker that reads its end")
        note = note_event(job, "budget_limit_not_moved", text, time=now, actor=principal.name,
                          data={"attempt_id": attempt.id, "launched_in": attempt.launched_in,
                                "limit_at": attempt.limit_at, "wanted": limit})
        try:
            return self._commit(Change(job=replace(job, updated_at=now), expected_version=job.version, events=[note]))
        except (VersionConflict, Conflict):
            log.warning("job %s: %s", job.id, text)
            return self.store.get_job(job.id) or job

    def _record_limit(self, job: Job, attempt_id: str, limit: float) -> Job:
        """Record the limit :meth:`_lower_limit` gave the launcher as the attempt's ``limit_at`` (the limit its launcher
        holds), compare-and-set, while the job's budget is the one it was computed for; given up after a few
        conflicts (the next engine to look at the attempt records it)."""
        budget = job.budget
        for _ in range(3):
            if job.budget != budget or job.state not in (JobState.LAUNCHING, JobState.RUNNING):
                return job
            attempts = self.store.attempts(job.id)
            attempt = attempts[-1] if attempts else None
            if attempt is None or attempt.id != attempt_id or attempt.state.is_final or attempt.foreign \
                    or attempt.limit_at is None or abs(attempt.limit_at - limit) < 1:
                return job
            try:
                return self._commit(Change(job=replace(job, updated_at=self.clock()), expected_version=job.version,
                                           attempts=[replace(attempt, limit_at=limit)]))
            except VersionConflict:
                job = self.store.get_job(job.id) or job
            except Conflict:
                return job
        return job

    def switch_to_ondemand(self, principal: Principal, job_id: str, *, force: bool = False) -> Job:
        """Pin the job to on-demand from its next attempt on (resumes it if it had stopped).

        Resuming a job that failed for a reason of its own takes ``force``, as :meth:`resume` does (the API's
        ``force=true``, the CLI's ``--force``, a Slack button whose confirmation showed the diagnosis):
        on-demand capacity does not change a failure of the job's own.
        """
        def once() -> Job:
            job = self._changeable(self.get(principal, job_id))
            if job.state is JobState.CANCELLING:
                raise Conflict(f"{job.id} is being cancelled: there is nothing to move to on-demand", field="state")
            if job.state in (JobState.SUCCEEDED, JobState.CANCELLED):
                raise Conflict(_ended(job, "there is nothing to move to on-demand"), field="state")
            if job.force_tier == "ondemand" and job.state not in RESUMABLE:
                # already pinned (by this call's twin, whose write made ours a version conflict): answered as it is,
                # with no second "pinned to on-demand" event
                return job
            request = request_of(job)
            if not any(o.tier is Tier.ONDEMAND for o in matching_offers(request, all_offers(self.settings))):
                if request.alternatives and all(alt.use_spot is True for alt in request.alternatives):
                    raise Conflict("its task asks for spot only (resources.use_spot: true), so no on-demand offer "
                                   "fits it: submit it again without use_spot to let it run on on-demand",
                                   field="resources.use_spot")
                raise Conflict("no on-demand offer fits this job (none is configured for its resources), so pinning "
                               "it there would leave it queued forever", field="resources")
            ondemand = self._offers_for(job, "ondemand")
            if request.max_price_per_hour is not None and not under_cap(request, ondemand):
                # pinned, it waited for ever over its own cap, and a budget-stopped job passed the budget's test (no
                # offer it may take, so none to price)
                cheapest = min(o.price_per_hour * request.num_nodes for o in ondemand)
                n = request.num_nodes
                raise Conflict(f"not moved to on-demand: its cheapest on-demand offer costs {fmt_rate(cheapest)}/h"
                               f"{f' for its {n} nodes' if n > 1 else ''}, over the job's max_price_per_hour of "
                               f"{fmt(request.max_price_per_hour)}{cap_for_all(n)}, so pinned there it "
                               "would wait for ever: submit it again with a max_price_per_hour that covers on-demand "
                               "(or none)", field="broker.max_price_per_hour")
            if job.state is JobState.STOPPED_BUDGET:
                # the resume's own test first, with its figure: refused for a start alone, a user who raised the
                # budget to pay for that was refused again by the resume, wanting more (a minute and a clean stop)
                minute = self._minute_shortfall(job, ondemand)
                if minute is not None:
                    raise Conflict(f"not moved to on-demand: {minute}", field="budget")
            short = self._budget_shortfall(job, ondemand)
            if short is not None:  # pinned, it waited for ever: "the budget left ... does not cover ..."
                raise Conflict(f"not moved to on-demand: {short}. Raise the budget first (broker budget {job.id} "
                               "<dollars>), then move it", field="budget")
            if job.state in RESUMABLE:  # pin and resume in one write: a refused resume leaves no pin behind
                try:
                    return self.resume(principal, job_id, force=force, tier="ondemand",
                                       reason=f"resumed on on-demand by {principal.name}"
                                       + (" (forced)" if force else ""),  # as a forced resume says it
                                       switching=True)
                except Conflict as exc:
                    # its twin (the same click on another broker) resumed it on on-demand first: answered as it is,
                    # not with the resume's "is queued, not ended" to a user who asked for on-demand
                    again = self.get(principal, job_id)
                    if again.force_tier == "ondemand" and again.state not in RESUMABLE and not again.state.is_final:
                        return again
                    if again.version != job.version and again.state not in RESUMABLE and not again.state.is_final:
                        # another request resumed it (a plain resume) between our read and ours: decided again on the
                        # job as it is now, which pins it. It was refused with the resume's "is queued, not ended",
                        # and the job went on unpinned
                        raise VersionConflict(f"{job_id} was resumed meanwhile")
                    said = str(exc)
                    if said.startswith("not resumed: "):  # the resume's other refusals, said of the switch
                        said = said.removeprefix("not resumed: ").replace("Resume it once", "Switch it once")
                        raise Conflict("not switched to on-demand: " + said, field=exc.field) from None
                    raise
            now = self.clock()
            note = note_event(job, "switch_tier", f"pinned to on-demand by {principal.name}", time=now,
                              actor=principal.name, data={"tier": "ondemand"})
            return self._commit(Change(job=replace(job, force_tier="ondemand", pinned_by=principal.name, updated_at=now),
                                            expected_version=job.version, events=[note]))

        return self._retrying(once)

    def unpin(self, principal: Principal, job_id: str) -> Job:
        """Take back :meth:`switch_to_ondemand`'s pin: the job's next attempts go where placement finds it cheapest
        again (there was no way back once a job was pinned). A job not pinned is answered as it is."""
        def once() -> Job:
            job = self._changeable(self.get(principal, job_id))
            # an ended job first, pinned or not: "not pinned; its next attempts go where it is cheapest" was said,
            # exit 0, of a job that has none, where pinning the same job is refused
            if job.state.is_final and job.state not in RESUMABLE:
                raise Conflict(_ended(job, "it runs no more attempts to move"), field="state")
            if job.force_tier is None:
                return job
            now = self.clock()
            note = note_event(job, "switch_tier", f"pin to {job.force_tier} taken back by {principal.name}: placed "
                                                  "where it is cheapest again", time=now, actor=principal.name,
                              data={"tier": None})
            return self._commit(Change(job=replace(job, force_tier=None, pinned_by=None, updated_at=now),
                                       expected_version=job.version, events=[note]))

        return self._retrying(once)

    def report_progress(self, job_id: str, token: str, body: dict[str, Any]) -> Job:
        """A training script's report (step, total steps, metrics, committed checkpoint), with the job's own token.

        A token that is not the job's is a 401 whether or not the job exists (so it tells nothing of which ids do),
        saying why: answered "no job", an operator whose brokers hold different ``BROKER_SECRETS_KEY`` values looked
        for a job that was there. A 404 is left for a token that is the job's, of a job no longer stored."""
        legacy = not token.startswith(JOB_TOKEN_V2)
        stored = self.store.get_job(job_id)
        # only the key its launch recorded makes its token (after a rotation an old key checks only jobs launched
        # under it); a job launched before keys were recorded, or no longer stored, is checked against every key
        key = stored.job_token_key if stored is not None else None
        if not job_token_valid(self.settings, job_id, token, legacy_allowed=legacy, key=key):
            raise _not_the_jobs_token(job_id)
        if legacy:  # a version 1 token (minted from the admin tokens' hashes) only for a job whose attempt holds one
            if stored is None:
                raise NotFound(job_id)
            if stored.job_token_version >= 2:
                raise _not_the_jobs_token(job_id)
        point = _progress_point(body, self.clock())

        def once() -> Job:
            job = self.store.get_job(job_id)
            if job is None:
                raise NotFound(job_id)
            if job.state.is_final:
                raise Conflict(f"the job is {job.state.value}", field="state")
            if point.get("attempt") is not None and point["attempt"] != job.attempts:
                # a process of an attempt the job moved past (preempted or lost, still running beside the next):
                # its steps and checkpoint would be taken for the new attempt's, and resumed from
                raise Conflict(f"the report is from attempt {point['attempt']}, and the job is at attempt "
                               f"{job.attempts}: a report of an attempt that is not the job's latest is not kept",
                               field="attempt")
            attempts = self.store.attempts(job_id)
            changes: dict[str, Any] = {"updated_at": point["time"]}
            records = []
            outside = point.get("checkpoint") and not in_own_base(job, point["checkpoint"]["uri"])
            notes = [self._outside_note(job, point)] if outside and not self._outside_noted(job) else []
            notes += self._not_restored(job, attempts, point)
            if point.get("step") is not None:
                # the first report's step and time, kept as a pair: progress stored before first_at was (an
                # upgrade) starts both afresh, or the queue took its old first step over seconds for its rate
                keep = job.progress.get("attempt") == job.attempts and "first_at" in job.progress
                changes["progress"] = {"step": point["step"], "total_steps": point.get("total_steps")
                                       or job.progress.get("total_steps"), "at": point["time"],
                                       "metrics": point.get("metrics", {}), "attempt": job.attempts,
                                       "first_step": job.progress.get("first_step") if keep else point["step"],
                                       "first_at": job.progress["first_at"] if keep else point["time"]}
            if point.get("checkpoint") and not outside:
                changes["last_checkpoint"] = {**point["checkpoint"], "at": point["time"], "attempt": job.attempts}
            reached = _checkpoint_step_ahead(job, point) if point.get("step") is None else None
            if reached is not None:
                # step reports are rate-limited, commits are not: a commit at step 50 after a report of step 10
                # means the run reached 50 (status said "step 10/300" beside "last checkpoint: step 50"). The
                # metrics are step 10's, not 50's: kept, status showed "step 50/300, loss 1.281" of step 10's
                # loss. Dropped until the next report (the metric points keep step 10's)
                changes["progress"] = {**job.progress, "step": reached, "at": point["time"], "metrics": {}}
            if attempts and point.get("step") is not None:
                a = attempts[-1]
                records.append(replace(a, last_step=point["step"],
                                       first_step=a.first_step if a.first_step is not None else point["step"],
                                       first_report_at=a.first_report_at or point["time"],
                                       checkpoint=changes.get("last_checkpoint", a.checkpoint)))
            elif attempts and point.get("checkpoint"):
                a = attempts[-1]
                ahead = reached is not None and a.last_step is not None and a.last_step < reached
                records.append(replace(a, checkpoint=changes.get("last_checkpoint", a.checkpoint),
                                       last_step=reached if ahead else a.last_step))
            kept = {k: v for k, v in point.items() if k != "checkpoint"} if outside else point
            return self._commit(Change(job=replace(job, **changes), expected_version=job.version, attempts=records,
                                       metrics=[kept] if point.get("step") is not None else [], events=notes))

        return self._retrying(once)

    def _not_restored(self, job: Job, attempts: Sequence[Attempt], point: dict[str, Any]) -> list[Event]:
        """The note, once an attempt, that the job's current attempt, launched to resume from the checkpoint of step S
        (``Attempt.resume_from``), did not restore it: its first step report, or its first commit, is of a step below
        S (the checkpoint was not found in the store, say, and the run began again). A script that reports step S
        itself just after its restore did restore it. The broker said "resuming from step 100" and status went from
        step 450 back to 50 with no word of why."""
        a = attempts[-1] if attempts else None
        if a is None or a.n != job.attempts or not a.resume_from:
            return []
        seen = []
        if point.get("step") is not None and a.first_step is None:
            seen.append(("step", point["step"]))
        if point.get("checkpoint") and not a.checkpoint:
            seen.append(("checkpoint", point["checkpoint"]["step"]))
        resumed = _resumed_step(job, attempts, a) if seen else None
        below = [(kind, step) for kind, step in seen if resumed is not None and step < resumed]
        if not below or noted(self.store.events(job.id), NOT_RESTORED_EVENT, job):
            return []
        kind, step = min(below, key=lambda k: k[1])
        first = f"its first report was of step {step}" if kind == "step" else \
            f"its first checkpoint was of step {step}"
        return [note_event(
            job, NOT_RESTORED_EVENT,
            f"attempt {a.n} did not restore the checkpoint of step {resumed} it was launched to resume from "
            f"({_shown_uri(a.resume_from)}): {first}, so it trained again from step {step} or before, and at least "
            f"{resumed - step} steps are trained again. See its log (broker logs {job.id} --attempt {a.n}): the "
            "checkpoint may not have been found in the store, or was damaged (the log names why)",
            time=point["time"], actor="job",
            data={"resume_step": resumed, "first_step": step, "steps_again": resumed - step, "uri": a.resume_from})]

    def _outside_noted(self, job: Job) -> bool:
        """Whether this attempt of ``job`` already has its note of a checkpoint reported outside its base: one note
        an attempt, not one per commit of a run that saves every few minutes for days."""
        return noted(self.store.events(job.id), OUTSIDE_BASE_EVENT, job)

    @staticmethod
    def _outside_note(job: Job, point: dict[str, Any]) -> Event:
        uri = point["checkpoint"]["uri"]
        shown = uri if len(uri) <= 200 else uri[:200] + "…"
        return note_event(job, OUTSIDE_BASE_EVENT,
                          f"a checkpoint of step {point['checkpoint']['step']} was reported at {shown}, outside this "
                          f"job's checkpoint base {job.checkpoint_uri}: it is not kept as the job's last checkpoint, "
                          "and a resume is not sent there (BROKER_RESUME_FROM). Save under $BROKER_CHECKPOINT_URI "
                          "(Checkpointer() with no uri), or name the base you save to in broker.checkpoint",
                          time=point["time"], actor="job", data={"step": point["checkpoint"]["step"], "uri": shown})

    def inject_fault(self, principal: Principal, kind: str, *, job_id: str | None = None,
                     zone: str | None = None, available: bool | None = None) -> dict[str, Any]:
        """Admins only: preempt an attempt (notice, grace, kill), kill a node (no notice), or change a zone's capacity."""
        if not principal.admin:
            raise Invalid("Authorization", "fault injection is for admins", status=403)
        launcher = self.launcher
        if launcher is None or not launcher.capabilities.simulated:
            raise Conflict("fault injection needs the local launcher with simulated zones (zones: in the config)",
                           field="kind")
        if kind == "zone":
            try:
                launcher.set_zone_available(zone or "", available)
            except KeyError:
                names = ", ".join(z.name for z in self.settings.zones) or "none is configured"
                raise Invalid("zone", f"no simulated zone {zone!r} (zones: {names})", status=404) from None
            except ValueError as exc:
                raise Invalid("zone", str(exc)) from None
            # no job to note it on: the serve log says who, so a zone's spot capacity gone is not read as the cloud's
            # None gives the zone back to its trace: "set unavailable" was logged for it, while /v1/zones said available
            log.info("fault injected by %s: spot capacity in zone %s %s", principal.name, zone,
                     {None: "follows its trace again", True: "set available", False: "set unavailable"}[available])
            return {"zone": zone, "available": available}
        job = self.get(principal, job_id or "")
        if job.state not in (JobState.RUNNING, JobState.LAUNCHING):
            raise Conflict(f"the job is {job.state.value}, not running", field="state")
        attempt_id = f"{job.id}-a{job.attempts}"
        attempt = next((a for a in self.store.attempts(job.id) if a.id == attempt_id), None)
        if kind not in ("preempt", "kill"):
            raise Invalid("kind", "must be preempt, kill or zone")
        (_check_preemptible if kind == "preempt" else _check_on_this_host)(attempt)
        # a run another broker launched (brokers on other hosts, a data dir each) is not this launcher's to touch:
        # the fault was answered "it was already ending" (applied: false) while the job ran on, as logs says it
        where = attempt.launched_in if attempt is not None else ""
        if self._launched_elsewhere(where):
            raise Conflict(f"attempt {job.attempts} was launched by another broker process, whose launcher ({where}) "
                           f"runs it: send the fault to that broker", field="job_id")
        if kind == "preempt":
            done = launcher.preempt(attempt_id)
        else:
            launcher.kill(attempt_id)
            done = True
        if done:
            self._note_fault(principal, job.id, kind, job.attempts)
        return {"job": job.id, "attempt": attempt_id, "fault": kind, "applied": bool(done)}

    def _note_fault(self, principal: Principal, job_id: str, kind: str, n: int) -> None:
        """A ``fault_injected`` event on the job, as a budget change is noted: an injected preemption or lost node
        left no trace in its events, and read as the cloud's (or the pool's) everywhere. Written after the fault is
        applied (nothing is noted that did not happen); the fault stands if the note cannot be written, said in the
        log."""
        what = "a preemption (notice, then its grace)" if kind == "preempt" else "a lost node (killed without notice)"

        def once() -> Job:
            job = self.store.get_job(job_id)
            if job is None:
                raise Conflict("the job is no longer stored", field="state")
            now = self.clock()
            note = note_event(job, "fault_injected", f"{what} injected into attempt {n} by {principal.name} "
                                                     f"(broker fault {kind})", time=now, actor=principal.name,
                              data={"fault": kind, "attempt": n})
            return self._commit(Change(job=replace(job, updated_at=now), expected_version=job.version,
                                       events=[replace(note, attempt=n)]))

        try:
            self._retrying(once)
        except Conflict as exc:
            log.warning("fault %s injected into %s-a%d by %s, but not noted on the job: %s", kind, job_id, n,
                        principal.name, exc)


def _not_the_jobs_token(job_id: str) -> Unauthorized:
    return Unauthorized(f"the job token sent is not valid for job {job_id}: send that job's own BROKER_JOB_TOKEN, "
                        "as the broker that launched it set it. Brokers sharing a store need one BROKER_SECRETS_KEY "
                        "(BROKER_SECRETS_OLD_KEYS for a key rotated out), or each refuses the tokens the others mint")


def _check_on_this_host(attempt: Attempt | None) -> None:
    """A lost node is simulated by killing the attempt's process here: a cloud attempt (the SkyPilot launcher beside
    the local one) has none, and the kill was reported applied while nothing happened."""
    if attempt is None:
        raise Conflict("the job has no attempt to kill yet", field="state")
    p = attempt.placement
    if p.get("tier") == Tier.ONPREM.value or p.get("simulated"):
        return
    raise Conflict(f"attempt {attempt.n} runs on {p.get('tier')} capacity in {p.get('cloud')}/"
                   f"{p.get('zone') or p.get('region')}, not on this host: only a pool's or a simulated zone's "
                   "node can be killed from here", field="kind")


def _check_preemptible(attempt: Attempt | None) -> None:
    """Only spot capacity is taken back: a preemption injected into an attempt on a pool or on on-demand was
    carried out, then diagnosed as "Spot capacity was preempted ... in local", a fault no such placement has.
    (A lost node, ``kill``, can befall any of them.) A real cloud's spot VM is preempted by its cloud alone."""
    if attempt is None:
        raise Conflict("the job has no attempt to preempt yet", field="state")
    p = attempt.placement
    if p.get("tier") == Tier.SPOT.value and p.get("simulated"):
        return
    if p.get("tier") == Tier.ONPREM.value:
        where = f"the on-prem pool {p.get('zone')}"
    elif p.get("simulated"):
        where = f"the {p.get('tier')} zone {p.get('zone')}"
    else:
        where = f"{p.get('tier')} capacity in {p.get('cloud')}/{p.get('zone') or p.get('region')}, not a simulated zone"
    raise Conflict(f"attempt {attempt.n} runs on {where}: only a simulated spot zone's capacity is preempted "
                   "(the kill fault simulates a lost node)", field="kind")


MAX_STEP = 2**63 - 1
"""The largest step or metric a report may give: what every store keeps as a whole number."""
# MAX_CHECKPOINT_URI (broker.spec's, as for broker.checkpoint) is also the longest checkpoint URI a report may give:
# it is handed to the next attempt in BROKER_RESUME_FROM, and the kernel refuses an environment string over 128 KiB
# (E2BIG): one report of a longer URI failed every attempt after it at launch, each read as a lost node.


OUTSIDE_BASE_EVENT = "checkpoint_outside_base"
"""The note on a job whose run reported a committed checkpoint outside its own base (:func:`broker.spec.in_own_base`)."""
NOT_RESTORED_EVENT = "resume_not_restored"
"""The note on a job whose attempt, launched to resume from a checkpoint, began below that checkpoint's step
(:meth:`BrokerService._not_restored`)."""


def _resumed_step(job: Job, attempts: Sequence[Attempt], attempt: Attempt) -> int | None:
    """The step of the checkpoint ``attempt`` was launched to resume from (its ``resume_from``): the job's last
    checkpoint at its launch, while the attempt has committed none of its own, else the attempt that committed it."""
    last = job.last_checkpoint or {}
    if last.get("uri") == attempt.resume_from and last.get("attempt") != attempt.n and _whole(last.get("step")):
        return last["step"]
    for earlier in reversed(attempts):
        if earlier.n < attempt.n and (earlier.checkpoint or {}).get("uri") == attempt.resume_from \
                and _whole(earlier.checkpoint.get("step")):
            return earlier.checkpoint["step"]
    return None


def _shown_uri(uri: str) -> str:
    return uri if len(uri) <= 200 else uri[:200] + "…"


def _progress_point(body: dict[str, Any], now: float) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise Invalid("body", "must be a JSON object")
    point: dict[str, Any] = {"time": now}
    for key in ("step", "total_steps"):
        if body.get(key) is not None:
            v = body[key]
            if not _whole(v):
                raise Invalid(key, f"must be a whole number from 0 to {MAX_STEP}")
            point[key] = v
    metrics = body.get("metrics")
    if metrics is None:
        metrics = {}
    if not isinstance(metrics, dict) or len(metrics) > 50 or not all(
            isinstance(k, str) and 0 < len(k) <= 200 and _printable(k) and (v is None or _finite(v) or _nonfinite(v))
            for k, v in metrics.items()):
        raise Invalid("metrics", "must be an object of up to 50 numbers (or null), each named by 1 to 200 characters")
    # a loss gone to NaN or Infinity is kept as null, with the rest of the report: stored as NaN, the job's metrics
    # and cost report answered 500 ever after (JSON has no NaN), and refusing the report would lose its step too
    point["metrics"] = {k: None if _nonfinite(v) else v for k, v in metrics.items()}
    ckpt = body.get("checkpoint")
    if ckpt is not None:
        if not isinstance(ckpt, dict) or not isinstance(ckpt.get("uri"), str) or not _whole(ckpt.get("step")):
            raise Invalid("checkpoint", "must be {\"step\": N, \"uri\": \"...\"}, N a whole number from 0 to "
                                        f"{MAX_STEP}")
        uri = ckpt["uri"]
        if not uri.strip() or len(uri) > MAX_CHECKPOINT_URI or not _printable(uri):
            raise Invalid("checkpoint.uri", f"must be 1 to {MAX_CHECKPOINT_URI} characters with no control "
                                            "characters: the next attempt is given it in BROKER_RESUME_FROM")
        # as a submit's broker.checkpoint is checked: "../x" or "javascript:x" was kept, and handed to the next
        # attempt as where to resume from
        problem = checkpoint_uri_problem(uri.strip())
        if problem:
            raise Invalid("checkpoint.uri", problem)
        point["checkpoint"] = {"step": ckpt["step"], "uri": uri}
        point.setdefault("step", None)
    if body.get("attempt") is not None:  # sent by the checkpoint library from BROKER_ATTEMPT; older ones send none
        if not _whole(body["attempt"]) or body["attempt"] < 1:
            raise Invalid("attempt", "must be the attempt's number ($BROKER_ATTEMPT), a whole number from 1")
        point["attempt"] = body["attempt"]
    if "step" not in point and "checkpoint" not in point:
        raise Invalid("step", "a report needs a step or a checkpoint")
    return point


def _whole(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_STEP


def _finite(v: Any) -> bool:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    return -MAX_STEP <= v <= MAX_STEP if isinstance(v, int) else math.isfinite(v)


def _nonfinite(v: Any) -> bool:
    return isinstance(v, float) and not math.isfinite(v)


def _printable(text: str) -> bool:
    """No control character (NUL cannot be in an environment variable) and no lone surrogate (``"\\ud800"`` in
    JSON), which cannot be written as UTF-8: a response holding it failed."""
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _secret_start_tail(data: bytes, values: Sequence[bytes]) -> int:
    """How many bytes at the end of ``data`` may be the start of a secret value whose rest is not written yet (the
    longest such part; 0 for none): a page ending there showed the start of the secret, and the next one its rest,
    neither of them the value to hide."""
    return max((k for v in values for k in range(min(len(v) - 1, len(data)), 0, -1) if data.endswith(v[:k])),
               default=0)


def _hide_secrets(data: bytes, start: int, values: Sequence[bytes]) -> str:
    """``data`` from ``start`` on, as text, with each secret value in it shown as ``***`` (the bytes before
    ``start`` only tell whether one began there). As :func:`broker.sealing.redact`: a value shorter than
    ``SHORT_SECRET`` (4) is hidden only where it stands alone, not inside a longer word or number — a secret ``1``
    hidden everywhere hid every ``1`` of the log, and so short a value inside a word gives nothing away."""
    spans: list[list[int]] = []
    for value in values:
        short = len(value.decode("utf-8", "surrogatepass")) < SHORT_SECRET
        pattern = rb"(?<!\w)" + re.escape(value) + rb"(?!\w)" if short else re.escape(value)
        spans += [list(m.span()) for m in re.finditer(pattern, data) if m.end() > start]
    merged: list[list[int]] = []
    for span in sorted(spans):  # two values that overlap, or follow one another, are one ***
        if merged and span[0] <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], span[1])
        else:
            merged.append(span)
    pieces, at = [], start
    for begin, end in merged:
        pieces += [data[at:max(begin, at)].decode("utf-8", "replace"), "***"]
        at = end
    pieces.append(data[at:].decode("utf-8", "replace"))
    return "".join(pieces)


def _partial_utf8_tail(data: bytes) -> int:
    """How many bytes at the end of ``data`` are the start of a UTF-8 character whose rest is not there (0 when it
    ends on a whole character, or on bytes that are not UTF-8 at all, which no further read would complete)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # not a continuation byte: the character's first byte, or ASCII
            need = 2 if byte & 0xE0 == 0xC0 else 3 if byte & 0xF0 == 0xE0 else 4 if byte & 0xF8 == 0xF0 else 1
            return back if need > back else 0
    return 0
