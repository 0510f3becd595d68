"""The paper's baselines (Can't Be Late, NSDI'24 §3.4, §5.2), for comparison runs.

Each is a small stateless policy; the registry in :mod:`pricing.policy` wraps
every policy in the exact safety net, which for these only matters where
their own (coarser) net would act a tick too late. The benchmark replays them
without the broker's cost cap (``make_policy(name, cost_cap=False)``), as the
paper does.

| policy | spot available | spot not available |
|---|---|---|
| ``ondemand`` | on-demand | on-demand |
| ``greedy`` | spot, until the safety net fires; then on-demand to the end | wait until the safety net fires |
| ``uniform_progress`` | spot (stay until preempted), unless 2d of slack is all that is left | on on-demand: stay; otherwise on-demand while behind the line C·t/R, else wait |
"""

from __future__ import annotations

import math

from pricing.deadline import Action, Decision, PolicyInput, is_safe, reliable, ticks_left


class OnDemandOnly:
    name = "ondemand"

    def observe(self, inp: PolicyInput) -> None:
        pass

    def decide(self, inp: PolicyInput) -> Decision:
        return reliable(inp, "on-demand only")


def _first_zone(inp: PolicyInput) -> str | None:
    if inp.on_spot:
        return inp.holding.zone  # type: ignore[union-attr]
    return min(inp.spot_zones_available) if inp.spot_zones_available else None


def _net_fired(inp: PolicyInput) -> bool:
    """The paper's net: R(t) < C(t) + 2d — too little time left to risk spot."""
    return inp.deadline - inp.now < inp.remaining + 2 * inp.changeover


class Greedy:
    """Spot whenever it is there; otherwise wait; the net moves it to on-demand for good."""

    name = "greedy"

    def observe(self, inp: PolicyInput) -> None:
        pass

    def decide(self, inp: PolicyInput) -> Decision:
        if inp.on_reliable:
            return reliable(inp, "greedy stays on on-demand once the safety net fired")
        if _net_fired(inp):
            return reliable(inp, "safety net: too little slack to risk spot")
        zone = _first_zone(inp)
        if zone is not None and is_safe(inp, Action.SPOT, zone):
            return Decision(Action.SPOT, zone, "spot is available")
        if is_safe(inp, Action.WAIT):
            return Decision(Action.WAIT, None, "no spot; slack left to wait")
        return reliable(inp, "safety net: cannot wait any longer")


class UniformProgress:
    """Keep progress on the straight line from 0 at the start to C at the deadline.

    The variant the paper evaluates (its Table 3 and Fig. 12 figures): in the public simulator
    (skypilot-org/can-t-be-late) the strategy whose docstring reads "Our policy: Uniform
    Progress", ``rc_cr_threshold_no_condition2`` — Uniform Progress without the §5.2
    hysteresis rule. Rule by rule, with cp = progress and ep(t) = C·(t − t0)/(R − t0):

    - spot whenever it is available (taking risks; stay until preempted);
    - no spot, on on-demand: stay on it (until spot is back);
    - no spot otherwise: on-demand while behind the line (cp < ep(t)), else wait;
    - the 2d net: not on a live spot instance, and the ticks that remaining work + 2d needs
      reach the ticks left: on-demand, even with spot available;
    - the d net: the ticks that remaining work + d needs reach the ticks left: on-demand,
      unless the job sits on a live spot instance past its changeover (it keeps it).

    An earlier replay here followed the simulator's ``uniform_progress`` strategy instead
    (with the hysteresis: leave on-demand to wait once ahead of the line at t + 2d); it cost
    1.168× the optimum on the paper's windows against the paper's 1.125×; this one replays
    at 1.128×.
    """

    name = "uniform_progress"

    def observe(self, inp: PolicyInput) -> None:
        pass

    def _behind(self, inp: PolicyInput) -> bool:
        span = inp.deadline - inp.started_at
        line = inp.work_total * (inp.now - inp.started_at) / span if span > 0 else inp.work_total
        return inp.work_done < line

    def decide(self, inp: PolicyInput) -> Decision:
        left = ticks_left(inp)
        zone = _first_zone(inp)
        if math.ceil((inp.remaining + inp.changeover) / inp.tick - 1e-9) >= left:
            if inp.on_spot and inp.changeover_left <= 0:
                return Decision(Action.SPOT, zone, "the net: keep the running spot instance until preempted")
            return reliable(inp, "the net: a finish on on-demand needs every tick left")
        if not inp.on_spot and math.ceil((inp.remaining + 2 * inp.changeover) / inp.tick - 1e-9) >= left:
            return reliable(inp, "the 2d net: too little slack to risk a new instance")
        if zone is not None:
            return Decision(Action.SPOT, zone, "spot is available (stay until preempted)")
        if inp.on_reliable:
            return reliable(inp, "no spot: keep the on-demand instance")
        if self._behind(inp):
            return reliable(inp, "behind uniform progress: catch up on on-demand")
        return Decision(Action.WAIT, None, "ahead of uniform progress: wait for spot")
