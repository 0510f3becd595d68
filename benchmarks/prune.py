"""Retention benchmark: how long a prune holds the SQLite store, seen by a reader beside it.

    nice -n 10 .venv/bin/python benchmarks/prune.py [--jobs 500] [--points 2000,3000,10000] [--huge 1000000]
                                                    [--repeat 3]

A SQLite store (WAL, ``synchronous=FULL``, as the broker opens it) holds ``--jobs`` finished jobs past retention,
each with one attempt, two events and ``--points`` metric points (a progress report every 5 s is 17,280 a day),
and one live job; the ``--huge`` case is one finished job with that many points. A reader thread reads the live job
(``get_job``, as an API request or an engine tick does) every 5 ms while the whole backlog is pruned, and the
longest any one read waited is the figure: the store's single connection is held by each prune transaction.

* before — the prune as it was: 500 jobs per transaction from the first (``Retention.BATCH``), each whole,
  smaller only after a transaction that took more than 0.25 s, 0.5 s apart;
* now — ``Retention.prune`` of a broker that just started (its first write at ``ROWS`` records, so the slowest
  case), writes sized by the records they delete, a job's points beyond a write after its row
  (``JobStore.prune_leftovers``), 0.5 s apart.

Each round builds the store once per case and prunes a copy of it with each, alternately; medians of ``--repeat``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from broker.lifecycle import AttemptState, JobEvent, JobState  # noqa: E402
from broker.models import Attempt, Event, Job  # noqa: E402
from broker.retention import BATCH, BATCH_PAUSE_SECONDS, BATCH_SECONDS, DAY, Retention  # noqa: E402
from broker.store import Change  # noqa: E402
from broker.store.sqlite import SqliteStore  # noqa: E402

NOW = 1_800_000_000.0
POINT = json.dumps({"step": 1000, "time": NOW, "metrics": {"loss": 2.345678, "lr": 0.0003, "grad_norm": 1.2345}})


def build(path: str, jobs: int, points: int) -> int:
    """The store: ``jobs`` finished jobs of ``points`` points each, and one live job. How many records are due."""
    store = SqliteStore(path)
    for i in range(jobs):
        job = Job(id=f"j-{i:05d}", name="train", team="vision", state=JobState.QUEUED, spec={"run": "echo"},
                  budget=5_000_000, priority=0, submitted_at=NOW - 30 * DAY, updated_at=NOW - 30 * DAY,
                  idempotency_key=f"k{i}")
        job = store.commit(Change(job=job, expected_version=None, events=[
            Event(job.id, NOW - 30 * DAY, JobEvent.SUBMIT.value, None, "queued", "submitted", "bench")]))
        attempt = Attempt(id=f"{job.id}-a1", job_id=job.id, n=1, state=AttemptState.SUCCEEDED, launcher="local",
                          placement={"tier": "spot", "zone": "us-east-1a"}, price_per_hour=500_000,
                          created_at=NOW - 30 * DAY, cost=1_000_000)
        store.commit(Change(job=replace(job, state=JobState.SUCCEEDED, updated_at=NOW - 20 * DAY, attempts=1),
                            expected_version=1, attempts=[attempt], events=[
                                Event(job.id, NOW - 20 * DAY, JobEvent.SUCCEED.value, "queued", "succeeded", "done",
                                      "bench")]))
    store.commit(Change(job=Job(id="j-live", name="train", team="vision", state=JobState.QUEUED, spec={"run": "echo"},
                                budget=5_000_000, priority=0, submitted_at=NOW, updated_at=NOW), expected_version=None))
    store.close()
    db = sqlite3.connect(path)
    db.execute("BEGIN")
    db.executemany("INSERT INTO metrics (job_id, seq, body) VALUES (?, ?, ?)",
                   ((f"j-{i:05d}", s, POINT) for i in range(jobs) for s in range(1, points + 1)))
    db.execute("COMMIT")
    db.close()
    return jobs * (1 + 1 + 2 + points)


class Counted:
    """The store, counting the writes of a prune."""

    def __init__(self, store: SqliteStore):
        self._store = store
        self.writes = 0

    def __getattr__(self, name):
        return getattr(self._store, name)

    def prune(self, jobs, **kw):
        self.writes += 1
        return self._store.prune(jobs, **kw)

    def prune_leftovers(self, **kw):
        done = self._store.prune_leftovers(**kw)
        self.writes += bool(done)
        return done


def before_style(store: Counted, before: float) -> int:
    """The prune before this change (``Retention.prune`` at 5e37b2a), on today's store: whole jobs, 500 a write."""
    size, total, stop = BATCH, 0, threading.Event()
    while True:
        started = time.perf_counter()
        jobs = store.expired(before=before, limit=size)
        deleted = store.prune(jobs) if jobs else []
        total += len(deleted)
        took = time.perf_counter() - started
        if len(jobs) < size or not deleted or stop.wait(BATCH_PAUSE_SECONDS):
            break
        size = max(1, int(size * BATCH_SECONDS / took)) if took > BATCH_SECONDS else min(BATCH, size * 2)
    return total


