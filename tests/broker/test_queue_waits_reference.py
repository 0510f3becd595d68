"""The queue's start estimates (``broker/queue.py::waits``) keep each location's ends in a list of its own, taken from
in place, where one list for every location was scanned whole for each location of each queued job and rebuilt at
each take (a read of a job at 3,000 queued worked out the whole queue that way). This checks the faster version
against that straightforward one, kept here as it was (:func:`reference_waits`), on random queues: every estimate
and every holder the same. And the parsed requests the scheduler and the estimate remember
(``broker/engine/schedule.py::request_of``) are those a fresh parse gives. Pure: jobs built by hand."""

from __future__ import annotations

import bisect
import random
import time
from dataclasses import replace
from decimal import Decimal

import pytest

from broker.engine import schedule as schedule_module
from broker.engine.schedule import request_of
from broker.lifecycle import JobState
from broker.models import Job
from broker.queue import (STARVED_SECONDS, Holder, Waits, _before_head, _holder, backoff_until, expected_end, held, ordered, waits,
                          waits_for_capacity, work_left_seconds)
from broker.spec import parse

NOW = 1_000_000.0


def reference_waits(jobs, now, usable=None, free=None, grace_seconds=0.0, stops_asked=None, not_before=None,
                    kept_in=()):
    """``waits`` as it was before each location had its own list of ends (commit 6d0e20c), word for word; with the rule
    added since, kept here the straightforward way too: a pool's head whose start cannot be told keeps the pool from
    the jobs behind that give no length, and from every one once it has waited ``STARVED_SECONDS`` (``untold``)."""
    jobs = list(jobs)
    ends = [(now, where, n) for where, n in (free or {}).items() if n > 0]
    unknown = []
    for j in jobs:
        if j.state is JobState.QUEUED:
            continue
        e = expected_end(j, now, grace_seconds, (stops_asked or {}).get(j.id))
        if e is not None:
            ends.append((e, j.placement.get("location"), held(j)))
        elif j.state in (JobState.PLACED, JobState.LAUNCHING, JobState.RUNNING):
            unknown.append(_holder(j, now))
    ends.sort(key=lambda end: end[0])
    out = Waits()
    heads = {}
    untold = {}
    for job in ordered(jobs):
        retry = backoff_until(job, now)
        if retry is None and not waits_for_capacity(job):
            continue
        need = usable(job) if usable is not None else None
        after = not_before(job) if not_before is not None else {}
        if retry is not None:
            after = {where: max(retry, at) for where, at in after.items()}
        length = work_left_seconds(job)
        barred = sorted(w for w, h in untold.items() if (length is None or h.starved) and (need is None or w in need))
        best = None
        told = set()
        for where in sorted({loc for _, loc, _ in ends} if need is None else need, key=str):
            if where in barred:
                continue
            want, got = (1 if need is None else need[where]), 0
            for end, loc, n in ends:
                if loc == where:
                    got += n
                    if got >= want:
                        start = max(end, after.get(where, retry or now))
                        told.add(where)
                        if best is None or start < best[0]:
                            best = (start, where, want)
                        break
        if retry is None and (best is None or (best[0] > now and best[1] not in kept_in)):
            pools = [p for p in (sorted(kept_in) if need is None else need)
                     if p in kept_in and p not in heads and p not in untold]
            if pools and not any(p in told for p in pools):
                pool = min(pools, key=lambda p: (-sum(n for at, loc, n in ends if loc == p and at <= now), p))
                untold[pool] = Holder(job.id, pool, team=job.team, head=True,
                                      starved=now - (job.queued_at or job.submitted_at) >= STARVED_SECONDS)
        gap = _before_head(heads, need, after, retry or now, length) if length is not None else None
        if gap is not None and (best is None or gap[0] < best[0]):
            start, where, want = gap
            out.starts[job.id] = max(start, now)
            head_start, units = heads[where]
            units = [(at, n) for at, _, n in _reference_take([(at, where, n) for at, n in units], where, want,
                                                             start)[0]]
            bisect.insort(units, (start + length, want))
            heads[where] = (head_start, units)
            continue
        if best is None:
            mine = [h for h in unknown if need is None or h.location in need]
            if barred:
                mine = [untold[w] for w in barred] + mine
            if mine:
                out.holders[job.id] = mine
            continue
        start, where, want = best
        out.starts[job.id] = max(start, now)
        ends, taken = _reference_take(ends, where, want, start)
        if where in kept_in and where not in heads and where not in untold and start > now and retry is None:
            heads[where] = (start, sorted(taken))
        if job.expected_hours:
            bisect.insort(ends, (start + float(Decimal(job.expected_hours) * 3600), where, want), key=lambda e: e[0])
        else:
            unknown.append(Holder(job.id, where, ahead=True, team=job.team))
    return out


