"""Which checkpoint directories to delete after a commit. Pure.

Rules, applied only right after a new checkpoint committed (so a newer one always exists
before anything older goes):

* keep the newest ``keep_last`` committed checkpoints (``None``: keep every one);
* with ``keep_every`` set, also keep the first committed checkpoint in each window of
  ``keep_every`` steps (``[0, K)``, ``[K, 2K)``, …) — works for irregular, time-based saves;
* an uncommitted directory older than the newest commit is debris of a save that died:
  delete it. Newer uncommitted ones are left alone (nothing is writing them but a
  concurrent writer we would not want to race);
* a committed checkpoint that restore found damaged (a file missing, cut short or changed
  after its commit) is deleted too, and never counted among the kept: counted, it took the
  place of a good one, and when restore found nothing else the fresh run's own new
  checkpoints were "older" and deleted right after their commits. Only restore's verdict
  makes one damaged — a listing cannot tell — so a damaged one restore never read (older
  than the checkpoint it restored) is still counted;
* a committed checkpoint with a higher step than the one just committed is neither counted
  nor deleted (an earlier run's, on a base this run started on afresh or counts from 0 again:
  :func:`checkpoint.commit.apply_retention`), so the checkpoint just committed is always kept.
"""

from __future__ import annotations

from dataclasses import dataclass

from checkpoint import arguments
from checkpoint.layout import CheckpointId, Entry


@dataclass(frozen=True)
class RetentionPolicy:
    keep_last: int | None = 3  # None: keep every committed checkpoint
    keep_every: int | None = None

    def __post_init__(self) -> None:
        if self.keep_last is not None:
            arguments.count("keep_last", self.keep_last, why=" (the newest checkpoint is always kept; None keeps "
                                                              "every one)")
        if self.keep_every is not None:
            arguments.count("keep_every", self.keep_every)


def to_delete(entries: list[Entry], policy: RetentionPolicy,
              abandoned: frozenset[CheckpointId] = frozenset(),
              damaged: frozenset[CheckpointId] = frozenset()) -> list[Entry]:
    """Entries to delete, oldest first.

    ``abandoned``: committed checkpoints beyond the one a run was rolled back to (restored from an older
    step on purpose), or that this version cannot read (a newer format), or another job's on a base two jobs share
    (:func:`checkpoint.commit.apply_retention`). They are neither counted among the newest nor deleted: counted, ``keep_last`` of them would make every checkpoint of the rolled-back run "old"
    and delete it right after its commit.

    ``damaged``: committed checkpoints whose files restore found lost or changed. Not counted, and deleted
    (once a good one is committed: nothing is deleted before that).
    """
    committed = sorted((e for e in entries if e.committed and e.id not in abandoned and e.id not in damaged),
                       key=lambda e: e.id)
    if not committed:
        return []
    keep = {e.id for e in (committed if policy.keep_last is None else committed[-policy.keep_last:])}
    if policy.keep_every:
        first_in_window: dict[int, Entry] = {}
        for e in committed:
            first_in_window.setdefault(e.id.step // policy.keep_every, e)
        keep |= {e.id for e in first_in_window.values()}
    newest = committed[-1].id
    return [
        e for e in sorted(entries, key=lambda e: e.id)
        if e.id not in keep and e.id not in abandoned and (e.committed or e.id < newest)
    ]
