"""Place step: walk the queue and decide which jobs take which capacity now. Pure.

Decides against a snapshot (the :class:`~broker.offers.Market`), reserving
what it hands out so two jobs are never placed on the same slots in one
cycle; the reconcile loop then persists each decision with compare-and-set.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from broker.models import Job
from broker.offers import Market, placement_record, slots_of, usable_by
from broker.queue import ordered
from broker.spec import parse
from pricing.offers import Tier
from pricing.placement import NoFit, place


@dataclass(frozen=True)
class Place:
    job: Job
    placement: dict
    slots: tuple[int, ...]
    reason: str


@dataclass(frozen=True)
class Wait:
    job: Job
    reason: str


def schedule(jobs: Iterable[Job], mk: Market, *, now: float) -> list[Place | Wait]:
    """One decision per queued job, in queue order."""
    free_slots = {k: list(v) for k, v in mk.free_slots.items()}
    capacity = dict(mk.free_capacity)
    offers = list(mk.offers)
    decisions: list[Place | Wait] = []
    for position, job in enumerate(ordered(jobs), start=1):
        request = parse(job.spec, now=job.submitted_at).request
        budget_left = job.budget - job.spent
        chosen = place(request, usable_by(offers, request), free_capacity=capacity, budget_left=budget_left)
        if isinstance(chosen, NoFit):
            decisions.append(Wait(job, f"waiting (position {position} in the queue): {chosen.reason}"))
            continue
        offer = chosen.offer
        slots: tuple[int, ...] = ()
        if offer.tier is Tier.ONPREM:
            pool = offer.location
            k = slots_of(offer) * chosen.num_nodes
            slots = tuple(free_slots[pool][:k])
            free_slots[pool] = free_slots[pool][k:]
            # shapes that no longer fit leave the market; a pool with none left is full
            offers = [o for o in offers if o.tier is not Tier.ONPREM or o.location != pool
                      or slots_of(o) <= len(free_slots[pool])]
            if not any(o.tier is Tier.ONPREM and o.location == pool for o in offers):
                offers.extend(x for x in mk.offers if x.tier is Tier.ONPREM and x.location == pool)
                capacity[pool] = 0
        decisions.append(Place(job, placement_record(offer, chosen.num_nodes), slots,
                               f"placed on {offer.describe()}"))
    return decisions


def with_reason(job: Job, reason: str) -> Job:
    return replace(job, reason=reason)
