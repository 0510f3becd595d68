"""Tick-by-tick tier choice for jobs with a deadline: the same policy object the simulator runs.

Builds a :class:`pricing.policy.PolicyInput` (seconds) from a job's record and
the market, and asks the job's policy what to do: wait, spot (which zone),
on-demand or on-prem. Pure, except that a policy object keeps its own online
state (what it has observed of spot availability), one per job.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from decimal import Decimal

from broker.models import Attempt, Job
from pricing.offers import Offer, Tier
from pricing.deadline import RELIABLE
from pricing.placement import holds
from pricing.policy import Action, Decision, Holding, Policy, PolicyInput
from pricing.spot_policy import no_reliable_tier

POLICY_TICK_SECONDS = 60.0
"""The granularity the policy plans in (the engine may tick faster)."""


@dataclass
class RealTime:
    """A job's policy as the live engine asks it: at every engine tick (a second by default), while its
    :class:`PolicyInput` says ``tick`` = :data:`POLICY_TICK_SECONDS`, the time until the policy must be asked again
    at the latest, which the safety net counts in. What the policy learns of spot availability is counted in the
    seconds that passed since it last looked, not in ticks: the simulator asks once a tick, the engine far more often,
    and each look counted as a whole tick made a spot run seen for 10 s "up for 10 min", and the runs the model
    learnt 60 times longer than they were (spot that flickered every 30 s looked like half-hour runs). Its first look
    counts as one tick, as in the simulator."""

    policy: Policy
    seen_at: float | None = None

    @property
    def name(self) -> str:
        return self.policy.name

    def observe(self, inp: PolicyInput) -> None:
        elapsed = inp.tick if self.seen_at is None else inp.now - self.seen_at
        if elapsed <= 0:  # asked twice at the same moment: nothing new; the clock stepped back: counted from now on
            self.seen_at = inp.now if elapsed < 0 else self.seen_at
            return
        self.seen_at = inp.now
        self.policy.observe(replace(inp, tick=elapsed))

    def decide(self, inp: PolicyInput) -> Decision:
        return self.policy.decide(inp)


def measured_changeover(attempts: Sequence[Attempt], default: float) -> float:
    """The job's own changeover: median time from an attempt's launch to its first progress report
    (provisioning + start + restore), falling back to ``default`` until one attempt has reported."""
    seen = sorted(a.first_report_at - a.created_at for a in attempts
                  if a.first_report_at is not None and a.first_report_at >= a.created_at)
    return seen[len(seen) // 2] if seen else default


def work_seconds(job: Job) -> float | None:
    return float(Decimal(job.expected_hours) * 3600) if job.expected_hours else None


def work_done(job: Job, attempts: Sequence[Attempt], now: float, changeover: float) -> float:
    """Useful work so far: the checkpointed fraction when the job reports steps, else time run since restores."""
    total = work_seconds(job) or 0.0
    steps = job.progress.get("total_steps")
    ckpt = job.last_checkpoint.get("step")
    if steps and ckpt is not None:
        return min(total * float(ckpt) / float(steps), total)
    ran = 0.0
    for a in attempts:
        if a.started_at is None:
            continue
        end = a.ended_at if a.ended_at is not None else now
        ran += max(end - a.started_at - changeover, 0.0)
    return min(ran, total)


def policy_input(job: Job, attempts: Sequence[Attempt], offers: Sequence[Offer], capacity: dict[str, int],
                 spot_available: frozenset[str], *, now: float, changeover: float,
                 holding: Holding | None = None, num_nodes: int | None = None) -> PolicyInput | None:
    """The policy's view of a job, or ``None`` when it has no deadline, no expected length or no spot offer
    (the policy chooses between spot and the reliable tiers; without spot the cheapest placement wins).

    ``changeover`` is the configured default; once an attempt has reported, the job's measured one is used.
    ``num_nodes``: the nodes the job needs (else those of its placement, else one). A location counts as up only
    with that many free (``capacity``) and when it ever has that many (:func:`pricing.placement.holds`): a zone
    with 2 of a 4-node job's nodes free counted as "spot up", the policy chose it, placement could not take it, and the
    job went to on-demand while its event said "plan: spot in sim-a"; one of 2 nodes was planned for a 4-node job.
    """
    total = work_seconds(job)
    if job.deadline is None or total is None:
        return None
    blocked = job.blocked_at(now)
    by_tier: dict[Tier, list[Offer]] = {}
    for o in offers:
        by_tier.setdefault(o.tier, []).append(o)
    spot = by_tier.get(Tier.SPOT, [])
    if not spot and (holding is None or holding.tier is not Tier.SPOT):
        return None
    zone_price: dict[str, int] = {}  # each spot zone at its cheapest match: zones are priced apart
    for o in spot:
        if o.zone:
            zone_price[o.zone] = min(o.price_per_hour, zone_price.get(o.zone, o.price_per_hour))
    ondemand = min((o.price_per_hour for o in by_tier.get(Tier.ONDEMAND, [])), default=None)
    onprem = min((o.price_per_hour for o in by_tier.get(Tier.ONPREM, [])), default=None)
    if num_nodes is None:
        placed = job.placement.get("num_nodes") if isinstance(job.placement, dict) else None
        num_nodes = placed if isinstance(placed, int) and not isinstance(placed, bool) and placed > 0 else 1

    def free(o: Offer) -> bool:  # a location unknown to ``capacity`` (a cloud's) is tried: it may have them
        return holds(o, num_nodes) and capacity.get(o.location, num_nodes) >= num_nodes

    zones = frozenset(o.zone for o in spot if o.zone and o.zone in spot_available and o.zone not in blocked
                      and free(o))
    held = holding.zone if holding is not None and holding.tier is Tier.SPOT else None
    if held is not None and held in spot_available:
        zones = zones | {held}
    # The policy's figures are in the spot price of the zone it would run on: the one held, else the cheapest up now
    # (it takes the cheapest: ``spot_prices``), else the cheapest of all; a spot zone dearer than another costs more
    # than the unit, and priced so, is taken only when no cheaper one is up.
    up_prices = [zone_price[z] for z in zones if z in zone_price]
    unit = zone_price.get(held) if held in zones else min(up_prices, default=None)
    base = unit or min(zone_price.values(), default=None) or ondemand or onprem or 1
    changeover = measured_changeover(attempts, changeover)
    return PolicyInput(
        now=now, deadline=job.deadline, work_total=total,
        work_done=work_done(job, attempts, now, changeover), changeover=changeover, holding=holding,
        spot_zones_available=zones,
        ondemand_available=any(free(o) for o in by_tier.get(Tier.ONDEMAND, [])),
        onprem_available=any(free(o) for o in by_tier.get(Tier.ONPREM, [])),
        tick=POLICY_TICK_SECONDS, started_at=job.submitted_at,
        price_ratio=float(ondemand / base) if ondemand else 1e9,
        onprem_ratio=float(onprem / base) if onprem else None,
        spent=float(job.spent) / float(base) if base else 0.0,
        budget=float(job.budget) / float(base) if base else None,
        spot_prices={z: p / base for z, p in zone_price.items() if p != base},
        stop_seconds=_stop_seconds(job),
    )


def _stop_seconds(job: Job) -> float:
    """The clean stop the engine keeps of the job's budget, as its quote stored it at submit (0 if it did not)."""
    stop = job.quote.get("stop_seconds") if isinstance(job.quote, dict) else None
    return float(stop) if isinstance(stop, int) and stop > 0 else 0.0


