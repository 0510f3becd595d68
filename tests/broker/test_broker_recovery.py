"""Preempted jobs resume elsewhere, budgets stop jobs before they overrun, failures are explained.

Scenario tests with real processes: a ``broker serve`` subprocess with simulated spot and
on-demand zones, and a small training loop that checkpoints with the ``checkpoint`` library.
"""

import re
import signal
from decimal import Decimal
from pathlib import Path

import httpx
import pytest

from broker_testing import ADMIN, start_broker, wait_for

TRAINER = Path(__file__).with_name("trainer.py")
LOADER_TRAINER = Path(__file__).with_name("loader_trainer.py")
H = {"Authorization": f"Bearer {ADMIN}"}


def config(a_schedule="[]", b_schedule="[]", price=None, grace=4):
    price_line = f"\n    price_per_hour: \"{price}\"" if price else ""
    return f"""
pools: []
zones:
  - name: sim-a
    tier: spot
    instance_type: g5.xlarge
    cloud_zone: us-east-1a
    grace_seconds: {grace}
    schedule: {a_schedule}{price_line}
  - name: sim-b
    tier: spot
    instance_type: g5.xlarge
    cloud_zone: us-east-1f
    grace_seconds: {grace}
    schedule: {b_schedule}{price_line}
  - name: sim-od
    tier: ondemand
    instance_type: g5.xlarge{price_line}
tick_seconds: 0.2
stop_grace_seconds: {grace}
changeover_seconds: 2
zone_cooldown_seconds: 600
"""


def task(steps=60, pause=0.05, every=10, budget="5", **broker):
    return {
        "name": "trainer",
        "resources": {"accelerators": "A10G:1"},
        "envs": {"BROKER_PROGRESS_INTERVAL_S": "0.1"},
        "run": f"python {TRAINER} {steps} {pause} {every}",
        "broker": {"budget_usd": budget, **broker},
    }


@pytest.fixture
def serve(tmp_path):
    procs = []

    def start(cfg):
        proc, url = start_broker(tmp_path, f"sqlite://{tmp_path / 'r.db'}", config=cfg)
        procs.append(proc)
        return httpx.Client(base_url=url, headers=H, timeout=10)

    yield start
    for p in procs:
        p.send_signal(signal.SIGTERM)
        p.wait(15)


def until_state(client, job_id, states, timeout=60):
    return wait_for(lambda: (j := client.get(f"/v1/jobs/{job_id}").json())["state"] in states and j, timeout=timeout)


def log_of(client, job_id, attempt):
    r = client.get(f"/v1/jobs/{job_id}/logs", params={"attempt": attempt})
    return r.json()["data"] if r.status_code == 200 else ""  # 404 until the attempt exists


def steps(text):
    return [int(s) for s in re.findall(r"^step (\d+)$", text, re.M)]


def start_step(text):
    return int(re.search(r"^start (\d+)$", text, re.M).group(1))


def test_preempted_with_notice_resumes_in_another_zone_losing_no_steps(serve):
    # the zone's own schedule preempts attempt 1 at 6 s: the trainer listens for the notice well before that
    # on a loaded host too (a notice before its Checkpointer exists kills it unsaved), and trains past it (12 s)
    client = serve(config(a_schedule='["preempt attempt 1 at +6s"]'))
    job = client.post("/v1/jobs", json=task(steps=240)).json()
    final = until_state(client, job["id"], {"succeeded", "failed"})
    assert final["state"] == "succeeded"
    a1, a2 = final["attempt_list"]
    assert (a1["state"], a1["placement"]["zone"]) == ("preempted", "sim-a")
    assert a2["placement"]["zone"] == "sim-b" and a2["state"] == "succeeded"
    last_trained = max(steps(log_of(client, job["id"], 1)))
    resumed_at = start_step(log_of(client, job["id"], 2))
    assert resumed_at == last_trained, "the notice's save keeps every step trained"
    assert a2["resume_from"] and f"step-{resumed_at:012d}" in a2["resume_from"]
    assert a1["checkpoint"]["uri"] == a2["resume_from"] and a1["steps_lost"] == 0
    recover = [e for e in client.get(f"/v1/jobs/{job['id']}/events").json()["events"] if e["event"] == "recover"][0]
    assert recover["data"]["zone"] == "sim-a" and recover["data"]["diagnosis_class"] == "preempted"
    assert final["spent"]["micros"] == a1["cost"]["micros"] + a2["cost"]["micros"]


