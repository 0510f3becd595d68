"""What can be bought and what a job asks for: the data placement decides over.

An :class:`Offer` is one way to run a node: a tier (on-prem pool, on-demand or
spot cloud capacity), where it is, what it carries and what it costs per hour
in micro-dollars. A :class:`JobRequest` is what the job's ``resources`` asked
for, with ``any_of`` alternatives flattened into ``alternatives``.

These are plain frozen dataclasses so the live broker, the simulator and the
tests build them the same way; nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from enum import Enum

from pricing.money import Micros


class Tier(str, Enum):
    """Where a job's node comes from, cheapest-to-get first in spirit."""

    ONPREM = "onprem"
    ONDEMAND = "ondemand"
    SPOT = "spot"


@dataclass(frozen=True)
class Offer:
    """One purchasable node shape at one location.

    ``location`` names the capacity it draws from (an on-prem pool, a zone):
    the key of ``free_capacity`` in :func:`pricing.placement.place`.
    ``simulated`` marks local stand-ins for cloud zones (demo and tests).

    ``default_host_cpus`` is set on a GCP GPU riding an ``n1-`` VM (``n1-highmem-2+T4:1``): SkyPilot picks such a
    host by its own rule (``sky/catalog/gcp_catalog.py``, ``get_instance_type_for_accelerator``), which
    :func:`pricing.placement.matches` applies to these offers: a task asking neither ``cpus`` nor ``memory`` gets
    a host of at least this many vCPUs and 4 GiB per vCPU (``_NUM_ACC_TO_NUM_CPU``: 4 for T4:1), one asking only
    ``cpus`` at least 4 GiB per vCPU asked, one asking ``memory`` any vCPUs.

    ``max_nodes``: the most nodes its location ever has (a simulated zone's ``nodes``); ``None``: no known limit
    (a cloud region: capacity unknown until tried). A job of more nodes can never run there
    (:func:`pricing.placement.holds`).
    """

    tier: Tier
    cloud: str
    region: str
    zone: str | None
    instance_type: str
    accelerator: str | None
    accelerator_count: int
    price_per_hour: Micros
    vcpus: Decimal | None = None
    memory_gib: Decimal | None = None
    simulated: bool = False
    default_host_cpus: int | None = None
    max_nodes: int | None = None

    @property
    def location(self) -> str:
        return self.zone or self.region

    def describe(self) -> str:
        acc = f"{self.accelerator_count}x {self.accelerator}" if self.accelerator else "CPU"
        where = self.zone or self.region
        if self.tier is Tier.ONPREM and self.zone and self.region and self.zone != self.region:
            where = f"{self.region}, pool {self.zone}"  # a pool in a Kubernetes context
        sim = " (simulated)" if self.simulated else ""
        return f"{self.tier.value} {acc} {self.instance_type} in {self.cloud}/{where}{sim}"


@dataclass(frozen=True)
class ResourceRequest:
    """One acceptable resource shape (a ``resources`` block or one ``any_of`` entry).

    ``None`` means "any". ``use_spot=None`` lets the broker choose the tier.

    ``cpus_exact`` / ``memory_exact``: the size was written without ``+`` (``cpus: 16``, ``memory: 64GB``),
    which SkyPilot reads as exactly that many vCPUs / GiB: it launches only an instance type of that size
    (:func:`pricing.placement.matches` holds a cloud offer to it; a pool takes it as at least). Off (the
    default, and ``cpus: 16+``): at least.
    """

    accelerator: str | None = None
    accelerator_count: int = 0
    cpus: Decimal | None = None
    memory_gib: Decimal | None = None
    cpus_exact: bool = False
    memory_exact: bool = False
    use_spot: bool | None = None
    cloud: str | None = None
    region: str | None = None
    zone: str | None = None
    instance_type: str | None = None


@dataclass(frozen=True)
class JobRequest:
    """What placement needs to know about a job."""

    alternatives: tuple[ResourceRequest, ...] = (ResourceRequest(),)
    num_nodes: int = 1
    max_price_per_hour: Micros | None = None
    expected_hours: Decimal | None = None
    allowed_tiers: frozenset[Tier] = field(default_factory=lambda: frozenset(Tier))
    ordered: bool = False  # SkyPilot's ``ordered``: the alternatives in the user's order of preference
