"""The live engine asks a job's spot policy at every engine tick (a second by default), the simulator once a tick of
the policy (60 s in the broker). What the policy learns of spot must not depend on how often it is asked: before,
each look counted as a whole policy tick, so a spot run seen for 10 s was "up for 10 min", and the runs the model
learnt from a zone were 60 times longer than they were."""

from __future__ import annotations

import re

import pytest

from broker.engine.spot import POLICY_TICK_SECONDS, RealTime, policy_input
from broker.engine.spot import decide as policy_decide
from broker.lifecycle import JobState
from broker.models import Job
from pricing.offers import Offer, Tier
from pricing.policy import make_policy

from broker_testing import local_broker

H = 3600.0


def job() -> Job:
    return Job(id="j", name="t", team="a", state=JobState.QUEUED, spec={}, budget=100_000_000, priority=0,
               submitted_at=0.0, updated_at=0.0, deadline=10 * H, expected_hours="4")


OFFERS = [Offer(tier=Tier.SPOT, cloud="aws", region="r", zone="z", instance_type="g", accelerator="A10G",
                accelerator_count=1, price_per_hour=1_000_000),
          Offer(tier=Tier.ONDEMAND, cloud="aws", region="r", zone="od", instance_type="g", accelerator="A10G",
                accelerator_count=1, price_per_hour=3_000_000)]


def spot_up(t: float, period: float) -> frozenset[str]:
    """Spot in zone z for ``period`` seconds, then none for as long, and so on."""
    return frozenset({"z"}) if int(t // period) % 2 == 0 else frozenset()


def decisions(policy, every: float, period: float, until: float) -> dict[float, tuple[str, str]]:
    """The policy asked every ``every`` seconds, as the engine builds its input; what it decided on each minute."""
    out, t = {}, 0.0
    while t <= until:
        inp = policy_input(job(), [], OFFERS, {"z": 1, "od": 1}, spot_up(t, period), now=t, changeover=120)
        policy.observe(inp)
        d = policy.decide(inp)
        if t % POLICY_TICK_SECONDS == 0:
            out[t] = (d.action.value, d.reason)
        t += every
    return out


def age_said(reason: str) -> float | None:
    """The age of the spot run a decision's reason gives ("spot in z (seen up for 3 min)"), in seconds."""
    m = re.search(r"\(seen up for ([\d.]+) (s|min|h)\)", reason)
    return float(m.group(1)) * {"s": 1, "min": 60, "h": 3600}[m.group(2)] if m else None


@pytest.mark.parametrize("period", [300.0, 1200.0], ids=["spot up and down every 5 min", "every 20 min"])
def test_asked_every_second_the_policy_sees_spot_runs_as_long_as_asked_once_a_minute(period):
    once_a_minute = decisions(make_policy(), POLICY_TICK_SECONDS, period, 2 * H)
    every_second = decisions(RealTime(make_policy()), 1.0, period, 2 * H)
    assert [a for a, _ in once_a_minute.values()] == [a for a, _ in every_second.values()]
    ages = [(t, age_said(once_a_minute[t][1]), age_said(every_second[t][1])) for t in once_a_minute]
    ages = [(t, a, b) for t, a, b in ages if a is not None]
    assert len(ages) > 30
    # the same run, within the minute the once-a-minute look counts for a run it has just seen (and the rounding of
    # the words); counted in looks, a run seen for 2 min was "up for 2.0 h"
    assert all(b is not None and abs(a - b) <= 90 for _, a, b in ages), ages


def test_a_spot_run_watched_for_three_minutes_is_said_to_have_lasted_three_minutes():
    said = decisions(RealTime(make_policy()), 1.0, 4 * H, 180.0)[120.0][1]
    assert "(seen up for 3 min)" in said  # its first look counts a policy tick, as in the simulator: 60 s + 120 s


def test_a_second_question_at_the_same_moment_or_a_clock_stepped_back_teaches_nothing():
    policy = RealTime(make_policy())
    for t in (0.0, 600.0, 600.0, 300.0, 900.0):  # asked twice at 600 s; then the clock steps back 5 min
        policy.observe(policy_input(job(), [], OFFERS, {"z": 1, "od": 1}, frozenset({"z"}), now=t, changeover=120))
    last = policy_input(job(), [], OFFERS, {"z": 1, "od": 1}, frozenset({"z"}), now=900.0, changeover=120)
    # 60 s (its first look) + 600 s + 600 s from the step back on: 21 min
    assert "(seen up for 21 min)" in policy.decide(last).reason


@pytest.fixture
def engine(make_settings, tmp_path):
    with local_broker(make_settings, tmp_path, "pools: [{name: cpu, slots: 1, price_per_slot_hour: '0.36'}]\n") as parts:
        yield parts[1]


def test_the_engine_asks_each_jobs_policy_in_real_time(engine):
    policy = engine._policy("j-0123456789")
    for t in range(0, 181):  # the engine's tick, every second, 3 min
        inp = policy_input(job(), [], OFFERS, {"z": 1, "od": 1}, frozenset({"z"}), now=float(t), changeover=120)
        said = policy_decide(policy, inp).reason
    assert age_said(said) == 4 * 60, said  # its first look as a policy tick, then 180 s; counted in looks: 3.0 h
