"""When an engine may take over another launcher view's attempt (``owner_timeout_seconds``), with a
controlled clock: only after it has itself watched the owner stay silent that long. Beats that are old
because nobody could write them (the store was down, or every broker was stopped) prove nothing."""

from __future__ import annotations

import time

from broker.auth import Principal
from broker.engine.reconcile import Engine
from broker.service import BrokerService
from broker.store import open_store

from broker_testing import ViewLauncher

CONFIG = ("pools:\n  - {name: local, slots: 2, price_per_slot_hour: \"0.10\"}\n"
          "tick_seconds: 0.05\nowner_timeout_seconds: 300\n")


def _world(tmp_path, make_settings):
    settings = make_settings(f"sqlite://{tmp_path / 'broker.db'}", config=CONFIG)
    store = open_store(settings.store_url)
    clock = [time.time()]
    hosts = {name: ViewLauncher(f"view:{name}") for name in ("a", "b")}
    engines = {name: Engine(settings, store, launcher, clock=lambda: clock[0]) for name, launcher in hosts.items()}
    service = BrokerService(settings, store, hosts["a"], clock=lambda: clock[0])
    job_id = service.submit(Principal("admin", None, admin=True),
                            {"name": "j", "run": "sleep 1000", "broker": {"budget_usd": 5}})[0].id
    for _ in range(3):
        engines["a"].tick()
        clock[0] += 1
    assert store.get_job(job_id).state.value == "running"
    assert store.attempts(job_id)[-1].launched_in == "view:a"
    return store, clock, hosts, engines, job_id


def test_after_a_store_outage_longer_than_the_timeout_no_engine_takes_over_a_live_owner(tmp_path, make_settings):
    store, clock, hosts, engines, job_id = _world(tmp_path, make_settings)
    engines["b"].tick()  # B watches too, and leaves A's attempt alone
    clock[0] += 1
    # The store is down for 10 minutes: neither engine (nor the job's progress reports) can write.
    clock[0] += 600
    engines["b"].tick()  # B's first tick after the outage: A's last beat is 600 s old, but A could not beat
    assert store.get_job(job_id).attempts == 1, "B took over A's running attempt after an outage A could not beat through"
    engines["a"].tick()
    for _ in range(100):  # both alive again: A keeps its attempt
        clock[0] += 5
        engines["b"].tick()
        engines["a"].tick()
    assert store.get_job(job_id).attempts == 1
    assert hosts["b"].launched == []


def test_an_engine_that_starts_after_all_were_down_waits_for_the_owner_to_come_back(tmp_path, make_settings):
    store, clock, hosts, engines, job_id = _world(tmp_path, make_settings)
    clock[0] += 3600  # every broker stopped for an hour (maintenance); B comes back first
    engines["b"].tick()
    assert store.get_job(job_id).attempts == 1, "B took over before A had a chance to beat again"
    clock[0] += 30
    engines["a"].tick()
    for _ in range(100):
        clock[0] += 5
        engines["b"].tick()
        engines["a"].tick()
    assert store.get_job(job_id).attempts == 1


def test_an_owner_that_stays_silent_is_still_taken_over(tmp_path, make_settings):
    store, clock, hosts, engines, job_id = _world(tmp_path, make_settings)
    clock[0] += 600  # an outage, then A never comes back (its host is gone)
    for _ in range(59):  # B watches A stay silent for less than the timeout
        clock[0] += 5
        engines["b"].tick()
    assert store.get_job(job_id).attempts == 1
    for _ in range(4):
        clock[0] += 5
        engines["b"].tick()
    job = store.get_job(job_id)
    assert job.attempts == 2 and store.attempts(job_id)[0].state.value == "lost"
    assert hosts["b"].launched == [f"{job_id}-a2"]


