"""The broker's own spot / on-demand policies.

:class:`ModelPredictive` (the default, at the end of this module) plans each tick with a DP over
an availability model learnt online. :class:`SlackReserve` (the previous default, registered as
``slack_reserve``, and the fallback where the plan's grid does not fit) is described here:
spend slack on waiting, keep a reserve for changeovers.

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

from pricing.deadline import Action, Decision, PolicyInput, cap_margin, changeover_allowance, cost_headroom, reliable, slack


def span(seconds: float) -> str:
    """A duration for a decision's reason: ``45 s``, ``12 min``, ``3.5 h`` (never ``0.0 h``)."""
    if round(seconds) < 60:
        return f"{max(seconds, 0):.0f} s"
    if round(seconds / 60) < 60:  # 3570 s read "60 min", and 59.6 s "60 s"
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def no_dearer_than_spot(inp: PolicyInput) -> Decision | None:
    """Off spot, when the reliable tier to hand (a free on-prem pool, or on-demand) costs no more an hour than spot:
    take it now. Spot could only cost as much or more for the same work, with a changeover and a loss besides, and a
    wait makes nothing cheaper — the job would run on the same tier later at the same price — so it only delays the
    job. Weighed by the plan, running now and waiting tie, and a float's rounding chose: in a sweep, queued jobs with
    deadlines waited for spot, at random by their history, beside a free pool at half spot's price."""
    if inp.on_spot or inp.reliable_ratio > 1.0:
        return None
    if not (inp.onprem_available if inp.reliable is Action.ONPREM else inp.ondemand_available):
        return None
    what = "the free on-prem pool" if inp.reliable is Action.ONPREM else "on-demand"
    return reliable(inp, f"{what} costs no more an hour than spot: run there now (waiting for spot could not make "
                         f"the job cheaper)")


def no_reliable_tier(inp: PolicyInput) -> bool:
    """Whether the job has no reliable tier at all: no on-demand price (no on-demand offer fits it: a task that asks
    for spot only, ``use_spot: true``) and no on-prem pool. Then there is nothing to fall back on and no on-demand
    line to save money against: waiting for spot only spends slack. (An on-demand zone or pool that is merely full
    now is still a tier: its price is known.)"""
    return inp.onprem_ratio is None and not inp.ondemand_available and not inp.price_ratio < 1e3


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
        for zone in sorted(inp.spot_zones_available):  # sorted: dict order (and so float sums) never depends on str hashing
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
        """The cheapest zone with spot now, then the one with the longest expected run."""
        if not inp.spot_zones_available:
            return None
        return max(sorted(inp.spot_zones_available), key=lambda z: (-inp.spot_price(z), self.expected_run(z)))

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
        if (cheap := no_dearer_than_spot(inp)) is not None:
            return cheap
        zone = self.best_zone(inp)
        if zone is not None:
            up_for = self.zones[zone].up_for if zone in self.zones else 0.0
            if not inp.on_reliable:
                # with no reliable tier there is neither money to save against on-demand nor a fallback: waiting for
                # spot to prove itself only spent the job's slack (a spot-only job 5 min from its deadline waited 2 min,
                # placed at last by the safety net)
                if saved < tick_h and up_for < t.confirm_ticks * inp.tick - 1e-6 and spare - inp.tick >= 0 \
                        and not no_reliable_tier(inp):
                    # not "just appeared": up_for counts from this job's first look (its submit, or the broker's
                    # start), and the zone may have been up long before. Words that stay the same while it waits
                    # (a count of seconds left rewrote the job's stored reason at every engine tick), and no
                    # parentheses: the engine puts the reason in its own
                    return Decision(Action.WAIT, None, f"spot in {zone} has not yet been seen to last: this job's "
                                                       f"policy has watched it only since the job's submit or the "
                                                       f"broker's start, and no money is saved yet against on-demand; it takes spot once "
                                                       f"it has seen it up for {span(t.confirm_ticks * inp.tick)}, "
                                                       f"{t.confirm_ticks} ticks of its policy — a zone up at its "
                                                       f"first look counts as up for one")
                if no_reliable_tier(inp):
                    return Decision(Action.SPOT, zone, f"spot is available in {zone}, and the job may run only on spot "
                                                       f"(no on-demand or pool offer fits it): taken at once")
                return Decision(Action.SPOT, zone, f"spot is available in {zone}")
            run = self.expected_run(zone)
            worth = (k - 1) * min(run, inp.remaining) > d * (1 + k)
            proof = t.confirm_minutes if saved >= self.hop_cost(inp) else t.credit_minutes
            if worth and up_for >= proof * 60 - 1e-6 and spare >= 2 * d + inp.tick:
                return Decision(Action.SPOT, zone, f"spot back in {zone} for {span(up_for)}; an expected {span(run)} run pays for two changeovers")
            return reliable(inp, "spot is back but a hop would not pay for its changeovers yet")
        reserve = self.reserve(inp, self.best_known_zone())
        if saved + changeover_allowance(inp) < self.hop_cost(inp) + tick_h:
            reserve = min(reserve, t.reserve_base * d)  # no hop affordable later: reliable would be for good
        if inp.on_reliable:
            if spare - d + inp.changeover_left > reserve + t.idle_margin * d:
                return Decision(Action.WAIT, None, "slack well above the reserve: stop paying for on-demand and wait for spot")
            return reliable(inp, "no spot and slack at the reserve: keep running on the reliable tier")
        if spare - inp.tick >= reserve:
            return Decision(Action.WAIT, None, f"no spot; {span(spare)} of slack above a {span(reserve)} reserve")
        return reliable(inp, f"no spot and slack down to the {span(reserve)} reserve")


