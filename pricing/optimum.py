"""The omniscient optimum: an exact dynamic program on the simulator's tick grid.

It knows the whole trace, so it is a yardstick, never a policy. Same model as
:mod:`pricing.simulate`. State after a tick: progress (in units of the gcd of
tick, changeover and job length, so progress is exact), what the job holds
(idle, on-demand, or spot in zone z) and how many ticks ago that instance's
changeover began (capped once it is over). The minimum cost to reach each
state is carried forward tick by tick, vectorized over progress with numpy.
"""

from __future__ import annotations

import math

import numpy as np


def min_cost_by_tick(
    available: np.ndarray,
    *,
    gap: int,
    work: int,
    changeover: int,
    price_ratio: float,
    ticks: int,
) -> np.ndarray:
    """``best[t]``: the least cost to finish within the first ``t + 1`` ticks (inf if impossible).

    One forward pass serves every deadline: the optimum for a deadline of
    ``n`` ticks is ``best[n - 1]``.
    """
    avail = np.atleast_2d(np.asarray(available) > 0)[:, :ticks]
    n_zones, ticks = avail.shape
    unit = math.gcd(math.gcd(int(gap), int(changeover)), int(work))
    need = work // unit
    k_max = max(math.ceil(changeover / gap), 0)
    # progress in the j-th tick since a changeover began
    prog = [max(gap - max(changeover - j * gap, 0), 0) // unit for j in range(k_max + 1)]
    hour = gap / 3600
    price = np.array([price_ratio * hour] + [hour] * n_zones)  # index 0 on-demand, 1.. spot zones
    inf = np.inf
    n_inst = 1 + n_zones
    # F[i, j, p]: instance i, j = ticks run since its changeover began (capped at k_max), progress p
    F = np.full((n_inst, k_max + 1, need), inf)
    idle = np.full(need, inf)
    idle[0] = 0.0
    best = np.full(ticks, inf)
    done_so_far = inf

    def advance(src: np.ndarray, step: int, cost: float, dest: np.ndarray) -> float:
        """dest[p + step] = min(dest, src[p] + cost); returns the cheapest finish."""
        if step == 0:
            np.minimum(dest, src + cost, out=dest)
            return inf
        if step < need:
            np.minimum(dest[step:], src[: need - step] + cost, out=dest[step:])
        tail = src[max(need - step, 0):]
        return float(tail.min()) + cost if tail.size else inf

    for t in range(ticks):
        per_inst = F.min(axis=1)  # (n_inst, need): any phase
        any_state = np.minimum(per_inst.min(axis=0), idle)
        G = np.full_like(F, inf)
        finished = inf
        for i in range(n_inst):
            if i > 0 and not avail[i - 1, t]:
                continue
            # arrive new: from idle or any other instance
            others = np.delete(per_inst, i, axis=0)
            src_new = np.minimum(idle, others.min(axis=0)) if others.size else idle
            j_next = min(1, k_max)
            finished = min(finished, advance(src_new, prog[0], price[i], G[i, j_next]))
            # continue on the same instance
            for j in range(k_max + 1):
                finished = min(finished, advance(F[i, j], prog[j], price[i], G[i, min(j + 1, k_max)]))
        done_so_far = min(done_so_far, finished)
        best[t] = done_so_far
        F = G
        idle = any_state
    return best
