"""Reading checkpoints back: verify each file against its manifest, newest first.

``load_verified`` is all-or-nothing for one checkpoint: it returns its files only when the
commit marker, manifest, sizes and sha256 all agree, and otherwise raises
:class:`CorruptCheckpoint` saying why. ``first_verified`` walks candidates newest first and
warns, naming each checkpoint it skips.

The files are not held in memory (:mod:`checkpoint.blobs`): a local store's files are hashed and later
read in place; a remote store's are streamed to unnamed temporary files in ``spool_dir`` (``$TMPDIR`` by
default) as they are hashed. Where that disk has too little room, they are read into memory instead, with a
:class:`CheckpointWarning` saying so. Stores that offer neither (``memory://``, test fakes) are read whole.
"""

from __future__ import annotations

import errno
import logging
import shutil
import tempfile
import warnings
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from checkpoint import layout
from checkpoint.blobs import FileBlob, MemoryBlob, Spool
from checkpoint.errors import CheckpointWarning, CorruptCheckpoint
from checkpoint.layout import CheckpointId, Entry
from checkpoint.commit import listed_sizes
from checkpoint.manifest import FileEntry, Manifest, check_files, check_marker, check_sizes
from checkpoint.storage import Storage

log = logging.getLogger("checkpoint")

T = TypeVar("T")


@dataclass(frozen=True)
class Loaded:
    id: CheckpointId
    uri: str
    manifest: Manifest
    files: dict[str, Any]  # name → blob (checkpoint.blobs), every byte verified

    def close(self) -> None:
        for blob in self.files.values():
            blob.close()


def _read_or_none(storage: Storage, path: str) -> bytes | None:
    try:
        return storage.read(path)
    except FileNotFoundError:
        return None


def _fetch(storage: Storage, path: str, spool_dir: str | None) -> tuple[Any, FileEntry] | None:
    """One file as a blob and what it holds (size, sha256), or None if it is missing. ``spool_dir`` None: read it
    into memory (a store with no local path is then read whole)."""
    local = getattr(storage, "local_path", None)
    where = local(path) if local is not None else None
    if where is not None:
        try:
            blob: Any = FileBlob.open(where)
        except (FileNotFoundError, IsADirectoryError):
            return None
        return blob, blob.describe()
    if getattr(storage, "streams", False) and spool_dir is not None:
        spool = Spool(spool_dir)
        try:
            storage.download(path, spool)  # type: ignore[attr-defined]
            return spool.finish()
        except FileNotFoundError:
            return None
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise
            _say(f"{storage.uri(path)} did not fit in {spool_dir} ({e.strerror}): read into memory instead, "
                 f"which needs its size in free memory; pass spool_dir (or set TMPDIR) to a larger disk")
        finally:
            spool.close()
    data = _read_or_none(storage, path)
    if data is None:
        return None
    blob = MemoryBlob(data)
    return blob, blob.describe()


def _spool_dir(storage: Storage, manifest: Manifest, spool_dir: str | None) -> str | None:
    """Where this checkpoint's downloads go: ``spool_dir`` (``$TMPDIR`` by default), or None — into memory, with a
    warning — when that disk has less room than the checkpoint."""
    if not getattr(storage, "streams", False):
        return spool_dir
    directory = spool_dir or tempfile.gettempdir()
    free = shutil.disk_usage(directory).free
    if free < manifest.total_bytes:
        _say(f"restoring {storage.uri()} needs {_mib(manifest.total_bytes)} of local disk for its download and "
             f"{directory} has {_mib(free)} free: reading it into memory instead, which needs its size in free memory "
             f"besides the model; pass spool_dir (or set TMPDIR) to a larger disk")
        return None
    return directory


def _mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB"


def _say(message: str) -> None:
    log.warning(message)
    warnings.warn(message, CheckpointWarning, stacklevel=4)


#: Why a checkpoint directory without its commit marker is not restored: a save not finished (or still in flight)
NOT_COMMITTED = "not committed (no commit marker)"


def read_commit(storage: Storage, cid: CheckpointId) -> Manifest:
    """The manifest of one checkpoint, once its commit marker and manifest agree: the rule that decides, before any
    file is hashed, whether ``restore`` may take it — and what ``checkpoint ls`` shows, so that ls never calls
    committed one that restore skips (an empty commit marker). Raises CorruptCheckpoint saying why; other OSErrors
    propagate."""
    marker = _read_or_none(storage, layout.path(cid, layout.COMMIT))
    if marker is None:
        raise CorruptCheckpoint(NOT_COMMITTED)
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
    return manifest


