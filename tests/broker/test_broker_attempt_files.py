"""The local launcher's run folders (``<data dir>/runs/<attempt id>/``: the attempt's log, the runner's files) go
once the store no longer holds their job — pruned by the retention policy — and never while the job is in the store,
nor while a process of this host still holds the folder. Real parts: a SQLite store, the retention's own prune, the
engine, and the local launcher's runner processes."""

import os
import signal
import time
from dataclasses import replace

import pytest

from broker.auth import Principal
from broker.engine.reconcile import WORKDIR_GC_SECONDS, Engine
from broker.lifecycle import AttemptState, JobState
from broker.models import Attempt, Job
from broker.retention import DAY, Retention
from broker.store import Change
from launchers.base import Phase
from launchers.local import LocalLauncher

from broker_testing import local_broker, run_until, wait_for

ADMIN = Principal("admin", None, admin=True)
CONFIG = """
pools:
  - {name: cpu, slots: 4, price_per_slot_hour: "0.36"}
stop_grace_seconds: 1
tick_seconds: 0.05
job_retention_days: 1
"""


@pytest.fixture
def broker(make_settings, tmp_path):
    with local_broker(make_settings, tmp_path, CONFIG) as (service, engine, store, launcher):
        try:
            yield service, engine, store, launcher
        finally:
            for run in launcher.runs_dir.glob("j-*"):
                launcher.kill(run.name)
            if engine._housekeeping is not None:  # the round beside the ticks: done before the store closes
                engine._housekeeping.result(timeout=30)


def submit(service, run: str):
    return service.submit(ADMIN, {"name": "t", "run": run, "resources": {"cpus": 1},
                                  "broker": {"budget_usd": 1}})[0]


def prune(store) -> int:
    """What the retention policy does a day past ``job_retention_days: 1``: every final job goes."""
    return Retention(store, days=1, pause=0).prune(time.time() + 2 * DAY)


def forget(store, job_id: str) -> None:
    """Record the job ended without its run ending (another broker called it lost, its own broker silent), then prune
    it: the store no longer holds a job whose runner still runs on this host."""
    job = store.get_job(job_id)
    store.commit(Change(job=replace(job, state=JobState.CANCELLED, updated_at=job.updated_at),
                        expected_version=job.version))
    assert prune(store) == 1 and store.get_job(job_id) is None


def test_a_run_folder_stays_while_its_job_is_in_the_store_and_goes_once_the_job_is_pruned(broker):
    service, engine, store, launcher = broker
    done = run_until(engine, store, submit(service, "echo trained").id, {"succeeded"})
    failed = run_until(engine, store, submit(service, "echo oops; exit 3").id, {"failed"})  # may still be resumed
    live = run_until(engine, store, submit(service, "echo started; sleep 60").id, {"running"})
    folders = {j.id: launcher.runs_dir / f"{j.id}-a1" for j in (done, failed, live)}

    assert engine.sweep_attempt_files() == []
    assert all(f.is_dir() for f in folders.values())
    assert "oops" in service.logs(ADMIN, failed.id, attempt=1)["data"]  # `broker logs` of a job still held

    assert prune(store) == 2  # the two final jobs; the running one is not final
    assert sorted(engine.sweep_attempt_files()) == sorted([f"{done.id}-a1", f"{failed.id}-a1"])
    assert not folders[done.id].exists() and not folders[failed.id].exists()
    assert folders[live.id].is_dir() and launcher.status(f"{live.id}-a1").phase is Phase.RUNNING
    assert b"started" in launcher.logs(f"{live.id}-a1")[0]
    assert sorted(os.listdir(launcher.runs_dir)) == [".domain", f"{live.id}-a1"], "nothing half removed is left"
    assert engine.sweep_attempt_files() == []  # nothing due: nothing removed, nothing counted twice


def test_a_run_folder_whose_runner_still_runs_is_kept_though_its_job_is_gone(broker):
    service, engine, store, launcher = broker
    job = run_until(engine, store, submit(service, "echo started; sleep 60").id, {"running"})
    attempt = f"{job.id}-a1"
    forget(store, job.id)

    assert engine.sweep_attempt_files() == []
    assert launcher.status(attempt).phase is Phase.RUNNING, "its runner runs on, its folder whole"

    launcher.stop(attempt, grace_seconds=1)
    wait_for(lambda: launcher.status(attempt).phase.is_final)
    wait_for(lambda: engine.sweep_attempt_files() == [attempt])  # once the runner has let go of its files
    assert not (launcher.runs_dir / attempt).exists()


def test_a_process_the_job_left_running_keeps_its_run_folder_after_the_runner_ended(broker, tmp_path):
    service, engine, store, launcher = broker
    pid_file = tmp_path / "daemon.pid"
    # a background process that outlives the job's command (a server, a copier): its output goes elsewhere, and it
    # works in the job's own folder, not the run folder; it has the attempt's BROKER_NOTICE_FILE in its environment
    job = run_until(engine, store, submit(service, f"sleep 60 </dev/null >/dev/null 2>&1 & echo $! > {pid_file}").id,
                    {"succeeded"})
    attempt = f"{job.id}-a1"
    daemon = int(wait_for(lambda: pid_file.exists() and pid_file.read_text().strip()))
    try:
        assert prune(store) == 1
        assert engine.sweep_attempt_files() == []
        assert (launcher.runs_dir / attempt / "exit.json").exists()
    finally:
        os.kill(daemon, signal.SIGKILL)
    wait_for(lambda: engine.sweep_attempt_files() == [attempt])
    assert not (launcher.runs_dir / attempt).exists()


