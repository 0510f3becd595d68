"""``broker/engine/schedule.py::placeable`` (what the queue's start estimates count on) leaves out a zone too small
for the job, as placement does (``pricing.placement.holds``): a job of 8 nodes counted on a zone of 4 nodes, and,
waiting with no start estimate, was told it waited for the jobs on that zone, which can never hold it."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from broker.auth import Principal
from broker.engine.schedule import placeable, request_of
from broker.lifecycle import JobState
from broker.offers import all_offers
from broker.service import BrokerService
from broker.store import Change, open_store

ZONES = """\
pools: []
zones:
  - {name: sim-small, tier: spot, instance_type: g5.xlarge, nodes: 4}
  - {name: sim-big, tier: spot, instance_type: g5.xlarge, nodes: 8}
"""
VISION = Principal("vision", "vision")
H = 3600


def _set(store, job, **kw):
    now = store.get_job(job.id)
    store.commit(Change(job=replace(now, **kw), expected_version=now.version))
    return store.get_job(job.id)


def _on(zone: str, nodes: int) -> dict:
    return {"tier": "spot", "cloud": "sim", "region": "sim", "zone": zone, "location": zone,
            "instance_type": "g5.xlarge", "num_nodes": nodes, "price_per_hour": 1_000_000}


@pytest.fixture
def broker(make_settings, tmp_path):
    settings = make_settings(config=ZONES)
    store = open_store(f"sqlite://{tmp_path / 'nodes.db'}")
    service = BrokerService(settings, store)

    def submit(nodes: int, **broker):
        return service.submit(VISION, {"run": "sleep 60", "num_nodes": nodes,
                                       "resources": {"accelerators": "A10G:1", "use_spot": True},
                                       "broker": {"budget_usd": "500", **broker}})[0]

    try:
        yield settings, store, service, submit
    finally:
        store.close()


def test_placeable_leaves_out_a_zone_that_never_holds_the_jobs_nodes(broker):
    settings, _, _, submit = broker
    offers = all_offers(settings)
    eight, four = submit(8), submit(4)
    assert [o.location for o in placeable(eight, request_of(eight), offers, now=time.time())] == ["sim-big"]
    assert sorted(o.location for o in placeable(four, request_of(four), offers, now=time.time())) == \
        ["sim-big", "sim-small"]


def test_a_job_of_8_nodes_behind_others_gets_no_estimate_from_a_4_node_zone_nor_is_told_of_its_jobs(broker):
    """``sim-big`` (8 nodes) is held by a job 1.5 h past its expected 30 min; ``sim-small`` (4 nodes) by one that
    gave no length. A job of 4 nodes queued first may use either: no estimate, and it is told of both. Behind it, a
    job of 8 nodes may use only ``sim-big``: no estimate, and told only of the job there."""
    _, store, service, submit = broker
    now = time.time()
    big = _set(store, submit(8, expected_hours="0.5"), state=JobState.RUNNING, placement=_on("sim-big", 8),
               running_since=now - 2 * H, attempts=1, reason="running attempt 1")
    small = _set(store, submit(4), state=JobState.RUNNING, placement=_on("sim-small", 4), running_since=now - 600,
                 attempts=1, reason="running attempt 1")
    four = _set(store, submit(4, expected_hours=1), reason="waiting: sim-big and sim-small full right now")
    eight = _set(store, submit(8, expected_hours=1), reason="waiting: sim-big full right now")
    q = service.queue_waits()
    assert q.positions == {four.id: 1, eight.id: 2} and q.starts == {}
    held = (f"{big.id} (running 1.5 h past its expected 30 min)", f"{small.id} (with no expected length)")
    assert q.waiting[four.id] in [f"no start estimate: what it needs is held by {a} and {b}; when those end cannot "
                                  "be told" for a, b in (held, held[::-1])], q.waiting[four.id]
    assert q.waiting[eight.id] == (
        f"no start estimate: what it needs is held by {big.id} (running 1.5 h past its expected 30 min); "
        "when that ends cannot be told")


def test_the_8_node_job_starts_when_the_big_zone_frees_and_the_small_zones_ends_do_not_count(broker):
    """``sim-small``'s job ends in 10 min, ``sim-big``'s in 50: the job of 8 nodes (behind one of 4 that takes
    ``sim-small`` at its end) starts when ``sim-big`` is free, never on ``sim-small``."""
    _, store, service, submit = broker
    now = time.time()
    big = _set(store, submit(8, expected_hours=1), state=JobState.RUNNING, placement=_on("sim-big", 8),
               running_since=now - 600, attempts=1, reason="running attempt 1")
    small = _set(store, submit(4, expected_hours="0.5"), state=JobState.RUNNING, placement=_on("sim-small", 4),
                 running_since=now - 20 * 60, attempts=1, reason="running attempt 1")
    four = _set(store, submit(4, expected_hours=1), reason="waiting: sim-big and sim-small full right now")
    eight = _set(store, submit(8, expected_hours=1), reason="waiting: sim-big full right now")
    q = service.queue_waits()
    assert q.starts == {four.id: pytest.approx(small.running_since + 1800, abs=1),
                        eight.id: pytest.approx(big.running_since + H, abs=1)}
    assert q.waiting == {}


def test_a_placement_of_several_nodes_says_so_and_that_its_price_is_for_all_of_them(broker):
    """ "placed on spot 1x A10G g5.xlarge …" beside a price twice the instance's read as one node's, doubled; `broker
    status` read "spot g5.xlarge …, $0.8492/h" the same way."""
    from broker.cli import _where
    from broker.engine.schedule import Place

    settings, store, service, submit = broker
    job = submit(2)
    decision = service._decision_now(job, time.time())  # what the engine's next tick decides for it
    assert isinstance(decision, Place), decision
    each = decision.placement["price_per_hour"] // 2
    assert ", 2 nodes, $" in decision.reason and "/h for both" in decision.reason, decision.reason
    assert decision.placement["num_nodes"] == 2 and each > 0
    assert _where(decision.placement).startswith("spot 2 nodes of g5.xlarge in "), _where(decision.placement)
    assert _where({**decision.placement, "num_nodes": 1}).startswith("spot g5.xlarge in ")
