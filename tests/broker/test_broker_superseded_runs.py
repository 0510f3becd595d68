"""A run on this host whose attempt the store has ended or moved past is stopped, and what it ran after is said.

Two brokers on one Redis, each on its own host (its own run folder: two launcher views). The broker that launched
attempt 1 is killed; after ``owner_timeout_seconds`` the other records attempt 1 lost (``owner_silent``) and runs
attempt 2. Attempt 1's runner outlives its broker. Before, nothing ever stopped it: an engine monitors only a job's
latest attempt, so it ran to its own limit — set for the whole budget — beside attempt 2, its cost never recorded.
Real runner processes, a real redis-server."""

from __future__ import annotations

import json
import os
import time

import pytest
import redis
from broker_testing import wait_for

from broker.auth import Principal
from broker.engine import reconcile
from broker.engine.billing import billed_seconds
from broker.engine.reconcile import Engine
from broker.service import BrokerService
from broker.store import open_store
from launchers.base import Phase
from launchers.local import LocalLauncher
from pricing.money import cost_for_seconds

ADMIN = Principal("admin", None, admin=True)


def _config(timeout: float) -> str:
    return ("pools:\n  - {name: local, slots: 4, price_per_slot_hour: \"36\"}\n"
            f"tick_seconds: 0.05\nstop_grace_seconds: 2\nowner_timeout_seconds: {timeout}\n")


@pytest.fixture
def two_hosts(tmp_path, redis_server, make_settings):
    def make(db: int, timeout: float, clock=None):
        url = redis_server.url.rsplit("/", 1)[0] + f"/{db}"
        redis.Redis.from_url(url).flushdb()
        settings = make_settings(url, config=_config(timeout))
        store = open_store(url)
        hosts = {name: LocalLauncher(tmp_path / name / "runs") for name in ("a", "b")}
        kw = {} if clock is None else {"clock": lambda: clock[0], "monotonic": lambda: clock[0]}

        def engine(name):
            return Engine(settings, store, hosts[name], **kw)

        service = BrokerService(settings, store, hosts["a"], **({} if clock is None else {"clock": lambda: clock[0]}))
        made.append((store, hosts))
        return store, hosts, engine, service

    made: list = []
    yield make
    for store, hosts in made:
        for launcher in hosts.values():
            for run in launcher.runs_dir.glob("j*"):
                launcher.kill(run.name)
        store.close()


def _submit(service, marks, seconds: float, budget: float) -> str:
    task = {"name": "t", "broker": {"budget_usd": budget},
            "run": f"echo start $BROKER_ATTEMPT >> {marks}; sleep {seconds}; echo end $BROKER_ATTEMPT >> {marks}"}
    return service.submit(ADMIN, task)[0].id


def _exit(launcher: LocalLauncher, attempt_id: str) -> dict | None:
    path = launcher.runs_dir / attempt_id / "exit.json"
    return json.loads(path.read_text()) if path.exists() else None


def test_a_run_recorded_lost_is_stopped_when_its_broker_comes_back_and_its_overrun_is_said(two_hosts, tmp_path,
                                                                                             caplog):
    caplog.set_level("INFO", logger="broker.engine")
    clock = [time.time()]
    store, hosts, engine, service = two_hosts(12, 300, clock)
    marks = tmp_path / "marks"
    job_id = _submit(service, marks, 600, 10)
    a, b = engine("a"), engine("b")
    wait_for(lambda: a.tick() or (store.get_job(job_id).state.value == "running" and marks.exists()), timeout=20)
    b.tick()  # B watches too, and leaves A's attempt alone
    first = f"{job_id}-a1"
    # host A's broker is killed (its engine ticks no more); attempt 1's runner goes on
    for _ in range(62):  # B sees A stay silent past owner_timeout_seconds (300 s)
        clock[0] += 5
        b.tick()
    wait_for(lambda: b.tick() or store.get_job(job_id).state.value == "running" and store.get_job(job_id).attempts == 2,
             timeout=20)
    lost = store.attempts(job_id)[0]
    assert lost.state.value == "lost" and lost.stop_reason == "owner_silent"
    assert hosts["a"].status(first).phase is Phase.RUNNING  # it still runs, beside attempt 2
    # B's log says what it found at its start and which job it took over (it said neither: only the job's events)
    said = caplog.text
    assert f"engine started: watching 1 job(s) placed, launching or running ({job_id})" in said, said
    assert f"job {job_id}: taken over from the broker that launched attempt {first}: the broker that launched it " \
           in said, said
    for _ in range(77):  # both run on
        clock[0] += 5
        b.tick()
    before = store.attempts(job_id)
    # A's broker starts again, on its own run folder: its first tick stops attempt 1's run
    again = engine("a")
    again.tick()
    ended = wait_for(lambda: _exit(hosts["a"], first), timeout=10)
    assert ended["stopped"] and ended["reason"] == "superseded"
    assert hosts["b"].status(f"{job_id}-a2").phase is Phase.RUNNING  # the job's latest attempt is left alone
    # what attempt 1 ran after it was recorded lost is billed within the budget, and the rest said
    job, (one, two) = store.get_job(job_id), store.attempts(job_id)
    full = cost_for_seconds(lost.price_per_hour, int(clock[0] - lost.created_at))
    counted = min(full, job.budget - before[1].cost)
    assert one.cost == counted > before[0].cost and one.billed_until == clock[0]
    assert job.spent == one.cost + two.cost <= job.budget
    note = [e for e in store.events(job_id) if e.event == "superseded_run"]
    assert len(note) == 1 and note[0].actor == "engine"
    assert note[0].data["cost"] == full - before[0].cost
    assert note[0].data["beyond_budget"] == full - counted > 0
    assert note[0].data["stopped"] is True and "beyond the budget" in note[0].reason
    # the next looks find nothing more to stop or bill
    clock[0] += 20
    again.tick()
    assert len([e for e in store.events(job_id) if e.event == "superseded_run"]) == 1
    assert store.attempts(job_id)[0].cost == one.cost


