"""Reading checkpoints back: verify each file against its manifest, newest first.

``load_verified`` is all-or-nothing for one checkpoint: it returns its files only when the
commit marker, manifest, sizes and sha256 all agree, and otherwise raises
:class:`CorruptCheckpoint` saying why. ``first_verified`` walks candidates newest first and
warns, naming each checkpoint it skips.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from checkpoint import layout
from checkpoint.errors import CheckpointWarning, CorruptCheckpoint
from checkpoint.layout import CheckpointId, Entry
from checkpoint.manifest import Manifest, check_files, check_marker, describe
from checkpoint.storage import Storage

log = logging.getLogger("checkpoint")

T = TypeVar("T")


@dataclass(frozen=True)
class Loaded:
    id: CheckpointId
    uri: str
    manifest: Manifest
    files: dict[str, bytes]


def _read_or_none(storage: Storage, path: str) -> bytes | None:
    try:
        return storage.read(path)
    except FileNotFoundError:
        return None


def load_verified(storage: Storage, cid: CheckpointId, concurrency: int = 4) -> Loaded:
    """Read and verify one checkpoint. Raises CorruptCheckpoint; other OSErrors propagate."""
    marker = _read_or_none(storage, layout.path(cid, layout.COMMIT))
    if marker is None:
        raise CorruptCheckpoint("not committed (no commit marker)")
    # from here on it was committed, and the commit marker is written after everything else: what is missing
    # or differs was lost or changed afterwards (damaged), never a save still in flight
    manifest_bytes = _read_or_none(storage, layout.path(cid, layout.MANIFEST))
    if manifest_bytes is None:
        raise CorruptCheckpoint("manifest.json is missing", damaged=True)
    problem = check_marker(marker, manifest_bytes)
    if problem:
        raise CorruptCheckpoint(problem, damaged=True)
    try:
        manifest = Manifest.from_json(manifest_bytes)
    except ValueError as e:
        raise CorruptCheckpoint(str(e)) from e
    if manifest.step != cid.step:
        raise CorruptCheckpoint(f"manifest says step {manifest.step}, directory says {cid.step}")
    names = sorted(manifest.files)
    with ThreadPoolExecutor(max(1, min(concurrency, len(names)))) as pool:
        contents = dict(zip(names, pool.map(lambda n: _read_or_none(storage, layout.path(cid, n)), names)))
    observed = {n: (describe(d) if d is not None else None) for n, d in contents.items()}
    problems = check_files(manifest, observed)
    if problems:
        raise CorruptCheckpoint("; ".join(problems), damaged=True)
    return Loaded(cid, storage.uri(cid.name), manifest, {n: d for n, d in contents.items() if d is not None})


def first_verified(
    storage: Storage,
    candidates: Iterable[Entry],
    decode: Callable[[Loaded], T],
    damaged: set[CheckpointId] | None = None,
) -> tuple[Loaded, T] | None:
    """The newest candidate that verifies and decodes; skipped ones are warned about, and those whose
    bytes are damaged (:class:`CorruptCheckpoint`'s ``damaged``) are added to ``damaged``."""
    for entry in candidates:
        uri = storage.uri(entry.name)
        try:
            loaded = load_verified(storage, entry.id)
            return loaded, decode(loaded)
        except CorruptCheckpoint as e:
            reason = str(e)
            if e.damaged and damaged is not None:
                damaged.add(entry.id)
        except (ValueError, KeyError) as e:  # verified bytes that still do not decode
            reason = f"does not decode: {e}"
        message = f"skipping checkpoint {uri}: {reason}"
        log.warning(message)
        warnings.warn(message, CheckpointWarning, stacklevel=3)
    return None


def candidates(storage: Storage, at_or_before: CheckpointId | None = None) -> list[Entry]:
    """Committed checkpoints under the base, newest first."""
    return layout.committed_newest_first(layout.scan(storage.list()), at_or_before)


def passthrough(loaded: Loaded) -> Any:
    return loaded
