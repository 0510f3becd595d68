"""A job at the head of the queue that waits for more of a pool's slots than are free, driven through the engine over
hours of a fake clock with a stream of 1-slot jobs arriving behind it (``broker/engine/schedule.py::_Kept``; the
queue's estimate, ``broker/queue.py::waits``). The launcher is a scripted one: each attempt runs for the seconds the
test gives its job, on the test's clock, then exits 0."""

from __future__ import annotations

import pytest

from broker.auth import Principal
from broker.engine.reconcile import Engine
from broker.lifecycle import JobState
from broker.service import BrokerService
from broker.store import open_store
from launchers.base import AttemptStatus, Capabilities, Phase

ADMIN = Principal("admin", None, admin=True)
T0 = 1_800_000_000.0
MIN = 60.0


class Scripted:
    """Runs nothing: an attempt of a job in ``lengths`` runs that many seconds of ``clock`` from its launch, then
    succeeds (a job not in it runs until the test ends)."""

    name = "scripted"
    capabilities = Capabilities(simulated=True)

    def __init__(self, clock):
        self.clock = clock
        self.lengths: dict[str, float] = {}
        self.started: dict[str, float] = {}  # attempt id → launched at

    def launch(self, request) -> None:
        self.started.setdefault(request.attempt_id, self.clock())

    def status(self, attempt_id: str) -> AttemptStatus:
        at = self.started.get(attempt_id)
        if at is None:
            return AttemptStatus(Phase.GONE)
        length = self.lengths.get(attempt_id.rsplit("-a", 1)[0])
        if length is not None and self.clock() >= at + length:
            return AttemptStatus(Phase.SUCCEEDED, exit_code=0, started_at=at, ended_at=at + length)
        return AttemptStatus(Phase.RUNNING, started_at=at)

    def stop(self, attempt_id: str, *, grace_seconds: float = 30.0, reason: str = "") -> None:
        self.lengths[attempt_id.rsplit("-a", 1)[0]] = 0.0

    def logs(self, attempt_id: str, *, offset: int = 0, limit: int = 1 << 20) -> tuple[bytes, int]:
        return b"", 0


@pytest.fixture
def broker(make_settings, tmp_path):
    """``(submit, tick, service, store, now)``: ``submit(gpus, runs=seconds, hours=expected_hours or None)``;
    ``tick(seconds)`` moves the clock on and runs one engine tick."""
    def make(config: str):
        settings = make_settings(config=config)
        store = open_store(f"sqlite://{tmp_path / 'hol.db'}")
        now = [T0]
        launcher = Scripted(lambda: now[0])
        engine = Engine(settings, store, launcher, clock=lambda: now[0])
        service = BrokerService(settings, store, launcher, clock=lambda: now[0])
        made.append(store)

        def submit(gpus: int, *, runs: float | None, hours: float | None = None, deadline: str | None = None,
                   zone: str | None = None):
            section = {"budget_usd": "500"}
            if hours is not None:
                section["expected_hours"] = hours
            if deadline is not None:
                section["deadline"] = deadline
            resources = {"accelerators": f"A100:{gpus}", **({"zone": zone} if zone else {})}
            job = service.submit(ADMIN, {"run": "train", "resources": resources, "broker": section})[0]
            if runs is not None:
                launcher.lengths[job.id] = runs
            return job

        def tick(seconds: float = 0.0):
            now[0] += seconds
            engine.tick()

        return submit, tick, service, store, now
    made = []
    yield make
    for store in made:
        store.close()


ONE_POOL = "pools: [{name: dgx, slots: 2, accelerator: A100, price_per_slot_hour: '1.00'}]\ntick_seconds: 1\n"


def started(store, job) -> float | None:
    return store.get_job(job.id).running_since


@pytest.mark.parametrize("stream_hours", [1.0, None], ids=[
    "1-slot jobs of 1 h keep arriving → the 2-slot job starts when the first job ends, as estimated",
    "1-slot jobs of no stated length keep arriving → the same"])
def test_a_2_slot_job_at_the_head_starts_while_1_slot_jobs_keep_arriving(broker, stream_hours):
    submit, tick, service, store, now = broker(ONE_POOL)
    first = submit(1, runs=30 * MIN, hours=0.5)
    tick()
    assert store.get_job(first.id).state is not JobState.QUEUED
    now[0] += 1  # the queue orders by submit time: each job here is submitted a second or more after the one before
    head = submit(2, runs=60 * MIN, hours=1)
    estimates = []
    for i in range(40):  # a 1-slot job every 2 minutes, for 80 minutes
        now[0] += 1
        submit(1, runs=60 * MIN, hours=stream_hours)
        tick(MIN)
        if started(store, head) is None:
            estimates.append(service.queue()[1].get(head.id))
        tick(MIN)
    assert started(store, head) is not None, store.get_job(head.id).reason
    assert started(store, head) <= T0 + 32 * MIN
    assert estimates and all(e is not None and abs(e - estimates[0]) <= 2 for e in estimates), estimates


def test_when_the_running_job_gives_no_length_jobs_behind_that_give_none_do_not_take_the_slot(broker):
    """The job holding the other GPU gives no length, so when the 2-GPU job can start cannot be told. A job behind it
    that gives no length either might hold the free GPU for ever: it waits behind it (one that gives a length takes
    it, until the 2-GPU job has waited half an hour). Before, each of the stream took the free GPU in turn, and the
    2-GPU job started only after the half hour, when the last of them ended: an hour late."""
    submit, tick, service, store, now = broker(ONE_POOL)
    first = submit(1, runs=20 * MIN)  # no expected_hours
    tick()
    now[0] += 1
    head = submit(2, runs=60 * MIN, hours=1)
    behind = []
    for i in range(30):
        now[0] += 1
        behind.append(submit(1, runs=60 * MIN))
        tick(MIN)
        tick(MIN)
    assert started(store, head) is not None and started(store, head) <= T0 + 21 * MIN, store.get_job(head.id).reason
    assert all(started(store, j) is None or started(store, j) >= started(store, head) for j in behind)
    words = store.get_job(behind[-1].id).reason
    assert words.startswith(f"waiting: ") and head.id not in words  # once it started, nothing is kept for it