# --------------------------------------------------------------------------------------------
# Model-predictive control: a DP over a semi-Markov availability model learnt online
# --------------------------------------------------------------------------------------------

AGE_EDGES = (1, 2, 3, 5, 9, 17, 33)  # age buckets of a spot up- or down-run, in planning steps; the last is open
_BIG = 1e9


@dataclass(frozen=True)
class MPCTuning:
    """Constants of :class:`ModelPredictive`; generic, chosen on the training windows only.

    Hazard of a run (up or down) ending in its ``a``-th planning step: ``alpha / (beta + a)``
    — decreasing with age, as spot runs are heavy-tailed — with ``alpha`` per direction
    learnt online from the job's own history and shrunk towards the prior.
    """

    beta: float = 2.0  # hazard shape: the age at which the hazard has halved from ``alpha / beta``
    alpha_up: float = 1.0  # prior hazard scale of a spot up-run (mean up-run ≈ 8 steps)
    alpha_down: float = 1.0  # prior hazard scale of a down-run
    prior_weight: float = 3.0  # the prior counts as this many observed run ends
    plan_step: float = 600.0  # seconds per planning step (at least the tick)
    work_units: int = 5  # work grid: plan_step / work_units (120 s: exact for 600 s ticks and d = 0.2 h)
    horizon_steps: int = 480  # the plan looks at most this many steps ahead (longer jobs get longer steps)
    log_bin: float = 0.2  # the learnt hazard scales are rounded to e^0.2 steps so solved plans can be shared
    max_work_steps: int = 8000  # beyond this many work units, fall back to SlackReserve
    failover_weight: float = 1.0  # prior of the failover chance: 0, counting as this many run ends
    proof_minutes: float = Tuning.credit_minutes  # a hop off the reliable tier on the cap's credit waits for a run this old (the rules' hour)


def _bucket(age: int) -> int:
    b = 0
    while b + 1 < len(AGE_EDGES) and age >= AGE_EDGES[b + 1]:
        b += 1
    return b


def _bucket_hazards(alpha: float, beta: float) -> list[float]:
    """Per age bucket, the chance a run ends in its next step: ``alpha / (beta + a)`` averaged
    over the bucket's ages (the open last bucket over ``lo..2 lo``), at most 0.95."""
    out = []
    for b, lo in enumerate(AGE_EDGES):
        hi = AGE_EDGES[b + 1] - 1 if b + 1 < len(AGE_EDGES) else 2 * lo
        out.append(min(alpha * sum(1.0 / (beta + a) for a in range(lo, hi + 1)) / (hi - lo + 1), 0.95))
    return out