def test_a_script_whose_dataloader_has_worker_processes_saves_on_the_notice_and_resumes(serve):
    # A SIGTERM to the whole process group kills DataLoader workers at once, and the next batch
    # then raises in the training loop before it can save: the runner announces the stop in the
    # notice file first and holds the group's SIGTERM back while the checkpoint library listens.
    client = serve(config(grace=6))
    job = client.post("/v1/jobs", json={**task(),
                                        "run": f"python {LOADER_TRAINER} 400 0.05 1000"}).json()
    # preempted once it trains (not at a fixed time: on a loaded host torch and the workers take a while to start)
    wait_for(lambda: len(steps(log_of(client, job["id"], 1))) >= 5, timeout=60)
    r = client.post("/v1/admin/faults", json={"kind": "preempt", "job_id": job["id"]})
    assert r.status_code == 200 and r.json()["applied"], r.text
    final = until_state(client, job["id"], {"succeeded", "failed"}, timeout=120)
    first = log_of(client, job["id"], 1)
    assert "killed by signal" not in first and "Traceback" not in first, first[-2000:]
    assert final["state"] == "succeeded", final
    a1, a2 = final["attempt_list"]
    assert a1["state"] == "preempted" and a1["exit_code"] == 143
    last_trained = max(steps(first))
    assert 0 < last_trained < 400
    assert start_step(log_of(client, job["id"], 2)) == last_trained, "the notice's save keeps every step trained"
    assert a1["steps_lost"] == 0 and a1["checkpoint"]["uri"] == a2["resume_from"]


def test_a_node_killed_without_notice_loses_at_most_one_checkpoint_interval(serve):
    client = serve(config())
    job = client.post("/v1/jobs", json=task(steps=80, every=10)).json()
    wait_for(lambda: len(steps(log_of(client, job["id"], 1))) >= 25, timeout=30)
    r = client.post("/v1/admin/faults", json={"kind": "kill", "job_id": job["id"]})
    assert r.status_code == 200 and r.json()["applied"]
    final = until_state(client, job["id"], {"succeeded", "failed"})
    assert final["state"] == "succeeded"
    assert final["attempt_list"][0]["state"] == "lost"
    lost = max(steps(log_of(client, job["id"], 1))) - start_step(log_of(client, job["id"], 2))
    assert 0 <= lost <= 10


def test_preempted_in_two_zones_neither_is_chosen_again_during_the_cooldown(serve):
    client = serve(config(a_schedule='["preempt attempt 1 at +1.5s"]', b_schedule='["preempt attempt 2 at +1.5s"]'))
    job = client.post("/v1/jobs", json=task(steps=60)).json()
    final = until_state(client, job["id"], {"succeeded", "failed"}, timeout=90)
    zones = [a["placement"]["zone"] for a in final["attempt_list"]]
    assert zones == ["sim-a", "sim-b", "sim-od"]
    assert final["state"] == "succeeded"


