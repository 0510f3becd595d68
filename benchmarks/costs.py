"""The cost report (``GET /v1/costs``, the dashboard, Slack ``costs``) over a long history.

    .venv/bin/python benchmarks/costs.py [--jobs 20000] [--repeat 5]

Seeds ``--jobs`` finished jobs (two spot attempts each, submitted uniformly over the last
120 days, three teams) into a fresh SQLite file and into our own ``redis-server`` on a free
loopback port, then times, side by side in one run, the two halves of a report for the
``7d`` and ``90d`` windows:

* **read** (``costs.gather``): the jobs a window can hold cost for, and their attempts —
  one store read per job (what ``gather`` did before) against ``store.attempts_of``, the
  batched read (SQLite: ``IN`` queries; Redis: pipelined ``HGETALL``, 500 ids a round trip);
* **report** (``costs.report``, pure): every attempt apportioned over every day of the window
  (what it did before) against only the days its billed span touches (the same sums: a test
  checks them against the definition).

Medians over ``--repeat`` rounds, the variants interleaved within each round; the ratio is
old ÷ new, per round, then the median. Everything stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from api import free_port, stop, wait_port  # noqa: E402

from broker import costs  # noqa: E402
from broker.lifecycle import AttemptState, JobState  # noqa: E402
from broker.models import Attempt, Event, Job  # noqa: E402
from broker.store import Change, open_store  # noqa: E402

DAY = 86_400


def seed(store, n: int, now: float) -> None:
    rng = random.Random(1)
    place = {"tier": "spot", "cloud": "aws", "region": "us-east-1", "zone": "us-east-1a", "instance_type": "g5.xlarge",
             "price_per_hour": 500_000, "ondemand_price_per_hour": 2_000_000}
    for i in range(n):
        start = now - rng.uniform(0, 120 * DAY)
        jid = f"j{i}"
        job = Job(id=jid, name=f"train-{i}", team=rng.choice(["vision", "nlp", "speech"]), state=JobState.SUCCEEDED,
                  spec={"run": "python train.py"}, budget=10**9, priority=0, submitted_at=start,
                  updated_at=start + 7 * 3600, spent=3_000_000, attempts=2)
        tries = [Attempt(id=f"{jid}-a{k}", job_id=jid, n=k, state=state, launcher="local", placement=place,
                         price_per_hour=500_000, created_at=t, started_at=t + 60, ended_at=t + 3 * 3600,
                         cost=1_500_000, billed_until=t + 3 * 3600)
                 for k, state, t in ((1, AttemptState.PREEMPTED, start), (2, AttemptState.SUCCEEDED, start + 4 * 3600))]
        ev = Event(job_id=jid, time=start, event="submit", from_state=None, to_state="queued", reason="seed", actor="bench")
        store.commit(Change(job=job, expected_version=None, events=[ev], attempts=tries))


def all_days(days, day_ends, attempt):
    return iter(days)  # the report before: every day of the window, for every attempt


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    if not shutil.which("redis-server"):
        print("redis-server not found on PATH (make test installs it)", file=sys.stderr)
        return 1
    now = time.time()
    work = Path(tempfile.mkdtemp(prefix="bench-costs-"))
    port = free_port()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(work),
                             "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, proc)
        stores = {"sqlite": open_store(f"sqlite:///{work / 'broker.db'}"), "redis": open_store(f"redis://127.0.0.1:{port}/0")}
        for name, store in stores.items():
            t = time.perf_counter()
            seed(store, args.jobs, now)
            print(f"seeded {args.jobs} jobs into {name} in {time.perf_counter() - t:.0f} s", flush=True)
        print(f"\n{args.jobs} jobs, 2 attempts each, over 120 days; medians of {args.repeat} rounds\n")
        print("| store | window | jobs read | read: per job (ms) | read: batched (ms) | ×faster | report: all days (ms) | report: own days (ms) | ×faster |")
        print("|---|---|---|---|---|---|---|---|---|")
        touched = costs._days_touched
        for name, store in stores.items():
            for period in ("7d", "90d"):
                win = costs.window(now=now, period=period)
                jobs = store.list_jobs(limit=10**9, active_since=win.since)
                jobs = [j for j in jobs if j.submitted_at < win.until]
                attempts = store.attempts_of([j.id for j in jobs])
                rows = []
                for _ in range(args.repeat):
                    old_read = timed(lambda: {j.id: store.attempts(j.id) for j in jobs})
                    new_read = timed(lambda: store.attempts_of([j.id for j in jobs]))
                    costs._days_touched = all_days
                    try:
                        old_report = timed(lambda: costs.report(jobs, attempts, win=win, now=now, positions={}, team=None))
                    finally:
                        costs._days_touched = touched
                    new_report = timed(lambda: costs.report(jobs, attempts, win=win, now=now, positions={}, team=None))
                    rows.append((old_read, new_read, old_report, new_report))
                med = [statistics.median(r[i] for r in rows) * 1000 for i in range(4)]
                read_x = statistics.median(r[0] / r[1] for r in rows)
                report_x = statistics.median(r[2] / r[3] for r in rows)
                print(f"| {name} | {period} | {len(jobs)} | {med[0]:.0f} | {med[1]:.0f} | {read_x:.1f} | {med[2]:.0f} | {med[3]:.0f} | {report_x:.1f} |",
                      flush=True)
        for store in stores.values():
            store.close()
    finally:
        stop(proc)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