def chain_from_hazards(down, up, failover: float = 0.0):
    """Markov chain over (up/down, age bucket), state ``side * len(AGE_EDGES) + bucket``: a run
    ends with its bucket's hazard (``down``/``up``, one per bucket), else ages stochastically
    through the buckets. ``failover``: the chance that, when an up-run ends, another zone has
    spot at that moment — the chain then goes to a new up-run (age 1) instead of down."""
    import numpy as np

    n_b = len(AGE_EDGES)
    t = np.zeros((2 * n_b, 2 * n_b))
    for side, hazards in ((0, down), (1, up)):
        for b in range(n_b):
            h = hazards[b]
            adv = 1.0 / (AGE_EDGES[b + 1] - AGE_EDGES[b]) if b + 1 < n_b else 0.0
            i = side * n_b + b
            jump = failover if side == 1 else 0.0
            t[i, (1 - side) * n_b] += h * (1 - jump)
            t[i, n_b] += h * jump
            t[i, side * n_b + min(b + 1, n_b - 1)] += (1 - h) * adv
            t[i, i] += (1 - h) * (1 - adv)
    return t


def _transition(alpha_up: float, alpha_down: float, beta: float, failover: float = 0.0):
    """The model's chain: hazards ``alpha / (beta + age)`` per direction (:func:`chain_from_hazards`);
    ``failover`` is 0 with one zone."""
    return chain_from_hazards(_bucket_hazards(alpha_down, beta), _bucket_hazards(alpha_up, beta), failover)


class _Plan:
    """Solved decisions ``[n steps left, holding, availability state, work units left]`` →
    0 wait, 1 spot, 2 reliable, stored per row as change points (rows are piecewise constant)."""

    def __init__(self, dec):
        import numpy as np

        self.shape = dec.shape
        rows = dec.reshape(-1, dec.shape[-1])
        change = rows[:, 1:] != rows[:, :-1]
        r, c = np.nonzero(change)
        self.indptr = np.concatenate([[0], np.cumsum(change.sum(1))])
        self.pos = (c + 1).astype(np.int32)
        self.val = rows[r, c + 1]
        self.first = rows[:, 0].copy()

    def get(self, n: int, h: int, s: int, w: int) -> int:
        import numpy as np

        row = int(np.ravel_multi_index((n, h, s), self.shape[:3]))
        a, b = self.indptr[row], self.indptr[row + 1]
        i = int(np.searchsorted(self.pos[a:b], w, "right"))
        return int(self.first[row] if i == 0 else self.val[a + i - 1])


_PLANS: dict[tuple, _Plan] = {}


def solve_plan(chain, k: float, dc: int, q: int, n_steps: int, w_max: int) -> _Plan:
    """Backward DP for the least expected cost (spot 1, reliable ``k`` per step) to finish
    ``w`` work units within ``n`` steps, over holdings {idle, spot phase j, reliable phase j}
    (j = steps since the changeover of ``dc`` work units began, capped once it is over) and the
    availability ``chain`` (:func:`chain_from_hazards`: the model's is :func:`_transition`; the
    clairvoyant bound of ``benchmarks/policy_bound.py`` measures one on the window).
    Unfinished at the deadline costs ``_BIG``. A held instance lives while its run does: in a
    down state, or in an up-run of age 1 (reached only as a failover to another zone), the
    job holds nothing."""
    import numpy as np

    t = np.asarray(chain).astype(np.float32)
    n_b = len(AGE_EDGES)
    jmax = max(math.ceil(dc / q), 1)
    prog = [max(q - max(dc - j * q, 0), 0) for j in range(jmax + 1)]
    big, kk, one = np.float32(_BIG), np.float32(k), np.float32(1.0)
    v = np.full((1 + 2 * jmax, 2 * n_b, w_max + 1), big, np.float32)
    v[:, :, 0] = 0.0
    dec = np.zeros((n_steps + 1, 1 + jmax, 2 * n_b, w_max + 1), np.int8)

    def then(x, p, c):  # cost c now, then x at p fewer work units (≤ 0: done)
        y = np.empty_like(x)
        if p:
            y[:, p:] = x[:, :-p] + c
            y[:, :p] = c
        else:
            np.add(x, c, out=y)
        return y

    def choose(out_v, out_d, wait, spot, rel):
        m = np.minimum(wait, spot)
        out_d[...] = spot < wait
        np.putmask(out_d, rel <= m, 2)  # ties (and hopeless states) go reliable
        np.minimum(m, rel, out=out_v)

    for n in range(1, n_steps + 1):
        e = np.matmul(t, v)
        e[:, :, 0] = 0.0
        spot_new = then(e[1], prog[0], one)
        spot_new[:n_b] = big
        nv = np.empty_like(v)
        choose(nv[0], dec[n, 0], e[0], spot_new, then(e[1 + jmax], prog[0], kk))
        for j in range(1, jmax + 1):
            stay = then(e[min(j + 1, jmax)], prog[j], one)  # holding spot: stay while it is up
            nv[j] = nv[0]
            np.minimum(nv[j, n_b + 1:], stay[n_b + 1:], out=nv[j, n_b + 1:])
            choose(nv[jmax + j], dec[n, j], e[0], spot_new, then(e[jmax + min(j + 1, jmax)], prog[j], kk))
        np.minimum(nv, big, out=nv)
        nv[:, :, 0] = 0.0
        v = nv
    return _Plan(dec)


