"""The reads that grow with every job stored, this checkout beside another (``--against``, a worktree of an earlier
commit): ``/metrics``' first scrape after a start (its time and the process's peak RSS), a later scrape, the cost
report of every team over 30 and 90 days, and the retention policy's read of a batch of jobs to delete.

    .venv/bin/python benchmarks/scale_reads.py --against /tmp/base [--jobs 20000] [--rounds 3] [--redis]

One store of ``--jobs`` jobs is made once (``tests/broker/cost_history.py``: five teams, on-prem, spot and on-demand
work on 1–4 nodes, 0–5 attempts each, records as the broker stores them, submitted over 120 days, about 4 % still
running or queued), in a SQLite file, or with ``--redis`` in a ``redis-server`` of the script's own on a free
loopback port. Then each measure runs in a fresh process that imports its checkout's own code (its root first on
``sys.path``; the script checks which it imported), the two checkouts alternately, ``--rounds`` times: the peak RSS
is that process's ``ru_maxrss``, less what it held before the read. The clock is the store's "now", fixed, so both
read the same windows; each cost report's JSON is compared between the checkouts (the script stops if they differ).
A cost report (its read, then the report) and the retention read are taken 3 times in their process, each
figure that process's median; a scrape once (the first after a start), then a later one. The table gives each
checkout's median over the rounds and the ratio this ÷ against.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from api import free_port, stop, wait_port  # noqa: E402

NOW = 1_796_000_000.0
"""The store's "now" (2026-11-29 UTC): the history is made up to it and every read is made at it."""

SEED = r'''
import sys, time
sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[1] + "/tests/broker")
from cost_history import history
from broker.store import open_store
store = open_store(sys.argv[2])
if sys.argv[2].startswith("sqlite"):
    store._db.execute("PRAGMA synchronous=OFF")  # seeding only: each measure opens the file afresh
history(store, int(sys.argv[3]), float(sys.argv[4]))
'''

CHILD = r'''
import hashlib, json, resource, statistics, sys, time
sys.path.insert(0, sys.argv[1])
from pathlib import Path
import broker
from broker import costs
from broker.api.metrics import StoreCollector
from broker.config import load_settings
from broker.service import BrokerService
from broker.store import open_store

url, what, now, d = sys.argv[2], sys.argv[3], float(sys.argv[4]), Path(sys.argv[5])
REPEAT = 3
settings = load_settings({"BROKER_DATA_DIR": str(d / "data"), "BROKER_ADMIN_TOKEN": "x" * 20,
                          "BROKER_STORE_URL": url}, config_path=d / "c.yaml")
store = open_store(url)
service = BrokerService(settings, store, clock=lambda: now)


def rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


out = {"imported": broker.__file__}
if what == "scrape":
    collector = StoreCollector(service, settings=settings)
    before = rss_mib()
    t = time.perf_counter()
    families = list(collector.collect())
    out["first_s"] = time.perf_counter() - t
    out["peak_mib"] = rss_mib() - before
    out["held_mib"] = int(open("/proc/self/statm").read().split()[1]) * resource.getpagesize() / 2**20
    t = time.perf_counter()
    list(collector.collect())
    out["later_s"] = time.perf_counter() - t
    out["jobs"] = sum(s.value for f in families if f.name == "broker_jobs" for s in f.samples)
elif what == "prune":
    times = []
    for _ in range(REPEAT):
        t = time.perf_counter()
        jobs = store.expired(before=now, limit=500)
        times.append(time.perf_counter() - t)
    out.update(expired_s=statistics.median(times), jobs=len(jobs))
else:
    win = costs.window(now=now, period=what)
    reads, reports = [], []
    for _ in range(REPEAT):  # (a read and its report, as an edge asks for them: the median of each)
        t = time.perf_counter()
        history = costs.gather(store, team=None, win=win)
        reads.append(time.perf_counter() - t)
        t = time.perf_counter()
        report = costs.report(history.jobs, history.attempts, win=win, now=now, positions={}, team=None,
                              ledger=history.ledger)
        reports.append(time.perf_counter() - t)
        out["jobs"] = len(history.jobs)
        del history
    out.update(read_s=statistics.median(reads), report_s=statistics.median(reports),
               total_s=statistics.median(a + b for a, b in zip(reads, reports)),
               digest=hashlib.sha256(json.dumps(report, sort_keys=True).encode()).hexdigest())
print(json.dumps(out))
'''


