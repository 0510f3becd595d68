"""How long a finished job is kept (``job_retention_days``), and the pruning that deletes it after that.

A job in a final state — ``succeeded``, ``cancelled``, ``failed``, ``stopped_budget`` — whose last update is more
than ``job_retention_days`` old is deleted with everything of it: its attempts, events, metric points, its
idempotency key, and its entries in the store's indexes (:meth:`JobStore.expired` reads them, :meth:`JobStore.prune`
deletes them). A failed or budget-stopped job could still be resumed until then; once pruned, it is gone (a resume
is a 404: submit again). A job that is not final, or in a state a newer broker set, is never pruned, however old.
What it counted for in the counters of ``/metrics`` (spend, on-demand equivalent, preemptions: ``broker/totals.py``)
goes, in the same write as the deletion, to totals the store keeps (:meth:`JobStore.pruned_totals`), so that those
counters do not fall.

Off unless set: a broker upgraded to this version deletes nothing it kept before. Cost reports (``/v1/costs``, the
dashboard, ``broker costs``) over a window that begins more than ``job_retention_days`` ago leave out the jobs
pruned since; a window within it loses nothing, since a pruned job ended before it began.

Each broker that runs an engine (``broker serve`` with its engine, ``broker worker``) prunes in a thread of its own
beside the ticks: at its start and then every :data:`PRUNE_SECONDS`, in batches of :data:`BATCH` jobs, each one
store write, with a pause between two, so that a first prune of a long backlog holds neither the ticks nor the API
for long. When nothing is due a prune is one indexed read. Brokers sharing a store may prune at once: the deletion
is compare-and-set on the version read, so a job another broker pruned first is skipped, and a job resumed (or its
budget raised) between the read and the deletion stays.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone

from broker.config import Settings
from broker.store import JobStore, StoreUnavailable

log = logging.getLogger("broker.retention")

DAY = 86400.0
PRUNE_SECONDS = 3600.0
"""How often a broker prunes (the first time at its start)."""
BATCH = 500
"""The most jobs read, then deleted, per store write (one SQLite transaction; one pipelined round trip of scripts in
Redis)."""
BATCH_SECONDS = 0.25
"""What one batch should take at most: a batch that took longer (jobs with many metric points: a SQLite transaction
holds the file, and so the ticks and the API, while it runs) makes the next one smaller, in proportion."""
BATCH_PAUSE_SECONDS = 0.5
"""Between two batches of one prune the store is left to the ticks and the API."""
POLL_SECONDS = 60.0
"""How often the thread looks at the clock to see whether a prune is due."""


class Retention:
    """Prunes ``store`` of the final jobs older than ``days`` (``None``: never). :meth:`tick` prunes when one is due;
    :meth:`start` runs it in a thread of its own."""

    def __init__(self, store: JobStore, *, days: float | None, clock: Callable[[], float] = time.time,
                 interval: float = PRUNE_SECONDS, batch: int = BATCH, batch_seconds: float = BATCH_SECONDS,
                 pause: float = BATCH_PAUSE_SECONDS):
        self.store = store
        self.days = days
        self.clock = clock
        self.interval = interval
        self.batch = batch
        self.batch_seconds = batch_seconds
        self.pause = pause
        self._last: float | None = None  # when the last prune began (on ``clock``)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def of(cls, settings: Settings, store: JobStore) -> Retention:
        return cls(store, days=settings.job_retention_days)

    def tick(self, now: float | None = None) -> int | None:
        """Prune if none began within ``interval`` before ``now`` (or the clock went back since): the number of
        jobs deleted; ``None`` when none was due or retention is off."""
        now = self.clock() if now is None else now
        if self.days is None or (self._last is not None and self._last <= now < self._last + self.interval):
            return None
        self._last = now  # a prune that fails is tried again an interval later, not at every poll
        return self.prune(now)

    def prune(self, now: float) -> int:
        """Delete, batch after batch, the final jobs last updated more than ``days`` before ``now``; how many."""
        if self.days is None:
            return 0
        before = now - self.days * DAY
        total, size = 0, self.batch
        try:
            while True:
                started = time.perf_counter()
                jobs = self.store.expired(before=before, limit=size)
                deleted = self.store.prune(jobs) if jobs else []
                total += len(deleted)
                took = time.perf_counter() - started
                # a short batch was the last; one that deleted nothing lost every job to another broker, which goes on
                if len(jobs) < size or not deleted or self._stop.wait(self.pause):
                    break
                size = (max(1, int(size * self.batch_seconds / took)) if took > self.batch_seconds
                        else min(self.batch, size * 2))
        finally:  # what was deleted is said, also when the store stopped answering halfway
            if total:
                log.info("retention: deleted %d finished job(s) last updated before %s with their attempts, events "
                         "and metrics (job_retention_days: %g)", total,
                         datetime.fromtimestamp(before, timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), self.days)
        return total

    def tick_safely(self) -> int | None:
        """:meth:`tick` for the thread: a store that does not answer is one line, and the next prune tries again."""
        try:
            return self.tick()
        except StoreUnavailable as exc:
            log.warning("retention: finished jobs not pruned this time: %s", exc)
        except Exception:
            log.exception("retention: pruning failed")
        return None

    def start(self) -> None:
        """Prune now and every ``interval``, in a daemon thread (nothing when retention is off)."""
        if self.days is None or self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="broker-retention", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.tick_safely()
            self._stop.wait(POLL_SECONDS)