def cached_plan(alpha_up: float, alpha_down: float, beta: float, failover: float, k: float, dc: int, q: int, n_steps: int,
                w_max: int) -> _Plan:
    """The plan on the model's chain (:func:`_transition`), solved once per distinct arguments."""
    key = (alpha_up, alpha_down, beta, failover, k, dc, q, n_steps, w_max)
    plan = _PLANS.get(key)
    if plan is None:
        if len(_PLANS) > 4000:
            _PLANS.clear()
        plan = _PLANS[key] = solve_plan(_transition(alpha_up, alpha_down, beta, failover), k, dc, q, n_steps, w_max)
    return plan


@dataclass
class RunModel:
    """Online history of one availability process: run ends and hazard-weighted exposure."""

    up: bool | None = None
    age_seconds: float = 0.0
    ends: dict = field(default_factory=lambda: {True: 0.0, False: 0.0})
    exposure: dict = field(default_factory=lambda: {True: 0.0, False: 0.0})
    best_ends: float = 0.0  # ends of the run a job would hold (the longest-running zone's) ...
    failovers: float = 0.0  # ... and how many of them found another zone with spot at that moment


def _unpaid(inp: PolicyInput) -> str:
    """Where the budget left would not pay for on-demand to finish the job, the words that say so beside a reason that
    counts on on-demand's time: "9 min to spare before on-demand would have to finish the job" was said of a job whose
    budget covered spot only, as if on-demand were its way out. "" otherwise (no budget, or one that pays for it)."""
    if inp.budget is None:
        return ""
    need = (inp.remaining + inp.changeover) / 3600 * inp.reliable_ratio
    return "; in time, not in money: the budget left would not pay for on-demand" \
        if inp.budget - inp.spent < need - 1e-9 else ""


