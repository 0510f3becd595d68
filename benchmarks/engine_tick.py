"""One engine tick, and one read of the queue's estimates, with thousands of jobs queued: this checkout side by side
with another (``--against``, a clone or worktree of an earlier commit).

    .venv/bin/python benchmarks/engine_tick.py --against /tmp/base [--queued 3000] [--rounds 2]

Each measurement runs in a fresh process that imports the checkout's own code (its root first on ``sys.path``), on
a fresh SQLite file: two pools of 4 A100 slots, ``--queued`` jobs submitted (every tenth asks for 2 GPUs, the rest
for 1; expected 1–3 h), then two ticks to fill the pools. The figures are the medians of 7 ticks and of 5
``queue_waits`` reads; then 5 reads more with the jobs already read (the store's ``list_jobs`` answering from memory:
the estimate's own work, without the store's decoding of every job, which is most of a read and not the estimate's).
The launcher is a stand-in that keeps every launch running (named as such: no process is started), so the tick
measures the broker's own work — reads, the schedule, the commits — not process starts.
A third row times the estimate alone (``broker.queue.waits``, median of 5) on a queue the store run does not make:
``--queued`` jobs waiting over 20 zones and 2 pools that 400 running jobs hold, each job one of six shapes of what it
may use — the store run has 8 slots, and so few ends to look through. The checkouts run alternately, ``--rounds``
times; the table gives each one's median over rounds and the ratio.

The clock is fixed (each submit and each tick one second on), so both checkouts are asked the same questions at the
same times: each prints a digest of its answers — every queued job's position, estimate and words after the ticks,
each job's state, reason and place, the estimate-alone run's starts and holders — and the last line says whether the
checkouts' digests are the same: a change meant only to be faster must answer the same.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r'''
import hashlib, json, random, re, statistics, sys, tempfile, time
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from broker.auth import Principal
from broker.config import load_settings
from broker.engine.reconcile import Engine
from broker.lifecycle import JobState
from broker.models import Job
from broker.queue import waits
from broker.service import BrokerService
from broker.store import open_store
from launchers.base import AttemptStatus, Capabilities, Phase

NOW = [1_790_000_000.0]  # the clock of the service, the engine and the stand-in: the same times in each checkout


def clock():
    return NOW[0]


class KeepsRunning:
    """A stand-in launcher (no process): every launch runs until stopped."""
    name = "stand-in"
    domain = "stand-in:1"
    capabilities = Capabilities(simulated=True)

    def __init__(self):
        self.live = {}

    def launch(self, request):
        self.live[request.attempt_id] = clock()

    def status(self, attempt_id):
        if attempt_id in self.live:
            return AttemptStatus(Phase.RUNNING, started_at=self.live[attempt_id])
        return AttemptStatus(Phase.GONE)

    def stop(self, attempt_id, **kw):
        self.live.pop(attempt_id, None)

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
service = BrokerService(settings, store, launcher, clock=clock)
admin = Principal("admin", None, admin=True)
for i in range(queued):
    NOW[0] += 1
    gpus = 2 if i % 10 == 5 else 1
    service.submit(admin, {"name": f"j{i}", "run": "sleep 3600", "resources": {"accelerators": f"A100:{gpus}"},
                           "broker": {"budget_usd": 50, "expected_hours": 1 + i % 3}})
engine = Engine(settings, store, launcher, clock=clock)
for _ in range(2):
    NOW[0] += 1
    engine.tick()
ticks, reads = [], []
for _ in range(7):
    NOW[0] += 1
    t0 = time.perf_counter()
    engine.tick()
    ticks.append(time.perf_counter() - t0)
for _ in range(5):
    t0 = time.perf_counter()
    q = service.queue_waits(admin)
    reads.append(time.perf_counter() - t0)
# the same read with the jobs already read: the estimate's own work, without the store's decoding of every job
live = store.list_jobs(states=["queued", "placed", "launching", "running", "cancelling", "stopping"], limit=100_000)
store.list_jobs, list_jobs = (lambda *a, **k: list(live)), store.list_jobs
own = []
for _ in range(5):
    t0 = time.perf_counter()
    q_own = service.queue_waits(admin)
    own.append(time.perf_counter() - t0)
store.list_jobs = list_jobs
if (q_own.positions, q_own.starts, q_own.waiting) != (q.positions, q.starts, q.waiting):
    raise SystemExit("the read of jobs already read answered otherwise")

# the answers, by job name (ids are random): what the checkouts must agree on
jobs = store.list_jobs(limit=100_000)
names = {j.id: j.name for j in jobs}
named = lambda text: re.sub(r"j-[0-9a-f]{10}", lambda m: names.get(m.group(0), m.group(0)), text)
answers = {"queue": sorted((names[i], p, q.starts.get(i), named(q.waiting.get(i, ""))) for i, p in q.positions.items()),
           "jobs": sorted((j.name, j.state.value, named(j.reason), j.placement.get("location"), len(j.slots))
                          for j in jobs)}

# the estimate alone, on a queue over many locations
rng = random.Random(1)
places = [f"z{i:02d}" for i in range(20)] + ["pa", "pb"]
holding = [Job(id=f"h{i}", name=f"h{i}", team="t", state=JobState.RUNNING, spec={}, budget=1, priority=0,
               submitted_at=NOW[0] - 9000, updated_at=NOW[0], expected_hours=rng.choice(["1", "2", "4"]),
               running_since=NOW[0] - rng.randint(0, 3600), placement={"location": rng.choice(places)},
               slots=[0] * rng.choice([0, 1, 2])) for i in range(400)]
waiting = [Job(id=f"q{i}", name=f"q{i}", team="t", state=JobState.QUEUED, spec={}, budget=1,
               priority=rng.choice([0, 0, 1]), submitted_at=NOW[0] - 5000 + i, updated_at=NOW[0],
               expected_hours=rng.choice([None, "0.5", "1", "2", "3"]), reason="waiting: pool pa is full for it")
           for i in range(queued)]
shapes = [{p: rng.choice([1, 2]) for p in rng.sample(places, rng.randint(1, 8))} for _ in range(6)]
shape = {j.id: shapes[k % 6] for k, j in enumerate(waiting)}
alone = []
for _ in range(5):
    t0 = time.perf_counter()
    found = waits(holding + waiting, NOW[0], lambda j: shape[j.id], {p: 1 for p in places[::3]}, kept_in={"pa", "pb"})
    alone.append(time.perf_counter() - t0)
answers["alone"] = [sorted(found.starts.items()), sorted((k, [h.job_id for h in v]) for k, v in found.holders.items())]
import broker
digest = hashlib.sha256(json.dumps(answers, sort_keys=True).encode()).hexdigest()
print(statistics.median(ticks), statistics.median(reads), statistics.median(own), statistics.median(alone), digest,
      broker.__file__)
'''

MEASURES = ("engine tick", "queue_waits read", "queue_waits read, jobs already read",
            "estimate alone (20 zones, 2 pools, 400 running)")


def run(root: Path, queued: int) -> tuple[float, ...]:
    """One checkout's medians, in the order of :data:`MEASURES`, then its answers' digest."""
    out = subprocess.run([sys.executable, "-c", CHILD, str(root), str(queued)], capture_output=True, text=True,
                         check=True, cwd="/tmp").stdout.split()
    if not out[-1].startswith(str(root)):
        raise SystemExit(f"{root}: imported {out[-1]}, not its own code")
    return (*map(float, out[:len(MEASURES)]), out[len(MEASURES)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", type=Path, required=True, help="a checkout of the commit to compare with")
    ap.add_argument("--queued", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    got: dict[str, list[tuple]] = {"this": [], "against": []}
    for i in range(args.rounds):
        order = [("this", ROOT), ("against", args.against.resolve())]
        for name, root in order if i % 2 == 0 else reversed(order):
            got[name].append(run(root, args.queued))
    med = {k: [statistics.median(r[m] for r in v) for m in range(len(MEASURES))] for k, v in got.items()}
    print(f"{args.queued} queued, {args.rounds} rounds (medians; ratio = this ÷ against)\n")
    print("| measure | this checkout (s) | against (s) | ratio |")
    print("|---|---:|---:|---:|")
    for i, what in enumerate(MEASURES):
        print(f"| {what} | {med['this'][i]:.3f} | {med['against'][i]:.3f} | {med['this'][i] / med['against'][i]:.2f} |")
    digests = {r[len(MEASURES)] for v in got.values() for r in v}
    print("\nsame answers in both checkouts (positions, estimates, words; states, reasons, places; the estimate "
          f"alone's): {'yes' if len(digests) == 1 else 'NO: ' + ', '.join(sorted(digests))}")


if __name__ == "__main__":
    main()
