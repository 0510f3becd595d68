"""The host's wall clock stepped while an attempt runs (NTP correcting a drift, a VM resumed, an admin's `date -s`):
the spend, the budget stop and the launcher's own limit follow the seconds that pass, not the clock's step."""

import json
import time

import pytest

from broker.auth import Principal
from broker.engine.reconcile import Engine
from broker.lifecycle import JobState
from broker.runtime import open_launcher
from broker.service import BrokerService
from broker.store import open_store
from launchers.local_runner import Runner

from broker_testing import CENT_A_SECOND, run_until

ADMIN = Principal("admin", None, admin=True)
CONFIG = CENT_A_SECOND
HOUR = 3600.0


def _clocked_broker(make_settings, db):
    """A broker on the store ``db`` whose clocks the test moves, and a $1 job submitted (not yet placed): ``wall``
    (the host's clock, which steps) and ``mono`` (the seconds that pass), each a one-item list."""
    settings = make_settings(config=CONFIG)
    store = open_store(f"sqlite://{db}")
    launcher = open_launcher(settings)
    wall, mono = [time.time()], [1000.0]
    engine = Engine(settings, store, launcher, clock=lambda: wall[0], monotonic=lambda: mono[0])
    service = BrokerService(settings, store, launcher, clock=lambda: wall[0])
    job = service.submit(ADMIN, {"name": "t", "run": "sleep 120", "resources": {"cpus": 1},
                                 "broker": {"budget_usd": "1"}})[0]
    return store, launcher, wall, mono, engine, service, job


@pytest.fixture
def stepped(make_settings, tmp_path):
    """A broker whose clocks the test moves: ``wall`` (the host's clock, which steps) and ``mono`` (the seconds
    that pass); $36/h is one cent a second, so a $1 budget holds 100 s — the runner's own limit, counted on its
    real clock, lies 95 s away, after the test."""
    store, launcher, wall, mono, engine, service, job = _clocked_broker(make_settings, tmp_path / "clock.db")
    run_until(engine, store, job.id, {"running"})

    def passes(seconds: float, step: float = 0.0):
        """``seconds`` pass, the wall clock stepping by ``step`` on the way; then a tick."""
        wall[0] += seconds + step
        mono[0] += seconds
        engine.tick()
        return store.get_job(job.id)

    try:
        yield passes, job, store, service, engine
        service.cancel(ADMIN, job.id)
        run_until(engine, store, job.id, {"cancelled", "stopped_budget"})
    finally:
        for run in launcher.runs_dir.glob("j*"):
            launcher.kill(run.name)
        store.close()


def test_a_clock_stepped_back_an_hour_neither_stalls_the_spend_nor_puts_the_budget_stop_off(stepped):
    passes, job, store, _, _ = stepped
    assert passes(40).spent == 400_000
    assert passes(0, step=-HOUR).spent == 400_000  # the step itself is no time spent
    running = passes(50)
    assert running.state is JobState.RUNNING and running.spent == 900_000  # 90 s ran: not stuck at 40 s for an hour
    stopping = passes(5)  # 95 s: what is left pays only for the stop (grace, two ticks, the launcher's margin)
    assert stopping.state is JobState.STOPPING and stopping.spent == 950_000
    [stop] = [e for e in store.events(job.id) if e.event == "budget_stop_requested"]
    assert "by" not in stop.data and stop.data["beyond_budget"] == 0  # the broker's own stop, within the budget


def test_a_clock_stepped_forward_an_hour_bills_the_seconds_that_ran_not_the_hour(stepped):
    passes, job, store, _, _ = stepped
    running = passes(10, step=HOUR)
    assert running.state is JobState.RUNNING and running.spent == 100_000
    assert [e.event for e in store.events(job.id)].count("budget_warning") == 0


def test_a_budget_lowered_after_the_clock_stepped_back_moves_the_runners_limit_by_the_seconds_left(stepped):
    passes, job, store, service, engine = stepped
    passes(40, step=-HOUR)
    service.raise_budget(ADMIN, job.id, 600_000)  # $0.60: 60 s in all, 20 s left, less the grace and the margin
    engine.tick()
    (attempt,) = store.attempts(job.id)
    limit = json.loads((engine.launcher.runs_dir / attempt.id / "limit.json").read_text())
    assert limit["stop_at"] - time.time() == pytest.approx(60 - 40 - 2 - 3, abs=2)  # not an hour more


