"""The broker's own spot / on-demand policy: spend slack on waiting, keep a reserve for changeovers.

Why this shape. Waiting for spot costs nothing but slack; an hour of
on-demand costs ``k`` spot-hours whenever it is bought. So the cheapest plan
waits through spot outages as long as it can, and buys on-demand as late as
possible (Greedy's insight) — but Greedy spends *all* its slack on the first
outages and then sits on on-demand to the end, unable to afford the
changeover back to spot when spot returns. Uniform Progress avoids that by
buying on-demand early, which is often needless. This policy keeps a
**reserve** of slack sized for the changeovers the rest of the job will need,
waits while the slack is above it, and uses the reliable tier at the reserve;
from there it hops back to spot whenever the spot run it expects to get pays
for the two changeovers the hop costs.

Per tick (spot "expected run" = the zone's windowed mean spot lifetime, learnt
online from what the job has observed, with a weak prior):

| situation | decision |
|---|---|
| on spot and it is still there | stay |
| spot somewhere, not on the reliable tier | spot, in the zone with the longest expected run — but while nothing is saved yet (cost headroom < a tick of spot) only once the run has lasted 2 ticks |
| spot somewhere, on the reliable tier | spot if ``(k−1)·min(run, work left) > d·(1+k)``, the run has lasted 20 min (60 min if the hop must be paid from the cap's allowance), and slack ≥ 2d + a tick; else stay |
| no spot, on the reliable tier | stay; wait instead only if slack exceeds the reserve by a margin |
| no spot, not on the reliable tier | wait while slack after the tick ≥ reserve, else reliable |

Reserve = ``d·(a + b·work_left/run)``: ``a`` changeovers of headroom plus ``b``
per preemption expected in the work left — slack kept for later hops back to
spot. A hop off the reliable tier risks two changeovers' cost, which the cost
cap (:func:`pricing.deadline.within_cost_cap`) only allows out of money already
saved against the on-demand line plus one hop's allowance; while savings and
allowance cannot pay for a hop, going reliable would be for good, so the
reserve drops to ``a`` changeovers (Greedy's choice: wait as long as the
deadline allows). Every decision then passes the exact safety net
(:class:`pricing.policy.SafetyNet`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pricing.deadline import Action, Decision, PolicyInput, changeover_allowance, cost_headroom, reliable, slack


@dataclass(frozen=True)
class Tuning:
    """The policy's few constants, in units of the changeover ``d`` or hours; not per trace."""

    reserve_base: float = 2.0  # changeovers of headroom always kept
    reserve_per_preemption: float = 3.0  # changeovers kept per expected preemption in the work left
    preemptions_cap: float = 8.0  # at most this many expected preemptions count towards the reserve
    idle_margin: float = 10.0  # changeovers of extra slack before leaving the reliable tier to wait
    confirm_minutes: float = 20.0  # a spot run must have lasted this long before leaving the reliable tier for it
    credit_minutes: float = 60.0  # ... this long when the hop must be paid from the cost cap's allowance
    confirm_ticks: int = 2  # while nothing is saved, take spot from idle only once it has been up this many ticks
    prior_run_hours: float = 4.0  # prior mean spot lifetime, weight of one observed run
    half_life_hours: float = 24.0  # window of the lifetime estimate


@dataclass
class ZoneHistory:
    """Windowed counts for one zone: seconds with spot up, and spot runs that ended."""

    up_seconds: float = 0.0
    ends: float = 0.0
    was_up: bool = False
    up_for: float = 0.0  # seconds the current spot run has lasted


