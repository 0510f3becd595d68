"""The only I/O in ``pricing``: read a price catalog and spot traces from disk.

Everything that decides (placement, quotes, the spot policy, the simulator)
takes what these functions return and never touches files itself.
"""

from __future__ import annotations

import csv
import json
import logging
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from pricing.catalog import PRICED_CLOUDS, REQUIRED_COLUMNS, CatalogError, parse_az_mappings, parse_vms_csv
from pricing.offers import Offer

SCHEMA = "v8"
SNAPSHOT_DIR = Path(__file__).resolve().parent / "data" / "catalog" / SCHEMA
log = logging.getLogger("pricing.loading")


def skypilot_catalog_dir(home: Path | None = None) -> Path:
    """Where SkyPilot keeps its downloaded catalog: ``~/.sky/catalogs/v8``, under ``$SKY_RUNTIME_DIR`` instead of the
    home folder when that is set, as SkyPilot itself reads it (``sky.skylet.runtime_utils.get_runtime_dir_path``).
    Read from the home folder alone, a broker run with ``SKY_RUNTIME_DIR`` quoted prices SkyPilot's optimizer did not
    see, and never saw the GCP catalog ``sky show-gpus --cloud gcp`` fetched. ``home``: that folder, given (tests)."""
    if home is None:
        runtime = os.environ.get("SKY_RUNTIME_DIR")
        home = Path(runtime).expanduser() if runtime else Path.home()
    return home / ".sky" / "catalogs" / SCHEMA


def has_no_rows(path: Path) -> bool:
    """Whether the catalog file ``path`` holds no row: empty, or a v8 header line alone — what a SkyPilot download
    cut short or refused leaves. Only its first lines are read. A file whose first line is not a v8 header is
    not empty but no catalog, which reading it says (a :class:`CatalogError` naming it), as is one not readable."""
    try:
        with path.open("rb") as fh:
            lines = (line for line in fh if line.strip())
            header = next(lines, None)
            if header is None:
                return True
            columns = next(csv.reader([header.decode()]), [])
            if not set(REQUIRED_COLUMNS) <= set(columns):  # as parse_vms_csv reads the header
                return False
            return next(lines, None) is None  # stops at the first row
    except (OSError, UnicodeDecodeError, csv.Error):
        return False


_warned: set[tuple[str, int, int]] = set()
"""The empty catalog files already warned of (path, time, size): said once, not at every look."""


def _passed_over(path: Path, cloud: str) -> None:
    """Warn, once per version of the file, that ``path`` is passed over."""
    try:
        st = path.stat()
        key = (str(path), st.st_mtime_ns, st.st_size)
    except OSError:
        return
    if key not in _warned:
        _warned.add(key)
        log.warning("price catalog %s has no rows after its header: passed over as if absent (%s is priced from "
                    "the next catalog found, if any)", path, cloud)


def _found(catalog_dir: Path | None, clouds: Sequence[str], home: Path | None) -> list[tuple[str, Path]]:
    """Per cloud, the first ``<root>/<cloud>/vms.csv`` that is a file with rows, in the search order: the one
    list both :func:`catalog_files` and :func:`load_price_table` follow. A file with no rows (:func:`has_no_rows`)
    is passed over as if absent, with a warning naming it: a header-only ``~/.sky/catalogs/v8/aws/vms.csv`` hid the
    shipped snapshot, and the broker had no AWS offer at all."""
    search = [d for d in (catalog_dir, skypilot_catalog_dir(home), SNAPSHOT_DIR) if d is not None]
    out = []
    for cloud in dict.fromkeys(clouds):
        for root in search:
            vms = root / cloud / "vms.csv"
            if vms.is_file():
                if has_no_rows(vms):
                    _passed_over(vms, cloud)
                    continue
                out.append((cloud, root))
                break
    return out


def catalog_files(catalog_dir: Path | None = None, *, clouds: Sequence[str] = PRICED_CLOUDS,
                  home: Path | None = None) -> tuple[tuple[str, int, int], ...]:
    """Which ``vms.csv`` files :func:`load_price_table` would read, and the zone mappings SkyPilot fetched
    for the cloud account beside them, with their modification time and size: when this changes
    (SkyPilot refreshed its catalog, downloaded one for a cloud it had none of, or fetched the account's
    zone names at its first launch), the price table is stale."""
    out = []
    for cloud, root in _found(catalog_dir, clouds, home):
        for path in (root / cloud / "vms.csv", *_account_mappings(root / cloud)):
            try:
                st = path.stat()
            except OSError:  # gone since: the next look sees it
                continue
            out.append((str(path), st.st_mtime_ns, st.st_size))
    return tuple(out)


