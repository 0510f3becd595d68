"""Reads of queued jobs share the working out of the queue (``BrokerService.queue_waits``, broker/service.py).

Found by a QA tester at sweep scale: each read of a queued job (its page, a list, ``broker status``, every poll of a
``submit --wait`` follower) listed every active job and weighed placement for each. With about 1,100 queued, ten
clients at once took 0.67 s a read, and twenty followers kept the broker at a full core. Now one working out serves
the reads that come while it runs, and is reused while nothing it is worked out from changed. Shown here on a real
SQLite store, the real engine and the local launcher's real processes; the service's clock is the test's, so the
shared answer and one worked out afresh are read at the same instant and must be equal.
"""

from __future__ import annotations

import threading
import time

import pytest
from broker_testing import set_fields

import broker.service as service_module
from broker.auth import Principal
from broker.engine.reconcile import Engine
from broker.lifecycle import JobState
from broker.service import QUEUE_REUSE_SECONDS, BrokerService
from broker.store import open_store

ADMIN = Principal("admin", None, admin=True)
VISION = Principal("vision", "vision")
NLP = Principal("nlp", "nlp")
POOL = ("pools: [{name: dgx, slots: 2, accelerator: A100, price_per_slot_hour: '1.10'}]\n"
        "zones: [{name: sim-a, tier: spot, instance_type: g5.xlarge, grace_seconds: 1}]\n")
FULL = "waiting: the pool dgx is full right now"


class Clock:
    """The service's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


class ReadGate:
    """The real store, counting its listings, whose next listing can be held after it has read (``hold``) until
    the test lets it go (``release``): a read of the queue caught between its store read and its answer."""

    def __init__(self, store) -> None:
        self._store = store
        self.listings = 0
        self._hold: threading.Event | None = None
        self.holding = threading.Event()

    def __getattr__(self, name):
        return getattr(self._store, name)

    def hold(self) -> None:
        self._hold = self._released = threading.Event()

    def release(self) -> None:
        self._released.set()

    def list_jobs(self, **kwargs):
        self.listings += 1
        jobs = self._store.list_jobs(**kwargs)
        gate, self._hold = self._hold, None
        if gate is not None:
            self.holding.set()
            gate.wait(10)
        return jobs


def _task(hours: str = "1", **broker) -> dict:
    return {"run": "sleep 60", "resources": {"accelerators": "A100:1"},
            "broker": {"budget_usd": "50", "expected_hours": hours, **broker}}


def _both(service: BrokerService, who: Principal, of=None):
    """The shared answer and one worked out afresh, at the same instant of the service's clock."""
    return service.queue_waits(who, of=of), service.queue_waits(who, of=of, fresh=True)


@pytest.fixture
def broker(make_settings, tmp_path):
    """A service on a counting SQLite store, an engine, the local launcher and the service's clock; the runs the
    engine started are stopped at the end."""
    from launchers.local import LocalLauncher

    settings = make_settings(config=POOL)
    store = open_store(f"sqlite://{tmp_path / 'q.db'}")
    gate = ReadGate(store)
    launcher = LocalLauncher(settings.data_dir / "runs")
    clock = Clock()
    service = BrokerService(settings, gate, launcher, clock=clock)
    try:
        yield service, Engine(settings, store, launcher), store, gate, clock
    finally:
        for job in store.list_jobs(limit=1000):
            for attempt in store.attempts(job.id):
                launcher.stop(attempt.id, grace_seconds=0)
        store.close()


@pytest.fixture
def weighed(monkeypatch):
    """How many times the queue was weighed (``broker.queue.waits``, as the service calls it)."""
    calls = []
    real = service_module.waits

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(service_module, "waits", counted)
    return calls


def _queued(service: BrokerService, store, n: int, who: Principal = ADMIN) -> list:
    """``n`` jobs submitted one after another (a millisecond apart: the queue's order is theirs) and waiting for the
    full pool, as the scheduler's reason says."""
    jobs = []
    for _ in range(n):
        jobs.append(service.submit(who, _task())[0])
        service.clock.now += 0.001
    return [set_fields(store, job, reason=FULL) for job in jobs]


