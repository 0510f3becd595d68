"""The queue's estimate behind a pool's head whose start cannot be told (``broker/queue.py::waits``) keeps the
scheduler's rule (``broker/engine/schedule.py::_Kept``): a job that gives no length never takes the head's slots, and
a job that gives one takes them as they come free (until the head has waited ``STARVED_SECONDS``: then none does).

Seen on a 2-GPU pool: a 2-GPU job waited behind a job that gives no length; a job of no length behind it was told it
started when the other running job ended, 06:29Z — which the scheduler never allowed (it kept the GPU for the 2-GPU
job, and the estimate went blank once the GPU was free); and a job of a short length behind a job of no length got no
estimate, while the scheduler backfilled it at the first end."""

from __future__ import annotations

import pytest

from broker.lifecycle import JobState
from broker.models import Job
from broker.queue import STARVED_SECONDS, waits
from broker.views import holders_words

NOW = 1_000_000.0
FULL = "waiting: the pool gpu is full right now"


def _job(job_id, state, *, at=0.0, hours=None, since=None, team="t", queued=None):
    return Job(id=job_id, name=job_id, team=team, spec={}, budget=1, priority=0, state=state,
               submitted_at=NOW - 100 + at, updated_at=NOW, expected_hours=hours, running_since=since,
               queued_at=queued, placement={"location": "gpu"} if state is not JobState.QUEUED else {},
               slots=[0] if state is not JobState.QUEUED else [], reason=FULL if state is JobState.QUEUED else "")


NEED = {"wide": {"gpu": 2}}


def _usable(job):
    return NEED.get(job.id.rstrip("0123456789"), {"gpu": 1})


def test_a_job_of_no_length_behind_a_head_whose_start_cannot_be_told_gets_no_estimate_while_the_pool_is_full():
    """hold2 (no length) and len (ends in 40 s) fill the pool; wide4 (2 GPUs) waits for both; nolen3 (no length)
    behind it was estimated to start when len ends: the scheduler keeps that GPU for wide4 from it."""
    jobs = [_job("hold", JobState.RUNNING, since=NOW - 10),
            _job("len", JobState.RUNNING, hours="0.012", since=NOW - 3.2),  # ends at NOW + 40
            _job("wide", JobState.QUEUED, at=1, hours="0.004"),
            _job("nolen", JobState.QUEUED, at=2)]
    found = waits(jobs, NOW, _usable, {"gpu": 0}, kept_in={"gpu"})
    assert found.starts == {}, found.starts
    assert [h.job_id for h in found.holders["wide"]] == ["hold"]
    assert [(h.job_id, h.head) for h in found.holders["nolen"]] == [("wide", True), ("hold", False)]
    assert holders_words(found.holders["nolen"]) == (
        "no start estimate: it waits behind wide, first in line for pool gpu, whose start cannot be told: what comes "
        "free there is kept for it from the jobs that give no `broker: expected_hours`, as this one gives none; what "
        "it needs is held by hold (with no expected length); when that ends cannot be told")
    # told to another team, the head is not named
    assert holders_words(found.holders["nolen"], "other").startswith(
        "no start estimate: it waits behind a job of another team, first in line for pool gpu, whose start")


def test_a_job_of_a_length_behind_it_gets_the_first_end_and_one_of_no_length_ahead_of_it_gets_none():
    """hold3 (no length) and fill (ends in 60 s); wide5 (2 GPUs), nolenB (no length), ylen (short): the scheduler
    backfills ylen at fill's end, and keeps nolenB waiting until wide5 starts. The estimate said the reverse."""
    jobs = [_job("hold", JobState.RUNNING, since=NOW - 10),
            _job("fill", JobState.RUNNING, hours="0.02", since=NOW - 12),  # ends at NOW + 60
            _job("wide", JobState.QUEUED, at=1, hours="0.004"),
            _job("nolenB", JobState.QUEUED, at=2),
            _job("ylen", JobState.QUEUED, at=3, hours="0.002")]
    found = waits(jobs, NOW, lambda j: {"gpu": 2} if j.id == "wide" else {"gpu": 1}, {"gpu": 0}, kept_in={"gpu"})
    assert found.starts == {"ylen": pytest.approx(NOW + 60)}
    assert [(h.job_id, h.head) for h in found.holders["nolenB"]] == [("wide", True), ("hold", False)]


def test_once_the_head_has_waited_half_an_hour_no_job_behind_gets_its_pool():
    jobs = [_job("hold", JobState.RUNNING, since=NOW - 10),
            _job("fill", JobState.RUNNING, hours="0.02", since=NOW - 12),
            _job("wide", JobState.QUEUED, at=1, hours="0.004", queued=NOW - STARVED_SECONDS - 1),
            _job("ylen", JobState.QUEUED, at=3, hours="0.002")]
    found = waits(jobs, NOW, lambda j: {"gpu": 2} if j.id == "wide" else {"gpu": 1}, {"gpu": 0}, kept_in={"gpu"})
    assert found.starts == {}
    assert holders_words(found.holders["ylen"]) == (
        "no start estimate: it waits behind wide, which has waited more than 30 min for pool gpu: what comes free "
        "there is kept for it, and this job starts after it; what it needs is held by hold (with no expected "
        "length); when that ends cannot be told")


