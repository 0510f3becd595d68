"""Money at run time: warn at 80 %, stop before 100 %, never record more than the budget. Pure.

The stop comes early enough that the checkpoint-and-exit after SIGTERM (the
grace period) and the next ticks are paid for within the budget; recorded cost
is also capped at the budget, so a job's spend can never exceed it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

from pricing.money import Micros, affordable_seconds, cost_for_seconds, fmt
from pricing.offers import JobRequest, Offer, Tier
from pricing.placement import Blocked, NoFit, block_of, holds, place, unblocked, under_cap

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


def rerun_for(rerun_seconds: int, min_run_seconds: int, expected_hours: Decimal | None) -> int:
    """:func:`rerun_seconds` for a job whose expected run left (``expected_hours``, ``None`` when not known) is shorter
    than a minute: its minute's run shortened to that, and never less than a first start's ``min_run_seconds``
    (:func:`reserve_seconds`). A 30 s job preempted 5 s in with $0.2750 of $0.30 left, which paid for its 25 s more
    on spot ($0.15) and a clean stop ($0.04), was stopped: "cannot pay for a minute's run and a clean stop (63 s…)"."""
    if expected_hours is None:
        return max(min_run_seconds, rerun_seconds)
    short = MIN_RUN_SECONDS - math.ceil(expected_hours * 3600)
    return max(min_run_seconds, rerun_seconds - max(short, 0))


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


# -- a zone blocked for the job, in the budget's sentences ----------------------------------------------------------
# After a spot preemption the zone is blocked for the job for a cool-down: a budget stop that priced the cheapest offer
# named that zone ("the cheapest, spot … in aws/sim-a, costs $0.4246/h") and a resume was told to raise the budget to
# what a minute there costs, then waited, unsaid, until the zone was free for it again.


def block_on(offer: Offer, blocked_until: Mapping[str, float], now: float) -> tuple[str, float] | None:
    """The entry of a job's ``blocked_zones`` (place → blocked until) that blocks ``offer`` at ``now`` — its location's,
    else its cloud's (:func:`~pricing.placement.cloud_block`) — and when that block ends; ``None``: not blocked."""
    found = block_of(offer, _blocked_at(blocked_until, now))
    return None if found is None else (found[0], blocked_until[found[0]])


def usable_now(offers: Sequence[Offer], blocked_until: Mapping[str, float], now: float) -> list[Offer]:
    """The ``offers`` in no zone (nor cloud) blocked for the job at ``now`` (placement's own :func:`unblocked`)."""
    return unblocked(offers, _blocked_at(blocked_until, now))


def _blocked_at(blocked_until: Mapping[str, float], now: float) -> frozenset[str]:
    """The places of ``blocked_until`` blocked at ``now``, as ``Job.blocked_at`` reads a job's."""
    return frozenset(key for key, until in blocked_until.items() if until > now)


def block_until_words(offer: Offer, blocked_until: Mapping[str, float], now: float,
                      causes: Mapping[str, Blocked] | None = None) -> str:
    """``zone sim-a, which this job may not use until 03:14:36Z (after a preemption there)``, for ``offer`` blocked for
    the job (:func:`block_on`); empty when it is not. Not in the words of
    :data:`~pricing.placement.BLOCKED_WORDS`, which tell the queue a job waits for capacity."""
    found = block_on(offer, blocked_until, now)
    if found is None:
        return ""
    key, until = found
    cause = (causes or {}).get(key)
    why = f" (after {cause.words()})" if isinstance(cause, Blocked) and cause.known else ""
    place_ = f"the cloud {key.removeprefix('cloud:')}" if key.startswith("cloud:") else \
        f"{'pool' if offer.tier is Tier.ONPREM else 'zone'} {offer.location}"
    return f"{place_}, which this job may not use until {time.strftime('%H:%M:%SZ', time.gmtime(until))}{why}"


def blocked_cheapest(request: JobRequest, offers: Sequence[Offer], *, blocked_until: Mapping[str, float], now: float,
                     causes: Mapping[str, Blocked] | None = None) -> str:
    """What a budget stop's sentence (``cannot pay for … on any offer: the cheapest, <offer>, costs $X/h``,
    :func:`~pricing.placement.start_shortfall` over every offer the job may take) adds when that cheapest offer is in a
    zone blocked for the job: that it may not use it until when, and the cheapest it may use now — the stop is right
    (the budget pays for a minute on none of them), but the sentence priced the zone that had just preempted it.
    Empty when the cheapest is not blocked."""
    n = request.num_nodes
    priced = under_cap(request, [o for o in offers if holds(o, n)])
    if not priced:
        return ""
    cheapest = min(priced, key=lambda o: o.price_per_hour)
    said = block_until_words(cheapest, blocked_until, now, causes)
    if not said:
        return ""
    free = usable_now(priced, blocked_until, now)
    if not free:
        return f"; that is {said}, as is every other offer it may take"
    other = min(free, key=lambda o: o.price_per_hour)
    return (f"; that is {said}: the cheapest it may use now, {other.describe()}, costs "
            f"{fmt(other.price_per_hour * n)}/h")


def pays_once_free(request: JobRequest, offers: Sequence[Offer], *, blocked_until: Mapping[str, float], now: float,
                   budget_left: Micros, min_run_seconds: int, after_run_seconds: Mapping[Offer, int] | None = None,
                   placed_again: bool = False, causes: Mapping[str, Blocked] | None = None) -> str:
    """What a queued job's reason adds when the budget left pays for none of the offers it may use now but does for one
    in a zone blocked for it (placement's own test, :func:`~pricing.placement.place`, on those alone): where, and
    from when — it waited with "cannot pay … on the cheapest free match, sim-b", and no word that it would start in
    sim-a once its block ended. Empty otherwise."""
    blocked = [o for o in offers if block_on(o, blocked_until, now) is not None]
    if not blocked:
        return ""
    got = place(request, blocked, budget_left=budget_left, min_run_seconds=min_run_seconds,
                after_run_seconds=after_run_seconds, placed_again=placed_again)
    if isinstance(got, NoFit):
        return ""
    return (f"; what is left pays for one on {got.offer.describe()}, in "
            f"{block_until_words(got.offer, blocked_until, now, causes)}: it can start there then, or now once its budget "
            "is raised to pay for one it may use now")
