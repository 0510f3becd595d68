"""`broker status` never pairs a checkpoint's step with the loss of an older report.

QA walkthrough (Dec 7): progress showed `step 100/300, loss 1.281`, where 1.281 was step 10's loss — reports are
rate-limited (one per 5 s), the process was killed before the next one, and a checkpoint commit at step 100 then moved
the progress's step forward keeping step 10's metrics. Now a commit that moves the step forward drops the older
report's metrics from the job's progress (its metric points keep them, at their own step): the API's progress and
`broker status` show the step the run reached, and no loss that is not that step's.

End to end: a real ``broker serve`` (local launcher, one pool slot), a real run with the checkpoint library whose
step reports after the first are held back by the rate limit, and the CLI as typed.
"""

from __future__ import annotations

import json

import httpx
import pytest
from broker_testing import ADMIN, cli_runner, start_broker, stop_broker, wait_for

CONFIG = """
pools:
  - {name: cpu, slots: 1, price_per_slot_hour: "0.36"}
tick_seconds: 0.2
stop_grace_seconds: 2
"""
H = {"Authorization": f"Bearer {ADMIN}"}
SCRIPT = """
import time
from checkpoint import Checkpointer
from checkpoint.progress import report

ckpt = Checkpointer(every_steps=10)
for step in range(1, 21):
    report(step, 30, {"loss": 1.281 if step == 1 else 1.0 / step})  # only step 1's goes out: one an hour
    if ckpt.due(step):
        ckpt.save(step, {"step": step})
ckpt.wait()
time.sleep(600)  # held here, as a run killed before its next report
"""



@pytest.fixture
def broker(tmp_path):
    proc, url = start_broker(tmp_path, f"sqlite://{tmp_path / 'b.db'}", config=CONFIG)
    with httpx.Client(base_url=url, headers=H, timeout=10) as client:
        yield client, cli_runner(url)
    stop_broker(proc, url)


def test_a_commit_past_the_last_report_shows_its_step_without_the_older_reports_loss(broker, tmp_path):
    client, run = broker
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    job = client.post("/v1/jobs", json={"name": "held-reports", "resources": {"cpus": 1},
                                        "envs": {"BROKER_PROGRESS_INTERVAL_S": "3600"},
                                        "run": f"python {script}", "broker": {"budget_usd": 1}}).json()
    # step 1's report, then the commits at steps 10 and 20 (not rate-limited) move the step forward
    # and running: its reports can reach the API before the engine's next tick has seen it start (a loaded host)
    view = wait_for(lambda: (v := client.get(f"/v1/jobs/{job['id']}").json())["progress"]
                    and v["progress"]["step"] == 20 and v["state"] != "launching" and v, timeout=60)
    assert view["last_checkpoint"]["step"] == 20 and view["state"] == "running", view
    assert "loss" not in (view["progress"].get("metrics") or {}), view["progress"]  # 1.281 is step 1's, not 20's
    points = client.get(f"/v1/jobs/{job['id']}/metrics").json()["points"]
    assert [(p["step"], p["metrics"]) for p in points] == [(1, {"loss": 1.281})]  # kept, at its own step

    said = run("status", job["id"]).stdout
    line = next(ln.strip() for ln in said.splitlines() if ln.strip().startswith("progress:"))
    assert line == "progress: step 20/30", said
    assert "1.281" not in said, said
    assert json.loads(run("--json", "status", job["id"]).stdout)["progress"]["step"] == 20