def test_a_pool_not_kept_keeps_nothing_and_a_head_with_a_known_start_is_as_before():
    """Where the pool keeps nothing (a zone), the job of no length takes the first end, as before; and where the
    head's start can be told, the job behind is estimated after it as before."""
    jobs = [_job("hold", JobState.RUNNING, since=NOW - 10),
            _job("len", JobState.RUNNING, hours="0.012", since=NOW - 3.2),
            _job("wide", JobState.QUEUED, at=1, hours="0.004"),
            _job("nolen", JobState.QUEUED, at=2)]
    found = waits(jobs, NOW, _usable, {"gpu": 0}, kept_in=())
    assert found.starts == {"nolen": pytest.approx(NOW + 40)}
    jobs[0] = _job("hold", JobState.RUNNING, hours="0.05", since=NOW - 10)  # ends at NOW + 170
    found = waits(jobs, NOW, _usable, {"gpu": 0}, kept_in={"gpu"})
    assert found.starts == {"wide": pytest.approx(NOW + 170), "nolen": pytest.approx(NOW + 170 + 14.4)}


# -- through the engine: the estimate is the start the scheduler keeps to --------------------------------------------

GPU_POOL = "pools: [{name: gpu, slots: 2, accelerator: A10G, price_per_slot_hour: '1.00'}]\ntick_seconds: 1\n"
T0 = 1_800_000_000.0


@pytest.fixture
def engine_broker(make_settings, tmp_path):
    """``(submit, tick, service, store)`` on a fake clock: ``submit(gpus, runs=seconds, hours=None)``; ``tick(s)``
    moves the clock on by ``s`` and runs one engine tick."""
    from test_head_of_line import Scripted

    from broker.auth import Principal
    from broker.engine.reconcile import Engine
    from broker.service import BrokerService
    from broker.store import open_store

    admin = Principal("admin", None, admin=True)
    settings = make_settings(config=GPU_POOL)
    store = open_store(f"sqlite://{tmp_path / 'untold.db'}")
    now = [T0]
    launcher = Scripted(lambda: now[0])
    engine = Engine(settings, store, launcher, clock=lambda: now[0])
    service = BrokerService(settings, store, launcher, clock=lambda: now[0])

    def submit(gpus: int, *, runs: float, hours: float | None = None):
        now[0] += 1  # queue order by submit time
        section = {"budget_usd": "50", **({"expected_hours": hours} if hours is not None else {})}
        job = service.submit(admin, {"run": "train", "resources": {"accelerators": f"A10G:{gpus}"},
                                     "broker": section})[0]
        launcher.lengths[job.id] = runs
        return job

    def tick(seconds: float = 0.0):
        now[0] += seconds
        engine.tick()

    yield submit, tick, service, store
    store.close()


def _shown(service, store, job):
    from broker.views import shown_reason

    q = service.queue_waits()
    return q.starts.get(job.id), shown_reason(store.get_job(job.id), q.starts.get(job.id), q.waiting.get(job.id))


def test_through_the_engine_the_job_of_no_length_is_never_estimated_on_the_gpu_the_scheduler_keeps(engine_broker):
    submit, tick, service, store = engine_broker
    hold = submit(1, runs=90)
    length = submit(1, runs=40, hours=0.012)
    tick()
    wide = submit(2, runs=14, hours=0.004)
    nolen = submit(1, runs=10)
    tick()
    assert store.get_job(length.id).running_since is not None
    start, reason = _shown(service, store, nolen)
    assert start is None, (start - T0, reason)
    assert f"it waits behind {wide.id}, first in line for pool gpu, whose start cannot be told" in reason, reason
    assert f"held by {hold.id} (with no expected length)" in reason, reason
    for _ in range(45):  # `length` ends: the GPU it frees is kept for `wide`, as the estimate said
        tick(1)
        assert store.get_job(nolen.id).running_since is None
    assert _shown(service, store, nolen)[0] is None


def test_through_the_engine_the_job_of_a_length_is_estimated_at_the_first_end_and_starts_then(engine_broker):
    submit, tick, service, store = engine_broker
    submit(1, runs=120)  # no length
    fill = submit(1, runs=30, hours=30 / 3600)
    tick()
    submit(2, runs=14, hours=0.004)
    nolen = submit(1, runs=10)
    ylen = submit(1, runs=5, hours=5 / 3600)
    tick()
    fill_ends = store.get_job(fill.id).running_since + 30
    start, reason = _shown(service, store, ylen)
    assert start == pytest.approx(fill_ends, abs=1), reason
    assert _shown(service, store, nolen)[0] is None
    for _ in range(40):
        tick(1)
    assert store.get_job(ylen.id).running_since == pytest.approx(fill_ends, abs=2)
    assert store.get_job(nolen.id).running_since is None
