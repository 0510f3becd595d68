"""An engine judges another broker's attempt silent on its own clock alone: from when it saw the owner's beat, the
attempt and the job's progress change — never from ``created_at`` or a report's ``at``, which are stamped on the
clock of whichever broker wrote them. Before, with the owner's host 2 h ahead, its dead broker's jobs were taken over
2 h late (and the event said "silent for 30 s"); a report taken by a broker whose clock lags read as silence.

Each host has a clock of its own here (the engine and the service take one), on one real SQLite store."""

from __future__ import annotations

import re
import time

from broker.auth import Principal, job_token
from broker.engine.reconcile import Engine
from broker.service import BrokerService
from broker.store import open_store

from broker_testing import ViewLauncher

TIMEOUT = 300
CONFIG = ("pools:\n  - {name: local, slots: 2, price_per_slot_hour: \"0.10\"}\n"
          f"tick_seconds: 0.05\nowner_timeout_seconds: {TIMEOUT}\n")
TWO_HOURS = 7200.0


def _hosts(tmp_path, make_settings, skew: dict[str, float]):
    """Hosts ``a`` and ``b`` (engine, launcher, API service each) on one store; ``skew``: each host's clock against
    the true time, which the returned ``true`` list holds (``true[0] += 5`` moves every clock on)."""
    settings = make_settings(f"sqlite://{tmp_path / 'broker.db'}", config=CONFIG)
    store = open_store(settings.store_url)
    true = [time.time()]
    clocks = {name: (lambda s=skew.get(name, 0.0): true[0] + s) for name in ("a", "b", "c")}
    launchers = {name: ViewLauncher(f"view:{name}") for name in ("a", "b")}
    engines = {name: Engine(settings, store, launchers[name], clock=clocks[name]) for name in launchers}
    services = {name: BrokerService(settings, store, launchers.get(name, launchers["a"]), clock=clocks[name])
                for name in clocks}
    return settings, store, true, launchers, engines, services


def _running_on_a(settings, store, true, engines, services) -> str:
    job_id = services["a"].submit(Principal("admin", None, admin=True),
                                  {"name": "j", "run": "sleep 1000", "broker": {"budget_usd": 50}})[0].id
    for _ in range(3):
        for engine in engines.values():
            engine.tick()
        true[0] += 1
    assert store.get_job(job_id).state.value == "running"
    assert store.attempts(job_id)[-1].launched_in == "view:a"
    return job_id


def _seconds_until_taken_over(store, true, engine, job_id, *, report=None, most=3 * TIMEOUT) -> float:
    """Tick ``engine`` every 5 true seconds until it takes the job over; the true seconds that took."""
    start = true[0]
    while true[0] - start <= most:
        true[0] += 5
        if report is not None:
            report()
        engine.tick()
        if store.get_job(job_id).attempts == 2:
            return true[0] - start
    raise AssertionError(f"not taken over within {most} s")


def test_a_dead_broker_whose_clock_was_hours_ahead_has_its_job_taken_over_after_the_timeout(tmp_path, make_settings):
    # Host A's clock is 2 h ahead: its attempt's created_at and the job's reports (taken by A's API) are stamped 2 h
    # in B's future. A dies; B took the job over only once its own clock caught up, 2 h later.
    settings, store, true, launchers, engines, services = _hosts(tmp_path, make_settings, {"a": TWO_HOURS})
    job_id = _running_on_a(settings, store, true, engines, services)
    services["a"].report_progress(job_id, job_token(settings, job_id), {"step": 10, "total_steps": 240})
    engines["b"].tick()
    engines.pop("a")  # kill -9: no beat, no report from now on
    took = _seconds_until_taken_over(store, true, engines["b"], job_id)
    assert TIMEOUT <= took <= TIMEOUT + 10, f"taken over {took:.0f} s after its owner went silent"
    lost = store.attempts(job_id)[0]
    assert lost.state.value == "lost" and launchers["b"].launched == [f"{job_id}-a2"]
    said = [e.reason for e in store.events(job_id) if "have been silent for" in e.reason]
    assert said, [e.reason for e in store.events(job_id)]
    silent = int(re.search(r"silent for (\d+) s", said[-1]).group(1))
    assert TIMEOUT <= silent <= TIMEOUT + 10, said[-1]


