"""The price table: SkyPilot catalog rows (schema v8) and on-prem pools as :class:`Offer` s.

Pure: every function here takes text or values and returns offers. The one
function that reads files is :func:`pricing.loading.load_price_table`.

Rules of the catalog format (SkyPilot's ``catalogs/v8/<cloud>/vms.csv``):

| column / case | what it becomes |
|---|---|
| ``Price`` | an on-demand offer at that $/h |
| ``SpotPrice`` (non-empty) | a spot offer at that $/h, same shape and zone |
| ``AvailabilityZone`` = ``use1-az1`` (AWS zone id) | zone name via ``az_mappings`` (``us-east-1a``); the id itself when unmapped |
| GCP row with no ``InstanceType`` (a GPU/TPU row) | the accelerator priced alone; a GPU is paired with each host VM in that zone that can carry it, as SkyPilot pairs them (A100, H100, L4, ... only on their own ``a2-``/``a3-``/``g2-`` types by count; other GPUs on every ``n1-`` VM within GCP's limit for the count, each offer marked with SkyPilot's default host size, which placement applies to a task asking no size); a GPU with no such host is no offer; a TPU stands alone; the offer is named ``<host>+<GPU>:<count>`` (``n1-highmem-8+V100:1``) |
| GCP VM row of a GPU's own type (``a2-``, ``a3-``, ``a4-``, ``g2-``, ``g4-``) | no offer of its own: GCP never runs it without its GPUs, so it is offered only paired with them, at both prices |
| row with no ``Price`` | skipped (not purchasable on-demand, no shape to price) |
| ``LocalDiskType`` = ``ssd`` with ``LocalDiskSize``, ``LocalDiskCount`` (and ``NVMeSupported``), optional columns | the offer's local disk, ``nvme:<size x count>`` (``ssd:`` without NVMe), as SkyPilot's ``get_local_disk_from_instance_type_impl`` reads it; another type, an empty cell or no such columns: not known (a GCP GPU offer: its host VM's) |
| a missing column, or a value that is not a number (``abc``, ``NaN``, a negative or absurd price) | :class:`CatalogError` naming the line and column |

Prices become micro-dollars through ``Decimal`` (never ``float``).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation

from pricing.money import MoneyError, Micros, to_micros
from pricing.offers import LocalDisk, Offer, Tier

ONPREM_CLOUD = "local"
PRICED_CLOUDS = ("aws", "gcp")
"""The clouds whose SkyPilot v8 ``vms.csv`` this module can read. Azure's has no ``AvailabilityZone``
column (its VMs are priced per region) and the other clouds' catalogs are laid out their own ways, so a
catalog of theirs would be refused, not priced."""
REQUIRED_COLUMNS = ("InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB", "Price", "SpotPrice",
                    "Region", "AvailabilityZone")
"""The schema v8 ``vms.csv`` columns the price table reads (in any order; others are ignored)."""
LOCAL_DISK_COLUMNS = ("LocalDiskType", "LocalDiskSize", "LocalDiskCount", "NVMeSupported")
"""Optional columns of a SkyPilot catalog that say an instance type's local disk (:func:`local_disk_of`); a catalog
without them (the shipped snapshot) loads as before, every offer's local disk not known."""
LOCAL_DISK_CLOUDS = frozenset({"aws"})
"""The priced clouds on which SkyPilot 0.14 selects an instance by its local disk (``CloudImplementationFeatures.
LOCAL_DISK``: AWS has it; ``sky/clouds/gcp.py`` and ``kubernetes.py`` mark it unsupported), so the only ones where
an offer can satisfy ``resources.local_disk`` (:func:`pricing.placement.matches`)."""


class CatalogError(ValueError):
    """A catalog file that is not a readable SkyPilot v8 ``vms.csv``; the message names the line and column."""


def onprem_offer(pool_name: str, gpus: int, accelerator: str | None, price_per_gpu_hour: str | Decimal | int) -> Offer:
    """One on-prem pool as an offer: the GPUs' internal price, never $0.

    ``gpus`` is the pool's node shape (GPUs per node); its free capacity is
    passed to :func:`pricing.placement.place` as ``free_capacity[pool_name]``.
    Region and zone are the pool name, so blocking and capacity key on it.
    """
    hourly = to_micros(price_per_gpu_hour) * max(gpus, 1)
    return Offer(
        tier=Tier.ONPREM,
        cloud=ONPREM_CLOUD,
        region=pool_name,
        zone=pool_name,
        instance_type=f"{pool_name}-{gpus}gpu" if accelerator else pool_name,
        accelerator=accelerator,
        accelerator_count=gpus,
        price_per_hour=hourly,
    )