def _reference_take(ends, where, want, start):
    left, taken_ = [], []
    for end, loc, n in ends:
        if loc == where and want > 0 and end <= start:
            taken = min(n, want)
            want -= taken
            taken_.append((end, taken))
            if n > taken:
                left.append((end, loc, n - taken))
        else:
            left.append((end, loc, n))
    return left, taken_


POOLS, ZONES = ["dgx", "gpus", "small"], ["sim-a", "sim-b", "us-east-1a", None]
REASONS = ["waiting: pool gpus is full for it right now", "waiting: the spot policy waits for spot capacity",
           "waiting: every matching zone is blocked for this job after recent preemptions",
           "waiting: the budget left does not cover it", "waiting: behind j-1, which needs 2 GPUs of pool dgx: the "
           "pool is full for this job until that one starts"]


def random_queue(rng: random.Random, queued: int, holding: int):
    """Jobs holding capacity in every state that holds it (with and without a length, overdue, reporting steps), and
    queued jobs of mixed priority, length, backoff, checkpoints and reasons; with what each may use and when."""
    where_all = POOLS + ZONES
    jobs = []
    for i in range(holding):
        state = rng.choice([JobState.RUNNING] * 6 + [JobState.PLACED, JobState.LAUNCHING, JobState.CANCELLING,
                                                       JobState.STOPPING])
        hours = rng.choice([None, "0.25", "1", "2.5", "0.01"])
        progress = {}
        if rng.random() < 0.2:
            progress = {"step": rng.randint(1, 90), "total_steps": 100, "first_step": 0,
                        "first_at": NOW - 3000, "at": NOW - rng.randint(0, 100)}
        jobs.append(Job(id=f"h{i:04d}", name=f"h{i}", team=rng.choice("tu"), state=state, spec={}, budget=1,
                        priority=0, submitted_at=NOW - 10_000 + i, updated_at=NOW - rng.randint(0, 60),
                        expected_hours=hours, running_since=NOW - rng.randint(0, 10_000),
                        placement={"location": rng.choice(where_all)}, progress=progress,
                        slots=list(range(rng.choice([0, 1, 1, 2, 4])))))
    for i in range(queued):
        attempts = rng.choice([0, 0, 0, 1, 2])
        jobs.append(Job(id=f"q{i:04d}", name=f"q{i}", team=rng.choice("tu"), state=JobState.QUEUED, spec={},
                        budget=1, priority=rng.choice([0, 0, 0, 5, -5]), submitted_at=NOW - 5000 + rng.randint(0, 4000),
                        updated_at=NOW, expected_hours=rng.choice([None, "0.1", "0.5", "1", "3"]),
                        reason=rng.choice(REASONS), attempts=attempts,
                        progress={"total_steps": 100} if attempts and rng.random() < 0.7 else {},
                        last_checkpoint={"step": rng.randint(0, 100)} if attempts and rng.random() < 0.7 else {},
                        launch_retry_at=(NOW + rng.randint(-100, 3000)) if rng.random() < 0.1 else None))
    rng.shuffle(jobs)
    free = {w: rng.choice([0, 0, 1, 2, 3]) for w in where_all}
    # a few shapes, as a real queue has: each job one of them
    shapes = [{w: rng.choice([1, 1, 2, 4]) for w in rng.sample(where_all, rng.randint(0, 3))} for _ in range(6)]
    need = {j.id: rng.choice(shapes) for j in jobs}
    blocks = {j.id: ({rng.choice(where_all): NOW + rng.randint(-50, 4000)} if rng.random() < 0.15 else {})
              for j in jobs}
    stops = {j.id: NOW - rng.randint(0, 40) for j in jobs if rng.random() < 0.5}
    return jobs, free, need, blocks, stops


@pytest.mark.parametrize("seed", range(120))
def test_the_estimates_are_those_of_the_straightforward_version(seed):
    rng = random.Random(seed)
    jobs, free, need, blocks, stops = random_queue(rng, queued=rng.randint(1, 120), holding=rng.randint(0, 40))
    kept_in = set(rng.sample(POOLS, rng.randint(0, 3)))
    grace = rng.choice([0.0, 30.0])
    for usable in ((lambda j: need[j.id]), None):  # each job's shape; any location, one unit
        args = (jobs, NOW, usable, free, grace, stops, lambda j: blocks[j.id], kept_in)
        got, want = waits(*args), reference_waits(*args)
        assert got.starts == want.starts
        assert got.holders == want.holders
        assert [h.team for hs in got.holders.values() for h in hs] == \
            [h.team for hs in want.holders.values() for h in hs]  # (team is not compared by ==)


def test_a_large_queue_gets_the_same_estimates_too():
    rng = random.Random(7)
    jobs, free, need, blocks, stops = random_queue(rng, queued=2000, holding=300)
    args = (jobs, NOW, lambda j: need[j.id], free, 30.0, stops, lambda j: blocks[j.id], {"dgx", "gpus"})
    got, want = waits(*args), reference_waits(*args)
    assert got.starts == want.starts and got.holders == want.holders
    assert len(got.starts) > 100  # (the queue is not one that nothing starts in)


