"""The Redis pruned-cost ledger a cost report reads: one hash (before) against parts by team and month (now).

    .venv/bin/python benchmarks/pruned_ledger.py [--months 12] [--teams 8] [--repeat 5]

Fills our own ``redis-server`` (a free loopback port, nothing kept on disk) with the ledger of ``--months`` months of
pruned jobs: every hour of every month billed for each of ``--teams`` teams on three tiers, a cost and an on-demand
equivalent each (the most a ledger can hold for that history, as ``broker.costs.ledger_of`` keys it). First it is
written the way a broker before the parts kept it, in the one hash ``<prefix>:pruned:costs``, and the reports are
timed; then one prune moves it to its parts (timed once), and the same reports are timed again. Both layouts are
read by the same ``RedisStore.pruned_costs`` (which reads an earlier broker's hash as well as the parts), and each
round checks that the two answers are identical. Reports: the last 7, 90 and 400 days (the longest window a report
may ask for), for every team and for one. Medians over ``--repeat`` rounds; the ratio is before ÷ now per round,
then the median.
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
sys.path.insert(0, str(ROOT / "tests" / "broker"))

from api import free_port, stop, wait_port  # noqa: E402

from broker import costs, totals  # noqa: E402
from broker.store.redis import RedisStore  # noqa: E402

HOUR, DAY = 3600, 86_400


def fill(store: RedisStore, *, months: int, teams: int, now: float) -> int:
    """The one-hash ledger of ``months`` × 30 days of hours, ``teams`` teams, three tiers; how many entries."""
    first = int(now - now % HOUR) - months * 30 * DAY
    n = 0
    with store._r.pipeline(transaction=False) as pipe:
        for hour in range(first, int(now), HOUR):
            fields = {}
            for t in range(teams):
                for tier in ("onprem", "spot", "ondemand"):
                    fields[totals.encode((costs.COST, f"team-{t}", tier, hour))] = 1_000 + t
                    fields[totals.encode((costs.ODEQ, f"team-{t}", tier, hour))] = 3_145 + t
            pipe.hset(store.keys.pruned_costs(), mapping=fields)
            n += len(fields)
            if len(pipe) >= 200:
                pipe.execute()
        pipe.hset(store.keys.pruned_costs(), "jobs", 1)
        pipe.execute()
    return n


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--months", type=int, default=12)
    ap.add_argument("--teams", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    if not shutil.which("redis-server"):
        print("redis-server not found on PATH (make test installs it)", file=sys.stderr)
        return 1
    now = time.time()
    work = Path(tempfile.mkdtemp(prefix="bench-ledger-"))
    port = free_port()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(work),
                             "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, proc)
        store = RedisStore(f"redis://127.0.0.1:{port}/0", prefix="bench")
        t = time.perf_counter()
        entries = fill(store, months=args.months, teams=args.teams, now=now)
        print(f"wrote {entries} ledger entries in {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
        queries = [(period, team) for period in ("7d", "90d", "400d") for team in (None, "team-1")]

        def read_all() -> dict:
            out = {}
            for period, team in queries:
                win = costs.Window(now - 400 * DAY, now, period) if period == "400d" else \
                    costs.window(now=now, period=period)
                out[period, team] = [timed(lambda: store.pruned_costs(team=team, since=win.since, until=win.until))
                                     for _ in range(args.repeat)]
            return out

        before = read_all()
        move_s, _ = timed(lambda: store.prune([]))
        assert store._r.hlen(store.keys.pruned_costs()) == 1, "the move left entries in the one hash"
        parts = store._r.zcard(store.keys.pruned_costs_parts())
        after = read_all()
        store.close()
    finally:
        stop(proc)
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n{entries} entries ({args.months} × 30 days, {args.teams} teams, 3 tiers, cost and equivalent); moved to "
          f"{parts} parts by one prune in {move_s:.1f} s. Medians of {args.repeat} rounds (ms, before → now); "
          "×: before ÷ now, per round, then the median\n")
    print("| window | team | entries in the window | read (ms) | × |")
    print("|---|---|---|---|---|")
    for key in queries:
        old, new = before[key], after[key]
        if any(o[1] != n[1] for o, n in zip(old, new)):
            print(f"{key}: the two layouts answer differently", file=sys.stderr)
            return 1
        got = new[0][1]
        ratio = statistics.median(o[0] / n[0] for o, n in zip(old, new))
        print(f"| {key[0]} | {key[1] or 'all'} | {2 * len(got.buckets)} | "
              f"{statistics.median(o[0] for o in old) * 1000:.0f} → {statistics.median(n[0] for n in new) * 1000:.0f} "
              f"| {ratio:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
