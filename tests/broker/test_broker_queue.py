"""Queue order and start estimates (``broker/queue.py``), pure: jobs built by hand, times in seconds."""

from dataclasses import replace

import pytest

from broker.lifecycle import JobState
from broker.models import Job
from broker.queue import estimated_starts, positions

NOW = 1_000_000.0


def job(job_id, state, *, at=0.0, hours=None, since=None, where="gpus", reason="waiting: the pool is full",
        slots=(), progress=None):
    return Job(id=job_id, name=job_id, team="t", spec={}, budget=1, priority=0, state=state, submitted_at=NOW - 1000 + at,
               updated_at=NOW, expected_hours=hours, running_since=since,
               placement={"location": where} if state is not JobState.QUEUED else {},
               reason=reason if state is JobState.QUEUED else "", slots=list(slots), progress=progress or {})


def test_the_jobs_in_line_follow_the_running_job_and_each_other_when_they_say_how_long_they_run():
    jobs = [job("run", JobState.RUNNING, hours="1", since=NOW - 1800),            # ends in 30 min
            job("a", JobState.QUEUED, at=1, hours="0.5"),                          # starts then, runs 30 min
            job("b", JobState.QUEUED, at=2),                                        # no length given
            job("c", JobState.QUEUED, at=3)]
    starts = estimated_starts(jobs, NOW)
    assert positions(jobs) == {"a": 1, "b": 2, "c": 3}
    assert starts["a"] == pytest.approx(NOW + 1800)
    assert starts["b"] == pytest.approx(NOW + 3600)   # after a, which said how long it runs
    assert "c" not in starts                            # b did not say: nothing to follow


def test_a_chained_end_stays_on_the_capacity_it_was_handed_from():
    jobs = [job("gpu-run", JobState.RUNNING, hours="1", since=NOW, where="gpus"),
            job("cpu-run", JobState.RUNNING, hours="0.1", since=NOW, where="cpu"),
            job("gpu-a", JobState.QUEUED, at=1, hours="1"),
            job("gpu-b", JobState.QUEUED, at=2, hours="1"),
            job("cpu-a", JobState.QUEUED, at=3)]
    where = {"gpu-a": {"gpus": 1}, "gpu-b": {"gpus": 1}, "cpu-a": {"cpu": 1}}
    starts = estimated_starts(jobs, NOW, lambda j: where[j.id])
    assert starts["gpu-a"] == pytest.approx(NOW + 3600)
    assert starts["gpu-b"] == pytest.approx(NOW + 7200)   # gpu-a's end, not the CPU job's
    assert starts["cpu-a"] == pytest.approx(NOW + 360)


def test_jobs_waiting_for_something_else_than_capacity_get_no_estimate_and_pass_nothing_on():
    jobs = [job("run", JobState.RUNNING, hours="1", since=NOW),
            job("spot", JobState.QUEUED, at=1, hours="1", reason="the spot policy waits for spot capacity"),
            job("next", JobState.QUEUED, at=2)]
    starts = estimated_starts(jobs, NOW)
    assert "spot" not in starts and starts["next"] == pytest.approx(NOW + 3600)


def test_a_job_running_past_its_expected_length_gives_no_end_to_follow_not_now():
    overdue = job("run", JobState.RUNNING, hours="0.5", since=NOW - 7200)  # expected 30 min, running 2 h
    assert estimated_starts([overdue, job("a", JobState.QUEUED, at=1)], NOW) == {}
    # another slot of the pool comes free in an hour: the job behind follows that end, and the next one
    # (with the overdue job holding on) the end of the first
    other = job("other", JobState.RUNNING, hours="1", since=NOW)
    jobs = [overdue, other, job("a", JobState.QUEUED, at=1, hours="1"), job("b", JobState.QUEUED, at=2)]
    assert estimated_starts(jobs, NOW) == {"a": pytest.approx(NOW + 3600), "b": pytest.approx(NOW + 7200)}


def test_a_job_past_its_expected_length_that_reports_its_steps_is_followed_from_its_step_rate():
    late = job("run", JobState.RUNNING, hours="0.5", since=NOW - 7200, progress={"step": 800, "total_steps": 1000})
    assert estimated_starts([late, job("a", JobState.QUEUED, at=1)], NOW) == {"a": pytest.approx(NOW + 1800)}


def test_a_running_job_is_followed_from_its_rate_since_its_first_report_not_since_its_start():
    """A fresh run at 10 steps/s whose first report came at step 50 (reports are rate-limited), reporting step 150
    10 s later, 15 s after it started: 2,850 steps are left, 285 s. Counted from its start (100 steps in 15 s) it
    ended 428 s from now, and the jobs behind it were told they start minutes late."""
    running = job("run", JobState.RUNNING, since=NOW - 15, progress={
        "step": 150, "total_steps": 3000, "first_step": 50, "first_at": NOW - 10, "at": NOW})
    assert estimated_starts([running, job("a", JobState.QUEUED, at=1)], NOW) == {"a": pytest.approx(NOW + 285)}


def four(*hours):
    """A pool of four slots, each held by a running job that ends in ``hours[i]`` hours."""
    return [job(f"run{i}", JobState.RUNNING, hours=h, since=NOW, slots=[i]) for i, h in enumerate(hours)]


@pytest.mark.parametrize("running, queued, free, expected", [
    pytest.param(four("1", "2", "3", "4"), [("big", 2, None)], None, {"big": 2},
                 id="a job of 2 slots waits for the second slot to come free, not the first"),
    pytest.param(four("1", "2", "3", "4"), [("big", 2, "1"), ("small", 1, None)], None, {"big": 2, "small": 3},
                 id="the job behind it follows the next end, not the one the 2-slot job took"),
    pytest.param([job("wide", JobState.RUNNING, hours="1", since=NOW, slots=[0, 1, 2, 3])],
                 [("a", 1, None), ("b", 1, None), ("c", 1, None)], None, {"a": 1, "b": 1, "c": 1},
                 id="a job holding 4 slots frees 4 at its end: the next 4 jobs of one slot all start then"),
    pytest.param(four("1", "2", "3"), [("big", 2, None)], {"gpus": 1}, {"big": 1},
                 id="a slot free now and one at the first end make 2: the 2-slot job starts at the first end"),
    pytest.param(four("1"), [("huge", 4, None)], None, {},
                 id="a job of 4 slots with only 1 slot's end known gets no estimate"),
])
def test_a_job_of_several_slots_counts_them(running, queued, free, expected):
    jobs = running + [job(name, JobState.QUEUED, at=i + 1, hours=h) for i, (name, _, h) in enumerate(queued)]
    need = {name: {"gpus": n} for name, n, _ in queued}
    starts = estimated_starts(jobs, NOW, lambda j: need[j.id], free)
    assert starts == {name: pytest.approx(NOW + 3600 * h) for name, h in expected.items()}


