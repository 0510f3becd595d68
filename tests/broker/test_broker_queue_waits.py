"""What a queued job tells its user about its wait, beside its position and rough start (``broker/queue.py``,
``BrokerService.queue_waits``, ``broker/views.py``).

Three gaps, each shown on a real broker (the local launcher's real processes, a pool or a simulated zone from the
config; the engine's clock the test's where time must pass):

* a job whose estimated start is too late for its deadline, with its expected length, said nothing of it;
* while the job holding a full pool ran past its ``expected_hours``, the jobs waiting for it lost their estimate
  with no word of why;
* a job waiting for zones blocked for it after its preemptions there got no estimate, though the scheduler places it
  there again when the block ends and the zone had nodes free.
"""

from __future__ import annotations

import time

import pytest
from broker_testing import ADMIN as ADMIN_TOKEN

from broker.auth import Principal
from broker.engine.reconcile import Engine
from broker.lifecycle import JobState
from broker.models import Job
from broker.service import BrokerService
from broker.store import open_store
from broker.views import job_view

ADMIN = Principal("admin", None, admin=True)
POOL = "pools: [{name: dgx, slots: 1, accelerator: A100, price_per_slot_hour: '1.10'}]\n"
NOW = 1_000_000.0


def _minute(t: float, up: bool) -> str:
    import math

    # a start to the nearest minute of its whole second, as `broker queue`'s "starts ~" column reads it; a deadline down
    t = (math.floor(t) + 30) // 60 * 60 if up else math.floor(t / 60) * 60
    return time.strftime("%Y-%m-%d %H:%MZ", time.gmtime(t))


def _stop_all(store, launcher):
    for j in store.list_jobs(limit=100):
        for a in store.attempts(j.id):
            launcher.stop(a.id, grace_seconds=0)


def _run(engine, store, job_id):
    """Tick until the job runs (its process started)."""
    for _ in range(100):
        engine.tick()
        if store.get_job(job_id).state is JobState.RUNNING:
            return store.get_job(job_id)
        time.sleep(0.05)
    raise AssertionError(f"{job_id} did not start: {store.get_job(job_id)}")


# -- 1. a start too late for the job's deadline ----------------------------------------------------------------------


def test_a_queued_job_whose_estimated_start_is_too_late_for_its_deadline_says_so_through_the_api(make_settings, tmp_path):
    """A pool of one slot held by a job expected to run 2 h; behind it, a job of 1 h due in 2.5 h (its submit was
    accepted: 1 h fits in 2.5 h), and a job of 30 min due in 4 h. The first starts in about 2 h and ends past its
    deadline: its reason says so, in the API's job view and list. The second, starting in about 3 h, meets its own.
    Words only: the stored reason, which the scheduler writes, is left as it was."""
    from fastapi.testclient import TestClient

    from broker.api.app import create_app
    from launchers.local import LocalLauncher

    settings = make_settings(config=POOL)
    store = open_store(f"sqlite://{tmp_path / 'late.db'}")
    launcher = LocalLauncher(settings.data_dir / "runs")
    engine = Engine(settings, store, launcher)
    service = BrokerService(settings, store, launcher)
    app = create_app(settings, store=store, launcher=launcher, engine=False)
    try:
        holder = service.submit(ADMIN, {"run": "sleep 60", "resources": {"accelerators": "A100:1"},
                                        "broker": {"budget_usd": "50", "expected_hours": 2}})[0]
        holder = _run(engine, store, holder.id)
        late = service.submit(ADMIN, {"run": "true", "resources": {"accelerators": "A100:1"},
                                      "broker": {"budget_usd": "50", "expected_hours": 1, "deadline": "2.5h"}})[0]
        fine = service.submit(ADMIN, {"run": "true", "resources": {"accelerators": "A100:1"},
                                      "broker": {"budget_usd": "50", "expected_hours": "0.5", "deadline": "4h"}})[0]
        engine.tick()
        stored = store.get_job(late.id)
        assert stored.state is JobState.QUEUED and "full" in stored.reason, stored.reason
        _, starts = service.queue()
        start = starts[late.id]
        assert start == pytest.approx(holder.running_since + 7200, abs=5)
        said = (f"estimated to start at {_minute(start, True)}, too late for its deadline at "
                f"{_minute(stored.deadline, False)} with its expected 1.0 h")
        with TestClient(app) as client:
            auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
            one = client.get(f"/v1/jobs/{late.id}", headers=auth).json()
            listed = {j["id"]: j for j in client.get("/v1/jobs", headers=auth).json()["jobs"]}
            other = client.get(f"/v1/jobs/{fine.id}", headers=auth).json()
        assert one["reason"] == f"{stored.reason}; {said}", one["reason"]
        assert listed[late.id]["reason"] == one["reason"]
        assert other["estimated_start"] is not None and other["reason"] == store.get_job(fine.id).reason
        assert store.get_job(late.id).reason == stored.reason  # nothing stored: the scheduler reads what it wrote
    finally:
        _stop_all(store, launcher)
        store.close()


