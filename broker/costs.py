"""Cost aggregation: what each team spent, where, and what it saved against on-demand. Pure.

The one report behind ``GET /v1/costs``, the dashboard, the Slack ``costs``
command and ``/metrics``: so every edge shows the same numbers. Money is
integer micro-dollars end to end; edges format it.

Rules (documented for users in ``docs/slack.md``, "The cost report"):

* **Spend in a window.** An attempt's cost covers ``[created_at, billed_until]``
  (billing runs from launch). Its share of a window is apportioned by whole
  seconds with *cumulative* rounding — ``share(a, b) = F(b) - F(a)`` where
  ``F(t) = floor(cost × seconds_billed_by(t) / seconds_billed)`` — so the days
  of a window always add up exactly to the window, and all windows to the cost.
* **On-demand equivalent** of an attempt: the same seconds at the on-demand
  price of the same shape, taken from the first of: the placement's
  ``ondemand_price_per_hour``; the attempt's own price if it ran on-demand;
  the job's quote for tier ``ondemand``; the attempt's own price. When that
  price *is* the attempt's own price the equivalent is the attempt's cost, so
  on-demand work saves exactly $0. ``saving = equivalent - spend`` (negative
  when the cheaper-looking choice cost more). With no on-demand price found, or
  for work that ran on on-demand itself (:func:`ondemand_known`), there is
  nothing to compare: ``saving_percent`` is
  null for such a job, and for a team or the totals when none of their spend
  in the window had one (a pruned job's ledger entry, which keeps no such flag,
  counts as compared when its equivalent differs from its cost and it did not
  run on-demand).
* **Rounding.** Every cost is shown rounded up on its own (``fmt``: to the
  cent, under $1 to a hundredth of a cent) and every saving rounded down
  (``fmt_saving``: a claim, never overstated); the on-demand equivalent shown
  beside them is the spend shown plus the saving shown (``fmt_ondemand``), so
  the three add up as shown, and a total is the exact sum of
  its rows rounded once, never the sum of the rounded rows: the total is as
  exact as the rows are, and no cost is understated. So shown rows can add up
  to a cent or so more (or less) than their shown total; when they do, the
  report says so in ``rounding_note``, and every edge shows that line.
* **Preemption**: an attempt that ended ``preempted`` or ``lost``; ``count``
  and ``by_zone`` count those preempted, ``lost`` the nodes lost without notice
  (an on-prem pool node that went away: a pool is never preempted), and the
  events say which (``state``). Its recovery time runs from its end to the start of the next attempt (still
  counting while the job waits, and stopping when the job ended if it never
  resumed); that is the time lost to it. Each is shown in whole seconds rounded up, and their total is the exact
  sum rounded up once (as ``/metrics``' ``broker_recovery_seconds_sum`` holds it), so a time lost is never
  understated and a recovery under a second never reads "0 s".
* **Pruned jobs.** A job the retention policy deleted (``job_retention_days``,
  ``broker/retention.py``) is listed nowhere (not in ``top_jobs``, nor its
  preemptions), but its cost is not lost: the deletion adds each attempt's
  cost and on-demand equivalent, split by UTC hour as above (:func:`ledger_of`:
  ``F`` at each hour's bounds, so the hours add up exactly to a day's share),
  to a ledger by team, tier and hour (``JobStore.pruned_costs``), and a report
  counts the hours that begin in its window in its totals, by day, by team and
  by tier — to the hour, where a job's own attempts count to the second. The
  report says how much of it is there in ``retention_note``, which every edge
  shows (:func:`retention_note`); what they spent in the hour a window begins
  inside of, which the window does not count, is said there too; and, for jobs
  pruned before the ledger was kept (the store's pruned count beyond the jobs the ledger holds), that a
  window beginning before the retention horizon has its totals short of them.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from datetime import time as clock_time
from decimal import ROUND_FLOOR, Decimal
from typing import TYPE_CHECKING

from broker.engine.billing import billed_seconds
from broker.lifecycle import JobState
from broker.models import Attempt, CostAttempt, CostJob, Job
from broker.spec import SpecError, is_duration, moment_of
from pricing.money import (Micros, amount_shown, cost_for_seconds, fmt, fmt_limit, fmt_ondemand, fmt_rate, fmt_saving,
                           fmt_spent_of, ondemand_shown, shown)

if TYPE_CHECKING:  # the stores import this module (JobStore.prune: ledger_of)
    from broker.store.base import PrunedCosts

TIERS = ("onprem", "ondemand", "spot")
PERIODS = {"24h": 86_400, "7d": 7 * 86_400, "30d": 30 * 86_400, "90d": 90 * 86_400}
PERIOD_SPELLINGS = {"1d": "24h", "1w": "7d", "168h": "7d", "720h": "30d", "2160h": "90d"}
"""Other spellings of exactly those periods (a deadline takes ``1d``; ``--period 1d`` was refused), read as the
period they spell: the report labels its window by the period's own name."""
DAY = 86_400
# the report counts whole UTC days: a window starts no earlier than the first date there is, and ends a day before
# the last (past either, a day is out of datetime's range: a 500)
FIRST = datetime(1, 1, 1, tzinfo=timezone.utc).timestamp()
LAST = datetime(9999, 12, 31, tzinfo=timezone.utc).timestamp()
PREEMPTED_STATES = ("preempted", "lost")
LOST_STATE = "lost"
"""Of :data:`PREEMPTED_STATES`, a node lost without notice: its time to recover counts, but it is not a preemption."""
RUNNING_STATES = (JobState.PLACED, JobState.LAUNCHING, JobState.RUNNING, JobState.CANCELLING)
TOP_JOBS = 10


class CostQueryError(ValueError):
    """A bad window: ``field`` and the reason."""

    def __init__(self, field: str, reason: str):
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")


@dataclass(frozen=True)
class Window:
    """Half-open ``[since, until)`` in epoch seconds; ``label`` is what the caller asked for."""

    since: float
    until: float
    label: str


