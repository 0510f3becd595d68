"""What a spot/on-demand policy sees and says, and the deadline arithmetic all policies share.

Everything is in **seconds** (floats), never ticks, so the live engine (which
ticks whenever it likes) and the simulator (which ticks every ``gap_seconds``)
build the same :class:`PolicyInput`. Prices appear only as ratios to the spot
price: the policy weighs hours, the broker's money stays in micro-dollars.

The safety net (Can't Be Late, NSDI'24, §4): a job may spend a tick on
anything but a reliable tier only if, after that tick, switching to the
reliable tier (one changeover) still finishes by the deadline.
:func:`is_safe` is that test, exact on the tick grid.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from pricing.offers import Tier


class Action(str, Enum):
    WAIT = "wait"
    SPOT = "spot"
    ONDEMAND = "ondemand"
    ONPREM = "onprem"


RELIABLE = {Action.ONDEMAND: Tier.ONDEMAND, Action.ONPREM: Tier.ONPREM}
ACTION_TIER = {Action.SPOT: Tier.SPOT, **RELIABLE}


@dataclass(frozen=True)
class Holding:
    """The capacity the job runs on now: a tier and, for spot, its zone."""

    tier: Tier
    zone: str | None = None


@dataclass(frozen=True)
class PolicyInput:
    """One tick's view of a job. Seconds throughout.

    Attributes:
        now, deadline, started_at: wall times (any epoch, same for all three).
        work_total: the job's estimated length of useful work.
        work_done: useful work done so far (checkpointed progress).
        changeover: the delay of a move to a new instance (provisioning +
            restore + work lost since the last checkpoint), as the broker estimates it.
        holding: what the job runs on now (``None``: idle, or just preempted).
        changeover_left: the part of the current instance's changeover still to run.
        spot_zones_available: zones where spot capacity is available now.
        spot_prices: a zone's spot $/h ÷ the spot $/h the figures here are in, for zones
            priced apart (absent: 1, as in a trace replay, where every zone costs the same).
        ondemand_available, onprem_available: whether those tiers can be had now.
        tick: seconds until the policy is asked again.
        price_ratio: on-demand $/h ÷ spot $/h.
        onprem_ratio: on-prem internal $/h ÷ spot $/h (``None``: no pool).
        spent: what the job has cost so far, in spot-hours (cost ÷ spot $/h).
        budget: the user's budget for the whole job, in spot-hours (``None``: none set).
            When it covers on-demand only, the cost cap's allowance shrinks to fit in it.
        stop_seconds: the clean stop the live engine keeps of every budget (it stops a job once what is left pays
            only for that), which a tier must leave room for to finish the job within its budget; 0 in a trace replay.
    """

    now: float
    deadline: float
    work_total: float
    work_done: float
    changeover: float
    holding: Holding | None = None
    spot_zones_available: frozenset[str] = frozenset()
    ondemand_available: bool = True
    onprem_available: bool = False
    tick: float = 60.0
    changeover_left: float = 0.0
    started_at: float = 0.0
    price_ratio: float = 3.0
    onprem_ratio: float | None = None
    spent: float = 0.0
    budget: float | None = None
    spot_prices: Mapping[str, float] = field(default_factory=dict, hash=False)
    stop_seconds: float = 0.0

    def spot_price(self, zone: str) -> float:
        """``zone``'s spot price in the unit of these figures (1 unless priced apart)."""
        return self.spot_prices.get(zone, 1.0)

    @property
    def remaining(self) -> float:
        return max(self.work_total - self.work_done, 0.0)

    @property
    def reliable(self) -> Action:
        """The reliable tier to fall back to: a free on-prem pool cheaper than on-demand wins."""
        if self.onprem_available and self.onprem_ratio is not None and (self.onprem_ratio <= self.price_ratio or not self.ondemand_available):
            return Action.ONPREM
        return Action.ONDEMAND

    @property
    def reliable_ratio(self) -> float:
        return self.onprem_ratio if self.reliable is Action.ONPREM and self.onprem_ratio is not None else self.price_ratio

    @property
    def on_reliable(self) -> bool:
        return self.holding is not None and self.holding.tier in (Tier.ONDEMAND, Tier.ONPREM)

    @property
    def on_spot(self) -> bool:
        """Holding spot in a zone that is still available (a lost one is not held)."""
        return self.holding is not None and self.holding.tier is Tier.SPOT and self.holding.zone in self.spot_zones_available


@dataclass(frozen=True)
class Decision:
    action: Action
    zone: str | None = None
    reason: str = ""


def ticks_left(inp: PolicyInput) -> int:
    """Whole ticks before the deadline (a tick that would end after it does not count)."""
    return max(math.floor((inp.deadline - inp.now) / inp.tick + 1e-9), 0)


def progress_this_tick(inp: PolicyInput, action: Action, zone: str | None = None) -> float:
    """Useful work a tick of ``action`` makes: the tick less the changeover still to run."""
    if action is Action.WAIT:
        return 0.0
    same = inp.holding is not None and inp.holding.tier is ACTION_TIER[action] and (action is not Action.SPOT or (inp.on_spot and inp.holding.zone == zone))
    left = inp.changeover_left if same else inp.changeover
    return max(inp.tick - left, 0.0)


def time_left(inp: PolicyInput) -> float:
    """Seconds before the deadline, as :func:`slack` counts them: whole ticks (:func:`ticks_left`) on the tick grid, as
    a trace replay runs, and the time itself where the deadline falls between ticks, as it does live. Rounded down to
    whole ticks there, 45 s left counted as none, and a 30 s job was told "the deadline can no longer be met, even on
    on-demand (32 s short)" — and met it, 14 s before it. The reliable tier, once taken, runs on to the end: it needs
    no tick of its own."""
    whole = ticks_left(inp) * inp.tick
    left = inp.deadline - inp.now
    return left if left - whole > 1e-6 * inp.tick else whole


