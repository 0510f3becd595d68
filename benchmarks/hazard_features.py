"""What a feature of the clock would add to the policy's availability model, measured as prediction.

    .venv/bin/python benchmarks/hazard_features.py      # a few seconds

Not a benchmark of the broker: a check of the data behind a design choice (docs/policy.md). The
policy's model gives a spot run (up or down) that has lasted ``a`` steps the hazard
``alpha / (beta + a)`` of ending in the next, with one ``alpha`` per side. Spot's level in these
traces follows the hour of the day, so this asks whether hazards that vary with the hour too —
``alpha(side, hour bin) / (beta + a)`` — would foresee run ends better. Each single-node trace
(the 2-month ones resampled to 600 s) is split in half; every model is fit on the first half and
scored by log-likelihood on the second, per held-out run end, against the model as it is. For
scale, the same score for the age effect itself: a hazard per side that ignores age.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pricing.loading import read_trace  # noqa: E402
from pricing.simulate_cli import resample  # noqa: E402

TRACES = ROOT.parent / "shared" / "data" / "spot-traces" / "availability" / "1-node"
BETA = 2.0  # the policy's hazard shape (MPCTuning.beta)
GAP = 600
DAY = 86400 // GAP
BINS = (4, 8, 24)
SHRINK = 3.0  # each hour bin is shrunk to the side's alpha with the weight of this many run ends


def steps(up: list[bool]) -> list[tuple[bool, int, bool, int]]:
    """Per tick after the first: (side, age of its run in ticks, did the run end, tick)."""
    out, side, age = [], up[0], 1
    for t in range(1, len(up)):
        out.append((side, age, up[t] != side, t))
        side, age = (up[t], 1) if up[t] != side else (side, age + 1)
    return out


def hour_bin(t: int, bins: int) -> int:
    return (t % DAY) * bins // DAY


def fit(obs, bins: int) -> dict:
    """Maximum-likelihood ``alpha`` per side (ends ÷ exposure weighted by 1/(beta + age)), and per
    side and hour bin shrunk to it."""
    out = {}
    for side in (True, False):
        mine = [o for o in obs if o[0] == side]
        overall = sum(o[2] for o in mine) / sum(1 / (BETA + o[1]) for o in mine)
        for b in range(bins):
            sel = [o for o in mine if bins == 1 or hour_bin(o[3], bins) == b]
            ends, exposure = sum(o[2] for o in sel), sum(1 / (BETA + o[1]) for o in sel)
            out[side, b] = overall if bins == 1 else (ends + SHRINK) / (exposure + SHRINK / overall)
    return out


def loglik(obs, alpha: dict, bins: int) -> float:
    total = 0.0
    for side, age, ended, t in obs:
        h = min(alpha[side, 0 if bins == 1 else hour_bin(t, bins)] / (BETA + age), 0.95)
        total += math.log(h if ended else 1 - h)
    return total


def memoryless(train, test) -> float:
    rate = {s: sum(o[2] for o in train if o[0] == s) / sum(1 for o in train if o[0] == s) for s in (True, False)}
    return sum(math.log(rate[s] if ended else 1 - rate[s]) for s, _, ended, _ in test)


def main() -> int:
    files = sorted(TRACES.glob("*/*.json"))
    print(f"{'trace':<34} {'held-out ends':>13} {'no age':>8} " + " ".join(f"{f'{b} bins':>8}" for b in BINS))
    totals, ends_total = [0.0] * (1 + len(BINS)), 0
    for path in files:
        gap, data = read_trace(path)
        up = [bool(x) for x in resample(data, gap, GAP)]
        obs = steps(up)
        train, test = obs[: len(obs) // 2], obs[len(obs) // 2:]
        base = loglik(test, fit(train, 1), 1)
        gains = [memoryless(train, test) - base] + [loglik(test, fit(train, b), b) - base for b in BINS]
        ends = sum(o[2] for o in test)
        ends_total += ends
        totals = [a + g for a, g in zip(totals, gains)]
        print(f"{path.parent.name + '/' + path.stem:<34} {ends:>13} " + " ".join(f"{g:>+8.1f}" for g in gains))
    print(f"{'all, nats':<34} {ends_total:>13} " + " ".join(f"{g:>+8.1f}" for g in totals))
    print(f"{'all, nats per held-out run end':<34} {'':>13} " + " ".join(f"{g / ends_total:>+8.4f}" for g in totals))
    print("\nPositive: the model predicts held-out run ends better than the policy's (one alpha per side, hazard falling with age).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