def test_budget_reached_mid_run_checkpoints_stops_and_resumes_after_raising_it(serve):
    # $36/h is one cent a second: a $0.20 budget runs some 15 s, then must stop within it (the trainer listens
    # for the notice by then on a loaded host too, and would train 20 s)
    client = serve(config(price="36", grace=2))
    job = client.post("/v1/jobs", json=task(steps=1000, pause=0.02, every=10_000, budget="0.20")).json()
    stopped = until_state(client, job["id"], {"stopped_budget", "succeeded", "failed"})
    assert stopped["state"] == "stopped_budget"
    assert stopped["spent"]["micros"] <= stopped["budget"]["micros"]
    events = [e["event"] for e in client.get(f"/v1/jobs/{job['id']}/events").json()["events"]]
    assert "budget_warning" in events and "stop_budget" in events
    saved = start_step  # the notice made the trainer save where it stopped
    refused = client.post(f"/v1/jobs/{job['id']}/resume")
    assert refused.status_code == 409  # the budget is spent; the refusal says what budget would do
    at_least = re.search(r"raise the budget to at least \$([\d.,]+) first", refused.json()["detail"])
    assert at_least and Decimal(at_least[1]) > Decimal("0.20"), refused.json()["detail"]
    r = client.post(f"/v1/jobs/{job['id']}/budget", json={"budget_usd": "5"})
    assert r.status_code == 200 and r.json()["budget"]["usd"] == "$5.00"
    assert client.post(f"/v1/jobs/{job['id']}/resume").status_code == 200
    final = until_state(client, job["id"], {"succeeded", "failed", "stopped_budget"})
    assert final["state"] == "succeeded"
    assert final["spent"]["micros"] <= final["budget"]["micros"]
    first_log, second_log = log_of(client, job["id"], 1), log_of(client, job["id"], 2)
    assert saved(second_log) == max(steps(first_log))


def test_a_code_error_is_explained_and_resume_needs_force(serve):
    client = serve(config())
    oom = {"name": "oom", "resources": {"accelerators": "A10G:1"}, "broker": {"budget_usd": 5},
           "run": "echo 'step 1200 batch_size 64'; echo 'torch.OutOfMemoryError: CUDA out of memory. Tried to "
                  "allocate 2.00 GiB' >&2; exit 1"}
    job = client.post("/v1/jobs", json=oom).json()
    final = until_state(client, job["id"], {"failed", "succeeded"})
    assert final["state"] == "failed"
    assert final["reason"].startswith("Out of GPU memory (batch size 64) after step 1200 (the last in the job's log). Try a "
                                    "smaller batch size")
    refused = client.post(f"/v1/jobs/{job['id']}/resume")
    assert refused.status_code == 409 and "Out of GPU memory" in refused.json()["detail"]
    # on-demand capacity does not change a failure of the job's own: pinning it there asks for force too
    refused = client.post(f"/v1/jobs/{job['id']}/ondemand")
    assert refused.status_code == 409 and "Out of GPU memory" in refused.json()["detail"]
    assert client.get(f"/v1/jobs/{job['id']}").json()["state"] == "failed"
    forced = client.post(f"/v1/jobs/{job['id']}/resume", params={"force": "true"})
    assert forced.status_code == 200 and forced.json()["state"] == "queued"
    again = until_state(client, job["id"], {"failed", "succeeded"})
    assert again["attempts"] == 2


def test_a_script_that_reports_progress_and_fails_later_is_diagnosed_at_the_step_its_log_reached(serve, tmp_path):
    # the broker heard of step 0 only (a script that reports rarely); the log says how far it got
    script = tmp_path / "fails_late.py"
    script.write_text("import time\nfrom checkpoint.progress import report\n"
                      "for step in range(60):\n"
                      "    if step == 0:\n"
                      "        report(step, 100)\n"
                      "    time.sleep(0.02)\n"
                      "    if step % 10 == 0:\n"
                      "        print(f'step {step}', flush=True)\n"
                      "    if step == 55:\n"
                      "        raise ValueError('batch 55 has labels outside [0, 10)')\n")
    client = serve(config())
    job = client.post("/v1/jobs", json={**task(), "envs": {"BROKER_PROGRESS_INTERVAL_S": "3600"},
                                        "run": f"python {script}"}).json()
    final = until_state(client, job["id"], {"failed", "succeeded"})
    assert final["state"] == "failed" and final["progress"]["step"] == 0
    assert final["diagnosis"]["step"] == 50
    # it failed at step 55: the sentence names the last step it showed, and says so
    assert final["reason"].startswith("The training script raised ValueError after step 50 (the last in the job's log)")


