"""One engine tick, and one read of the queue's estimates, with thousands of jobs queued: this checkout side by side
with another (``--against``, a clone or worktree of an earlier commit).

    .venv/bin/python benchmarks/engine_tick.py --against /tmp/base [--queued 3000] [--rounds 2]

Each measurement runs in a fresh process that imports the checkout's own code (its root first on ``sys.path``), on
a fresh SQLite file: two pools of 4 A100 slots, ``--queued`` jobs submitted (every tenth asks for 2 GPUs, the rest
for 1; expected 1–3 h), then two ticks to fill the pools. The figures are the medians of 7 ticks and of 5
``queue_waits`` reads. The launcher is a stand-in that keeps every launch running (named as such: no process is
started), so the tick measures the broker's own work — reads, the schedule, the commits — not process starts.
The checkouts run alternately, ``--rounds`` times; the table gives each one's median over rounds and the ratio.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r'''
import statistics, sys, tempfile, time
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from broker.auth import Principal
from broker.config import load_settings
from broker.engine.reconcile import Engine
from broker.service import BrokerService
from broker.store import open_store
from launchers.base import AttemptStatus, Capabilities, Phase


class KeepsRunning:
    """A stand-in launcher (no process): every launch runs until stopped."""
    name = "stand-in"
    domain = "stand-in:1"
    capabilities = Capabilities(simulated=True)

    def __init__(self):
        self.live = set()

    def launch(self, request):
        self.live.add(request.attempt_id)

    def status(self, attempt_id):
        if attempt_id in self.live:
            return AttemptStatus(Phase.RUNNING, started_at=time.time())
        return AttemptStatus(Phase.GONE)

    def stop(self, attempt_id, **kw):
        self.live.discard(attempt_id)

    def logs(self, attempt_id, *, offset=0, limit=1 << 20):
        return b"", offset


queued = int(sys.argv[2])
d = Path(tempfile.mkdtemp())
(d / "c.yaml").write_text("pools:\n"
                          "  - {name: a, slots: 4, accelerator: A100, price_per_slot_hour: '0.10'}\n"
                          "  - {name: b, slots: 4, accelerator: A100, price_per_slot_hour: '0.20'}\n"
                          "tick_seconds: 1\n")
settings = load_settings({"BROKER_DATA_DIR": str(d / "data"), "BROKER_ADMIN_TOKEN": "x" * 20,
                          "BROKER_STORE_URL": f"sqlite://{d}/b.db"}, config_path=d / "c.yaml")
store = open_store(settings.store_url)
launcher = KeepsRunning()
service = BrokerService(settings, store, launcher)
admin = Principal("admin", None, admin=True)
for i in range(queued):
    gpus = 2 if i % 10 == 5 else 1
    service.submit(admin, {"name": f"j{i}", "run": "sleep 3600", "resources": {"accelerators": f"A100:{gpus}"},
                           "broker": {"budget_usd": 50, "expected_hours": 1 + i % 3}})
engine = Engine(settings, store, launcher)
engine.tick()
engine.tick()
ticks, reads = [], []
for _ in range(7):
    t0 = time.perf_counter()
    engine.tick()
    ticks.append(time.perf_counter() - t0)
for _ in range(5):
    t0 = time.perf_counter()
    service.queue_waits(admin)
    reads.append(time.perf_counter() - t0)
import broker
print(statistics.median(ticks), statistics.median(reads), broker.__file__)
'''


def run(root: Path, queued: int) -> tuple[float, float]:
    out = subprocess.run([sys.executable, "-c", CHILD, str(root), str(queued)], capture_output=True, text=True,
                         check=True, cwd="/tmp").stdout.split()
    if not out[2].startswith(str(root)):
        raise SystemExit(f"{root}: imported {out[2]}, not its own code")
    return float(out[0]), float(out[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", type=Path, required=True, help="a checkout of the commit to compare with")
    ap.add_argument("--queued", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    got: dict[str, list[tuple[float, float]]] = {"this": [], "against": []}
    for i in range(args.rounds):
        order = [("this", ROOT), ("against", args.against.resolve())]
        for name, root in order if i % 2 == 0 else reversed(order):
            got[name].append(run(root, args.queued))
    med = {k: (statistics.median(t for t, _ in v), statistics.median(r for _, r in v)) for k, v in got.items()}
    print(f"{args.queued} queued, {args.rounds} rounds (medians; ratio = this ÷ against)\n")
    print("| measure | this checkout (s) | against (s) | ratio |")
    print("|---|---:|---:|---:|")
    for i, what in enumerate(("engine tick", "queue_waits read")):
        print(f"| {what} | {med['this'][i]:.3f} | {med['against'][i]:.3f} | {med['this'][i] / med['against'][i]:.2f} |")


if __name__ == "__main__":
    main()
