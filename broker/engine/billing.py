"""Cost accrual: each attempt is billed per second at its placement's price. Pure.

Billing runs from the attempt's launch (provisioning and restore are billed,
as clouds bill them) to its end. Amounts are integer micro-dollars, rounded up.
"""

from __future__ import annotations

from dataclasses import replace

from broker.models import Attempt
from pricing.money import cost_for_seconds


def accrue(attempt: Attempt, until: float) -> Attempt:
    """The attempt with its cost brought up to ``until`` (never backwards)."""
    end = attempt.ended_at if attempt.ended_at is not None else until
    seconds = max(0, int(end - attempt.created_at))
    cost = max(attempt.cost, cost_for_seconds(attempt.price_per_hour, seconds))
    return replace(attempt, cost=cost, billed_until=end)