def test_a_job_still_launching_holds_its_capacity_and_is_followed_from_its_expected_length():
    jobs = [job("starting", JobState.LAUNCHING, hours="0.25"), job("a", JobState.QUEUED, at=1)]
    assert estimated_starts(jobs, NOW) == {"a": pytest.approx(NOW + 900)}


@pytest.mark.parametrize("state", [JobState.CANCELLING, JobState.STOPPING])
def test_a_job_being_stopped_holds_its_slots_until_its_grace_period_ends(state):
    """Asked to stop 10 s ago with a 30 s grace period: its process may run 20 s more, and its slot with it."""
    stopping = replace(job("going", state, since=NOW - 600, slots=[0]), updated_at=NOW - 10)
    assert estimated_starts([stopping, job("a", JobState.QUEUED, at=1)], NOW, grace_seconds=30) \
        == {"a": pytest.approx(NOW + 20)}
    # past its grace period and still not gone (a slow kill): any moment now
    late = replace(stopping, updated_at=NOW - 60)
    assert estimated_starts([late, job("a", JobState.QUEUED, at=1)], NOW, grace_seconds=30) == {"a": pytest.approx(NOW)}


def test_a_resumed_job_is_priced_for_what_is_left_of_its_expected_length():
    """Admitted for 1 h at $1/h with $0.60 left after a preemption half-way: the half left fits."""
    from pricing.offers import Offer, Tier

    from broker.engine.schedule import Place, Wait, schedule
    from broker.offers import Market

    od = Offer(Tier.ONDEMAND, "aws", "us-east-1", "us-east-1a", "g5.xlarge", "A10G", 1, 1_000_000)
    mk = Market(offers=(od,), free_capacity={}, free_slots={})
    spec = {"run": "x", "resources": {"accelerators": "A10G:1"}, "broker": {"budget_usd": "1", "expected_hours": 1}}

    def queued(**kw):
        base = dict(id="j", name="j", team="t", spec=spec, budget=1_000_000, priority=0, state=JobState.QUEUED,
                    submitted_at=NOW - 100, updated_at=NOW, expected_hours="1", spent=400_000, attempts=1,
                    reason="waiting")
        return Job(**{**base, **kw})

    half_done = queued(progress={"step": 55, "total_steps": 100}, last_checkpoint={"step": 50})
    assert isinstance(schedule([half_done], mk, now=NOW)[0], Place)  # $0.50 for the half left, $0.60 to spend
    no_total = queued(progress={"step": 55})
    assert isinstance(schedule([no_total], mk, now=NOW)[0], Place)  # the budget stop guards it from here
    barely_begun = queued(progress={"step": 5, "total_steps": 100}, last_checkpoint={"step": 0})
    waits = schedule([barely_begun], mk, now=NOW)[0]
    assert isinstance(waits, Wait) and "does not cover" in waits.reason  # 1 h left, $0.60: the estimate still says no


def test_a_job_the_policy_holds_while_spot_is_up_only_in_zones_blocked_for_it_is_told_so():
    from pricing.deadline import Decision
    from pricing.offers import Offer, Tier
    from pricing.policy import Action

    from broker.engine.schedule import Wait, schedule
    from broker.offers import Market

    class Waits:  # a policy that decides to wait (what the spot policy does when it sees no usable spot)
        def observe(self, inp):
            self.zones = inp.spot_zones_available

        def decide(self, inp):
            return Decision(Action.WAIT, None, "no spot")

    spot = Offer(Tier.SPOT, "aws", "us-east-1", "us-east-1a", "g5.xlarge", "A10G", 1, 400_000)
    od = Offer(Tier.ONDEMAND, "aws", "us-east-1", "us-east-1a", "g5.xlarge", "A10G", 1, 1_000_000)
    mk = Market(offers=(spot, od), free_capacity={}, free_slots={}, spot_available=frozenset({"us-east-1a"}))
    spec = {"run": "x", "resources": {"accelerators": "A10G:1"}, "broker": {"budget_usd": "10", "expected_hours": 1}}
    job = Job(id="j", name="j", team="t", spec=spec, budget=10_000_000, priority=0, state=JobState.QUEUED,
              submitted_at=NOW - 100, updated_at=NOW, expected_hours="1", deadline=NOW + 3 * 3600,
              blocked_zones={"us-east-1a": NOW + 600}, reason="waiting")
    policy = Waits()
    (decision,) = schedule([job], mk, now=NOW, policies={"j": policy})
    assert policy.zones == frozenset()  # the policy is not offered the blocked zone
    assert isinstance(decision, Wait)
    # why it is blocked is not known here (no attempts given): the generic words, never "its preemptions" of one
    assert "spot is up in us-east-1a, which this job may not use until" in decision.reason
    assert decision.reason.endswith(", after recent preemptions or refused launches"), decision.reason


@pytest.mark.parametrize("zone_nodes, with_zone, expected", [
    pytest.param(1, True, "placed on ondemand 1x A10G g5.xlarge in aws/sim-od (simulated)",
                 id="a budget left short of a cluster's billing after its run takes the simulated zone"),
    pytest.param(0, True, "waiting: zone sim-od is busy right now, and it is what the budget covers: the budget left, "
                          "$0.05, cannot pay an AWS cluster's 15 minutes of billing after its run",
                 id="with the simulated zone full it waits for it, saying what rules the cloud out"),
    pytest.param(0, False, "stop: the budget left, $0.05, cannot pay for a start and a clean stop (64 s) and the "
                           "billing after its run on any offer: on the cheapest, spot 1x A10G g5.xlarge in "
                           "aws/us-east-2a, that is $0.0068 and $0.0943 for an AWS cluster's 15 minutes of billing "
                           "after its run",
                 id="with no offer but the cloud it is stopped at its budget rather than launched to end at once"),
])
def test_schedule_counts_what_a_cloud_cluster_is_billed_after_its_run(zone_nodes, with_zone, expected):
    from pricing.offers import Offer, Tier

    from broker.engine.schedule import Place, schedule
    from broker.offers import Market

    spot = Offer(Tier.SPOT, "aws", "us-east-2", "us-east-2a", "g5.xlarge", "A10G", 1, 377_000)
    zone = Offer(Tier.ONDEMAND, "aws", "us-east-1", "sim-od", "g5.xlarge", "A10G", 1, 1_006_000, simulated=True)
    mk = Market(offers=(spot, zone) if with_zone else (spot,), free_capacity={"sim-od": zone_nodes}, free_slots={})
    spec = {"run": "x", "resources": {"accelerators": "A10G:1"}, "broker": {"budget_usd": "1"}}
    job = Job(id="j", name="j", team="t", spec=spec, budget=1_000_000, spent=950_000, priority=0,
              state=JobState.QUEUED, submitted_at=NOW - 100, updated_at=NOW, reason="waiting")
    (decision,) = schedule([job], mk, now=NOW, min_run_seconds=64, after_run_seconds={spot: 900})
    said = decision.reason if isinstance(decision, Place) else ("stop: " if decision.budget_spent else "") + decision.reason
    assert said.startswith(expected), said


