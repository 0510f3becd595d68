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
import itertools
import json
import math
import random
import re
import sys
from collections.abc import Iterator
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

import numpy as np

from pricing.loading import read_trace, window
from pricing.money import (MAX_DOLLARS, MICROS_PER_DOLLAR, AmountTooLarge, DecimalComma, MoneyError, NotPlain, TooPrecise,
                           to_micros)
from pricing.optimum import min_cost_by_tick
from pricing.policy import CAPPED_POLICIES, DEFAULT_POLICY, POLICIES, make_policy
from pricing.simulate import simulate


class _Usage(Exception):
    """An option argparse refused (unknown, missing, of the wrong type): raised rather than exited on, so that
    :func:`main` says it as every other refusal is said (one JSON object too, under ``--json``)."""

    def __init__(self, parser: argparse.ArgumentParser, message: str):
        super().__init__(message)
        self.parser, self.message = parser, message


class _Refused(SystemExit):
    """A refusal whose sentence names a file (its line, and what is wrong there) rather than beginning with the option
    to blame: ``field`` is the option that gave the file, for ``--json``'s ``field``. A ``SystemExit`` like every
    other refusal here, its code the sentence."""

    def __init__(self, sentence: str, field: str | None = None):
        super().__init__(sentence)
        self.field = field


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)  # `--job 6` was read as --job-hours; the rest of the CLI refuses it
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # type: ignore[override]
        raise _Usage(self, message + self._meant(message))

    def _meant(self, message: str) -> str:
        """`` (did you mean --budget?)`` after "unrecognized arguments: --budegt 5", as the rest of the CLI says it."""
        import difflib

        if not message.startswith("unrecognized arguments:"):
            return ""
        known = [o for o in self._option_string_actions if o.startswith("--")]
        given = [a.split("=")[0] for a in message.removeprefix("unrecognized arguments:").split() if a.startswith("--")]
        # one it begins first (`--job`: --job-hours, not --json), else the closest
        meant = [(g, close[0]) for g in given
                 for close in [[o for o in known if o.startswith(g)][:1] or difflib.get_close_matches(g, known, n=1,
                                                                                                     cutoff=0.6)]
                 if close]
        if not meant:
            return ""
        if len(given) == 1:
            return f" (did you mean {meant[0][1]}?)"
        return f" (did you mean {', '.join(f'{c} for {g}' for g, c in meant)}?)"


class _Typed(float):
    """A number as ``float`` reads it that keeps the text typed (``typed``), for a refusal to echo: `--job-hours 0`
    said "got 0.0"."""

    typed: str


def _float(text: str) -> float:
    value = _Typed(text)
    value.typed = text.strip()
    return value


_float.__name__ = "float"  # argparse's "invalid float value: 'lots'"


def _said(value: float) -> str:
    """``value`` as it was typed, or as ``:g`` writes a default."""
    return getattr(value, "typed", None) or f"{value:g}"


