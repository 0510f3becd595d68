"""Which uploaded packs (workdirs, and file_mounts sources) the jobs still refer to, read for the engine's hourly
collection of the object store's packs (``broker/workdir_store.py``).

A pack is referred to by each job that is not final, and by each final job for ``workdir_retention_seconds``
after its last update. Reading every such job at each collection cost about a second per 20,000 jobs on
SQLite (docs/deploy.md), a second in which the engine and the API wait on the store. So the references are
kept between collections, and a collection reads only the jobs not final and those updated since the
latest update it read (``MARGIN_SECONDS`` before it), which both stores answer from their update-time index
(``list_jobs(active_since=...)``); the whole window is read at the first collection, once a day, and when
the engine's clock went back.

The margin covers a job written with an update time a little before the latest one read: a write that took
long to commit, or a broker sharing the store whose clock is behind. A job missed all the same (a clock
behind by more) is read at the next whole read; until then the reference it had stays, so what is missed
keeps a pack longer, never shorter — save a job that ended unseen, whose pack may then be set aside early
and is put back by the next whole read, or by a resume, while it is in the trash.
"""

from __future__ import annotations

import threading

from broker.store import JobStore
from broker.workdir import packs_of

MARGIN_SECONDS = 3600.0
"""A collection reads the jobs updated since this long before the latest update time the one before read."""
WHOLE_READ_SECONDS = 86400.0
"""How often (the engine's clock) a collection reads every job of the retention window again."""


class PackReferences:
    """The packs the jobs refer to, kept up to date by :meth:`read`. One per engine; thread-safe."""

    def __init__(self, store: JobStore, *, retention: float, limit: int):
        self.store = store
        self.retention = retention
        self.limit = limit
        #: job id → (the packs it names, hex; the job's update time; whether it was final): jobs with a pack only
        self._refs: dict[str, tuple[frozenset[str], float, bool]] = {}
        self._latest: float | None = None  # the latest update time read; None: read the whole window next
        self._whole_at = float("-inf")  # when the whole window was last read
        self._last_now = float("-inf")
        self._lock = threading.Lock()

    def read(self, now: float) -> set[str] | None:
        """The digests (hex) the jobs refer to at ``now`` (the engine's clock), read from the store just now;
        ``None`` when a read met ``limit`` jobs (what it did not read is unknown: nothing may be collected).
        ``StoreUnavailable`` passes through, and the next read reads the whole window."""
        with self._lock:
            window = now - self.retention
            whole = self._latest is None or now < self._last_now or now - self._whole_at >= WHOLE_READ_SECONDS
            since = window if whole else max(window, self._latest - MARGIN_SECONDS)
            self._latest, latest = None, self._latest  # a read that fails leaves a whole read to the next
            jobs = self.store.list_jobs(limit=self.limit, active_since=since)
            if len(jobs) >= self.limit:
                self._refs = {}
                return None
            if whole:
                self._refs, self._whole_at, latest = {}, now, None
            for job in jobs:
                if packs := packs_of(job.spec.get("broker")):  # its workdir's and its file_mounts' alike
                    self._refs[job.id] = (frozenset(packs), job.updated_at, job.state.is_final)
                else:
                    self._refs.pop(job.id, None)
                latest = job.updated_at if latest is None else max(latest, job.updated_at)
            self._refs = {k: r for k, r in self._refs.items() if not r[2] or r[1] >= window}  # the rest are past it
            self._latest, self._last_now = latest, now
            return {digest for packs, _, _ in self._refs.values() for digest in packs}