def test_a_superseded_run_already_stopping_keeps_its_grace_and_is_said_once(two_hosts, tmp_path):
    """A run whose stop (a cancel, a budget stop, a preemption's notice) was under way when its broker went away: the
    launcher's stop is then a no-op, the run keeps its grace period. Each look every 10 s billed it again and wrote
    another "stopped now, with no grace period" event. Said once, and not as a stop without grace."""
    clock = [time.time()]
    store, hosts, engine, service = two_hosts(13, 300, clock)
    marks = tmp_path / "marks"
    task = {"name": "t", "broker": {"budget_usd": 10},
            # (ends by itself within 5 minutes: a run left behind by a failed test does not run for ever). Counted in
            # bash itself: a `$(seq 300)` the stop's SIGTERM reached before it had printed gave the loop nothing to
            # run, and the run ended at once, on a loaded machine, as if its grace period had been cut short
            "run": f"trap 'echo term >> {marks}' TERM; echo start >> {marks}; "
                   "i=0; while [ $i -lt 300 ]; do sleep 1; i=$((i + 1)); done"}
    job_id = service.submit(ADMIN, task)[0].id
    a, b = engine("a"), engine("b")
    wait_for(lambda: a.tick() or (store.get_job(job_id).state.value == "running" and marks.exists()), timeout=20)
    first = f"{job_id}-a1"
    hosts["a"].stop(first, grace_seconds=600, reason="cancelled")  # sent just before host A's broker was killed
    wait_for(lambda: "term" in marks.read_text(), timeout=10)
    for _ in range(62):
        clock[0] += 5
        b.tick()
    wait_for(lambda: b.tick() or store.get_job(job_id).attempts == 2, timeout=20)
    again = engine("a")
    for _ in range(4):  # four looks, 12 s apart
        again.tick()
        clock[0] += 12
    assert hosts["a"].status(first).phase is Phase.RUNNING, "its grace period was cut short"
    # attempt 2's runner has written its pid, so the fixture's teardown finds it and kills it
    wait_for(lambda: hosts["b"].status(f"{job_id}-a2").phase is Phase.RUNNING, timeout=20)
    said = [e for e in store.events(job_id) if e.event == "superseded_run"]
    assert len(said) == 1, [e.reason for e in said]
    assert "unless a stop was already under way" in said[0].reason


def test_billing_a_superseded_run_of_an_ended_job_keeps_the_job_s_end(two_hosts, tmp_path):
    """An ended job's last change is its end: Slack's "recently ended" and the cost report read it. Billing a run of
    it found later moved it to that moment."""
    clock = [time.time()]
    store, hosts, engine, service = two_hosts(14, 300, clock)
    job_id = _submit(service, tmp_path / "marks", 600, 10)
    a, b = engine("a"), engine("b")
    wait_for(lambda: a.tick() or store.get_job(job_id).state.value == "running", timeout=20)
    for _ in range(62):
        clock[0] += 5
        b.tick()
    wait_for(lambda: b.tick() or store.get_job(job_id).attempts == 2, timeout=20)
    service.cancel(ADMIN, job_id)
    wait_for(lambda: b.tick() or store.get_job(job_id).state.value == "cancelled", timeout=20)
    ended_at = store.get_job(job_id).updated_at
    clock[0] += 60
    engine("a").tick()  # host A's broker back: attempt 1's run is billed and stopped
    assert [e.event for e in store.events(job_id)].count("superseded_run") == 1
    assert store.get_job(job_id).updated_at == ended_at


