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

    .venv/bin/python benchmarks/hazard_features.py --cross-zone   # a few seconds

scores, the same way and per side (up-runs ending, down-runs ending) and per release, what the other
traces of the same release showed at the tick before the one predicted (their present and past,
never this tick): whether another zone left this zone's side (came up while this one is down, went
down while it is up) or joined it in the last 1 or 3 ticks, the share of them on the other side, the
age of the youngest of their runs. The traces of a release share their start date, tick and length,
so they are aligned tick for tick (and many pairs flip together at lag 0 far more often than one
tick apart). "Which others": all the other traces of the release, those of the same region, or
(October only, where all 8 are us-west-2) the other instance types of the same zone. For scale, the
information the clairvoyant bound hands the plan: each 554-tick stretch of the held-out half scored
with its own per-age-bucket hazards, fit on itself.
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


def run_ages(x: list[bool]) -> list[int]:
    """The age of each tick's run in ticks (1 at a flip)."""
    ages, age = [], 0
    for t, v in enumerate(x):
        age = age + 1 if t and v == x[t - 1] else 1
        ages.append(age)
    return ages


def _share_bin(n: int, of: int) -> int:
    return 0 if n == 0 else 4 if n == of else 1 + min(2, 3 * n // of)


def cross_features(side: bool, t: int, others: list[tuple[list[bool], list[int]]]) -> dict:
    """What the other traces showed at tick ``t - 1`` (never ``t``) for a run of ``side``."""
    states = [(o[t - 1], a[t - 1]) for o, a in others]
    return {
        "away": min((a for v, a in states if v != side), default=None),  # youngest run that left this side
        "toward": min((a for v, a in states if v == side), default=None),  # youngest that joined it
        "n_away": sum(v != side for v, _ in states), "n": len(states),
        "youngest": min(a for _, a in states),
    }


def _moves(f: dict, k: int) -> int:
    away, toward = f["away"] is not None and f["away"] <= k, f["toward"] is not None and f["toward"] <= k
    return 2 * away + toward


CROSS: dict[str, Callable[[dict], int]] = {
    "another zone left this side in the last tick": lambda f: _moves(f, 1) >> 1,
    "another zone left this side in the last 3 ticks": lambda f: _moves(f, 3) >> 1,
    "another zone joined this side in the last tick": lambda f: _moves(f, 1) & 1,
    "left / joined in the last 3 ticks (4 bins)": lambda f: _moves(f, 3),
    "share of other zones on the other side (5 bins)": lambda f: _share_bin(f["n_away"], f["n"]),
    "youngest run of the other zones": lambda f: _length_bin(f["youngest"]),
    "age of the youngest run that left this side": lambda f: _length_bin(f["away"]),
}


def _region(stem: str) -> str:
    zone = stem.split("_")[0]  # us-east-1a
    return zone[:-1]


def cross_steps(up: list[bool], others: dict[str, list[tuple[list[bool], list[int]]]]) -> list:
    """``steps(up)`` with the cross-zone features per group of other traces (``f[group][...]``)."""
    out = []
    for side, age, ended, f in steps(up):
        t = f["tick"]
        g = {name: cross_features(side, t, zs) for name, zs in others.items() if zs}
        out.append((side, age, ended, {**f, **g}))
    return out


def side_loglik(obs, alpha: dict, feature) -> dict[bool, float]:
    total = {True: 0.0, False: 0.0}
    for side, age, ended, f in obs:
        a = alpha[side, None] if feature is None else alpha.get((side, feature(f)), alpha[side, None])
        h = min(a / (BETA + age), 0.95)  # a bin not seen in the first half: the side's alpha
        total[side] += math.log(h if ended else 1 - h)
    return total


GROUPS: dict[str, Callable[[str, str], bool]] = {
    "all others": lambda me, o: True,
    "same region": lambda me, o: _region(o) == _region(me),
    "same zone": lambda me, o: o.split("_")[0] == me.split("_")[0],  # other instance types (October only)
}


WINDOW = 554  # ticks in one of the paper's windows


def _bucket(age: int) -> int:
    """The policy's age buckets: 1, 2, 3–4, 5–8, 9–16, 17–32, 33+ steps."""
    return min(6, (age - 1).bit_length())


def own_hazards_gain(test, alpha: dict) -> dict[bool, tuple[float, int]]:
    """Per side: log-likelihood of each whole ``WINDOW``-tick stretch of ``test`` under its own hazard per age
    bucket (fit on the stretch itself) minus that under ``alpha``, and the run ends it covers."""
    out = {True: [0.0, 0], False: [0.0, 0]}
    for start in range(0, len(test) - WINDOW + 1, WINDOW):
        stretch = test[start:start + WINDOW]
        base = side_loglik(stretch, alpha, None)
        for side in (True, False):
            own = 0.0
            for b in range(7):
                sel = [o[2] for o in stretch if o[0] == side and _bucket(o[1]) == b]
                e, n = sum(sel), len(sel)
                if 0 < e < n:
                    own += e * math.log(e / n) + (n - e) * math.log(1 - e / n)
            out[side][0] += own - base[side]
            out[side][1] += sum(o[2] for o in stretch if o[0] == side)
    return {side: (v[0], v[1]) for side, v in out.items()}


def cross_zone() -> int:
    models = [(feature, g, fn) for feature, fn in CROSS.items() for g in GROUPS]
    # gains[model][release][side]: one entry per trace that has such other traces
    gains: dict = {(m[0], m[1]): {} for m in models}
    ends: dict = {}
    clairvoyant_nats: dict = {}
    clairvoyant_ends: dict = {}
    releases = sorted({p.parent for p in TRACES.glob("*/*.json")})
    for release in releases:
        series = {}
        for path in sorted(release.glob("*.json")):
            gap, data = read_trace(path)
            series[path.stem] = [bool(x) for x in resample(data, gap, GAP)]
        if len({len(x) for x in series.values()}) != 1:
            raise SystemExit(f"{release.name}: the traces differ in length, so they are not aligned tick for tick")
        ages = {k: run_ages(v) for k, v in series.items()}
        ends[release.name] = {True: 0, False: 0}
        clairvoyant_nats[release.name], clairvoyant_ends[release.name] = {True: 0.0, False: 0.0}, {True: 0, False: 0}
        for model in gains.values():
            model[release.name] = {True: [], False: []}
        for me, up in series.items():
            others = {g: [(series[o], ages[o]) for o in series if o != me and keep(me, o)] for g, keep in GROUPS.items()}
            obs = cross_steps(up, others)
            train, test = obs[: len(obs) // 2], obs[len(obs) // 2:]
            base = side_loglik(test, fit(train, None), None)
            for s in (True, False):
                ends[release.name][s] += sum(o[2] for o in test if o[0] == s)
            own = own_hazards_gain(test, fit(train, None))
            for s in (True, False):
                clairvoyant_nats[release.name][s] += own[s][0]
                clairvoyant_ends[release.name][s] += own[s][1]
            for name, g, fn in models:
                if others[g]:
                    feature = (lambda fn, g: lambda f: fn(f[g]))(fn, g)
                    scored = side_loglik(test, fit(train, feature), feature)
                    for s in (True, False):
                        gains[name, g][release.name][s].append(scored[s] - base[s])
    names = [r.name for r in releases]
    clairvoyant = {n: {s: clairvoyant_nats[n][s] / clairvoyant_ends[n][s] for s in (True, False)} for n in names}
    print(f"{sum(len(list(r.glob('*.json'))) for r in releases)} traces; held-out run ends (up / down): "
          + ", ".join(f"{n} {ends[n][True]} / {ends[n][False]}" for n in names)
          + ". Log-likelihood gain against the policy's model, nats per run end of that side (positive = better);"
          " then, per release, the traces better / worse by more than 0.05 nats (up-runs; down-runs)\n")
    head = " | ".join(f"{n} up | {n} down" for n in names)
    print(f"| other traces at the tick before | which others | {head} | traces better / worse |")
    print("|---|---|" + "---:|---:|" * len(names) + "---|")
    for name, g, _ in models:
        cells, counts = [], []
        for n in names:
            for s in (True, False):
                x = gains[name, g][n][s]
                cells.append(f"{sum(x) / ends[n][s]:+.4f}" if x else "—")
            if gains[name, g][n][True]:
                counts.append("; ".join(f"{sum(v > 0.05 for v in gains[name, g][n][s])} / "
                                        f"{sum(v < -0.05 for v in gains[name, g][n][s])}" for s in (True, False)))
            else:
                counts.append("—")
        print(f"| {name} | {g} | {' | '.join(cells)} | {' · '.join(counts)} |")
    print("\nFor scale, in the same units: each 554-tick stretch of the held-out halves scored with its own per-age-bucket"
          " hazards (fit on itself, i.e. knowing its future: the information of benchmarks/policy_bound.py): "
          + ", ".join(f"{n} {clairvoyant[n][True]:+.3f} up / {clairvoyant[n][False]:+.3f} down" for n in names))
    return 0


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
    raise SystemExit(cross_zone() if "--cross-zone" in sys.argv[1:] else main())