def slack(inp: PolicyInput) -> float:
    """Time to spare if the job went (or stayed) reliable now and ran to the end."""
    need = inp.remaining + (inp.changeover_left if inp.on_reliable else inp.changeover)
    return time_left(inp) - need


def is_safe(inp: PolicyInput, action: Action, zone: str | None = None) -> bool:
    """Whether the deadline is still reachable after one tick of ``action``.

    Reliable actions are always as safe as anything can be. Otherwise, after
    the tick the job must still be able to start a reliable instance (one
    full changeover) and finish within the ticks then left.
    """
    if action in RELIABLE:
        return True
    after = inp.remaining - progress_this_tick(inp, action, zone)
    return after <= 0 or inp.changeover + after <= (ticks_left(inp) - 1) * inp.tick + 1e-6


def _reliable_ticks(inp: PolicyInput, work: float, changeover: float) -> int:
    return max(math.ceil((work + changeover) / inp.tick - 1e-9), 0)


def cost_cap(inp: PolicyInput) -> float:
    """On-demand only, in spot-hours: running the whole job on on-demand (whole ticks,
    one changeover). :func:`within_cost_cap` allows :func:`changeover_allowance` above
    it, which a user budget covering on-demand only bounds: such a budget is never exceeded."""
    return _reliable_ticks(inp, inp.work_total, inp.changeover) * inp.tick / 3600 * inp.price_ratio


def within_cost_cap(inp: PolicyInput, action: Action, zone: str | None = None) -> bool:
    """Whether, after a tick of ``action``, finishing on the reliable tier stays
    within :func:`cost_cap` plus :func:`changeover_allowance`.

    Reliable ticks keep the invariant by themselves (each buys its own
    progress at the reliable price), so only spot and waiting are checked.
    Leaving the reliable tier to *wait* gets no allowance: the allowance exists for
    spot's unproductive first tick, and a wait that ends back on the reliable tier
    risks only a second changeover there, which must come out of money already saved
    (without this, a job that never touched spot could end a changeover above
    on-demand only).
    """
    return action in RELIABLE or cap_margin(inp, action, zone) >= -1e-9


def cap_margin(inp: PolicyInput, action: Action, zone: str | None = None) -> float:
    """Spot-hours left under the cap (on-demand only plus the allowance, none for a wait off
    the reliable tier) in the worst case after a tick of ``action``: the tick makes the
    progress it must and then the job finishes on the reliable tier, from a new changeover."""
    tick_hours = inp.tick / 3600
    price = (inp.spot_price(zone) if zone is not None else 1.0) if action is Action.SPOT else 0.0
    after = inp.remaining - progress_this_tick(inp, action, zone)
    finish = _reliable_ticks(inp, max(after, 0.0), inp.changeover) * tick_hours * inp.reliable_ratio if after > 0 else 0.0
    allowance = 0.0 if action is Action.WAIT and inp.on_reliable else changeover_allowance(inp)
    return cost_cap(inp) + allowance - (inp.spent + price * tick_hours + finish)


def changeover_allowance(inp: PolicyInput) -> float:
    """What the cap allows above on-demand only: one hop's two changeovers, in spot-hours —
    one on spot (whole ticks at the spot price) and one back on the reliable tier (whole
    ticks at its price).

    Some allowance is unavoidable: a first spot tick is all changeover (when the
    changeover is at least a tick), so in the worst case (the instance lost the
    moment it is taken, and spot never back) any use of spot ends above
    on-demand only. One spot changeover would be the least; the changeover back
    to the reliable tier is added so that a job that had to start on the
    reliable tier before spot saved it anything may still hop to a long spot
    run once. With d = 0.2 h and 600 s ticks this is 1.4 spot-hours, 0.9% of
    on-demand only; the broker's policy spends it only on established spot runs
    (see :mod:`pricing.spot_policy`).

    A user budget that covers on-demand only bounds it: the allowance is then at most
    what the budget holds above on-demand only, so such a budget is never exceeded
    (with a budget of exactly on-demand only there is none: spot is never risked).
    A budget below on-demand only cannot be kept by the reliable tier anyway; the
    engine stops such a job at its budget, and the allowance stays as it is.
    """
    n = math.ceil(inp.changeover / inp.tick - 1e-9) * inp.tick / 3600
    full = n * (1.0 + inp.reliable_ratio)
    if inp.budget is not None:
        cap = cost_cap(inp)
        above = inp.budget - cap
        if above >= -1e-6 * max(cap, 1.0):  # a budget typed as on-demand only's rounded cost still counts
            return min(full, max(above, 0.0))
    return full


def cost_headroom(inp: PolicyInput) -> float:
    """Spot-hours saved so far against the on-demand line: :func:`cost_cap` less what has
    been spent and what finishing on the reliable tier from here would cost (no new
    changeover if the job is on the reliable tier already). Negative: spot ticks
    spent that have not paid back yet."""
    left = inp.changeover_left if inp.on_reliable else inp.changeover
    finish = _reliable_ticks(inp, inp.remaining, left) * inp.tick / 3600 * inp.reliable_ratio if inp.remaining > 0 else 0.0
    return cost_cap(inp) - inp.spent - finish


def reliable(inp: PolicyInput, reason: str) -> Decision:
    return Decision(inp.reliable, None, reason)