def period_choices() -> str:
    """``24h (or 1d), 7d (or 1w, 168h), 30d (or 720h), 90d (or 2160h)``: what a period may be, as a refusal lists it."""
    def spelled(name: str) -> str:
        also = [s for s, p in PERIOD_SPELLINGS.items() if p == name]
        return f"{name} (or {', '.join(also)})" if also else name

    return ", ".join(spelled(p) for p in PERIODS)


def window(*, now: float, period: str | None = None, since: str | None = None, until: str | None = None) -> Window:
    """The window a query asks for: ``period`` (``7d`` default) or ISO ``since``/``until``. It starts before ``now``
    (it may end after it) and spans at most 400 days, or the bound that breaks that is named."""
    if period is not None and (since or until):
        raise CostQueryError("period", "give either period or since/until, not both")
    # a bound given is read to the whole second, as the report shows it: since=…00.5Z until=…00.6Z was a window of a
    # tenth of a second, shown and answered as since == until, where the same bounds written so are refused
    end = math.floor(_iso(until, "until")) if until else now
    if since:
        start = math.floor(_iso(since, "since"))
        label = "custom"
    else:
        period = PERIOD_SPELLINGS.get(period or "7d", period or "7d")
        if period not in PERIODS:
            raise CostQueryError("period", f"must be one of {period_choices()}")
        start, label = end - PERIODS[period], period
    if start < FIRST:
        raise CostQueryError("since" if since else "until",
                             "is out of range: the window must start on 0001-01-01 in UTC or later")
    if end > LAST:
        raise CostQueryError("until" if until else "since", "is out of range: the window must end by 9999-12-31 in UTC")
    if start >= end:
        # with no until the window ends now: "must be before until" named a bound the caller never gave
        same_day = bool(since and until) and _is_date(since) and _is_date(until) and start == end
        # bounds within one second of each other, read to the whole second (above): "must be before until" of a since
        # that was before it
        same_second = bool(since and until) and start == end and _iso(since, "since") < _iso(until, "until")
        raise CostQueryError("since", ("must be before until: the window ends before until, and a date is the "
                                       "start of its day, so one day is since=D until=the day after" if same_day else
                                       "must be at least a second before until: the report counts whole seconds"
                                       if same_second else "must be before until") if until else
                             "is not in the past: with no until, the window ends now")
    if start >= now:
        # a window wholly after now holds no spend: until=9999-12-31 was answered a report of the week before it, all
        # zeros, as if that were the spend. A window may still end after now (this month, given as its dates)
        if since:
            raise CostQueryError("since", "is not in the past: the window starts after now, so nothing was spent in "
                                          "it yet")
        raise CostQueryError("until", f"is more than {label} after now: the {label} window ending then starts after "
                                      "now, so nothing was spent in it yet; give an until nearer now, or a since")
    if end - start > 400 * DAY:
        # named by the bound past now when there is one (since=2026-12-01&until=9999-12-31 was blamed on since)
        raise CostQueryError("until" if until and end > now else "since", "the window can be at most 400 days")
    return Window(start, end, label)


def _is_date(text: str) -> bool:
    try:
        date.fromisoformat(text.strip())
    except ValueError:
        return False
    return True


_PLUS_AS_SPACE = re.compile(r"(\d{4}-\d{2}-\d{2}[T ]\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?) (\d{2}(?::?\d{2})?)")
"""A time whose offset's ``+`` came as a space: ``2026-12-07T19:36:30 01:00``."""


def _iso(text: str, field: str) -> float:
    """A bound of the window: a date is that day from its start in UTC (as ``by_day`` counts days); a time must
    say its timezone, as a deadline must, and is read by the deadline's own parser (an offset, or the IANA name of
    its zone: ``2026-12-07 01:00 Europe/Berlin``). ``2026-11-30T10:00`` was read as UTC, hours off for most people,
    while the same text as a deadline was refused. A control character anywhere (``2026-12-01T10:00Z%00``, a
    trailing newline) is refused as any other text that is not a date: ``fromisoformat`` skipped a NUL after the time
    or its timezone, and ``strip`` dropped a newline or a C1 control, so a mangled bound was answered a report."""
    bad = "must be an ISO date or time, like 2025-01-31 or 2025-01-31T12:00:00Z"
    if any(ord(ch) < 0x20 or 0x7f <= ord(ch) <= 0x9f for ch in text):  # C0, DEL and C1: Unicode's Cc
        raise CostQueryError(field, bad)
    text = text.strip()
    try:
        return datetime.combine(date.fromisoformat(text), clock_time(0), timezone.utc).timestamp()
    except ValueError:
        pass
    # the rest as a deadline's time is read (spec.moment_of): `2026-12-07 01:00 Europe/Berlin` was refused "must
    # be an ISO date or time" here while the docs say a bound is written as a deadline is, and a deadline takes it
    try:
        at = moment_of(text, field)
    except SpecError as e:
        # "write ...Z for UTC, or its offset such as ...+01:00", as the bound said before, and now its zone's name
        raise CostQueryError(field, e.reason.replace("for UTC, its offset", "for UTC, or its offset", 1)) from None
    if at is None:
        if is_duration(text):  # `since=6h`: a deadline's duration counts from now, forward
            raise CostQueryError(field, f"{text} is a duration, and a bound is a moment: give a date or a time with "
                                        f"its timezone, or a period (24h, 7d, 30d, 90d) for the window ending now")
        if (spaced := _PLUS_AS_SPACE.fullmatch(text)) is not None:
            # `?since=2026-12-07T19:36:30+01:00` unencoded: a URL's query reads a + as a space
            raise CostQueryError(field, f"has a space where its offset's + would be ({text}): in a URL a + reads as a "
                                        f"space, so write it as %2B ({field}={spaced[1]}%2B{spaced[2]})")
        raise CostQueryError(field, bad)
    return at


# -- one attempt -----------------------------------------------------------------------------------


