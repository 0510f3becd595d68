"""The cost report (``GET /v1/costs``, the dashboard, Slack ``costs``) over a long history: before and now.

    .venv/bin/python benchmarks/costs.py [--jobs 2000,20000] [--repeat 5]

For each ``--jobs`` N, seeds N jobs (``tests/broker/cost_history.py``) submitted uniformly over the
last 120 days into a fresh SQLite file and into our own ``redis-server`` on a free loopback port:
five teams; on-prem, spot and on-demand work of 1–4 nodes; 0–5 attempts each (earlier ones preempted or lost, the last one
succeeded, failed or still running); stored records as the broker writes them (spec, quote,
placement, checkpoint, progress). Then times, side by side in one run, the report for the
``7d`` and ``90d`` windows, for all teams:

* **before** (``tests/broker/costs_before.py``, the code as it was): ``list_jobs`` and
  ``attempts_of`` decode every job and attempt in the window whole; each day's share is two
  ``share`` calls;
* **now** (``costs.gather`` → ``JobStore.cost_history``): only the fields the report shows
  (SQLite extracts them in SQL; Redis builds them from the decoded record without the
  dataclasses), and each attempt's cumulative share is taken once per day boundary.

Each round checks the two reports are identical (the report now less the fields for people added since:
``costs_before.as_before``). Medians over ``--repeat`` rounds, the variants
interleaved within each round; a ratio is before ÷ now per round, then the median. Everything
stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
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
sys.path.insert(0, str(ROOT / "tests" / "broker"))

import costs_before  # noqa: E402
from cost_history import history  # noqa: E402
from api import free_port, stop, wait_port  # noqa: E402

from broker import costs  # noqa: E402
from broker.store import open_store  # noqa: E402

def timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", default="2000,20000", help="comma-separated store sizes")
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
    table = []
    try:
        wait_port(port, proc)
        for db, n in enumerate(int(x) for x in args.jobs.split(",")):
            stores = {"sqlite": open_store(f"sqlite:///{work / f'broker-{n}.db'}"),
                      "redis": open_store(f"redis://127.0.0.1:{port}/{db}")}
            for name, store in stores.items():
                t = time.perf_counter()
                history(store, n, now)
                print(f"seeded {n} jobs into {name} in {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
            for name, store in stores.items():
                for period in ("7d", "90d"):
                    win = costs.window(now=now, period=period)
                    rounds = []
                    for _ in range(args.repeat):
                        old_read, (jobs, atts) = timed(lambda: costs_before.gather(store, team=None, win=win))
                        old_rep, old = timed(lambda: costs_before.report(jobs, atts, win=win, now=now, positions={}, team=None))
                        new_read, got = timed(lambda: costs.gather(store, team=None, win=win))
                        new_rep, new = timed(lambda: costs.report(got.jobs, got.attempts, win=win, now=now,
                                                                  positions={}, team=None, ledger=got.ledger))
                        if costs_before.zones_apart(old) != costs_before.as_before(new):  # less the fields for people added since
                            print(f"{name} {period}: the reports differ", file=sys.stderr)
                            return 1
                        rounds.append((old_read, new_read, old_rep, new_rep, old_read + old_rep, new_read + new_rep))
                    med = [statistics.median(r[i] for r in rounds) * 1000 for i in range(6)]
                    ratio = [statistics.median(r[i] / r[i + 1] for r in rounds) for i in (0, 2, 4)]
                    row = (f"| {name} | {n} | {period} | {len(jobs)} | {sum(map(len, atts.values()))} "
                           f"| {med[0]:.0f} → {med[1]:.0f} | {ratio[0]:.1f} | {med[2]:.0f} → {med[3]:.0f} | {ratio[1]:.1f} "
                           f"| {med[4]:.0f} → {med[5]:.0f} | {ratio[2]:.1f} |")
                    table.append(row)
                    print(row, file=sys.stderr, flush=True)
            for store in stores.values():
                store.close()
    finally:
        stop(proc)
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nmedians of {args.repeat} rounds (ms, before → now); ×: before ÷ now, per round, then the median\n")
    print("| store | jobs stored | window | jobs read | attempts | read (ms) | × | report (ms) | × | total (ms) | × |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
