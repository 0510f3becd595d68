"""Reads of a queued job with hundreds queued, one reader or ten at once: the queue worked out for every read (the
old path, ``queue_waits(..., fresh=True)``) beside the shared one (``queue_waits``), in one process, one store.

    .venv/bin/python benchmarks/queue_reads.py [--queued 300,1100] [--readers 1,10] [--reads 30] [--rounds 3]

For each ``--queued`` N, a fresh SQLite file: a pool of 8 A100 slots held by 8 running jobs (expected 2 h), and N
jobs submitted behind them, waiting for the pool (as the scheduler's reason says: each gets a start estimate). A
read is what ``GET /v1/jobs/{id}`` does, in process (no HTTP): the job read, its place and estimate
(``queue_waits(caller, of=[job])``), its view; of a queued job picked at random. ``--readers`` threads read at once,
``--reads`` reads in all (each reader its share); the figure is the median of every read's time over the rounds,
and the process's CPU time per read. Three ways, in turn each round: ``old`` (worked out for each read), ``new``
(shared, nothing changing: the reuse lasts ``QUEUE_REUSE_SECONDS`` at most) and ``new, changing`` (shared, while a
writer commits a change to a queued job every 0.25 s, as the engine's tick moves versions on: what a live broker
reuses less). The last line checks that the shared answer equals the one worked out afresh, on a fixed clock.
The machine these ran on is shared with other work and noisy: compare the ratios, not the times.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from broker.auth import Principal  # noqa: E402
from broker.config import load_settings  # noqa: E402
from broker.lifecycle import JobState  # noqa: E402
from broker.service import BrokerService  # noqa: E402
from broker.store import Change, open_store  # noqa: E402
from broker.views import job_view  # noqa: E402

ADMIN = Principal("admin", None, admin=True)
SLOTS = 8
FULL = "waiting: the pool dgx is full right now"
MODES = ("old", "new", "new, changing")


def seeded(queued: int, d: Path):
    """A service on a fresh store of ``SLOTS`` running jobs and ``queued`` waiting behind them; the queued ids."""
    (d / "c.yaml").write_text(f"pools: [{{name: dgx, slots: {SLOTS}, accelerator: A100, "
                              "price_per_slot_hour: '1.10'}]\n")
    settings = load_settings({"BROKER_DATA_DIR": str(d / "data"), "BROKER_ADMIN_TOKEN": "x" * 20},
                             config_path=d / "c.yaml")
    store = open_store(f"sqlite://{d / 'q.db'}")
    clock = [time.time() - 600]
    seeding = BrokerService(settings, store, clock=lambda: clock[0])
    task = {"run": "sleep 600", "resources": {"accelerators": "A100:1"},
            "broker": {"budget_usd": "50", "expected_hours": 1}}
    jobs = []
    for _ in range(SLOTS + queued):
        jobs.append(seeding.submit(ADMIN, task)[0])
        clock[0] += 0.01
    placement = {"tier": "onprem", "location": "dgx", "zone": "dgx", "instance_type": "dgx-1slot", "num_nodes": 1}
    for slot, job in enumerate(jobs[:SLOTS]):
        store.commit(Change(job=replace(job, state=JobState.RUNNING, placement=placement, slots=[slot],
                                        running_since=clock[0] - 300 * slot, expected_hours="2",
                                        reason="the attempt started"), expected_version=job.version))
    for job in jobs[SLOTS:]:
        store.commit(Change(job=replace(job, reason=FULL), expected_version=job.version))
    return settings, store, [job.id for job in jobs[SLOTS:]]


def read(service: BrokerService, job_id: str, old: bool) -> dict:
    """What ``GET /v1/jobs/{id}`` does, but its attempts."""
    job = service.get(ADMIN, job_id)
    q = service.queue_waits(ADMIN, of=[job], fresh=old)
    return job_view(job, position=q.positions.get(job.id), estimated_start=q.starts.get(job.id),
                    waiting=q.waiting.get(job.id))


def measure(service: BrokerService, store, ids: list[str], mode: str, readers: int, reads: int) -> tuple[list, float]:
    """Each read's seconds and the CPU seconds per read, ``readers`` at once, ``reads`` in all."""
    service._queue_last = None  # the first read pays, as after any change
    each = max(1, reads // readers)
    times: list[float] = []
    start, done = threading.Barrier(readers + 1), threading.Event()

    def reader(seed: int) -> None:
        pick = random.Random(seed)
        start.wait()
        for _ in range(each):
            t = time.perf_counter()
            view = read(service, pick.choice(ids), mode == "old")
            times.append(time.perf_counter() - t)
            assert view["queue_position"] is not None

    def writer() -> None:
        pick = random.Random(0)
        while not done.wait(0.25):
            job = store.get_job(pick.choice(ids))
            store.commit(Change(job=replace(job, updated_at=job.updated_at + 0.001), expected_version=job.version))

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(readers)]
    for t in threads:
        t.start()
    changer = threading.Thread(target=writer) if mode == "new, changing" else None
    cpu = time.process_time()
    start.wait()
    if changer:
        changer.start()
    for t in threads:
        t.join()
    cpu = time.process_time() - cpu
    done.set()
    if changer:
        changer.join()
    return times, cpu / (each * readers)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queued", default="300,1100")
    ap.add_argument("--readers", default="1,10")
    ap.add_argument("--reads", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    rows, same = [], True
    for n in (int(x) for x in args.queued.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            settings, store, ids = seeded(n, Path(tmp))
            service = BrokerService(settings, store)
            fixed = time.time()
            check = BrokerService(settings, store, clock=lambda: fixed)
            same &= check.queue_waits(ADMIN) == check.queue_waits(ADMIN, fresh=True)
            for k in (int(x) for x in args.readers.split(",")):
                got: dict[str, tuple[list, list]] = {m: ([], []) for m in MODES}
                for r in range(args.rounds):
                    for mode in MODES[r % 3:] + MODES[:r % 3]:  # each first in turn
                        times, cpu = measure(service, store, ids, mode, k, args.reads)
                        got[mode][0].extend(times)
                        got[mode][1].append(cpu)
                med = {m: statistics.median(got[m][0]) for m in MODES}
                cpu = {m: statistics.median(got[m][1]) for m in MODES}
                rows.append((n, k, med, cpu))
                print(f"  {n} queued, {k} reader(s): " + ", ".join(f"{m} {med[m] * 1000:.1f} ms" for m in MODES),
                      file=sys.stderr, flush=True)
            store.close()
    print("| queued | readers | old ms | new ms | old ÷ new | new, changing ms | old ÷ new, changing "
          "| CPU ms/read old | new | new, changing |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n, k, med, cpu in rows:
        print(f"| {n} | {k} | {med['old'] * 1000:.1f} | {med['new'] * 1000:.1f} | {med['old'] / med['new']:.1f}× "
              f"| {med['new, changing'] * 1000:.1f} | {med['old'] / med['new, changing']:.1f}× "
              f"| {cpu['old'] * 1000:.1f} | {cpu['new'] * 1000:.1f} | {cpu['new, changing'] * 1000:.1f} |")
    print(f"shared answer equals the one worked out afresh: {'yes' if same else 'NO'}")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
