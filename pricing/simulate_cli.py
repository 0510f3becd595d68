"""``broker simulate``: replay spot availability traces through a policy (a thin edge).

Parses arguments, reads traces with :mod:`pricing.loading`, runs
:func:`pricing.simulate.simulate` (and, with ``--optimum``, the exact DP of
:mod:`pricing.optimum`), and prints one JSON object per window (``--json``) or
a summary table.

Cost units: as the paper normalizes them — spot costs 1 per hour and
on-demand ``--price-ratio`` (k) per hour, billed per whole tick — unless
``--spot-price`` gives spot's $/h, in which case ``cost`` is that times the
normalized cost (dollars). The reported cost always follows from ``actions``:
``(spot ticks + k × on-demand ticks) × gap / 3600``.

Examples::

    python -m pricing.simulate_cli --windows ../shared/data/cant-be-late-windows.jsonl \\
        --policy uniform_progress --job-hours 48 --deadline-hours 60 --json
    python -m pricing.simulate_cli --zones a.json,b.json,c.json --windows 20 --seed 1
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import numpy as np

from pricing.loading import read_trace, read_windows
from pricing.money import MICROS_PER_DOLLAR, AmountTooLarge, DecimalComma, MoneyError, TooPrecise, to_micros
from pricing.optimum import min_cost_by_tick
from pricing.policy import DEFAULT_POLICY, POLICIES, make_policy
from pricing.simulate import simulate


class _Usage(Exception):
    """An option argparse refused (unknown, missing, of the wrong type): raised rather than exited on, so that
    :func:`main` says it as every other refusal is said (one JSON object too, under ``--json``)."""

    def __init__(self, parser: argparse.ArgumentParser, message: str):
        super().__init__(message)
        self.parser, self.message = parser, message


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[override]
        raise _Usage(self, message)


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="broker simulate", description="Replay spot availability traces through a spot/on-demand policy.")
    p.add_argument("--windows", required=True, help="a windows .jsonl file, or with --zones the number of windows to sample")
    p.add_argument("--zones", help="comma-separated spot-traces .json files aligned in time, one per zone")
    p.add_argument("--seed", type=int, help="seed for sampling windows from --zones (default 0)")
    p.add_argument("--policy", default=DEFAULT_POLICY, help=f"one or more of {', '.join(POLICIES)} (comma-separated; default {DEFAULT_POLICY})")
    p.add_argument("--job-hours", type=float, default=48.0, help="the job's useful work C (default 48)")
    p.add_argument("--deadline-hours", type=float, default=60.0, help="the deadline R from the window's start (default 60)")
    p.add_argument("--changeover-hours", type=float, default=0.2, help="the changeover delay d of every move (default 0.2)")
    p.add_argument("--price-ratio", type=float, default=3.145, help="on-demand price ÷ spot price (k; default 3.145)")
    p.add_argument("--spot-price", help="spot $/h (2.50 or $2.50); costs are then reported in dollars")
    p.add_argument("--budget", help="the user's budget, in the units of cost: dollars with --spot-price, read as "
                   "`broker submit --budget` reads them ($100, 1,000.50), else spot-hours; one that covers "
                   "on-demand only is never exceeded")
    p.add_argument("--gap-seconds", type=int, help="the job's tick with --zones (default: the traces' finest tick)")
    p.add_argument("--told-job-hours", type=float, help="job length the policy is told (default: the real one)")
    p.add_argument("--told-changeover-hours", type=float, help="changeover the policy is told (default: the real one)")
    p.add_argument("--optimum", action="store_true", help="also report the omniscient optimum per window")
    p.add_argument("--limit", type=int, help="only the first N windows of a file")
    p.add_argument("--json", action="store_true", help="one JSON object per window and policy")
    return p


MAX_ZONES = 10  # actions name a zone by one digit


def resample(data: list[int], gap: int, to_gap: int) -> np.ndarray:
    """A trace at tick ``to_gap``: each new tick takes the value in force at its start."""
    n = (len(data) * gap) // to_gap
    idx = (np.arange(n) * to_gap) // gap
    return np.asarray(data)[idx] > 0


def zone_names(files: list[str]) -> list[str]:
    """Each zone's name, its file's stem; stems that repeat (the same trace name from two
    folders, or one file twice) get ``#index`` so that no two zones share a name."""
    stems = [Path(f).stem for f in files]
    return [s if stems.count(s) == 1 else f"{s}#{i}" for i, s in enumerate(stems)]


