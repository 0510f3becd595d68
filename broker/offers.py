"""Price step: the offers the broker can place jobs on, and the capacity free on each.

* An on-prem pool of N slots (GPUs, or CPU-job slots) is offered as N shapes —
  1 slot, 2 slots, … N slots — each at its internal price per slot-hour, so a
  job pays for the slots it holds and placement picks the smallest shape that
  fits. A shape bigger than the pool's free slots is not offered; a pool with
  no shape left is reported as full.
* A simulated cloud zone (``zones:`` in the config) is offered as its instance
  type at the price table's spot or on-demand price for that region, marked
  ``simulated``; its capacity is its free nodes, and a spot zone the launcher
  reports without capacity has none.
* With the SkyPilot launcher, each offer of the price table of the ``clouds``
  setting; one outside the broker's ``instance_types`` / ``launch_regions``
  (what its cloud role may launch) is marked :class:`pricing.placement.Barred`:
  never quoted nor placed, but named in the sentence of a job only it would fit.

Pure, given the price table.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from broker.config import Pool, Settings
from broker.models import Job
from broker.queue import expected_end
from broker.spec import SpecError, alternative_sources
from launchers.base import after_run_seconds
from launchers.simzones import SimZone
from pricing.catalog import PRICED_CLOUDS, CatalogError
from pricing.money import to_micros
from pricing.offers import JobRequest, Offer, Tier
from pricing.placement import Barred, Limits, candidates, matches, within_limits


def pool_offers(pool: Pool) -> list[Offer]:
    """Every shape of ``pool``: ``k`` slots at ``k`` × the slot price. A Kubernetes pool's offers are in
    cloud ``kubernetes``, region = its context (what SkyPilot's ``infra: k8s/<context>`` names); the zone
    is the pool's name either way, the key its capacity is counted under."""
    k8s = pool.kubernetes_context
    return [
        Offer(
            tier=Tier.ONPREM, cloud="kubernetes" if k8s else "local", region=k8s or pool.name, zone=pool.name,
            instance_type=f"{pool.name}-{k}slot",
            accelerator=pool.accelerator, accelerator_count=k if pool.accelerator else 0,
            price_per_hour=pool.price_per_slot_hour * k, vcpus=pool.cpus_per_slot * k,
            memory_gib=pool.memory_gib_per_slot * k,
        )
        for k in range(1, pool.slots + 1)
    ]


log = logging.getLogger("broker.offers")

PRICE_RECHECK_SECONDS = 60.0
"""How often the broker looks whether the catalog it priced from has changed on disk."""
_tables: dict[str, tuple[tuple, tuple[Offer, ...]]] = {}
"""Per cloud: the catalog file it was read from (path, time, size) and its offers."""
_checked: dict[str, float] = {}
_joined: dict[tuple[str, ...], tuple[tuple, tuple[Offer, ...]]] = {}
_table_lock = threading.Lock()


def _price_table(clouds: Sequence[str] = PRICED_CLOUDS) -> tuple[Offer, ...]:
    """The price table of ``clouds`` (the ``clouds`` setting), each cloud's read again when SkyPilot
    refreshes its catalog or downloads one for a cloud it had none of (the files' times and sizes are
    looked at once a minute), so a long-running broker quotes today's prices and places on a cloud as
    soon as SkyPilot has its catalog. Each cloud is kept apart, so that pricing a simulated zone in its
    own cloud never throws away (and re-reads) the table the engine places from."""
    from pricing.loading import catalog_files, has_no_rows, load_price_table

    clouds = tuple(dict.fromkeys(clouds))
    with _table_lock:
        now = time.monotonic()
        for cloud in clouds:
            if cloud in _tables and now - _checked.get(cloud, float("-inf")) < PRICE_RECHECK_SECONDS:
                continue
            files = catalog_files(clouds=(cloud,))
            _checked[cloud] = now
            if cloud not in _tables or _tables[cloud][0] != files:
                before = _tables[cloud][0][0][0] if cloud in _tables and _tables[cloud][0] else None
                if before is not None and before != (files[0][0] if files else None) and has_no_rows(Path(before)):
                    # emptied as SkyPilot rewrites it (opened for writing, not yet written): keep quoting the prices
                    # read last, not the snapshot's or none, and look again at the next look
                    log.warning("price catalog of %s not re-read, keeping the prices read before: %s has no rows "
                                "after its header", cloud, before)
                    continue
                try:
                    _tables[cloud] = (files, load_price_table(clouds=(cloud,)))
                except CatalogError as exc:
                    if cloud not in _tables:
                        raise  # the first read: the broker's start-up check says so in one line
                    # caught mid-rewrite by SkyPilot's refresh, or broken: keep quoting the prices read last,
                    # and read the file again at the next look
                    log.warning("price catalog of %s not re-read, keeping the prices read before: %s", cloud, exc)
        key = tuple(_tables[c][0] for c in clouds)
        if clouds not in _joined or _joined[clouds][0] != key:
            _joined[clouds] = (key, tuple(o for c in clouds for o in _tables[c][1]))
        return _joined[clouds][1]


def limits_of(settings: Settings) -> Limits:
    """The broker's limits on cloud placement (``instance_types``, ``launch_regions``): what its cloud role may launch."""
    return Limits(instance_types=settings.instance_types, launch_regions=settings.launch_regions)


_limited: dict[Limits, tuple[tuple[Offer, ...], tuple[Offer, ...]]] = {}
"""Per limits: the price table last held to them and the offers it gave (:func:`cloud_offers`)."""


def cloud_offers(settings: Settings) -> tuple[Offer, ...]:
    """The price table of the ``clouds`` setting (:func:`_price_table`), each offer outside the broker's limits
    (:func:`limits_of`) marked :class:`~pricing.placement.Barred`: placement never takes one, and names the limit to a
    job that only one would fit. Worked out again only when the table or the limits change: the engine reads this at
    every tick."""
    table = _price_table(settings.clouds)
    limits = limits_of(settings)
    if not limits:
        return table
    with _table_lock:
        held = _limited.get(limits)
        if held is not None and held[0] is table:
            return held[1]
    out = within_limits(table, limits)
    with _table_lock:
        if len(_limited) > 8:  # a process holds one set of limits; tests make many
            _limited.clear()
        _limited[limits] = (table, out)
    return out


def zone_offer(zone: SimZone, table: Iterable[Offer] | None = None) -> Offer:
    """A simulated zone priced like the real instance it stands for (in its own cloud's catalog, whatever
    the ``clouds`` setting: a simulated zone is not a placement in that cloud)."""
    tier = Tier(zone.tier)
    own = (zone.cloud,) if zone.cloud in PRICED_CLOUDS else ()
    rows = [o for o in (table if table is not None else _price_table(own))
            if o.instance_type == zone.instance_type and o.region == zone.region and o.tier is tier
            and (zone.cloud_zone is None or o.zone == zone.cloud_zone)]
    if not rows and zone.price_per_hour is None:
        raise ValueError(f"zones: no {tier.value} price for {zone.instance_type} in {zone.region} in the price table; "
                         "set price_per_hour")
    row = min(rows, key=lambda o: o.price_per_hour) if rows else None
    return Offer(
        tier=tier, cloud=zone.cloud, region=zone.region, zone=zone.name, instance_type=zone.instance_type,
        accelerator=row.accelerator if row else None, accelerator_count=row.accelerator_count if row else 0,
        price_per_hour=to_micros(zone.price_per_hour) if zone.price_per_hour is not None else row.price_per_hour,
        vcpus=row.vcpus if row else None, memory_gib=row.memory_gib if row else None, simulated=True,
        max_nodes=zone.nodes,
    )


def slots_of(offer: Offer) -> int:
    """How many pool slots an on-prem shape holds (``<pool>-<k>slot``)."""
    return int(offer.instance_type.rsplit("-", 1)[1].removesuffix("slot"))


def held_slots(jobs: Iterable[Job]) -> dict[str, set[int]]:
    """Slots held per pool by jobs that are placed, launching, running or stopping."""
    held: dict[str, set[int]] = {}
    for job in jobs:
        if job.state.is_active and job.placement.get("tier") == Tier.ONPREM.value:
            held.setdefault(job.placement.get("location", ""), set()).update(job.slots)
    return held


def nodes_in_use(jobs: Iterable[Job]) -> dict[str, int]:
    """Nodes held per cloud zone by active jobs."""
    used: dict[str, int] = {}
    for job in jobs:
        if job.state.is_active and job.placement.get("tier") in (Tier.SPOT.value, Tier.ONDEMAND.value):
            loc = job.placement.get("location", "")
            used[loc] = used.get(loc, 0) + int(job.placement.get("num_nodes", 1))
    return used


@dataclass(frozen=True)
class Market:
    """What placement decides over right now: offers, capacity in nodes, free slot indices."""

    offers: tuple[Offer, ...]
    free_capacity: dict[str, int]
    free_slots: dict[str, list[int]]
    spot_available: frozenset[str] = frozenset()
    #: every offer, a pool's shapes that do not fit its free slots now included (``offers`` leaves them out): what
    #: the budget stop before a start weighs, since busy slots come free and a budget does not grow by itself;
    #: empty: ``offers``
    every_offer: tuple[Offer, ...] = ()
    #: per pool, each job holding slots there: (when it is expected to hand them back, epoch seconds, or ``None`` when
    #: that cannot be told; how many) — what a reservation for a job kept waiting for several slots is timed by
    #: (:func:`broker.engine.schedule.schedule`); empty when the market was read without a time
    slot_ends: Mapping[str, tuple[tuple[float | None, int], ...]] = field(default_factory=dict)


def market(settings: Settings, active_jobs: Iterable[Job], availability: Mapping[str, bool] | None = None, *,
           now: float | None = None) -> Market:
    """What placement decides over; with ``now``, also when the slots each pool's jobs hold come free
    (``slot_ends``, from :func:`broker.queue.expected_end`)."""
    active_jobs = list(active_jobs)
    held = held_slots(active_jobs)
    offers: list[Offer] = []
    every: list[Offer] = []  # the pools' shapes, whether or not they fit the free slots now
    capacity: dict[str, int] = {}
    free: dict[str, list[int]] = {}
    for pool in settings.pools:
        mine = held.get(pool.name, set())
        open_slots = [i for i in range(pool.slots) if i not in mine]
        # jobs still on slots a pool lowered since (a restart with fewer `slots`) hold capacity all the same: counted
        # only by index, a pool cut from 3 slots to 1 under 3 running jobs placed a fourth as soon as slot 0 came free
        beyond = sum(1 for i in mine if i >= pool.slots)
        free[pool.name] = open_slots[:max(len(open_slots) - beyond, 0)]
        shapes = pool_offers(pool)
        fitting = [o for o in shapes if slots_of(o) <= len(free[pool.name])]
        offers.extend(fitting or shapes)
        every.extend(shapes)
        capacity[pool.name] = 1 if fitting else 0
    pooled = len(offers)  # the offers after the pools' are the same in both lists
    spot_up = set()
    if settings.launcher == "skypilot":
        cloud = cloud_offers(settings)  # clouds: capacity unknown until tried; preempted zones get blocked
        offers.extend(cloud)
        # a cloud's spot zone counts as up for the spot policy until a preemption or a failed launch there blocks it
        # for the job (``Job.blocked_at``): left out, every cloud job with a deadline was told "no spot" and waited
        # through its slack, or went to on-demand, while spot was there to be tried; a zone only of offers outside
        # the broker's limits is none it may launch in
        spot_up.update(o.zone for o in cloud if o.tier is Tier.SPOT and o.zone and not isinstance(o, Barred))
    used = nodes_in_use(active_jobs)
    availability = availability or {}
    for zone in settings.zones:
        offers.append(zone_offer(zone))
        up = availability.get(zone.name, True)
        capacity[zone.name] = max(zone.nodes - used.get(zone.name, 0), 0) if up else 0
        if zone.tier == "spot" and up:
            spot_up.add(zone.name)
    ends: dict[str, list[tuple[float | None, int]]] = {}
    if now is not None:
        for job in active_jobs:
            if job.state.is_active and job.placement.get("tier") == Tier.ONPREM.value and job.slots:
                ends.setdefault(job.placement.get("location", ""), []).append(
                    (expected_end(job, now, settings.stop_grace_seconds), len(job.slots)))
    return Market(offers=tuple(offers), free_capacity=capacity, free_slots=free, spot_available=frozenset(spot_up),
                  every_offer=(*every, *offers[pooled:]), slot_ends={k: tuple(v) for k, v in ends.items()})


def all_offers(settings: Settings) -> list[Offer]:
    """Every offer with all capacity free: what the admission quote prices against (a cloud offer outside the
    broker's limits marked :class:`~pricing.placement.Barred`, which it never quotes)."""
    cloud = list(cloud_offers(settings)) if settings.launcher == "skypilot" else []
    return [o for pool in settings.pools for o in pool_offers(pool)] + [zone_offer(z) for z in settings.zones] + cloud


def ondemand_price(offer: Offer, offers: Iterable[Offer]) -> int | None:
    """What the same shape costs on on-demand (for "saved against on-demand"), if it is offered."""
    if offer.tier is Tier.ONDEMAND:
        return offer.price_per_hour
    same = [o.price_per_hour for o in offers if o.tier is Tier.ONDEMAND and o.instance_type == offer.instance_type
            and o.cloud == offer.cloud and o.region == offer.region]
    return min(same) if same else None


def placement_record(offer: Offer, num_nodes: int, offers: Iterable[Offer] = (), *,
                     alternative: int | None = None) -> dict:
    """The placement as stored on the job and handed to the launcher. ``alternative``: the index of the task's
    ``resources.any_of`` / ``ordered`` entry the offer was placed for (:func:`placed_alternative`), stored as
    ``alternative`` so that the launcher launches that entry's own settings (``disk_size``, ``image_id``, ...);
    left out when the task has no such list."""
    od = ondemand_price(offer, offers)
    record = {
        "ondemand_price_per_hour": od * num_nodes if od is not None else None,
        "tier": offer.tier.value, "cloud": offer.cloud, "region": offer.region, "zone": offer.zone,
        "location": offer.location, "instance_type": offer.instance_type, "accelerator": offer.accelerator,
        "accelerator_count": offer.accelerator_count, "num_nodes": num_nodes,
        "price_per_hour": offer.price_per_hour * num_nodes, "simulated": offer.simulated,
        # the shape of one node, as text ("2", "7.5"): a Kubernetes pool's pod is sized from it (its offers name no
        # instance type SkyPilot could size one from)
        "vcpus": _shape(offer.vcpus), "memory_gib": _shape(offer.memory_gib),
    }
    if alternative is not None:
        record["alternative"] = alternative
    return record


def placed_alternative(task: Mapping, request: JobRequest, offer: Offer) -> int | None:
    """The index of the ``resources.any_of`` / ``ordered`` entry of ``task`` (a stored spec, its ``broker:`` section
    and all) that ``offer`` was placed for: the first whose shape ``offer`` matches (:func:`pricing.placement.matches`,
    as placement matched it; with ``ordered``, the entry placement preferred). ``request`` is the one placed (its
    alternatives as :func:`broker.spec.parse` read them from ``task``). ``None`` when the task has no such list, or
    none matches (the launcher then picks the entry by the placement's location and accelerator)."""
    try:
        sources = alternative_sources(task.get("resources") if isinstance(task, Mapping) else None)
    except SpecError:  # a stored task placement read otherwise: nothing to tell
        return None
    if len(sources) != len(request.alternatives):  # not read from this task: nothing to tell
        return None
    return next((i for alt, i in zip(request.alternatives, sources) if matches(offer, alt)), None)


def _shape(value) -> str | None:
    return None if value is None else format(Decimal(str(value)).normalize(), "f")


def after_run(launcher, offers: Iterable[Offer]) -> dict[Offer, int]:
    """Seconds an attempt on each offer is billed after its run ends, as the launcher it would go to
    says (a SkyPilot cluster's idle minutes before autodown and its teardown; nothing for a pool or
    simulated zone on this host): what placement and the quote keep of the budget beyond the run
    (``after_run_seconds`` of :func:`pricing.placement.place`). Only offers billed something; none
    without a launcher."""
    if launcher is None:
        return {}
    seconds = {o: after_run_seconds(launcher, placement_record(o, 1)) for o in offers}
    return {o: s for o, s in seconds.items() if s > 0}


def matching_offers(request: JobRequest, offers: Iterable[Offer]) -> list[Offer]:
    """The offers this job may take and that match its request (any alternative, allowed tiers)."""
    return candidates(request, usable_by(offers, request))


def usable_by(offers: Iterable[Offer], request: JobRequest) -> list[Offer]:
    """Offers this job may take: a job of several nodes never an on-prem pool (a pool is one node: its capacity in
    :func:`market`). That a CPU-only job never holds a pool's GPU slot is the shape's rule
    (:func:`pricing.placement.matches`): dropped here, the GPU pools were not there for the sentence of a CPU job
    that no offer fits, which said "no offer is priced in local at all" of `infra: local`."""
    return [o for o in offers if o.tier is not Tier.ONPREM or request.num_nodes == 1]