def parse_az_mappings(text: str) -> dict[str, str]:
    """``AvailabilityZoneName,AvailabilityZone`` rows as ``{zone id: zone name}``."""
    return {
        row["AvailabilityZone"].strip(): row["AvailabilityZoneName"].strip()
        for row in csv.DictReader(io.StringIO(text))
        if row.get("AvailabilityZone") and row.get("AvailabilityZoneName")
    }


def parse_vms_csv(text: str, cloud: str, zone_names: Mapping[str, str] | None = None) -> list[Offer]:
    """Offers from one cloud's ``vms.csv`` text (spot and on-demand rows).

    Args:
        text: the CSV text, header included.
        cloud: ``"aws"``, ``"gcp"``, ...; recorded on each offer.
        zone_names: zone id → zone name (AWS ``az_mappings``); ids pass through when absent.
    """
    zone_names = zone_names or {}
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or ())]
    if missing:
        raise CatalogError(f"not a SkyPilot v8 vms.csv: no column {', '.join(missing)} in its header line")
    rows = []
    for row in reader:
        if None in row or None in row.values():  # more cells than the header (kept under None), or fewer
            cells = sum(v is not None for k, v in row.items() if k is not None) + len(row.get(None) or ())
            raise CatalogError(f"line {reader.line_num}: {cells} cells where the header has "
                               f"{len(reader.fieldnames or ())} (a line cut off or broken)")
        for column in ("AcceleratorCount", "vCPUs", "MemoryGiB", "Price", "SpotPrice", "LocalDiskSize",
                       "LocalDiskCount"):
            _checked(row.get(column), column, reader.line_num)
        if _flag(row.get("NVMeSupported")) is None:
            raise CatalogError(f"line {reader.line_num}: NVMeSupported {row['NVMeSupported'].strip()!r} is not "
                               "True or False")
        rows.append(row)
    hosts = _gcp_host_vms(rows) if cloud == "gcp" else {}
    offers: list[Offer] = []
    for row in rows:
        offers.extend(_row_offers(row, cloud, zone_names, hosts))
    return offers


def local_disk_of(row: Mapping[str, str]) -> LocalDisk | None:
    """A ``vms.csv`` row's local disk, as SkyPilot reads it when it checks a pinned instance type against a task's
    ``local_disk`` (``sky/catalog/common.py``, ``get_local_disk_from_instance_type_impl``): only a
    ``LocalDiskType`` of ``ssd`` with both ``LocalDiskSize`` and ``LocalDiskCount`` is one (SkyPilot takes no HDD),
    its size their product in whole GB, ``nvme`` where ``NVMeSupported``; anything else is not known."""
    if (row.get("LocalDiskType") or "").strip() != "ssd":
        return None
    size, count = _decimal(row.get("LocalDiskSize")), _decimal(row.get("LocalDiskCount"))
    if size is None or count is None:
        return None
    return LocalDisk("nvme" if _flag(row.get("NVMeSupported")) else "ssd", Decimal(int(size * count)))


def _flag(text: str | None) -> bool | None:
    """``NVMeSupported``: ``True`` / ``False`` as pandas reads them (any case, or 1 / 0), empty as ``False``;
    ``None`` for anything else, which :func:`parse_vms_csv` refuses naming the line."""
    value = (text or "").strip().lower()
    if value in ("", "false", "0", "0.0"):
        return False
    if value in ("true", "1", "1.0"):
        return True
    return None


def _checked(text: str | None, column: str, line: int) -> None:
    """An empty cell is allowed; anything else must be a finite, non-negative number, a price one
    that :func:`pricing.money.to_micros` can hold."""
    value = (text or "").strip()
    if not value:
        return
    try:
        number = Decimal(value)
        ok = number.is_finite() and number >= 0
        if ok and column in ("Price", "SpotPrice"):
            to_micros(number)
    except (InvalidOperation, MoneyError):
        ok = False
    if not ok:
        what = "a price in dollars per hour" if column in ("Price", "SpotPrice") else "a number"
        raise CatalogError(f"line {line}: {column} {value!r} is not {what}")