def zone_windows(files: list[str], count: int, seed: int, ticks: int, gap: int | None) -> tuple[int, Iterator[dict]]:
    traces = [read_trace(Path(f)) for f in files]
    job_gap = gap or min(g for g, _ in traces)
    series = [resample(d, g, job_gap) for g, d in traces]
    length = min(len(s) for s in series)
    if any(len(s) != length for s in series):
        longest = max(len(s) for s in series)
        print(f"note: the traces hold {length} to {longest} ticks of {job_gap} s; windows are drawn from the first "
              f"{length}, which all of them cover", file=sys.stderr)
    matrix = np.stack([s[:length] for s in series])
    if length < ticks:
        raise SystemExit(f"the traces hold {length} ticks, fewer than the {ticks} a window needs")
    rng = random.Random(seed)
    names = zone_names(files)

    def gen() -> Iterator[dict]:
        for i in range(count):
            start = rng.randrange(0, length - ticks + 1)
            yield {"trace": "+".join(names), "window": i, "gap_seconds": job_gap, "start_tick": start, "zones": names, "available": matrix[:, start : start + ticks]}

    return job_gap, gen()


def _told(args) -> tuple[float, float]:
    """The job length and changeover (hours) the policy is told: the real ones unless given apart."""
    return (args.told_job_hours or args.job_hours,
            args.changeover_hours if args.told_changeover_hours is None else args.told_changeover_hours)


def _zone_files(args) -> list[str]:
    return [f.strip() for f in (args.zones or "").split(",")]


HOURS_OPTIONS = ("job_hours", "deadline_hours", "changeover_hours", "told_job_hours", "told_changeover_hours")
"""The options given in hours, which the replay counts in whole seconds (:func:`seconds`)."""


def seconds(hours: float) -> int:
    """``hours`` in seconds, exactly as typed (``0.2`` is 720 s, not 720.0000000000001 rounded). :func:`_check` has
    refused a length that is not a whole number of seconds: rounding one (``--deadline-hours 48.3333`` to the tick
    that ends 0.12 s after it, ``--job-hours 0.0001`` to no work at all) replayed another job than the one asked
    for, and its costs disagreed with the model's."""
    return int(Decimal(repr(hours)) * 3600)


def _check(args) -> None:
    """Refuse nonsense before any work, naming the option and the reason."""
    positive = {"--job-hours": args.job_hours, "--deadline-hours": args.deadline_hours, "--price-ratio": args.price_ratio,
                "--gap-seconds": args.gap_seconds, "--told-job-hours": args.told_job_hours}
    for flag, value in positive.items():
        if value is not None and not (math.isfinite(value) and value > 0):
            raise SystemExit(f"{flag}: must be a number > 0, got {value!r}")
    for flag, value in {"--changeover-hours": args.changeover_hours, "--told-changeover-hours": args.told_changeover_hours}.items():
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise SystemExit(f"{flag}: must be a number ≥ 0, got {value!r}")
    for name in HOURS_OPTIONS:
        value = getattr(args, name)
        exact = None if value is None else Decimal(repr(value)) * 3600
        if exact is not None and exact % 1:
            raise SystemExit(f"--{name.replace('_', '-')}: {value!r} h is {exact.normalize():f} s; the replay counts time "
                             "in whole seconds (ticks, changeovers and progress): give a whole number of seconds")
    if args.limit is not None and args.limit < 1:
        raise SystemExit(f"--limit: the number of windows to replay, ≥ 1 (leave it out for all), got {args.limit}")
    # What the policy is told must fit (a real job longer than it was told may run past the deadline:
    # that is the robustness replay); a job that cannot fit even as told is a mistake in the options.
    told_job, told_changeover = _told(args)
    if args.deadline_hours < told_job + told_changeover:
        raise SystemExit(f"--deadline-hours: {args.deadline_hours:g} h is shorter than the job ({told_job:g} h) plus one "
                         f"changeover ({told_changeover:g} h): no policy can finish in time")
    if args.zones is not None and not any(_zone_files(args)):
        raise SystemExit("--zones: name at least one spot-traces .json file (comma-separated)")
    if args.zones is not None and not all(_zone_files(args)):
        raise SystemExit(f"--zones: an empty file name in {args.zones!r} (a comma too many?)")
    if args.zones and not (args.windows.isdigit() and int(args.windows) > 0):
        raise SystemExit(f"--windows: with --zones, the number of windows to sample (a whole number > 0), got {args.windows!r}")
    if args.zones and len(_zone_files(args)) > MAX_ZONES:
        raise SystemExit(f"--zones: at most {MAX_ZONES} zones (actions name each zone by one digit, 0-9)")
    if not args.zones:
        for flag, value in (("--gap-seconds", args.gap_seconds), ("--seed", args.seed)):
            if value is not None:
                raise SystemExit(f"{flag}: only with --zones (a windows file carries its own ticks and windows)")


def _decimal(flag: str, text: str | None, *, positive: bool = False) -> Decimal | None:
    if text is None:
        return None
    try:
        value = Decimal(text)
    except ArithmeticError:
        raise SystemExit(f"{flag}: {text!r} is not a number") from None
    if not (value.is_finite() and (value > 0 if positive else value >= 0)):
        raise SystemExit(f"{flag}: {text!r} must be a number {'> 0' if positive else '≥ 0'}")
    return value


