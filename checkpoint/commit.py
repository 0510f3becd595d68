"""The commit protocol: files, then manifest, then the commit marker — and retention.

Crash anywhere before the marker is written and the directory stays uncommitted, which
restore ignores and retention later removes. Deleting goes the other way round: the marker
first, so a half-deleted checkpoint is merely uncommitted, never committed-but-partial.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from checkpoint import layout, retention
from checkpoint.layout import CheckpointId, Entry
from checkpoint.manifest import Manifest, commit_marker, describe
from checkpoint.storage import Storage

#: Files uploaded at once (each large file is itself uploaded in parallel parts).
FILE_CONCURRENCY = 4


def write_checkpoint(
    storage: Storage,
    cid: CheckpointId,
    files: Mapping[str, bytes],
    versions: Mapping[str, str],
    job: Mapping[str, str],
    created_at: float | None = None,
) -> Manifest:
    """Upload ``files`` into the directory for ``cid`` and commit it. Blocks; raises OSError."""
    # Hash on one pool while uploading on another: hashlib and the network both release the GIL.
    with ThreadPoolExecutor(FILE_CONCURRENCY) as uploads, ThreadPoolExecutor(2) as hashing:
        hashes = {name: hashing.submit(describe, data) for name, data in files.items()}
        biggest_first = sorted(files, key=lambda n: -len(files[n]))
        list(uploads.map(lambda n: storage.write(layout.path(cid, n), files[n]), biggest_first))
        entries = {name: hashes[name].result() for name in sorted(files)}
    manifest = Manifest(
        step=cid.step,
        created_at=time.time() if created_at is None else created_at,
        files=entries,
        versions=dict(versions),
        job=dict(job),
    )
    manifest_bytes = manifest.to_json()
    storage.write(layout.path(cid, layout.MANIFEST), manifest_bytes)
    storage.write(layout.path(cid, layout.COMMIT), commit_marker(manifest_bytes))
    return manifest


def delete_entries(storage: Storage, entries: list[Entry]) -> None:
    """Delete checkpoint directories, each commit marker first."""
    for e in entries:
        if e.committed:
            storage.delete([layout.path(e.id, layout.COMMIT)])
        storage.delete([layout.path(e.id, f) for f in sorted(e.files - {layout.COMMIT})])


def apply_retention(storage: Storage, policy: retention.RetentionPolicy,
                    abandoned: frozenset[layout.CheckpointId] = frozenset()) -> list[Entry]:
    """List, decide (pure), delete. Returns what was deleted."""
    doomed = retention.to_delete(layout.scan(storage.list()), policy, abandoned)
    delete_entries(storage, doomed)
    return doomed