@pytest.mark.parametrize("max_price, spent, expected", [
    pytest.param(500_000, 950_000, "stop: the budget left, $0.05, cannot pay for a start and a clean stop (64 s) and "
                                   "the billing after its run on any offer: on the cheapest, spot 1x A10G g5.xlarge in "
                                   "aws/us-east-2a, that is $0.0068 and $0.0943 for an AWS cluster's 15 minutes of "
                                   "billing after its run (it could pay for ondemand 1x A10G g5.xlarge in "
                                   "aws/sim-od (simulated), over the job's max_price_per_hour of $0.50)",
                 id="a job whose budget pays only for an offer over its max price is stopped saying so"),
    pytest.param(2_000_000, 950_000, "placed on ondemand 1x A10G g5.xlarge in aws/sim-od (simulated)",
                 id="a job whose max price allows that offer is placed on it"),
    pytest.param(300_000, 0, "waiting: the cheapest match, spot 1x A10G g5.xlarge in aws/us-east-2a, costs $0.3770/h, "
                             "over the job's max_price_per_hour of $0.30",
                 id="a job whose max price is below every offer waits and is told why, not stopped at its budget"),
])
def test_the_budget_stop_before_a_start_weighs_only_offers_under_the_jobs_max_price(max_price, spent, expected):
    from pricing.offers import Offer, Tier

    from broker.engine.schedule import Place, schedule
    from broker.offers import Market

    spot = Offer(Tier.SPOT, "aws", "us-east-2", "us-east-2a", "g5.xlarge", "A10G", 1, 377_000)
    zone = Offer(Tier.ONDEMAND, "aws", "us-east-1", "sim-od", "g5.xlarge", "A10G", 1, 1_006_000, simulated=True)
    mk = Market(offers=(spot, zone), free_capacity={"sim-od": 1}, free_slots={})
    spec = {"run": "x", "resources": {"accelerators": "A10G:1"}, "broker": {"budget_usd": "1"}}
    job = Job(id="j", name="j", team="t", spec=spec, budget=1_000_000, spent=spent, priority=0,
              max_price_per_hour=max_price, state=JobState.QUEUED, submitted_at=NOW - 100, updated_at=NOW,
              reason="waiting")
    (decision,) = schedule([job], mk, now=NOW, min_run_seconds=64, after_run_seconds={spot: 900})
    said = decision.reason if isinstance(decision, Place) else ("stop: " if decision.budget_spent else "") + decision.reason
    assert said == expected


def gpu_pool(tmp_path, slots: int, price_per_slot_hour: int, **settings):
    """Settings whose one pool, ``gpus``, has ``slots`` A100s at ``price_per_slot_hour`` micro-dollars."""
    from broker.config import Pool, Settings

    return Settings(data_dir=tmp_path, store_url=f"sqlite://{tmp_path / 'q.db'}",
                    pools=(Pool("gpus", slots, "A100", price_per_slot_hour),), teams={}, admin_token_hashes=frozenset(),
                    default_budget=10_000_000, checkpoint_root=(tmp_path / "ckpt").as_uri(),
                    public_url="http://127.0.0.1:8000", engine=False, **settings)


@pytest.mark.parametrize("held", [
    pytest.param([0, 1], id="a pool half held by another job"),
    pytest.param([0, 1, 2], id="a pool with one slot free"),
])
def test_a_job_whose_budget_left_pays_for_a_start_on_a_pool_busy_now_waits_for_it_not_stopped(tmp_path, held):
    """A pool of 4 A100s at $0.50 a slot-hour, some slots held; a simulated zone of 4 A100s at $40/h. A job asking
    for all 4 with $0.05 left can pay for a start on the pool ($0.0356 for 64 s), not on the zone ($0.71): it waits
    for the pool's slots, which a running job gives back, rather than being stopped at its budget for good."""
    from pricing.offers import Offer, Tier

    from broker.engine.schedule import Wait, schedule
    from broker.offers import market

    settings = gpu_pool(tmp_path, 4, 500_000)
    running = replace(job("run", JobState.RUNNING, since=NOW - 600, slots=held),
                      placement={"tier": "onprem", "location": "gpus", "zone": "gpus",
                                 "instance_type": f"gpus-{len(held)}slot"})
    mk = market(settings, [running])
    zone = Offer(Tier.ONDEMAND, "aws", "us-east-1", "sim-od", "p4d.24xlarge", "A100", 4, 40_000_000, simulated=True)
    mk = replace(mk, offers=(*mk.offers, zone), free_capacity={**mk.free_capacity, "sim-od": 1})
    spec = {"run": "x", "resources": {"accelerators": "A100:4"}, "broker": {"budget_usd": "1"}}
    queued = Job(id="j", name="j", team="t", spec=spec, budget=1_000_000, spent=950_000, priority=0,
                 state=JobState.QUEUED, submitted_at=NOW - 100, updated_at=NOW, reason="waiting")
    (decision,) = schedule([queued], mk, now=NOW, min_run_seconds=64)
    assert isinstance(decision, Wait) and not decision.budget_spent, decision


def test_a_job_whose_budget_left_pays_for_a_start_on_a_pool_a_job_ahead_took_this_tick_waits_for_it(tmp_path):
    """The pool of 4 A100s is free, and the job ahead in the queue takes 2 of its slots in this tick: the job behind,
    asking for all 4 with $0.05 left (a start on the pool, not on the $40/h zone), waits for them."""
    from pricing.offers import Offer, Tier

    from broker.engine.schedule import Place, Wait, schedule
    from broker.offers import market

    settings = gpu_pool(tmp_path, 4, 500_000)
    mk = market(settings, [])
    zone = Offer(Tier.ONDEMAND, "aws", "us-east-1", "sim-od", "p4d.24xlarge", "A100", 4, 40_000_000, simulated=True)
    mk = replace(mk, offers=(*mk.offers, zone), free_capacity={**mk.free_capacity, "sim-od": 0})

    def queued(job_id, gpus, spent, at):
        spec = {"run": "x", "resources": {"accelerators": f"A100:{gpus}"}, "broker": {"budget_usd": "1"}}
        return Job(id=job_id, name=job_id, team="t", spec=spec, budget=1_000_000, spent=spent, priority=0,
                   state=JobState.QUEUED, submitted_at=NOW - 100 + at, updated_at=NOW, reason="waiting")

    ahead, behind = schedule([queued("ahead", 2, 0, 0), queued("behind", 4, 950_000, 1)], mk, now=NOW,
                             min_run_seconds=64)
    assert isinstance(ahead, Place) and ahead.slots == (0, 1), ahead
    assert isinstance(behind, Wait) and not behind.budget_spent, behind


