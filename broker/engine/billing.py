"""Cost accrual: each attempt is billed per second at its placement's price. Pure.

Billing runs from the attempt's launch (provisioning and restore are billed,
as clouds bill them) to its end. Amounts are integer micro-dollars, rounded up.
"""

from __future__ import annotations

from dataclasses import replace

from broker.models import Attempt
from pricing.money import cost_for_seconds


def accrue(attempt: Attempt, until: float) -> Attempt:
    """The attempt with its cost brought up to ``until`` (never backwards), or to its end if that came first.

    ``until`` is the billing clock: the engine counts it on from the attempt's last accrual by a monotonic
    clock (``Engine._billed_until``), so an end the launcher read on a wall clock stepped forward since is
    billed only as far as ``until``. Neither the cost nor ``billed_until``, the end of the span the cost
    covers, moves back: a clock stepped back (or an end seen after a later accrual) leaves both where
    they were, so the cost report never spreads the cost over fewer seconds than it paid for."""
    end = until if attempt.ended_at is None else min(attempt.ended_at, until)
    seconds = max(0, int(end - attempt.created_at))
    cost = max(attempt.cost, cost_for_seconds(attempt.price_per_hour, seconds))
    billed = end if attempt.billed_until is None else max(end, attempt.billed_until)
    return replace(attempt, cost=cost, billed_until=billed)