def test_the_reason_of_a_job_held_back_names_the_job_it_waits_behind(broker):
    submit, tick, service, store, now = broker(ONE_POOL)
    submit(1, runs=20 * MIN)  # no expected_hours
    tick()
    now[0] += 1
    head = submit(2, runs=60 * MIN, hours=1)
    now[0] += 1
    held = submit(1, runs=60 * MIN)
    tick(1)
    assert store.get_job(held.id).reason == (
        f"waiting: behind {head.id}, which needs 2 GPUs of pool dgx and whose start cannot be told (a job holding the "
        "rest gives no length, or runs past it): its 1 free GPU kept for it from the jobs that give no "
        "`broker: expected_hours`, as this one gives none")
    # and the head is told they are kept from those alone, not "kept for it meanwhile" as when its start is known
    assert store.get_job(head.id).reason.endswith(
        "; the 1 free GPU of pool dgx is kept for it from the jobs behind that give no expected_hours meanwhile"), \
        store.get_job(head.id).reason
    assert held.id not in service.queue()[1]  # no estimate: the head's own start cannot be told


TWO_POOLS = ("pools:\n"
             "  - {name: a, slots: 2, accelerator: A100, price_per_slot_hour: '1.00'}\n"
             "  - {name: b, slots: 2, accelerator: A100, price_per_slot_hour: '1.00'}\n"
             "tick_seconds: 1\n")


def test_a_job_that_may_use_two_pools_keeps_slots_only_in_the_one_it_starts_in_first(broker):
    """Pool a has a GPU free until its job ends in 30 min, pool b one until its job ends in an hour: the 2-GPU job
    starts on a in 30 min, and only a's free GPU is kept for it. Before, b's was kept too: the 2-hour job behind it
    waited on a GPU idle for nothing, while its estimate said "now" tick after tick."""
    submit, tick, service, store, now = broker(TWO_POOLS)
    on_a = submit(1, runs=30 * MIN, hours=0.5, zone="a")
    on_b = submit(1, runs=60 * MIN, hours=1, zone="b")
    tick()
    assert [store.get_job(j.id).placement["location"] for j in (on_a, on_b)] == ["a", "b"]
    now[0] += 1
    head = submit(2, runs=60 * MIN, hours=1)
    tick(1)
    now[0] += 1
    behind = submit(1, runs=120 * MIN, hours=2)
    estimate = service.queue()[1].get(head.id)
    tick(1)
    assert store.get_job(behind.id).state is not JobState.QUEUED, store.get_job(behind.id).reason
    assert store.get_job(behind.id).placement["location"] == "b"
    assert estimate == pytest.approx(T0 + 30 * MIN, abs=5)
    for _ in range(31):
        tick(MIN)
    assert started(store, head) is not None and store.get_job(head.id).placement["location"] == "a"
    assert started(store, head) <= estimate + MIN


def test_a_job_that_fits_before_the_head_starts_is_estimated_to_start_then_not_after_the_head(broker):
    """Both GPUs busy, one until 10 min, the other until an hour; a 2-GPU job waits for both (an hour); a 1-GPU job
    of 30 min behind it, due in 90 min, fits in the 50 min between: the scheduler starts it at 10 min. Counted in
    strict order, its estimate was after the 2-GPU job, at two hours, and it was told it would miss its deadline."""
    from broker.views import shown_reason

    submit, tick, service, store, now = broker(ONE_POOL)
    submit(1, runs=60 * MIN, hours=1)
    submit(1, runs=10 * MIN, hours=10 / 60)
    tick()
    now[0] += 1
    head = submit(2, runs=60 * MIN, hours=1)
    now[0] += 1
    short = submit(1, runs=30 * MIN, hours=0.5, deadline="90m")
    tick(1)
    starts = service.queue()[1]
    assert starts[head.id] == pytest.approx(T0 + 60 * MIN, abs=5)
    assert starts[short.id] == pytest.approx(T0 + 10 * MIN, abs=5), (starts[short.id] - T0) / MIN
    assert "too late" not in shown_reason(store.get_job(short.id), starts[short.id])
    for _ in range(11):
        tick(MIN)
    assert started(store, short) is not None and started(store, short) <= T0 + 11 * MIN
    assert started(store, head) is None


def test_a_job_running_past_its_expected_length_is_said_to_once_an_attempt(broker):
    """A job that said 18 s ran on for minutes, unsaid, while a head waited behind the GPU its length let it take.
    It runs on (the length is no limit), and its events say so once — not at every tick."""
    from broker.engine.reconcile import PAST_LENGTH

    submit, tick, service, store, now = broker(ONE_POOL)
    liar = submit(1, runs=10 * MIN, hours=0.005)  # says 18 s, runs 10 min
    honest = submit(1, runs=5 * MIN, hours=0.1)
    tick()
    for _ in range(12):  # 6 min, at 30 s a tick
        tick(30)
    said = [e for e in store.events(liar.id) if e.event == PAST_LENGTH]
    assert len(said) == 1, said
    assert said[0].reason.startswith("running ") and "past its expected 18 s (broker: expected_hours 0.005)" in \
        said[0].reason, said[0].reason
    assert store.get_job(liar.id).state is JobState.RUNNING  # not stopped
    assert not [e for e in store.events(honest.id) if e.event == PAST_LENGTH]  # within its length
