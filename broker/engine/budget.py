"""Money at run time: warn at 80 %, stop before 100 %, never record more than the budget. Pure.

The stop comes early enough that the checkpoint-and-exit after SIGTERM (the
grace period) and the next ticks are paid for within the budget; recorded cost
is also capped at the budget, so a job's spend can never exceed it.
"""

from __future__ import annotations

from dataclasses import dataclass

from pricing.money import Micros, cost_for_seconds

WARN_FRACTION_PERCENT = 80


@dataclass(frozen=True)
class BudgetCheck:
    warn: bool
    stop: bool
    headroom: Micros


def reserve_seconds(grace_seconds: float, tick_seconds: float) -> int:
    """What must stay paid for when the stop is asked: the grace period and two ticks to notice the end."""
    return int(grace_seconds + 2 * tick_seconds + 1)


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