def test_the_service_counts_a_pools_free_slots_and_the_slots_each_job_holds_and_needs(tmp_path):
    """A pool of 4 A100s: one free, one held by a job ending in 1 h, two by a job ending in 2 h. A job asking
    for all 4 starts when the 2-slot job ends (not at the first end, and not never for want of the free one)."""
    from dataclasses import replace

    from broker.service import BrokerService
    from broker.store import Change
    from broker.store.sqlite import SqliteStore

    settings = gpu_pool(tmp_path, 4, 1_000_000)
    store = SqliteStore(tmp_path / "q.db")
    onprem = {"tier": "onprem", "location": "gpus", "zone": "gpus", "instance_type": "gpus-1slot"}
    spec = {"run": "x", "resources": {"accelerators": "A100:4"}}
    jobs = [replace(job("one", JobState.RUNNING, hours="1", since=NOW, slots=[0]), placement=onprem),
            replace(job("two", JobState.RUNNING, hours="2", since=NOW, slots=[1, 2]), placement=onprem),
            replace(job("all", JobState.QUEUED, at=1), spec=spec)]
    for j in jobs:
        store.commit(Change(job=j, expected_version=None))
    try:
        positions_, starts = BrokerService(settings, store, clock=lambda: NOW).queue()
    finally:
        store.close()
    assert positions_ == {"all": 1} and starts == {"all": pytest.approx(NOW + 7200)}


ONPREM = {"tier": "onprem", "location": "gpus", "zone": "gpus", "instance_type": "gpus-1slot"}
"""A placement on one slot of :func:`gpu_pool`'s pool."""


def one_gpu_pool(tmp_path):
    """Settings with one pool of 1 A100 slot ($1/h) and a 30 s stop grace, and a SQLite store for them."""
    from broker.store.sqlite import SqliteStore

    return gpu_pool(tmp_path, 1, 1_000_000, stop_grace_seconds=30.0), SqliteStore(tmp_path / "q.db")


def test_the_service_counts_the_slots_of_a_job_being_cancelled_as_held_until_its_grace_period_ends(tmp_path):
    """A pool of 1 slot held by a job cancelled 5 s ago: the job behind it starts when the cancel's 30 s grace
    period is over, not "now" while the cancelled job's process still runs."""
    from broker.service import BrokerService
    from broker.store import Change

    settings, store = one_gpu_pool(tmp_path)
    going = replace(job("going", JobState.CANCELLING, hours="1", since=NOW - 600, slots=[0]), placement=ONPREM,
                    updated_at=NOW - 5)
    waiting = replace(job("next", JobState.QUEUED, at=1), spec={"run": "x", "resources": {"accelerators": "A100:1"}})
    for j in (going, waiting):
        store.commit(Change(job=j, expected_version=None))
    try:
        assert BrokerService(settings, store, clock=lambda: NOW).queue() == ({"next": 1}, {"next": pytest.approx(NOW + 25)})
    finally:
        store.close()


def test_a_job_waiting_for_a_spot_zone_with_no_capacity_now_gets_no_estimate_not_now(make_settings, tmp_path):
    """A simulated spot zone whose trace (or a fault) has its capacity gone: the job that waits for it is full
    for as long as the zone stays down, which nobody can tell; its free nodes are not free now."""
    from broker.auth import Principal
    from broker.engine.reconcile import Engine
    from broker.runtime import open_launcher
    from broker.service import BrokerService
    from broker.store import open_store

    settings = make_settings(config="pools: []\nzones:\n  - {name: sim-a, tier: spot, instance_type: g5.xlarge}\n")
    store = open_store(f"sqlite://{tmp_path / 'down.db'}")
    launcher = open_launcher(settings)
    service, engine = BrokerService(settings, store, launcher), Engine(settings, store, launcher)
    try:
        launcher.set_zone_available("sim-a", False)
        job = service.submit(Principal("admin", None, admin=True),
                             {"run": "true", "resources": {"accelerators": "A10G:1", "use_spot": True},
                              "broker": {"budget_usd": 5}})[0]
        engine.tick()
        assert "full" in store.get_job(job.id).reason
        assert service.queue() == ({job.id: 1}, {})
        launcher.set_zone_available("sim-a", True)  # back: its nodes are free now
        assert service.queue()[1] == {job.id: pytest.approx(service.clock(), abs=5)}
    finally:
        store.close()


def test_a_stops_grace_period_runs_from_when_the_stop_was_asked_not_from_the_jobs_last_billing_write(tmp_path):
    """Cancelled, and its attempt asked to stop 25 s ago; the engine has written the job since (each tick bills
    the attempt, and each write moves ``updated_at``): the job behind it starts when the 30 s grace period
    that began 25 s ago ends, in 5 s — not 30 s after the last billing write, tick after tick."""
    from broker.lifecycle import AttemptState
    from broker.models import Attempt
    from broker.service import BrokerService
    from broker.store import Change

    settings, store = one_gpu_pool(tmp_path)
    going = replace(job("going", JobState.CANCELLING, hours="1", since=NOW - 600, slots=[0]), placement=ONPREM,
                    updated_at=NOW - 1, attempts=1)
    attempt = Attempt(id="going-a1", job_id="going", n=1, state=AttemptState.RUNNING, launcher="local",
                      placement=ONPREM, price_per_hour=1_000_000, created_at=NOW - 700, started_at=NOW - 600,
                      slots=[0], stop_requested_at=NOW - 25, stop_reason="cancelled")
    waiting = replace(job("next", JobState.QUEUED, at=1), spec={"run": "x", "resources": {"accelerators": "A100:1"}})
    store.commit(Change(job=going, expected_version=None, attempts=(attempt,)))
    store.commit(Change(job=waiting, expected_version=None))
    try:
        assert BrokerService(settings, store, clock=lambda: NOW).queue() == ({"next": 1}, {"next": pytest.approx(NOW + 5)})
    finally:
        store.close()