def _dollars(flag: str, text: str | None, *, positive: bool = False, exact: bool = False) -> Decimal | None:
    """An amount of dollars read as ``broker submit --budget`` reads one (:func:`pricing.money.to_micros`: ``$100``,
    ``100$``, ``1,000.50``; a decimal comma refused): `--budget '$100'` was "not a number" here. ``exact``, for a
    cap: a fraction of a micro-dollar is refused rather than rounded up past what was written."""
    if text is None:
        return None
    try:
        value = Decimal(to_micros(text, exact=exact)) / MICROS_PER_DOLLAR
    except (AmountTooLarge, TooPrecise, DecimalComma) as exc:
        raise SystemExit(f"{flag}: {text!r} {exc}") from None
    except MoneyError:
        raise SystemExit(f"{flag}: {text!r} is not a number") from None
    if not (value > 0 if positive else value >= 0):
        raise SystemExit(f"{flag}: {text!r} must be a number {'> 0' if positive else '≥ 0'}")
    return value


def run(argv: list[str] | None = None, out=sys.stdout) -> list[dict]:
    args = parser().parse_args(argv)
    names = [n.strip() for n in args.policy.split(",") if n.strip()]
    if not names:
        raise SystemExit(f"--policy: name at least one of {', '.join(POLICIES)}")
    for name in names:
        if name not in POLICIES:
            raise SystemExit(f"unknown policy {name!r}; known: {', '.join(POLICIES)}")
    _check(args)
    scale = _dollars("--spot-price", args.spot_price, positive=True)
    if args.spot_price is None and args.budget is not None and "$" in args.budget:
        raise SystemExit(f"--budget: {args.budget!r} is in dollars, but without --spot-price costs are in spot-hours: "
                         "give --spot-price (spot's $/h) too, or the budget in spot-hours")
    budget = _dollars("--budget", args.budget, exact=True) if scale is not None else _decimal("--budget", args.budget)
    if budget is not None:
        budget = float(budget / scale if scale else budget)
    try:
        return _replay(args, names, scale, budget, out)
    except BrokenPipeError:  # the reader went away: broker.cli exits quietly
        raise
    except (OSError, ValueError) as exc:  # a missing or malformed trace or windows file: one line, no traceback
        raise SystemExit(f"error: {exc.strerror + ': ' + str(exc.filename) if isinstance(exc, OSError) and exc.filename else exc}") from None


