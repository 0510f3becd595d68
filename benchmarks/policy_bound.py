"""How far a better availability model could take the broker's policy: a clairvoyant bound.

    nice -n 10 .venv/bin/python benchmarks/policy_bound.py            # the paper's 2,400 windows (~5 min)
    nice -n 10 .venv/bin/python benchmarks/policy_bound.py --training # the 500 training windows (~1 min)
    nice -n 10 .venv/bin/python benchmarks/policy_bound.py --zones    # the multi-zone windows (~3 min)

A diagnostic, not a policy: it **looks into the future**. For each window it measures the
window's own spot statistics over its whole length — per side (up, down) and per age bucket of
the plan (``AGE_EDGES``), the share of runs that end at that age (ends ÷ steps lived, lightly
smoothed) — and gives that chain to the broker's plan (``solve_plan(chain, ...)``) in place
of the model it learns online. Everything else is the broker's: the same DP, the same hop rule,
the same safety net and cost cap, C = 48 h, d = 0.2 h, k = 3.145, the same six deadlines.

The figure says what the plan reaches when it knows, from the first tick, how this window's spot
runs and outages are distributed (a little of the realized future leaks in with it: a bucket that
holds one run ending says where that run ended). A causal policy whose model has this form
cannot be expected to do better; see docs/policy.md.

With ``--zones`` it also separates the zone choice: where the broker takes spot it takes the up
zone whose run has lasted longest; told instead which up zone's run will last longest from now
(and nothing else), or that and the window's hazards, the policy shows what a perfect zone choice
is worth — the most any per-zone model could add.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from itertools import groupby
from multiprocessing import Pool
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from policy import ALL9, C, D, DATA, DEADLINES, EAST1, K, multi_zone_windows, training_windows  # noqa: E402

from pricing.loading import read_windows  # noqa: E402
from pricing.optimum import min_cost_by_tick  # noqa: E402
from pricing.policy import SafetyNet  # noqa: E402
from pricing.simulate import simulate  # noqa: E402
from pricing.spot_policy import AGE_EDGES, ModelPredictive, _bucket, chain_from_hazards, solve_plan  # noqa: E402

KNOWN = {"hazards": "the window's hazards", "zone": "which up zone lasts longest", "both": "both"}
SMOOTH = 0.5  # steps of exposure added to each bucket, with 0.3 of an end: no hazard is exactly 0 or 1


def _count_runs(series: np.ndarray, side: int, ends: np.ndarray, lived: np.ndarray) -> None:
    runs = [(s, len(list(g))) for s, g in groupby(series.astype(int).tolist())]
    for i, (s, length) in enumerate(runs):
        if s != side:
            continue
        for age in range(1, length + 1):
            lived[side, _bucket(age)] += 1
        if i < len(runs) - 1:  # the last run is cut by the window's end, not ended
            ends[side, _bucket(length)] += 1


def window_chain(avail: np.ndarray) -> np.ndarray:
    """The plan's availability chain with each bucket's hazard measured on the whole window
    (``avail``: zones × ticks). As the broker's model has it: up-runs are each zone's own, pooled
    over zones; down-runs are spells with no zone up; an up-run that ends while another zone is
    up is a failover (to a new up-run), with the share of such ends measured too."""
    n_b = len(AGE_EDGES)
    ends, lived = np.zeros((2, n_b)), np.zeros((2, n_b))
    for zone in avail:
        _count_runs(zone, 1, ends, lived)
    _count_runs(avail.any(0), 0, ends, lived)
    up_ends = [(z, t) for z in range(avail.shape[0]) for t in range(1, avail.shape[1]) if avail[z, t - 1] and not avail[z, t]]
    failover = sum(bool(avail[:, t].any()) for _, t in up_ends) / len(up_ends) if up_ends else 0.0
    hazard = np.clip((ends + 0.3 * SMOOTH) / (lived + SMOOTH), 0.005, 0.95)
    return chain_from_hazards(hazard[0], hazard[1], failover)


@dataclass
class Clairvoyant(ModelPredictive):
    """The broker's policy (every rule of ``ModelPredictive.decide``) planning on a given chain
    instead of the one it learns online, and/or taking, where it takes spot, the zone whose run
    will last longest (``future``: zones × ticks) instead of the one that has lasted longest —
    the plan's up-run age stays the longest-lasting zone's, as the broker's."""

    chain: np.ndarray | None = None
    future: np.ndarray | None = None
    _plan = None
    _tick: int = -1

    def observe(self, inp):
        super().observe(inp)
        self._tick += 1

    def plan(self, k, dc, w_max):
        if self.chain is None:
            return super().plan(k, dc, w_max)
        if self._plan is None:
            self._plan = solve_plan(self.chain, k, dc, self.tuning.work_units, self.tuning.horizon_steps, w_max)
        return self._plan

    def best_zone(self, inp):
        if self.future is None:
            return super().best_zone(inp)
        return max(sorted(inp.spot_zones_available), key=self._lasts, default=None)

    def _lasts(self, zone: str) -> int:
        """Ticks the zone's current run lasts from now on (the zone's name is ``z<row>``)."""
        ahead = self.future[int(zone[1:]), self._tick:]
        return len(ahead) if ahead.all() else int(np.argmin(ahead))


