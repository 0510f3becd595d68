"""A pool whose `slots` were lowered (the broker restarted with a smaller pool) while jobs ran on the slots it no
longer has: those jobs hold capacity until they end, so nothing new is placed there before the pool has room."""

from __future__ import annotations

from dataclasses import replace

import pytest

from broker.lifecycle import JobState
from broker.models import Job
from broker.offers import market


def _on(slot: int, state: JobState = JobState.RUNNING) -> Job:
    job = Job(id=f"j-{slot}", name="t", team="t", state=state, spec={}, budget=1_000_000, priority=0, submitted_at=0.0,
              updated_at=0.0)
    return replace(job, placement={"tier": "onprem", "location": "local"}, slots=[slot])


@pytest.mark.parametrize("slots, held, free", [
    pytest.param(3, [0, 1, 2], [], id="three slots all held: none free"),
    pytest.param(3, [1, 2], [0], id="three slots, two held: slot 0 free"),
    pytest.param(1, [1, 2], [], id="cut to one slot under two jobs on slots it no longer has: none free"),
    pytest.param(2, [2], [0], id="cut to two under a job on slot 2: one free, not two"),
    pytest.param(1, [0, 1, 2], [], id="cut to one under three jobs: none free"),
    pytest.param(3, [5], [0, 1], id="one job beyond three slots: two free"),
])
def test_jobs_on_slots_a_pool_no_longer_has_still_hold_its_capacity(make_settings, slots, held, free):
    settings = make_settings(config=f'pools:\n  - {{name: local, slots: {slots}, price_per_slot_hour: "0.20"}}\n')
    mk = market(settings, [_on(i) for i in held])
    assert mk.free_slots["local"] == free
    assert mk.free_capacity["local"] == (1 if free else 0)


def test_ended_jobs_on_such_slots_hold_nothing(make_settings):
    settings = make_settings(config='pools:\n  - {name: local, slots: 1, price_per_slot_hour: "0.20"}\n')
    assert market(settings, [_on(2, JobState.SUCCEEDED)]).free_slots["local"] == [0]