def run(template: str, workdir: str, how: str) -> dict:
    path = os.path.join(workdir, f"{how}.db")
    shutil.copy(template, path)
    store = Counted(SqliteStore(path))
    worst, stop = [0.0], threading.Event()

    def reader():
        while not stop.is_set():
            t = time.perf_counter()
            store.get_job("j-live")
            worst[0] = max(worst[0], time.perf_counter() - t)
            time.sleep(0.005)

    thread = threading.Thread(target=reader)
    thread.start()
    started = time.perf_counter()
    retention = Retention(store, days=1)
    try:
        deleted = before_style(store, NOW - DAY) if how == "before" else retention.prune(NOW)
    finally:
        took = time.perf_counter() - started
        stop.set()
        thread.join()
    assert store.list_jobs() and [j.id for j in store.list_jobs()] == ["j-live"], "the backlog was not pruned"
    left = store._query("SELECT COUNT(*) FROM metrics")[0][0]
    assert left == 0, f"{left} metric points left"
    store.close()
    for suffix in ("", "-wal", "-shm"):
        try:
            os.remove(path + suffix)
        except FileNotFoundError:
            pass
    return {"deleted": deleted, "wait": worst[0], "took": took, "writes": store.writes, "size": retention.rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--points", default="2000,3000,10000")
    parser.add_argument("--huge", type=int, default=1_000_000, help="one job with this many points (0: left out)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    cases = [(args.jobs, int(p)) for p in args.points.split(",") if p]
    if args.huge:
        cases.append((1, args.huge))
    workdir = tempfile.mkdtemp(prefix="prune-bench-")
    rows = []
    try:
        for jobs, points in cases:
            template = os.path.join(workdir, "template.db")
            records = build(template, jobs, points)
            results: dict[str, list[dict]] = {"before": [], "now": []}
            for r in range(args.repeat):
                for how in (("before", "now") if r % 2 == 0 else ("now", "before")):
                    results[how].append(run(template, workdir, how))
            os.remove(template)
            med = {how: {key: statistics.median(x[key] for x in res) for key in ("wait", "took", "writes", "size")}
                   for how, res in results.items()}
            rows.append((f"{jobs} × {points:,}", records, med))
            print(f"  {jobs} jobs × {points} points: before {[round(x['wait'], 2) for x in results['before']]} s, "
                  f"now {[round(x['wait'], 2) for x in results['now']]} s", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print("| jobs × points | records | longest read wait: before (s) | now (s) | × | whole prune: before (s) "
          "| now (s) | writes: before | now | size reached (records) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for case, records, med in rows:
        b, n = med["before"], med["now"]
        print(f"| {case} | {records:,} | {b['wait']:.2f} | {n['wait']:.2f} | {b['wait'] / n['wait']:.1f} "
              f"| {b['took']:.1f} | {n['took']:.1f} | {b['writes']:.0f} | {n['writes']:.0f} | {n['size']:,.0f} |")


if __name__ == "__main__":
    main()
