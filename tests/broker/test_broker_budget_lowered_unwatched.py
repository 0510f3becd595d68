"""A budget lowered while no engine watches the attempt moves the run's own limit at once.

The API with its engine off and a ``broker worker`` beside it on one data dir: the worker is killed, the budget is
lowered through the API. Before, only an engine's tick moved the run's limit (``limit.json``): with none, the run
went on to the old budget's limit, past the new budget. Real runner processes."""

from __future__ import annotations

import json
import time
from contextlib import contextmanager

from broker_testing import wait_for

from broker.auth import Principal
from broker.engine.reconcile import Engine
from broker.service import BrokerService
from broker.store import open_store
from launchers.base import Phase
from launchers.local import LocalLauncher
from pricing.money import to_micros

ADMIN = Principal("admin", None, admin=True)
CONFIG = ("pools:\n  - {name: local, slots: 4, price_per_slot_hour: \"36\"}\n"  # $0.01 a second
          "tick_seconds: 0.05\nstop_grace_seconds: 1\n")


def _limit(launcher: LocalLauncher, attempt_id: str) -> float:
    return json.loads((launcher.runs_dir / attempt_id / "limit.json").read_text())["stop_at"]


def _exit(launcher: LocalLauncher, attempt_id: str) -> dict | None:
    path = launcher.runs_dir / attempt_id / "exit.json"
    return json.loads(path.read_text()) if path.exists() else None


def test_a_budget_lowered_with_no_engine_watching_stops_the_run_at_the_new_budget(tmp_path, make_settings):
    settings = make_settings(f"sqlite://{tmp_path / 'e.db'}", config=CONFIG)
    store = open_store(f"sqlite://{tmp_path / 'e.db'}")
    launcher = LocalLauncher(tmp_path / "data" / "runs")
    marks = tmp_path / "marks"
    try:
        api = BrokerService(settings, store, launcher)  # the API's service: its engine is off
        job_id = api.submit(ADMIN, {"name": "t", "broker": {"budget_usd": 10}, "run": (
            f"trap 'echo saved >> {marks}; exit 0' TERM; echo start >> {marks}; sleep 120 & wait")})[0].id
        worker = Engine(settings, store, launcher)
        wait_for(lambda: worker.tick() or (store.get_job(job_id).state.value == "running" and marks.exists()),
                 timeout=20)
        attempt = store.attempts(job_id)[-1]
        old = _limit(launcher, attempt.id)
        assert old > time.time() + 900  # $10 at $0.01 a second
        # the worker is killed: no engine watches the attempt; the budget is lowered to $0.08 (8 s of it)
        lowered = api.raise_budget(ADMIN, job_id, to_micros("0.08"))
        assert lowered.budget == to_micros("0.08")
        wanted = attempt.created_at + 8 - 1 - 3  # what the budget pays for, less the grace and the launcher's margin
        assert abs(_limit(launcher, attempt.id) - wanted) < 1.5, "the run's own limit still holds the old budget"
        assert abs(store.attempts(job_id)[-1].limit_at - wanted) < 1.5
        # the run stops by itself at the new limit, through its notice: the job saved before it ended
        ended = wait_for(lambda: _exit(launcher, attempt.id), timeout=15)
        assert ended["stopped"] and ended["reason"] == "budget"
        assert ended["ended_at"] < wanted + 1 + 3  # within the grace and the margin the limit keeps
        assert marks.read_text().splitlines() == ["start", "saved"]
        # a worker back reads a budget stop (not a limit outdated, to resume), the spend within the new budget
        again = Engine(settings, store, launcher)
        job = wait_for(lambda: again.tick() or (j := store.get_job(job_id)).state.is_final and j, timeout=20)
        assert job.state.value == "stopped_budget" and job.spent <= job.budget
        assert not [e for e in store.events(job_id) if e.event == "budget_limit_not_moved"]
    finally:
        for run in launcher.runs_dir.glob("j*"):
            launcher.kill(run.name)
        store.close()