def test_the_engine_sweeps_run_folders_at_start_then_hourly_beside_the_ticks(broker):
    service, engine, store, launcher = broker
    first = run_until(engine, store, submit(service, "echo one").id, {"succeeded"})
    second = run_until(engine, store, submit(service, "echo two").id, {"succeeded"})
    now = [time.time()]
    later = Engine(engine.settings, store, launcher, clock=lambda: now[0])

    def tick_and_wait() -> None:
        later.tick()
        if later._housekeeping is not None:
            later._housekeeping.result(timeout=30)

    store.commit(Change(job=replace(second, updated_at=second.updated_at + 10 * DAY), expected_version=second.version))
    assert Retention(store, days=1, pause=0).prune(first.updated_at + 2 * DAY) == 1  # the first only
    tick_and_wait()  # a broker starting sweeps what the store dropped while none ran
    assert not (launcher.runs_dir / f"{first.id}-a1").exists()

    assert Retention(store, days=1, pause=0).prune(second.updated_at + 12 * DAY) == 1
    now[0] += WORKDIR_GC_SECONDS / 2
    tick_and_wait()
    assert (launcher.runs_dir / f"{second.id}-a1").is_dir(), "not every tick: hourly"
    now[0] += WORKDIR_GC_SECONDS / 2
    tick_and_wait()
    assert not (launcher.runs_dir / f"{second.id}-a1").exists()


def test_a_sweep_looks_at_a_bounded_number_of_attempts_and_the_next_goes_on_from_there(broker):
    _, engine, store, launcher = broker
    for n in range(3):  # run folders of jobs the store has never held (a store emptied, say)
        (launcher.runs_dir / f"j-gone{n}-a1").mkdir()
    asked: list[list[str]] = []

    def kept_all(ids: list[str]) -> set[str]:
        asked.append(list(ids))
        return set(ids)

    for _ in range(3):
        assert launcher.sweep_attempt_files(kept_all, limit=2) == []
    assert asked == [["j-gone0-a1", "j-gone1-a1"], ["j-gone2-a1", "j-gone0-a1"], ["j-gone1-a1", "j-gone2-a1"]]

    asked.clear()
    held = engine._attempts_held
    assert launcher.sweep_attempt_files(held, limit=2) == ["j-gone0-a1", "j-gone1-a1"]  # on from the last one
    assert launcher.sweep_attempt_files(held, limit=2) == ["j-gone2-a1"]
    assert launcher.attempt_files() == []


def test_on_either_store_only_the_attempts_of_jobs_it_no_longer_holds_lose_their_folders(store, make_settings):
    settings = make_settings(config=CONFIG)
    launcher = LocalLauncher(settings.data_dir / "runs")
    engine = Engine(settings, store, launcher)
    now = time.time()

    def ended(job_id: str, attempts: int, state: JobState, days_ago: float) -> list[str]:
        updated = now - days_ago * DAY
        job = store.commit(Change(job=Job(id=job_id, name="t", team="vision", state=JobState.QUEUED, spec={"run": "x"},
                                          budget=1_000_000, priority=0, submitted_at=updated - DAY,
                                          updated_at=updated - DAY), expected_version=None))
        ids = [f"{job_id}-a{n}" for n in range(1, attempts + 1)]
        store.commit(Change(job=replace(job, state=state, attempts=attempts, updated_at=updated),
                            expected_version=job.version,
                            attempts=[Attempt(id=a, job_id=job_id, n=n, state=AttemptState.FAILED, launcher="local",
                                              placement={}, price_per_hour=0, created_at=updated - DAY, ended_at=updated)
                                      for n, a in enumerate(ids, 1)]))
        for a in ids:  # what the runner left: its log, its exit
            (launcher.runs_dir / a).mkdir()
            (launcher.runs_dir / a / "output.log").write_text(f"log of {a}\n")
        return ids

    pruned = ended("j-0000000001", 3, JobState.SUCCEEDED, 90) + ended("j-0000000002", 1, JobState.CANCELLED, 90)
    kept = ended("j-0000000003", 2, JobState.FAILED, 30) + ended("j-0000000004", 1, JobState.QUEUED, 400)
    (launcher.runs_dir / "scratch").mkdir()  # not an attempt's: not the sweep's to judge

    assert engine.sweep_attempt_files() == []
    assert Retention(store, days=60, pause=0).prune(now) == 2
    assert sorted(engine.sweep_attempt_files()) == sorted(pruned)
    assert launcher.attempt_files() == sorted(kept + ["scratch"])
    assert all((launcher.runs_dir / a / "output.log").read_text() == f"log of {a}\n" for a in kept)


def test_without_job_retention_days_the_engine_leaves_every_run_folder_whatever_the_store_holds(make_settings, tmp_path):
    """Nothing is pruned then: a job gone from the store means the store was emptied or replaced, and its logs stay."""
    with local_broker(make_settings, tmp_path, CONFIG.replace("job_retention_days: 1\n", "")) as (
            service, engine, store, launcher):
        job = run_until(engine, store, submit(service, "echo kept").id, {"succeeded"})
        assert Retention(store, days=1, pause=0).prune(time.time() + 2 * DAY) == 1  # as a store that lost it
        fresh = Engine(engine.settings, store, launcher)
        fresh.tick()
        if fresh._housekeeping is not None:
            fresh._housekeeping.result(timeout=30)
        assert (launcher.runs_dir / f"{job.id}-a1").is_dir()