def test_a_job_whose_price_cap_leaves_it_only_a_full_pool_follows_the_pool_not_a_free_zone_over_its_cap(make_settings,
                                                                                                        tmp_path):
    """A pool of 1 slot at $0.20/h held for 1 h, and a simulated zone at $0.42/h with nodes free: a job capped at
    $0.30/h waits for the pool (placement never takes the zone), and was told it starts now, tick after tick; so
    was a job for which the zone is blocked after a preemption there."""
    from broker.runtime import open_launcher
    from broker.service import BrokerService
    from broker.store import Change, open_store

    settings = make_settings(config="pools: [{name: cpu, slots: 1, price_per_slot_hour: '0.20'}]\n"
                                    "zones: [{name: sim-a, tier: spot, instance_type: g5.xlarge}]\n")
    store = open_store(f"sqlite://{tmp_path / 'cap.db'}")
    pool = {"tier": "onprem", "location": "cpu", "zone": "cpu", "instance_type": "cpu-1slot"}
    holder = replace(job("holder", JobState.RUNNING, hours="1", since=NOW, slots=[0]), placement=pool)
    spec = {"run": "x", "resources": {"cpus": "1+"}}
    capped = replace(job("capped", JobState.QUEUED, at=1), spec=spec, max_price_per_hour=300_000)
    uncapped = replace(job("uncapped", JobState.QUEUED, at=2), spec=spec)
    blocked = replace(job("blocked", JobState.QUEUED, at=3), spec=spec, blocked_zones={"sim-a": NOW + 600})
    try:
        for j in (holder, capped, uncapped, blocked):
            store.commit(Change(job=j, expected_version=None))
        _, starts = BrokerService(settings, store, open_launcher(settings), clock=lambda: NOW).queue()
    finally:
        store.close()
    # nor is a zone blocked for a job after its preemption there, before the block ends: behind `capped` (whose
    # length nobody gave) on the pool, it starts on the zone when its block ends in 10 min, rather than "now"
    assert starts == {"capped": pytest.approx(NOW + 3600), "uncapped": pytest.approx(NOW),
                      "blocked": pytest.approx(NOW + 600)}


@pytest.mark.parametrize("change, places", [
    pytest.param({}, True, id="a job the free zone suits is placed on it and told it starts now"),
    pytest.param({"max_price_per_hour": 300_000}, False, id="a job capped under the zone's price waits for the pool"),
    pytest.param({"max_price_per_hour": 420_000}, True, id="a job capped at the zone's very price is placed on it"),
    pytest.param({"max_price_per_hour": 800_000, "nodes": 2}, False,
                 id="a job of 2 nodes capped under twice the zone's price waits (the cap is for all its nodes)"),
    pytest.param({"max_price_per_hour": 840_000, "nodes": 2}, True, id="one capped at twice its price is placed"),
    pytest.param({"blocked_zones": {"sim-a": NOW + 600}}, False,
                 id="a job the zone is blocked for after a preemption there waits for the pool"),
    pytest.param({"blocked_zones": {"sim-a": NOW}}, True, id="a job whose zone's cool-down ends now is placed on it"),
    pytest.param({"force_tier": "ondemand"}, False, id="a job pinned to on-demand takes neither the spot zone nor the pool"),
])
def test_the_queue_says_a_job_starts_now_exactly_when_the_scheduler_would_place_it_now(make_settings, tmp_path,
                                                                                          change, places):
    """The start estimates (``BrokerService.queue``) and the scheduler (``schedule``) weigh the same offers, price cap
    and blocked zones (``broker.engine.schedule.placeable``): the queue said "starts now" for a job the scheduler would
    never place on the free zone, tick after tick, when its own copy of the filter differed from placement's. A pool
    of 1 slot held for an hour and a spot zone of 4 free nodes at $0.42/h; one queued job, both asked of it."""
    from broker.engine.schedule import Place, schedule
    from broker.offers import market
    from broker.runtime import open_launcher
    from broker.service import BrokerService
    from broker.store import Change, open_store

    settings = make_settings(config="pools: [{name: cpu, slots: 1, price_per_slot_hour: '0.20'}]\n"
                                    "zones: [{name: sim-a, tier: spot, instance_type: g5.xlarge, price_per_hour: '0.42'}]\n")
    launcher = open_launcher(settings)
    pool = {"tier": "onprem", "location": "cpu", "zone": "cpu", "instance_type": "cpu-1slot"}
    holder = replace(job("holder", JobState.RUNNING, hours="1", since=NOW, slots=[0]), placement=pool)
    nodes = change.pop("nodes", 1)
    queued = replace(job("queued", JobState.QUEUED, at=1), budget=10_000_000,
                     spec={"run": "x", "resources": {"cpus": "1+"}, "num_nodes": nodes}, **change)
    store = open_store(f"sqlite://{tmp_path / 'agree.db'}")
    try:
        for j in (holder, queued):
            store.commit(Change(job=j, expected_version=None))
        _, starts = BrokerService(settings, store, launcher, clock=lambda: NOW).queue()
    finally:
        store.close()
    (decision,) = schedule([queued], market(settings, [holder, queued], launcher.availability()), now=NOW)
    assert isinstance(decision, Place) is places, decision
    assert (starts.get("queued") == pytest.approx(NOW)) is places, (starts, decision)


def _budget_stopped(service, store, admin, zone: str, tier: str, price: int, spent: int, budget: int | None = None,
                    **broker):
    """A job submitted with $1 (and ``broker``'s settings), then stopped at its budget (``budget``, else the $1) after
    one attempt on ``zone`` that cost ``spent``."""
    from broker.lifecycle import AttemptState
    from broker.models import Attempt
    from broker.store import Change

    job = service.submit(admin, {"run": "x", "resources": {"cpus": "1+"}, "broker": {"budget_usd": "1", **broker}})[0]
    placement = {"tier": tier, "location": zone, "zone": zone, "instance_type": "g5.xlarge"}
    attempt = Attempt(id=f"{job.id}-a1", job_id=job.id, n=1, state=AttemptState.STOPPED, launcher="local",
                      placement=placement, price_per_hour=price, created_at=NOW - 100, started_at=NOW - 100,
                      ended_at=NOW - 1, cost=spent, stop_reason="budget")
    stopped = replace(job, state=JobState.STOPPED_BUDGET, spent=spent, budget=budget or job.budget, attempts=1,
                      updated_at=NOW - 1)
    store.commit(Change(job=stopped, expected_version=job.version, attempts=(attempt,)))
    return stopped