def test_a_failed_setup_is_named_with_its_last_line(serve):
    client = serve(config())
    job = client.post("/v1/jobs", json={**task(), "setup": "echo 'ERROR: could not build wheel for flash-attn' >&2; exit 1",
                                        "run": "echo never"}).json()
    final = until_state(client, job["id"], {"failed", "succeeded"})
    assert final["reason"].startswith(
        'The setup command exited with code 1: "ERROR: could not build wheel for flash-attn". Read the end')


def test_a_failure_of_the_node_not_the_code_resumes_with_one_click_from_its_checkpoint(serve, tmp_path):
    script = tmp_path / "bad_gpu.py"
    script.write_text("import os, sys\nfrom checkpoint import Checkpointer\n"
                      "ckpt = Checkpointer(every_steps=10)\n"
                      "state = ckpt.restore(default=None)\n"
                      "start = int(state['step']) if state else 0\n"
                      "print(f'start {start}', flush=True)\n"
                      "for step in range(start + 1, 41):\n"
                      "    print(f'step {step}', flush=True)\n"
                      "    if step == 25 and os.environ['BROKER_ATTEMPT'] == '1':\n"
                      "        ckpt.close()\n"
                      "        sys.exit('RuntimeError: CUDA error: uncorrectable ECC error encountered')\n"
                      "    if ckpt.due(step):\n"
                      "        ckpt.save(step, {'step': step})\n"
                      "ckpt.close()\n")
    client = serve(config())
    job = client.post("/v1/jobs", json={**task(), "run": f"python {script}"}).json()
    failed = until_state(client, job["id"], {"failed", "succeeded"})
    assert failed["state"] == "failed" and failed["diagnosis"]["class"] == "cuda_error"
    assert failed["diagnosis"]["infrastructure"] and "resume it" in failed["reason"]
    resumed = client.post(f"/v1/jobs/{job['id']}/resume")  # no force
    assert resumed.status_code == 200, resumed.text
    final = until_state(client, job["id"], {"failed", "succeeded"})
    assert final["state"] == "succeeded"
    assert start_step(log_of(client, job["id"], 2)) == 20
    assert final["attempt_list"][1]["resume_from"] == failed["last_checkpoint"]["uri"]


@pytest.mark.parametrize("reported, seen, saved, lost", [
    pytest.param(60, 70, 50, 20, id="the log showed step 70 after the last report at 60: 20 steps since the step-50 save"),
    pytest.param(60, None, 50, 10, id="nothing later in the log: counted from the last report"),
    pytest.param(None, 70, 50, 20, id="no report at all, the log's step: counted from it"),
    pytest.param(None, None, 50, None, id="neither: not known"),
    pytest.param(60, 40, None, 60, id="no checkpoint: every step reached is lost"),
])
def test_the_steps_lost_count_from_the_step_the_diagnosis_names(reported, seen, saved, lost):
    """A node killed at step 70 (its log) whose last progress report said 60 read "lost at step 70 (no exit was
    recorded); resumes from step 50 (10 steps lost)": the sentence named one step and counted from another."""
    from broker.engine.recover import steps_lost
    from broker.lifecycle import AttemptState, JobState
    from broker.models import Attempt, Job

    job = Job(id="j", name="j", team="t", spec={}, budget=1, priority=0, state=JobState.RUNNING, submitted_at=0.0,
              updated_at=0.0, last_checkpoint={"step": saved} if saved is not None else {})
    attempt = Attempt(id="j-a1", job_id="j", n=1, state=AttemptState.RUNNING, launcher="local", placement={},
                      price_per_hour=1, created_at=0.0, last_step=reported)
    assert steps_lost(job, attempt, seen) == lost
