"""A pool's free slots are kept for the first job in the queue that waits for more of them than are free
(``broker/engine/schedule.py::_Kept``, EASY backfill). Before, a 2-slot job at the head of a 2-slot pool waited for
ever behind a stream of 1-slot jobs, each taking the slot the other left free; its start estimate slid on at every
tick. A job behind it still takes a free slot where that cannot delay it: it is expected to end before the kept job
can start. Pure: the engine's own ``market`` and ``schedule_now`` over jobs committed as the engine leaves them."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from broker_testing import set_fields

from broker.auth import Principal
from broker.engine.schedule import Place, Wait, schedule_now
from broker.lifecycle import JobState
from broker.offers import market
from broker.service import BrokerService
from broker.store import open_store

CONFIG = """\
pools:
  - {name: dgx, slots: 2, accelerator: A100, price_per_slot_hour: '1.00'}
"""
VISION = Principal("vision", "vision")
H = 3600


@pytest.fixture
def pool(make_settings, tmp_path):
    settings = make_settings(config=CONFIG)
    store = open_store(f"sqlite://{tmp_path / 'keep.db'}")
    service = BrokerService(settings, store)
    now = time.time()

    def submit(gpus: int, **broker):
        return service.submit(VISION, {"run": "sleep 60", "resources": {"accelerators": f"A100:{gpus}"},
                                       "broker": {"budget_usd": "50", **broker}})[0]

    def running(**broker):
        job = submit(1, **broker)
        return set_fields(store, job, state=JobState.RUNNING, slots=[0], running_since=now - 600, attempts=1,
                          reason="running attempt 1",
                          placement={"tier": "onprem", "cloud": "local", "region": "dgx", "zone": "dgx",
                                     "location": "dgx", "instance_type": "dgx-1slot", "num_nodes": 1,
                                     "price_per_hour": 1_000_000})

    def decide():
        jobs = store.list_jobs(states=["queued", "running"])
        mk = market(settings, [j for j in jobs if j.state.is_active], now=now)
        queued = [j for j in jobs if j.state is JobState.QUEUED]
        return {d.job.id: d for d in schedule_now(queued, mk, settings, None, now=now, policies={},
                                                  attempts_of=lambda _id: ())}

    submit.store = store
    submit.service = service
    try:
        yield submit, running, decide
    finally:
        store.close()


def test_a_job_behind_a_waiting_2_slot_job_does_not_take_the_slot_it_waits_for(pool):
    submit, running, decide = pool
    running(expected_hours=1)  # ends in 50 min: then both slots are free for `head`
    head = submit(2, expected_hours=1)
    longer = submit(1, expected_hours=2)  # would still run when `head` could start
    unknown = submit(1)  # says no length: it may run past that
    decided = decide()
    assert isinstance(decided[head.id], Wait)
    assert decided[head.id].reason.endswith("; the 1 free GPU of pool dgx is kept for it meanwhile"), \
        decided[head.id].reason  # the head is told so too
    for job, hint in ((longer, ""), (unknown, ", and this one gives no `broker: expected_hours`")):
        assert isinstance(decided[job.id], Wait), decided[job.id]
        assert decided[job.id].reason == (
            f"waiting: behind {head.id}, which needs 2 GPUs of pool dgx: the pool is full for this job until that one "
            f"starts (its 1 free GPU kept for it; a job expected to end before then may still take it{hint})")


def test_a_job_that_ends_before_the_waiting_job_can_start_still_takes_the_free_slot(pool):
    submit, running, decide = pool
    running(expected_hours=1)
    head = submit(2, expected_hours=1)
    longer = submit(1, expected_hours=2)
    short = submit(1, expected_hours=0.5)  # done in 30 min, 20 min before `head` can start
    decided = decide()
    assert isinstance(decided[head.id], Wait) and isinstance(decided[longer.id], Wait)
    assert isinstance(decided[short.id], Place) and decided[short.id].slots == (1,)


def test_nothing_is_kept_when_the_slots_holder_gives_no_length(pool):
    """When the waiting job's start cannot be told (the job holding the other slot gives no length), a slot kept for it
    might stay idle for ever: the job behind takes it, as before (and the queue gives the waiting job no estimate)."""
    submit, running, decide = pool
    running()
    head = submit(2, expected_hours=1)
    behind = submit(1, expected_hours=2)
    decided = decide()
    assert isinstance(decided[head.id], Wait)
    assert isinstance(decided[behind.id], Place), decided[behind.id]


def test_a_job_that_has_waited_half_an_hour_has_the_slots_kept_even_when_their_holder_gives_no_length(pool):
    """Left to the jobs behind for ever, a slot whose holder gives no end let a stream of 1-slot jobs starve a 2-slot
    job without limit; after STARVED_SECONDS of waiting, the free slot is kept for it all the same."""
    from broker.engine.schedule import STARVED_SECONDS

    submit, running, decide = pool
    running()  # gives no length
    head = submit(2, expected_hours=1)
    behind = submit(1, expected_hours=0.1)
    assert isinstance(decide()[behind.id], Place)  # not yet starved: it takes the free slot, as before
    set_fields(submit.store, head, queued_at=time.time() - STARVED_SECONDS - 60)  # (decide() stores nothing)
    decided = decide()
    assert isinstance(decided[head.id], Wait) and isinstance(decided[behind.id], Wait), decided[behind.id]
    assert decided[behind.id].reason == (
        f"waiting: behind {head.id}, which needs 2 GPUs of pool dgx and has waited more than 30 min for them: its 1 "
        "free GPU kept for it, and this job starts after it")
    # no start estimate for it, rather than "now" tick after tick while the slot is kept
    from broker.queue import waits_for_capacity
    assert not waits_for_capacity(replace(submit.store.get_job(behind.id), reason=decided[behind.id].reason))


def test_a_job_ahead_of_the_waiting_one_is_not_held_back(pool):
    submit, running, decide = pool
    running(expected_hours=1)
    first = submit(1, expected_hours=3)
    head = submit(2, expected_hours=1)
    decided = decide()
    assert isinstance(decided[first.id], Place)
    assert isinstance(decided[head.id], Wait)


def test_with_real_processes_a_2_gpu_job_starts_before_the_longer_1_gpu_jobs_queued_behind_it(make_settings,
                                                                                                tmp_path):
    """End to end on the local launcher: a box of 2 GPUs, one running a 4-second job; a 2-GPU job waits; three 1-GPU
    jobs of half a minute each are queued behind it. Before, the first of those took the free GPU at once, the next
    the one that came free, and the 2-GPU job waited behind them all; now it starts when the short job ends."""
    from broker_testing import local_broker, wait_for

    config = ("pools:\n  - {name: box, slots: 2, accelerator: A100, price_per_slot_hour: '1.00'}\n"
              "stop_grace_seconds: 1\ntick_seconds: 0.05\n")
    admin = Principal("admin", None, admin=True)
    with local_broker(make_settings, tmp_path, config) as (service, engine, store, launcher):
        def submit(gpus, run, hours):
            return service.submit(admin, {"run": run, "resources": {"accelerators": f"A100:{gpus}"},
                                          "broker": {"budget_usd": "5", "expected_hours": hours}})[0]

        try:
            short = submit(1, "sleep 4", "0.0015")  # 5.4 s expected
            wait_for(lambda: engine.tick() or store.get_job(short.id).state is JobState.RUNNING)
            head = submit(2, "sleep 1", "0.001")
            longer = [submit(1, "sleep 30", "0.01") for _ in range(3)]  # 36 s expected each
            engine.tick()
            assert all(store.get_job(j.id).state is JobState.QUEUED for j in longer), "one took the kept GPU"
            started = wait_for(lambda: engine.tick() or store.get_job(head.id).running_since, timeout=40)
            firsts = [store.get_job(j.id).running_since for j in longer]
            assert all(t is None or t >= started for t in firsts), (started, firsts)
        finally:
            for run in launcher.runs_dir.glob("j*"):
                launcher.kill(run.name)


def test_a_holder_read_as_ending_now_does_not_make_the_waiting_job_starved(pool):
    """The job holding the other slot is a few seconds past its expected length, which is read as ending now: the
    waiting job starts at the next end, and the job held back behind it is told that, not that it has waited more
    than half an hour (it had waited none of it)."""
    submit, running, decide = pool
    running(expected_hours="0.165")  # 594 s, run for 600: within its grace
    head = submit(2, expected_hours=1)
    behind = submit(1, expected_hours=2)
    decided = decide()
    assert isinstance(decided[behind.id], Wait)
    assert decided[behind.id].reason.startswith(
        f"waiting: behind {head.id}, which needs 2 GPUs of pool dgx: the pool is full for this job until that one "
        "starts"), decided[behind.id].reason


def test_a_job_held_back_behind_another_teams_head_is_not_told_its_id(pool):
    """The reason is stored and shown to the held-back job's team, which cannot look the head up (another team's
    jobs are 404 to it): it is "a job of another team", as the queue says of holders."""
    submit, running, decide = pool
    running(expected_hours=1)
    head = submit(2, expected_hours=1)
    nlp = submit.service.submit(Principal("nlp", "nlp"), {"run": "sleep 60", "resources": {"accelerators": "A100:1"},
                                                          "broker": {"budget_usd": "50", "expected_hours": 2}})[0]
    decided = decide()
    assert decided[nlp.id].reason == (
        "waiting: behind a job of another team, which needs 2 GPUs of pool dgx: the pool is full for this job until "
        "that one starts (its 1 free GPU kept for it; a job expected to end before then may still take it)")
    assert head.id not in decided[nlp.id].reason


def test_a_job_that_ran_before_without_reporting_steps_is_judged_on_its_whole_length(pool):
    """A job resumed after a failure, which never reported a step total, read as having no length: it was kept off
    the free slot although its whole length ends long before the head can start, and told that a job expected to
    end before then may still take it."""
    submit, running, decide = pool
    running(expected_hours=1)  # both slots free for `head` in 50 min
    head = submit(2, expected_hours=1)
    resumed = set_fields(submit.store, submit(1, expected_hours=0.25), attempts=1)  # ran once, no steps reported
    longer = set_fields(submit.store, submit(1, expected_hours=2), attempts=1)  # its whole length is past the start
    decided = decide()
    assert isinstance(decided[head.id], Wait)
    assert isinstance(decided[resumed.id], Place), decided[resumed.id]
    assert isinstance(decided[longer.id], Wait), decided[longer.id]


def test_the_second_job_waiting_for_a_full_pool_is_told_the_pool_is_full(make_settings, tmp_path):
    """With the pool's one slot taken and a head waiting for it, the job behind was told of the next offer — "the
    cheapest match, spot … costs $0.4246/h, over the job's max_price_per_hour" — as if the pool were not there."""
    settings = make_settings(config="pools: [{name: p1, slots: 1, price_per_slot_hour: '0.20'}]\n"
                                     "zones: [{name: sim-a, tier: spot, instance_type: g5.xlarge}]\n")
    store = open_store(f"sqlite://{tmp_path / 'full.db'}")
    service = BrokerService(settings, store)
    now = time.time()
    try:
        def submit(**broker):
            return service.submit(VISION, {"run": "sleep 60", "resources": {"cpus": 1},
                                           "broker": {"budget_usd": "5", "max_price_per_hour": "0.30", **broker}})[0]

        holder = submit(expected_hours=1)
        set_fields(store, holder, state=JobState.RUNNING, slots=[0], running_since=now - 60, attempts=1,
                   placement={"tier": "onprem", "cloud": "local", "region": "p1", "zone": "p1", "location": "p1",
                              "instance_type": "p1-1slot", "num_nodes": 1, "price_per_hour": 200_000})
        first, second = submit(), submit()
        jobs = store.list_jobs(states=["queued", "running"])
        mk = market(settings, [j for j in jobs if j.state.is_active], now=now)
        decided = {d.job.id: d for d in schedule_now([j for j in jobs if j.state is JobState.QUEUED], mk, settings,
                                                     None, now=now, policies={}, attempts_of=lambda _id: ())}
        for job in (first, second):
            assert isinstance(decided[job.id], Wait)
            assert "p1 is full" in decided[job.id].reason and "spot" not in decided[job.id].reason, \
                decided[job.id].reason
    finally:
        store.close()