def _replay(args, names: list[str], scale: Decimal | None, budget: float | None, out) -> list[dict]:
    work, deadline, changeover = seconds(args.job_hours), seconds(args.deadline_hours), seconds(args.changeover_hours)
    told = sum(seconds(hours) for hours in _told(args))  # job + changeover, seconds, as the policy is told
    if args.zones is not None:
        files = _zone_files(args)
        probe_gap = args.gap_seconds or min(read_trace(Path(f))[0] for f in files)
        _, windows = zone_windows(files, int(args.windows), args.seed or 0, -(-deadline // probe_gap), args.gap_seconds)  # whole ticks that reach the deadline
    else:
        windows = read_windows(Path(args.windows))
    ratio = Decimal(repr(args.price_ratio))  # as typed: costs are summed exactly, never in binary fractions
    results = []
    for n, w in enumerate(windows):
        if args.limit is not None and n >= args.limit:
            break
        gap = int(w["gap_seconds"])
        avail = np.atleast_2d(np.asarray(w["available"]) > 0)
        where = f"{w.get('trace')} window {w.get('window', n)}"
        if avail.shape[0] > MAX_ZONES:
            raise SystemExit(f"{where}: {avail.shape[0]} zones; at most {MAX_ZONES} (actions name each zone by one digit)")
        if avail.shape[1] * gap < deadline:
            raise SystemExit(f"{where}: {avail.shape[1]} ticks of {gap} s ({avail.shape[1] * gap / 3600:g} h) end before the "
                             f"deadline ({args.deadline_hours:g} h), so runs would be cut off there: use a shorter --deadline-hours")
        needed = -(-told // gap)  # as the policy is told (a longer real job is the robustness replay)
        if needed > deadline // gap:
            raise SystemExit(f"--deadline-hours: with {gap} s ticks the job needs {needed} whole ticks "
                             f"({needed * gap / 3600:g} h, ticks are billed and progress whole) but the deadline "
                             f"holds {deadline // gap}: no policy can finish in time")
        zones = w.get("zones") or ([w["trace"]] if avail.shape[0] == 1 else [f"zone{i}" for i in range(avail.shape[0])])
        optimum = None
        if args.optimum:
            best = min_cost_by_tick(avail, gap=gap, work=work, changeover=changeover, price_ratio=args.price_ratio, ticks=deadline // gap)
            optimum = float(best[-1]) if np.isfinite(best[-1]) else None
        for name in names:
            r = simulate(
                make_policy(name, cost_cap=name == DEFAULT_POLICY), avail, gap=gap, work=work, deadline=deadline, changeover=changeover,
                price_ratio=args.price_ratio, zones=zones,
                work_told=seconds(args.told_job_hours) if args.told_job_hours else None,
                changeover_told=None if args.told_changeover_hours is None else seconds(args.told_changeover_hours),
                horizon=min(avail.shape[1] * gap, 2 * deadline),
                budget=budget,
            )
            row = {
                "trace": w.get("trace"), "window": w.get("window", n), "policy": name, "gap_seconds": gap,
                "cost": _money(_normalized_cost(r.actions, gap, ratio), scale), "finished": r.finished,
                "finish_hours": None if r.finish_seconds is None else r.finish_seconds / 3600,
                "spot_hours": r.spot_hours, "ondemand_hours": r.ondemand_hours,
                "ondemand_only_cost": _money(-(-(work + changeover) // gap) * gap * ratio / 3600, scale),
                "actions": r.actions,
            }
            if "start_tick" in w:
                row["start_tick"] = w["start_tick"]
            if args.optimum:
                row["optimum"] = None if optimum is None else _money(optimum, scale)
            results.append(row)
            if args.json:
                print(json.dumps(row), file=out)
    if not results:
        raise SystemExit(f"no windows in {args.windows}")
    if not args.json:
        print(summary(results, dollars=args.spot_price is not None), file=out)
        if not args.optimum:
            print("vs optimum: add --optimum (the omniscient optimum of each window, a dynamic program)", file=out)
        if budget is not None:
            print(f"budget {args.budget}: the broker's cost cap keeps each of its runs within it when it covers "
                  f"on-demand only; the paper's baselines run without a cap and ignore it", file=out)
    return results


def _normalized_cost(actions: str, gap: int, ratio: Decimal) -> Decimal:
    """The cost ``actions`` bill, exactly: ``(spot ticks + k × on-demand ticks) × gap / 3600``."""
    ondemand = actions.count("O")
    spot = len(actions) - ondemand - actions.count("I")
    return (spot + ratio * ondemand) * gap / 3600


def _money(normalized: Decimal | float, scale: Decimal | None) -> float:
    """Normalized cost to 9 decimals, or dollars to the micro-dollar with ``--spot-price``."""
    exact = normalized if isinstance(normalized, Decimal) else Decimal(repr(normalized))
    if scale is None:
        return float(exact.quantize(Decimal("1e-9")))
    return float((exact * scale).quantize(Decimal("0.000001")))


def summary(rows: list[dict], *, dollars: bool = False) -> str:
    """One line a policy. Costs are in spot-hours (spot 1/h, on-demand k/h), or dollars with ``dollars``;
    "vs optimum" needs ``--optimum``."""
    unit = "mean cost ($)" if dollars else "mean cost (spot-h)"
    lines = [f"{'policy':<18}{'windows':>8}{unit:>20}{'misses':>8}{'> on-demand':>13}{'vs optimum':>12}"]
    for name in dict.fromkeys(r["policy"] for r in rows):
        mine = [r for r in rows if r["policy"] == name]
        cost = sum(r["cost"] for r in mine)
        opt = [r.get("optimum") for r in mine]
        ratio = f"{cost / sum(opt):.3f}x" if opt and None not in opt and sum(opt) > 0 else "-"
        above = sum(r["cost"] > r["ondemand_only_cost"] + 1e-9 for r in mine)
        lines.append(f"{name:<18}{len(mine):>8}{cost / len(mine):>20.2f}{sum(not r['finished'] for r in mine):>8}{above:>13}{ratio:>12}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Exit 0, or 2 with one line on stderr for input it refuses (as argparse does for a bad option) and, with
    ``--json``, one ``{"error": ..., "field": "--option"}`` object on stdout, as the other commands write one: a
    script reading the output got nothing to parse."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        run(argv)
    except _Usage as exc:
        exc.parser.print_usage(sys.stderr)
        print(f"{exc.parser.prog}: error: {exc.message}", file=sys.stderr)
        _json_error(argv, exc.message)
        return 2
    except SystemExit as exc:
        if not isinstance(exc.code, str):
            raise  # --help: 0, printed already
        text = exc.code.removeprefix("error: ")
        print(f"error: {text}", file=sys.stderr)  # as the other commands
        _json_error(argv, text)
        return 2
    return 0


def _json_error(argv: list[str], sentence: str) -> None:
    if "--json" in argv:
        option = sentence.split(":", 1)[0]
        field = {"field": option} if option.startswith("--") and " " not in option else {}
        print(json.dumps({"error": sentence, **field}), flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
