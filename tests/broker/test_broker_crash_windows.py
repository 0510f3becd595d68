"""Crash and clock windows the launch path must survive: an attempt runs once."""

import json
import os
import stat
import sys
import time

import pytest

from broker.auth import Principal
from broker.engine.reconcile import Engine
from broker.lifecycle import JobState
from broker.service import BrokerService
from broker.store import open_store
from launchers.base import Phase
from launchers.local import LocalLauncher

from broker_testing import ONE_CHEAP_SLOT, kill_runner_alone, wait_for

ADMIN = Principal("admin", None, admin=True)
CONFIG = ONE_CHEAP_SLOT


def slow_python(tmp_path, seconds):
    """A Python that takes ``seconds`` to start (a loaded host): the runner is spawned, not yet running."""
    path = tmp_path / "slow-python"
    path.write_text(f"#!/bin/sh\nsleep {seconds}\nexec {sys.executable} \"$@\"\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_a_runner_still_starting_when_the_clock_jumps_is_not_lost_and_runs_once(make_settings, tmp_path):
    settings = make_settings(config=CONFIG)
    store = open_store(f"sqlite://{tmp_path / 'j.db'}")
    launcher = LocalLauncher(settings.data_dir / "runs", python=slow_python(tmp_path, 1.5))
    engine = Engine(settings, store, launcher)
    service = BrokerService(settings, store, launcher)
    marks = tmp_path / "marks"
    job = service.submit(ADMIN, {"name": "t", "run": f"echo $BROKER_ATTEMPT >> {marks}; sleep 0.5",
                                 "resources": {"cpus": 1}, "broker": {"budget_usd": 1}})[0]
    try:
        wait_for(lambda: engine.tick() or store.get_job(job.id).state is JobState.LAUNCHING)
        spawned = launcher.runs_dir / f"{job.id}-a1" / "spawned"
        past = time.time() - 60  # the host's clock stepped a minute forward (NTP) while the runner started
        os.utime(spawned, (past, past))
        assert launcher.status(f"{job.id}-a1").phase is Phase.PENDING
        final = wait_for(lambda: engine.tick() or (j := store.get_job(job.id)).state.is_final and j, timeout=30)
        time.sleep(2)  # any second run would have written by now
        assert final.state is JobState.SUCCEEDED and final.attempts == 1
        assert marks.read_text() == "1\n"
    finally:
        for run in launcher.runs_dir.glob("j*"):
            launcher.kill(run.name)
        store.close()


def test_a_runner_starting_while_a_broker_probes_its_lock_still_runs_the_attempt(tmp_path):
    # every status() of a live attempt takes the runner's lock for an instant to see whether a runner holds it;
    # a runner starting in that instant found the lock taken, said "another runner holds this attempt" and left:
    # nothing ran, and the attempt was called lost — a spot zone blocked, the job resumed — for nothing
    import fcntl

    from launchers.base import LaunchRequest

    launcher = LocalLauncher(tmp_path / "runs", python=slow_python(tmp_path, 0.5))
    marker = tmp_path / "ran"
    launcher.launch(LaunchRequest(attempt_id="j-p-a1", job_id="j-p", attempt=1, task={"run": f"touch {marker}"},
                                  placement={}, envs={}, slots=(), stop_grace_seconds=1))
    with open(launcher.runs_dir / "j-p-a1" / "runner.lock", "a+") as probe:
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a broker's probe, as the runner starts
        time.sleep(1)  # the runner is up and trying the lock (the instant of a probe, stretched)
    status = wait_for(lambda: (s := launcher.status("j-p-a1")).phase.is_final and s, timeout=20)
    assert status.phase is Phase.SUCCEEDED and marker.exists()


def test_a_runner_killed_alone_takes_its_job_with_it_before_the_job_resumes(make_settings, tmp_path):
    # the job runs in a session of its own, so a runner SIGKILLed by itself (the OOM killer, a stray kill)
    # left it running: the attempt read as lost, and attempt 2 started beside attempt 1's still running job
    settings = make_settings(config=CONFIG)
    store = open_store(f"sqlite://{tmp_path / 'j.db'}")
    launcher = LocalLauncher(settings.data_dir / "runs")
    engine = Engine(settings, store, launcher)
    service = BrokerService(settings, store, launcher)
    try:
        final, marks = kill_runner_alone(service, engine, store, launcher, ADMIN, tmp_path / "marks")
        assert final.state is JobState.SUCCEEDED and final.attempts == 2
        assert marks == ["start 1", "start 2", "end 2"]
        assert store.attempts(final.id)[0].state.value == "lost"
    finally:
        store.close()


def test_a_runner_that_takes_its_lock_between_two_looks_of_status_is_not_called_lost(tmp_path):
    # status() looked at the runner's lock (free: the runner was still starting), then found runner.pid, which the
    # runner writes once it holds the lock, and took that for a runner that had started and died: lost, and the
    # job launched again beside the attempt now running
    from launchers.base import LaunchRequest

    looks = ["launching"]

    class Interleaved(LocalLauncher):
        def _runner_alive(self, run_dir):
            alive = super()._runner_alive(run_dir)
            if not looks:  # status()'s first look; the runner takes its lock right after it
                looks.append(alive)
                wait_for((run_dir / "runner.pid").exists)
            return alive

    launcher = Interleaved(tmp_path / "runs", python=slow_python(tmp_path, 0.5))
    launcher.launch(LaunchRequest(attempt_id="j-r-a1", job_id="j-r", attempt=1, task={"run": "sleep 1"},
                                  placement={}, envs={}, slots=(), stop_grace_seconds=1))
    looks.clear()
    assert launcher.status("j-r-a1").phase is not Phase.LOST and looks == [False]
    assert wait_for(lambda: (s := launcher.status("j-r-a1")).phase.is_final and s, timeout=20).phase is Phase.SUCCEEDED


def test_a_runner_hung_before_it_took_its_lock_is_killed_when_its_attempt_is_called_lost(tmp_path, monkeypatch):
    # a spawned runner alive but not started counts as starting only so long; one past that is killed as its
    # attempt is called lost, so that it never starts the job after the job resumed elsewhere
    import launchers.local as local
    from launchers.base import LaunchRequest

    monkeypatch.setattr(local, "STARTUP_LIMIT_SECONDS", 3.0)  # room for the first look on a loaded host
    marker = tmp_path / "ran"
    launcher = LocalLauncher(tmp_path / "runs", python=slow_python(tmp_path, 8))
    launcher.launch(LaunchRequest(attempt_id="j-h-a1", job_id="j-h", attempt=1, task={"run": f"touch {marker}"},
                                  placement={}, envs={}, slots=(), stop_grace_seconds=1))
    assert launcher.status("j-h-a1").phase is Phase.PENDING
    time.sleep(3.2)
    assert launcher.status("j-h-a1").phase is Phase.LOST
    time.sleep(6)  # past when the hung runner would have started
    assert not marker.exists() and not (launcher.runs_dir / "j-h-a1" / "runner.pid").exists()


class _LaunchesAfter:
    """This host's launcher, but ``launch`` first runs ``before`` (once): what happens between an engine's
    ``placed → launching`` commit and its launch call, a window no real process can be timed into."""

    def __init__(self, launcher, before):
        self._launcher, self._before = launcher, before

    def __getattr__(self, name):
        return getattr(self._launcher, name)

    def launch(self, request):
        before, self._before = self._before, None
        if before is not None:
            before()
        self._launcher.launch(request)


def test_a_cancel_between_one_engines_launch_record_and_its_launch_call_leaves_no_run_behind(make_settings,
                                                                                            tmp_path):
    # engine a records attempt 1 as launching; the user cancels, and engine b, sharing the store and this host,
    # finds no such attempt here and records the job cancelled; only then does a's launch call start the run.
    # Nobody monitors a cancelled job: the run must still be stopped, now, not when its budget's limit comes
    settings = make_settings(config=CONFIG)
    store = open_store(f"sqlite://{tmp_path / 'two.db'}")
    service = BrokerService(settings, store, LocalLauncher(settings.data_dir / "runs"))
    b = Engine(settings, store, LocalLauncher(settings.data_dir / "runs"), actor="b")
    job = service.submit(ADMIN, {"name": "t", "run": f"echo ran >> {tmp_path / 'marks'}; sleep 60",
                                 "resources": {"cpus": 1}, "broker": {"budget_usd": 1}})[0]

    def cancel_and_let_b_end_it():
        service.cancel(ADMIN, job.id)
        b.tick()
        assert store.get_job(job.id).state is JobState.CANCELLED

    local = LocalLauncher(settings.data_dir / "runs")
    a = Engine(settings, store, _LaunchesAfter(local, cancel_and_let_b_end_it), actor="a")
    try:
        a.tick()  # places and launches: the cancel and b's tick come between the record and the call
        (attempt,) = store.attempts(job.id)
        exit_file = settings.data_dir / "runs" / attempt.id / "exit.json"
        wait_for(lambda: a.tick() or b.tick() or exit_file.exists(), timeout=15)  # the grace is 1 s
        assert local.status(attempt.id).phase is Phase.STOPPED
        assert store.get_job(job.id).state is JobState.CANCELLED
    finally:
        local.kill(attempt.id)
        store.close()


def test_a_broker_that_died_between_recording_a_launch_and_launching_bills_from_the_launch_made_on_restart(
        make_settings, tmp_path):
    # $36/h is one cent a second. The broker records attempt 1 and dies before its launch call; back an hour
    # later, it launches the attempt (once): nothing ran, nor was anything provisioned, in that hour, so the
    # attempt is billed from that launch, its budget's limit counted from it too — not stopped at a budget the
    # hour used up
    settings = make_settings(config=CONFIG.replace('"0.36"', '"36"'))
    store = open_store(f"sqlite://{tmp_path / 'gap.db'}")
    local = LocalLauncher(settings.data_dir / "runs")
    now = [time.time()]
    service = BrokerService(settings, store, local, clock=lambda: now[0])
    job = service.submit(ADMIN, {"name": "t", "run": f"echo ran >> {tmp_path / 'marks'}; sleep 60",
                                 "resources": {"cpus": 1}, "broker": {"budget_usd": 1}})[0]

    def dies():
        raise KeyboardInterrupt  # the process ends here: nothing after the record runs

    first = Engine(settings, store, _LaunchesAfter(local, dies), clock=lambda: now[0], monotonic=lambda: now[0])
    try:
        try:
            first.tick()
        except KeyboardInterrupt:
            pass
        (recorded,) = store.attempts(job.id)
        assert store.get_job(job.id).state is JobState.LAUNCHING and local.status(recorded.id).phase is Phase.GONE
        now[0] += 3600
        restarted = Engine(settings, store, local, clock=lambda: now[0], monotonic=lambda: now[0])
        launched_from = time.time()  # the runner's clock is the host's: its launch lies between these two
        wait_for(lambda: restarted.tick() or store.get_job(job.id).state is JobState.RUNNING)
        launched_by = time.time()
        (attempt,) = store.attempts(job.id)
        assert attempt.created_at == recorded.created_at + 3600  # billed from the launch made on restart
        assert attempt.limit_at == recorded.limit_at + 3600
        now[0] += 10
        restarted.tick()
        running = store.get_job(job.id)
        assert running.state is JobState.RUNNING and running.spent == 100_000  # 10 s, not the hour
        marks = tmp_path / "marks"  # "running" may come before the command reached its echo on a loaded host
        wait_for(lambda: marks.exists() and marks.read_text().endswith("\n"))
        assert marks.read_text() == "ran\n"  # launched once
        stop_at = json.loads((settings.data_dir / "runs" / attempt.id / "limit.json").read_text())["stop_at"]
        # the runner's limit: 96 s from the launch (100 s of budget, less the grace and the margin)
        assert launched_from - 3 <= stop_at - (100 - 1 - 3) <= launched_by + 3
    finally:
        local.kill(f"{job.id}-a1")
        store.close()