@pytest.mark.parametrize("spent, says", [
    pytest.param(700_000, None, id="$0.30 left, its last attempt on a $36/h zone: resumed, the $0.20/h pool runs it for hours"),
    pytest.param(996_000, "only $0.0040 of the $1.00 budget is left, not enough to run a minute and stop cleanly "
                          "($0.0050 at $0.20/h): raise the budget to at least $1.01 first",
                 id="$0.004 left: refused, the figure at the cheapest price it may run at, the pool's"),
    pytest.param(999_950, "under $0.0001 of the $1.00 budget is left",
                 id="what is left is rounded down, never up to more than is left ($0.0001), nor down to $0.00"),
])
def test_a_budget_stopped_job_resumes_when_the_budget_left_pays_a_minute_on_the_cheapest_offer_it_may_take(
        make_settings, tmp_path, spent, says):
    """A pool of 1 slot at $0.20/h and a simulated on-demand zone at $36/h; a job that ran on the zone (the pool was
    full then) and was stopped at its $1 budget. A resume was priced at its last attempt's $36/h: with $0.30 left it
    was refused ("raise the budget to at least $1.60"), though the pool, which placement would take, runs it 90 min."""
    from broker.auth import Principal
    from broker.service import BrokerService, Conflict
    from broker.store import open_store

    settings = make_settings(config="pools: [{name: cpu, slots: 1, price_per_slot_hour: '0.20'}]\n"
                                    "zones: [{name: sim-od, tier: ondemand, instance_type: g5.xlarge, "
                                    "price_per_hour: '36'}]\n")
    store = open_store(f"sqlite://{tmp_path / 'resume.db'}")
    service = BrokerService(settings, store, clock=lambda: NOW)
    admin = Principal("admin", None, admin=True)
    try:
        job = _budget_stopped(service, store, admin, "sim-od", "ondemand", 36_000_000, spent)
        if says is None:
            assert service.resume(admin, job.id).state is JobState.QUEUED
        else:
            with pytest.raises(Conflict) as refused:
                service.resume(admin, job.id)
            assert str(refused.value).startswith(says), refused.value
    finally:
        store.close()


def test_moving_a_budget_stopped_job_to_on_demand_names_the_budget_that_the_move_then_takes(make_settings, tmp_path):
    """`broker ondemand` on a budget-stopped job was refused for a start alone ("… which costs $0.0042"); the user
    raised the budget past that, and the resume inside the move refused again, wanting a minute and a clean stop.
    The first refusal now names the figure the move takes, and the budget raised to it moves the job."""
    import re

    from broker.auth import Principal
    from broker.service import BrokerService, Conflict
    from broker.store import open_store

    settings = make_settings(config="zones: [{name: sim-od, tier: ondemand, instance_type: g5.xlarge, "
                                    "price_per_hour: '1.01'}, {name: sim-spot, tier: spot, instance_type: g5.xlarge, "
                                    "price_per_hour: '0.30'}]\n")
    store = open_store(f"sqlite://{tmp_path / 'ondemand.db'}")
    service = BrokerService(settings, store, clock=lambda: NOW)
    admin = Principal("admin", None, admin=True)
    try:
        job = _budget_stopped(service, store, admin, "sim-spot", "spot", 300_000, 1_300, budget=3_000)
        with pytest.raises(Conflict) as refused:
            service.switch_to_ondemand(admin, job.id)
        figure = re.search(r"raise the budget to at least \$([0-9.]+) first", str(refused.value))
        assert figure, refused.value
        service.raise_budget(admin, job.id, int(float(figure.group(1)) * 1_000_000))
        moved = service.switch_to_ondemand(admin, job.id)
        assert moved.state is JobState.QUEUED and moved.force_tier == "ondemand"
    finally:
        store.close()


def test_the_same_move_to_on_demand_on_two_brokers_at_once_answers_both_with_the_job_moved(make_settings, tmp_path):
    """`broker ondemand` on a budget-stopped job sent to two brokers at once: the one whose resume lost the race was
    answered 409 "… is queued, not ended: only a failed or budget-stopped job resumes", to a user who asked for
    on-demand and got it. The twin's resume is made to land between this one's read and its resume."""
    from broker.auth import Principal
    from broker.service import BrokerService
    from broker.store import open_store

    settings = make_settings(config="zones: [{name: sim-od, tier: ondemand, instance_type: g5.xlarge, "
                                    "price_per_hour: '1.01'}, {name: sim-spot, tier: spot, instance_type: g5.xlarge, "
                                    "price_per_hour: '0.30'}]\n")
    store = open_store(f"sqlite://{tmp_path / 'twins.db'}")
    admin = Principal("admin", None, admin=True)

    class Late(BrokerService):
        def resume(self, *args, **kwargs):
            twin.switch_to_ondemand(admin, job.id)  # the other broker's click lands first
            return super().resume(*args, **kwargs)

    service, twin = Late(settings, store, clock=lambda: NOW), BrokerService(settings, store, clock=lambda: NOW)
    try:
        job = _budget_stopped(service, store, admin, "sim-spot", "spot", 300_000, 1_300, budget=5_000_000)
        moved = service.switch_to_ondemand(admin, job.id)
        assert moved.state is JobState.QUEUED and moved.force_tier == "ondemand"
        assert [e.event for e in store.events(job.id)].count("resume") == 1  # resumed once, by the twin
    finally:
        store.close()


def test_a_move_to_on_demand_that_a_plain_resume_beats_pins_the_job_it_resumed(make_settings, tmp_path):
    """`broker resume` and `broker ondemand` on a budget-stopped job at once: where the plain resume landed between the
    switch's read and its own resume, the switch was refused 409 "… is queued, not ended: only a failed or
    budget-stopped job resumes", and the job went on unpinned, though its user had asked for on-demand."""
    from broker.auth import Principal
    from broker.service import BrokerService
    from broker.store import open_store

    settings = make_settings(config="zones: [{name: sim-od, tier: ondemand, instance_type: g5.xlarge, "
                                    "price_per_hour: '1.01'}, {name: sim-spot, tier: spot, instance_type: g5.xlarge, "
                                    "price_per_hour: '0.30'}]\n")
    store = open_store(f"sqlite://{tmp_path / 'race.db'}")
    admin = Principal("admin", None, admin=True)

    class Late(BrokerService):
        def resume(self, *args, **kwargs):
            if kwargs.get("switching"):
                other.resume(admin, job.id)  # the other request's plain resume lands first
            return super().resume(*args, **kwargs)

    service, other = Late(settings, store, clock=lambda: NOW), BrokerService(settings, store, clock=lambda: NOW)
    try:
        job = _budget_stopped(service, store, admin, "sim-spot", "spot", 300_000, 1_300, budget=5_000_000)
        moved = service.switch_to_ondemand(admin, job.id)
        assert moved.state is JobState.QUEUED and moved.force_tier == "ondemand", (moved.state, moved.force_tier)
        assert store.get_job(job.id).force_tier == "ondemand"
        assert [e.event for e in store.events(job.id)].count("resume") == 1  # resumed once, by the other request
    finally:
        store.close()