class _Once(argparse.Action):
    """An option that takes one value, refused when given twice, as ``broker``'s other commands refuse one
    (``broker.cli._Once``, which ``pricing`` cannot import): argparse kept the last, so `--job-hours 6 --job-hours 7`
    replayed a 7-hour job without a word."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = vars(namespace).setdefault("_given_once", set())
        if self.dest in given:
            before = getattr(namespace, self.dest)
            raise argparse.ArgumentError(self, f"given twice ({getattr(before, 'typed', before)}, then "
                                               f"{getattr(values, 'typed', values)}): give it once")
        given.add(self.dest)
        setattr(namespace, self.dest, values)


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="broker simulate", description="Replay spot availability traces through a spot/on-demand policy.")
    p.register("action", "once", _Once)
    p.add_argument("--windows", required=True, action="once", help="a windows .jsonl file, or with --zones the number of windows to sample")
    p.add_argument("--zones", action="once", help="comma-separated spot-traces .json files, one per zone, aligned by their "
                   "first tick only (the files hold no timestamps)")
    p.add_argument("--seed", type=int, action="once", help="seed for sampling windows from --zones (default 0); none is drawn twice, so "
                   "--windows is at most the number of different windows the traces hold")
    p.add_argument("--policy", default=DEFAULT_POLICY, action="once", help=f"one or more of {', '.join(POLICIES)} (comma-separated; default {DEFAULT_POLICY}); "
                        f"{' and '.join(CAPPED_POLICIES)} run with the cost cap, the paper's baselines without")
    p.add_argument("--job-hours", type=_float, default=48.0, action="once", help="the job's useful work C (default 48)")
    p.add_argument("--deadline-hours", type=_float, default=60.0, action="once", help="the deadline R from the window's start (default 60)")
    p.add_argument("--changeover-hours", type=_float, default=0.2, action="once", help="the changeover delay d of every move (default 0.2)")
    p.add_argument("--price-ratio", type=_float, default=3.145, action="once", help="on-demand price ÷ spot price (k; default 3.145); "
                   "below 1 on-demand is the cheaper tier, which the policies are not built for (k > 1)")
    p.add_argument("--spot-price", action="once", help="spot $/h (2.50 or $2.50); costs are then reported in dollars")
    p.add_argument("--budget", action="once", help="the user's budget, in the units of cost: dollars with --spot-price, read as "
                   "`broker submit --budget` reads them ($100, 1,000.50), else spot-hours, written the same way "
                   "without the $ (no exponent); one that covers on-demand only is never exceeded")
    p.add_argument("--gap-seconds", type=int, action="once", help="the job's tick with --zones (default: the traces' finest tick)")
    p.add_argument("--told-job-hours", type=_float, action="once", help="job length the policy is told (default: the real one)")
    p.add_argument("--told-changeover-hours", type=_float, action="once", help="changeover the policy is told (default: the real one)")
    p.add_argument("--optimum", action="store_true", help="also report the omniscient optimum per window")
    p.add_argument("--limit", type=int, action="once", help="only the first N windows of a file")
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


def _read_trace(file: str) -> tuple[int, list[int]]:
    """A ``--zones`` file, as :func:`pricing.loading.read_trace` reads it; whatever is wrong with it is one refusal
    naming the file. A file that is not UTF-8 text, or JSON nested past what the parser follows, was a traceback;
    so was ``Infinity`` among the data. A negative count of instances was read as "no spot"."""
    def refuse(why: str) -> _Refused:
        return _Refused(f"error: {file}: {why}", "--zones")

    try:
        gap, data = read_trace(Path(file))
    except UnicodeDecodeError as exc:
        raise refuse(f"not a spot-traces JSON file (not UTF-8 text: byte {exc.object[exc.start]:#04x} at offset "
                     f"{exc.start})") from None
    except RecursionError:
        raise refuse("not a spot-traces JSON file (lists nested too deeply to read)") from None
    except OverflowError:  # int(float('inf'))
        raise refuse("a spot-traces file needs metadata.gap_seconds and a data list of integers") from None
    except OSError as exc:
        raise _Refused(f"error: {exc.strerror}: {exc.filename or file}", "--zones") from None
    except ValueError as exc:  # what read_trace says is wrong: it names the file
        raise _Refused(f"error: {exc}", "--zones") from None
    tick = next((t for t, x in enumerate(data) if x < 0), None)
    if tick is not None:
        raise refuse(f"data holds {data[tick]} at tick {tick}: each tick is the number of spot instances available "
                     "then (1 = spot available, 0 = not), never below 0")
    return gap, data


def zone_windows(files: list[str], count: int, seed: int, deadline: int, gap: int | None) -> tuple[int, Iterator[dict]]:
    """``count`` windows sampled from the traces ``files`` (aligned at their first tick, resampled to ``gap``, by
    default the finest of theirs), each of the whole ticks that reach ``deadline`` (seconds)."""
    traces = [_read_trace(f) for f in files]
    job_gap = gap or min(g for g, _ in traces)
    ticks = -(-deadline // job_gap)  # whole ticks that reach the deadline
    series = [resample(d, g, job_gap) for g, d in traces]
    length = min(len(s) for s in series)
    if any(len(s) != length for s in series):
        longest = max(len(s) for s in series)
        print(f"note: the traces hold {length} to {longest} ticks of {job_gap} s; windows are drawn from the first "
              f"{length}, which all of them cover", file=sys.stderr)
    matrix = np.stack([s[:length] for s in series])
    if length < ticks:
        raise SystemExit(f"--zones: the traces hold {length} ticks of {job_gap} s ({length * job_gap / 3600:g} h), fewer "
                         f"than the {ticks} a window needs to reach the deadline ({deadline / 3600:g} h): use a "
                         "shorter --deadline-hours")
    starts = length - ticks + 1
    if count > starts:  # drawn without repeats: more than there are ran for ever (a million asked of 19,000)
        raise SystemExit(f"--windows: {count} windows asked, but the traces hold {starts} different windows of "
                         f"{ticks} ticks of {job_gap} s (one per first tick): ask for at most {starts}")
    rng = random.Random(seed)
    names = zone_names(files)

    def gen() -> Iterator[dict]:
        for i, start in enumerate(rng.sample(range(starts), count)):
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
            raise SystemExit(f"{flag}: must be a number > 0, got {_said(value)}")
    for flag, value in {"--changeover-hours": args.changeover_hours, "--told-changeover-hours": args.told_changeover_hours}.items():
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise SystemExit(f"{flag}: must be a number ≥ 0, got {_said(value)}")
    for name in HOURS_OPTIONS:
        value = getattr(args, name)
        exact = None if value is None else Decimal(repr(value)) * 3600
        # (not ``exact % 1``: past 28 digits, ``--job-hours 1e300``, that is DivisionImpossible, a traceback)
        if exact is not None and exact != exact.to_integral_value():
            raise SystemExit(f"--{name.replace('_', '-')}: {_said(value)} h is {exact.normalize():f} s; the replay counts time "
                             "in whole seconds (ticks, changeovers and progress): give a whole number of seconds")
    if args.limit is not None and args.limit < 1:
        raise SystemExit(f"--limit: the number of windows to replay, ≥ 1 (leave it out for all), got {args.limit}")
    # What the policy is told must fit (a real job longer than it was told may run past the deadline:
    # that is the robustness replay); a job that cannot fit even as told is a mistake in the options.
    # In whole seconds, as replayed: in floats 2.1 + 0.2 > 2.3, and a deadline of exactly the job and one changeover
    # was refused as shorter.
    told_job, told_changeover = _told(args)
    if seconds(args.deadline_hours) < seconds(told_job) + seconds(told_changeover):
        raise SystemExit(f"--deadline-hours: {_said(args.deadline_hours)} h is shorter than the job ({_said(told_job)} h) "
                         f"plus one changeover ({_said(told_changeover)} h): no policy can finish in time")
    if args.zones is not None and not any(_zone_files(args)):
        raise SystemExit("--zones: name at least one spot-traces .json file (comma-separated)")
    if args.zones is not None and not all(_zone_files(args)):
        raise SystemExit(f"--zones: an empty file name in {args.zones!r} (a comma too many?)")
    if not args.windows.strip():
        raise SystemExit("--windows: give a windows .jsonl file, or with --zones the number of windows to sample")
    if args.zones and not (_whole(args.windows) and int(args.windows) > 0):
        raise SystemExit(f"--windows: with --zones, the number of windows to sample (a whole number > 0), got {args.windows!r}")
    if args.zones and len(_zone_files(args)) > MAX_ZONES:
        raise SystemExit(f"--zones: at most {MAX_ZONES} zones (actions name each zone by one digit, 0-9)")
    if not args.zones:
        for flag, value in (("--gap-seconds", args.gap_seconds), ("--seed", args.seed)):
            if value is not None:
                raise SystemExit(f"{flag}: only with --zones (a windows file carries its own ticks and windows)")


def _whole(text: str) -> bool:
    """Digits 0-9 only: ``str.isdigit`` also takes ``²``, which ``int`` cannot read (a traceback)."""
    return text.isascii() and text.isdigit()


def _dollars(flag: str, text: str | None, *, positive: bool = False) -> Decimal | None:
    """An amount of dollars read as ``broker submit --budget`` reads one (:func:`pricing.money.to_micros`, exact:
    ``$100``, ``100$``, ``1,000.50``; a decimal comma, an exponent (``1e3``), ``nan``, ``inf`` or a fraction of a
    micro-dollar refused, each saying why): `--budget '$100'` was "not a number" here, and `--spot-price 1e3` was
    "not a number" too. Exact, as the costs are summed with the spot price as typed: a spot price of $0.0000001 was
    rounded up to $0.000001, ten times what was written."""
    if text is None:
        return None
    try:
        value = Decimal(to_micros(text, exact=True)) / MICROS_PER_DOLLAR
    except NotPlain as exc:  # it names the value
        raise SystemExit(f"{flag}: {exc}") from None
    except (AmountTooLarge, TooPrecise, DecimalComma) as exc:
        raise SystemExit(f"{flag}: {text!r} {exc}") from None
    except MoneyError:
        raise SystemExit(f"{flag}: {text!r} is not a number") from None
    if not (value > 0 if positive else value >= 0):
        raise SystemExit(f"{flag}: {text!r} must be a number {'> 0' if positive else '≥ 0'}")
    return value


_EXPONENT = re.compile(r"^\s*[+-]?(?:\d[\d,]*\.?\d*|\.\d+)[eE][+-]?\d+\s*$")


def _spot_hours(flag: str, text: str | None) -> Decimal | None:
    """A budget in spot-hours, written as ``broker submit --budget`` takes one (the same reader,
    :func:`pricing.money.to_micros`), less the dollar sign: digits with a point before any fraction, commas grouping
    thousands, at most 6 decimals, at most 1,000,000,000; an exponent (``1e2``), ``nan`` and ``inf`` are refused,
    as submit refuses them (they were read here as 100, and as "must be a number ≥ 0")."""
    if text is None:
        return None
    try:
        value = Decimal(to_micros(text, exact=True)) / MICROS_PER_DOLLAR
    except NotPlain:
        if _EXPONENT.match(text):
            plain = format(Decimal(text.strip().replace(",", "")), "f")
            raise SystemExit(f"{flag}: {text!r} is not a number of spot-hours: write it as {plain}, not with an "
                             "exponent") from None
        raise SystemExit(f"{flag}: {text!r} is not a number of spot-hours: write digits, with a point before any "
                         "fraction") from None
    except AmountTooLarge:
        raise SystemExit(f"{flag}: {text!r} must be at most {MAX_DOLLARS:,} spot-hours") from None
    except TooPrecise:
        raise SystemExit(f"{flag}: {text!r} has more than 6 decimal places (a budget is read to the millionth, as "
                         "`broker submit --budget` reads one)") from None
    except DecimalComma:
        fix = text.strip().replace(",", ".") if text.count(",") == 1 and "." not in text else None
        raise SystemExit(f"{flag}: {text!r} has a comma, which groups thousands only (1,000): " + (
            f"write {fix}, with a point before the fraction" if fix else "write the fraction after a point")) from None
    except MoneyError:
        raise SystemExit(f"{flag}: {text!r} is not a number") from None
    if value < 0:
        raise SystemExit(f"{flag}: {text!r} must be a number ≥ 0")
    return value


def run(argv: list[str] | None = None, out=None) -> list[dict]:
    """Replay as ``argv`` asks, writing to ``out`` (default: ``sys.stdout`` as it is at the call, not as it was at
    import: the rows of a second ``main`` in one process went to the first one's, maybe closed, stream)."""
    out = sys.stdout if out is None else out
    args = parser().parse_args(argv)
    names = [n.strip() for n in args.policy.split(",")]
    if not any(names):
        raise SystemExit(f"--policy: name at least one of {', '.join(POLICIES)}")
    if not all(names):  # as --zones refuses one: "broker," ran broker alone, a name meant after the comma unsaid
        raise SystemExit(f"--policy: an empty name in {args.policy!r} (a comma too many?)")
    for name in names:
        if name not in POLICIES:
            raise SystemExit(f"--policy: unknown policy {name!r}; known: {', '.join(POLICIES)}")
    twice = next((name for i, name in enumerate(names) if name in names[:i]), None)
    if twice is not None:  # "broker,broker" replayed it twice, its windows and its rows counted twice
        raise SystemExit(f"--policy: {twice!r} is named twice in {args.policy!r}: name each policy once")
    _check(args)
    if args.price_ratio < 1:
        print(f"note: --price-ratio {_said(args.price_ratio)} is below 1, so on-demand is the cheaper tier; the "
              "policies are built for on-demand costing more (k > 1)", file=sys.stderr)
    scale = _dollars("--spot-price", args.spot_price, positive=True)
    if args.spot_price is None and args.budget is not None and "$" in args.budget:
        raise SystemExit(f"--budget: {args.budget!r} is in dollars, but without --spot-price costs are in spot-hours: "
                         "give --spot-price (spot's $/h) too, or the budget in spot-hours")
    given = _dollars("--budget", args.budget) if scale is not None else _spot_hours("--budget", args.budget)
    budget = None if given is None else float(given / scale if scale else given)
    try:
        return _replay(args, names, scale, budget, out, given)
    except BrokenPipeError:  # the reader went away: broker.cli exits quietly
        raise
    except (OSError, ValueError) as exc:  # a last resort (each file is read, and each window checked, before this)
        raise SystemExit(f"error: {exc}") from None


def _read_windows(args) -> list[tuple[str, dict]]:
    """The windows of the ``--windows`` file to replay (the first ``--limit``), each with where it is (the file and
    its line), every one read and checked by :func:`pricing.loading.window` as ``read_windows`` reads it. Lines are
    decoded one by one, so that a byte that is not UTF-8 is named by its line (it was a traceback-free but nameless
    "'utf-8' codec can't decode byte 0xff")."""
    path = args.windows
    found = []
    try:
        with Path(path).open("rb") as fh:
            for n, raw in enumerate(fh, 1):
                if args.limit is not None and len(found) >= args.limit:
                    break
                where = f"{path} line {n}"
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise _Refused(f"error: {where}: not UTF-8 text (byte {raw[exc.start]:#04x} at column "
                                   f"{exc.start + 1})", "--windows") from None
                if not line.strip():
                    continue
                try:
                    w = window(line, where)
                    if w.get("trace") is None:  # a window of one's own, unnamed: its row said "trace": null
                        w["trace"] = f"{Path(path).name} line {n}"
                    found.append((where, w))
                except RecursionError:
                    raise _Refused(f"error: {where}: not JSON (lists nested too deeply to read)", "--windows") from None
                except ValueError as exc:  # it names the file and the line
                    raise _Refused(f"error: {exc}", "--windows") from None
    except OSError as exc:
        hint = " (a number of windows to sample needs --zones)" if _whole(path) and isinstance(exc, FileNotFoundError) else ""
        raise _Refused(f"error: {exc.strerror}: {exc.filename or path}{hint}", "--windows") from None
    if not found:
        raise _Refused(f"no windows in {path}", "--windows")
    return found


def _checked(args, w: dict, where: str, deadline: int, told: int) -> tuple[int, np.ndarray]:
    """A window's tick and availability (zones × ticks), once it is known to be one that can be replayed as asked;
    :class:`SystemExit` naming where it is and why otherwise."""
    gap = int(w["gap_seconds"])
    counts = np.atleast_2d(np.asarray(w["available"]))
    if (counts < 0).any():
        zone, tick = (int(i[0]) for i in np.nonzero(counts < 0))
        raise _Refused(f"{where}: available holds {counts[zone, tick]} at tick {tick}"
                       f"{f' of zone {zone}' if counts.shape[0] > 1 else ''}: 1 = spot available, 0 = not "
                       "(a number of instances available, never below 0)", "--windows")
    avail = (counts > 0).astype(bool)  # (a count past 64 bits makes an array of objects)
    if avail.shape[0] > MAX_ZONES:
        raise _Refused(f"{where}: {avail.shape[0]} zones; at most {MAX_ZONES} (actions name each zone by one digit)",
                       "--windows")
    if avail.shape[1] * gap < deadline:
        raise _Refused(f"{where}: {avail.shape[1]} ticks of {gap} s ({avail.shape[1] * gap / 3600:g} h) end before the "
                       f"deadline ({_said(args.deadline_hours)} h), so runs would be cut off there: use a shorter "
                       "--deadline-hours", "--windows")
    needed = -(-told // gap)  # as the policy is told (a longer real job is the robustness replay)
    if needed > deadline // gap:
        # the tick the user chose is to blame, not the deadline (which _check found long enough)
        flag = "--gap-seconds" if args.zones is not None and args.gap_seconds is not None else "--deadline-hours"
        raise SystemExit(f"{flag}: with {gap} s ticks the job needs {needed} whole tick{'s' if needed != 1 else ''} "
                         f"({needed * gap / 3600:g} h, ticks are billed and progress whole) but the deadline "
                         f"holds {deadline // gap}: no policy can finish in time")
    return gap, avail


def _replay(args, names: list[str], scale: Decimal | None, budget: float | None, out,
            given: Decimal | None = None) -> list[dict]:
    """Replay every window and policy. Every refusal comes before the first row is written: a windows file is read
    and each of its windows checked first, and windows sampled from ``--zones`` all share one tick and one shape,
    so the first one checked stands for all. A script reading ``--json`` gets either rows or one error, never
    four rows and then an error (a windows file whose fifth line was malformed)."""
    work, deadline, changeover = seconds(args.job_hours), seconds(args.deadline_hours), seconds(args.changeover_hours)
    told = sum(seconds(hours) for hours in _told(args))  # job + changeover, seconds, as the policy is told
    if args.zones is not None:
        _, sampled = zone_windows(_zone_files(args), int(args.windows), args.seed or 0, deadline, args.gap_seconds)
        if args.limit is not None:
            sampled = itertools.islice(sampled, args.limit)
        first = next(sampled)
        checked = _checked(args, first, f"{first['trace']} window 0", deadline, told)
        windows: Iterator[tuple[dict, int, np.ndarray]] = itertools.chain(
            [(first, *checked)], ((w, *_checked(args, w, f"{w['trace']} window {w['window']}", deadline, told))
                                  for w in sampled))
    else:
        windows = iter([(w, *_checked(args, w, f"{where}, {w['trace']} window {w.get('window', '?')}" if "trace" in w else where,
                                      deadline, told)) for where, w in _read_windows(args)])
    ratio = Decimal(repr(args.price_ratio))  # as typed: costs are summed exactly, never in binary fractions
    results = []
    for n, (w, gap, avail) in enumerate(windows):
        # (a window of one zone is named by its trace: a windows line with none, or one that is not a name, was a
        # KeyError or a TypeError, tracebacks)
        trace = w.get("trace") if isinstance(w.get("trace"), str) and w.get("trace") else "zone0"
        zones = w.get("zones") or ([trace] if avail.shape[0] == 1 else [f"zone{i}" for i in range(avail.shape[0])])
        optimum = None
        if args.optimum:
            best = min_cost_by_tick(avail, gap=gap, work=work, changeover=changeover, price_ratio=args.price_ratio, ticks=deadline // gap)
            optimum = float(best[-1]) if np.isfinite(best[-1]) else None
        for name in names:
            r = simulate(
                make_policy(name, cost_cap=name in CAPPED_POLICIES), avail, gap=gap, work=work, deadline=deadline, changeover=changeover,
                price_ratio=args.price_ratio, zones=zones,
                work_told=seconds(args.told_job_hours) if args.told_job_hours else None,
                changeover_told=None if args.told_changeover_hours is None else seconds(args.told_changeover_hours),
                horizon=min(avail.shape[1] * gap, 2 * deadline),
                budget=budget,
            )
            row = {
                "trace": w.get("trace"), "window": w.get("window", n), "policy": name, "gap_seconds": gap,
                "cost": _money(_normalized_cost(r.actions, gap, ratio), scale), "finished": r.finished,
                "finish_hours": None if r.finish_seconds is None else _hours(r.finish_seconds / 3600),
                "spot_hours": _hours(r.spot_hours), "ondemand_hours": _hours(r.ondemand_hours),
                "ondemand_only_cost": _money(-(-(work + changeover) // gap) * gap * ratio / 3600, scale),
                "actions": r.actions,
            }
            if given is not None:  # a run over the user's budget is flagged, never left to be noticed in the cost;
                # compared in the budget's own units and to its precision, the millionth (dollars: the micro-dollar)
                row["over_budget"] = _as_budget(row["cost"]) > given
            if "start_tick" in w:
                row["start_tick"] = w["start_tick"]
            if r.finish_seconds is None:  # not done (within twice the deadline or the window): how far it got
                row["progress_hours"] = _hours(r.progress / 3600)
            if w.get("zones"):  # the names the digits of actions stand for
                row["zones"] = list(w["zones"])
            if args.optimum:
                row["optimum"] = None if optimum is None else _money(optimum, scale)
            results.append(row)
            if args.json:
                print(json.dumps(row), file=out)
    if not args.json:
        print(summary(results, dollars=args.spot_price is not None), file=out)
        print(_legend(args, results, scale), file=out)
        if not args.optimum:
            print("vs optimum: add --optimum (the omniscient optimum of each window, a dynamic program)", file=out)
        if budget is not None:
            print(_budget_words(args.budget, given, results, names, scale), file=out)
    return results


def _hours(hours: float) -> float:
    """Hours to 9 decimals, as a normalized cost is rounded (49.666666667, not 49.666666666666664)."""
    return float(Decimal(repr(hours)).quantize(Decimal("1e-9")))


def _legend(args, results: list[dict], scale: Decimal | None) -> str:
    """What the table's columns compare, and the run they replayed."""
    unit = "$" if scale is not None else ""
    spent = sorted({r["ondemand_only_cost"] for r in results})
    ondemand = f"{unit}{spent[0]:,.2f}" if len(spent) == 1 else f"{unit}{spent[0]:,.2f} to {unit}{spent[-1]:,.2f}"
    lines = [f"> on-demand: runs costing more than on-demand only ({ondemand}{'' if scale else ' spot-h'}: the job and "
             "one changeover, whole ticks)" + ("; vs optimum: total cost ÷ the optimum's" if args.optimum else ""),
             f"replayed: job {_said(args.job_hours)} h, deadline {_said(args.deadline_hours)} h, changeover "
             f"{_said(args.changeover_hours)} h, price ratio {_said(args.price_ratio)}"]
    unfinished = sum(r["finish_hours"] is None for r in results)
    if unfinished:
        lines.append(f"mean cost includes {unfinished} run{'s' if unfinished != 1 else ''} not done within twice the "
                     "deadline or the window's end (their cost so far; progress_hours in --json)")
    return "\n".join(lines)


def _as_budget(cost: float) -> Decimal:
    """A run's cost as a budget is read: to the millionth, half to even (dollars are already micro-dollars). A run that
    cost on-demand only, 152.008333333 spot-hours, is within a budget of 152.008333, the closest one can type."""
    return Decimal(repr(cost)).quantize(Decimal("0.000001"), rounding=ROUND_HALF_EVEN)


def _budget_words(given: str, budget: Decimal, results: list[dict], names: list[str], scale: Decimal | None) -> str:
    """The footer of a replay with ``--budget``: how many runs of each policy went over it, and whether it could be
    kept at all. A budget of 30 beside runs costing 49.67 read "the cost cap keeps each run within it", unflagged."""
    over = {name: sum(1 for r in results if r["policy"] == name and r.get("over_budget")) for name in names}
    runs = {name: sum(1 for r in results if r["policy"] == name) for name in names}
    counted = "; ".join(f"{name} {over[name]} of {runs[name]}" for name in names)
    ondemand = max((r["ondemand_only_cost"] for r in results), default=0.0)  # dollars with --spot-price
    unit = "" if scale is None else "$"
    if budget < _as_budget(ondemand):  # both in the units of cost, to the budget's precision
        # to the millionth: on-demand only in spot-hours is often a repeating decimal (152.008333…), and a budget of
        # 152.008333, on-demand only as a budget can be typed, read "below on-demand only (152.01 spot-hours)"
        shown = f"{unit}{_as_budget(ondemand):,.2f}" if scale else f"{_as_budget(ondemand):,} spot-hours"
        why = (f"it is below on-demand only ({shown}), so no policy can "
               f"promise to keep it: where spot runs short the job needs more to meet its deadline. The broker stops "
               f"such a job at its budget (checkpointed, resumable once the budget is raised), which this replay does "
               f"not model: here the runs go on to finish")
    else:
        why = ("it covers on-demand only, so the cost cap keeps each run of the broker's policies (broker, slack_reserve) "
               "within it; the paper's baselines run without a cap and ignore it")
    if scale is not None and "$" not in given:
        given = f"${given.strip()}"  # dollars, as the costs are: "budget 44:" beside dollar costs
    return f"budget {given}: runs over it: {counted}. {why[0].upper()}{why[1:]}"


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
    except KeyboardInterrupt:  # Ctrl-C: a line, as the other commands say it, not a traceback
        print("interrupted", file=sys.stderr)
        return 130
    except _Usage as exc:
        exc.parser.print_usage(sys.stderr)
        print(f"{exc.parser.prog}: error: {exc.message}", file=sys.stderr)
        _json_error(argv, exc.message, _option_blamed(exc.message))
        return 2
    except SystemExit as exc:
        if not isinstance(exc.code, str):
            raise  # --help: 0, printed already
        text = exc.code.removeprefix("error: ")
        print(f"error: {text}", file=sys.stderr)  # as the other commands
        _json_error(argv, text, getattr(exc, "field", None) or _option_blamed(text))
        return 2
    return 0


_ONE_OPTION = re.compile(r"^(?:argument )?(--[a-z][\w-]*): |^the following arguments are required: (--[a-z][\w-]*)$")


def _option_blamed(sentence: str) -> str | None:
    """The one option a refusal begins by naming (``--budget: ...``, argparse's ``argument --job-hours: ...``, or
    the one required option left out), as ``broker``'s other commands find it; ``None`` for several or none (an
    option argparse does not know is named in the sentence, as theirs are)."""
    m = _ONE_OPTION.match(sentence)
    return m and (m.group(1) or m.group(2))


def _json_error(argv: list[str], sentence: str, field: str | None) -> None:
    if "--json" in argv:
        print(json.dumps({"error": sentence, **({"field": field} if field else {})}), flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