def read_listed(storage: Storage, cid: CheckpointId) -> Manifest:
    """:func:`read_commit`, then one listing of the checkpoint's directory against its manifest, with no file read
    nor hashed: every file there, at its size (what ``checkpoint ls`` shows). A file deleted, or of another size, is
    what :func:`load_verified` would find too, and restore skip: raises CorruptCheckpoint (damaged) saying it as
    ``verify`` does. Other OSErrors propagate."""
    manifest = read_commit(storage, cid)
    prefix = cid.name + "/"
    listed = {p[len(prefix):]: size for p, size in listed_sizes(storage, cid).items() if p.startswith(prefix)}
    problems = check_sizes(manifest, listed)
    if problems:
        raise CorruptCheckpoint("; ".join(problems), damaged=True)
    return manifest


def load_verified(storage: Storage, cid: CheckpointId, concurrency: int = 4,
                  spool_dir: str | None = None) -> Loaded:
    """Read and verify one checkpoint (:func:`read_commit`, then every file's size and sha256). Raises
    CorruptCheckpoint; other OSErrors propagate."""
    manifest = read_commit(storage, cid)
    names = sorted(manifest.files)
    directory = _spool_dir(storage, manifest, spool_dir)
    with ThreadPoolExecutor(max(1, min(concurrency, len(names)))) as pool:
        futures = {n: pool.submit(_fetch, storage, layout.path(cid, n), directory) for n in names}
        contents = {}
        try:
            for n, f in futures.items():
                contents[n] = f.result()
        except BaseException:
            for f in futures.values():
                if not f.cancel() and f.exception() is None and f.result() is not None:
                    f.result()[0].close()
            raise
    blobs = {n: c[0] for n, c in contents.items() if c is not None}
    problems = check_files(manifest, {n: (c[1] if c is not None else None) for n, c in contents.items()})
    if problems:
        for blob in blobs.values():
            blob.close()
        raise CorruptCheckpoint("; ".join(problems), damaged=True)
    return Loaded(cid, storage.uri(cid.name), manifest, blobs)


def first_verified(
    storage: Storage,
    candidates: Iterable[Entry],
    decode: Callable[[Loaded], T],
    damaged: set[CheckpointId] | None = None,
    spool_dir: str | None = None,
    skipped: list[tuple[Entry, str]] | None = None,
) -> tuple[Loaded, T] | None:
    """The newest candidate that verifies and decodes; skipped ones are warned about (one
    :class:`CheckpointWarning` each) and added to ``skipped`` with why, and those whose bytes are damaged
    (:class:`CorruptCheckpoint`'s ``damaged``) are added to ``damaged``. The caller closes the :class:`Loaded`
    returned (its files stay open for ``decode``'s pending tensors)."""
    for entry in candidates:
        uri = storage.uri(entry.name)
        loaded = None
        try:
            loaded = load_verified(storage, entry.id, spool_dir=spool_dir)
            return loaded, decode(loaded)
        except CorruptCheckpoint as e:
            reason = str(e)
            if e.damaged and damaged is not None:
                damaged.add(entry.id)
        except (ValueError, KeyError) as e:  # verified bytes that still do not decode
            reason = f"does not decode: {e}"
        except BaseException:
            if loaded is not None:
                loaded.close()
            raise
        if loaded is not None:
            loaded.close()
        if skipped is not None:
            skipped.append((entry, reason))
        # said once: the warning (on stderr without a logging set-up, as the log's warning was too: each skip was
        # printed twice, and with logging at INFO too); the log keeps it at DEBUG
        log.debug("skipping checkpoint %s: %s", uri, reason)
        warnings.warn(f"skipping checkpoint {uri}: {reason}", CheckpointWarning, stacklevel=3)
    return None


def candidates(storage: Storage, at_or_before: CheckpointId | None = None) -> list[Entry]:
    """Committed checkpoints under the base, newest first."""
    return layout.committed_newest_first(layout.scan(storage.list()), at_or_before)


def passthrough(loaded: Loaded) -> Any:
    return loaded