def test_a_job_whose_every_zone_is_blocked_says_until_when_each_is():
    """"every matching zone is blocked for this job after recent preemptions" named neither the zones nor when the
    job may go back, while `broker queue` showed it first and it started last."""
    import time

    from pricing.offers import Offer, Tier

    from broker.engine.schedule import Wait, schedule
    from broker.offers import Market

    z1 = Offer(Tier.SPOT, "aws", "us-east-1", "sim-1a", "g5.xlarge", "A10G", 1, 425_000, simulated=True)
    z2 = Offer(Tier.SPOT, "aws", "us-east-1", "sim-1f", "g5.xlarge", "A10G", 1, 426_000, simulated=True)
    mk = Market(offers=(z1, z2), free_capacity={"sim-1a": 1, "sim-1f": 1}, free_slots={})
    spec = {"run": "x", "resources": {"accelerators": "A10G:1", "use_spot": True}, "broker": {"budget_usd": "1"}}
    job = Job(id="j", name="j", team="t", spec=spec, budget=1_000_000, priority=0, state=JobState.QUEUED,
              submitted_at=NOW - 100, updated_at=NOW, reason="waiting",
              blocked_zones={"sim-1a": NOW + 600, "sim-1f": NOW + 608})
    (decision,) = schedule([job], mk, now=NOW)
    at = [time.strftime('%H:%M:%SZ', time.gmtime(NOW + s)) for s in (600, 608)]
    assert isinstance(decision, Wait)
    assert decision.reason == ("waiting: every matching zone is blocked for this job after recent preemptions or refused launches; "
                               f"sim-1a until {at[0]}, sim-1f until {at[1]}"), decision.reason


def test_a_job_of_another_team_holding_what_a_queued_job_needs_is_counted_not_named_to_that_team(make_settings,
                                                                                                   tmp_path):
    """`broker queue` for team nlp said "what it needs is held by j-7aaf… (with no expected length)", a vision job
    that nlp's `broker status j-7aaf…` then answered 404 for: a team sees only its own jobs. It is "a job of another
    team" to nlp now; the admin, and vision itself, still see it named."""
    from broker.auth import Principal
    from broker.service import BrokerService
    from broker.store import Change, open_store

    settings = make_settings(config="pools: [{name: cpu, slots: 1, price_per_slot_hour: '0.20'}]\n")
    pool = {"tier": "onprem", "location": "cpu", "zone": "cpu", "instance_type": "cpu-1slot"}
    holder = replace(job("j-vision", JobState.RUNNING, since=NOW - 60, slots=[0]), placement=pool, team="vision")
    queued = replace(job("j-nlp", JobState.QUEUED, at=1, reason="waiting: the pool cpu is full"), team="nlp",
                     budget=10_000_000, spec={"run": "x", "resources": {"cpus": "1+"}})
    mine = replace(queued, id="j-vision-2", team="vision", submitted_at=queued.submitted_at + 1)
    store = open_store(f"sqlite://{tmp_path / 'teams.db'}")
    try:
        for j in (holder, queued, mine):
            store.commit(Change(job=j, expected_version=None))
        service = BrokerService(settings, store, clock=lambda: NOW)
        nlp = service.queue_waits(Principal("nlp", "nlp")).waiting
        assert "j-vision" not in nlp["j-nlp"] and "held by a job of another team" in nlp["j-nlp"], nlp
        vision = service.queue_waits(Principal("vision", "vision")).waiting
        assert "held by j-vision (with no expected length)" in vision["j-vision-2"], vision
        admin = service.queue_waits(Principal("admin", None, admin=True)).waiting
        assert "held by j-vision" in admin["j-nlp"], admin
    finally:
        store.close()
    # several of other teams are counted; one ahead in the queue too
    from broker.queue import Holder
    from broker.views import holders_words

    held = [Holder("j-a", "cpu", team="vision"), Holder("j-b", "cpu", team="vision"), Holder("j-c", "cpu", team="nlp"),
            Holder("j-d", "cpu", ahead=True, team="vision")]
    assert holders_words(held, "nlp") == (
        "no start estimate: what it needs is held by j-c (with no expected length) and 2 jobs of another team, and it "
        "waits behind a job of another team, ahead of it in the queue with no expected length; when those end cannot "
        "be told")
    # two jobs of one other team are not "of other teams"; of two teams they are
    assert "held by 2 jobs of another team;" in holders_words(held[:2], "nlp")
    assert "held by 2 jobs of other teams;" in holders_words([held[0], replace(held[1], team="audio")], "nlp")


def test_a_queued_jobs_budget_lowered_below_a_start_is_refused_and_a_raised_stopped_jobs_reason_says_so(make_settings,
                                                                                                          tmp_path):
    """`broker budget j-x 0.0001` on a queued job was accepted without a word and the scheduler stopped the job at
    once (a submit with that budget is refused). And once the budget of a budget-stopped job was raised, its reason
    still said "$0.0001 left … raise the budget to resume" under a $2.00 budget."""
    from broker.auth import Principal
    from broker.service import BrokerService, Invalid
    from broker.store import Change, open_store

    settings = make_settings(config="pools: [{name: cpu, slots: 1, price_per_slot_hour: '0.20'}]\n")
    store = open_store(f"sqlite://{tmp_path / 'lower.db'}")
    service = BrokerService(settings, store, clock=lambda: NOW)
    admin = Principal("admin", None, admin=True)
    try:
        job = service.submit(admin, {"run": "x", "resources": {"cpus": "1+"}, "broker": {"budget_usd": "1"}})[0]
        with pytest.raises(Invalid) as refused:
            service.raise_budget(admin, job.id, 100)
        assert refused.value.field == "budget_usd"
        assert str(refused.value.reason).startswith("$0.0001 is too small for the job to start: the budget left"), \
            refused.value.reason
        kept = store.get_job(job.id)
        assert (kept.state, kept.budget) == (JobState.QUEUED, 1_000_000)
        assert service.raise_budget(admin, job.id, 500_000).budget == 500_000  # lowered within reason: taken

        stopped = store.get_job(job.id)
        store.commit(Change(job=replace(stopped, state=JobState.STOPPED_BUDGET, spent=499_990, budget=500_000,
                                        reason="stopped: the budget left, $0.0000, cannot pay for a start; raise the "
                                               "budget to resume", last_checkpoint={"step": 40}),
                            expected_version=stopped.version))
        short = service.raise_budget(admin, job.id, 500_100)
        assert short.reason.startswith("stopped at its budget, since raised to $0.5001 by admin, still not enough "
                                       "to resume: "), short.reason
        raised = service.raise_budget(admin, job.id, 2_000_000)
        assert raised.reason == ("stopped at its budget, since raised to $2.00 by admin: resume it to continue from "
                                 "its last checkpoint (step 40)"), raised.reason
        # lowered again: "since raised to $2.00: resume it to continue" stayed under a budget a resume refused
        lowered = service.raise_budget(admin, job.id, 500_100)
        assert lowered.reason.startswith("stopped at its budget, since lowered to $0.5001 by admin, not enough to "
                                         "resume: "), lowered.reason
        assert service.raise_budget(admin, job.id, 2_000_000).reason == raised.reason
        assert service.resume(admin, job.id).state is JobState.QUEUED
    finally:
        store.close()


