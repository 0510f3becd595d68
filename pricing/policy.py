"""The spot / on-demand policies by name, each wrapped in the exact safety net.

A policy is an object with two methods (so the live engine and the simulator
drive it the same way, and its online state is explicit):

- ``observe(inp)`` — record what this tick shows (which zones have spot now);
  called once per tick, before ``decide``. Stateless policies ignore it.
- ``decide(inp) -> Decision`` — what to run for the next tick. Pure given the
  state ``observe`` built: it never reads a clock or a file.

Create a fresh policy per job (``make_policy(name)``): state is per job.

| name | what it is |
|---|---|
| ``broker`` (default) | the broker's own: :class:`pricing.spot_policy.ModelPredictive` (a DP over an availability model learnt online) |
| ``slack_reserve`` | the broker's previous policy: :class:`pricing.spot_policy.SlackReserve` (rules with a slack reserve) |
| ``ondemand`` | on-demand (or a cheaper free on-prem pool) only |
| ``greedy`` | the paper's Greedy |
| ``uniform_progress`` | the paper's Uniform Progress |
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Protocol

from pricing.baselines import Greedy, OnDemandOnly, UniformProgress
from pricing.deadline import RELIABLE, Action, Decision, Holding, PolicyInput, is_safe, reliable, slack, within_cost_cap
from pricing.spot_policy import ModelPredictive, SlackReserve, span

__all__ = ["Action", "Decision", "Holding", "PolicyInput", "Policy", "POLICIES", "DEFAULT_POLICY", "make_policy", "SafetyNet"]


class Policy(Protocol):
    name: str

    def observe(self, inp: PolicyInput) -> None: ...

    def decide(self, inp: PolicyInput) -> Decision: ...


class SafetyNet:
    """Wraps a policy: any decision that could miss the deadline, or make the job
    cost more than running it all on on-demand, becomes the reliable tier.

    Also turns spot in a zone without spot capacity into waiting (then re-checks).
    This is what makes "never misses when meeting the deadline was possible at
    the start" hold for every policy in the registry.
    """

    def __init__(self, inner: Policy, cost_cap: bool = True):
        self.inner = inner
        self.name = inner.name
        self.cost_cap = cost_cap

    def observe(self, inp: PolicyInput) -> None:
        self.inner.observe(inp)

    def decide(self, inp: PolicyInput) -> Decision:
        decision = self.inner.decide(inp)
        if decision.action is Action.SPOT and decision.zone not in inp.spot_zones_available:
            decision = Decision(Action.WAIT, None, f"no spot capacity in {decision.zone}; {decision.reason}")
        if inp.remaining <= 0 and decision.action is Action.WAIT:
            return reliable(inp, "work estimate used up but the job runs on: finish on the reliable tier")
        short = -slack(inp)
        if short > 1e-6 and inp.remaining > 0:
            # out of reach even on the reliable tier, which finishes the job soonest: said so, where it was "anything
            # else could miss the deadline" (as if on-demand would meet it) or the plan's "cheaper in expectation"
            if decision.action not in RELIABLE:
                decision = reliable(inp, "")
            tier = "on-prem" if decision.action is Action.ONPREM else "on-demand"
            # the changeover counted is an estimate (changeover_seconds, 2 min by default): a 30 s job told it was
            # "2 min short" 45 s before its deadline met it, on a zone that started it at once — said, so it reads so
            change = inp.changeover_left if inp.on_reliable else inp.changeover
            short_by = f"{span(short)} short" + (f", counting a changeover of {span(change)}" if change > 0 else "")
            if not (inp.onprem_available if decision.action is Action.ONPREM else inp.ondemand_available):
                return Decision(decision.action, decision.zone,
                                f"safety net: the deadline can no longer be met ({short_by})")
            return Decision(decision.action, decision.zone, f"safety net: the deadline can no longer be met, even on "
                                                            f"{tier} ({short_by}): {tier} finishes the job soonest")
        if not is_safe(inp, decision.action, decision.zone):
            return reliable(inp, "safety net: anything else could miss the deadline")
        if self.cost_cap and not within_cost_cap(inp, decision.action, decision.zone):
            return reliable(inp, "cost cap: anything else could cost more than on-demand only")
        return decision


POLICIES: dict[str, Callable[[], Policy]] = {
    "broker": partial(ModelPredictive, name="broker"),
    "slack_reserve": partial(SlackReserve, name="slack_reserve"),
    "ondemand": OnDemandOnly,
    "greedy": Greedy,
    "uniform_progress": UniformProgress,
}
DEFAULT_POLICY = "broker"
#: The broker's own policies, current and previous: run with the cost cap wherever they run (the live engine, ``broker
#: simulate``, the benchmark). The others are the paper's baselines, replayed as published with the deadline net only.
CAPPED_POLICIES = (DEFAULT_POLICY, "slack_reserve")


def make_policy(name: str = DEFAULT_POLICY, *, cost_cap: bool = True) -> SafetyNet:
    """A fresh policy (with its own online state), wrapped in the safety net.

    ``cost_cap=False`` keeps only the deadline net: for replaying the paper's
    baselines as published (they have no cost cap); the broker always runs with it.
    """
    try:
        factory = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}") from None
    return SafetyNet(factory(), cost_cap=cost_cap)