def test_ten_reads_of_a_queued_job_at_once_and_then_twenty_more_weigh_the_queue_once(broker, weighed):
    """Ten readers of a job in a queue of 200 at once, then twenty more one after another, nothing changing: the
    queue is weighed once, and each reader gets the answer worked out afresh (before: 30 weighings, each listing and
    weighing every active job)."""
    service, _, store, gate, _ = broker
    jobs = _queued(service, store, 200)
    target = service.get(ADMIN, jobs[150].id)
    start = threading.Barrier(10)
    answers = []

    def read():
        start.wait()
        answers.append(service.queue_waits(ADMIN, of=[target]))

    threads = [threading.Thread(target=read) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    answers += [service.queue_waits(VISION, of=[target]) for _ in range(20)]
    assert len(weighed) == 1
    fresh = service.queue_waits(ADMIN, of=[target], fresh=True)
    assert len(answers) == 30 and all(a == fresh for a in answers)
    assert fresh.positions[target.id] == 151 and target.id in fresh.starts


def test_a_read_that_comes_while_another_works_the_queue_out_waits_for_one_that_read_after_it_came(broker):
    """A read caught between its store read and its answer; a job submitted meanwhile; a second read comes after
    the submit: it is not handed the first read's answer (which has no such job) but one read after it came, so
    the job it was just told of has its place at once."""
    service, _, store, gate, _ = broker
    _queued(service, store, 5)
    gate.hold()
    first = []
    reader = threading.Thread(target=lambda: first.append(service.queue_waits(ADMIN)))
    reader.start()
    assert gate.holding.wait(10)
    new = service.submit(ADMIN, _task())[0]
    second = []
    follower = threading.Thread(target=lambda: second.append(service.queue_waits(ADMIN)))
    follower.start()
    time.sleep(0.2)  # it comes while the first read runs
    gate.release()
    reader.join(10)
    follower.join(10)
    assert new.id not in first[0].positions
    assert second[0].positions[new.id] == 6


def test_a_job_just_submitted_has_its_place_at_once_and_one_that_left_the_queue_is_not_shown_queued(broker, weighed):
    """On an unchanged clock (reuse is allowed): a submit is seen by the next read, with its place; a cancelled
    job and one the engine placed are no longer shown queued, and the jobs behind them move up."""
    service, engine, store, gate, clock = broker
    jobs = _queued(service, store, 4)
    assert service.queue_waits(ADMIN).positions == {job.id: i for i, job in enumerate(jobs, start=1)}
    service.queue_waits(ADMIN)
    assert len(weighed) == 1  # reused while nothing changed

    new = service.submit(VISION, _task())[0]
    q = service.queue_waits(VISION, of=[new])
    assert q.positions[new.id] == 5 and new.id in q.queued

    service.cancel(ADMIN, jobs[1].id)
    q = service.queue_waits(ADMIN)
    assert jobs[1].id not in q.positions and jobs[1].id not in q.queued
    assert q.positions == {jobs[0].id: 1, jobs[2].id: 2, jobs[3].id: 3, new.id: 4}

    engine.tick()  # the pool's two slots: the first two in line are placed
    q = service.queue_waits(ADMIN)
    assert {jobs[0].id, jobs[2].id}.isdisjoint(q.positions) and {jobs[0].id, jobs[2].id}.isdisjoint(q.queued)
    assert q.positions == {jobs[3].id: 1, new.id: 2}
    assert q == service.queue_waits(ADMIN, fresh=True)


def test_the_shared_answer_is_the_one_worked_out_afresh_over_a_changing_queue(broker):
    """A queue that changes the ways it does — submits of two teams, with deadlines and priorities; the engine
    placing and starting jobs; cancels of queued and running jobs (a cancelling job holds its slot until its stop's
    grace ends); a job's length raised; the clock moving on past the reuse's bound — read after each change by an
    admin and by each team: the shared answer is the one worked out afresh, positions, starts, words and jobs."""
    service, engine, store, gate, clock = broker
    viewers = (ADMIN, VISION, NLP)

    def same():
        for who in viewers:
            shared, fresh = _both(service, who)
            assert shared == fresh, who
        return shared

    a = _queued(service, store, 3, VISION)
    same()
    b = _queued(service, store, 2, NLP)
    urgent = set_fields(store, service.submit(NLP, _task(priority=5))[0], reason=FULL)
    due = set_fields(store, service.submit(VISION, _task(deadline="2h"))[0], reason=FULL)
    same()
    for _ in range(50):  # the engine places the first two and starts them (real processes)
        engine.tick()
        running = store.list_jobs(states=[JobState.RUNNING.value], limit=10)
        if len(running) == 2:
            break
        time.sleep(0.05)
    assert len(running) == 2 and urgent.id in {job.id for job in running}  # its priority put it first
    clock.now += 2 * QUEUE_REUSE_SECONDS
    q = same()
    assert q.starts  # the jobs behind the running ones are given starts
    service.cancel(ADMIN, running[0].id)  # cancelling: holds its slot until its stop's grace ends
    same()
    service.cancel(VISION, a[2].id)
    same()
    engine.tick()
    clock.now += 2 * QUEUE_REUSE_SECONDS
    same()
    set_fields(store, store.get_job(b[0].id), expected_hours="3")
    same()
    clock.now = due.deadline + 30  # its deadline passed: said to the second, by each read's own clock
    q = same()
    assert "passed 30 s ago" in q.waiting[due.id]


def test_a_reused_queue_is_no_older_than_the_bound_and_is_worked_out_again_after_it(broker, weighed):
    """Nothing changing, reads within :data:`QUEUE_REUSE_SECONDS` reuse the queue (its estimates counted from when
    it was worked out, that much earlier at most); the first read after it works the queue out again."""
    service, engine, store, gate, clock = broker
    jobs = _queued(service, store, 3)
    service.queue_waits(ADMIN)
    clock.now += QUEUE_REUSE_SECONDS / 2
    service.queue_waits(ADMIN)
    assert len(weighed) == 1
    clock.now += QUEUE_REUSE_SECONDS
    q = service.queue_waits(ADMIN)
    assert len(weighed) == 2
    assert q == service.queue_waits(ADMIN, fresh=True)
    assert list(q.positions) == [job.id for job in jobs]