def _queued(**kw) -> Job:
    base = dict(id="j", name="j", team="t", spec={}, budget=1, priority=0, state=JobState.QUEUED,
                submitted_at=NOW - 100, updated_at=NOW, reason="waiting: the pool dgx is full right now")
    return Job(**{**base, **kw})


@pytest.mark.parametrize("job, start, said", [
    pytest.param(_queued(deadline=NOW + 3600), NOW + 3660,
                 f"estimated to start at {_minute(NOW + 3660, True)}, after its deadline at {_minute(NOW + 3600, False)}",
                 id="a start after the deadline, with no length given"),
    pytest.param(_queued(deadline=NOW + 3600, expected_hours="2"), NOW + 60,
                 f"estimated to start at {_minute(NOW + 60, True)}, too late for its deadline at "
                 f"{_minute(NOW + 3600, False)} with its expected 2.0 h",
                 id="a start before the deadline, its expected length ending past it"),
    pytest.param(_queued(deadline=NOW + 3600, expected_hours="2", attempts=1, progress={"total_steps": 100},
                         last_checkpoint={"step": 75}), NOW + 60, None,
                 id="a resumed job with a quarter of its steps left (30 min) meets it"),
    pytest.param(_queued(deadline=NOW + 3600, expected_hours="2", attempts=1, progress={"total_steps": 100},
                         last_checkpoint={"step": 25}), NOW + 60,
                 f"estimated to start at {_minute(NOW + 60, True)}, too late for its deadline at "
                 f"{_minute(NOW + 3600, False)} with the 1.5 h left of its expected 2.0 h",
                 id="a resumed job with three quarters of its steps left does not"),
    pytest.param(_queued(deadline=NOW + 3600, expected_hours="0.5"), NOW + 60, None, id="a job that meets it"),
    pytest.param(_queued(expected_hours="2"), NOW + 60, None, id="a job with no deadline"),
    pytest.param(_queued(deadline=NOW + 3600, expected_hours="2"), None, None, id="a job with no estimate"),
])
def test_deadline_words(job, start, said):
    from broker.views import deadline_words

    assert deadline_words(job, start) == said
    shown = job_view(job, estimated_start=start)["reason"]
    assert shown == (f"{job.reason}; {said}" if said else job.reason)


# -- 2. the job holding the capacity runs past its expected length ---------------------------------------------------


