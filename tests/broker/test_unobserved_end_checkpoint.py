"""An attempt that ends while the broker is down: the broker back records the step it reached and the last
checkpoint it committed — not the ones reported before the outage.

Real processes: ``broker serve`` (killed with SIGKILL, then started again on the same port, so the run's progress
URL reaches it again), the local launcher's runner, which keeps the attempt going meanwhile, and a small training
loop that checkpoints with the ``checkpoint`` library (its reports while the broker is down are refused).
"""

import re
import signal
import time
from pathlib import Path

import httpx
import pytest

from broker.engine.reconcile import committed_in_log
from broker_testing import ADMIN, start_broker, wait_for
from checkpoint.progress import UNDELIVERED_LINE
from testports import free_port

TRAINER = Path(__file__).with_name("trainer.py")
H = {"Authorization": f"Bearer {ADMIN}"}


def config(price=None, grace=2):
    price_line = f"\n    price_per_hour: \"{price}\"" if price else ""
    return f"""
pools: []
zones:
  - name: sim-od
    tier: ondemand
    instance_type: g5.xlarge{price_line}
tick_seconds: 0.2
stop_grace_seconds: {grace}
changeover_seconds: 2
"""


def task(steps, pause, every, budget="5"):
    return {"name": "trainer", "resources": {"accelerators": "A10G:1"},
            "envs": {"BROKER_PROGRESS_INTERVAL_S": "0.1"},
            "run": f"python {TRAINER} {steps} {pause} {every}", "broker": {"budget_usd": budget}}


@pytest.fixture
def broker(tmp_path):
    # a port of this worker's own slice (the broker restarts on it within the test): a fixed range, iterated afresh
    # in each worker that imported this module (test_follow_through_restart.py imports the fixture), could hand two
    # workers the same port at once
    procs, port = [], free_port()

    def start(cfg):
        proc, url = start_broker(tmp_path, f"sqlite://{tmp_path / 'r.db'}", port, config=cfg)
        procs.append(proc)
        return proc, httpx.Client(base_url=url, headers=H, timeout=10)

    start.runs = tmp_path / "data" / "runs"
    yield start
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            p.wait(15)
    for pid_file in start.runs.glob("*/runner.pid"):  # a runner left by a failed test
        try:
            import os
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
        except (OSError, ValueError):
            pass


def kill_9(proc):
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)


def ended(runs: Path, job_id: str, attempt: int = 1, timeout: float = 60) -> str:
    """The attempt's output once its runner wrote its exit (the broker is down: read from its run directory)."""
    run = runs / f"{job_id}-a{attempt}"
    wait_for(lambda: (run / "exit.json").exists(), timeout=timeout)
    return (run / "output.log").read_text()


def until_state(client, job_id, states, timeout=60):
    return wait_for(lambda: (j := client.get(f"/v1/jobs/{job_id}").json())["state"] in states and j, timeout=timeout)


def steps(text):
    return [int(s) for s in re.findall(r"^step (\d+)$", text, re.M)]


def test_a_job_that_finished_while_the_broker_was_down_shows_its_last_step_and_checkpoint(broker):
    proc, client = broker(config())
    job_id = client.post("/v1/jobs", json=task(steps=60, pause=0.1, every=10)).json()["id"]
    wait_for(lambda: ((client.get(f"/v1/jobs/{job_id}").json().get("last_checkpoint") or {}).get("step") or 0) >= 10,
             timeout=60)
    kill_9(proc)
    log = ended(broker.runs, job_id)
    assert max(steps(log)) == 60 and "done" in log
    assert committed_in_log(log)[0] == 60, log  # the library said the commits it could not report

    proc, client = broker(config())
    job = until_state(client, job_id, {"succeeded", "failed"})
    assert job["state"] == "succeeded", job
    assert job["last_checkpoint"]["step"] == 60, job["last_checkpoint"]
    assert "step-000000000060-" in job["last_checkpoint"]["uri"]
    assert job["last_checkpoint"]["attempt"] == 1
    assert job["progress"]["step"] == 60, job["progress"]
    attempt = client.get(f"/v1/jobs/{job_id}/attempts").json()
    records = attempt.get("attempts", attempt) if isinstance(attempt, dict) else attempt
    if records and isinstance(records, list) and "checkpoint" in records[-1]:
        assert (records[-1]["checkpoint"] or {}).get("step") == 60


