"""A job that sets PATH (in its ``envs``, or as a resume does, ``{"secrets": {"PATH": "x"}}``) on this host: the
runner started its commands as ``bash -c`` looked up in the job's own PATH, found no bash, died without recording an
exit, and the broker said "The node running the job was lost (no exit was recorded)" and retried it as the
infrastructure's fault. The runner's own programs (bash, git) are the host's; the job's PATH is its script's. A
command the runner cannot start at all is the attempt's failure, said in its log and runner.log, never a lost node —
real runners, real processes, read as the broker reads them."""

from __future__ import annotations

import os
import sys
import time

import pytest
from gitrepos import make_repo

from broker.diagnosis import Ending, diagnose
from broker.engine.reconcile import ENDED_PHASE_NAME, _log_tail
from launchers.base import LaunchRequest, Phase
from launchers.local import LocalLauncher

PLACEMENT = {"tier": "onprem", "cloud": "local", "region": "cpu", "zone": "cpu", "num_nodes": 1}


def _wait(check, timeout: float = 60.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if value := check():
            return value
        time.sleep(0.1)
    raise AssertionError("timed out")


@pytest.fixture
def launch(tmp_path):
    """Run a task as a real attempt under the local launcher: (its final status, its log, the broker's diagnosis of
    it, its run folder)."""
    launcher = LocalLauncher(tmp_path / "data" / "runs", python=sys.executable)
    count = iter(range(1, 100))

    def run(task: dict):
        attempt_id = f"j-path-a{next(count)}"
        launcher.launch(LaunchRequest(attempt_id=attempt_id, job_id="j-path", attempt=1, task=task,
                                      placement=PLACEMENT, stop_grace_seconds=1.0))
        status = _wait(lambda: (s := launcher.status(attempt_id)).phase.is_final and s)
        tail = _log_tail(launcher, attempt_id)
        diagnosis = diagnose(Ending(ENDED_PHASE_NAME.get(status.phase, status.phase.value), status.exit_code,
                                    status.signal, status.reason, tail, command=status.step))
        return status, tail, diagnosis, tmp_path / "data" / "runs" / attempt_id

    return run


@pytest.mark.parametrize("where", ["secrets", "envs"])
def test_a_job_whose_path_finds_no_command_fails_as_its_own_error_not_a_lost_node(launch, where):
    status, log, d, _ = launch({"setup": "echo setup ran", "run": "echo run started; ls /", where: {"PATH": "x"}})
    assert (status.phase, status.step, status.exit_code) == (Phase.FAILED, "run", 127), (status, log)
    assert "setup ran\nrun started\n" in log and "ls: command not found" in log
    assert d.cls == "dependency_missing" and not d.infrastructure, d
    assert d.sentence == "The job could not run ls: there is no such command on the node."


def test_the_jobs_path_is_what_its_script_finds_its_commands_in(launch, tmp_path):
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "mytool").write_text("#!/bin/sh\necho mytool ran\n")
    (tools / "mytool").chmod(0o755)
    status, log, _, _ = launch({"run": "mytool; echo \"$PATH\"", "secrets": {"PATH": str(tools)}})
    assert status.phase is Phase.SUCCEEDED, log
    assert "mytool ran\n" in log
    # the broker's Python first, then the job's own PATH: no host directory put back in it
    assert f"{os.path.dirname(sys.executable)}{os.pathsep}{tools}\n" in log


def test_a_git_workdir_is_cloned_whatever_path_the_job_sets(launch, tmp_path):
    """git is the runner's too: with the job's PATH it read as "git is not installed on this host"."""
    repo = make_repo(tmp_path / "repo")
    status, log, _, _ = launch({"workdir": {"url": repo.url}, "run": "echo in the clone; ls", "secrets": {"PATH": "x"}})
    assert "cloned" in log and "git is not installed" not in log, log
    assert (status.phase, status.step, status.exit_code) == (Phase.FAILED, "run", 127), log
    assert "in the clone\n" in log and "ls: command not found" in log


def test_a_command_the_host_cannot_start_is_the_attempts_failure_said_in_its_logs(launch):
    """Popen's own error (here E2BIG: one variable longer than the kernel takes) killed the runner before it recorded
    an exit: the attempt read as a node lost, and every retry met the same."""
    status, log, d, run_dir = launch({"setup": "echo setup ran", "run": "echo never", "envs": {"BIG": "x" * 200_000}})
    assert (status.phase, status.step, status.exit_code) == (Phase.FAILED, "setup", None), (status, log)
    assert "setup ran" not in log and "never" not in log
    assert status.reason.startswith("the setup command could not be started on this host: Argument list too long "
                                    "(E2BIG)"), status.reason
    said = "[spot-broker] setup command: not run: it could not be started on this host: Argument list too long (E2BIG)"
    assert said in log
    assert "could not be started on this host: Argument list too long (E2BIG)" in (run_dir / "runner.log").read_text()
    assert "Traceback" not in (run_dir / "runner.log").read_text()
    assert d.cls == "not_started" and not d.infrastructure, d
    assert d.sentence.startswith("The setup command could not be started on the node, so nothing of it ran: Argument "
                                 "list too long (E2BIG)"), d.sentence
    assert "put large values in a file" in d.hint, d.hint