def test_a_job_waiting_behind_one_running_past_its_expected_length_is_told_so_rather_than_losing_its_estimate_unsaid(
        make_settings, tmp_path):
    """A pool of one slot held by a job expected to run 30 min, and a job waiting for it. While the first is within
    its length, the second has an estimate; 2 h on, the first still running, it has none (when the first ends cannot
    be told: no guess), and its reason says what it waits for and how far past its length that job runs."""
    from launchers.local import LocalLauncher

    settings = make_settings(config=POOL)
    store = open_store(f"sqlite://{tmp_path / 'over.db'}")
    launcher = LocalLauncher(settings.data_dir / "runs")
    now = [time.time()]
    engine = Engine(settings, store, launcher, clock=lambda: now[0])
    service = BrokerService(settings, store, launcher, clock=lambda: now[0])
    try:
        holder = service.submit(ADMIN, {"run": "sleep 60", "resources": {"accelerators": "A100:1"},
                                        "broker": {"budget_usd": "50", "expected_hours": "0.5"}})[0]
        holder = _run(engine, store, holder.id)
        waiting = service.submit(ADMIN, {"run": "true", "resources": {"accelerators": "A100:1"},
                                         "broker": {"budget_usd": "50"}})[0]
        engine.tick()
        q = service.queue_waits()
        assert q.starts[waiting.id] == pytest.approx(holder.running_since + 1800, abs=5) and q.waiting == {}
        now[0] = holder.running_since + 2 * 3600  # 1.5 h past its expected 30 min
        engine.tick()
        assert store.get_job(holder.id).state is JobState.RUNNING
        stored = store.get_job(waiting.id)
        assert stored.state is JobState.QUEUED and "full" in stored.reason, stored.reason
        q = service.queue_waits()
        assert waiting.id not in q.starts and service.queue() == (q.positions, q.starts)
        said = (f"no start estimate: what it needs is held by {holder.id} (running 1.5 h past its expected 30 min); "
                "when that ends cannot be told")
        assert q.waiting == {waiting.id: said}
        view = job_view(stored, position=q.positions.get(waiting.id), estimated_start=q.starts.get(waiting.id),
                        waiting=q.waiting.get(waiting.id))
        assert view["reason"] == f"{stored.reason}; {said}" and view["estimated_start"] is None
        assert store.get_job(waiting.id).reason == stored.reason
    finally:
        _stop_all(store, launcher)
        store.close()


def _job(job_id, state, *, at=0.0, hours=None, since=None, where="gpus", reason="waiting: the pool gpus is full"):
    return Job(id=job_id, name=job_id, team="t", spec={}, budget=1, priority=0, state=state,
               submitted_at=NOW - 1000 + at, updated_at=NOW, expected_hours=hours, running_since=since,
               placement={"location": where} if state is not JobState.QUEUED else {},
               reason=reason if state is JobState.QUEUED else "")


def test_each_job_with_no_end_to_follow_is_named_and_a_job_ahead_with_no_length_too():
    """Two slots: one held by a job 20 min past its expected hour, one by a launching job that gave no length.
    The first job in line gets no estimate and is told of both; a job that gives no length, taking what comes free
    first, leaves the ones behind it without an estimate, and they are told of it too."""
    from broker.queue import Holder, waits
    from broker.views import holders_words

    jobs = [_job("over", JobState.RUNNING, hours="1", since=NOW - 80 * 60),
            _job("nolength", JobState.LAUNCHING),
            _job("first", JobState.QUEUED, at=1)]
    found = waits(jobs, NOW)
    assert found.starts == {}
    assert found.holders == {"first": [Holder("over", "gpus", overdue=pytest.approx(1200), expected_hours="1"),
                                       Holder("nolength", "gpus")]}
    assert holders_words(found.holders["first"]) == (
        "no start estimate: what it needs is held by over (running 20 min past its expected 1.0 h) and nolength "
        "(with no expected length); when those end cannot be told")
    # a slot comes free in 10 min: `first` (no length) takes it, and `second` waits behind it
    jobs += [_job("ends", JobState.RUNNING, hours="1", since=NOW - 50 * 60, where="gpus"),
             _job("second", JobState.QUEUED, at=2)]
    found = waits(jobs, NOW)
    assert found.starts == {"first": pytest.approx(NOW + 600)}
    assert [h.job_id for h in found.holders["second"]] == ["over", "nolength", "first"]
    assert holders_words(found.holders["second"]) == (
        "no start estimate: what it needs is held by over (running 20 min past its expected 1.0 h) and nolength "
        "(with no expected length), and it waits behind first, ahead of it in the queue with no expected length; "
        "when those end cannot be told")
    # a job waiting for something else than capacity is told nothing of the sort; nor is one on other capacity
    other = [*jobs[:2], _job("spot", JobState.QUEUED, at=1, reason="waiting: the spot policy waits for spot capacity"),
             _job("cpu", JobState.QUEUED, at=2)]
    assert waits(other, NOW, lambda j: {"cpu": 1} if j.id == "cpu" else {"gpus": 1}).holders == {}