def _queued(spec, *, at=NOW, cap=None, job_id="j-0"):
    return Job(id=job_id, name="a", team="t", state=JobState.QUEUED, spec=spec, budget=1, priority=0, submitted_at=at,
               updated_at=at, max_price_per_hour=cap)


def test_a_remembered_request_is_the_one_a_fresh_parse_gives():
    specs = [{"run": "x", "resources": {"accelerators": "A100:1"}, "broker": {"expected_hours": 2}},
             {"run": "x", "resources": {"accelerators": "A100:1"}, "broker": {"expected_hours": "2.0"}},
             {"run": "x", "resources": {"accelerators": {"A10G": 1, "T4": 1}}},
             {"run": "x", "resources": {"accelerators": {"T4": 1, "A10G": 1}}},  # the same mapping, another order
             {"run": "x", "resources": {"accelerators": ["A10G:1", "T4:1"]}},
             {"run": "x", "num_nodes": 2, "resources": {"cpus": "4+"}},
             {"run": "x", "num_nodes": 2, "resources": {"cpus": 4}}]
    for spec in specs:
        for at, cap in ((NOW, None), (NOW + 1, 5_000_000)):
            job = _queued(spec, at=at, cap=cap)
            fresh = parse(spec, now=at, strict=False).request
            want = replace(fresh, max_price_per_hour=cap)
            for _ in range(2):  # the first read parses, the second remembers
                # to the letter: 2.0 hours is not 2 (equal, but said otherwise), the alternatives in their order
                assert repr(request_of(job)) == repr(want)


def test_a_spec_changed_in_place_is_parsed_again_and_one_that_fails_fails_every_time():
    spec = {"run": "x", "resources": {"accelerators": "A100:1"}}
    job = _queued(spec)
    assert request_of(job).alternatives[0].accelerator_count == 1
    spec["resources"]["accelerators"] = "A100:2"
    assert request_of(job).alternatives[0].accelerator_count == 2
    bad = _queued({"run": "x", "num_nodes": 0})
    for _ in range(2):
        with pytest.raises(Exception, match="num_nodes"):
            request_of(bad)


def test_the_remembered_requests_are_bounded(monkeypatch):
    monkeypatch.setattr(schedule_module, "REQUESTS_KEPT", 10)
    monkeypatch.setattr(schedule_module, "_REQUESTS", {})
    for i in range(35):
        request_of(_queued({"run": "x", "name": f"n{i}"}))
    assert len(schedule_module._REQUESTS) <= 10


SCHEDULE_CONFIG = """\
pools:
  - {name: dgx, slots: 2, accelerator: A100, price_per_slot_hour: '1.00'}
"""


def test_jobs_of_one_shape_are_still_each_weighed_on_their_own_budget_and_tier(make_settings, tmp_path):
    """The scheduler works a shape's offers out once a pass, and whether a budget left can start it once per shape
    and budget (``broker/engine/schedule.py::schedule``): jobs of one shape that differ in their budget left or their
    forced tier still get their own decisions, and once the pool fills, the jobs behind see it full."""
    from broker_testing import set_fields

    from broker.auth import Principal
    from broker.engine.schedule import Place, Wait, schedule_now
    from broker.offers import market
    from broker.service import BrokerService
    from broker.store import open_store

    settings = make_settings(config=SCHEDULE_CONFIG)
    store = open_store(f"sqlite://{tmp_path / 'shape.db'}")
    service = BrokerService(settings, store)
    who = Principal("vision", "vision")

    def submit():
        return service.submit(who, {"run": "sleep 60", "resources": {"accelerators": "A100:1"},
                                    "broker": {"budget_usd": "50", "expected_hours": 1}})[0]

    first, poor, forced, second, third = (submit() for _ in range(5))
    set_fields(store, poor, spent=49_999_990)  # $0.00001 left: no start it can pay for
    set_fields(store, forced, force_tier="ondemand")  # no on-demand offer here
    jobs = store.list_jobs(states=["queued"])
    now = time.time()
    decided = {d.job.id: d for d in schedule_now(jobs, market(settings, [], now=now), settings, None, now=now,
                                                 policies={}, attempts_of=lambda _id: ())}
    assert isinstance(decided[first.id], Place) and isinstance(decided[second.id], Place)
    assert isinstance(decided[poor.id], Wait) and decided[poor.id].budget_spent
    assert isinstance(decided[forced.id], Wait) and not decided[forced.id].budget_spent
    assert decided[forced.id].reason != decided[third.id].reason
    assert isinstance(decided[third.id], Wait) and "full" in decided[third.id].reason  # the pool's 2 slots taken
