"""Money at run time: warn at 80 %, stop before 100 %, never record more than the budget. Pure.

The stop comes early enough that the checkpoint-and-exit after SIGTERM (the
grace period) and the next ticks are paid for within the budget; recorded cost
is also capped at the budget, so a job's spend can never exceed it.
"""

from __future__ import annotations

from dataclasses import dataclass

from pricing.money import Micros, affordable_seconds, cost_for_seconds

WARN_FRACTION_PERCENT = 80

LAUNCHER_STOP_MARGIN_SECONDS = 3
"""Kept back from a launcher's own budget stop: the runner looks at its limit every half second, and
writing how the attempt ended takes a moment after the grace period."""


@dataclass(frozen=True)
class BudgetCheck:
    warn: bool
    stop: bool
    headroom: Micros


def reserve_seconds(grace_seconds: float, tick_seconds: float) -> int:
    """What must stay paid for when the stop is asked: the grace period, two ticks to notice the end,
    and the launcher's own margin, so that the broker's stop always comes before the launcher's."""
    return int(grace_seconds + 2 * tick_seconds + 1) + LAUNCHER_STOP_MARGIN_SECONDS


MIN_RUN_SECONDS = 60
"""What a job that has run before must be able to pay for on an offer beyond its clean stop to be placed on it again
(after a preemption, a lost node, a resume): a minute's run. The rule a manual ``broker resume`` is held to
(``BrokerService._minute_shortfall``: "a minute and a clean stop"); without it, a job preempted with a few cents left
was placed on on-demand for the two seconds its budget paid for there, and never reached a step."""


def rerun_seconds(grace_seconds: float, tick_seconds: float) -> int:
    """What a placement of a job that has run before must pay for (:data:`MIN_RUN_SECONDS` and a clean stop): as a
    resume weighs it, the grace period and a minute, and never less than what a first start pays for
    (:func:`reserve_seconds`)."""
    return max(reserve_seconds(grace_seconds, tick_seconds), int(grace_seconds) + MIN_RUN_SECONDS)


def check(*, spent: Micros, budget: Micros, price_per_hour: Micros, grace_seconds: float, tick_seconds: float,
          warned: bool) -> BudgetCheck:
    """Whether to warn, and whether to stop now so that stopping still fits in the budget."""
    reserve = cost_for_seconds(price_per_hour, reserve_seconds(grace_seconds, tick_seconds))
    stop = spent + reserve >= budget
    return BudgetCheck(
        warn=not warned and (stop or spent * 100 >= budget * WARN_FRACTION_PERCENT),  # never stop unwarned
        stop=stop,
        headroom=budget - spent,
    )


def capped(cost: Micros, *, others: Micros, budget: Micros) -> Micros:
    """An attempt's cost, capped so the job's total never exceeds its budget."""
    return max(min(cost, budget - others), 0)


def launcher_stop_at(*, created_at: float, others: Micros, budget: Micros, price_per_hour: Micros,
                     grace_seconds: float) -> float | None:
    """When the launcher itself must begin stopping the attempt if no broker has by then.

    The broker stops a job at its budget (:func:`check`), but only while a broker runs: an attempt
    left running while every broker is down would go on spending. So each attempt carries this
    limit: the attempt is billed from ``created_at``, and stopping at this time (grace period
    included) still leaves its cost within what the budget holds beyond the job's ``others``
    attempts. The broker's own stop comes two ticks and a second earlier (:func:`reserve_seconds`), so
    this one only fires when no broker watched. ``None`` when the placement is free (nothing to overrun).
    """
    if price_per_hour <= 0:
        return None
    seconds = affordable_seconds(price_per_hour, max(budget - others, 0))
    return created_at + seconds - grace_seconds - LAUNCHER_STOP_MARGIN_SECONDS


def attempt_limit(*, attempt, attempts, budget: Micros, grace_seconds: float) -> float | None:
    """:func:`launcher_stop_at` for ``attempt`` of a job with ``budget`` whose attempts are ``attempts`` (the
    others' costs are spent already): the limit its launcher must hold. The engine (``Engine._limit_at``) and the
    service, when it lowers a budget (``BrokerService.raise_budget``), compute it the same way."""
    others = sum(a.cost for a in attempts if a.id != attempt.id)
    return launcher_stop_at(created_at=attempt.created_at, others=others, budget=budget,
                            price_per_hour=attempt.price_per_hour, grace_seconds=grace_seconds)