def test_only_so_many_holders_are_named():
    from broker.queue import Holder
    from broker.views import holders_words

    holders = [Holder(f"j-{i}", "gpus") for i in range(5)]
    assert holders_words(holders) == ("no start estimate: what it needs is held by j-0 (with no expected length), "
                                      "j-1 (with no expected length), j-2 (with no expected length) and 2 more; "
                                      "when those end cannot be told")
    assert holders_words([]) is None


# -- 3. zones blocked for the job after its preemptions ---------------------------------------------------------------


ZONE = "pools: []\nzones:\n  - {name: sim-a, tier: spot, instance_type: g5.xlarge}\n"


def test_a_job_waiting_for_a_zone_blocked_for_it_is_estimated_to_start_when_the_block_ends(make_settings, tmp_path):
    """Preempted in the simulated spot zone sim-a (4 nodes), the job is queued again with sim-a blocked for it for
    the cool-down, its reason naming the zone and until when. The zone has nodes free: it starts when the block
    ends, as the scheduler places it then — no estimate before. With the zone down, when it is back cannot be told:
    no estimate."""
    from broker.runtime import open_launcher

    settings = make_settings(config=ZONE)
    store = open_store(f"sqlite://{tmp_path / 'blocked.db'}")
    launcher = open_launcher(settings)
    engine, service = Engine(settings, store, launcher), BrokerService(settings, store, launcher)
    try:
        job = service.submit(ADMIN, {"run": "sleep 60", "resources": {"accelerators": "A10G:1", "use_spot": True},
                                     "broker": {"budget_usd": "5", "expected_hours": 1}})[0]
        _run(engine, store, job.id)
        assert service.inject_fault(ADMIN, "preempt", job_id=job.id)["applied"]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            engine.tick()
            back = store.get_job(job.id)
            if back.state is JobState.QUEUED and "blocked" in back.reason:
                break
            time.sleep(0.1)
        else:
            raise AssertionError(store.get_job(job.id))
        until = back.blocked_zones["sim-a"]
        assert until > time.time() + 60
        # what blocked it, read from its attempts: one preemption, said as one (not "recent preemptions")
        assert back.reason == ("waiting: every matching zone is blocked for this job: zone sim-a after a preemption "
                               f"there; sim-a until {time.strftime('%H:%M:%SZ', time.gmtime(until))}"), back.reason
        assert service.queue() == ({job.id: 1}, {job.id: pytest.approx(until, abs=1)})
        launcher.set_zone_available("sim-a", False)
        assert service.queue() == ({job.id: 1}, {})
        assert service.queue_waits().waiting == {}  # nothing holds it: the zone is down, its reason says blocked
    finally:
        _stop_all(store, launcher)
        store.close()


def test_a_blocked_zone_counts_from_when_its_block_ends_and_the_earliest_place_wins():
    """Pure: a pool slot ending in 1 h, and a zone with a node free, blocked for the job for 10 min more: it starts
    on the zone in 10 min. Blocked for 2 h, the pool's slot in 1 h comes first. A zone whose node is held until
    after the block ends starts it at that end."""
    from broker.queue import waits

    jobs = [_job("pool", JobState.RUNNING, hours="1", since=NOW, where="gpus"),
            _job("j", JobState.QUEUED, at=1, reason="waiting: gpus full right now and sim-a blocked for this job "
                                                     "after recent preemptions")]
    need = lambda j: {"gpus": 1, "sim-a": 1}  # noqa: E731
    assert waits(jobs, NOW, need, {"sim-a": 1}, not_before=lambda j: {"sim-a": NOW + 600}).starts == \
        {"j": pytest.approx(NOW + 600)}
    assert waits(jobs, NOW, need, {"sim-a": 1}, not_before=lambda j: {"sim-a": NOW + 7200}).starts == \
        {"j": pytest.approx(NOW + 3600)}
    zone_busy = [_job("zone", JobState.RUNNING, hours="0.5", since=NOW, where="sim-a"), jobs[1]]
    assert waits(zone_busy, NOW, lambda j: {"sim-a": 1}, {}, not_before=lambda j: {"sim-a": NOW + 600}).starts == \
        {"j": pytest.approx(NOW + 1800)}
