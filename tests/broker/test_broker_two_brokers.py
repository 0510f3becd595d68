"""Several broker processes on one Redis: every job runs, and every attempt runs exactly once."""

import os
import signal
import subprocess
import sys

import httpx
import redis

from broker_testing import ADMIN, REPO, start_broker, wait_for

CONFIG = """
pools:
  - {name: local, slots: 4, price_per_slot_hour: "0.10"}
tick_seconds: 0.05
"""


def test_two_engines_sharing_redis_launch_each_attempt_once(tmp_path, redis_server):
    url = redis_server.url.rsplit("/", 1)[0] + "/14"
    redis.Redis.from_url(url).flushdb()
    api, base = start_broker(tmp_path, url, engine="off", config=CONFIG)
    cfg = tmp_path / "worker.yaml"
    cfg.write_text(CONFIG)
    env = {**os.environ, "BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_ADMIN_TOKEN": ADMIN,
           "BROKER_STORE_URL": url}
    workers = [subprocess.Popen([sys.executable, "-m", "broker.cli", "worker", "--config", str(cfg)], env=env,
                                cwd=REPO, stdout=subprocess.DEVNULL, stderr=open(tmp_path / f"worker{i}.log", "w"))
               for i in range(2)]
    marks = tmp_path / "marks"
    marks.mkdir()
    try:
        client = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {ADMIN}"})
        ids = [client.post("/v1/jobs", json={"name": f"j{i}", "run": f"echo $BROKER_ATTEMPT >> {marks}/{i}; sleep 0.3",
                                             "broker": {"budget_usd": 1}}).json()["id"] for i in range(12)]

        def all_done():
            return all(client.get(f"/v1/jobs/{i}").json()["state"] == "succeeded" for i in ids)

        wait_for(all_done, timeout=90, interval=0.3)
        for n in range(12):
            assert (marks / str(n)).read_text() == "1\n", f"job {n} ran {(marks / str(n)).read_text()!r}"
        for job_id in ids:
            launches = [e for e in client.get(f"/v1/jobs/{job_id}/events").json()["events"] if e["event"] == "launch"]
            assert len(launches) == 1
    finally:
        for w in workers:
            w.send_signal(signal.SIGTERM)
        for w in workers:
            w.wait(15)
        api.send_signal(signal.SIGTERM)
        api.wait(15)
    assert all(w.returncode == 0 for w in workers)
