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
| ``uniform_progress`` | spot (stay until preempted) | on on-demand: stay while not ahead of the line at t + 2d; otherwise on-demand while behind the line C·t/R, else wait |
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

    As the paper's public simulator (skypilot-org/can-t-be-late,
    ``uniform_progress`` strategy) implements §5.2, rule by rule, with
    cp = progress and ep(t) = C·t/R:

    - the net: once the ticks a finish on on-demand needs (remaining work + d)
      reach the ticks left, on-demand;
    - spot whenever it is available (taking risks, exploitation): it overrides
      the rules below;
    - no spot, on on-demand: stay while cp < ep(t + 2d) (hysteresis);
    - no spot otherwise: on-demand while behind the line (cp < ep(t)), else wait.
    """

    name = "uniform_progress"

    def observe(self, inp: PolicyInput) -> None:
        pass

    def _expected(self, inp: PolicyInput, at: float) -> float:
        span = inp.deadline - inp.started_at
        return inp.work_total * min(max(at - inp.started_at, 0.0) / span, 1.0) if span > 0 else inp.work_total

    def decide(self, inp: PolicyInput) -> Decision:
        need = math.ceil((inp.remaining + inp.changeover) / inp.tick - 1e-9)
        if need >= ticks_left(inp):
            return reliable(inp, "safety net: a finish on on-demand needs every tick left")
        zone = _first_zone(inp)
        if zone is not None:
            return Decision(Action.SPOT, zone, "spot is available (stay until preempted)")
        if inp.on_reliable and inp.work_done <= self._expected(inp, inp.now + 2 * inp.changeover):
            return reliable(inp, "hysteresis: stay on on-demand until ahead of the line at t + 2d")
        if inp.work_done < self._expected(inp, inp.now):
            return reliable(inp, "behind uniform progress: catch up on on-demand")
        return Decision(Action.WAIT, None, "ahead of uniform progress: wait for spot")
