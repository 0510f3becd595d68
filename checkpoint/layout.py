"""Where each piece of a checkpoint lives under a base URI. Pure: names in, names out.

::

    <base>/
      step-000000001200-1733011200123/     one checkpoint: step 1200, created at that ms
        state.json                         structure of the saved dict, tensors by reference
        00-model.safetensors               tensors of top-level key "model"
        01-optim.safetensors
        objects.pkl                        only if something could not be saved without pickle
        manifest.json                      sizes + sha256 of every file above, step, versions
        COMMITTED                          written last; holds the manifest's sha256
      ATTEMPT-<job>-000000002              attempt 2 of that job writes here now (see ``superseded_by``)

A directory without ``COMMITTED`` does not exist as far as restore is concerned: it is a
save in progress or one that died. Each save gets a fresh directory (the creation time is
part of the name), so a new save never overwrites files a committed checkpoint points to.
Names sort in step order, then creation order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

STATE = "state.json"
OBJECTS = "objects.pkl"
MANIFEST = "manifest.json"
COMMIT = "COMMITTED"

_DIR = re.compile(r"^step-(\d{12,})-(\d{13,})$")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_FENCE = re.compile(r"^ATTEMPT-(.+)-(\d{9,})$")


@dataclass(frozen=True, order=True)
class CheckpointId:
    """One checkpoint directory; ordering is newest-last (step, then creation time)."""

    step: int
    created_ms: int

    @property
    def name(self) -> str:
        return f"step-{self.step:012d}-{self.created_ms:013d}"


@dataclass(frozen=True)
class Entry:
    """What a listing says about one checkpoint directory."""

    id: CheckpointId
    committed: bool
    files: frozenset[str] = field(default_factory=frozenset)

    @property
    def name(self) -> str:
        return self.id.name


def parse_name(name: str) -> CheckpointId | None:
    """``step-000000001200-1733011200123`` → ``CheckpointId(1200, 1733011200123)``."""
    m = _DIR.match(name)
    return CheckpointId(int(m.group(1)), int(m.group(2))) if m else None


def new_id(step: int, now_ms: int, previous: CheckpointId | None) -> CheckpointId:
    """The id for a new save: creation times strictly increase within one writer."""
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    if previous is not None and now_ms <= previous.created_ms:
        now_ms = previous.created_ms + 1
    return CheckpointId(step, now_ms)


def tensor_file(index: int, key: str) -> str:
    """File for the tensors under top-level key ``key`` (sanitised; the index keeps it unique)."""
    safe = _UNSAFE.sub("_", str(key))[:48].strip("._") or "state"
    return f"{index:02d}-{safe}.safetensors"


def fence_name(job_id: str, attempt: int) -> str:
    """The object by which attempt ``attempt`` of job ``job_id`` claims a base: ``ATTEMPT-job-7-000000002``.

    It lies beside the checkpoint directories (``scan`` ignores it, retention never deletes it).
    """
    return f"ATTEMPT-{_UNSAFE.sub('_', job_id)[:64]}-{attempt:09d}"


def superseded_by(paths: list[str], job_id: str, attempt: int) -> int | None:
    """The newest attempt of the same job that has claimed the base, if newer than ``attempt``.

    An attempt the broker started after this one owns the base: this one is a zombie (a VM the
    broker gave up on that still runs) and must neither commit nor delete anything there.
    """
    safe = _UNSAFE.sub("_", job_id)[:64]
    newer = [int(m.group(2)) for p in paths if (m := _FENCE.match(p)) and m.group(1) == safe]
    newest = max(newer, default=attempt)
    return newest if newest > attempt else None


def other_jobs(paths: list[str], job_id: str) -> list[str]:
    """The jobs other than ``job_id`` that have claimed the base (as their claims name them), sorted.

    Attempt fencing is per job: two jobs given one base (a task naming its checkpoint base, submitted twice)
    do not fence each other. A writer that finds another job's claim keeps to its own job's checkpoints
    (:func:`checkpoint.commit.apply_retention`).
    """
    safe = _UNSAFE.sub("_", job_id)[:64]
    return sorted({m.group(1) for p in paths if (m := _FENCE.match(p)) and m.group(1) != safe})


def path(checkpoint: CheckpointId, filename: str) -> str:
    return f"{checkpoint.name}/{filename}"


def scan(paths: list[str]) -> list[Entry]:
    """Group a recursive listing into checkpoint entries, oldest first.

    Paths that are not inside a checkpoint directory (or nested deeper) are ignored.
    """
    files: dict[CheckpointId, set[str]] = {}
    for p in paths:
        head, _, tail = p.partition("/")
        cid = parse_name(head)
        if cid is None or not tail or "/" in tail:
            continue
        files.setdefault(cid, set()).add(tail)
    return [
        Entry(cid, COMMIT in names, frozenset(names)) for cid, names in sorted(files.items())
    ]


def committed_newest_first(entries: list[Entry], at_or_before: CheckpointId | None = None) -> list[Entry]:
    """Committed entries, newest first, optionally only those not newer than ``at_or_before``."""
    chosen = [e for e in entries if e.committed and (at_or_before is None or e.id <= at_or_before)]
    return sorted(chosen, key=lambda e: e.id, reverse=True)


def split_checkpoint_uri(uri: str) -> tuple[str, CheckpointId]:
    """``s3://b/run/step-…-…`` → ``("s3://b/run", CheckpointId(...))``; ValueError otherwise."""
    parent, _, name = uri.rstrip("/").rpartition("/")
    cid = parse_name(name)
    if cid is None or not parent:
        raise ValueError(f"not a checkpoint URI (expected …/step-<step>-<ms>): {uri!r}")
    return parent, cid
