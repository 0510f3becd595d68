"""A SkyPilot task on this host (pools, simulated zones), as an ML engineer runs it: what its setup and run see,
where they run, and that a stop ends every process of it — real runners, real processes."""

from __future__ import annotations

import json
import os
import sys
import time

import pytest

from launchers.base import LaunchRequest, Phase
from launchers.local import LocalLauncher

# torchrun starts each worker in a session of its own (start_new_session): a worker is not in the process group the
# runner signals. This one stands in for a rank that does not die of the notice (blocked in a collective).
WORKER = """
import os, signal, subprocess, sys, time
if os.environ.get("WAIT_FOR_WORKERS"):  # torchrun, told to stop, waits 30 s for its workers: SIGKILLed before
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
worker = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('worker up', flush=True); time.sleep(600)"],
    start_new_session=True)
open("worker.pid", "w").write(str(worker.pid))
worker.wait()
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def _wait(check, timeout: float = 30.0, what: str = "timed out"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(what)


def _launch(tmp_path, task, *, attempt_id="j-1-a1", placement=None, grace=1.0, **fields):
    launcher = LocalLauncher(tmp_path / "data" / "runs", python=sys.executable)
    placement = placement or {"tier": "onprem", "cloud": "local", "region": "cpu", "zone": "cpu", "num_nodes": 1}
    launcher.launch(LaunchRequest(attempt_id=attempt_id, job_id=attempt_id.rsplit("-a", 1)[0], attempt=1, task=task,
                                  placement=placement, stop_grace_seconds=grace, **fields))
    return launcher


def _ended(launcher, attempt_id="j-1-a1"):
    return _wait(lambda: (s := launcher.status(attempt_id)).phase not in (Phase.PENDING, Phase.RUNNING) and s)


@pytest.mark.parametrize("waits", [
    pytest.param(True, id="the launcher waits for its workers -> killed with it at the end of the grace period"),
    pytest.param(False, id="the launcher exits at the notice -> its workers killed at the end of the grace period"),
])
def test_a_stop_kills_the_workers_torchrun_started_in_sessions_of_their_own(tmp_path, waits):
    """A cancel (or a preemption) SIGKILLed the command's process group at the end of the grace period: torchrun
    died, and its workers — each in a session of its own — ran on, holding their GPUs, after the job was recorded
    cancelled and its slots handed to the next job."""
    workdir = tmp_path / "code"
    workdir.mkdir()
    (workdir / "launch.py").write_text(WORKER)
    launcher = _launch(tmp_path, {"workdir": str(workdir), "run": f"{sys.executable} launch.py",
                                  "envs": {"WAIT_FOR_WORKERS": "1" if waits else ""}})
    pid = _wait(lambda: (workdir / "worker.pid").exists() and int((workdir / "worker.pid").read_text()))
    _wait(lambda: b"worker up" in launcher.logs("j-1-a1")[0])
    try:
        launcher.stop("j-1-a1", grace_seconds=1.0, reason="cancelled")
        assert _ended(launcher).phase is Phase.STOPPED
        # SIGKILLed before the exit was recorded: gone once the kernel has run the kill
        _wait(lambda: not _alive(pid), timeout=5.0, what="a worker of the stopped job still runs")
    finally:
        if _alive(pid):
            os.kill(pid, 9)


def test_setup_and_run_see_the_variables_skypilot_gives_them(tmp_path):
    """A setup written for SkyPilot reads SKYPILOT_SETUP_NODE_RANK (download on node 0 only) and a script reads
    SKYPILOT_CLUSTER_INFO for where it runs: neither was set here, so such a setup skipped its download on the one
    node there is, and json.loads(os.environ["SKYPILOT_CLUSTER_INFO"]) failed the run."""
    zone = {"tier": "spot", "cloud": "aws", "region": "us-east-1", "zone": "sim-a", "accelerator": "A10G",
            "accelerator_count": 1, "num_nodes": 2, "simulated": True}
    setup = ('[ "$SKYPILOT_SETUP_NODE_RANK" = 0 ] && echo "download on node 0 of $SKYPILOT_SETUP_NODE_IPS, '
             '$SKYPILOT_SETUP_NUM_GPUS_PER_NODE GPUs"')
    run = (f"{sys.executable} -c 'import json, os; i = json.loads(os.environ[\"SKYPILOT_CLUSTER_INFO\"]); "
           "print(\"cluster\", i[\"cluster_name\"], i[\"cloud\"], i[\"region\"], i[\"zone\"])'")
    launcher = _launch(tmp_path, {"setup": setup, "run": run}, placement=zone)
    status = _ended(launcher)
    log = launcher.logs("j-1-a1")[0].decode()
    assert status.phase is Phase.SUCCEEDED, log
    assert "download on node 0 of 127.0.0.1, 2 GPUs" in log
    assert "cluster j-1-a1 AWS us-east-1 sim-a" in log


def test_a_job_without_a_workdir_runs_in_a_folder_of_its_own_not_beside_its_log(tmp_path):
    """Without a workdir the job ran in its run folder: `python train.py | tee output.log` wrote over the log
    `broker logs` reads (everything before it was lost), beside the runner's own files."""
    launcher = _launch(tmp_path, {"run": "echo first line; pwd; echo metrics | tee output.log; echo last line"})
    assert _ended(launcher).phase is Phase.SUCCEEDED
    log = launcher.logs("j-1-a1")[0].decode()
    assert log.splitlines()[0] == "first line" and "last line" in log, log
    cwd = log.splitlines()[1]
    assert cwd == str((tmp_path / "data" / "workdirs" / "jobs" / "j-1-a1" / "work").resolve())
    assert (tmp_path / "data" / "runs" / "j-1-a1" / "exit.json").exists()