def decide(policy: Policy, inp: PolicyInput) -> Decision:
    policy.observe(inp)
    return within_budget(inp, policy.decide(inp))


def within_budget(inp: PolicyInput, decision: Decision) -> Decision:
    """``decision``, unless it sends the job to the reliable tier, whose price the budget left cannot pay the rest of
    the expected run and a clean stop at (:attr:`PolicyInput.stop_seconds`), while it can on spot up now: spot then, in
    the cheapest zone up, saying why. On the reliable tier the engine would stop the job at its budget before its end,
    every step of it lost: a $0.52 budget for a 30 s job (spot $0.15, on-demand $0.45 and an 8 s clean stop $0.12) was
    placed on on-demand and stopped at step 28 of 30; and a job placed on spot because its budget covered nothing else
    said the safety net's "too close to risk losing spot". Live only: a trace replay has no clean stop and runs the
    policy as it is."""
    if decision.action not in RELIABLE:
        return decision
    if no_reliable_tier(inp):
        # no on-demand or pool offer fits the job (a task that asks for spot only): there is no reliable tier to go to,
        # whatever the budget — "the budget left pays for ... spot only" was said of a $1.00 budget that on-demand,
        # had the task allowed it, would have cost $0.02 of
        zone = min(sorted(inp.spot_zones_available), key=inp.spot_price, default=None)
        if zone is None:
            return decision
        return Decision(Action.SPOT, zone, f"the job may run only on spot (no on-demand or pool offer fits it), where "
                                           f"its policy chose the reliable tier ({decision.reason})")
    if inp.budget is None or inp.remaining <= 0:
        return decision
    left = inp.budget - inp.spent
    hours = (inp.remaining + inp.stop_seconds) / 3600
    if hours * inp.reliable_ratio <= left + 1e-9:
        return decision
    zone = min(sorted(inp.spot_zones_available), key=inp.spot_price, default=None)
    if zone is None or hours * inp.spot_price(zone) > left + 1e-9:
        return decision
    tier = "on-prem" if decision.action is Action.ONPREM else "on-demand"
    return Decision(Action.SPOT, zone, f"the budget left pays for the rest of the expected run and a clean stop on "
                                       f"spot only: on {tier}, which its policy chose ({decision.reason}), the job "
                                       f"would be stopped at its budget before its end")
