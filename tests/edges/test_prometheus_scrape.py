"""A real Prometheus (Debian's ``prometheus``, installed by ``make test``) scrapes a real broker.

The values Prometheus stores must be what the API says: jobs by state, and spend by team.
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

import httpx

REPO = Path(__file__).resolve().parents[2]
ADMIN = "prom-admin"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(predicate, timeout=40.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError("condition not met in time")


def test_a_real_prometheus_scrapes_what_the_api_says(tmp_path):
    binary = shutil.which("prometheus")
    assert binary, "Debian's prometheus is not installed (make test installs it)"
    bport, pport = _port(), _port()
    cfg = tmp_path / "broker.yaml"
    cfg.write_text("pools:\n  - {name: local, slots: 2, price_per_slot_hour: '0.36'}\ntick_seconds: 0.1\n")
    env = {**os.environ, "BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_ADMIN_TOKEN": ADMIN}
    broker = subprocess.Popen([sys.executable, "-m", "broker.cli", "serve", "--port", str(bport), "--config", str(cfg)],
                              env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "broker.log", "w"))
    (tmp_path / "prometheus.yml").write_text(f"""
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
scrape_configs:
  - job_name: spot-broker
    static_configs: [{{targets: ["127.0.0.1:{bport}"]}}]
""")
    prom = subprocess.Popen([binary, f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{pport}"],
                            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "prometheus.log", "w"))
    try:
        api = httpx.Client(base_url=f"http://127.0.0.1:{bport}", headers={"Authorization": f"Bearer {ADMIN}"})
        _wait(lambda: api.get("/v1/healthz").status_code == 200)
        ok = api.post("/v1/jobs", json={"name": "ok", "run": "sleep 1", "broker": {"budget_usd": 1}}).json()
        bad = api.post("/v1/jobs", json={"name": "bad", "run": "exit 2", "broker": {"budget_usd": 1}}).json()
        _wait(lambda: {api.get(f"/v1/jobs/{j['id']}").json()["state"] for j in (ok, bad)} == {"succeeded", "failed"})
        prometheus = httpx.Client(base_url=f"http://127.0.0.1:{pport}")

        def query(q):
            r = prometheus.get("/api/v1/query", params={"query": q}).json()
            return {tuple(sorted(x["metric"].items())): float(x["value"][1]) for x in r["data"]["result"]}

        # wait until a scrape after both jobs ended has landed
        _wait(lambda: query('broker_jobs{state="succeeded"}') and query('broker_jobs{state="failed"}')
              and sum(query('broker_jobs{state="failed"}').values()) == 1)
        assert _wait(lambda: query("up")).popitem()[1] == 1.0
        succeeded = query('sum(broker_jobs{state="succeeded"})')
        assert list(succeeded.values()) == [1.0]
        costs = api.get("/v1/costs", params={"period": "7d"}).json()
        want = sum(t["spent"]["micros"] for t in costs["by_team"])
        got = _wait(lambda: (v := query("sum(broker_spend_dollars_total)")) and round(list(v.values())[0] * 1e6) == want
                    and v)
        assert round(list(got.values())[0] * 1e6) == want > 0
    finally:
        for p in (prom, broker):
            p.send_signal(signal.SIGTERM)
        for p in (prom, broker):
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
