"""A spot policy's words for waiting to see spot last say what is true.

A job submitted while a zone had had spot for minutes sat a minute with the reason "spot just appeared in sim-spot-a
and nothing is saved yet: wait a tick to see it last": the zone had not just appeared — the job's own watch of it
began at its submit. The decision is the same (the simulator and the benchmark replay it bit for bit); the words now
say whose watch is short, and how long it must see the zone up: two ticks of its policy, of which a zone up at its
first look has one already (a job submitted while the zone is up waits one tick; one that saw it come back, two).
"""

from __future__ import annotations

import pytest

from pricing.deadline import Action, Decision, PolicyInput
from pricing.policy import SafetyNet, make_policy

H = 3600.0


@pytest.mark.parametrize("tick, said", [(60.0, "2 min"), (600.0, "20 min")],
                         ids=["the engine's policy tick of a minute → says 2 min, two ticks",
                              "the simulator's tick of 10 min → says 20 min, two ticks"])
def test_a_job_waiting_to_see_spot_last_is_not_told_spot_just_appeared(tick, said):
    # a job that may also run on on-demand (a job that may run only on spot, with no on-demand price and none
    # available, has nothing to save against nor to fall back on: it takes spot at once, see
    # tests/broker/test_dl_spot_only_policy.py)
    inp = PolicyInput(now=0.0, deadline=6 * H, work_total=72.0, work_done=0.0, changeover=120.0, tick=tick,
                      spot_zones_available=frozenset({"sim-spot-a"}), ondemand_available=True, price_ratio=3.0)
    policy = make_policy("slack_reserve")  # the rule's own policy (the broker's plan falls back on it)
    policy.observe(inp)
    decision = policy.decide(inp)
    assert decision.action is Action.WAIT and decision.zone is None
    assert "just appeared" not in decision.reason, decision.reason
    assert decision.reason == (
        "spot in sim-spot-a has not yet been seen to last: this job's policy has watched it only since the job's "
        f"submit or the broker's start, and no money is saved yet against on-demand; it takes spot once it has seen it up for {said}, 2 "
        "ticks of its policy — a zone up at its first look counts as up for one")


@pytest.mark.parametrize("name, deadline, said", [
    ("broker", 1 * H, "the deadline can no longer be met, even on on-demand (1.0 h short): on-demand finishes the job "
                      "soonest"),
    ("greedy", 1 * H, "the deadline can no longer be met, even on on-demand (1.0 h short): on-demand finishes the job "
                      "soonest"),
    ("always_wait", 1 * H, "the deadline can no longer be met, even on on-demand (1.0 h short): on-demand finishes the "
                           "job soonest"),
    ("always_wait", 2 * H + 30.0, "anything else could miss the deadline"),
], ids=["the broker's plan, a deadline out of reach even on on-demand → says it can no longer be met, and by how much",
        "greedy, a deadline out of reach → says it can no longer be met, not that it cannot wait any longer",
        "a policy that would wait, a deadline out of reach → says it can no longer be met, not that it could be missed",
        "a policy that would wait, a deadline on-demand still just meets → says anything else could miss it"])
def test_the_safety_nets_words_say_whether_the_deadline_can_still_be_met(name, deadline, said):
    # spot is down and 2 h of work are left. Of a deadline that even on-demand can no longer meet, the net said
    # "anything else could miss the deadline" (as if on-demand would meet it), and the broker's plan "the reliable tier
    # is cheaper in expectation than waiting for spot"
    inp = PolicyInput(now=0.0, deadline=deadline, work_total=2 * H, work_done=0.0, changeover=0.0, tick=60.0)
    policy = SafetyNet(AlwaysWait()) if name == "always_wait" else make_policy(name)
    policy.observe(inp)
    decision = policy.decide(inp)
    assert decision.action is Action.ONDEMAND
    assert decision.reason == f"safety net: {said}"


class AlwaysWait:
    """A policy that leaves every decision to the safety net around it."""

    name = "always_wait"

    def observe(self, inp: PolicyInput) -> None:
        pass

    def decide(self, inp: PolicyInput) -> Decision:
        return Decision(Action.WAIT, None, "waits")
