"""The only I/O in ``pricing``: read a price catalog and spot traces from disk.

Everything that decides (placement, quotes, the spot policy, the simulator)
takes what these functions return and never touches files itself.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path

from pricing.catalog import parse_az_mappings, parse_vms_csv
from pricing.offers import Offer

SCHEMA = "v8"
SNAPSHOT_DIR = Path(__file__).resolve().parent / "data" / "catalog" / SCHEMA


def skypilot_catalog_dir(home: Path | None = None) -> Path:
    """Where SkyPilot keeps its downloaded catalog: ``~/.sky/catalogs/v8``."""
    return (home or Path.home()) / ".sky" / "catalogs" / SCHEMA


def load_price_table(
    catalog_dir: Path | None = None,
    *,
    clouds: Sequence[str] = ("aws",),
    home: Path | None = None,
) -> tuple[Offer, ...]:
    """Every spot and on-demand offer of ``clouds``, from the freshest catalog at hand.

    Per cloud, the first directory holding ``<cloud>/vms.csv`` wins: ``catalog_dir``
    when given, then SkyPilot's own catalog (``~/.sky/catalogs/v8``, refreshed by
    SkyPilot), then the snapshot shipped in ``pricing/data/catalog/v8`` (see its
    ``SOURCE.md``). A cloud found nowhere contributes no offers.
    """
    search = [d for d in (catalog_dir, skypilot_catalog_dir(home), SNAPSHOT_DIR) if d is not None]
    offers: list[Offer] = []
    for cloud in clouds:
        for root in search:
            vms = root / cloud / "vms.csv"
            if not vms.is_file():
                continue
            zone_names: dict[str, str] = {}
            for mapping in (SNAPSHOT_DIR / cloud / "az_mappings-default.csv", *sorted((root / cloud).glob("az_mappings*.csv"),
                                                                                 key=lambda p: (p.name != "az_mappings-default.csv", p.name))):
                if mapping.is_file():
                    zone_names.update(parse_az_mappings(mapping.read_text()))
            offers.extend(parse_vms_csv(vms.read_text(), cloud, zone_names))
            break
    return tuple(offers)


def read_trace(path: Path) -> tuple[int, list[int]]:
    """A spot-traces file as ``(gap_seconds, availability per tick)``; >0 means spot is up."""
    doc = json.loads(Path(path).read_text())
    return int(doc["metadata"]["gap_seconds"]), [int(x) for x in doc["data"]]


def read_windows(path: Path) -> Iterator[dict]:
    """The windows JSONL, one dict per window (``available``: list, or list of lists per zone)."""
    with Path(path).open() as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)