def test_a_job_stopped_at_its_budget_while_the_broker_was_down_resumes_from_the_checkpoint_it_saved(broker):
    # $36/h is one cent a second: $0.20 runs some 15 s, and its runner stops it at its budget by itself; the trainer
    # saves only on the stop's notice (every_steps far away), while the broker is down
    cfg = config(price="36")
    proc, client = broker(cfg)
    job_id = client.post("/v1/jobs", json=task(steps=100_000, pause=0.02, every=1_000_000, budget="0.20")).json()["id"]
    wait_for(lambda: ((client.get(f"/v1/jobs/{job_id}").json().get("progress") or {}).get("step") or 0) >= 5,
             timeout=60)
    kill_9(proc)
    log = ended(broker.runs, job_id)
    saved = committed_in_log(log)
    assert saved is not None, log
    assert saved[0] >= max(steps(log)) - 1

    proc, client = broker(cfg)
    job = until_state(client, job_id, {"stopped_budget", "succeeded", "failed"})
    assert job["state"] == "stopped_budget", job
    assert job["last_checkpoint"]["step"] == saved[0] and job["last_checkpoint"]["uri"] == saved[1]
    assert job["progress"]["step"] >= saved[0]
    shown = client.get(f"/v1/jobs/{job_id}").text
    assert f"step {saved[0]}" in shown or str(saved[0]) in shown

    assert client.post(f"/v1/jobs/{job_id}/budget", json={"budget_usd": "5"}).status_code == 200
    assert client.post(f"/v1/jobs/{job_id}/resume").status_code == 200
    second = wait_for(lambda: re.search(r"^start (\d+)$", (broker.runs / f"{job_id}-a2" / "output.log").read_text()
                                        if (broker.runs / f"{job_id}-a2" / "output.log").exists() else "", re.M),
                      timeout=60)
    assert int(second.group(1)) == saved[0]
    events = client.get(f"/v1/jobs/{job_id}/events").json()["events"]
    resumed = [e["reason"] for e in events if "resum" in (e.get("reason") or "")]
    assert any(f"step {saved[0]}" in r for r in resumed), resumed
    client.post(f"/v1/jobs/{job_id}/cancel")


def test_the_line_the_library_writes_is_the_one_the_broker_reads():
    text = ("step 899\n"
            + UNDELIVERED_LINE.format(step=450, uri="file:///c/j/step-000000000450-aa", why="refused") + "\n"
            + "step 900\r" + UNDELIVERED_LINE.format(step=900, uri="file:///c/j/step-000000000900-bb",
                                                     why="[Errno 111] Connection refused") + "\n"
            + "finished: 900 steps, last checkpoint file:///c/j/step-000000000900-bb\n")
    assert committed_in_log(text) == (900, "file:///c/j/step-000000000900-bb")
    assert committed_in_log("step 12\n[checkpoint] committed step 5 elsewhere\n") is None
    assert committed_in_log("") is None
    # a line quoted in another (not at a line's start) is not taken
    assert committed_in_log("echo '[checkpoint] committed step 7: file:///x (not yet told to the broker: x)'") is None


def test_the_line_is_found_at_the_end_of_a_log_longer_than_one_page_read():
    """The log is read to its end (in pages of 4 MiB), not only its first page: a chatty run's last commit line is
    past it."""
    from broker.engine.reconcile import _log_tail, _log_text

    class Launcher:
        def __init__(self, data: bytes):
            self.data = data

        def logs(self, attempt_id, *, offset=0, limit=1 << 20):
            page = self.data[offset:offset + limit]
            return page, offset + len(page)

    line = UNDELIVERED_LINE.format(step=900, uri="file:///c/j/step-000000000900-bb", why="refused")
    data = b"step 1\n" * 1_400_000 + line.encode() + b"\nfinished\n"  # some 10 MiB
    launcher = Launcher(data)
    assert committed_in_log(_log_text(launcher, "j-a1")) == (900, "file:///c/j/step-000000000900-bb")
    assert _log_tail(launcher, "j-a1").endswith("finished\n")
    assert _log_text(Launcher(b""), "j-a1") == ""


@pytest.mark.parametrize("uri, kept", [
    ("file:///c/j-1/step-000000000900-bb", True),
    ("file:///c/j-1//step-000000000900-bb", True),  # another spelling of the same base
    ("file:///c/j-2/step-000000000900-bb", False),  # another job's base
    ("file:///etc/step-000000000900-bb", False),
], ids=["a commit in the job's own base is its last checkpoint",
        "another spelling of the job's base is the same base",
        "a commit the log names in another job's base is not taken",
        "a commit the log names anywhere else is not taken"])
def test_a_commit_line_in_the_log_is_held_to_the_jobs_own_base(uri, kept):
    """The run prints what it likes: a line naming a commit in another job's base became this job's last checkpoint
    and its next attempt's BROKER_RESUME_FROM, which a progress report outside the base no longer does."""
    from broker.engine.reconcile import _committed_unreported
    from broker.lifecycle import AttemptState, JobState
    from broker.models import Attempt, Job

    job = Job(id="j-1", name="t", team="vision", state=JobState.RUNNING, spec={"run": "echo"}, budget=5_000_000,
              priority=0, submitted_at=1.0, updated_at=1.0, checkpoint_uri="file:///c/j-1")
    attempt = Attempt(id="j-1-a1", job_id="j-1", n=1, state=AttemptState.RUNNING, launcher="local", placement={},
                      price_per_hour=0, created_at=1.0)
    fields: dict = {}
    text = UNDELIVERED_LINE.format(step=900, uri=uri, why="refused") + "\n"
    job2, attempt2 = _committed_unreported(job, attempt, text, fields, at=5.0)
    assert ("last_checkpoint" in fields) is kept
    assert (job2.last_checkpoint or {}).get("uri") == (uri if kept else None)
    assert attempt2.checkpoint.get("uri") == (uri if kept else None)