@dataclass
class ModelPredictive:
    """Model-predictive control: each tick, the least-expected-cost action under a
    semi-Markov model of spot availability learnt online from this job's own history.

    The model: spot is up or down; a run ending in its ``a``-th planning step has hazard
    ``alpha / (beta + a)``; ``alpha`` for up- and down-runs is the maximum-likelihood fit
    to the runs this job has seen (ends ÷ hazard-shape-weighted exposure), shrunk towards
    a generic prior. With several zones, up-runs are each zone's own (what an instance
    lives through; pooled over zones) and down-runs are spells with no zone up (what the
    job waits through); the zone taken is the one whose run has lasted longest, and its
    age is the plan's; when that run ends, another zone may be up (a failover: a new
    instance, no wait), with a chance learnt from the job's history too. The plan is an
    exact backward DP over (steps left, work left, holding, up/down and age bucket) on a
    grid of ``plan_step`` seconds (:func:`solve_plan`); solved plans are shared across
    ticks and jobs by the rounded hazard scales. Held spot is kept while it is up. A hop
    off the reliable tier on the cost cap's credit waits for a proven run
    (:meth:`unproven_hop_on_credit`). Nothing looks into the future of a trace. Falls
    back to :class:`SlackReserve` where the grid does not fit (a very long job, no
    on-demand price).
    """

    tuning: MPCTuning = field(default_factory=MPCTuning)
    name: str = "mpc"
    zones: SlackReserve = field(default_factory=SlackReserve)
    model: RunModel = field(default_factory=RunModel)
    step: float | None = None  # planning step, fixed at the job's first tick

    def observe(self, inp: PolicyInput) -> None:
        was_up = {z: h.up_for > 0 for z, h in self.zones.zones.items()}
        held = self._preferred((z for z, up in was_up.items() if up), inp)  # the zone a job would have held
        self.zones.observe(inp)
        t, m = self.tuning, self.model
        if held is not None and held not in inp.spot_zones_available:
            m.best_ends += 1.0
            m.failovers += 1.0 if inp.spot_zones_available else 0.0
        if self.step is None:
            self.step = max(t.plan_step, inp.tick, (inp.deadline - inp.now) / t.horizon_steps)
        # Up-runs are what an instance lives through: each zone's own runs, pooled over zones.
        for zone, h in self.zones.zones.items():
            if h.up_for > 0:
                m.exposure[True] += (inp.tick / self.step) / (t.beta + max(h.up_for / self.step, 1.0))
            elif was_up.get(zone):
                m.ends[True] += 1.0
        # Down-runs are what a job waits through: no usable zone has spot.
        if inp.spot_zones_available:
            if m.up is False:
                m.ends[False] += 1.0
            m.up, m.age_seconds = True, max(h.up_for for h in self.zones.zones.values())
        else:
            if m.up is not False:
                m.up, m.age_seconds = False, 0.0
            m.age_seconds += inp.tick
            m.exposure[False] += (inp.tick / self.step) / (t.beta + max(m.age_seconds / self.step, 1.0))

    def best_zone(self, inp: PolicyInput) -> str | None:
        """The cheapest zone with spot now (zones are priced apart live, never in a trace
        replay); among those, the one whose spot run has lasted longest (the hazard falls
        with age), then the one with the longest expected run; the plan's up-run age is
        that zone's."""
        return self._preferred(inp.spot_zones_available, inp)

    def _preferred(self, zones, inp: PolicyInput) -> str | None:
        runs = self.zones.zones
        return max(sorted(zones), key=lambda z: (-inp.spot_price(z), runs[z].up_for, self.zones.expected_run(z)),
                   default=None)

    def unproven_hop_on_credit(self, inp: PolicyInput, zone: str) -> bool:
        """Whether a hop off the reliable tier to spot in ``zone`` would be paid on credit — its
        worst case (lost after its unproductive first tick, then a second changeover back) not
        covered by money already saved, so drawn from the cost cap's allowance — onto a run
        younger than ``proof_minutes``, with no other zone up to fail over to. The plan knows
        nothing of the cap; a few such hops lost use the allowance up, and from then on the cap
        holds the job on the reliable tier to its end, however long spot then lasts."""
        return (inp.on_reliable and len(inp.spot_zones_available) == 1
                and self.zones.zones[zone].up_for < self.tuning.proof_minutes * 60 - 1e-6
                and cap_margin(inp, Action.SPOT, zone) < changeover_allowance(inp) - 1e-9)

    def failover(self) -> float:
        """Chance that another zone has spot when the held zone's run ends (0 with one zone),
        rounded to tenths so plans can be shared."""
        m = self.model
        return round(m.failovers / (m.best_ends + self.tuning.failover_weight), 1)

    def alphas(self) -> tuple[float, float]:
        t, m = self.tuning, self.model
        w = t.prior_weight
        return tuple((m.ends[side] + w) / (m.exposure[side] + w / prior) for side, prior in ((True, t.alpha_up), (False, t.alpha_down)))  # type: ignore[return-value]

    def plan(self, k: float, dc: int, w_max: int) -> _Plan:
        """The solved plan for the model as learnt so far (on-demand ratio ``k``, changeover ``dc``
        and job ``w_max`` in work units), shared across ticks and jobs by the rounded hazard scales."""
        t = self.tuning
        au, ad = self.alphas()
        bu, bd = round(math.log(au) / t.log_bin), round(math.log(ad) / t.log_bin)
        return cached_plan(math.exp(bu * t.log_bin), math.exp(bd * t.log_bin), t.beta, self.failover(), k, dc, t.work_units,
                           t.horizon_steps, w_max)

    def decide(self, inp: PolicyInput) -> Decision:
        if inp.remaining <= 0:
            return reliable(inp, "work estimate used up: finish on the reliable tier")
        if inp.on_spot:
            return Decision(Action.SPOT, inp.holding.zone, "stay on spot while it lasts")  # type: ignore[union-attr]
        if (cheap := no_dearer_than_spot(inp)) is not None:
            return cheap
        t = self.tuning
        step = self.step or max(t.plan_step, inp.tick)
        unit = step / t.work_units
        w_max = math.ceil(inp.work_total / unit - 1e-9)
        k = inp.reliable_ratio
        if w_max > t.max_work_steps or not (0 < k < 1e3):
            return self.zones.decide(inp)
        n = min(math.floor((inp.deadline - inp.now) / step + 1e-9), t.horizon_steps)
        if n <= 0:
            # Under a planning step left the plan has no grid to weigh spot on. Spot is still no risk to the deadline
            # where losing it just before the job's end leaves on-demand the time to run all of it again: a 30 s job
            # 10 min before its deadline went to on-demand as "too close to risk losing spot", and a dry run a second
            # earlier, a whole step left, said spot. "no planning step left" was the model's word, not the user's
            left, zone, spare = max(inp.deadline - inp.now, 0), self.best_zone(inp), slack(inp)
            # to the second where rounding would say it is as far as the step ("10 min away, less than the 10 min")
            away = span(left) if span(left) != span(step) else f"{left:.0f} s"
            close = f"the deadline is {away} away, less than the {span(step)} this policy plans spot in"
            if spare < inp.remaining + inp.changeover - 1e-6:
                return reliable(inp, f"{close}: too close to risk losing spot")
            if left > 0 and zone is not None and not inp.on_reliable:
                return Decision(Action.SPOT, zone, f"spot in {zone}: {close}, but spot lost just before the job's end "
                                                   f"would still leave on-demand the time to run all of it "
                                                   f"({span(spare)} to spare{_unpaid(inp)})")
            why = "no spot is up" if zone is None else "it runs on the reliable tier already" if inp.on_reliable \
                else "it has passed"
            return reliable(inp, f"{close}, and {why}: it finishes on the reliable tier")
        dc = max(round(inp.changeover / unit), 0)
        plan = self.plan(round(k, 3), dc, w_max)
        w = min(math.ceil(inp.remaining / unit - 1e-9), w_max)
        s = (len(AGE_EDGES) if self.model.up else 0) + _bucket(max(math.ceil(self.model.age_seconds / step - 1e-9), 1))
        jmax = max(math.ceil(dc / t.work_units), 1)
        j = 0
        if inp.on_reliable:
            j = jmax if inp.changeover_left <= 0 else max(jmax - math.ceil(inp.changeover_left / step - 1e-9), 1)
        a = plan.get(n, j, s, w)
        zone = self.best_zone(inp)
        if a == 1 and zone is not None and self.unproven_hop_on_credit(inp, zone):
            return reliable(inp, f"spot in {zone} has been seen up for {span(self.zones.zones[zone].up_for)} and no money saved "
                                 f"against on-demand would pay for losing it: wait for it to last {self.tuning.proof_minutes:.0f} min")
        if a == 1 and zone is not None:
            up = self.zones.zones[zone].up_for
            # what this job's policy has seen of the zone, since its submit or the broker's start: "up for 1 min" was
            # read as the zone's own uptime, of a zone up for an hour before the job came
            seen = f"seen up for {span(up)}" if up > 0 else "just seen up"
            return Decision(Action.SPOT, zone, f"plan: spot in {zone} ({seen}) is cheapest in expectation, with "
                                               f"{span(max(slack(inp), 0.0))} to spare before on-demand would have to "
                                               f"finish the job{_unpaid(inp)}")
        if a == 0:
            return Decision(Action.WAIT, None, f"plan: wait for spot ({span(inp.remaining)} of work, {span(inp.deadline - inp.now)} left)")
        return reliable(inp, "plan: the reliable tier is cheaper in expectation than waiting for spot")
