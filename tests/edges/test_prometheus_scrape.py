"""A real Prometheus (Debian's ``prometheus``, installed by ``make test``) scrapes a real broker.

The values Prometheus stores must be what the API says: jobs by state, and spend by team.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
from testports import free_port

REPO = Path(__file__).resolve().parents[2]
ADMIN = "prom-admin"


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
    bport, pport = free_port(), free_port()
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
        # (both counts: a scrape taken between the two jobs' ends, on a loaded host, has the failed one alone)
        _wait(lambda: sum(query('broker_jobs{state="succeeded"}').values()) == 1
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


def test_the_grafana_dashboard_counts_each_job_once_when_prometheus_scrapes_several_brokers(tmp_path):
    """Every broker sharing a store reports the same store-derived totals; the dashboard's queries take one
    copy per series (``max without (instance)``) before summing, and each of them is valid PromQL that a
    real Prometheus evaluates."""
    import json

    binary = shutil.which("prometheus")
    assert binary, "Debian's prometheus is not installed (make test installs it)"
    ports, pport = [free_port(), free_port()], free_port()
    cfg = tmp_path / "broker.yaml"
    cfg.write_text("pools:\n  - {name: local, slots: 2, price_per_slot_hour: '0.36'}\ntick_seconds: 0.1\n")
    env = {**os.environ, "BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_ADMIN_TOKEN": ADMIN}
    brokers = [subprocess.Popen([sys.executable, "-m", "broker.cli", "serve", "--port", str(port), "--config", str(cfg),
                                 *(["--no-engine"] if i else [])],
                                env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=open(tmp_path / f"b{i}.log", "w"))
               for i, port in enumerate(ports)]
    targets = ", ".join(f'"127.0.0.1:{p}"' for p in ports)
    (tmp_path / "prometheus.yml").write_text(f"""
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
scrape_configs:
  - job_name: spot-broker
    static_configs: [{{targets: [{targets}]}}]
""")
    prom = subprocess.Popen([binary, f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{pport}"],
                            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "prometheus.log", "w"))
    try:
        apis = [httpx.Client(base_url=f"http://127.0.0.1:{p}", headers={"Authorization": f"Bearer {ADMIN}"})
                for p in ports]
        for api in apis:
            _wait(lambda api=api: api.get("/v1/healthz").status_code == 200)
        jobs = [apis[0].post("/v1/jobs", json={"name": f"j{i}", "run": "sleep 0.5", "broker": {"budget_usd": 1}}).json()
                for i in range(3)]
        _wait(lambda: all(apis[1].get(f"/v1/jobs/{j['id']}").json()["state"] == "succeeded" for j in jobs))
        prometheus = httpx.Client(base_url=f"http://127.0.0.1:{pport}")

        def query(q):
            r = prometheus.get("/api/v1/query", params={"query": q}).json()
            assert r["status"] == "success", (q, r)
            return [float(x["value"][1]) for x in r["data"]["result"]]

        # both brokers scraped after the jobs ended: each reports all three
        _wait(lambda: query('broker_jobs{state="succeeded"}') == [3.0, 3.0])
        dashboard = json.loads((REPO / "deploy/grafana/spot-broker.json").read_text())
        exprs = {t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])}
        for expr in exprs:
            query(expr.replace("$team", ".*").replace("$__range", "1h"))
        by_state = next(e for e in exprs if e.startswith("sum by (state)"))
        r = prometheus.get("/api/v1/query", params={"query": by_state.replace("$team", ".*")}).json()
        succeeded = [float(x["value"][1]) for x in r["data"]["result"] if x["metric"].get("state") == "succeeded"]
        assert succeeded == [3.0]  # not 6: one copy per series
    finally:
        for p in (prom, *brokers):
            p.send_signal(signal.SIGTERM)
        for p in (prom, *brokers):
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