def test_a_job_whose_max_price_rules_out_on_demand_is_refused_a_move_there_not_left_queued_for_ever(make_settings,
                                                                                                       tmp_path):
    """`broker ondemand` (and Slack's button) on a budget-stopped job whose max_price_per_hour is under every
    on-demand offer was accepted: with no offer it may take, the budget's test priced none and passed, and the job
    sat queued, pinned over its own cap."""
    from broker.auth import Principal
    from broker.service import BrokerService, Conflict
    from broker.store import open_store

    settings = make_settings(config="zones: [{name: sim-od, tier: ondemand, instance_type: g5.xlarge, "
                                    "price_per_hour: '1.01'}, {name: sim-spot, tier: spot, instance_type: g5.xlarge, "
                                    "price_per_hour: '0.20'}]\n")
    store = open_store(f"sqlite://{tmp_path / 'cap.db'}")
    service = BrokerService(settings, store, clock=lambda: NOW)
    admin = Principal("admin", None, admin=True)
    try:
        job = service.submit(admin, {"run": "x", "resources": {"cpus": "1+"},
                                     "broker": {"budget_usd": "1", "max_price_per_hour": "0.30"}})[0]
        for state in ("queued", "stopped"):
            if state == "stopped":
                stopped = _budget_stopped(service, store, admin, "sim-spot", "spot", 200_000, 900, budget=1_200,
                                          max_price_per_hour="0.30")
                job = replace(job, id=stopped.id)
            with pytest.raises(Conflict) as refused:
                service.switch_to_ondemand(admin, job.id)
            assert str(refused.value).startswith("not moved to on-demand: its cheapest on-demand offer costs $1.01/h, "
                                                 "over the job's max_price_per_hour of $0.30"), refused.value
            assert store.get_job(job.id).force_tier is None
    finally:
        store.close()


def test_a_job_a_little_past_its_expected_length_is_read_as_ending_now_not_dropped():
    """Every run ends a moment past its ``expected_hours`` (its process's start and exit, the tick that sees it):
    dropping its end at once took every estimate behind it away, or pushed it back by hours, at nearly every end.
    Within a twentieth of its length (at least 15 s, at most 30 min) it is read as ending now; past that, unknown."""
    from broker.queue import expected_end, overdue_grace

    hour = job("run", JobState.RUNNING, hours="1", since=NOW - 3600 - 60)  # a minute over an hour
    assert expected_end(hour, NOW) == NOW
    assert estimated_starts([hour, job("a", JobState.QUEUED, at=1)], NOW) == {"a": NOW}
    late = job("run", JobState.RUNNING, hours="1", since=NOW - 3600 - overdue_grace(3600) - 1)
    assert overdue_grace(3600) == 180 and expected_end(late, NOW) is None
    short = job("run", JobState.RUNNING, hours="0.01", since=NOW - 36 - 10)  # 10 s over 36 s
    assert expected_end(short, NOW) == NOW and expected_end(short, NOW + 6) is None
    assert overdue_grace(10 * 24 * 3600) == 1800


def test_a_running_job_is_read_as_ending_at_its_budget_stop_when_that_comes_before_its_step_rate_says():
    """QA: a 2-node spot job with $0.02 at $0.8492/h (stopped at its budget within two minutes) reporting 100,000 steps
    at 5 a second was read as ending in 5.6 h; the 4-node job waiting for its zone was told it would start after its
    deadline, "it cannot meet its deadline", and started a minute later."""
    from broker.queue import expected_end

    progress = {"step": 500, "total_steps": 100_000, "first_step": 0, "first_at": NOW - 100, "at": NOW}
    two_nodes = replace(job("run", JobState.RUNNING, since=NOW - 100, where="sim-a", progress=progress),
                        budget=20_000, spent=4_000, placement={"location": "sim-a", "zone": "sim-a",
                                                               "num_nodes": 2, "price_per_hour": 849_200})
    # $0.016 left at $0.8492/h: about 68 s, not the 19,900 s its 99,500 steps left take at 5 a second
    waiting = job("four", JobState.QUEUED, at=1, hours="0.02", where="sim-a", reason="waiting: zone sim-a is full")
    assert estimated_starts([two_nodes, waiting], NOW)["four"] == pytest.approx(NOW + 67.83, abs=0.01)
    assert expected_end(two_nodes, NOW) == pytest.approx(NOW + 67.83, abs=0.01)
    from broker.queue import budget_end

    assert budget_end(two_nodes, NOW) == pytest.approx(NOW + 16_000 * 3600 / 849_200)
    # a budget that lasts longer than the run leaves the step rate's end; a placement that costs nothing is never
    # stopped at its budget; nor is a job with no end to follow given one by its budget
    rich = replace(two_nodes, budget=100_000_000)
    assert expected_end(rich, NOW) == pytest.approx(NOW + 99_500 / 5)
    free = replace(two_nodes, placement={**two_nodes.placement, "price_per_hour": 0})
    assert budget_end(free, NOW) is None and expected_end(free, NOW) == pytest.approx(NOW + 99_500 / 5)
    assert expected_end(replace(two_nodes, progress={}), NOW) is None
    # placed or launching: its expected length from now, or its budget's end if sooner
    placed = replace(two_nodes, state=JobState.LAUNCHING, expected_hours="1", progress={}, running_since=None)
    assert expected_end(placed, NOW) == pytest.approx(NOW + 67.83, abs=0.01)


def test_a_move_to_on_demand_over_the_cap_of_a_job_of_two_nodes_says_the_price_and_the_cap_are_for_both(make_settings,
                                                                                                        tmp_path):
    from broker.auth import Principal
    from broker.service import BrokerService, Conflict
    from broker.store import open_store

    settings = make_settings(config="zones: [{name: sim-od, tier: ondemand, instance_type: g5.xlarge, "
                                    "price_per_hour: '1.01'}, {name: sim-spot, tier: spot, instance_type: g5.xlarge, "
                                    "price_per_hour: '0.20'}]\n")
    store = open_store(f"sqlite://{tmp_path / 'cap2.db'}")
    service = BrokerService(settings, store, clock=lambda: NOW)
    admin = Principal("admin", None, admin=True)
    try:
        job = service.submit(admin, {"run": "x", "num_nodes": 2, "resources": {"cpus": "1+"},
                                     "broker": {"budget_usd": "1", "max_price_per_hour": "0.50"}})[0]
        with pytest.raises(Conflict) as refused:
            service.switch_to_ondemand(admin, job.id)
        assert str(refused.value).startswith(
            "not moved to on-demand: its cheapest on-demand offer costs $2.02/h for its 2 nodes, over the job's "
            "max_price_per_hour of $0.50, a cap on both nodes together, so pinned there"), refused.value
    finally:
        store.close()