def test_a_run_recorded_lost_that_ends_by_itself_is_billed_to_its_end(two_hosts, tmp_path, monkeypatch):
    """A's engine watched attempt 1 run, then could not reach the store (it beat no more) while B took the attempt
    for lost; attempt 1 ended by itself meanwhile. What it ran after it was recorded lost is billed and said."""
    monkeypatch.setattr(reconcile, "SUPERSEDED_SECONDS", 0.2, raising=False)
    store, hosts, engine, service = two_hosts(11, 1.5)
    marks = tmp_path / "marks"
    job_id = _submit(service, marks, 5, 10)
    a, b = engine("a"), engine("b")
    first = f"{job_id}-a1"
    wait_for(lambda: a.tick() or b.tick() or (store.get_job(job_id).state.value == "running" and marks.exists()),
             timeout=20)
    time.sleep(0.25)
    a.tick()  # A's last look: attempt 1 runs
    wait_for(lambda: b.tick() or store.get_job(job_id).attempts == 2, timeout=20)
    recorded = store.attempts(job_id)[0]
    assert recorded.state.value == "lost" and recorded.stop_reason == "owner_silent"
    ended = wait_for(lambda: _exit(hosts["a"], first), timeout=15)
    assert not ended["stopped"] and ended["exit_code"] == 0  # it ran to its end, beside attempt 2
    a.tick()  # A reaches the store again
    one = store.attempts(job_id)[0]
    assert one.cost == cost_for_seconds(one.price_per_hour, billed_seconds(one.created_at, ended["ended_at"])) \
        > recorded.cost  # to its end, the exact span: its last part of a second too
    note = [e for e in store.events(job_id) if e.event == "superseded_run"]
    assert len(note) == 1 and note[0].data["stopped"] is False and note[0].data["beyond_budget"] == 0
    assert note[0].data["cost"] == one.cost - recorded.cost and "it ran until it ended" in note[0].reason
    assert store.get_job(job_id).spent == sum(x.cost for x in store.attempts(job_id))
    services_b = BrokerService(service.settings, store, hosts["b"])
    services_b.cancel(ADMIN, job_id)
    wait_for(lambda: b.tick() or store.get_job(job_id).state.is_final, timeout=20)


def test_an_attempt_of_a_job_the_store_does_not_hold_is_left_running(tmp_path, make_settings):
    """A run folder whose job is not in the store (a broker started on another store by mistake, say) is not
    stopped: the broker cannot say whose it is."""
    settings = make_settings(f"sqlite://{tmp_path / 'one.db'}", config=_config(300))
    launcher = LocalLauncher(tmp_path / "runs")
    first, other = open_store(f"sqlite://{tmp_path / 'one.db'}"), open_store(f"sqlite://{tmp_path / 'two.db'}")
    try:
        job_id = BrokerService(settings, first, launcher).submit(ADMIN, {"name": "t", "run": "sleep 60",
                                                                        "broker": {"budget_usd": 5}})[0].id
        engine = Engine(settings, first, launcher)
        wait_for(lambda: engine.tick() or store_state(first, job_id) == "running", timeout=20)
        Engine(settings, other, launcher).tick()
        time.sleep(0.5)
        assert launcher.status(f"{job_id}-a1").phase is Phase.RUNNING
        assert launcher.live_attempts() == [f"{job_id}-a1"]
    finally:
        for run in launcher.runs_dir.glob("j*"):
            launcher.kill(run.name)
        first.close()
        other.close()


def store_state(store, job_id):
    return store.get_job(job_id).state.value


def test_live_attempts_lists_only_runs_not_ended(tmp_path, make_settings):
    settings = make_settings(f"sqlite://{tmp_path / 'e.db'}", config=_config(300))
    store = open_store(f"sqlite://{tmp_path / 'e.db'}")
    launcher = LocalLauncher(tmp_path / "runs")
    try:
        service = BrokerService(settings, store, launcher)
        quick = service.submit(ADMIN, {"name": "q", "run": "true", "broker": {"budget_usd": 5}})[0].id
        engine = Engine(settings, store, launcher)
        wait_for(lambda: engine.tick() or store_state(store, quick) == "succeeded", timeout=20)
        slow = service.submit(ADMIN, {"name": "s", "run": "sleep 60", "broker": {"budget_usd": 5}})[0].id
        wait_for(lambda: engine.tick() or store_state(store, slow) == "running", timeout=20)
        assert launcher.live_attempts() == [f"{slow}-a1"]
        assert os.path.exists(launcher.runs_dir / f"{quick}-a1" / "exit.json")
        # a broker with a cloud launcher beside the local one (the router) finds its host's runs the same way
        from launchers.base import live_attempts
        from launchers.router import RoutingLauncher
        assert RoutingLauncher(launcher, object()).live_attempts() == live_attempts(launcher) == [f"{slow}-a1"]
    finally:
        for run in launcher.runs_dir.glob("j*"):
            launcher.kill(run.name)
        store.close()
