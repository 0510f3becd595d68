"""How fast a preempted job trains again elsewhere, and how many steps it loses.

    .venv/bin/python benchmarks/recovery.py [--runs 5] [--tick 1.0] [--state-mb 64]

Starts a real `broker serve` with two simulated spot zones (the first preempts attempt 1
a few seconds in, with a notice), runs a small training loop whose state is a
numpy array of --state-mb MiB checkpointed with the `checkpoint` library, and splits
the time from the preemption notice to the first training step in the new zone:

  save on notice  notice → attempt 1 exits (the script saves at the next step and commits)
  broker          attempt 1 exits → attempt 2 launched (notice seen, decided, placed, launched)
  launch          attempt 2 launched → its process starts
  restore         process start → state restored (imports + verified download)
  first step      restored → first step done

Medians over --runs preemptions; steps lost = last step trained before the notice's save
minus the step attempt 2 resumed from.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "bench-admin"

TRAINER = r'''
import sys, time
t0 = time.time()
import numpy as np
from checkpoint import Checkpointer
total, mb = int(sys.argv[1]), int(sys.argv[2])
ckpt = Checkpointer(every_steps=25)
state = ckpt.restore(default=None)
t_restored = time.time()
start = int(state["step"]) if state else 0
weights = state["w"] if state else np.zeros(mb * 1024 * 1024 // 8)
print(f"START {start} {t0:.6f} {t_restored:.6f}", flush=True)
for step in range(start + 1, total + 1):
    time.sleep(0.04)
    weights += 1.0
    print(f"STEP {step} {time.time():.6f}", flush=True)
    if ckpt.due(step):
        ckpt.save(step, {"step": step, "w": weights})
ckpt.close()
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_run(workdir: Path, tick: float, state_mb: int) -> dict:
    (workdir / "trainer.py").write_text(TRAINER)
    cfg = workdir / "config.yaml"
    cfg.write_text(f"""
pools: []
zones:
  - {{name: sim-a, tier: spot, instance_type: g5.xlarge, cloud_zone: us-east-1a, grace_seconds: 30,
     schedule: ["preempt attempt 1 at +4s"]}}
  - {{name: sim-b, tier: spot, instance_type: g5.xlarge, cloud_zone: us-east-1f, grace_seconds: 30}}
tick_seconds: {tick}
stop_grace_seconds: 30
""")
    port = free_port()
    env = {**os.environ, "BROKER_DATA_DIR": str(workdir / "data"), "BROKER_ADMIN_TOKEN": TOKEN}
    server = subprocess.Popen([sys.executable, "-m", "broker.cli", "serve", "--port", str(port), "--config", str(cfg)],
                              env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=open(workdir / "broker.log", "w"))
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {TOKEN}"})
    try:
        for _ in range(300):
            try:
                client.get("/v1/healthz")
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        job = client.post("/v1/jobs", json={
            "name": "bench", "resources": {"accelerators": "A10G:1"}, "workdir": str(workdir),
            "run": f"python trainer.py 400 {state_mb}", "broker": {"budget_usd": 5}}).json()
        while client.get(f"/v1/jobs/{job['id']}").json()["state"] not in ("succeeded", "failed"):
            time.sleep(0.2)
        events = client.get(f"/v1/jobs/{job['id']}/events").json()["events"]
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)
    runs = workdir / "data" / "runs"
    a1, a2 = runs / f"{job['id']}-a1", runs / f"{job['id']}-a2"
    notice = json.loads((a1 / "stop.json").read_text())["at"]
    exited = json.loads((a1 / "exit.json").read_text())["ended_at"]
    assert any(e["event"] == "launch" and e["attempt"] == 2 for e in events)
    launched_at = (a2 / "request.json").stat().st_mtime  # written by the launcher's launch() call
    log1 = (a1 / "output.log").read_text().split("\n")
    log2 = (a2 / "output.log").read_text().split("\n")
    start_line = next(line for line in log2 if line.startswith("START")).split()
    resumed_from, proc_start, restored = int(start_line[1]), float(start_line[2]), float(start_line[3])
    first_step = float(next(line for line in log2 if line.startswith("STEP")).split()[2])
    last_trained = max(int(line.split()[1]) for line in log1 if line.startswith("STEP"))
    return {
        "save on notice": exited - notice,
        "broker": launched_at - exited,
        "launch": proc_start - launched_at,
        "restore": restored - proc_start,
        "first step": first_step - restored,
        "total": first_step - notice,
        "steps lost": last_trained - resumed_from,
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--tick", type=float, default=1.0)
    ap.add_argument("--state-mb", type=int, default=64)
    args = ap.parse_args()
    results = []
    for i in range(args.runs):
        with tempfile.TemporaryDirectory() as d:
            results.append(one_run(Path(d), args.tick, args.state_mb))
        print(f"run {i + 1}: " + ", ".join(f"{k} {v:.3f}" if k != "steps lost" else f"{k} {v}"
                                           for k, v in results[-1].items()), flush=True)
    print(f"\nmedians over {args.runs} preemptions (engine tick {args.tick} s, state {args.state_mb} MiB, "
          f"local file checkpoints):\n")
    print("| phase | median s | share of total |")
    print("|---|---:|---:|")
    total = statistics.median(r["total"] for r in results)
    for key in ("save on notice", "broker", "launch", "restore", "first step", "total"):
        m = statistics.median(r[key] for r in results)
        print(f"| {key} | {m:.3f} | {m / total:.2f} |")
    print(f"| steps lost (max over runs) | {max(r['steps lost'] for r in results)} | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
