"""Replay spot availability traces through a policy: the paper's model (§3.1), pure.

The model, tick by tick (ticks of ``gap`` seconds, availability known per tick
and per zone):

1. a spot instance is lost at the start of a tick whose availability is 0;
2. the policy sees the job (:class:`PolicyInput`) and decides;
3. a move to a new instance (from idle, from the other tier, or to another
   zone) starts a changeover of ``changeover`` seconds: billed, no progress;
4. a tick on an instance makes ``gap − changeover still left`` seconds of
   progress and is billed whole at that instance's price (spot 1, on-demand
   ``price_ratio`` per hour); idle is free;
5. the job is done when progress reaches its length; it misses if that is
   after the deadline.

Actions are recorded one character a tick: ``I`` idle, ``O`` on-demand,
``S`` spot (one zone) or ``0``–``9`` (the zone's index, several zones). The
cost follows from the actions alone: ``(spot ticks + ratio × on-demand ticks) × gap / 3600``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pricing.deadline import Action, Holding, PolicyInput
from pricing.offers import Tier


@dataclass(frozen=True)
class Run:
    actions: str
    cost: float
    finished: bool
    finish_seconds: float | None  # from the start; None if not done within the horizon
    spot_hours: float
    ondemand_hours: float
    progress: float


def zone_chars(n_zones: int) -> list[str]:
    return ["S"] if n_zones == 1 else [str(i) for i in range(n_zones)]


def simulate(
    policy,
    available: np.ndarray,
    *,
    gap: float,
    work: float,
    deadline: float,
    changeover: float,
    price_ratio: float,
    zones: Sequence[str] | None = None,
    work_told: float | None = None,
    changeover_told: float | None = None,
    horizon: float | None = None,
    budget: float | None = None,
) -> Run:
    """Run ``policy`` over ``available`` (zones × ticks, >0 = spot up) from tick 0.

    ``work_told`` / ``changeover_told`` are what the policy is told (to test
    misestimates); the replay uses ``work`` and ``changeover``. The replay
    stops when the job is done or at ``horizon`` (default: the deadline).
    ``budget`` is the user's budget in spot-hours, as the policy sees it.
    """
    avail = np.atleast_2d(np.asarray(available) > 0)
    n_zones, n_ticks = avail.shape
    zones = list(zones) if zones is not None else [f"zone{i}" for i in range(n_zones)]
    if len(zones) != n_zones or len(set(zones)) != n_zones:  # a repeated name would merge two zones' availability
        raise ValueError(f"zones must name each of the {n_zones} zones once, got {zones!r}")
    chars = zone_chars(n_zones)
    index = {z: i for i, z in enumerate(zones)}
    told_work = work if work_told is None else work_told
    told_changeover = changeover if changeover_told is None else changeover_told
    last = min(int((horizon if horizon is not None else deadline) // gap + 1e-9), n_ticks)
    up_sets = [frozenset(zones[i] for i in np.flatnonzero(avail[:, t])) for t in range(last)]

    holding: Holding | None = None
    left = 0.0
    done = 0.0
    out: list[str] = []
    n_spot = n_od = 0
    finish = None
    for t in range(last):
        up = up_sets[t]
        if holding is not None and holding.tier is Tier.SPOT and holding.zone not in up:
            holding, left = None, 0.0
        inp = PolicyInput(
            now=t * gap,
            deadline=deadline,
            work_total=told_work,
            work_done=done,
            changeover=told_changeover,
            holding=holding,
            spot_zones_available=up,
            tick=gap,
            changeover_left=left,
            price_ratio=price_ratio,
            spent=(n_spot + price_ratio * n_od) * gap / 3600,
            budget=budget,
        )
        policy.observe(inp)
        decision = policy.decide(inp)
        if decision.action is Action.SPOT and decision.zone in up:
            target = Holding(Tier.SPOT, decision.zone)
        elif decision.action in (Action.ONDEMAND, Action.ONPREM):
            target = Holding(Tier.ONDEMAND)
        else:
            target = None  # WAIT, or spot where there is none: idle
        if target is None:
            holding, left = None, 0.0
            out.append("I")
            continue
        if target != holding:
            holding, left = target, changeover
        done += max(gap - left, 0.0)
        left = max(left - gap, 0.0)
        if target.tier is Tier.SPOT:
            n_spot += 1
            out.append(chars[index[target.zone]])
        else:
            n_od += 1
            out.append("O")
        if done >= work - 1e-6:
            finish = (t + 1) * gap
            break
    hours = gap / 3600
    return Run(
        actions="".join(out),
        cost=(n_spot + price_ratio * n_od) * hours,
        finished=finish is not None and finish <= deadline + 1e-6,
        finish_seconds=finish,
        spot_hours=n_spot * hours,
        ondemand_hours=n_od * hours,
        progress=min(done, work),
    )