@dataclass
class SlackReserve:
    tuning: Tuning = field(default_factory=Tuning)
    zones: dict[str, ZoneHistory] = field(default_factory=dict)
    name: str = "broker"

    def observe(self, inp: PolicyInput) -> None:
        """Fold one tick of spot availability into each zone's windowed history."""
        decay = 0.5 ** (inp.tick / (self.tuning.half_life_hours * 3600))
        for zone in inp.spot_zones_available:
            self.zones.setdefault(zone, ZoneHistory())
        for zone, h in self.zones.items():
            up = zone in inp.spot_zones_available
            h.up_seconds = h.up_seconds * decay + (inp.tick if up else 0.0)
            h.ends = h.ends * decay + (1.0 if h.was_up and not up else 0.0)
            h.was_up = up
            h.up_for = h.up_for + inp.tick if up else 0.0

    def expected_run(self, zone: str | None) -> float:
        """Mean spot lifetime in ``zone`` (seconds): windowed, shrunk to the prior."""
        prior = self.tuning.prior_run_hours * 3600
        h = self.zones.get(zone) if zone is not None else None
        if h is None:
            return prior
        return (h.up_seconds + prior) / (h.ends + 1.0)

    def reserve(self, inp: PolicyInput, zone: str | None) -> float:
        t = self.tuning
        run = max(self.expected_run(zone), inp.tick)
        return inp.changeover * (t.reserve_base + t.reserve_per_preemption * min(inp.remaining / run, t.preemptions_cap))

    def best_zone(self, inp: PolicyInput) -> str | None:
        if not inp.spot_zones_available:
            return None
        return max(sorted(inp.spot_zones_available), key=self.expected_run)

    def best_known_zone(self) -> str | None:
        return max(sorted(self.zones), key=self.expected_run) if self.zones else None

    def hop_cost(self, inp: PolicyInput) -> float:
        """Worst-case money (spot-hours) of a hop off the reliable tier that spot drops at
        once: a spot changeover, and a second changeover back on the reliable tier."""
        ticks = math.ceil(inp.changeover / inp.tick - 1e-9) * inp.tick / 3600
        return ticks * (1.0 + inp.reliable_ratio)

    def decide(self, inp: PolicyInput) -> Decision:
        if inp.remaining <= 0:
            return reliable(inp, "work estimate used up: finish on the reliable tier")
        t = self.tuning
        d, k = inp.changeover, inp.reliable_ratio
        spare = slack(inp)
        saved = cost_headroom(inp)
        tick_h = inp.tick / 3600
        if inp.on_spot:
            return Decision(Action.SPOT, inp.holding.zone, "stay on spot while it lasts")  # type: ignore[union-attr]
        zone = self.best_zone(inp)
        if zone is not None:
            up_for = self.zones[zone].up_for if zone in self.zones else 0.0
            if not inp.on_reliable:
                if saved < tick_h and up_for < t.confirm_ticks * inp.tick - 1e-6 and spare - inp.tick >= 0:
                    return Decision(Action.WAIT, None, f"spot just appeared in {zone} and nothing is saved yet: wait a tick to see it last")
                return Decision(Action.SPOT, zone, f"spot is available in {zone}")
            run = self.expected_run(zone)
            worth = (k - 1) * min(run, inp.remaining) > d * (1 + k)
            proof = t.confirm_minutes if saved >= self.hop_cost(inp) else t.credit_minutes
            if worth and up_for >= proof * 60 - 1e-6 and spare >= 2 * d + inp.tick:
                return Decision(Action.SPOT, zone, f"spot back in {zone} for {up_for / 60:.0f} min; an expected {run / 3600:.1f} h run pays for two changeovers")
            return reliable(inp, "spot is back but a hop would not pay for its changeovers yet")
        reserve = self.reserve(inp, self.best_known_zone())
        if saved + changeover_allowance(inp) < self.hop_cost(inp) + tick_h:
            reserve = min(reserve, t.reserve_base * d)  # no hop affordable later: reliable would be for good
        if inp.on_reliable:
            if spare - d + inp.changeover_left > reserve + t.idle_margin * d:
                return Decision(Action.WAIT, None, "slack well above the reserve: stop paying for on-demand and wait for spot")
            return reliable(inp, "no spot and slack at the reserve: keep running on the reliable tier")
        if spare - inp.tick >= reserve:
            return Decision(Action.WAIT, None, f"no spot; {spare / 3600:.1f} h of slack above a {reserve / 3600:.1f} h reserve")
        return reliable(inp, f"no spot and slack down to the {reserve / 3600:.1f} h reserve")