def tier_of(attempt: Attempt) -> str:
    tier = str(attempt.placement.get("tier") or "")
    return tier if tier in TIERS else "onprem"


def ondemand_price(attempt: Attempt, job: Job) -> Micros:
    """Per hour, all nodes: the on-demand price of the attempt's shape (rule in the module docstring)."""
    return _ondemand(attempt, job, tier_of(attempt))[0]


def ondemand_known(attempt: Attempt, job: Job) -> bool:
    """Whether :func:`ondemand_price` found an on-demand price for the attempt's shape to weigh it against, rather than
    falling back to the attempt's own (a pool with no cloud shape like it, or a job whose ``max_price_per_hour`` kept
    on-demand out of its quote): then its "saving" is $0 by construction, not a comparison. Nor is an attempt that ran
    on on-demand compared: its equivalent is its own cost (the figures stay so, and add up), and on-demand has nothing
    to compare with on-demand — such a job read "saved $0.00 (0%)" beside the on-prem jobs' "—"."""
    return _ondemand(attempt, job, tier_of(attempt))[1]


def _ondemand(attempt: Attempt, job: Job, tier: str) -> tuple[Micros, bool]:
    """(:func:`ondemand_price`, :func:`ondemand_known`) of an attempt of ``tier`` (:func:`tier_of`): the one rule
    both read, found once where a report needs both."""
    explicit = attempt.placement.get("ondemand_price_per_hour")
    if explicit is not None:
        return int(explicit), tier != "ondemand"  # on-demand is its own: nothing compared (ondemand_known)
    if tier == "ondemand":
        return attempt.price_per_hour, False
    for t in (job.quote or {}).get("tiers") or []:
        if t.get("tier") == "ondemand" and t.get("price_per_hour") is not None:
            return int(t["price_per_hour"]), True
    return attempt.price_per_hour, False


def billed_span(attempt: Attempt) -> tuple[int, int]:
    """(start, whole seconds billed): the span ``attempt.cost`` covers, in whole seconds, as a window's share of it is
    apportioned (:func:`_part`). What it was billed for is the exact span (:func:`billed_exact`)."""
    start = int(attempt.created_at)
    end = attempt.billed_until if attempt.billed_until is not None else attempt.ended_at
    seconds = max(0, int(end - attempt.created_at)) if end is not None else 0
    return start, seconds


def billed_exact(attempt: Attempt | CostAttempt) -> Decimal:
    """The exact seconds ``attempt.cost`` was billed for (``broker/engine/billing.py``): launch to ``billed_until``
    (or its end, never billed), not whole seconds."""
    end = attempt.billed_until if attempt.billed_until is not None else attempt.ended_at
    return billed_seconds(attempt.created_at, end) if end is not None else Decimal(0)


def seconds_out(seconds: Decimal) -> int | float:
    """Billed seconds for JSON: a whole number as an int, else the exact decimal (30.619), as it was billed."""
    return int(seconds) if seconds == seconds.to_integral_value() else float(seconds)


def ondemand_equivalent(attempt: Attempt, job: Job) -> Micros:
    return _equivalent(attempt, ondemand_price(attempt, job), billed_exact(attempt))


def _equivalent(attempt: Attempt, price: Micros, seconds: Decimal) -> Micros:
    """:func:`ondemand_equivalent` of ``attempt`` at the on-demand ``price``, over its billed ``seconds``: its own
    cost where it ran at that price (what it was billed, to the micro-dollar), else that price for its span."""
    return attempt.cost if price == attempt.price_per_hour else cost_for_seconds(price, seconds)


def share(total: Micros, attempt: Attempt, a: float, b: float) -> Micros:
    """The part of ``total`` (accrued evenly over the attempt's billed span) that falls in ``[a, b)``."""
    return _cumulative(total, attempt, b) - _cumulative(total, attempt, a)


def _cumulative(total: Micros, attempt: Attempt, t: float) -> Micros:
    return _part(total, *billed_span(attempt), t)


def _part(total: Micros, start: int, seconds: int, t: float) -> Micros:
    """``F(t)``: the part of ``total``, accrued evenly over ``seconds`` from ``start``, billed by ``t``."""
    if seconds == 0:
        return total if t > start else 0
    elapsed = min(max(int(t) - start, 0), seconds)
    return total * elapsed // seconds


HOUR = 3_600
COST, ODEQ = "cost", "odeq"
"""The two kinds of a pruned-cost ledger entry (:func:`ledger_of`): spend, and its on-demand equivalent."""


def hour_parts(total: Micros, start: int, seconds: int) -> dict[int, Micros]:
    """``total``, accrued evenly over ``seconds`` from ``start``, by UTC hour (its start, epoch seconds): each hour's
    part is ``F(its end) - F(its start)`` (:func:`_part`, as the days of a report are), so the hours of a day add up
    exactly to that day's share, and all of them to ``total``. No zero parts."""
    first = start - start % HOUR
    last = max(start + seconds, start + 1)  # a span of no seconds falls in the hour it starts in, as F says
    out: dict[int, Micros] = {}
    below = _part(total, start, seconds, first)
    for h in range(first, last, HOUR):
        above = _part(total, start, seconds, h + HOUR)
        if above != below:
            out[h] = above - below
        below = above
    return out


def ledger_of(job: Job, attempts: Iterable[Attempt]) -> dict[tuple[str, str, str, int], Micros]:
    """What a pruned job leaves in the pruned-cost ledger (``JobStore.prune``, :func:`report`): each attempt's cost
    (``COST``) and on-demand equivalent (``ODEQ``), by (kind, team, tier, UTC hour), split over hours as a report
    splits them over days. Exact: the hours of one attempt add up to its cost, and to its equivalent. No zeros."""
    out: dict[tuple[str, str, str, int], Micros] = {}
    for att in attempts:
        tier = tier_of(att)
        start, seconds = billed_span(att)
        for kind, total in ((COST, att.cost), (ODEQ, ondemand_equivalent(att, job))):
            for h, part in hour_parts(total, start, seconds).items():
                key = (kind, job.team, tier, h)
                out[key] = out.get(key, 0) + part
    return {k: v for k, v in out.items() if v}


