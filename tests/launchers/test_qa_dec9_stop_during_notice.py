"""A stop that comes while an attempt is already stopping (a budget stop or a cancel during a spot preemption's
notice), and the attempt's own budget limit during that notice. ``LocalLauncher.stop`` dropped any stop once
``stop.json`` was there, and the runner stopped watching its limit once stopping: a job that ignored its SIGTERM ran
the zone's whole 40 s grace at $36/h, $0.52 on a $0.25 budget, and a cancel changed nothing. Now the SIGKILL comes
at the soonest of the stops' ends (no second SIGTERM: it would cut a checkpoint's save short), and at the limit's at
the latest; the attempt still ends as the first stop said (preempted). Real launcher, real runner processes."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from launchers.base import LaunchRequest, Phase
from launchers.local import LocalLauncher

#: a job that logs its SIGTERM and goes on, as QA's did
STUBBORN = "echo started; trap 'echo TERM ignored' TERM; while true; do sleep 0.2; done"
PREEMPTION_GRACE = 40.0
#: the runner looks at its stop files every 0.5 s, and a loaded host starts and kills processes slowly
TOLERANCE = 3.0


def _wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"not in {timeout} s: {what}")


def _output(run_dir: Path) -> str:
    try:
        return (run_dir / "output.log").read_text()
    except FileNotFoundError:
        return ""


def _end(launcher: LocalLauncher, attempt: str, run_dir: Path) -> None:
    """What a failed test left running goes (never the pid of a runner long gone)."""
    if not (run_dir / "exit.json").exists():
        launcher.kill(attempt)


def _launch(tmp_path, run: str, **fields) -> tuple[LocalLauncher, str, Path]:
    launcher = LocalLauncher(tmp_path / "runs")
    attempt = "j-1-a1"
    launcher.launch(LaunchRequest(attempt_id=attempt, job_id="j-1", attempt=1, task={"run": run},
                                  placement={"tier": "spot"}, **fields))
    run_dir = tmp_path / "runs" / attempt
    _wait_for(lambda: "started" in _output(run_dir) and launcher.status(attempt).phase is Phase.RUNNING, 20,
              "the job started")
    return launcher, attempt, run_dir


@pytest.mark.parametrize("reason", ["budget", "cancelled"])
def test_a_stop_with_a_short_grace_during_a_preemption_notice_kills_at_its_own_end(tmp_path, reason):
    launcher, attempt, run_dir = _launch(tmp_path, STUBBORN, stop_grace_seconds=3)
    try:
        assert launcher.preempt(attempt, grace_seconds=PREEMPTION_GRACE)
        _wait_for(lambda: "TERM ignored" in _output(run_dir), 10, "the notice's SIGTERM reached the job")
        asked = time.monotonic()
        launcher.stop(attempt, grace_seconds=3, reason=reason)
        # asked again later, with a longer grace (an engine's resend, a cancel after the budget stop): not put off
        launcher.stop(attempt, grace_seconds=30, reason="cancelled")
        _wait_for(lambda: (run_dir / "exit.json").exists(), 3 + TOLERANCE + 4,
                  f"the job killed within the {reason} stop's 3 s grace, not the preemption's {PREEMPTION_GRACE} s")
        took = time.monotonic() - asked
        assert took < 3 + TOLERANCE, took
        assert _output(run_dir).count("TERM ignored") == 1  # no second SIGTERM: the first notice's save goes on
        status = launcher.status(attempt)
        assert status.phase is Phase.PREEMPTED and status.reason == "preempted"  # as the first stop said
        assert json.loads((run_dir / "stop.json").read_text())["reason"] == "preempted"
    finally:
        _end(launcher, attempt, run_dir)


def test_the_attempts_limit_kills_it_during_a_preemption_notice(tmp_path):
    # the limit: 6 s from launch, and the 1 s stop grace after it; the preemption's 40 s grace would go far past
    launched = time.monotonic()
    launcher, attempt, run_dir = _launch(tmp_path, STUBBORN, stop_grace_seconds=1, stop_in_seconds=6)
    try:
        assert launcher.preempt(attempt, grace_seconds=PREEMPTION_GRACE)
        _wait_for(lambda: "TERM ignored" in _output(run_dir), 5, "the notice's SIGTERM reached the job")
        assert not (run_dir / "exit.json").exists()
        _wait_for(lambda: (run_dir / "exit.json").exists(), 6 + 1 + TOLERANCE + 4,
                  "the runner killed the job at its limit during the preemption's grace")
        took = time.monotonic() - launched
        assert took < 6 + 1 + TOLERANCE, took
        assert _output(run_dir).count("TERM ignored") == 1
        # killed at its limit, it ends as its budget's stop: read as the preemption, a broker that was away had the
        # job "restart from the beginning", then stopped it at its budget
        status = launcher.status(attempt)
        assert (status.phase, status.reason) == (Phase.STOPPED, "budget"), status
    finally:
        _end(launcher, attempt, run_dir)


def test_a_sooner_stop_brings_forward_the_sigterm_held_back_for_a_listener(tmp_path):
    # a checkpointer listens for the notice file: the group's SIGTERM waits until shortly before the SIGKILL, and
    # that SIGKILL's moment moved 37 s sooner: the SIGTERM comes before it, and the notice says the time now left
    listen = 'mkdir -p "$BROKER_NOTICE_FILE.listeners" && touch "$BROKER_NOTICE_FILE.listeners/$$"; '
    launcher, attempt, run_dir = _launch(tmp_path, listen + STUBBORN, stop_grace_seconds=3)
    try:
        assert launcher.preempt(attempt, grace_seconds=PREEMPTION_GRACE)
        _wait_for(lambda: (run_dir / "notice.json").exists(), 5, "the notice written")
        time.sleep(1.0)
        assert "TERM ignored" not in _output(run_dir)  # held back for the listener
        asked = time.monotonic()
        launcher.stop(attempt, grace_seconds=3, reason="budget")
        _wait_for(lambda: json.loads((run_dir / "notice.json").read_text())["grace_seconds"] <= 3, 3,
                  "the notice rewritten with the time left")
        notice = json.loads((run_dir / "notice.json").read_text())
        assert notice["reason"] == "preempted"
        _wait_for(lambda: (run_dir / "exit.json").exists(), 3 + TOLERANCE + 4, "the job killed at the budget stop's end")
        assert time.monotonic() - asked < 3 + TOLERANCE
        assert _output(run_dir).count("TERM ignored") == 1  # its last warning, before the SIGKILL
    finally:
        _end(launcher, attempt, run_dir)
