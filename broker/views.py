"""Public views of the broker's records: what the API, CLI and Slack show. Never a raw row."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

from broker import costs
from broker.lifecycle import JobState
from broker.models import Attempt, Event, Job
from broker.queue import STARVED_SECONDS, Holder, work_left_seconds
from pricing.money import cost_for_seconds, fmt, fmt_limit, fmt_rate


def iso(t: float | None) -> str | None:
    if not t:
        return None
    try:
        return datetime.fromtimestamp(t, tz=timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    except (OverflowError, OSError, ValueError):  # beyond year 9999: only a row stored before deadlines were bounded
        return f"{t:.0f}"


def money(micros: int | None) -> dict[str, Any] | None:
    """Money on the wire: exact micro-dollars for scripts, and a string for people."""
    if micros is None:
        return None
    return {"micros": micros, "usd": fmt(micros)}


def rate(micros: int | None) -> dict[str, Any] | None:
    """A price per hour on the wire: as :func:`money`, its string exact (``$3.333``, :func:`fmt_rate`), not a cost
    rounded up ("$3.34"), so the seconds times the rate shown give the cost shown."""
    if micros is None:
        return None
    return {"micros": micros, "usd": fmt_rate(micros)}


def duration(seconds: int | float, *, nearest: bool = False) -> str:
    """``45 s``, ``12 min``, ``6.0 h``: a span at a glance (a recovery of 40 s read "0 min"), rounded down like the
    minutes, in whole tenths of an hour, as the dashboard's ``duration`` (4,500 s read 1.2 h here, rounded half to
    even, and 1.3 h there, rounded half up).

    ``nearest``: each unit rounded to its nearest, half up, for a span to a moment set from now (a deadline given as
    ``2h``, shown just after as "in 1.9 h": milliseconds had passed), which rounding down shows short of it."""
    seconds = int(seconds + 0.5) if nearest else int(seconds)
    if seconds < 60:
        return f"{seconds} s"
    minutes = (seconds + 30 * nearest) // 60
    if minutes < 60:
        return f"{minutes} min"
    tenths = (seconds + 180 * nearest) // 360
    return f"{tenths // 10}.{tenths % 10} h"


DAYS_FROM_HOURS = 48
"""From this many hours on, :func:`far_duration` says a span in days: a deadline months away read "in 2667.4 h"."""


def far_duration(seconds: int | float, *, nearest: bool = False) -> str:
    """A span from now to a moment that may be months away (a deadline), as :func:`duration` says it below
    :data:`DAYS_FROM_HOURS` hours (``16.0 h``, ``47.9 h``) and in days from there: to a tenth, rounded down as the
    hours are, under ten days (``2 days``, ``2.5 days``), in whole days from ten (``111 days``). ``nearest``: each
    rounded to its nearest instead, as :func:`duration` does."""
    seconds = int(seconds + 0.5) if nearest else int(seconds)
    if seconds < DAYS_FROM_HOURS * 3600:
        return duration(seconds, nearest=nearest)
    days, tenth = divmod((seconds + 4320 * nearest) // 8640, 10)
    if nearest and days >= 10:  # whole days: 10.6 days is 11
        return f"{(seconds + 43200) // 86400} days"
    return f"{days} days" if days >= 10 or not tenth else f"{days}.{tenth} days"


MANY_TIMES = 10
"""Past this many times the on-demand cost, a share of it is said as "over 10 times": a job whose on-demand
equivalent is a few micro-dollars read "paid $0.0045 (449900%) more"."""


NOTHING_TO_COMPARE = "nothing to compare with on-demand"


def saving_words(saving: dict[str, Any], percent: int | None, versus: str = "") -> str:
    """A saving against on-demand (a :func:`money` dict) in words: ``saved $15.00 (75%) against <versus>``, or, when
    the work cost more than on-demand would have, ``paid $0.10 (10%) more than <versus>`` — never "saved -$0.10".

    ``percent`` is the report's ``saving_percent`` (rounded down, ``None`` with no on-demand figure). Work that cost
    more than :data:`MANY_TIMES` its on-demand equivalent says so (``paid $0.0045 more, over 10 times the
    on-demand cost``) rather than a share in the thousands of percent. With nothing to compare (``percent`` is
    ``None`` and nothing saved: nothing ran, or ran for no time or at no price) it says
    :data:`NOTHING_TO_COMPARE`, as the dashboard's card does, never "saved $0.00 against on-demand ($0.00)". The
    amount saved is the view's ``usd``, rounded down (``broker.costs.saving``); an amount paid more is a cost, rounded
    up.
    """
    if percent is None and saving["micros"] == 0:
        return NOTHING_TO_COMPARE
    if saving["micros"] < 0:
        than = f" than {versus}" if versus else ""
        # percent = 100 - ceil(100 × spent / equivalent): below this, spent > MANY_TIMES × equivalent, exactly
        if percent is not None and percent < 100 - 100 * MANY_TIMES:
            return f"paid {fmt(-saving['micros'])} more{than}, over {MANY_TIMES} times the on-demand cost"
        pct = f" ({-percent}%)" if percent is not None else ""
        return f"paid {fmt(-saving['micros'])}{pct} more{than}"
    pct = f" ({percent}%)" if percent is not None else ""
    return f"saved {saving['usd']}{pct}" + (f" against {versus}" if versus else "")


def nothing_to_compare(saving: dict[str, Any], percent: int | None) -> bool:
    """Whether a figure has no on-demand price to weigh it against (``percent`` is ``None`` and nothing saved): where
    the report's on-demand equivalent is the spend itself (on-prem work, work on on-demand itself, nothing run), and
    every edge says :data:`NOTHING_TO_COMPARE` rather than name it as an on-demand price."""
    return percent is None and saving["micros"] == 0


def ondemand_cell(equivalent: dict[str, Any], saving: dict[str, Any], percent: int | None) -> str:
    """An on-demand equivalent in a table's cell (a team's row): ``—`` where there is nothing to compare
    (:func:`nothing_to_compare`, as the line above the table decides it), for it is the spend repeated there: a team
    of on-prem work read "$2.64" under "same time on-demand" below "nothing to compare with on-demand"."""
    return "—" if nothing_to_compare(saving, percent) else equivalent["usd"]


def saving_cell(saving: dict[str, Any], percent: int | None) -> str:
    """A saving in a table's cell (a team, a job): :func:`saving_words` without what it is against, which the column
    says; ``—`` with no on-demand figure to weigh it against (``percent`` is ``None``: nothing ran, or at no
    price), where a signed "-$0.40" or a "saved $0.00" said nothing true."""
    return "—" if percent is None else saving_words(saving, percent)


def limit(micros: int | None) -> dict[str, Any] | None:
    """A limit the user set (a budget) on the wire: shown exactly, never rounded up past what it allows."""
    if micros is None:
        return None
    return {"micros": micros, "usd": fmt_limit(micros)}


NAMED_HOLDERS = 3
"""How many jobs holding what a queued job waits for its reason names (then "and N more")."""


def minute(t: float) -> str:
    """A time to the nearest minute, UTC, of its whole second: as ``broker queue``'s ``starts ~`` column reads the
    ``estimated_start`` (``broker.cli._short_time`` of :func:`iso`), so that the reason beside it names the same
    minute (it rounded the start up, and read "06:06Z" beside "starts ~ 06:05Z")."""
    return time.strftime("%Y-%m-%d %H:%MZ", time.gmtime((math.floor(t) + 30) // 60 * 60))


def _second(t: float) -> str:
    """A time to the second, UTC, as :func:`iso` (``broker status``) gives it."""
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(math.floor(t)))


def _start_and_deadline(start: float, deadline: float) -> tuple[str, str]:
    """An estimated start and a deadline as a reason names them: to the minute, the start as the queue's column
    shows it; to the second, as ``broker status`` shows the start, when the two fall in the same minute, or minutes
    would not tell them apart or would put them in the wrong order. The start rounded up and the deadline down read
    "estimated to start at 06:06Z, too late for its deadline at 06:06Z" beside a column's "starts ~ 06:05Z" and a
    status's 06:05:28Z."""
    shown = minute(start), time.strftime("%Y-%m-%d %H:%MZ", time.gmtime(math.floor(deadline) // 60 * 60))
    if shown[0] == shown[1] or (shown[0] < shown[1]) != (start <= deadline) or start // 60 == deadline // 60:
        return _second(start), _second(deadline)
    return shown


LATE_START = "estimated to start at "
"""How the words begin that say a queued job's estimated start is too late for its deadline (:func:`deadline_words`):
what a submit's answer picks out of the job's reason (``broker.cli._say_behind``)."""


def deadline_words(job: Job, estimated_start: float | None) -> str | None:
    """For a queued job with a deadline, when its estimated start is too late to meet it: after the deadline, or
    with its expected length (for a job that ran before, what is left of it after its last checkpoint:
    :func:`broker.queue.work_left_seconds`) ending past it. ``None`` when it is not, or cannot be told. Words only:
    the scheduler goes on as before (its spot policy already weighs the deadline for a job it may place on spot)."""
    if job.state is not JobState.QUEUED or not estimated_start or job.deadline is None:
        return None
    start, deadline = _start_and_deadline(estimated_start, job.deadline)
    if estimated_start > job.deadline:
        return f"{LATE_START}{start}, after its deadline at {deadline}"
    work = work_left_seconds(job)
    if work is None or estimated_start + work <= job.deadline:
        return None
    whole = float(Decimal(job.expected_hours or 0) * 3600)
    length = f"its expected {duration(work)}" if work >= whole else \
        f"the {duration(work)} left of its expected {duration(whole)}"
    return f"{LATE_START}{start}, too late for its deadline at {deadline} with {length}"


DEADLINE_PASSED = "its deadline at "
"""How the words begin that say a queued job's deadline has passed (:func:`passed_words`)."""


def deadline_at(deadline: float) -> str:
    """A deadline as the words saying it has passed name it: to the second, as ``broker status`` shows it — to the
    minute, rounded, a deadline of 00:10:40 read "00:11" when it had passed at 00:10:50."""
    return _second(deadline)


TASK_FIX_CLASSES = frozenset({"bad_arguments", "dependency_missing", "script_not_found", "setup_error", "cuda_mismatch",
                              "not_started"})
"""Diagnoses of a failure whose fix is, most likely, in the task itself: its setup or run command, which a resume runs
as submitted (each hint says to submit the task again). ``next:`` and a refused resume sent the user to
``broker resume --force`` for them, which fails the same way."""


def resume_from_words(step: int | None) -> str:
    """From where a resume continues a job: ``from its last checkpoint (step 300)``, or, for a job that saved none,
    ``from the start (it saved no checkpoint)``."""
    return f"from its last checkpoint (step {step})" if step is not None else "from the start (it saved no checkpoint)"


def resubmit_keep_words(checkpoint_uri: str | None, step: int | None) -> str:
    """How a new submit of a job's task goes on from its checkpoint (`` (with broker.checkpoint: URI to continue
    from step 300)``), or "" for a job that saved none."""
    return f" (with broker.checkpoint: {checkpoint_uri} to continue from step {step})" \
        if step is not None and checkpoint_uri else ""


def task_fix_words(job_id: str, where: str, keep: str) -> str:
    """What continues a job whose failure is of :data:`TASK_FIX_CLASSES`: a new submit, and ``--force`` only where the
    fix is in the files a workdir on the broker's host holds (read anew at each attempt). ``where``: from what it
    resumes; ``keep``: how a new submit goes on from its checkpoint, or ""."""
    return (f"the fix is in the task (its setup or run command), which a resume runs as it was submitted: fix it and "
            f"submit the task again{keep}; only where the fix is in the files of a workdir on the broker's host (read "
            f"anew at each attempt) does `broker resume {job_id} --force` continue it {where}")


ENDED_AS = {JobState.FAILED.value: "it failed", JobState.CANCELLED.value: "it was cancelled",
            JobState.STOPPED_BUDGET.value: "it was stopped at its budget"}
"""How a job that ended otherwise than succeeding ended, for :func:`deadline_met_words`."""


def deadline_met_words(state: str, deadline: float, ended: float) -> str | None:
    """For a job that has ended (``state``, at ``ended``: its last change, which the engine keeps as its end), whether
    it met its ``deadline``: ``met, 2 min before it`` (it succeeded by then), ``missed by 5 min`` (it ended after it),
    or for one that ended otherwise before it, ``not met: it failed 3 min before it``. ``None`` for a job not ended,
    whose deadline is still ahead of it or passed (``in 51 s``, ``5 min ago``): ``broker status`` of an ended job went
    on counting down to its deadline, as if it still ran."""
    if state not in ENDED_AS and state != JobState.SUCCEEDED.value:
        return None
    if ended > deadline:
        return f"missed by {far_duration(ended - deadline)}"
    before = f"{far_duration(deadline - ended)} before it"
    return f"met, {before}" if state == JobState.SUCCEEDED.value else f"not met: {ENDED_AS[state]} {before}"


def passed_words(job: Job, now: float) -> str | None:
    """For a queued job whose deadline has passed: that it has, how long ago, and that the job still runs. Its
    reason went on saying what it waited for ("zones … are full right now"), and ``broker status`` "deadline …
    (24 s ago)", with nothing to say the job waited on past it. ``None`` for a job not queued, with no deadline, or
    before it. The scheduler goes on as before: a late run may still be of use, and its user may cancel it."""
    if job.state is not JobState.QUEUED or job.deadline is None or now < job.deadline:
        return None
    return (f"{DEADLINE_PASSED}{deadline_at(job.deadline)} passed {duration(now - job.deadline)} ago: it still runs "
            f"when it can start, late (cancel it if a late run is of no use)")


def holders_words(holders: Sequence[Holder], team: str | None = None) -> str | None:
    """Why a queued job waiting for capacity has no start estimate, when the jobs holding what it needs (or queued
    ahead of it to take it) have ends nobody can tell (:func:`broker.queue.waits`): named, with how far past its
    expected length each one that runs past it is. Its estimate vanished unsaid while a job ran over its length.
    Told to a viewer of ``team`` (None: an admin, who sees every job), another team's jobs are not named — that
    viewer cannot look them up (404), and a team sees only its own jobs — but counted: "a job of another team"."""
    if not holders:
        return None

    def named(h: Holder) -> bool:
        return team is None or h.team is None or h.team == team

    # a pool's head whose start cannot be told, which keeps the pool from this job (broker.queue.waits), as the
    # scheduler's reason says it once the pool has a free slot (broker.engine.schedule._kept_words)
    kept = [f"it waits behind {h.job_id if named(h) else 'a job of another team'}, "
            + (f"which has waited more than {STARVED_SECONDS / 60:.0f} min for pool {h.location}: what comes free "
               "there is kept for it, and this job starts after it" if h.starved else
               f"first in line for pool {h.location}, whose start cannot be told: what comes free there is kept for "
               "it from the jobs that give no `broker: expected_hours`, as this one gives none") for h in holders
            if h.head]
    holders = [h for h in holders if not h.head]
    if not holders:
        return f"no start estimate: {'; '.join(kept)}"
    held = [f"{h.job_id} (running {duration(h.overdue)} past its expected "
            f"{duration(float(Decimal(h.expected_hours or 0) * 3600))})" if h.overdue is not None
            else f"{h.job_id} (with no expected length)" for h in holders if not h.ahead and named(h)]
    held += _others([h for h in holders if not h.ahead and not named(h)])
    ahead = [h.job_id for h in holders if h.ahead and named(h)] + _others([h for h in holders
                                                                          if h.ahead and not named(h)])
    parts = []
    if held:
        parts.append(f"what it needs is held by {_series(held)}")
    if ahead:
        parts.append(f"it waits behind {_series(ahead)}, ahead of it in the queue with no expected length")
    one = len(holders) == 1
    said = f"{', and '.join(parts)}; when {'that ends' if one else 'those end'} cannot be told"
    return f"no start estimate: {'; '.join([*kept, said])}"


def _others(holders: Sequence[Holder]) -> list[str]:
    """Other teams' jobs among the holders, counted and not named (:func:`holders_words`)."""
    if not holders:
        return []
    if len(holders) == 1:
        return ["a job of another team"]
    # "of other teams" of two jobs of one team read as two teams; which team it is stays unsaid
    return [f"{len(holders)} jobs of {'another team' if len({h.team for h in holders}) == 1 else 'other teams'}"]


def _series(names: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``; past :data:`NAMED_HOLDERS`, ``a, b, c and 2 more``."""
    names = list(names)
    if len(names) > NAMED_HOLDERS:
        names = [*names[:NAMED_HOLDERS], f"{len(names) - NAMED_HOLDERS} more"]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def shown_reason(job: Job, estimated_start: float | None = None, waiting: str | None = None) -> str:
    """A job's reason as it is shown: its stored reason, and for a queued job, what its estimate leaves unsaid —
    that it starts too late for its deadline (:func:`deadline_words`), or why it has no estimate (``waiting``:
    :func:`holders_words`, from :meth:`broker.service.BrokerService.queue_waits`), and that its deadline has passed
    (:func:`passed_words`, in ``waiting`` too). Not stored: it is as of now."""
    # a deadline already passed is said by ``waiting`` (:func:`passed_words`): not again as a start "after" it
    late = None if waiting and waiting.startswith(DEADLINE_PASSED) else deadline_words(job, estimated_start)
    notes = [n for n in (late, waiting if job.state is JobState.QUEUED else None) if n]
    return "; ".join([job.reason, *notes]) if job.reason and notes else "; ".join(notes) or job.reason


def beside_state(state: str, reason: str) -> str:
    """A job's or attempt's reason shown beside its state, less a lead that says the state again: "succeeded │
    succeeded: the run command exited 0" read twice (the dashboard shows such a reason alone, in place of its
    state). Only ``<state>: `` goes: a reason that merely begins with the word ("failed for ...") is kept whole."""
    rest = reason[len(state) + 2:] if state and reason and reason.startswith(f"{state}: ") else ""
    return rest or reason


def step_words(state: str, progress: dict | None) -> str | None:
    """How far a running job has got, from the progress it last reported (``step 150/300``; ``step 150`` with no
    total); ``None`` for a job not running or that reported no step. Its reason is its last change of state ("the
    attempt started"), hours old in a long run: lists (``broker status``, Slack) lead it with this."""
    step = (progress or {}).get("step")
    if state != JobState.RUNNING.value or not isinstance(step, int) or isinstance(step, bool):
        return None
    total = (progress or {}).get("total_steps")
    return f"step {step}/{total}" if isinstance(total, int) and not isinstance(total, bool) and total > 0 \
        else f"step {step}"


def job_view(job: Job, *, position: int | None = None, attempts: list[Attempt] | None = None,
             estimated_start: float | None = None, waiting: str | None = None) -> dict[str, Any]:
    view: dict[str, Any] = {
        "id": job.id,
        "name": job.name,
        "team": job.team,
        "state": job.state.value,
        "reason": shown_reason(job, estimated_start, waiting),
        "priority": job.priority,
        "submitted_at": iso(job.submitted_at),
        # never before its submit: the engine stamps a tick's changes with the time the tick began, and a job
        # submitted during that tick read a second before its own submit (…:59Z beside :00Z) when the two fell
        # either side of a second
        "updated_at": iso(max(job.updated_at, job.submitted_at) if job.updated_at else job.updated_at),
        "deadline": iso(job.deadline),
        "budget": limit(job.budget),
        "spent": money(job.spent),
        "quote": job.quote,
        "placement": job.placement or None,
        "attempts": job.attempts,
        "checkpoint_uri": job.checkpoint_uri,
        "queue_position": position,
        "estimated_start": iso(estimated_start),
        "progress": job.progress or None,
        "last_checkpoint": job.last_checkpoint or None,
        "diagnosis": job.diagnosis or None,
        "pinned_tier": job.force_tier,  # `broker ondemand`'s pin: was said only by an event
        # who pinned it: a user, or the engine leaving spot to meet the deadline ("pinned to on-prem" read as the user's)
        "pinned_by": job.pinned_by if job.force_tier else None,
        "version": job.version,
    }
    if attempts is not None:
        view["attempt_list"] = [attempt_view(a, budget=job.budget) for a in attempts]
    return view


def attempt_view(a: Attempt, *, budget: int | None = None) -> dict[str, Any]:
    """An attempt on the wire; its cost shown to its job's ``budget``'s decimals where given (:func:`costs.money_in`)."""
    return {
        "id": a.id,
        "n": a.n,
        "state": a.state.value,
        "launcher": a.launcher,
        "placement": a.placement,
        "price_per_hour": rate(a.price_per_hour),
        "created_at": iso(a.created_at),
        "started_at": iso(a.started_at),
        "ended_at": iso(a.ended_at),
        # billed to: past its end where its run went on after the broker ended it (a run another broker took over
        # and stopped later, a cloud cluster torn down after its run), which its cost counts
        "billed_until": iso(a.billed_until),
        "exit_code": a.exit_code,
        "reason": a.reason,
        "cost": money(a.cost) if budget is None else costs.money_in(a.cost, budget),
        "resume_from": a.resume_from,
        "checkpoint": a.checkpoint or None,  # the latest checkpoint this attempt committed
        "last_step": a.last_step,
        "steps_lost": a.steps_lost,
    }


def event_view(e: Event) -> dict[str, Any]:
    return {
        "seq": e.seq,
        "time": iso(e.time),
        "event": e.event,
        "from": e.from_state,
        "to": e.to_state,
        "reason": e.reason,
        "actor": e.actor,
        "attempt": e.attempt,
        "data": e.data,
    }


def dry_run_view(run: Any) -> dict[str, Any]:
    """A dry run's answer (:class:`broker.service.DryRun`): the quote as the job would keep it (``quote``, as a
    job's), its cheapest way as one figure (a total with ``expected_hours``, else per hour), what the budget covers,
    where the scheduler would place it now, and where it would stand in the queue. Nothing of it was stored."""
    job: Job = run.job
    quote = job.quote or {}
    tiers = [t for t in quote.get("tiers") or [] if isinstance(t.get("price_per_hour"), int)]
    per_hour = bool(quote.get("per_hour_only", True))
    # the tier admission weighs the budget on: its estimate, or per hour its price (pricing.quote._figure)
    cheapest = min(tiers, key=lambda t: (t["price_per_hour"] if per_hour or t.get("estimate") is None
                                         else t["estimate"], t["price_per_hour"]), default=None)
    from broker.admission import budget_lasts

    # until its budget stop on the cheapest tier it can start on (after the tier's billing after the run and the
    # clean stop: broker.admission.budget_lasts, what the CLI says per tier), as placement takes the lowest $/h
    lasts = next((s for s in (budget_lasts({"stop_seconds": run.stop_seconds, **quote}, job.budget) or {}).values()
                  if s is not None), None) if per_hour else None
    return {
        "dry_run": True,
        "existing_job": job.id if run.existing else None,
        "name": job.name,
        "team": job.team,
        "priority": job.priority,
        "budget": limit(job.budget),
        "deadline": iso(job.deadline),
        "expected_hours": job.expected_hours,
        "quote": job.quote,
        "estimate": money(cheapest.get("estimate")) if cheapest is not None and not per_hour else None,
        "price_per_hour": rate(cheapest["price_per_hour"]) if cheapest is not None else None,
        # with the clean stop the engine keeps of the budget, as admission weighs it (pricing.quote.Quote.fits)
        "budget_covers": None if per_hour else {
            t["tier"]: t.get("estimate") is not None
            and t["estimate"] + cost_for_seconds(t["price_per_hour"], run.stop_seconds) <= job.budget for t in tiers},
        "budget_lasts_seconds": lasts,
        "placement": run.placement,
        "reason": shown_reason(replace(job, reason=run.reason), run.start, run.waiting),
        "queue_position": run.position,
        "estimated_start": iso(run.start),
    }


def counted(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"


def preemptions_words(pre: dict) -> str:
    """The line of a cost report's preemptions (``/v1/costs``' ``preemptions``), as ``broker costs`` and Slack's
    ``costs`` say it: the time to recover is
    said of the jobs that resumed, and a job still queued after one is said to wait, for how long so far, as each
    event's ``recovered`` and ``waiting`` tell them apart: "1 preemption(s), 14 s to recover" was said of a job that
    had not resumed. Only the newest events are listed; where some are not, the total alone is said, as time lost."""
    count, lost = pre["count"], pre.get("lost") or 0
    if not count and not lost:
        return "no preemptions or lost nodes"
    zones = ", ".join(f"{z['zone']} {z['count']}" for z in pre["by_zone"])
    head = counted(count, "preemption") + (f", {counted(lost, 'node')} lost (not preempted)" if lost else "")
    tail = f" ({zones})" if zones else ""
    events = pre.get("events") or []
    if len(events) != count + lost:  # the newest listed only: which of the others resumed is not known here
        return f"{head}, {duration(pre['recovery_seconds'])} lost to them{tail}"
    kinds = {"recovered": [], "waiting": [], "ended": []}
    for e in events:
        kinds["recovered" if e.get("recovered") else "waiting" if e.get("waiting") else "ended"].append(
            e.get("recovery_seconds") or 0)
    took = {k: duration(sum(v)) for k, v in kinds.items()}
    if len(kinds["recovered"]) == len(events):
        return f"{head}, {took['recovered']} to recover{tail}"
    if len(kinds["waiting"]) == len(events):
        return f"{head}, waiting {took['waiting']} so far to resume{tail}"
    parts = []
    if kinds["recovered"]:
        parts.append(f"{len(kinds['recovered'])} recovered in {took['recovered']}")
    if kinds["waiting"]:
        parts.append(f"{len(kinds['waiting'])} waiting {took['waiting']} so far")
    if kinds["ended"]:
        parts.append(f"{len(kinds['ended'])} ended without resuming")
    return f"{head}{tail}: {', '.join(parts)}"
