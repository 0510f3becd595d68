"""The first ``/metrics`` read of the store after a start (``StoreCollector._refresh``), which reads every job:
its time and its peak of traced Python memory, this checkout beside another (``--against``, a worktree of an
earlier commit).

    .venv/bin/python benchmarks/metrics_scrape.py --against /tmp/base [--jobs 10000] [--rounds 2]

One SQLite store of ``--jobs`` queued jobs (each about 1.5 KB stored: a 500-character run line and 20 envs) is made
once, then read by each checkout in a fresh process importing its own code (the script checks which it imported),
alternately, ``--rounds`` times. Memory is ``tracemalloc``'s peak over the read: what the read holds at once,
not the allocator's RSS, which the machine's other work moves.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r'''
import sys, time, tracemalloc
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from broker.api.metrics import StoreCollector
from broker.auth import Principal
from broker.config import load_settings
from broker.service import BrokerService
from broker.store import open_store

d = Path(sys.argv[3])
settings = load_settings({"BROKER_DATA_DIR": str(d / "data"), "BROKER_ADMIN_TOKEN": "x" * 20,
                          "BROKER_STORE_URL": f"sqlite://{d}/b.db"}, config_path=d / "c.yaml")
store = open_store(settings.store_url)
service = BrokerService(settings, store)
if sys.argv[4] == "make":
    admin = Principal("admin", None, admin=True)
    for i in range(int(sys.argv[2])):
        service.submit(admin, {"name": f"j{i}", "run": "echo " + "x" * 500, "resources": {"cpus": 1},
                               "envs": {f"E{k}": "v" * 20 for k in range(20)}, "broker": {"budget_usd": 5}})
    raise SystemExit(0)
collector = StoreCollector(service, settings=settings)
tracemalloc.start()
t0 = time.perf_counter()
collector._refresh()
seconds = time.perf_counter() - t0
import broker
print(seconds, tracemalloc.get_traced_memory()[1], broker.__file__)
'''


def run(root: Path, jobs: int, where: Path, what: str = "read") -> tuple[float, int]:
    out = subprocess.run([sys.executable, "-c", CHILD, str(root), str(jobs), str(where), what], capture_output=True,
                         text=True, check=True, cwd="/tmp").stdout.split()
    if what == "make":
        return 0.0, 0
    if not out[2].startswith(str(root)):
        raise SystemExit(f"{root}: imported {out[2]}, not its own code")
    return float(out[0]), int(out[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", type=Path, required=True, help="a checkout of the commit to compare with")
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    where = Path(tempfile.mkdtemp())
    (where / "c.yaml").write_text("pools:\n  - {name: a, slots: 4, price_per_slot_hour: '0.10'}\n")
    run(ROOT, args.jobs, where, "make")
    got: dict[str, list[tuple[float, int]]] = {"this": [], "against": []}
    for i in range(args.rounds):
        order = [("this", ROOT), ("against", args.against.resolve())]
        for name, root in order if i % 2 == 0 else reversed(order):
            got[name].append(run(root, args.jobs, where))
    med = {k: (statistics.median(t for t, _ in v), statistics.median(m for _, m in v)) for k, v in got.items()}
    print(f"{args.jobs} jobs stored, {args.rounds} rounds (medians; ratio = this ÷ against)\n")
    print("| measure | this checkout | against | ratio |")
    print("|---|---:|---:|---:|")
    print(f"| first read, s | {med['this'][0]:.2f} | {med['against'][0]:.2f} | {med['this'][0] / med['against'][0]:.2f} |")
    print(f"| traced peak, MiB | {med['this'][1] / 2**20:.0f} | {med['against'][1] / 2**20:.0f} | "
          f"{med['this'][1] / med['against'][1]:.2f} |")


if __name__ == "__main__":
    main()