def _account_mappings(folder: Path) -> list[Path]:
    """The zone-name mappings SkyPilot fetched per cloud account (``az_mappings-<account hash>.csv``), the
    newest last. AWS names zones per account (one account's ``us-east-1d`` is another's ``us-east-1b``);
    SkyPilot pins a launch by the name in the active account's mapping, and with no way to ask which
    account is active it takes the newest file, as this does."""
    def mtime(path: Path) -> int:
        try:
            return path.stat().st_mtime_ns
        except OSError:
            return 0
    found = [p for p in folder.glob("az_mappings-*.csv") if p.name != "az_mappings-default.csv"]
    return sorted(found, key=lambda p: (mtime(p), p.name))


def load_price_table(
    catalog_dir: Path | None = None,
    *,
    clouds: Sequence[str] = PRICED_CLOUDS,
    home: Path | None = None,
) -> tuple[Offer, ...]:
    """Every spot and on-demand offer of ``clouds``, from the freshest catalog at hand.

    Per cloud, the first directory holding ``<cloud>/vms.csv`` wins: ``catalog_dir``
    when given, then SkyPilot's own catalog (``~/.sky/catalogs/v8``, refreshed by
    SkyPilot), then the snapshot shipped in ``pricing/data/catalog/v8`` (see its
    ``SOURCE.md``; AWS only: GCP's prices come from SkyPilot's catalog on this host, or
    ``catalog_dir``). A file with no rows after its header is passed over as if absent, with a
    warning naming it. A cloud found nowhere contributes no offers. A file that is not a
    readable v8 ``vms.csv`` is a :class:`~pricing.catalog.CatalogError` naming it, the line
    and the column (never a silently empty or half-read price table). A catalog with SkyPilot's optional
    local-disk columns gives each offer its local disk (:func:`~pricing.catalog.local_disk_of`), which
    ``resources.local_disk`` is placed by; one without them (the snapshot) loads as before, no disk known.
    """
    offers: list[Offer] = []
    for cloud, root in _found(catalog_dir, clouds, home):
        vms = root / cloud / "vms.csv"
        zone_names: dict[str, str] = {}
        for mapping in (SNAPSHOT_DIR / cloud / "az_mappings-default.csv", root / cloud / "az_mappings-default.csv",
                        *_account_mappings(root / cloud)):
            if mapping.is_file():
                zone_names.update(parse_az_mappings(mapping.read_text()))
        try:
            offers.extend(parse_vms_csv(vms.read_text(), cloud, zone_names))
        except (CatalogError, UnicodeDecodeError, OSError) as exc:
            raise CatalogError(f"price catalog {vms}: {exc}") from None
    return tuple(offers)


def read_trace(path: Path) -> tuple[int, list[int]]:
    """A spot-traces file as ``(gap_seconds, availability per tick)``; >0 means spot is up.
    ``ValueError`` naming the file and what is wrong with it for anything else."""
    text = Path(path).read_text()
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        if _a_window(text):  # the natural mistake, the reverse of :func:`window`'s: windows where a trace goes
            raise ValueError(f"{path}: this looks like a windows JSONL file (one window a line), not a spot-traces "
                             "file: give it to --windows, without --zones") from None
        raise ValueError(f"{path}: not a spot-traces JSON file ({exc})") from None
    if isinstance(doc, dict) and "available" in doc and "metadata" not in doc:  # a windows file of one line
        raise ValueError(f"{path}: this looks like a windows JSONL file (one window a line), not a spot-traces "
                         "file: give it to --windows, without --zones")
    try:
        gap, data = doc["metadata"]["gap_seconds"], doc["data"]
    except (KeyError, TypeError):
        raise ValueError(f"{path}: a spot-traces file needs metadata.gap_seconds and a data list of integers") from None
    # whole JSON numbers only, as a windows file's are (:func:`window`): ``int()`` read 1.5 as 1, true as 1 and "3"
    # as 3, so a trace written wrong was simulated as some other trace without a word
    if not _whole(gap):
        raise ValueError(f"{path}: metadata.gap_seconds must be a whole number of seconds > 0, got {gap!r}")
    if not isinstance(data, list):
        raise ValueError(f"{path}: a spot-traces file needs metadata.gap_seconds and a data list of integers")
    for i, x in enumerate(data):
        if not _whole(x):
            raise ValueError(f"{path}: data[{i}] must be a whole number (>0: spot is up), got {x!r}")
    if gap <= 0 or not data:
        raise ValueError(f"{path}: gap_seconds must be > 0 and data must not be empty")
    return gap, data