def test_the_runner_stops_at_its_limit_when_the_wall_clock_steps_back(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "request.json").write_text(json.dumps({"attempt_id": "j-1-a1", "task": {"run": "true"},
                                                      "placement": {}, "stop_grace_seconds": 2}))
    wall, mono = [1_700_000_000.0], [50.0]
    (run_dir / "limit.json").write_text(json.dumps({"stop_at": wall[0] + 10, "reason": "budget"}))
    runner = Runner(run_dir, wall=lambda: wall[0], monotonic=lambda: mono[0])
    assert not runner.limit_reached()  # read: 10 s from now
    wall[0] -= HOUR
    mono[0] += 9
    assert not runner.limit_reached() and not (run_dir / "stop.json").exists()
    mono[0] += 1  # its 10 s have passed, though the wall clock reads an hour before its stop_at
    assert runner.limit_reached()
    assert json.loads((run_dir / "stop.json").read_text())["reason"] == "budget"


def test_two_engines_watching_one_host_both_bill_the_seconds_that_pass_when_its_clock_steps_back(make_settings,
                                                                                                tmp_path):
    # two brokers on one host and data directory watch each other's attempts and, ticking at moments of their own,
    # bill them in turn; after the step, the one that billed last counts on by its monotonic clock, and the other,
    # its stepped wall clock reading before that, takes nothing back: the spend is the seconds that ran
    settings = make_settings(config=CONFIG)
    store = open_store(f"sqlite://{tmp_path / 'two.db'}")
    wall, mono = [time.time()], [1000.0]
    a, b = (Engine(settings, store, open_launcher(settings), clock=lambda: wall[0], monotonic=lambda: mono[0],
                   actor=name) for name in "ab")
    service = BrokerService(settings, store, a.launcher, clock=lambda: wall[0])
    job = service.submit(ADMIN, {"name": "t", "run": "sleep 120", "resources": {"cpus": 1},
                                 "broker": {"budget_usd": "1"}})[0]
    try:
        run_until(a, store, job.id, {"running"})
        for seconds, step in ((5, 0.0), (5, 0.0), (0, -HOUR), (10, 0.0), (10, 0.0), (10, 0.0), (10, 0.0)):
            wall[0] += seconds + step
            mono[0] += seconds
            a.tick()
            wall[0] += 1
            mono[0] += 1
            b.tick()  # a second after a: it bills the attempt on from where a did
        assert store.get_job(job.id).spent == 570_000  # 57 s ran
        service.cancel(ADMIN, job.id)
        run_until(a, store, job.id, {"cancelled"})
    finally:
        for run in a.launcher.runs_dir.glob("j*"):
            a.launcher.kill(run.name)
        store.close()


def test_a_clock_stepped_back_before_the_first_accrual_of_an_attempt_placed_and_launched_in_one_tick(make_settings,
                                                                                                    tmp_path):
    # the tick that places a queued job launches it too: the engine's monotonic count for the attempt starts at that
    # launch, so a step back before its first accrual neither stalls its spend nor puts its budget stop off
    store, launcher, wall, mono, engine, _, job = _clocked_broker(make_settings, tmp_path / "first.db")
    try:
        engine.tick()
        assert store.get_job(job.id).state is JobState.LAUNCHING and store.get_job(job.id).attempts == 1
        wall[0] += 40 - HOUR
        mono[0] += 40
        engine.tick()
        assert store.get_job(job.id).spent == 400_000  # 40 s ran: not nothing for an hour
    finally:
        for run in launcher.runs_dir.glob("j*"):
            launcher.kill(run.name)
        store.close()


def test_the_clocks_billing_is_timed_on_count_a_suspended_hosts_sleep(make_settings, tmp_path):
    """A cloud bills a cluster while the broker's host sleeps (a laptop, a paused VM). Timed on CLOCK_MONOTONIC,
    which Linux stops during a suspend, the engine would record none of that time: later attempts were then given
    budget already spent. The engine and the local runner time it on CLOCK_BOOTTIME, which counts the sleep."""
    import inspect

    from launchers.base import BOOT_CLOCK, elapsed

    assert BOOT_CLOCK == time.CLOCK_BOOTTIME  # Linux: the clock that goes on through a suspend
    before, ours, after = time.clock_gettime(time.CLOCK_BOOTTIME), elapsed(), time.clock_gettime(time.CLOCK_BOOTTIME)
    assert before <= ours <= after
    settings = make_settings(config=CONFIG)
    store = open_store(f"sqlite://{tmp_path / 'boot.db'}")
    try:
        assert Engine(settings, store, open_launcher(settings)).monotonic is elapsed
    finally:
        store.close()
    assert inspect.signature(Runner.__init__).parameters["monotonic"].default is elapsed


