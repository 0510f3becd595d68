"""A team's monthly cap: what all of a team's jobs together may spend in a calendar month (UTC). Pure.

A job's own budget is never exceeded (``broker/engine/budget.py``), so what a team's jobs can still spend is at most
the unspent budgets of its jobs not ended. Admission keeps, for a team with ``monthly_budget_usd``,

    spent by the team this month + the unspent budgets of its jobs not ended  <=  the cap

at every change that can make the left side grow: a submit, a resume (an ended job holds its unspent budget again)
and a budget raised on a job not ended. Nothing else makes it grow: a job's spending moves money from the second term
to the first, and a job that ends (or whose budget is lowered) lets its part go. So the month's spend never passes
the cap, whatever the engine does, with no check at run time. A job running across the end of a month holds its
unspent budget in the new month too (it may spend all of it there). "Spent this month" is the team's cost report for
the month (``broker/costs.py``), pruned jobs' ledger included: the figure `broker costs` shows.

Two brokers admitting one team's jobs at once are kept apart by the store (``Change.team_fence``): each reads the
team's admissions count before it weighs the cap, and the later write conflicts and is weighed again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone

from broker.models import Job
from pricing.money import Micros, fmt, fmt_left, fmt_limit


@dataclass(frozen=True)
class Month:
    """A calendar month in UTC: ``[since, until)`` in epoch seconds, and its name (``2026-12``)."""

    since: float
    until: float
    name: str


def month_of(now: float) -> Month:
    t = datetime.fromtimestamp(now, timezone.utc)
    start = datetime(t.year, t.month, 1, tzinfo=timezone.utc)
    end = datetime(t.year + t.month // 12, t.month % 12 + 1, 1, tzinfo=timezone.utc)
    return Month(start.timestamp(), end.timestamp(), f"{t.year:04d}-{t.month:02d}")


def held_by(job: Job) -> Micros:
    """What ``job`` may still spend: its unspent budget while it has not ended, else nothing (an ended job spends no
    more; a resume holds its part again, and is weighed then)."""
    return 0 if job.state.is_final else max(job.budget - job.spent, 0)


@dataclass(frozen=True)
class TeamMonth:
    """Where a team stands against its monthly cap: ``spent`` this month, ``held`` by the unspent budgets of its
    ``holders`` jobs not ended, and what is ``free`` (negative only if the cap was lowered under what is held)."""

    team: str
    cap: Micros
    month: Month
    spent: Micros
    held: Micros
    holders: int

    @property
    def free(self) -> Micros:
        return self.cap - self.spent - self.held

    def record(self) -> dict:
        """As ``GET /v1/costs`` shows it (money as micro-dollars with a display string, as elsewhere there; the
        strings those of :meth:`words`, which add up to the cap)."""
        spent, held, free = self.shown()
        return {"team": self.team, "month": self.month.name,
                "cap": {"micros": self.cap, "usd": fmt_limit(self.cap)},
                "spent": {"micros": self.spent, "usd": spent},
                "held": {"micros": self.held, "usd": held}, "holders": self.holders,
                "free": {"micros": self.free, "usd": free}, "text": self.words()}

    def words(self) -> str:
        """``$412.10 spent in 2026-12 and $180.00 held by 3 jobs not ended, of a $1,000.00 monthly cap: $407.90 free``"""
        spent, held, free = self.shown()
        jobs = "1 job" if self.holders == 1 else f"{self.holders} jobs"
        held = f" and {held} held by {jobs} not ended" if self.holders else ""
        return f"{spent} spent in {self.month.name}{held}, of a {fmt_limit(self.cap)} monthly cap: {free} free"

    def shown(self) -> tuple[str, str, str]:
        """(spent, held, free) as people read them: to the same decimals, so that the three add up to the cap.

        Each rounded its own way did not: "$0.0677 spent … and $1.94 held …, of a $2.00 monthly cap: $0.0017 free"
        made $2.0094, held rounded up to the cent beside the others' hundredths of a cent. As a spend, its saving
        and the on-demand figure do (:func:`pricing.money.ondemand_shown`): the spend is rounded up (a cost, never
        understated) and what is free rounded down (room, never overstated), each to the decimals the finest of the
        three (or the cap) needs, and what is held, neither billed nor claimed, is the rest: within one step (a
        hundredth of a cent, or a cent) of the exact figure. A cap lowered under what is held leaves nothing free
        ("$0.00"), and the parts, each rounded up, add up to more than it, as they are."""
        texts = [fmt(self.spent), fmt(self.held), fmt_left(max(self.free, 0))]
        cap = fmt_limit(self.cap)
        places = max(_places(t) for t in (*texts, cap))
        step = 10 ** (6 - places)
        spent = -(-self.spent // step)
        if self.free < 0:
            return _fmt_at(spent, places), _fmt_at(-(-self.held // step), places), _fmt_at(0, 2)
        free = self.free // step
        held = self.cap // step - spent - free  # (the cap is whole steps: places covers its decimals)
        while places > 2 and spent % 10 == held % 10 == free % 10 == 0:
            spent, held, free, places = spent // 10, held // 10, free // 10, places - 1
        return _fmt_at(spent, places), _fmt_at(held, places), _fmt_at(free, places)


def _places(text: str) -> int:
    """The decimals an amount as shown has (``$0.0677``: 4; ``under $0.0001``: 6, the finest there is)."""
    return 6 if text.startswith("under") else len(text) - text.index(".") - 1


def _fmt_at(units: int, places: int) -> str:
    """``units`` of ``10**-places`` dollars as ``$1,234.5670``."""
    whole, rest = divmod(units, 10 ** places)
    return f"${whole:,}.{rest:0{places}d}"


def team_month(team: str, cap: Micros, month: Month, jobs: Iterable[Job], spent: Micros) -> TeamMonth:
    """The team's standing from its ``jobs`` (any: other teams' are left out) and what it ``spent`` in ``month`` (its
    cost report's total)."""
    holding = [held_by(j) for j in jobs if j.team == team and held_by(j) > 0]
    return TeamMonth(team, cap, month, spent, sum(holding), len(holding))


def room_later(standing: TeamMonth) -> str:
    """What makes room under the cap later, as the team stands (to follow "wait until"): its jobs ending, where some
    hold part of it; a new month, where the month's spend took part of it (that comes back only then); an admin
    raising the cap. "Wait for the team's jobs to end" was said to a team with no job holding anything."""
    ways = []
    if standing.holders:
        ways.append("the team's jobs end (or one is cancelled or has its budget lowered)")
    if standing.spent > 0:
        day = datetime.fromtimestamp(standing.month.until, timezone.utc).strftime("%Y-%m-%d")
        ways.append(f"a new month begins ({day} UTC)")
    ways.append(f"an admin raises teams.{standing.team}.monthly_budget_usd")
    return ways[0] if len(ways) == 1 else ", ".join(ways[:-1]) + " or " + ways[-1]


def as_of(now: float) -> str:
    """``2026-12-03 10:15 UTC``: when a standing stored in words was read (it goes stale as the team's jobs run)."""
    return datetime.fromtimestamp(now, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def refusal(standing: TeamMonth, adding: Micros, *, what: str, instead: Callable[[Micros], str]) -> str | None:
    """Why ``adding`` more to what the team's jobs may spend would pass its cap (``what`` says what would add it:
    "this job's $50.00 budget"), with what to do (``instead(fits)``, given the most that would fit, when some would);
    ``None`` when it fits."""
    if adding <= standing.free:
        return None
    fits = max(standing.free, 0)
    raise_it = f"an admin may raise the cap: teams.{standing.team}.monthly_budget_usd"
    next_month = datetime.fromtimestamp(standing.month.until, timezone.utc).strftime("%Y-%m-%d")
    way = instead(fits) if fits > 0 else (
        # jobs that end give their part back; a month's spend comes back only with the next month
        f"nothing more fits: wait for the team's jobs to end, or cancel one or lower its budget ({raise_it})"
        if standing.holders and standing.spent < standing.cap else
        f"nothing fits until {next_month} (UTC), when a new month begins, unless {raise_it}")
    over = f"; it is over the cap by {fmt(-standing.free)} (the cap was lowered since)" if standing.free < 0 else ""
    return (f"{what} would let team {standing.team}'s jobs spend more than its monthly cap ({standing.words()}{over}): "
            f"{way}")