def test_an_owner_whose_clock_steps_back_keeps_its_attempt(tmp_path, make_settings):
    # Two hosts, each with its own clock. A's steps back ten minutes (NTP correcting it) while its attempt runs;
    # A goes on ticking. Before, A stopped beating until its clock caught up with its last beat, and its beats
    # read 600 s old to B anyway (B's clock against A's): B called the attempt lost and launched it again beside it.
    settings = make_settings(f"sqlite://{tmp_path / 'broker.db'}", config=CONFIG)
    store = open_store(settings.store_url)
    clocks = {"a": [time.time()], "b": [time.time()]}
    hosts = {name: ViewLauncher(f"view:{name}") for name in ("a", "b")}
    engines = {name: Engine(settings, store, hosts[name], clock=lambda c=clocks[name]: c[0]) for name in hosts}
    service = BrokerService(settings, store, hosts["a"], clock=lambda: clocks["a"][0])
    job_id = service.submit(Principal("admin", None, admin=True),
                            {"name": "j", "run": "sleep 1000", "broker": {"budget_usd": 50}})[0].id

    def both_tick(rounds):
        for _ in range(rounds):
            for name in ("a", "b"):
                clocks[name][0] += 5
                engines[name].tick()

    both_tick(3)
    assert store.get_job(job_id).state.value == "running"
    clocks["a"][0] -= 600
    both_tick(150)  # 750 s, well past owner_timeout_seconds (300 s), A alive throughout
    assert store.get_job(job_id).attempts == 1, "B took over the attempt of a live broker whose clock stepped back"
    assert hosts["b"].launched == []
    hosts["a"].launched.clear()  # A's host goes (its attempts with it); B still takes over, on its own clock
    engines.pop("a")
    for _ in range(70):
        clocks["b"][0] += 5
        engines["b"].tick()
    assert store.get_job(job_id).attempts == 2 and hosts["b"].launched == [f"{job_id}-a2"]


def _as_before_launched_in(store, job_id):
    """Rewrite the job's attempt as a broker older than ``launched_in`` recorded it: naming no launcher view."""
    from dataclasses import replace

    from broker.store import Change
    job = store.get_job(job_id)
    attempt = store.attempts(job_id)[-1]
    store.commit(Change(job=job, expected_version=job.version, attempts=(replace(attempt, launched_in=""),)))
    assert store.attempts(job_id)[-1].launched_in == ""


def test_an_attempt_from_before_launched_in_is_claimed_by_the_engine_that_sees_it(tmp_path, make_settings):
    # Two hosts upgraded from a broker that did not record launched_in. Before, B (whose launcher cannot see A's
    # process) read A's running attempt as lost at its first tick and launched the job again beside it.
    store, clock, hosts, engines, job_id = _world(tmp_path, make_settings)
    _as_before_launched_in(store, job_id)
    engines["b"].tick()  # B first: A beats, so the attempt may be A's
    assert store.get_job(job_id).attempts == 1, "B took an unclaimed attempt for lost while another engine beats"
    clock[0] += 1
    engines["a"].tick()  # A sees it: claims it
    assert store.attempts(job_id)[-1].launched_in == "view:a"
    for _ in range(100):
        clock[0] += 5
        engines["b"].tick()
        engines["a"].tick()
    assert store.get_job(job_id).attempts == 1 and store.get_job(job_id).state.value == "running"
    assert hosts["b"].launched == []


def test_an_unclaimed_attempt_no_engine_sees_is_lost_after_the_timeout(tmp_path, make_settings):
    store, clock, hosts, engines, job_id = _world(tmp_path, make_settings)
    _as_before_launched_in(store, job_id)
    hosts["a"].launched.clear()  # its process died across the upgrade: no engine sees it
    for _ in range(55):  # both alive, each waiting for the other to claim it: under the timeout
        clock[0] += 5
        engines["b"].tick()
        engines["a"].tick()
    assert store.get_job(job_id).attempts == 1
    for _ in range(10):
        clock[0] += 5
        engines["b"].tick()
        engines["a"].tick()
    assert store.get_job(job_id).attempts == 2 and store.attempts(job_id)[0].state.value == "lost"
    assert len(hosts["a"].launched) + len(hosts["b"].launched) == 1


def test_one_broker_judges_an_unclaimed_attempt_it_cannot_see_at_once(tmp_path, make_settings):
    settings = make_settings(f"sqlite://{tmp_path / 'broker.db'}", config=CONFIG)
    store = open_store(settings.store_url)
    clock = [time.time()]
    host = ViewLauncher("view:a")
    engine = Engine(settings, store, host, clock=lambda: clock[0])
    service = BrokerService(settings, store, host, clock=lambda: clock[0])
    job_id = service.submit(Principal("admin", None, admin=True),
                            {"name": "j", "run": "sleep 1000", "broker": {"budget_usd": 5}})[0].id
    for _ in range(3):
        engine.tick()
        clock[0] += 1
    _as_before_launched_in(store, job_id)
    host.launched.clear()
    clock[0] += 5
    engine.tick()
    assert store.attempts(job_id)[0].state.value == "lost"
