"""A job's reports reach a broker serving on its data dir when the one that launched it is gone, and a worker's jobs
report to the API's broker, not to port 8000.

QA walkthrough (Dec 8): of two ``broker serve`` sharing a store and a data dir, the one that had launched a job was
killed with -9; the job's commits went on to its dead port ("not yet told to the broker: Connection refused") and the
survivor showed the job at step 10 while it ran at step 160. And ``broker worker`` beside ``broker serve --port N
--no-engine`` gave its jobs ``BROKER_PROGRESS_URL=http://127.0.0.1:8000/…``. Real brokers, real runs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import httpx

from broker_testing import ADMIN, REPO, start_broker, stop_broker, wait_for

CONFIG = """
pools:
  - {name: cpu, slots: 2, price_per_slot_hour: "0.36"}
tick_seconds: 0.2
stop_grace_seconds: 2
"""
H = {"Authorization": f"Bearer {ADMIN}"}
SCRIPT = """
import time
from checkpoint import Checkpointer
ckpt = Checkpointer(every_steps=1)
for step in range(1, 1000):
    time.sleep(0.2)
    ckpt.save(step, {"step": step})
"""


def _request(data_dir, job_id) -> dict:
    found = [p for p in (data_dir / "runs").glob(f"{job_id}*/request.json")]
    return json.loads(found[0].read_text()) if found else {}


def _committed(url, job_id) -> int:
    return (httpx.get(f"{url}/v1/jobs/{job_id}", headers=H).json().get("last_checkpoint") or {}).get("step") or 0


def test_a_job_whose_broker_is_killed_reports_to_the_other_one(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    store = f"sqlite://{tmp_path / 'b.db'}"
    brokers = dict(reversed(start_broker(tmp_path, store, config=CONFIG)) for _ in range(2))  # url → process
    try:
        first = next(iter(brokers))
        task = {"name": "t", "resources": {"cpus": 1}, "workdir": str(tmp_path),
                "run": f"{sys.executable} train.py", "envs": {"PYTHONPATH": str(REPO)}, "broker": {"budget_usd": "5"}}
        job_id = httpx.post(f"{first}/v1/jobs", json=task, headers=H).json()["id"]
        envs = wait_for(lambda: _request(tmp_path / "data", job_id).get("envs"), timeout=60)
        own = envs["BROKER_PROGRESS_URL"].split("/v1/")[0]
        (other,) = [u for u in brokers if u != own]
        assert envs["BROKER_PROGRESS_URLS"] == f"{other}/v1/jobs/{job_id}/progress"
        wait_for(lambda: _committed(other, job_id) >= 3, timeout=60)
        brokers.pop(own).send_signal(signal.SIGKILL)
        killed_at = _committed(other, job_id)
        wait_for(lambda: _committed(other, job_id) >= killed_at + 10, timeout=30)  # it goes on hearing of them
    finally:
        for url, proc in brokers.items():
            stop_broker(proc, url)


def test_a_workers_jobs_report_to_the_broker_serving_the_api(tmp_path):
    proc, url = start_broker(tmp_path, f"sqlite://{tmp_path / 'w.db'}", engine="off", config=CONFIG)
    try:
        task = {"name": "t", "resources": {"cpus": 1}, "run": "true", "broker": {"budget_usd": "1"}}
        job_id = httpx.post(f"{url}/v1/jobs", json=task, headers=H).json()["id"]
        cfg = tmp_path / "worker.yaml"
        cfg.write_text(CONFIG)
        env = {**os.environ, "BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_ADMIN_TOKEN": ADMIN,
               "BROKER_STORE_URL": f"sqlite://{tmp_path / 'w.db'}"}
        env.pop("BROKER_PUBLIC_URL", None)
        env.pop("BROKER_PORT", None)
        worker = subprocess.run([sys.executable, "-m", "broker.cli", "worker", "--burst", "--config", str(cfg)],
                                env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
        assert worker.returncode == 0, worker.stderr
        assert f"jobs report their progress to the broker serving the API on {tmp_path / 'data'} ({url})" \
            in worker.stderr, worker.stderr
        assert _request(tmp_path / "data", job_id)["envs"]["BROKER_PROGRESS_URL"] == f"{url}/v1/jobs/{job_id}/progress"
    finally:
        stop_broker(proc, url, wait_runs=False)