def _row_offers(row: Mapping[str, str], cloud: str, zone_names: Mapping[str, str], hosts: Mapping[str, list[dict[str, str]]]) -> Iterable[Offer]:
    price = _dollars(row.get("Price"))
    if price is None:
        return []
    spot = _dollars(row.get("SpotPrice"))
    zone_id = (row.get("AvailabilityZone") or "").strip()
    if cloud == "aws" and zone_names and zone_id and zone_id not in zone_names:
        return []  # an AWS Local Zone (usw2-lax1-az1): SkyPilot cannot launch there, so it is no offer
    zone = zone_names.get(zone_id, zone_id) or None
    accelerator = (row.get("AcceleratorName") or "").strip() or None
    count = int(_decimal(row.get("AcceleratorCount")) or 0)
    instance_type = (row.get("InstanceType") or "").strip()
    vcpus, memory = _decimal(row.get("vCPUs")), _decimal(row.get("MemoryGiB"))
    default_cpus: int | None = None  # set for a GPU on an n1 host: SkyPilot's host size when a task asks none
    if cloud == "gcp" and instance_type in _GCP_GPU_ONLY_VMS:
        return []  # an a2/a3/g2 VM is never launched without its GPUs: offered only with them (below), at both prices
    if not instance_type:  # GCP accelerator row: priced separately from its host VM
        if accelerator is None:
            return []
        if accelerator.lower().startswith("tpu"):
            rows = [(accelerator, price, spot, vcpus, memory, local_disk_of(row))]
        else:  # one offer per VM of the zone that can carry it (none: SkyPilot could not launch it)
            carriers, default_cpus = _gcp_gpu_hosts(hosts.get(zone or "", []), accelerator, count, zone or "")
            rows = [(f"{host['InstanceType'].strip()}+{accelerator}:{count}", price + (_dollars(host["Price"]) or 0),
                     None if spot is None or _dollars(host.get("SpotPrice")) is None
                     else spot + _dollars(host["SpotPrice"]),
                     _decimal(host.get("vCPUs")), _decimal(host.get("MemoryGiB")), local_disk_of(host))
                    for host in carriers]
    else:
        rows = [(instance_type, price, spot, vcpus, memory, local_disk_of(row))]
    out = []
    for name, on_demand, spot_price, cpus, mem, disk in rows:
        base = dict(
            cloud=cloud,
            region=row.get("Region", "").strip(),
            zone=zone,
            instance_type=name,
            accelerator=accelerator,
            accelerator_count=count if accelerator else 0,
            vcpus=cpus,
            memory_gib=mem,
            default_host_cpus=default_cpus,
            local_disk=disk,
        )
        out.append(Offer(tier=Tier.ONDEMAND, price_per_hour=_micros(on_demand), **base))
        if spot_price is not None:
            out.append(Offer(tier=Tier.SPOT, price_per_hour=_micros(spot_price), **base))
    return out


GCP_GPU_VMS: dict[str, dict[int, tuple[str, ...]]] = {
    "A100": {1: ("a2-highgpu-1g",), 2: ("a2-highgpu-2g",), 4: ("a2-highgpu-4g",), 8: ("a2-highgpu-8g",), 16: ("a2-megagpu-16g",)},
    "A100-80GB": {1: ("a2-ultragpu-1g",), 2: ("a2-ultragpu-2g",), 4: ("a2-ultragpu-4g",), 8: ("a2-ultragpu-8g",)},
    "L4": {1: ("g2-standard-4", "g2-standard-8", "g2-standard-12", "g2-standard-16", "g2-standard-32"),
           2: ("g2-standard-24",), 4: ("g2-standard-48",), 8: ("g2-standard-96",)},
    "H100": {1: ("a3-highgpu-1g",), 2: ("a3-highgpu-2g",), 4: ("a3-highgpu-4g",), 8: ("a3-highgpu-8g",)},
    "H100-MEGA": {8: ("a3-megagpu-8g",)},
    "H200": {8: ("a3-ultragpu-8g",)},
    "B200": {8: ("a4-highgpu-8g",)},
    "RTXPRO6000": {1: ("g4-standard-48",), 2: ("g4-standard-96",), 4: ("g4-standard-192",), 8: ("g4-standard-384",)},
}
"""GPUs GCP attaches only to VM types of their own, by count (SkyPilot 0.14's
``gcp_catalog._ACC_INSTANCE_TYPE_DICTS``)."""
_GCP_GPU_ONLY_VMS = frozenset(vm for counts in GCP_GPU_VMS.values() for vms in counts.values() for vm in vms)
_GCP_GPU_VMS_BY_NAME = {k.lower(): v for k, v in GCP_GPU_VMS.items()}

GCP_N1_FAMILIES = ("n1-standard", "n1-highmem", "n1-highcpu")
"""The VM families SkyPilot picks a host from for the other GPUs (``gcp_catalog._DEFAULT_HOST_VM_FAMILY``)."""

GCP_N1_CPUS: dict[str, dict[int, int]] = {
    "K80": {1: 4, 2: 8, 4: 16, 8: 32, 16: 64},
    "V100": {1: 8, 2: 16, 4: 32, 8: 64},
    "T4": {1: 4, 2: 8, 4: 48},
    "P100": {1: 8, 2: 16, 4: 32, 8: 64},
    "DEFAULT": {1: 8, 2: 16, 4: 32, 8: 64, 16: 128},
}
"""The host size SkyPilot gives a GPU on an ``n1-`` VM when the task asks neither ``cpus`` nor ``memory``: at least
this many vCPUs for the count, and 4 GiB of memory per vCPU (``gcp_catalog._NUM_ACC_TO_NUM_CPU``). Each such offer
carries it (:attr:`pricing.offers.Offer.default_host_cpus`) for :func:`pricing.placement.matches` to apply."""

