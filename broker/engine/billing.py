"""Cost accrual: each attempt is billed per second at its placement's price. Pure.

Billing runs from the attempt's launch (provisioning and restore are billed,
as clouds bill them) to its end, for the exact span (not whole seconds: money is
never understated). Amounts are integer micro-dollars, rounded up once.
"""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

from broker.models import Attempt
from pricing.money import cost_for_seconds


def billed_seconds(start: float, end: float) -> Decimal:
    """The exact seconds from ``start`` to ``end`` (epoch seconds), never below 0: what an attempt is billed for.

    Each moment is read as the shortest decimal that is that float (its ``repr``), and the difference is taken in
    ``Decimal``: the float difference of 1796668630.311 and 1796668599.692 is 30.61899995…, not the 30.619 s the
    two moments say. Whole seconds (``int(end - start)``) dropped each attempt's last partial second from its cost
    while ``billed_until`` kept it: 30.619 s at $3.333/h billed as 30 s, money never billed."""
    return max(Decimal(repr(float(end))) - Decimal(repr(float(start))), Decimal(0))


def accrue(attempt: Attempt, until: float) -> Attempt:
    """The attempt with its cost brought up to ``until`` (never backwards), or to its end if that came first.

    ``until`` is the billing clock: the engine counts it on from the attempt's last accrual by a monotonic
    clock (``Engine._billed_until``), so an end the launcher read on a wall clock stepped forward since is
    billed only as far as ``until``. Neither the cost nor ``billed_until``, the end of the span the cost
    covers, moves back: a clock stepped back (or an end seen after a later accrual) leaves both where
    they were, so the cost report never spreads the cost over fewer seconds than it paid for."""
    end = until if attempt.ended_at is None else min(attempt.ended_at, until)
    cost = max(attempt.cost, cost_for_seconds(attempt.price_per_hour, billed_seconds(attempt.created_at, end)))
    billed = end if attempt.billed_until is None else max(end, attempt.billed_until)
    return replace(attempt, cost=cost, billed_until=billed)