def test_an_attempt_another_engine_launched_later_is_billed_from_that_launch_by_the_engine_that_recorded_it(
        make_settings, tmp_path):
    # engine a records attempt 1 and is still unpacking its files; engine b, on the same host and store, finds it
    # gone, its files ready, and launches it 60 s later, billing from its launch. a then accrues first: it counted
    # from the record, so it billed the 60 s nothing ran (from b's launch by the seconds since a's own record)
    from broker.engine import reconcile

    settings = make_settings(config=CONFIG)
    store = open_store(f"sqlite://{tmp_path / 'moved.db'}")
    wall, mono = [time.time()], [1000.0]
    a, b = (Engine(settings, store, open_launcher(settings), clock=lambda: wall[0], monotonic=lambda: mono[0],
                   actor=name) for name in "ab")
    unpacking = [True]
    files = a._files
    a._files = lambda job, attempt: reconcile._PREPARING if unpacking[0] else files(job, attempt)
    service = BrokerService(settings, store, a.launcher, clock=lambda: wall[0])
    job = service.submit(ADMIN, {"name": "t", "run": "sleep 120", "resources": {"cpus": 1},
                                 "broker": {"budget_usd": "1"}})[0]
    try:
        a.tick()  # places and records attempt 1; its files are still being unpacked
        (recorded,) = store.attempts(job.id)
        wall[0] += 60
        mono[0] += 60
        b.tick()  # b launches it, billed from now
        (moved,) = store.attempts(job.id)
        assert moved.created_at == recorded.created_at + 60
        unpacking[0] = False
        wall[0] += 10
        mono[0] += 10
        a.tick()
        assert store.get_job(job.id).spent == 100_000  # the 10 s it ran, not 70
    finally:
        for run in a.launcher.runs_dir.glob("j*"):
            a.launcher.kill(run.name)
        store.close()


def test_a_broker_restarted_after_its_clock_stepped_back_bills_on_and_keeps_the_limit_from_what_is_billed(
        make_settings, tmp_path):
    # the new process has no count of its own, and the wall clock reads an hour before what is billed already:
    # read on it, the spend and the budget stop stood still for the hour, and a budget raised meanwhile put the
    # runner's own limit an hour late. It now counts on from what is billed; the seconds between the old
    # process's last accrual and the new one's first look are the only ones it cannot know (here 5 s)
    store, launcher, wall, mono, engine, service, job = _clocked_broker(make_settings, tmp_path / "restart.db")

    def restarted():
        return Engine(engine.settings, store, launcher, clock=lambda: wall[0], monotonic=lambda: mono[0])

    try:
        run_until(engine, store, job.id, {"running"})
        wall[0] += 40
        mono[0] += 40
        engine.tick()
        assert store.get_job(job.id).spent == 400_000
        wall[0] -= HOUR
        engine = restarted()
        wall[0] += 5
        mono[0] += 5
        engine.tick()
        assert store.get_job(job.id).spent == 400_000
        wall[0] += 30
        mono[0] += 30
        engine.tick()
        assert store.get_job(job.id).spent == 700_000  # 30 s more: not stuck for the hour
        service.raise_budget(ADMIN, job.id, 2_000_000)  # $2: 200 s in all
        engine.tick()
        (attempt,) = store.attempts(job.id)
        limit = json.loads((launcher.runs_dir / attempt.id / "limit.json").read_text())
        assert limit["stop_at"] - time.time() == pytest.approx(200 - 70 - 2 - 3, abs=3)  # not an hour more
    finally:
        for run in launcher.runs_dir.glob("j*"):
            launcher.kill(run.name)
        store.close()


def test_a_stop_the_broker_asked_for_just_before_the_runners_limit_keeps_its_reason(tmp_path):
    """The runner looked for a stop, found none, and wrote its own budget stop over one the broker had just linked in
    (a preemption injected at the budget's limit): the attempt ended as stopped at its budget, not preempted."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "request.json").write_text(json.dumps({"attempt_id": "j-1-a1", "task": {"run": "true"},
                                                      "placement": {}, "stop_grace_seconds": 2}))
    wall, mono = [1_700_000_000.0], [50.0]
    (run_dir / "limit.json").write_text(json.dumps({"stop_at": wall[0] - 1, "reason": "budget"}))
    runner = Runner(run_dir, wall=lambda: wall[0], monotonic=lambda: mono[0])
    looked = runner._read_stop

    def look_then_the_broker_stops() -> dict | None:
        found = looked()
        (run_dir / "stop.json").write_text(json.dumps({"reason": "preempted", "grace_seconds": 30, "at": wall[0]}))
        return found

    runner._read_stop = look_then_the_broker_stops
    assert not runner.limit_reached()  # the broker's stop is the one under way
    assert json.loads((run_dir / "stop.json").read_text())["reason"] == "preempted"
    assert sorted(p.name for p in run_dir.iterdir()) == ["limit.json", "request.json", "stop.json"]
