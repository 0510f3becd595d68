"""`make demo`: a real training job through the broker, end to end, on the embedded defaults.

Starts `broker serve` (SQLite store, local launcher) in a fresh data dir under .demo/,
submits examples/train.yaml (a small PyTorch model that checkpoints as it trains),
follows it to the end, prints its events, attempts and cost, and stops the broker.
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
    server = subprocess.Popen([str(BIN / "broker"), "serve", "--port", str(port)], env=env, cwd=ROOT,
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

        say("submitting examples/train.yaml with a $1.00 budget and a 2 h deadline")
        with BrokerClient(env["BROKER_URL"], _token(env)) as client:
            over = None
            try:
                client.submit((ROOT / "examples/train.yaml").read_text(), budget="0.000001")
            except BrokerError as exc:
                over = exc
            print(f"(first, a budget that cannot cover it is refused: {over.status} {over.detail})")
            job = client.submit(_with_workdir(), idempotency_key="demo-train")
            print(f"accepted {job['id']}: estimate {job['quote']['tiers'][0]['text']} on "
                  f"{job['quote']['tiers'][0]['offer']}")
            say("following its output (training a small PyTorch MLP on generated data)")
            for text in client.follow_logs(job["id"]):
                sys.stdout.write(text)
                sys.stdout.flush()
            final = client.wait(job["id"], timeout=300)
        say("the job's events")
        broker("events", job["id"], env={**env, "BROKER_TOKEN": _token(env)})
        say("the job, its attempts and its cost")
        broker("status", job["id"], env={**env, "BROKER_TOKEN": _token(env)})
        ok = final["state"] == "succeeded"
        say(f"job {final['state']}; spent {final['spent']['usd']} of a {final['budget']['usd']} budget"
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


def _with_workdir() -> dict:
    import yaml

    task = yaml.safe_load((ROOT / "examples/train.yaml").read_text())
    task["workdir"] = str(ROOT)
    return task


if __name__ == "__main__":
    sys.exit(main())
