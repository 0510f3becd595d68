"""How long a finished job is kept (``job_retention_days``), and the pruning that deletes it after that.

A job in a final state — ``succeeded``, ``cancelled``, ``failed``, ``stopped_budget`` — whose last update is more
than ``job_retention_days`` old is deleted with everything of it: its attempts, events, metric points, its
idempotency key, and its entries in the store's indexes (:meth:`JobStore.expired` reads them, :meth:`JobStore.prune`
deletes them). A failed or budget-stopped job could still be resumed until then; once pruned, it is gone (a resume
is a 404: submit again). A job that is not final, or in a state a newer broker set, is never pruned, however old.
What it counted for in the counters of ``/metrics`` (spend, on-demand equivalent, preemptions: ``broker/totals.py``)
goes, in the same write as the deletion, to totals the store keeps (:meth:`JobStore.pruned_totals`), so that those
counters do not fall; and what its attempts cost, by team, tier and UTC hour, to the pruned-cost ledger
(:meth:`JobStore.pruned_costs`, ``broker.costs.ledger_of``), so that cost reports keep it in their totals.

Off unless set: a broker upgraded to this version deletes nothing it kept before. Cost reports (``/v1/costs``, the
dashboard, ``broker costs``) count a pruned job's spend by the hour from the ledger, list it nowhere, and say how
much of their totals it is (``retention_note``, ``broker/costs.py``); jobs pruned before the ledger was kept are left
out of a window that begins more than ``job_retention_days`` ago, and that is said too (a window within it loses
nothing, since a pruned job ended before it began).

Each broker that runs an engine (``broker serve`` with its engine, ``broker worker``) prunes in a thread of its own
beside the ticks: at its start and then every :data:`PRUNE_SECONDS`, in store writes with a pause between two, so
that a prune of a long backlog holds neither the ticks nor the API for long — a SQLite write is one transaction,
which every commit and read of the broker waits behind. A write is sized in the records it deletes (a job's row,
attempts, events and metric points: :meth:`JobStore.prune_sizes`), not in jobs, since a job that reported progress
for weeks holds a thousand times the records of one that failed at start: the first write of a broker deletes at
most :data:`ROWS`, each write that was quick lets the next one delete up to twice as many and one that was slow
fewer (by the pace of the last, aiming under :data:`BATCH_SECONDS`), and the size reached is kept for the broker's
next prunes. A job that alone holds more goes in several writes: its row (the compare-and-set) with the first of its
points, then the rest of its points (:meth:`JobStore.prune_leftovers`). When nothing is due a prune is one indexed
read. Brokers sharing a store may prune at once: the deletion is compare-and-set on the version read, so a job
another broker pruned first is skipped, and a job resumed (or its budget raised) between the read and the deletion
stays, every point of it.
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
ROWS = 5_000
"""The most records (as :meth:`JobStore.prune_sizes` counts them) a broker's first store write of a prune deletes:
about 5 ms of a SQLite transaction on a quick disk, so that a broker's first prune, on a store it knows nothing of,
starts small."""
ROWS_MIN, ROWS_MAX = 100, 1_000_000
"""The bounds of the size a write is given (below ``ROWS_MIN`` a transaction is its fsync)."""
BATCH_SECONDS = 0.25
"""What one write should take at most (a SQLite transaction holds the file, and so the ticks and the API, while it
runs): one that took longer makes the next one smaller, in proportion; one that took less and used at least half of
its size lets the next one grow (``Retention._adapt``)."""
AIM = 0.7
"""The part of :data:`BATCH_SECONDS` the next write is sized to take, at the pace of the last."""
BATCH_PAUSE_SECONDS = 0.5
"""Between two writes of one prune the store is left to the ticks and the API."""
POLL_SECONDS = 60.0
"""How often the thread looks at the clock to see whether a prune is due."""


class Retention:
    """Prunes ``store`` of the final jobs older than ``days`` (``None``: never). :meth:`tick` prunes when one is due;
    :meth:`start` runs it in a thread of its own."""

    def __init__(self, store: JobStore, *, days: float | None, clock: Callable[[], float] = time.time,
                 interval: float = PRUNE_SECONDS, batch: int = BATCH, batch_seconds: float = BATCH_SECONDS,
                 pause: float = BATCH_PAUSE_SECONDS, rows: int = ROWS):
        self.store = store
        self.days = days
        self.clock = clock
        self.interval = interval
        self.batch = batch
        self.batch_seconds = batch_seconds
        self.pause = pause
        self.rows = rows
        """The records the next store write may delete: adapted write after write, and kept from one prune to the
        next (the store, the disk and the jobs a broker prunes change little in an hour)."""
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
        """Delete, write after write, the final jobs last updated more than ``days`` before ``now``; how many. What
        an earlier write left of the jobs it deleted (their points beyond its size; a broker stopped halfway through
        them) goes first."""
        if self.days is None:
            return 0
        before = now - self.days * DAY
        total = 0
        try:
            while True:
                started = time.perf_counter()
                size = self.rows
                used = self.store.prune_leftovers(limit=size)
                last = False
                if not used:
                    jobs = self.store.expired(before=before, limit=self.batch)
                    if not jobs:
                        break
                    batch, used = [], 0
                    for job, weight in zip(jobs, self.store.prune_sizes(jobs)):
                        if batch and used + weight > size:
                            break
                        batch.append(job)
                        used += weight
                    deleted = self.store.prune(batch, rows=size)
                    total += len(deleted)
                    if not deleted:  # it lost every job to another broker, which goes on
                        break
                    # a short read, taken whole, nothing of it left for later: that was the last
                    last = len(jobs) < self.batch and len(batch) == len(jobs) and used <= size
                    used = min(used, size)
                self._adapt(size, used, time.perf_counter() - started)
                if last or self._stop.wait(self.pause):
                    break
        finally:  # what was deleted is said, also when the store stopped answering halfway
            if total:
                log.info("retention: deleted %d finished job(s) last updated before %s with their attempts, events "
                         "and metrics (job_retention_days: %g)", total,
                         datetime.fromtimestamp(before, timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), self.days)
        return total

    def _adapt(self, size: int, used: int, took: float) -> None:
        """The next write's size, from this one's: ``used`` of ``size`` records deleted in ``took`` seconds. As many
        as this write's pace deletes in :data:`AIM` of ``batch_seconds`` (fewer, with the part of a write that is
        not per record: its fsync, the reads before it), so that one write slower than the last (a shared disk, a
        WAL checkpoint) still keeps within it; but at most twice this size, and more only after a write that used
        at least half of its size (a small one says little of the pace)."""
        fits = used * AIM * self.batch_seconds / took if took > 0 else float("inf")
        if took > self.batch_seconds:
            self.rows = max(ROWS_MIN, min(size, int(fits)))
        elif 2 * used >= size:
            self.rows = max(size, int(min(ROWS_MAX, 2 * size, fits)))

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