GCP_N1_MEMORY_PER_CPU = 4
"""GiB of memory per vCPU asked that SkyPilot gives an ``n1-`` host when the task asks ``cpus`` and no ``memory``
(``gcp_catalog._DEFAULT_GPU_MEMORY_CPU_RATIO``), as for the default size."""


def _gcp_host_vms(rows: list[dict[str, str]]) -> dict[str, list[dict[str, str]]]:
    """The priced VM rows per zone: the hosts GCP attaches GPUs to."""
    vms: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        if (row.get("InstanceType") or "").strip() and _dollars(row.get("Price")) is not None:
            vms.setdefault((row.get("AvailabilityZone") or "").strip(), []).append(row)
    return vms


GCP_N1_MAX: dict[str, dict[int, tuple[int, int]]] = {
    "K80": {1: (8, 52), 2: (16, 104), 4: (32, 208), 8: (64, 208)},
    "V100": {1: (12, 78), 2: (24, 156), 4: (48, 312), 8: (96, 624)},
    "T4": {1: (48, 312), 2: (48, 312), 4: (96, 624)},
    "P4": {1: (24, 156), 2: (48, 312), 4: (96, 624)},
    "P100": {1: (16, 104), 2: (32, 208), 4: (96, 624)},
}
"""The most vCPUs and GiB of memory an ``n1-`` VM carrying that many of these GPUs may have (GCP's GPU
documentation, as SkyPilot 0.14's ``gcp_catalog.check_accelerator_attachable_to_host`` checks it before every
launch of a pinned instance type). A GPU or a count not here SkyPilot refuses to attach to an ``n1-`` VM at all
(K80:16, P100:8; a GPU it does not know: an assertion), so it is no offer."""
GCP_N1_MAX_IN_ZONE: dict[tuple[str, int], dict[str, tuple[int, int]]] = {
    ("K80", 8): {"asia-east1-a": (64, 416), "us-east1-d": (64, 416)},
    ("P100", 4): {"us-east1-c": (64, 208), "europe-west1-d": (64, 208), "europe-west1-b": (64, 208)},
}
"""The zones where :data:`GCP_N1_MAX` differs, as SkyPilot checks them (the launcher pins the zone)."""


def _gcp_gpu_hosts(vms: list[dict[str, str]], accelerator: str, count: int,
                   zone: str) -> tuple[list[dict[str, str]], int | None]:
    """The VMs of ``zone`` that can carry ``count`` x ``accelerator``, cheapest first, and for a GPU on an ``n1-``
    host the size SkyPilot gives that host when a task asks none (else ``None``).

    A GPU with VM types of its own rides those. Another rides every ``n1-standard``/``-highmem``/``-highcpu`` VM
    up to GCP's limit for the count, not only those of SkyPilot's default size or larger: SkyPilot picks the
    host by the task's ``cpus`` and ``memory`` (``cpus: 2`` with T4:1 is ``n1-highmem-2``), and placement applies
    its rule to these offers (:func:`pricing.placement.matches`), so a task asking nothing more still gets the
    cheapest host of the default size, as SkyPilot launches it."""
    own = _GCP_GPU_VMS_BY_NAME.get(accelerator.lower())
    if own is not None:
        fits = [r for r in vms if r["InstanceType"].strip() in own.get(count, ())]
        default = None
    else:
        name = accelerator.upper()
        most = GCP_N1_MAX.get(name, {}).get(count)
        default = GCP_N1_CPUS.get(name, GCP_N1_CPUS["DEFAULT"]).get(count)
        if most is None or default is None:
            return [], None
        most = GCP_N1_MAX_IN_ZONE.get((name, count), {}).get(zone, most)
        fits = [r for r in vms if r["InstanceType"].strip().startswith(GCP_N1_FAMILIES)
                and (_decimal(r.get("vCPUs")) or 0) <= most[0] and (_decimal(r.get("MemoryGiB")) or 0) <= most[1]]
    return sorted(fits, key=lambda r: (_dollars(r["Price"]), r["InstanceType"].strip())), default


def _decimal(text: str | None) -> Decimal | None:
    text = (text or "").strip()
    if not text:
        return None
    try:
        return Decimal(text)
    except InvalidOperation:
        return None


def _dollars(text: str | None) -> Decimal | None:
    value = _decimal(text)
    return value if value is not None and value >= 0 else None


def _micros(value: Decimal) -> Micros:
    return to_micros(value)