# -- the report ------------------------------------------------------------------------------------


def report(jobs: Sequence[Job | CostJob], attempts: Mapping[str, Sequence[Attempt | CostAttempt]], *, win: Window,
           now: float, positions: Mapping[str, int], team: str | None, starts: Mapping[str, float] | None = None,
           pruned: int | None = None, retention_days: float | None = None,
           ledger: PrunedCosts | None = None) -> dict:
    """Everything the dashboard shows for ``team`` (``None``: all teams) in ``win``.

    ``jobs`` must already be limited to what the caller may see; ``attempts``
    maps job id to its attempts, oldest first; ``positions`` is the global
    queue position of each queued job, ``starts`` the rough start estimate
    (epoch seconds) of those that have one. ``pruned`` (how many jobs the
    retention policy has deleted from the store) and ``retention_days``
    (``job_retention_days``) make :func:`retention_note`. ``ledger``
    (:class:`~broker.store.base.PrunedCosts`, as :func:`gather` reads it) is
    what the jobs pruned cost, by team, tier and UTC hour; its buckets whose
    hour begins in the window count in the totals, by day, by team and by
    tier, and its ``pruned`` stands for ``pruned`` when that is not given.
    A caller passes ``ledger`` and ``retention_days`` as :func:`gather`
    returns them: the report reads nothing but its arguments.
    """
    if pruned is None and ledger is not None:
        pruned = ledger.pruned
    days = _days(win)
    day_starts, day_ends = [a for _, a, _ in days], [b for _, _, b in days]
    by_day = {d[0]: {t: 0 for t in (*TIERS, "ondemand_equivalent")} for d in days}
    tier_total = dict.fromkeys(TIERS, 0)
    equiv_total = 0
    teams: dict[str, dict[str, int]] = {}
    per_job: list[tuple[Job, int, int, int, bool]] = []
    # the teams with some spend in the window weighed against an on-demand price (ondemand_known): a team, or a
    # whole report, of on-prem jobs with no on-demand shape read "saved $0.00 (0%)", as top_jobs rows did
    compared_teams: set[str] = set()
    lost_seconds = 0.0  # the exact time to recover of every preemption listed, rounded once for the total
    # each preemption in the window as (the second its time is shown at, job, attempt, next attempt): the report
    # lists only the newest 50, so only those are made into rows; the counts and the time lost are taken from all
    preempted: list[tuple[int, Job | CostJob, Attempt | CostAttempt, Attempt | CostAttempt | None]] = []
    for job in jobs:
        job_cost = job_equiv = 0
        compared = False  # as job_costs: some attempt had an on-demand price to compare with
        tries = list(attempts.get(job.id, ()))
        t = teams.get(job.team)
        for i, att in enumerate(tries):
            tier = tier_of(att)
            price, known = _ondemand(att, job, tier)
            compared = compared or known
            start, seconds = billed_span(att)
            equiv = _equivalent(att, price, billed_exact(att))  # ondemand_equivalent, the price found once
            first, last = _days_of(day_starts, day_ends, start, seconds)
            cost_in = equiv_in = 0
            if first < last:
                # A day's share is F(its end) - F(its start), a day ends where the next starts, and the days
                # left out hold exactly 0: so F is taken once per boundary, and the window's share is the sum.
                # (F written out, as _part: the time between two bounds, clamped to the span, times the total.)
                bounds = [day_starts[first], *day_ends[first:last]]
                if seconds == 0:  # all of it once a bound is past its start
                    elapsed, span = [1 if b > start else 0 for b in bounds], 1
                else:
                    elapsed, span = [min(max(int(b) - start, 0), seconds) for b in bounds], seconds
                cost = att.cost
                cost_at = [cost * e // span for e in elapsed]
                equiv_at = cost_at if equiv == cost else [equiv * e // span for e in elapsed]
                for d, (key, _, _) in enumerate(days[first:last]):
                    day = by_day[key]
                    day[tier] += cost_at[d + 1] - cost_at[d]
                    day["ondemand_equivalent"] += equiv_at[d + 1] - equiv_at[d]
                cost_in, equiv_in = cost_at[-1] - cost_at[0], equiv_at[-1] - equiv_at[0]
                if known:
                    compared_teams.add(job.team)
            tier_total[tier] += cost_in
            equiv_total += equiv_in
            job_cost += cost_in
            job_equiv += equiv_in
            if t is None:
                t = teams[job.team] = {"spent": 0, "ondemand_equivalent": 0, **dict.fromkeys(TIERS, 0)}
            t["spent"] += cost_in
            t[tier] += cost_in
            t["ondemand_equivalent"] += equiv_in
            if att.state.value in PREEMPTED_STATES and att.ended_at is not None and win.since <= att.ended_at < win.until:
                nxt = tries[i + 1] if i + 1 < len(tries) else None
                preempted.append((_second(att.ended_at), job, att, nxt))
                lost_seconds += _time_lost(job, att, nxt, now)[0]
        if tries:
            per_job.append((job, job_cost, job_equiv, len(tries), compared))
    pruned_spent = 0
    for who, tier, hour, cost, equiv in _buckets_in(ledger, win, team):
        tier = tier if tier in TIERS else "onprem"
        key = datetime.fromtimestamp(hour, tz=timezone.utc).date().isoformat()
        by_day[key][tier] += cost
        by_day[key]["ondemand_equivalent"] += equiv
        tier_total[tier] += cost
        equiv_total += equiv
        pruned_spent += cost
        # a ledger entry keeps no ondemand_known: an equivalent other than its cost was one; on-demand is its own,
        # nothing compared (an on-prem shape whose on-demand price equals its own reads so too, saving $0 either way)
        if tier != "ondemand" and equiv != cost:
            compared_teams.add(who)
        t = teams.setdefault(who, {"spent": 0, "ondemand_equivalent": 0, **dict.fromkeys(TIERS, 0)})
        t["spent"] += cost
        t[tier] += cost
        t["ondemand_equivalent"] += equiv
    spent = sum(tier_total.values())
    cut_hour, cut_spent = _hour_cut(ledger, win, team)
    top = sorted((p for p in per_job if p[1] > 0), key=lambda p: (-p[1], p[0].id))[:TOP_JOBS]
    # the exact seconds summed, then rounded up once (as a total of money is): each event rounded down first read
    # "18 s to recover" beside /metrics' broker_recovery_seconds_sum of 20.54, and a recovery of 0.4 s "0 s"
    recovery = _seconds_up(lost_seconds)
    zones: dict[str, int] = {}
    lost = 0
    for _, _, att, _ in preempted:
        if att.state.value == LOST_STATE:
            lost += 1
        else:
            zone = location(att)
            zones[zone] = zones.get(zone, 0) + 1
    # newest first by the time as shown (to the second), in the order read within one second, as sorting the rows
    # by their "time" did; the rows of the newest 50 only
    preempted.sort(key=lambda p: p[0], reverse=True)
    preemptions = [_preemption(job, att, nxt, now) for _, job, att, nxt in preempted[:50]]
    return {
        "team": team,
        "window": {"since": _iso_out(win.since), "until": _iso_out(win.until), "period": win.label},
        "currency": "USD",
        "totals": {
            "spent": money(spent),
            "ondemand_equivalent": ondemand(spent, equiv_total),
            "saving": saving(spent, equiv_total),
            "saving_percent": percent(equiv_total - spent, equiv_total) if compared_teams else None,
            "by_tier": {t: money(tier_total[t]) for t in TIERS},
        },
        "by_day": [
            {"date": key, **{t: money(v[t]) for t in TIERS},
             "total": money(sum(v[t] for t in TIERS)),
             "ondemand_equivalent": ondemand(sum(v[t] for t in TIERS), v["ondemand_equivalent"]),
             "saving": saving(sum(v[t] for t in TIERS), v["ondemand_equivalent"]),
             "saving_percent": percent(v["ondemand_equivalent"] - sum(v[t] for t in TIERS), v["ondemand_equivalent"])}
            for key, v in by_day.items()
        ],
        "by_team": [
            {"team": name, "spent": money(v["spent"]),
             "ondemand_equivalent": ondemand(v["spent"], v["ondemand_equivalent"]),
             "saving": saving(v["spent"], v["ondemand_equivalent"]),
             "saving_percent": percent(v["ondemand_equivalent"] - v["spent"], v["ondemand_equivalent"])
             if name in compared_teams else None,
             "by_tier": {t: money(v[t]) for t in TIERS}}
            for name, v in sorted(teams.items())
        ],
        "top_jobs": [
            # a job none of whose attempts had an on-demand price read "saved $0.00 (0%)" here and "nothing to
            # compare" in its own costs (job_costs): percent null, as there, so every edge shows "—"
            {"id": j.id, "name": j.name, "team": j.team, "state": j.state.value, "spent": money_in(c, j.budget),
             "ondemand_equivalent": ondemand(c, e, budget=j.budget), "saving": saving(c, e),
             "saving_percent": percent(e - c, e) if compared else None, "attempts": n}
            for j, c, e, n, compared in top
        ],
        "preemptions": {
            "count": len(preempted) - lost,
            "lost": lost,
            "recovery_seconds": recovery,
            "by_zone": [{"zone": z, "count": n} for z, n in sorted(zones.items(), key=lambda x: (-x[1], x[0]))],
            "events": preemptions,
        },
        "rounding_note": rounding_note(spent, equiv_total, tier_total.values(),
                                       [(v["spent"], v["ondemand_equivalent"]) for v in teams.values()]),
        "retention_note": retention_note(win, now, pruned or 0, retention_days,
                                         counted=ledger.ledger_jobs if ledger is not None else 0, spent=pruned_spent,
                                         cut_hour=cut_hour, cut_spent=cut_spent),
        "budget_burn": [burn(j, attempts.get(j.id, ()), now) for j in jobs if j.state in RUNNING_STATES],
        "queue": sorted(
            ({"id": j.id, "name": j.name, "team": j.team, "position": positions.get(j.id),
              "estimated_start": _iso_out((starts or {}).get(j.id)), "priority": j.priority, "reason": j.reason,
              # since it last entered the queue: a job resumed after days waited days from its submit, said so
              "waiting_seconds": max(0, int(now - (getattr(j, "queued_at", None) or j.submitted_at)))}
             for j in jobs if j.state is JobState.QUEUED),
            key=lambda q: (q["position"] is None, q["position"] or 0, q["id"]),
        ),
    }


def billed_in(spans: Iterable[tuple[int, int, Micros]], win: Window) -> Micros:
    """What the billed ``spans`` (each ``(start, seconds, cost)``: :func:`span_of` an attempt) cost in ``win``: each
    one's ``F(until) - F(since)`` (:func:`_part`). The report's share of an attempt in its window to the
    micro-dollar: its days add up to that, the days before the span holding 0 and those after it the whole."""
    return sum(_part(cost, start, seconds, win.until) - _part(cost, start, seconds, win.since)
               for start, seconds, cost in spans)


def span_of(attempt: Attempt | CostAttempt) -> tuple[int, int, Micros]:
    """``(start, seconds billed, cost)``: all :func:`billed_in` needs of an attempt, as it stands now."""
    return (*billed_span(attempt), attempt.cost)


def _buckets_in(ledger: PrunedCosts | None, win: Window, team: str | None):
    """The pruned-cost ledger's buckets a report of ``win`` for ``team`` (``None``: every team) counts: those whose
    hour begins in the window, and so in one of its UTC days (hours align with days)."""
    for bucket in (ledger.buckets if ledger is not None else ()):
        if win.since <= bucket[2] < win.until and (team is None or bucket[0] == team):
            yield bucket


def _hour_cut(ledger: PrunedCosts | None, win: Window, team: str | None) -> tuple[int | None, Micros]:
    """(the UTC hour the window begins inside of, what the jobs pruned spent in that whole hour), or ``(None, 0)``:
    the ledger keeps whole hours and a report counts those that begin in its window (:func:`_buckets_in`), so the
    part of that hour inside the window is left out, and :func:`retention_note` says so. A window within one hour
    (10:15 to 10:45) counted none of it, and said nothing. Only a ledger read from that hour's start on holds it
    (:func:`gather` reads so)."""
    hour = int(win.since // HOUR * HOUR)
    if hour == win.since:
        return None, 0
    cut = sum(b[3] for b in (ledger.buckets if ledger is not None else ())
              if b[2] == hour and (team is None or b[0] == team))
    return (hour, cut) if cut > 0 else (None, 0)


def ledger_spent(ledger: PrunedCosts | None, win: Window, team: str | None) -> Micros:
    """What the pruned-cost ledger adds to a report's spend in ``win`` for ``team`` (``None``: every team), as
    :func:`report` counts it."""
    return sum(cost for _, _, _, cost, _ in _buckets_in(ledger, win, team))


def spent(jobs: Iterable[Job | CostJob], attempts: Mapping[str, Sequence[Attempt | CostAttempt]], *, win: Window,
          team: str | None, ledger: PrunedCosts | None) -> Micros:
    """:func:`report`'s ``totals.spent`` alone, in micro-dollars, from the same arguments (``jobs`` as :func:`gather`
    reads them): what a team's monthly cap weighs (``broker/team_budget.py``), without the rest of the report."""
    return sum(billed_in(map(span_of, attempts.get(j.id, ())), win) for j in jobs) + ledger_spent(ledger, win, team)


def job_costs(job: Job, attempts: Iterable[Attempt]) -> dict:
    """One job, all time: spend, on-demand equivalent and saving, plus each attempt's part."""
    rows = []
    spent = equiv = 0
    compared = False  # some attempt had an on-demand price to compare with (ondemand_known)
    for att in attempts:
        compared = compared or ondemand_known(att, job)
        e = ondemand_equivalent(att, job)
        spent += att.cost
        equiv += e
        rows.append({"n": att.n, "state": att.state.value, "tier": tier_of(att),
                     "zone": location(att), "instance_type": att.placement.get("instance_type"),
                     "num_nodes": nodes_of(att),
                     "price_per_hour": rate(att.price_per_hour), "cost": money_in(att.cost, job.budget),
                     "ondemand_equivalent": money(e), "seconds": seconds_out(billed_exact(att)),
                     "started_at": _iso_out(att.started_at), "ended_at": _iso_out(att.ended_at),
                     "reason": att.reason})
    # each attempt's cost (and equivalent) rounded up on its own need not add up, as shown, to the job's: said, as the
    # report says it of its rows (two attempts of $0.0040 and $0.0168 beside a total of $0.0207, unsaid)
    total = ondemand(spent, equiv, budget=job.budget)
    off = sum(shown(r["cost"]["micros"]) for r in rows) != shown(spent) or \
        sum(shown(r["ondemand_equivalent"]["micros"]) for r in rows) != amount_shown(total["usd"])
    # with no on-demand price for any attempt, the equivalent is the spend itself: "saved $0.00 (0%) against
    # on-demand ($0.0023)" named a price no on-demand offer has; said as nothing to compare (percent null) instead
    return {"spent": money_in(spent, job.budget), "ondemand_equivalent": total, "saving": saving(spent, equiv),
            "saving_percent": percent(equiv - spent, equiv) if compared else None,
            "spent_of_budget": spent_of_budget(spent, job.budget),
            "attempts": rows, "rounding_note": ROUNDING_NOTE if off else None}


def nodes_of(att: Attempt) -> int:
    """The nodes an attempt's placement holds (one when it does not say): its price and cost are for all of them, and
    a 2-node attempt's "$0.8492/h" beside "g5.xlarge" read as one instance's."""
    n = att.placement.get("num_nodes")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 1


def _hours_left(hours: Decimal) -> str:
    """Rounded down, so what is left lasts at least this (Slack's "About N h left" counts on it): to a tenth from an
    hour on, to two significant figures under one. To a tenth alone, $1.383 left at $7.20/h (0.192 h) read "0.1"."""
    if hours >= 1 or hours <= 0:
        return str(hours.quantize(Decimal("0.1"), rounding=ROUND_FLOOR))
    return format(hours.quantize(Decimal(1).scaleb(hours.adjusted() - 1), rounding=ROUND_FLOOR), "f")


def burn(job: Job, attempts: Sequence[Attempt], now: float) -> dict:
    """How fast a running job eats its budget, and how long what is left lasts at the current price."""
    price = attempts[-1].price_per_hour if attempts else int(job.placement.get("price_per_hour") or 0)
    left = max(0, job.budget - job.spent)
    hours_left = None
    if price > 0:
        hours_left = _hours_left(Decimal(left) / Decimal(price))
    return {"id": job.id, "name": job.name, "team": job.team, "state": job.state.value,
            "spent": money(job.spent), "budget": {"micros": job.budget, "usd": fmt_limit(job.budget)},
            "spent_of_budget": spent_of_budget(job.spent, job.budget), "percent": percent(job.spent, job.budget),
            "price_per_hour": rate(price), "hours_left": hours_left}


def location(att: Attempt) -> str:
    p = att.placement
    return str(p.get("zone") or p.get("location") or p.get("region") or "unknown")


def _preemption(job: Job | CostJob, att: Attempt | CostAttempt, nxt: Attempt | CostAttempt | None,
                now: float) -> dict:
    """A preemption and the time lost to it: until the next attempt ran, else until now while the job waits, else
    (the job ended without resuming: cancelled, stopped at its budget) until the job ended. It ran on to now for
    good, "72 h lost waiting to resume" for a job cancelled days before. Its seconds are rounded up, as a cost
    is (a recovery of 0.4 s read "0 s"); :func:`report` sums the exact ones (:func:`_time_lost`) for its total."""
    lost, recovered, waiting = _time_lost(job, att, nxt, now)
    return {"job_id": job.id, "team": job.team, "attempt": att.n, "zone": location(att), "tier": tier_of(att),
            "state": att.state.value, "time": _iso_out(att.ended_at), "recovery_seconds": _seconds_up(lost),
            "recovered": recovered, "waiting": waiting}


def _time_lost(job: Job | CostJob, att: Attempt | CostAttempt, nxt: Attempt | CostAttempt | None,
               now: float) -> tuple[float, bool, bool]:
    """(the exact seconds lost to a preemption, whether the job resumed from it, whether it still waits to):
    :func:`_preemption`'s rule."""
    assert att.ended_at is not None
    back = (nxt.started_at or None) if nxt else None
    waiting = back is None and not job.state.is_final
    until = back if back is not None else now if waiting or job.updated_at is None else job.updated_at
    return max(0.0, until - att.ended_at), back is not None, waiting


def _seconds_up(seconds: float) -> int:
    """Whole seconds, rounded up: to the millisecond first, so the float noise of a difference of timestamps
    (3.0000000004) does not add a second."""
    return math.ceil(round(seconds, 3))


def recoveries(attempts: Sequence[Attempt]) -> list[float]:
    """Seconds from each preemption (or lost node) to the next attempt running, for those that resumed."""
    out = []
    for prev, nxt in zip(attempts, attempts[1:]):
        if prev.state.value in PREEMPTED_STATES and prev.ended_at is not None and nxt.started_at is not None:
            out.append(max(0.0, nxt.started_at - prev.ended_at))
    return out


def money(micros: int) -> dict:
    return {"micros": micros, "usd": fmt(micros)}


def rate(micros: int) -> dict:
    """A price per hour: as :func:`money`, shown exactly (:func:`~pricing.money.fmt_rate`), not rounded up as a cost."""
    return {"micros": micros, "usd": fmt_rate(micros)}


def money_in(micros: int, budget: Micros) -> dict:
    """A job's spend (or part of it) on the wire beside its budget: shown to the budget's decimals where it has more
    than cents (:func:`pricing.money.fmt_spent_of`), still rounded up. Rounded up to the cent, all of a budget of
    $11.005 read "$11.01" spent, a cent over the cap, in the cost report and the job's attempts."""
    return {"micros": micros, "usd": fmt_spent_of(micros, budget)[0]}


def ondemand(spent: Micros, equivalent: Micros, *, budget: Micros | None = None) -> dict:
    """An on-demand equivalent on the wire beside its spend and saving: the exact ``equivalent`` in micro-dollars, and
    a display string that is the spend shown plus the saving shown (``pricing.money.fmt_ondemand``), so the three
    read side by side add up wherever they are shown together. ``budget``: the spend is shown beside it
    (:func:`money_in`), to its decimals."""
    spent_shown = None if budget is None else amount_shown(money_in(spent, budget)["usd"])
    return {"micros": equivalent, "usd": fmt_ondemand(spent, equivalent, spent_shown=spent_shown)}


def saving(spent: Micros, equivalent: Micros) -> dict:
    """A saving against on-demand on the wire: the exact ``equivalent - spent`` in micro-dollars, and a display
    string rounded *down* (``pricing.money.fmt_saving``: a saving is a claim, never overstated), no more than the
    on-demand figure shown less the spend shown."""
    return {"micros": equivalent - spent, "usd": fmt_saving(spent, equivalent)}


def spent_of_budget(spent: Micros, budget: Micros) -> dict:
    """A spend and its budget as two strings to read side by side (``pricing.money.fmt_spent_of``): "$0.002 of
    $0.002", where ``spent.usd`` and ``budget.usd`` apart read "$0.0020" and "$0.002"."""
    spent_text, budget_text = fmt_spent_of(spent, budget)
    return {"spent": spent_text, "budget": budget_text}


ROUNDING_NOTE = ("Each cost is rounded up on its own (to the cent; under $1, to a hundredth of a cent) and each "
                 "total is the exact sum rounded once, so the rows may not add up to the total exactly.")


def rounding_note(spent: Micros, equivalent: Micros, tiers: Iterable[Micros],
                  teams: Sequence[tuple[Micros, Micros]]) -> str | None:
    """:data:`ROUNDING_NOTE` when the amounts a report shows do not add up, as shown, to the totals it shows (the
    spend by tier to the spend; with more than one team, the teams' spend and on-demand equivalents to theirs),
    else ``None``. Rows rounded to make them add up would understate some cost, so the rows stay as they are and
    the report says why."""
    off = sum(map(shown, tiers)) != shown(spent)
    if len(teams) > 1:
        off = off or sum(shown(s) for s, _ in teams) != shown(spent) or \
            sum(ondemand_shown(s, e) for s, e in teams) != ondemand_shown(spent, equivalent)
    return ROUNDING_NOTE if off else None


def retention_note(win: Window, now: float, pruned: int, retention_days: float | None, *, counted: int = 0,
                   spent: Micros = 0, cut_hour: int | None = None, cut_spent: Micros = 0) -> str | None:
    """What a report says of the jobs the retention policy deleted (``job_retention_days``, ``broker/retention.py``),
    or ``None`` when there is nothing to say.

    ``spent``: what the pruned-cost ledger added to this report's totals (jobs pruned, then counted to the hour they
    were billed in): said, since those totals then hold more than the jobs listed. ``pruned`` - ``counted``: the jobs
    pruned that the ledger does not hold (deleted by a broker before it kept one): what they spent is in no total,
    said when the window begins before the retention horizon (``retention_days`` before ``now``) — a window within it
    loses nothing, a pruned job having ended before it began — or, with ``retention_days`` not known (a broker without
    it set, sharing a store another one prunes), whatever the window. ``cut_spent``: what the jobs pruned spent in
    the UTC hour from ``cut_hour``, which begins before the window and ends in it (:func:`_hour_cut`): the ledger
    keeps whole hours and the report counts those that begin in its window, so their spend in the part of that hour
    inside the window is left out, said with that hour's whole spend (the most that can be missing)."""
    notes = []
    days = "" if retention_days is None else \
        f": finished jobs are deleted {retention_days:g} day{'' if retention_days == 1 else 's'} after they end"
    if spent > 0:
        notes.append(f"Includes {fmt(spent)} spent in this window by jobs since pruned (job_retention_days{days}), "
                     "counted to the hour they were billed in: in the totals, by day, team and tier, but not among the "
                     "jobs listed.")
    if cut_hour is not None and cut_spent > 0:
        start = datetime.fromtimestamp(cut_hour, tz=timezone.utc)
        notes.append(f"Leaves out what jobs since pruned (job_retention_days{days}) spent in this window before "
                     f"{(start + timedelta(hours=1)):%H:%M} UTC, if anything: their costs are kept by the hour, and the "
                     f"hour from {start:%Y-%m-%d %H:%M} UTC (they spent {fmt(cut_spent)} in all of it) begins before "
                     "this window, so none of it is counted; a window from the start of an hour counts it all.")
    missing = pruned - counted
    if missing > 0:
        jobs = f"{missing} finished job{'' if missing == 1 else 's'}"
        if retention_days is None:
            notes.append(f"{jobs} {'was' if missing == 1 else 'were'} pruned from the store (job_retention_days) "
                         "before their costs were kept: what they spent in this window, if anything, is left out of "
                         "its totals.")
        else:
            horizon = now - retention_days * DAY
            if win.since < horizon:
                when = datetime.fromtimestamp(horizon, tz=timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
                notes.append(f"Totals leave out {jobs} pruned before their costs were kept: finished jobs are deleted "
                             f"{retention_days:g} day{'' if retention_days == 1 else 's'} after they end "
                             f"(job_retention_days), and this window begins before {when}, so what they spent in it is "
                             "not counted.")
    return " ".join(notes) or None


def percent(part: int, whole: int) -> int | None:
    """Whole percent, rounded down (so 79.9% of a budget never shows as 80%)."""
    return part * 100 // whole if whole > 0 else None


def _days_of(day_starts: list[float], day_ends: list[float], start: int, seconds: int) -> tuple[int, int]:
    """``days[first:last]``: the days of the window (sorted; starts and ends given) whose share of a span
    of ``seconds`` from ``start`` can be non-zero — a superset of those overlapping it, by a second each
    side. Every other day's share is exactly 0 (both ends of it are before the span, or both after), so
    skipping them changes no sum, and a 90-day report no longer costs 90 days per attempt."""
    first = bisect_right(day_ends, start - 1)
    return first, bisect_left(day_starts, start + seconds + 1, lo=first)


def _days(win: Window) -> list[tuple[str, float, float]]:
    """UTC calendar days overlapping the window, each clipped to it: (date, start, end)."""
    out = []
    day = datetime.fromtimestamp(win.since, tz=timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    while day.timestamp() < win.until:
        a, b = max(day.timestamp(), win.since), min((day + timedelta(days=1)).timestamp(), win.until)
        out.append((day.date().isoformat(), a, b))
        day += timedelta(days=1)
    return out


def _second(t: float) -> int:
    """The whole second :func:`_iso_out` shows ``t`` at, as a number (to sort by it without making the text):
    ``datetime.fromtimestamp`` rounds ``t`` to the microsecond, half to even, carrying into the second, and the
    text leaves the microseconds out."""
    frac, whole = math.modf(t)
    micros = round(frac * 1_000_000)
    return int(whole) + (1 if micros >= 1_000_000 else -1 if micros < 0 else 0)


def _iso_out(t: float | None) -> str | None:
    if t is None:
        return None
    return datetime.fromtimestamp(t, tz=timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


# -- reading (the only impure part, kept here so every edge gathers the same way) ------------------


@dataclass(frozen=True)
class CostHistory:
    """What :func:`gather` read for a report: ``jobs`` and their ``attempts`` (job id to its attempts, oldest first),
    the pruned-cost ledger of the window (``ledger``: what the jobs pruned cost in it, by hour, with the store's count
    of pruned jobs: ``JobStore.pruned_costs``) and the broker's ``retention_days``. Plain fields, passed on to
    :func:`report` by name, so a reader sees where each comes from."""

    jobs: list[CostJob]
    attempts: dict[str, list[CostAttempt]]
    ledger: PrunedCosts | None
    retention_days: float | None


def gather(store, *, team: str | None, win: Window, retention_days: float | None = None) -> CostHistory:
    """Jobs of ``team`` (all when ``None``) that may hold cost in ``win``, and their attempts.

    A job that ended before the window cannot: its attempts were billed no
    later than its last update — the store leaves those out, and those
    submitted after it. Only the fields the report shows are read
    (``JobStore.cost_history``): decoding whole jobs and attempts was most of
    a long window's time. With them come the pruned-cost ledger of the window
    (what the jobs pruned cost in it, by hour: ``JobStore.pruned_costs``, from
    the start of the hour it begins in, which it does not count but names),
    which holds the store's count of pruned jobs, and ``retention_days`` (the
    broker's ``job_retention_days``): the rest of what :func:`report` needs,
    for its totals and :func:`retention_note`.
    """
    jobs, attempts = store.cost_history(team=team, since=win.since, until=win.until)
    # from the start of the hour the window begins in: that hour is not counted (its start is not in the window), but
    # the report says what it left out of it (:func:`_hour_cut`)
    ledger = store.pruned_costs(team=team, since=win.since // HOUR * HOUR, until=win.until)
    return CostHistory(jobs=jobs, attempts=attempts, ledger=ledger, retention_days=retention_days)