def child(root: Path, url: str, what: str, where: Path) -> dict:
    import json

    done = subprocess.run([sys.executable, "-c", CHILD, str(root), url, what, repr(NOW), str(where)],
                          capture_output=True, text=True, cwd="/tmp")
    if done.returncode:
        raise SystemExit(f"{root} {what}: {done.stderr[-2000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    if not out["imported"].startswith(str(root)):
        raise SystemExit(f"{root}: imported {out['imported']}, not its own code")
    return out


MEASURES = [  # (label, what the child runs, the figure it reports, its unit)
    ("first scrape", "scrape", "first_s", "s"),
    ("first scrape: peak RSS added", "scrape", "peak_mib", "MiB"),
    ("first scrape: RSS held after", "scrape", "held_mib", "MiB"),
    ("later scrape", "scrape", "later_s", "s"),
    ("cost report 30d: read", "30d", "read_s", "s"),
    ("cost report 30d: report", "30d", "report_s", "s"),
    ("cost report 30d: total", "30d", "total_s", "s"),
    ("cost report 90d: read", "90d", "read_s", "s"),
    ("cost report 90d: report", "90d", "report_s", "s"),
    ("cost report 90d: total", "90d", "total_s", "s"),
    ("retention: read of 500 jobs to delete", "prune", "expired_s", "s"),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", type=Path, required=True, help="a checkout of the commit to compare with")
    ap.add_argument("--jobs", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--redis", action="store_true", help="a redis-server of the script's own, not a SQLite file")
    args = ap.parse_args()
    where = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    (where / "c.yaml").write_text("pools:\n  - {name: a, slots: 4, price_per_slot_hour: '0.10'}\n")
    server = None
    try:
        if args.redis:
            if not shutil.which("redis-server"):
                print("redis-server not found on PATH (make test installs it)", file=sys.stderr)
                return 1
            port = free_port()
            server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir",
                                       str(where), "--save", "", "--appendonly", "no"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait_port(port, server)
            url = f"redis://127.0.0.1:{port}/0"
        else:
            url = f"sqlite://{where}/broker.db"
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", SEED, str(ROOT), url, str(args.jobs), repr(NOW)], check=True, cwd="/tmp")
        print(f"seeded {args.jobs} jobs in {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
        roots = {"this": ROOT, "against": args.against.resolve()}
        got: dict[tuple[str, str], list[dict]] = {}
        for i in range(args.rounds):
            for what in ("scrape", "30d", "90d", "prune"):
                order = ["this", "against"] if i % 2 == 0 else ["against", "this"]
                outs = {name: child(roots[name], url, what, where) for name in order}
                if "digest" in outs["this"] and outs["this"]["digest"] != outs["against"]["digest"]:
                    print(f"{what}: the two reports differ", file=sys.stderr)
                    return 1
                if outs["this"]["jobs"] != outs["against"]["jobs"]:
                    print(f"{what}: read {outs['this']['jobs']} jobs here, {outs['against']['jobs']} there",
                          file=sys.stderr)
                    return 1
                for name, out in outs.items():
                    got.setdefault((name, what), []).append(out)
            print(f"round {i + 1} of {args.rounds} done", file=sys.stderr, flush=True)
    finally:
        if server is not None:
            stop(server)
        shutil.rmtree(where, ignore_errors=True)
    store = "redis" if args.redis else "sqlite"
    print(f"{args.jobs} jobs stored ({store}), {args.rounds} rounds; medians; ratio = this ÷ against; each cost "
          "report identical in both\n")
    print("| measure | jobs read | this checkout | against | ratio |")
    print("|---|---:|---:|---:|---:|")
    for label, what, key, unit in MEASURES:
        this = statistics.median(o[key] for o in got[("this", what)])
        against = statistics.median(o[key] for o in got[("against", what)])
        jobs = got[("this", what)][0]["jobs"]
        fmt = ".0f" if unit == "MiB" else ".3f"
        print(f"| {label} | {jobs} | {this:{fmt}} {unit} | {against:{fmt}} {unit} | {this / against:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
