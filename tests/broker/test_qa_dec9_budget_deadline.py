"""A short job's budget and deadline, weighed together (QA walkthrough, Dec 9).

On a broker with a simulated spot zone at $18/h and an on-demand zone at $54/h, a 30 s job (``expected_hours:
0.00833333``, a 30-step loop):

- with ``--budget 0.52 --deadline 10min`` its dry run said spot, and the submit a second later was placed on on-demand,
  "too close to risk losing spot": there, with an 8 s clean stop ($0.12) kept of the budget, $0.52 could not pay for
  the $0.45 run, and it was stopped at its budget after step 28 of 30, every step lost; spot would have cost $0.15;
- placed on spot because its budget paid for nothing else, it said "too close to risk losing spot";
- preempted 5 s into a $0.30 budget, it was stopped, "cannot pay for a minute's run and a clean stop (63 s…)", with
  $0.2750 left, where the 25 s more it needed and a clean stop cost $0.19;
- priced per hour, ``--budget 0.01`` was refused "give at least $0.04", and $0.04, the clean stop alone, was taken and
  stopped at once.
"""

from __future__ import annotations

import json
from dataclasses import replace
from decimal import Decimal

import pytest

from broker.admission import Refused, admit
from broker.engine import budget as budget_rules
from broker.engine.schedule import Place, Wait, schedule
from broker.engine.spot import decide, policy_input
from broker.lifecycle import JobState
from broker.models import Job
from broker.spec import parse
from broker_testing import cli_runner, start_broker, stop_broker, wait_for
from pricing.money import cost_for_seconds, fmt
from pricing.offers import Offer, Tier
from pricing.policy import Action, make_policy

NOW = 10_000.0
SPOT = Offer(Tier.SPOT, "aws", "r", "sim-spot", "g5.xlarge", "A10G", 1, 18_000_000)
ONDEMAND = Offer(Tier.ONDEMAND, "aws", "r", "sim-od", "g5.xlarge", "A10G", 1, 54_000_000)
CAPACITY = {"sim-spot": 1, "sim-od": 1}


def short_job(budget: int, deadline_in: float) -> Job:
    return Job(id="j", name="t", team="a", state=JobState.QUEUED, spec={}, budget=budget, priority=0,
               submitted_at=NOW, updated_at=NOW, deadline=NOW + deadline_in, expected_hours="0.00833333",
               quote={"stop_seconds": 8})


def decided(job: Job, changeover: float):
    inp = policy_input(job, [], [SPOT, ONDEMAND], CAPACITY, frozenset({"sim-spot"}), now=NOW, changeover=changeover)
    return decide(make_policy("broker"), inp)


def test_a_budget_that_cannot_finish_on_on_demand_with_its_clean_stop_goes_to_spot_that_it_can_finish_on():
    # 45 s to the deadline: too close to risk spot, says the policy; but on on-demand 30 s and an 8 s clean stop cost
    # $0.57, more than $0.52, where on spot they cost $0.19
    d = decided(short_job(520_000, 45), changeover=2)
    assert d.action is Action.SPOT and d.zone == "sim-spot", d
    assert d.reason.startswith("the budget left pays for the rest of the expected run and a clean stop on spot only: "
                               "on on-demand, which its policy chose ("), d.reason
    assert "too close to risk losing spot" in d.reason, d.reason  # said as the policy's choice, not why it runs on spot
    # a budget that pays for on-demand and its clean stop keeps the policy's choice
    assert decided(short_job(600_000, 45), changeover=2).action is Action.ONDEMAND


def test_a_job_sent_to_spot_because_its_budget_pays_for_nothing_else_says_so():
    # 2 min to a deadline that a 120 s changeover and 30 s of work cannot meet even on on-demand: the safety net chose
    # on-demand, where $0.30 cannot pay for the run; the job was placed on spot saying only the safety net's words
    d = decided(short_job(300_000, 120), changeover=120)
    assert d.action is Action.SPOT, d
    assert d.reason.startswith("the budget left pays for the rest of the expected run and a clean stop on spot only"), \
        d.reason


def test_the_minute_a_job_placed_again_must_pay_for_is_its_expected_run_left_where_that_is_shorter():
    # a grace of 2 s: a minute's run and a clean stop are 62 s, a first start's clean stop 6 s
    assert budget_rules.rerun_for(62, 6, None) == 62
    assert budget_rules.rerun_for(62, 6, Decimal("0.0084")) == 2 + 31  # 30.24 s left
    assert budget_rules.rerun_for(62, 6, Decimal("0.0005")) == 6  # never under what a first start pays for
    assert budget_rules.rerun_for(62, 6, Decimal("1")) == 62