def _a_window(text: str) -> bool:
    """Whether the first line of ``text`` is a JSON object with ``available``, as a windows JSONL line is."""
    first = next((line for line in text.splitlines() if line.strip()), "")
    try:
        return isinstance(w := json.loads(first), dict) and "available" in w
    except (json.JSONDecodeError, RecursionError):
        return False


def read_windows(path: Path) -> Iterator[dict]:
    """The windows JSONL, one dict per window (``available``: list, or list of lists per zone;
    optional ``zones``: one distinct name per list).
    ``ValueError`` naming the file, the line and what is wrong with it for a malformed window."""
    with Path(path).open() as fh:
        for n, line in enumerate(fh, 1):
            if line.strip():
                yield window(line, f"{path} line {n}")


def _whole(x: object) -> bool:
    """Whether ``x`` as JSON read it is a whole number: an ``int``, not a ``bool`` (``true`` is an ``int`` to Python)."""
    return isinstance(x, int) and not isinstance(x, bool)


def window(line: str, where: str) -> dict:
    """One line of a windows JSONL, read and checked; ``where`` (file and line) begins each ``ValueError``."""
    try:
        w = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}: not JSON ({exc})") from None
    if not isinstance(w, dict):
        raise ValueError(f"{where}: a window is a JSON object")
    if "metadata" in w and "data" in w and "available" not in w:  # the natural mistake: a trace where windows go
        raise ValueError(f"{where}: this is a spot-traces file, not a windows file: give it (one file per zone, "
                         "comma-separated) to --zones, with --windows the number of windows to sample")
    gap, avail = w.get("gap_seconds"), w.get("available")
    if not isinstance(gap, int) or isinstance(gap, bool) or gap <= 0:
        raise ValueError(f"{where}: gap_seconds must be a whole number of seconds > 0, got {gap!r}")
    rows = avail if isinstance(avail, list) and avail and all(isinstance(r, list) for r in avail) else [avail]
    if not all(isinstance(r, list) and r for r in rows):
        raise ValueError(f"{where}: available must be a non-empty list of whole numbers per tick (the spot instances "
                         "available then, ≥ 0: >0 = spot is up), or one such list per zone")
    for zone, r in enumerate(rows):  # whole JSON numbers only: 0.5, true, null and "1" named where they are
        tick = next((t for t, x in enumerate(r) if not _whole(x)), None)
        if tick is not None:
            shown = json.dumps(r[tick])
            raise ValueError(f"{where}: available holds {shown if len(shown) <= 40 else shown[:37] + '...'} at tick {tick}"
                             f"{f' of zone {zone}' if len(rows) > 1 else ''}: each tick is a whole number of spot "
                             "instances available then, ≥ 0 (>0 = spot is up)")
    if len({len(r) for r in rows}) > 1:
        raise ValueError(f"{where}: the zones' available lists differ in length ({sorted({len(r) for r in rows})})")
    trace = w.get("trace")  # optional (a window of one's own): the row then names its file and line instead
    if trace is not None and not (isinstance(trace, str) and trace.strip()):
        shown = json.dumps(trace)
        raise ValueError(f"{where}: trace must be the name of the trace the window was cut from (text), got "
                         f"{shown if len(shown) <= 40 else shown[:37] + '...'}")
    names = w.get("zones")
    if names is not None and not (isinstance(names, list) and len(names) == len(rows) and len(set(names)) == len(names)
                                  and all(isinstance(z, str) and z for z in names)):
        raise ValueError(f"{where}: zones must name each of the {len(rows)} available lists once, got {names!r}")
    return w