def one_window(w: dict) -> list[tuple]:
    """Rows (deadline, cost, optimum, finished); ``w["know"]`` says what the policy is told of the
    future: ``"hazards"`` (the window's chain, the default), ``"zone"`` or ``"both"``."""
    gap = int(w["gap_seconds"])
    avail = np.atleast_2d(np.asarray(w["available"]) > 0)
    deadlines = w.get("deadlines", DEADLINES)
    know = w.get("know", "hazards")
    best = min_cost_by_tick(avail, gap=gap, work=C, changeover=D, price_ratio=K, ticks=max(deadlines) * 3600 // gap)
    chain = window_chain(avail) if know in ("hazards", "both") else None
    future = avail if know in ("zone", "both") else None
    zones = [f"z{i}" for i in range(avail.shape[0])] if avail.shape[0] > 1 else None
    plan = None
    rows = []
    for R in deadlines:  # one plan serves every deadline: it is solved for the longest horizon
        policy = Clairvoyant(name="clairvoyant", chain=chain, future=future)
        policy._plan = plan
        r = simulate(SafetyNet(policy), avail, gap=gap, work=C, deadline=R * 3600, changeover=D, price_ratio=K, zones=zones)
        plan = policy._plan
        rows.append((R, r.cost, float(best[R * 3600 // gap - 1]), r.finished))
    return rows


def table(label: str, rows: list[tuple], deadlines) -> list[str]:
    ratios = sorted(r[1] / r[2] for r in rows)
    per = " | ".join(f"{sum(r[1] for r in rows if r[0] == R) / sum(r[2] for r in rows if r[0] == R):.3f}" for R in deadlines)
    return [f"| {label} | {sum(r[1] for r in rows) / sum(r[2] for r in rows):.3f} | {per} | "
            f"{ratios[int(0.9 * len(ratios))]:.3f} | {sum(not r[3] for r in rows)} |"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--training", action="store_true", help="the 500 training windows instead of the paper's")
    ap.add_argument("--zones", action="store_true", help="the benchmark's multi-zone windows instead (2-month trace, R = 60 h)")
    ap.add_argument("--mz-windows", type=int, default=100)
    args = ap.parse_args()
    t0 = time.time()
    with Pool(2) as pool:
        if args.zones:
            print(f"Clairvoyant bound: multi-zone windows of benchmarks/policy.py ({args.mz_windows} per set, seed 1), R = 60 h\n")
            print("| zones | known in advance | overall ×opt | R=60 h | p90 per window | misses |\n|---|---|---|---|---|---|")
            for label, zones in (("4 zones us-east-1", EAST1), ("all 9 zones", ALL9)):
                sampled = multi_zone_windows(zones, args.mz_windows)
                for know, said in KNOWN.items():
                    windows = [{"gap_seconds": 600, "available": a, "deadlines": (60,), "know": know} for a in sampled]
                    rows = [r for rs in pool.imap(one_window, windows, chunksize=2) for r in rs]
                    print("\n".join(table(f"{label} | {said}", rows, (60,))), flush=True)
        else:
            windows = training_windows() if args.training else list(read_windows(DATA / "cant-be-late-windows.jsonl"))
            rows = [r for rs in pool.imap(one_window, windows, chunksize=4) for r in rs]
            print(f"Clairvoyant bound: {'training' if args.training else 'paper'} windows, {len(windows)} × {len(DEADLINES)} deadlines\n")
            print("| plan's model | overall ×opt | " + " | ".join(f"R={R} h" for R in DEADLINES) + " | p90 per window | misses |")
            print("|---" * (4 + len(DEADLINES)) + "|")
            print("\n".join(table("each window's own hazards, known in advance", rows, DEADLINES)))
    print(f"\n({time.time() - t0:.0f} s on 2 workers)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