PREEMPTED_CONFIG = """
pools: []
zones:
  - {name: sim-spot, tier: spot, instance_type: g5.xlarge, grace_seconds: 1, price_per_hour: "18"}
  - {name: sim-od, tier: ondemand, instance_type: g5.xlarge, price_per_hour: "54"}
tick_seconds: 0.05
stop_grace_seconds: 1
"""


def test_a_preempted_short_job_with_its_run_paid_is_placed_again_not_stopped(make_settings):
    from broker.offers import market

    mk = market(make_settings(config=PREEMPTED_CONFIG), [])
    task = {"name": "t", "resources": {"accelerators": "A10G:1"}, "run": "sleep 30",
            "broker": {"budget_usd": "0.30", "expected_hours": "0.00833333"}}
    # preempted 5 s in, $0.025 spent, no checkpoint: 30 s of its 30 steps left, $0.15 on spot and a 5 s clean stop
    job = Job(id="j", name="t", team="t", spec=task, budget=300_000, priority=0, state=JobState.QUEUED,
              submitted_at=0.0, updated_at=0.0, expected_hours="0.00833333", attempts=1, spent=25_000,
              progress={"step": 1, "total_steps": 30})
    kwargs = dict(now=1.0, min_run_seconds=budget_rules.reserve_seconds(1, 0.05),
                  rerun_seconds=budget_rules.rerun_seconds(1, 0.05))
    (again,) = schedule([job], mk, **kwargs)
    assert isinstance(again, Place) and again.placement["zone"] == "sim-spot", again
    # a job that gives no expected run left (no step total) is still held to the minute
    (held,) = schedule([replace(job, progress={})], mk, **kwargs)
    assert isinstance(held, Wait) and held.budget_spent and "a minute's run" in held.reason, held


PER_HOUR = {"name": "t", "resources": {"accelerators": "A10G:1"}, "run": "sleep 600"}


def submit(budget: int, task: dict = PER_HOUR):
    return admit(parse(task, now=NOW), job_id="j-1", team="a", budget=budget, offers=[SPOT, ONDEMAND], now=NOW,
                 actor="t", checkpoint_uri="file:///tmp/fd_x", idempotency_key=None, min_run_seconds=8)


def test_a_refused_budget_is_told_what_runs_the_job_and_the_clean_stop_alone_is_refused():
    stop = cost_for_seconds(SPOT.price_per_hour, 8)  # $0.04
    minute = cost_for_seconds(SPOT.price_per_hour, 68)  # $0.34
    with pytest.raises(Refused) as refused:
        submit(10_000)
    assert f"give at least {fmt(minute)} (a minute and a clean stop)" in str(refused.value), refused.value
    with pytest.raises(Refused) as refused:  # it runs 0 s: the engine stops a job once what is left pays only that
        submit(stop)
    assert "pays for a clean stop (8 s) and no run" in str(refused.value), refused.value
    assert submit(stop + cost_for_seconds(SPOT.price_per_hour, 2)).job.budget > stop
    assert submit(minute).job.budget == minute


CONFIG = """
pools: []
zones:
  - {name: sim-spot, tier: spot, instance_type: g5.xlarge, price_per_hour: "18"}
  - {name: sim-od, tier: ondemand, instance_type: g5.xlarge, price_per_hour: "54"}
tick_seconds: 0.2
stop_grace_seconds: 2
"""


def test_a_short_job_ten_minutes_before_its_deadline_runs_on_spot_as_its_dry_run_said(tmp_path):
    """The dry run, at exactly one 10 min planning step before the deadline, planned spot; the engine, under a second
    later, had no planning step left and chose on-demand, "too close to risk losing spot"."""
    proc, url = start_broker(tmp_path, f"sqlite://{tmp_path / 'b.db'}", config=CONFIG)
    try:
        run = cli_runner(url)
        task = tmp_path / "task.yaml"
        task.write_text("name: t\nresources: {accelerators: A10G:1}\nrun: sleep 60\n"
                        "broker: {expected_hours: 0.00833333}\n")
        dry = run("submit", str(task), "--budget", "0.52", "--deadline", "10min", "--dry-run").stdout
        assert "would be placed on spot" in dry, dry
        job_id = json.loads(run("--json", "submit", str(task), "--budget", "0.52", "--deadline", "10min").stdout)["id"]
        job = wait_for(lambda: (j := json.loads(run("--json", "status", job_id).stdout))["attempt_list"] and j,
                       timeout=60, interval=0.5)
        assert job["attempt_list"][-1]["placement"]["tier"] == "spot", job
        events = json.loads(run("--json", "events", job_id).stdout)
        placed = [e["reason"] for e in events if e.get("reason", "").startswith("placed on")]
        assert placed and "too close" not in placed[0], placed
    finally:
        stop_broker(proc, url)
