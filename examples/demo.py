"""`make demo`: the broker's promise, end to end, on the embedded defaults.

Starts `broker serve` (SQLite store, local launcher) in a fresh data dir under .demo/ with
examples/demo-config.yaml: an on-prem CPU pool and three SIMULATED cloud zones (local
processes priced like AWS g5.xlarge). Submits examples/train-spot.yaml — a real PyTorch
model that checkpoints as it trains — with a budget and a deadline. The broker puts it on
spot; the zone preempts it with a notice; the job saves, and resumes from that checkpoint
in another zone. The demo prints the timeline, the cost, and what on-demand would have cost.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / ".demo"
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def say(text: str) -> None:
    print(f"\n\033[1;36m==> {text}\033[0m", flush=True)


def broker(*args: str, env: dict, check: bool = True) -> subprocess.CompletedProcess:
    print(f"$ broker {' '.join(args)}", flush=True)
    return subprocess.run([str(BIN / "broker"), *args], env=env, cwd=ROOT, check=check)


def main() -> int:
    shutil.rmtree(DEMO, ignore_errors=True)
    DEMO.mkdir()
    port = free_port()
    env = {**os.environ, "BROKER_DATA_DIR": str(DEMO / "data"), "BROKER_URL": f"http://127.0.0.1:{port}",
           "BROKER_PORT": str(port), "COLUMNS": os.environ.get("COLUMNS", "140")}
    say(f"starting the broker on 127.0.0.1:{port} (SQLite in .demo/data, local launcher)")
    server = subprocess.Popen([str(BIN / "broker"), "serve", "--port", str(port), "--config",
                               str(ROOT / "examples/demo-config.yaml")], env=env, cwd=ROOT,
                              stdout=open(DEMO / "broker.log", "w"), stderr=subprocess.STDOUT)
    try:
        sys.path.insert(0, str(ROOT))
        from broker.client import BrokerClient, BrokerError

        deadline = time.monotonic() + 30
        while True:
            try:
                # the broker writes its admin token on first start; the CLI and client pick it up
                with BrokerClient(env["BROKER_URL"], _token(env)) as c:
                    c.health()
                break
            except (BrokerError, FileNotFoundError):
                if server.poll() is not None or time.monotonic() > deadline:
                    print((DEMO / "broker.log").read_text())
                    return 1
                time.sleep(0.2)

        say("submitting examples/train-spot.yaml: 1x A10G, budget $1.00, deadline 2 h")
        with BrokerClient(env["BROKER_URL"], _token(env)) as client:
            try:
                client.submit(_task(), budget="0.000001")
            except BrokerError as exc:
                print(f"(first, a budget that cannot cover it is refused: {exc.status} {exc.detail})")
            job = client.submit(_task(), idempotency_key="demo-train")
            quote = "; ".join(f"{t['tier']} {t['text']}" for t in job["quote"]["tiers"])
            print(f"accepted {job['id']}; estimates: {quote}")
            say("following its output: the zone sim-us-east-1a will preempt it 15 s in (10 s notice)")
            for text in client.follow_logs(job["id"]):
                sys.stdout.write(text)
                sys.stdout.flush()
            final = client.wait(job["id"], timeout=300)
            costs = client._call("GET", f"/v1/costs/jobs/{job['id']}")
            events = client.events(job["id"])
        say("the job's events")
        broker("events", job["id"], env={**env, "BROKER_TOKEN": _token(env)})
        say("timeline")
        _timeline(final, events)
        ok = final["state"] == "succeeded"
        say(f"job {final['state']}: spent {final['spent']['usd']} of a {final['budget']['usd']} budget; the same "
            f"attempts at on-demand prices: {costs['ondemand_equivalent']['usd']} (saved {costs['saving']['usd']})"
            + ("" if ok else " — see .demo/broker.log"))
        return 0 if ok else 1
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
        say("broker stopped")


def _token(env: dict) -> str:
    return (Path(env["BROKER_DATA_DIR"]) / "admin-token").read_text().strip()


def _task() -> dict:
    import yaml

    task = yaml.safe_load((ROOT / "examples/train-spot.yaml").read_text())
    task["workdir"] = str(ROOT)
    return task


def _timeline(job: dict, events: list[dict]) -> None:
    recovers = {e["attempt"]: e for e in events if e["event"] == "recover"}
    for a in job["attempt_list"]:
        p = a["placement"]
        where = f"{p['tier']} {p['instance_type']} in {p['zone']}" + (" (simulated)" if p.get("simulated") else "")
        resumed = ""
        if a["resume_from"]:
            resumed = f", resumed from {a['resume_from'].rsplit('/', 1)[-1]}"
        print(f"attempt {a['n']}: {where}, {a['price_per_hour']['usd']}/h{resumed}")
        print(f"    {a['started_at']} → {a['ended_at']}  {a['state']}, cost {a['cost']['usd']}")
        if a["n"] in recovers:
            data = recovers[a["n"]]["data"]
            print(f"    {recovers[a['n']]['reason']}; checkpoint at step {data.get('checkpoint_step')}, "
                  f"steps lost: {data.get('steps_lost', 'n/a')}")


if __name__ == "__main__":
    sys.exit(main())
