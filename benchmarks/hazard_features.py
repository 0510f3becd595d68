"""What other features would add to the policy's availability model, measured as prediction.

    .venv/bin/python benchmarks/hazard_features.py      # a few seconds

Not a benchmark of the broker: a check of the data behind a design choice (docs/policy.md). The
policy's model gives a spot run (up or down) that has lasted ``a`` steps the hazard
``alpha / (beta + a)`` of ending in the next, with one ``alpha`` per side. Each candidate feature
splits ``alpha`` by a few bins of it — ``alpha(side, bin) / (beta + a)``, each bin shrunk to the
side's ``alpha`` — and asks whether that foresees run ends better:

* the hour of the day (spot's level follows the clock in these traces), in 4, 8 or 24 bins;
* the length of the previous run of the same side, and of the other side (memory across runs);
* how often spot flipped in the last 6 hours (a volatile or a calm regime).

Each single-node trace (the 2-month ones resampled to 600 s) is split in half; every model is fit
on the first half and scored by log-likelihood on the second, against the model as it is. For
scale, the same score for the age effect itself: one hazard per side that ignores age.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pricing.loading import read_trace  # noqa: E402
from pricing.simulate_cli import resample  # noqa: E402

TRACES = ROOT.parent / "shared" / "data" / "spot-traces" / "availability" / "1-node"
BETA = 2.0  # the policy's hazard shape (MPCTuning.beta)
GAP = 600
DAY = 86400 // GAP
SHRINK = 3.0  # each bin is shrunk to the side's alpha with the weight of this many run ends


def _length_bin(n: int | None) -> int:
    return 0 if n is None else 1 if n <= 1 else 2 if n <= 4 else 3 if n <= 16 else 4


def _flips_bin(n: int) -> int:
    return 0 if n == 0 else 1 if n <= 2 else 2 if n <= 5 else 3


FEATURES: dict[str, Callable[[dict], int]] = {
    "hour, 4 bins": lambda f: (f["tick"] % DAY) * 4 // DAY,
    "hour, 8 bins": lambda f: (f["tick"] % DAY) * 8 // DAY,
    "hour, 24 bins": lambda f: (f["tick"] % DAY) * 24 // DAY,
    "previous run, same side": lambda f: _length_bin(f["prev_same"]),
    "previous run, other side": lambda f: _length_bin(f["prev_other"]),
    "flips in the last 6 h": lambda f: _flips_bin(f["flips_6h"]),
}


def steps(up: list[bool]) -> list[tuple[bool, int, bool, dict]]:
    """Per tick after the first: (side, age of its run in ticks, did the run end, features)."""
    out, side, age, prev, flips = [], up[0], 1, {True: None, False: None}, []
    for t in range(1, len(up)):
        features = {"tick": t, "prev_same": prev[side], "prev_other": prev[not side],
                    "flips_6h": sum(1 for f in flips if f > t - 6 * 3600 // GAP)}
        ended = up[t] != side
        out.append((side, age, ended, features))
        if ended:
            prev[side] = age
            flips.append(t)
            side, age = up[t], 1
        else:
            age += 1
    return out


def fit(obs, feature: Callable[[dict], int] | None) -> dict:
    """Maximum-likelihood ``alpha`` per side (ends ÷ exposure weighted by 1/(beta + age)), and per
    side and feature bin shrunk to it."""
    alpha: dict = {}
    for side in (True, False):
        mine = [o for o in obs if o[0] == side]
        overall = sum(o[2] for o in mine) / sum(1 / (BETA + o[1]) for o in mine)
        alpha[side, None] = overall
        if feature is not None:
            for b in {feature(o[3]) for o in obs}:
                sel = [o for o in mine if feature(o[3]) == b]
                ends, exposure = sum(o[2] for o in sel), sum(1 / (BETA + o[1]) for o in sel)
                alpha[side, b] = (ends + SHRINK) / (exposure + SHRINK / overall)
    return alpha


def loglik(obs, alpha: dict, feature: Callable[[dict], int] | None) -> float:
    total = 0.0
    for side, age, ended, f in obs:
        h = min(alpha[side, None if feature is None else feature(f)] / (BETA + age), 0.95)
        total += math.log(h if ended else 1 - h)
    return total


def ignoring_age(train, test) -> float:
    rate = {s: sum(o[2] for o in train if o[0] == s) / sum(1 for o in train if o[0] == s) for s in (True, False)}
    return sum(math.log(rate[s] if ended else 1 - rate[s]) for s, _, ended, _ in test)


def main() -> int:
    names = ["hazard ignores age"] + [f"alpha per side and {n}" for n in FEATURES]
    totals, per_trace, ends_total = [0.0] * len(names), {n: [] for n in names}, 0
    for path in sorted(TRACES.glob("*/*.json")):
        gap, data = read_trace(path)
        obs = steps([bool(x) for x in resample(data, gap, GAP)])
        train, test = obs[: len(obs) // 2], obs[len(obs) // 2:]
        base = loglik(test, fit(train, None), None)
        gains = [ignoring_age(train, test) - base] + [loglik(test, fit(train, f), f) - base for f in FEATURES.values()]
        ends_total += sum(o[2] for o in test)
        for i, (name, g) in enumerate(zip(names, gains)):
            totals[i] += g
            per_trace[name].append(g)
    print(f"{len(per_trace[names[0]])} traces, {ends_total} held-out run ends; log-likelihood against the policy's model (positive = better)\n")
    print("| model | nats | per run end | traces better / worse | range per trace |")
    print("|---|---:|---:|---|---|")
    for name, total in zip(names, totals):
        g = per_trace[name]
        print(f"| {name} | {total:+.1f} | {total / ends_total:+.4f} | {sum(x > 0.05 for x in g)} / {sum(x < -0.05 for x in g)} "
              f"| {min(g):+.1f} to {max(g):+.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
