"""The price table: SkyPilot catalog rows (schema v8) and on-prem pools as :class:`Offer` s.

Pure: every function here takes text or values and returns offers. The one
function that reads files is :func:`pricing.loading.load_price_table`.

Rules of the catalog format (SkyPilot's ``catalogs/v8/<cloud>/vms.csv``):

| column / case | what it becomes |
|---|---|
| ``Price`` | an on-demand offer at that $/h |
| ``SpotPrice`` (non-empty) | a spot offer at that $/h, same shape and zone |
| ``AvailabilityZone`` = ``use1-az1`` (AWS zone id) | zone name via ``az_mappings`` (``us-east-1a``); the id itself when unmapped |
| GCP row with no ``InstanceType`` (a GPU/TPU row) | the accelerator priced alone; a GPU is paired with the cheapest ``n1-`` host VM in that zone, a TPU stands alone |
| row with no ``Price`` | skipped (not purchasable on-demand, no shape to price) |
| a missing column, or a value that is not a number (``abc``, ``NaN``, a negative or absurd price) | :class:`CatalogError` naming the line and column |

Prices become micro-dollars through ``Decimal`` (never ``float``).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation

from pricing.money import MoneyError, Micros, to_micros
from pricing.offers import Offer, Tier

ONPREM_CLOUD = "local"
REQUIRED_COLUMNS = ("InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB", "Price", "SpotPrice",
                    "Region", "AvailabilityZone")
"""The schema v8 ``vms.csv`` columns the price table reads (in any order; others are ignored)."""


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
        for column in ("AcceleratorCount", "vCPUs", "MemoryGiB", "Price", "SpotPrice"):
            _checked(row.get(column), column, reader.line_num)
        rows.append(row)
    hosts = _gcp_gpu_hosts(rows) if cloud == "gcp" else {}
    offers: list[Offer] = []
    for row in rows:
        offers.extend(_row_offers(row, cloud, zone_names, hosts))
    return offers


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


def _row_offers(row: Mapping[str, str], cloud: str, zone_names: Mapping[str, str], hosts: Mapping[str, Mapping[str, str]]) -> Iterable[Offer]:
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
    if not instance_type:  # GCP accelerator row: priced separately from its host VM
        if accelerator is None:
            return []
        host = hosts.get(zone or "") if not accelerator.lower().startswith("tpu") else None
        if host is not None:
            price += _dollars(host["Price"]) or 0
            spot = None if spot is None or _dollars(host.get("SpotPrice")) is None else spot + _dollars(host["SpotPrice"])
            instance_type = f"{host['InstanceType']}+{accelerator}:{count}"
            vcpus, memory = _decimal(host.get("vCPUs")), _decimal(host.get("MemoryGiB"))
        else:
            instance_type = accelerator
    base = dict(
        cloud=cloud,
        region=row.get("Region", "").strip(),
        zone=zone,
        instance_type=instance_type,
        accelerator=accelerator,
        accelerator_count=count if accelerator else 0,
        vcpus=vcpus,
        memory_gib=memory,
    )
    out = [Offer(tier=Tier.ONDEMAND, price_per_hour=_micros(price), **base)]
    if spot is not None:
        out.append(Offer(tier=Tier.SPOT, price_per_hour=_micros(spot), **base))
    return out


def _gcp_gpu_hosts(rows: list[dict[str, str]]) -> dict[str, dict[str, str]]:
    """Cheapest ``n1-`` VM per zone: the host GCP attaches GPUs to."""
    best: dict[str, dict[str, str]] = {}
    for row in rows:
        name = (row.get("InstanceType") or "").strip()
        price = _dollars(row.get("Price"))
        zone = (row.get("AvailabilityZone") or "").strip()
        if not name.startswith("n1-") or price is None:
            continue
        if zone not in best or price < (_dollars(best[zone]["Price"]) or price):
            best[zone] = row
    return best


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
