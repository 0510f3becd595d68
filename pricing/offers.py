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
from decimal import Decimal, InvalidOperation
from enum import Enum

from pricing.money import Micros


class Tier(str, Enum):
    """Where a job's node comes from, cheapest-to-get first in spirit."""

    ONPREM = "onprem"
    ONDEMAND = "ondemand"
    SPOT = "spot"


LOCAL_DISK_FORMS = ('"nvme:1000+" (an NVMe local disk of at least 1000 GB), "ssd:500" (an SSD of exactly 500 GB), '
                    '"nvme" (at least 100 GB) or "1000+" (NVMe, at least 1000 GB)')
"""The forms of ``resources.local_disk`` SkyPilot takes (``sky/utils/resources_utils.py``, ``normalize_local_disk``),
for a sentence that refuses another."""


@dataclass(frozen=True)
class LocalDisk:
    """An instance's local disk (``nvme:1900``), or the one a task asks for (``nvme:1000+``), as SkyPilot 0.14 writes
    them (``sky/utils/resources_utils.py``): ``mode`` is ``nvme`` or ``ssd``, ``size_gb`` the total over the disks,
    ``at_least`` the '+' of a request (an instance's disk is a size, never at least).

    Written again here rather than imported: ``pricing`` never imports ``sky`` (docs/architecture.md), and
    ``tests/pricing/test_local_disk.py`` holds the two to one table."""

    mode: str
    size_gb: Decimal
    at_least: bool = False

    def __str__(self) -> str:
        return f"{self.mode}:{format(self.size_gb.normalize(), 'f')}{'+' if self.at_least else ''}"

    @classmethod
    def parse(cls, text: str) -> LocalDisk:
        """A ``local_disk`` value as SkyPilot normalizes it: ``nvme:1000+``, ``ssd:500``, ``nvme`` (``nvme:100+``),
        ``1000+`` (``nvme:1000+``), in any case. ``ValueError`` with a sentence fragment naming the forms taken
        for anything else; a size must be a finite number of GB above 0 (SkyPilot let ``inf`` and ``nan`` through,
        which no instance has)."""
        raw = str(text).strip().lower()
        parts = raw.split(":")
        if len(parts) == 1 and parts[0] in ("nvme", "ssd"):
            parts = [parts[0], "100+"]  # SkyPilot's DEFAULT_LOCAL_DISK_SIZE
        elif len(parts) == 1:
            parts = ["nvme", parts[0]]
        if len(parts) != 2 or parts[0] not in ("nvme", "ssd"):
            raise ValueError(f"{str(text).strip()!r} is not a local disk: give {LOCAL_DISK_FORMS}")
        mode, size = parts
        at_least = size.endswith("+")
        try:
            gb = Decimal(size[:-1] if at_least else size)
        except InvalidOperation:
            raise ValueError(f"{str(text).strip()!r} is not a local disk: give {LOCAL_DISK_FORMS}") from None
        if not gb.is_finite() or gb <= 0:
            raise ValueError(f"{str(text).strip()!r} needs a size of more than 0 GB: give {LOCAL_DISK_FORMS}")
        return cls(mode, gb, at_least)

    def satisfies(self, want: LocalDisk | None) -> bool:
        """Whether this instance's disk gives what ``want`` asks, as SkyPilot checks a pinned instance type
        (``resources_utils.local_disk_satisfied``): NVMe is only NVMe, an SSD is an SSD or NVMe; at least the size
        with '+', else that size within 1 GB."""
        if want is None:
            return True
        if want.mode == "nvme" and self.mode != "nvme":
            return False
        if want.mode == "ssd" and self.mode not in ("ssd", "nvme"):
            return False
        return self.size_gb >= want.size_gb if want.at_least else abs(self.size_gb - want.size_gb) < 1


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

    ``local_disk``: the instance's local disk as SkyPilot's catalog gives it (its optional ``LocalDisk*`` and
    ``NVMeSupported`` columns, :func:`pricing.catalog.parse_vms_csv`); ``None``: not known (a catalog without those
    columns, a pool, a simulated zone), which no ``resources.local_disk`` fits.
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
    local_disk: LocalDisk | None = None

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
    local_disk: LocalDisk | None = None


@dataclass(frozen=True)
class JobRequest:
    """What placement needs to know about a job."""

    alternatives: tuple[ResourceRequest, ...] = (ResourceRequest(),)
    num_nodes: int = 1
    max_price_per_hour: Micros | None = None
    expected_hours: Decimal | None = None
    allowed_tiers: frozenset[Tier] = field(default_factory=lambda: frozenset(Tier))
    ordered: bool = False  # SkyPilot's ``ordered``: the alternatives in the user's order of preference