def test_a_limit_this_broker_cannot_reach_is_said_and_left_to_the_broker_watching_it(tmp_path, make_settings):
    """The attempt runs on another host's run folder (another launcher view): this broker cannot move its limit, and
    says so in the job's events; the broker watching it moves it at its next look."""
    settings = make_settings(f"sqlite://{tmp_path / 'e.db'}", config=CONFIG)
    store = open_store(f"sqlite://{tmp_path / 'e.db'}")
    hosts = {name: LocalLauncher(tmp_path / name / "runs") for name in ("a", "b")}
    try:
        job_id = BrokerService(settings, store, hosts["a"]).submit(ADMIN, {"name": "t", "run": "sleep 120",
                                                                           "broker": {"budget_usd": 10}})[0].id
        watching = Engine(settings, store, hosts["a"])
        wait_for(lambda: watching.tick() or store.get_job(job_id).state.value == "running", timeout=20)
        attempt = store.attempts(job_id)[-1]
        old = _limit(hosts["a"], attempt.id)
        BrokerService(settings, store, hosts["b"]).raise_budget(ADMIN, job_id, to_micros("5"))
        assert _limit(hosts["a"], attempt.id) == old
        said = [e for e in store.events(job_id) if e.event == "budget_limit_not_moved"]
        assert len(said) == 1 and hosts["a"].domain in said[0].reason and said[0].actor == "admin"
        assert said[0].data["attempt_id"] == attempt.id and said[0].data["wanted"] < old
        watching.tick()  # the broker watching it moves it
        assert abs(_limit(hosts["a"], attempt.id) - (attempt.created_at + 500 - 1 - 3)) < 1.5
        assert hosts["a"].status(attempt.id).phase is Phase.RUNNING
    finally:
        for launcher in hosts.values():
            for run in launcher.runs_dir.glob("j*"):
                launcher.kill(run.name)
        store.close()


@contextmanager
def _running(tmp_path, make_settings):
    """A $10 job running on this host's pool under an engine, its service beside it: (store, launcher, service,
    engine, job id, its attempt); its runs killed and the store closed after."""
    settings = make_settings(f"sqlite://{tmp_path / 'e.db'}", config=CONFIG)
    store = open_store(f"sqlite://{tmp_path / 'e.db'}")
    launcher = LocalLauncher(tmp_path / "data" / "runs")
    try:
        api = BrokerService(settings, store, launcher)
        job_id = api.submit(ADMIN, {"name": "t", "run": "sleep 120", "broker": {"budget_usd": 10}})[0].id
        engine = Engine(settings, store, launcher)
        wait_for(lambda: engine.tick() or store.get_job(job_id).state.value == "running", timeout=20)
        yield store, launcher, api, engine, job_id, store.attempts(job_id)[-1]
    finally:
        for run in launcher.runs_dir.glob("j*"):
            launcher.kill(run.name)
        store.close()


def test_a_budget_raised_leaves_the_limit_to_the_engine(tmp_path, make_settings):
    """Raising moves nothing from the service (an engine moves it; with none, the run stops at the old limit and is
    resumed with the new budget): no event about the limit, the run's limit as it was until an engine looks."""
    with _running(tmp_path, make_settings) as (store, launcher, api, engine, job_id, attempt):
        old = _limit(launcher, attempt.id)
        api.raise_budget(ADMIN, job_id, to_micros("20"))
        assert _limit(launcher, attempt.id) == old
        assert not [e for e in store.events(job_id) if e.event == "budget_limit_not_moved"]
        engine.tick()
        assert _limit(launcher, attempt.id) > old + 900


def test_an_engine_that_moved_the_limit_on_a_budget_read_before_it_was_lowered_moves_it_again(tmp_path, make_settings):
    """The engine read the job raised to $20 and moves the run's limit up; meanwhile the API lowers the budget to $5
    (moving the limit down and recording it). The engine's limit came after, and its commit failed: its next look
    gives the run the limit of $5 again, though the recorded limit already says so."""
    with _running(tmp_path, make_settings) as (store, launcher, api, engine, job_id, attempt):
        api.raise_budget(ADMIN, job_id, to_micros("20"))
        read = store.get_job(job_id)  # what the engine's tick read
        api.raise_budget(ADMIN, job_id, to_micros("5"))
        five = attempt.created_at + 500 - 1 - 3
        assert abs(_limit(launcher, attempt.id) - five) < 1.5 and abs(store.attempts(job_id)[-1].limit_at - five) < 1.5
        engine._guard(engine._monitor, read, time.time())  # moves the limit for $20, and its commit conflicts
        assert _limit(launcher, attempt.id) > five + 1000
        engine.tick()
        assert abs(_limit(launcher, attempt.id) - five) < 1.5
