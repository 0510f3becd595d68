"""Cost accrual: each attempt is billed per second at its placement's price. Pure.

Billing runs from the attempt's launch (provisioning and restore are billed,
as clouds bill them) to its end. Amounts are integer micro-dollars, rounded up.
"""

from __future__ import annotations

from dataclasses import replace

from broker.models import Attempt
from pricing.money import cost_for_seconds


def accrue(attempt: Attempt, until: float) -> Attempt:
    """The attempt with its cost brought up to ``until`` (never backwards).

    Neither the cost nor ``billed_until``, the end of the span the cost covers, moves back: a clock
    stepped back (or an end seen after a later accrual) leaves both where they were, so the cost
    report never spreads the cost over fewer seconds than it paid for."""
    end = attempt.ended_at if attempt.ended_at is not None else until
    seconds = max(0, int(end - attempt.created_at))
    cost = max(attempt.cost, cost_for_seconds(attempt.price_per_hour, seconds))
    billed = end if attempt.billed_until is None else max(end, attempt.billed_until)
    return replace(attempt, cost=cost, billed_until=billed)
