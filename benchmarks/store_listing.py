"""The SQLite store's job listings over a long history: the statements and indexes before, and now.

    .venv/bin/python benchmarks/store_listing.py [--jobs 100000] [--repeat 5]

Seeds ``--jobs`` jobs (``tests/broker/cost_history.py``: five teams, 0–5 attempts each, stored as the broker stores
them) submitted over the last year into a fresh SQLite file, then copies the file and gives the copy the indexes
of before (``jobs_state`` on state alone, ``jobs_team`` on (team, submitted_at), no ``jobs_submitted``). Side by
side in one run, each listing is timed:

* **before**: the statement the store sent before, on the copy (``state NOT IN final OR updated_at >= T`` for
  "running or updated since T"; a join of attempts to jobs for the cost report), its rows decoded as the store
  decodes them; the cost report by the store's own method on the copy, whose plan is the one of before;
* **now**: the store's own method on the seeded file.

Both must return the same jobs. Medians over ``--repeat`` rounds, the two interleaved; the ratio is before ÷ now
per round, then the median. Who sends each listing: the list of every team's jobs is `broker status` and the
dashboard's job list; "running or updated since now" is each scrape of /metrics; the 7-day cost report is the
dashboard's cost view, `broker costs` and Slack `costs`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "broker"))

from cost_history import history  # noqa: E402

from broker.models import Job  # noqa: E402
from broker.store import open_store  # noqa: E402
import broker.store.sqlite as sqlite_store  # noqa: E402
from broker.store.sqlite import FINAL  # noqa: E402

DAY = 86_400
OLD_INDEXES = """
DROP INDEX IF EXISTS jobs_state_time;
DROP INDEX IF EXISTS jobs_team_time;
DROP INDEX IF EXISTS jobs_submitted;
CREATE UNIQUE INDEX IF NOT EXISTS jobs_idem ON jobs(team, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state);
CREATE INDEX IF NOT EXISTS jobs_team ON jobs(team, submitted_at);
CREATE INDEX IF NOT EXISTS jobs_updated ON jobs(updated_at);
CREATE INDEX IF NOT EXISTS attempts_job ON attempts(job_id, n);
"""


def _open_before(path: Path):
    """The store on ``path`` with the indexes of before: its cost report's statement is the one of before but for
    unary ``+``s, which only keep the planner off indexes this file does not have, so it runs the plan of before."""
    saved, sqlite_store.INDEXES = sqlite_store.INDEXES, OLD_INDEXES
    try:
        return open_store(f"sqlite://{path}")
    finally:
        sqlite_store.INDEXES = saved


def _old_list(db, *, states=None, team=None, limit=1000, active_since=None) -> list[str]:
    sql, args = "SELECT body FROM jobs WHERE 1=1", []
    if states:
        sql += f" AND state IN ({','.join('?' * len(states))})"
        args += list(states)
    if team:
        sql += " AND team = ?"
        args.append(team)
    if active_since is not None:
        sql += f" AND (state NOT IN ({','.join('?' * len(FINAL))}) OR updated_at >= ?)"
        args += [*FINAL, active_since]
    sql += " ORDER BY submitted_at DESC, id DESC LIMIT ?"
    args.append(limit)
    return [Job.from_dict(json.loads(r[0])).id for r in db.execute(sql, args).fetchall()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    now = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        path, old_path = Path(tmp) / "now.db", Path(tmp) / "before.db"
        t0 = time.perf_counter()
        store = open_store(f"sqlite://{path}")
        history(store, args.jobs, now, days=365)
        store.close()
        shutil.copy(path, old_path)
        old_store = _open_before(old_path)
        old = old_store._db
        print(f"seeded {args.jobs} jobs over 365 days in {time.perf_counter() - t0:.0f} s")
        store = open_store(f"sqlite://{path}")
        cases = [
            ("every team's newest 200 (`broker status`, dashboard)",
             lambda: _old_list(old, limit=200), lambda: [j.id for j in store.list_jobs(limit=200)]),
            ("a team's newest 200",
             lambda: _old_list(old, team="nlp", limit=200), lambda: [j.id for j in store.list_jobs(team="nlp", limit=200)]),
            ("newest 200 succeeded",
             lambda: _old_list(old, states=["succeeded"], limit=200),
             lambda: [j.id for j in store.list_jobs(states=["succeeded"], limit=200)]),
            ("running or updated since now (/metrics)",
             lambda: _old_list(old, active_since=now, limit=10**9),
             lambda: [j.id for j in store.list_jobs(active_since=now, limit=10**9)]),
            ("cost report, 7 days",
             lambda: [j.id for j in old_store.cost_history(team=None, since=now - 7 * DAY, until=now)[0]],
             lambda: [j.id for j in store.cost_history(team=None, since=now - 7 * DAY, until=now)[0]]),
            ("cost report, 90 days",
             lambda: [j.id for j in old_store.cost_history(team=None, since=now - 90 * DAY, until=now)[0]],
             lambda: [j.id for j in store.cost_history(team=None, since=now - 90 * DAY, until=now)[0]]),
        ]
        print(f"\n{args.jobs} jobs, medians of {args.repeat} rounds\n")
        print("| listing | rows | before ms | now ms | before ÷ now |")
        print("|---|---:|---:|---:|---:|")
        for name, before, after in cases:
            times_b, times_a, ratios = [], [], []
            for _ in range(args.repeat):
                t = time.perf_counter()
                rows_b = before()
                tb = time.perf_counter() - t
                t = time.perf_counter()
                rows_a = after()
                ta = time.perf_counter() - t
                assert rows_b == rows_a, f"{name}: the two listings differ"
                times_b.append(tb)
                times_a.append(ta)
                ratios.append(tb / ta)
            print(f"| {name} | {len(rows_a)} | {statistics.median(times_b) * 1000:.1f} | "
                  f"{statistics.median(times_a) * 1000:.1f} | {statistics.median(ratios):.1f}× |")
        store.close()
        old_store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