def test_a_job_that_reports_through_a_broker_whose_clock_lags_is_not_taken_for_silent(tmp_path, make_settings):
    # A's engine dies, but its job runs on and reports through host C's API, whose clock is 20 min behind: each
    # report's `at` read 20 min old on B's clock, and B took the reporting job over at its first look.
    settings, store, true, launchers, engines, services = _hosts(tmp_path, make_settings, {"c": -1200.0})
    job_id = _running_on_a(settings, store, true, engines, services)
    engines.pop("a")
    token = job_token(settings, job_id)
    step = [10]

    def report():
        step[0] += 1
        services["c"].report_progress(job_id, token, {"step": step[0], "total_steps": 10_000})

    start = true[0]
    while true[0] - start < 3 * TIMEOUT:  # the job reports every 5 s, through C, for 15 min
        true[0] += 5
        report()
        engines["b"].tick()
    assert store.get_job(job_id).attempts == 1, "B took over a job that kept reporting, by the reporter's clock"
    assert launchers["b"].launched == []
    # the job goes quiet too: B takes it over a timeout after the last report it saw change
    took = _seconds_until_taken_over(store, true, engines["b"], job_id)
    assert TIMEOUT <= took <= TIMEOUT + 10


def test_an_engine_started_after_the_owner_died_waits_the_timeout_from_its_first_look(tmp_path, make_settings):
    # The owner's clock was 1 h behind: its attempt and its reports read an hour old to B. B, started after A died,
    # still gives the attempt a full timeout from its own first look, as it does the owner's beat.
    settings, store, true, launchers, engines, services = _hosts(tmp_path, make_settings, {"a": -3600.0})
    job_id = _running_on_a(settings, store, true, engines, services)
    services["a"].report_progress(job_id, job_token(settings, job_id), {"step": 3})
    engines.pop("a")
    true[0] += 600
    fresh = Engine(settings, store, launchers["b"], clock=lambda: true[0])  # B's broker restarted
    fresh.tick()
    assert store.get_job(job_id).attempts == 1, "a fresh engine took the job over at its first look"
    took = _seconds_until_taken_over(store, true, fresh, job_id)
    assert TIMEOUT <= took <= TIMEOUT + 10


def _unclaimed(store, job_id):
    from dataclasses import replace

    from broker.store import Change
    job = store.get_job(job_id)
    attempt = store.attempts(job_id)[-1]
    store.commit(Change(job=job, expected_version=job.version, attempts=(replace(attempt, launched_in=""),)))


def test_an_unclaimed_attempt_reported_on_a_clock_hours_ahead_is_lost_after_the_timeout(tmp_path, make_settings):
    # An attempt recorded before `launched_in`, no engine sees it, both engines beat; its last report came through
    # C's API, 2 h ahead. It stays unclaimed: lost a timeout after the engines first saw it so, not 2 h later.
    settings, store, true, launchers, engines, services = _hosts(tmp_path, make_settings, {"c": TWO_HOURS})
    job_id = _running_on_a(settings, store, true, engines, services)
    services["c"].report_progress(job_id, job_token(settings, job_id), {"step": 10})
    _unclaimed(store, job_id)
    launchers["a"].launched.clear()  # its process died across the upgrade: no engine sees it
    start = true[0]
    while store.get_job(job_id).attempts == 1 and true[0] - start <= 3 * TIMEOUT:
        true[0] += 5
        engines["b"].tick()
        engines["a"].tick()
    assert store.get_job(job_id).attempts == 2, "an unclaimed attempt was held by a report stamped hours ahead"
    assert true[0] - start <= TIMEOUT + 10
    assert store.attempts(job_id)[0].state.value == "lost"
