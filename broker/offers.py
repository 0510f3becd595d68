"""Price step: the offers the broker can place jobs on, and the capacity free on each.

An on-prem pool of N slots (GPUs, or CPU-job slots) is offered as N shapes —
1 slot, 2 slots, … N slots — each at its internal price per slot-hour, so a
job pays for the slots it holds and placement picks the smallest shape that
fits. A shape bigger than the pool's free slots is not offered; a pool with no
shape left is reported as full. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from broker.config import Pool, Settings
from broker.models import Job
from pricing.offers import JobRequest, Offer, Tier


def pool_offers(pool: Pool) -> list[Offer]:
    """Every shape of ``pool``: ``k`` slots at ``k`` × the slot price."""
    return [
        Offer(
            tier=Tier.ONPREM, cloud="local", region=pool.name, zone=pool.name,
            instance_type=f"{pool.name}-{k}slot",
            accelerator=pool.accelerator, accelerator_count=k if pool.accelerator else 0,
            price_per_hour=pool.price_per_slot_hour * k, vcpus=pool.cpus_per_slot * k,
            memory_gib=pool.memory_gib_per_slot * k,
        )
        for k in range(1, pool.slots + 1)
    ]


def slots_of(offer: Offer) -> int:
    """How many pool slots an on-prem shape holds (``<pool>-<k>slot``)."""
    return int(offer.instance_type.rsplit("-", 1)[1].removesuffix("slot"))


def held_slots(jobs: Iterable[Job]) -> dict[str, set[int]]:
    """Slots held per pool by jobs that are placed, launching, running or being cancelled."""
    held: dict[str, set[int]] = {}
    for job in jobs:
        if job.state.is_active and job.placement.get("tier") == Tier.ONPREM.value:
            held.setdefault(job.placement.get("location", ""), set()).update(job.slots)
    return held


@dataclass(frozen=True)
class Market:
    """What placement decides over right now: offers, capacity in nodes, free slot indices."""

    offers: tuple[Offer, ...]
    free_capacity: dict[str, int]
    free_slots: dict[str, list[int]]


def market(settings: Settings, active_jobs: Iterable[Job]) -> Market:
    held = held_slots(active_jobs)
    offers: list[Offer] = []
    capacity: dict[str, int] = {}
    free: dict[str, list[int]] = {}
    for pool in settings.pools:
        free[pool.name] = [i for i in range(pool.slots) if i not in held.get(pool.name, set())]
        shapes = pool_offers(pool)
        fitting = [o for o in shapes if slots_of(o) <= len(free[pool.name])]
        offers.extend(fitting or shapes)
        capacity[pool.name] = 1 if fitting else 0
    return Market(offers=tuple(offers), free_capacity=capacity, free_slots=free)


def all_offers(settings: Settings) -> list[Offer]:
    """Every offer with every pool empty: what the admission quote prices against."""
    return [o for pool in settings.pools for o in pool_offers(pool)]


def placement_record(offer: Offer, num_nodes: int) -> dict:
    """The placement as stored on the job and handed to the launcher."""
    return {
        "tier": offer.tier.value, "cloud": offer.cloud, "region": offer.region, "zone": offer.zone,
        "location": offer.location, "instance_type": offer.instance_type, "accelerator": offer.accelerator,
        "accelerator_count": offer.accelerator_count, "num_nodes": num_nodes,
        "price_per_hour": offer.price_per_hour * num_nodes, "simulated": offer.simulated,
    }


def usable_by(offers: Iterable[Offer], request: JobRequest) -> list[Offer]:
    """Offers this job may take: a CPU-only job never holds an on-prem GPU slot."""
    wants_gpu = any(alt.accelerator for alt in request.alternatives)
    return [o for o in offers if wants_gpu or not (o.tier is Tier.ONPREM and o.accelerator)]
