"""Public views of the broker's records: what the API, CLI and Slack show. Never a raw row."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from broker.models import Attempt, Event, Job
from pricing.money import fmt, fmt_limit


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


def duration(seconds: int | float) -> str:
    """``45 s``, ``12 min``, ``6.0 h``: a span at a glance (a recovery of 40 s read "0 min"), rounded down like the
    minutes, in whole tenths of an hour, as the dashboard's ``duration`` (4,500 s read 1.2 h here, rounded half to
    even, and 1.3 h there, rounded half up)."""
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min"
    tenths = seconds // 360
    return f"{tenths // 10}.{tenths % 10} h"


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


def job_view(job: Job, *, position: int | None = None, attempts: list[Attempt] | None = None,
             estimated_start: float | None = None) -> dict[str, Any]:
    view: dict[str, Any] = {
        "id": job.id,
        "name": job.name,
        "team": job.team,
        "state": job.state.value,
        "reason": job.reason,
        "priority": job.priority,
        "submitted_at": iso(job.submitted_at),
        "updated_at": iso(job.updated_at),
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
        "version": job.version,
    }
    if attempts is not None:
        view["attempt_list"] = [attempt_view(a) for a in attempts]
    return view


def attempt_view(a: Attempt) -> dict[str, Any]:
    return {
        "id": a.id,
        "n": a.n,
        "state": a.state.value,
        "launcher": a.launcher,
        "placement": a.placement,
        "price_per_hour": money(a.price_per_hour),
        "created_at": iso(a.created_at),
        "started_at": iso(a.started_at),
        "ended_at": iso(a.ended_at),
        "exit_code": a.exit_code,
        "reason": a.reason,
        "cost": money(a.cost),
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
