"""The commit protocol: files, then manifest, then a listing that finds them all there, then the commit marker — and
retention.

Crash anywhere before the marker is written and the directory stays uncommitted, which
restore ignores and retention later removes. Deleting goes the other way round: the marker
first, so a half-deleted checkpoint is merely uncommitted, never committed-but-partial.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor

from checkpoint import layout, retention
from checkpoint.errors import SupersededError
from checkpoint.layout import CheckpointId, Entry
from checkpoint.manifest import Manifest, commit_marker, describe
from checkpoint.storage import Storage

log = logging.getLogger("checkpoint")

#: Files uploaded at once (each large file is itself uploaded in parallel parts).
FILE_CONCURRENCY = 4


def write_checkpoint(
    storage: Storage,
    cid: CheckpointId,
    files: Mapping[str, bytes],
    versions: Mapping[str, str],
    job: Mapping[str, str],
    created_at: float | None = None,
    before_commit: Callable[[], None] | None = None,
) -> Manifest:
    """Upload ``files`` into the directory for ``cid`` and commit it. Blocks; raises OSError.

    ``before_commit`` runs after the data and the manifest are written, right before the commit
    marker; if it raises, the directory stays uncommitted (a zombie's fence check, :func:`check_fence`).
    """
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
    if before_commit is not None:
        before_commit()
    expected = {layout.path(cid, name): entry.size for name, entry in entries.items()}
    expected[layout.path(cid, layout.MANIFEST)] = len(manifest_bytes)
    check_present(storage, cid, expected)
    storage.write(layout.path(cid, layout.COMMIT), commit_marker(manifest_bytes))
    return manifest


class IncompleteCheckpointError(OSError):
    """Files a checkpoint's manifest names are not in the store (or not whole) at its commit: no marker is written."""


def check_present(storage: Storage, cid: CheckpointId, expected: Mapping[str, int]) -> None:
    """Raise :class:`IncompleteCheckpointError` unless every path in ``expected`` is in the store with its size.

    One listing of the checkpoint's own directory, right before its marker. Each upload had succeeded, yet files
    went missing before the commit: a store that lost them (an S3-compatible server restarted without its data
    while the upload retried), or another process writing under the same base whose retention deleted this save's
    files in flight as debris. Committed anyway, restore took that torn checkpoint over the previous whole one."""
    listed = listed_sizes(storage, cid)
    missing = sorted(p for p in expected if p not in listed)
    wrong = sorted(p for p in expected if listed.get(p, expected[p]) not in (expected[p], None))
    if not missing and not wrong:
        return
    said = []
    if missing:
        said.append(f"{len(missing)} missing ({', '.join(p.split('/', 1)[1] for p in missing)})")
    if wrong:
        said.append(", ".join(f"{p.split('/', 1)[1]} has {listed[p]} bytes, not {expected[p]}" for p in wrong))
    raise IncompleteCheckpointError(
        f"{storage.uri(cid.name)}: not committed: of the {len(expected)} files written, {'; '.join(said)}. "
        f"The store lost them after they were written (a server restarted without its data?) or another process "
        f"deleted them (a second writer under this base, whose retention removed this save's files in flight: give "
        f"each job a base of its own). No commit marker was written: restore takes the checkpoint before it")


def listed_sizes(storage: Storage, cid: CheckpointId) -> dict[str, int | None]:
    """The checkpoint directory's objects and sizes; a store without ``sizes`` (a wrapper of an older protocol)
    answers with a listing of the whole base, which has no sizes: presence only."""
    sizes = getattr(storage, "sizes", None)
    if sizes is not None:
        return sizes(cid.name)
    return {p: None for p in storage.list() if p.startswith(cid.name + "/")}


def delete_entries(storage: Storage, entries: list[Entry]) -> None:
    """Delete checkpoint directories, each commit marker first, in a request of its own: a marker the store
    refuses to delete raises (``OSError``) before any of its data goes, so a checkpoint is never left committed
    but partial, on any store; data that stays after its marker went is uncommitted debris, deleted later."""
    for e in entries:
        if e.committed:
            storage.delete([layout.path(e.id, layout.COMMIT)])
        storage.delete([layout.path(e.id, f) for f in sorted(e.files - {layout.COMMIT})])


Fence = tuple[str, int]  # (job id, attempt): who this writer is, for check_fence


def check_fence(storage: Storage, fence: Fence, paths: list[str] | None = None) -> None:
    """Raise SupersededError if a newer attempt of the same job has claimed the base (``paths``: a
    listing just taken, else one is taken). The broker starts attempt N+1 when it gives up on attempt N,
    whose VM may still run (a network partition, a slow teardown): left alone, that zombie would commit
    beside the new attempt and its retention would delete the new attempt's checkpoints."""
    job_id, attempt = fence
    newer = layout.superseded_by(storage.list() if paths is None else paths, job_id, attempt)
    if newer is not None:
        raise SupersededError(
            f"{storage.uri()}: attempt {newer} of job {job_id} writes checkpoints here now; this process is "
            f"attempt {attempt}, superseded, so it commits and deletes nothing there (stop it)")


def claim(storage: Storage, fence: Fence) -> None:
    """Mark the base as written by this attempt (after checking no newer one has claimed it)."""
    check_fence(storage, fence)
    storage.write(layout.fence_name(*fence), b"")


def apply_retention(storage: Storage, policy: retention.RetentionPolicy,
                    abandoned: frozenset[layout.CheckpointId] = frozenset(), fence: Fence | None = None,
                    damaged: frozenset[layout.CheckpointId] = frozenset(),
                    owners: dict[layout.CheckpointId, str | None] | None = None,
                    just_committed: layout.CheckpointId | None = None) -> list[Entry]:
    """List, decide (pure), delete. Returns what was deleted. A writer superseded by a newer attempt
    (``fence``) deletes nothing, damaged checkpoints included: SupersededError.

    ``just_committed``: the checkpoint whose commit this retention follows. Committed checkpoints sorting after it
    (higher steps) are neither counted nor deleted (unless restore found them damaged), as for a rollback: they are
    an earlier run's on a base this run started on afresh, or this run counted its steps from 0 again after restoring
    (fine-tuning). Counted, they were the newest and the checkpoint just committed was deleted in its own retention.

    A base another job has claimed too (two jobs given one base) is shared: only this job's checkpoints — those
    whose manifest names its id — are counted and deleted; the other job's, and what cannot be told apart (an
    uncommitted directory without a manifest: the other job's save in flight, perhaps), are left alone.
    Without that, each job's retention counted the other's checkpoints among the newest and deleted its own,
    or deleted the other's as old. ``owners`` caches the job id each manifest names (they never change)."""
    paths = storage.list()
    entries = layout.scan(paths)
    if fence is not None:
        check_fence(storage, fence, paths)
        others = layout.other_jobs(paths, fence[0])
        if others:
            if (storage.uri(), fence[0]) not in _said_shared:
                _said_shared.add((storage.uri(), fence[0]))
                # said as what it is, not as a mistake: the broker tells a cancelled job's user to continue it by
                # submitting its task again with this base, and "give each job a base of its own" then read as wrong
                log.warning("%s also holds checkpoints of job %s: retention deletes only job %s's own there, and "
                            "leaves the other's alone (right for a job that continues an ended one's checkpoints; two "
                            "jobs running at once should each have a base of their own)", storage.uri(),
                            ", ".join(others), fence[0])
            cache = {} if owners is None else owners
            abandoned = abandoned | {e.id for e in entries if _owner(storage, e, cache) != fence[0]}
    if just_committed is not None:
        abandoned = abandoned | {e.id for e in entries if e.committed and e.id > just_committed and e.id not in damaged}
    doomed = retention.to_delete(entries, policy, abandoned, damaged)
    delete_entries(storage, doomed)
    return doomed


_said_shared: set[tuple[str, str]] = set()  # (base, job): the shared-base warning is logged once


def _owner(storage: Storage, entry: Entry, cache: dict[layout.CheckpointId, str | None]) -> str | None:
    """The job id the entry's manifest names; None without a readable manifest (not cached: it may come)."""
    if entry.id in cache:
        return cache[entry.id]
    if layout.MANIFEST not in entry.files:
        return None
    try:
        manifest = Manifest.from_json(storage.read(layout.path(entry.id, layout.MANIFEST)))
    except (OSError, ValueError):
        return None
    cache[entry.id] = manifest.job.get("id")
    return cache[entry.id]
