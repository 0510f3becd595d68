"""The simulator, the DP optimum and the policies on real windows, re-costed independently."""

from __future__ import annotations

import io
import itertools
import json
import random
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from pricing.optimum import min_cost_by_tick
from pricing.policy import POLICIES, make_policy
from pricing.simulate import simulate
from pricing.simulate_cli import run as cli_run

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"
WINDOWS_FILE = SHARED / "cant-be-late-windows.jsonl"
C, D, K = 48 * 3600, 720, 3.145


def recost(actions: str, avail: np.ndarray, gap: int, work: int, changeover: int, ratio: float) -> tuple[float, float, int | None]:
    """The model of §3.1 written out again, independently: (cost, progress, ticks to finish)."""
    chars = "S" if avail.shape[0] == 1 else "0123456789"
    cost, progress, prev, left = 0.0, 0.0, "I", 0.0
    for t, a in enumerate(actions):
        if a == "I":
            prev = "I"
            continue
        if a != "O":
            assert avail[chars.index(a), t], f"spot used at tick {t} where there was none"
        if a != prev or (a != "O" and not avail[chars.index(a), t]):
            left = changeover
        progress += max(gap - left, 0)
        left = max(left - gap, 0)
        cost += gap / 3600 * (ratio if a == "O" else 1.0)
        prev = a
        if progress >= work:
            return cost, progress, t + 1
    return cost, progress, None


def sample_windows(n: int, seed: int = 7) -> list[dict]:
    lines = WINDOWS_FILE.read_text().splitlines()
    return [json.loads(x) for x in random.Random(seed).sample(lines, n)]


WINDOWS = sample_windows(10)


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_policy_meets_every_deadline_and_its_cost_follows_from_its_actions(name):
    for w, R in itertools.product(WINDOWS, (52, 60, 80)):
        avail = np.atleast_2d(w["available"])
        run = simulate(make_policy(name), avail, gap=600, work=C, deadline=R * 3600, changeover=D, price_ratio=K)
        assert run.finished, (w["trace"], w["window"], R)
        cost, progress, ticks = recost(run.actions, avail, 600, C, D, K)
        assert ticks == len(run.actions) and ticks * 600 <= R * 3600
        assert cost == pytest.approx(run.cost, abs=1e-9)


def test_the_optimum_is_never_beaten_and_the_broker_never_costs_more_than_on_demand_plus_one_hops_changeovers():
    od_only = -(-(C + D) // 600) * 600 / 3600 * K + 2 * 600 / 3600 * (1 + K)
    for w in WINDOWS:
        avail = np.atleast_2d(w["available"])
        best = min_cost_by_tick(avail, gap=600, work=C, changeover=D, price_ratio=K, ticks=80 * 6)
        for R in (52, 64, 80):
            opt = best[R * 6 - 1]
            for name in POLICIES:
                cost = simulate(make_policy(name), avail, gap=600, work=C, deadline=R * 3600, changeover=D, price_ratio=K).cost
                assert cost >= opt - 1e-9, (name, R)
                if name in ("broker", "slack_reserve"):
                    assert cost <= od_only + 1e-9


def brute_force(avail: np.ndarray, gap: int, work: int, changeover: int, ratio: float, ticks: int) -> float:
    """Least cost over every action sequence: the DP's yardstick on tiny cases."""
    chars = ["I", "O"] + (["S"] if avail.shape[0] == 1 else [str(i) for i in range(avail.shape[0])])
    best = float("inf")
    for seq in itertools.product(chars, repeat=ticks):
        if any(c not in "IO" and not avail[0 if c == "S" else int(c), t] for t, c in enumerate(seq)):
            continue
        cost, _, done = recost("".join(seq), avail, gap, work, changeover, ratio)
        if done is not None:
            best = min(best, recost("".join(seq[:done]), avail, gap, work, changeover, ratio)[0])
    return best


@pytest.mark.parametrize(
    "avail, work, changeover, ticks",
    [
        pytest.param([[1, 0, 1, 1, 0, 1, 1]], 3, 1, 7, id="one zone with gaps: the DP finds the brute-force optimum"),
        pytest.param([[1, 1, 0, 0, 1, 1, 1]], 4, 3, 7, id="a changeover longer than a tick is carried over exactly"),
        pytest.param([[1, 0, 0, 1, 0], [0, 1, 1, 0, 1]], 3, 1, 5, id="two zones: hopping zones costs a changeover each time"),
        pytest.param([[0, 0, 0, 0, 0]], 2, 1, 4, id="no spot at all: on-demand from the first tick"),
    ],
)
def test_dp_matches_brute_force(avail, work, changeover, ticks):
    gap = 2
    a = np.array(avail) > 0
    best = min_cost_by_tick(a, gap=gap, work=work * gap // 2 * 1, changeover=changeover, price_ratio=3.0, ticks=ticks)
    assert best[-1] == pytest.approx(brute_force(a, gap, work, changeover, 3.0, ticks))


def test_cli_prints_one_json_object_per_window_whose_cost_recosts_exactly():
    buf = io.StringIO()
    cli_run(["--windows", str(WINDOWS_FILE), "--limit", "3", "--policy", "uniform_progress,broker", "--deadline-hours", "56", "--json", "--optimum"], out=buf)
    rows = [json.loads(x) for x in buf.getvalue().splitlines()]
    assert len(rows) == 6
    windows = {(w["trace"], w["window"]): w for w in map(json.loads, WINDOWS_FILE.read_text().splitlines()[:3])}
    for row in rows:
        assert {"trace", "window", "cost", "finished", "spot_hours", "ondemand_hours", "actions"} <= row.keys()
        avail = np.atleast_2d(windows[(row["trace"], row["window"])]["available"])
        cost, _, _ = recost(row["actions"], avail, 600, C, D, K)
        assert row["cost"] == pytest.approx(cost, abs=1e-6) and row["finished"]
        assert row["optimum"] <= row["cost"] + 1e-9


@pytest.mark.parametrize("extra, unit", [([], "mean cost (spot-h)"), (["--spot-price", "0.9"], "mean cost ($)")])
def test_the_table_names_the_unit_of_its_costs_and_how_to_get_the_ratio_to_the_optimum(extra, unit):
    buf = io.StringIO()
    rows = cli_run(["--windows", str(WINDOWS_FILE), "--limit", "2", "--policy", "greedy", *extra], out=buf)
    head, line, _legend, _replayed, hint = buf.getvalue().splitlines()
    assert unit in head and "vs optimum" in head and "--optimum" in hint
    scale = 0.9 if extra else 1
    assert line.split()[2] == f"{sum(r['cost'] for r in rows) / 2:.2f}" and rows[0]["cost"] > 40 * scale


def test_cli_samples_multi_zone_windows_and_names_zones_by_index():
    trace_dir = SHARED / "spot-traces" / "availability" / "1-node" / "aws-02-15-2023"
    files = ",".join(str(trace_dir / f"{z}_v100_1.json") for z in ("us-east-1a", "us-east-1c", "us-east-1f"))
    buf = io.StringIO()
    cli_run(["--zones", files, "--windows", "2", "--seed", "3", "--job-hours", "10", "--deadline-hours", "14", "--gap-seconds", "600", "--json"], out=buf)
    rows = [json.loads(x) for x in buf.getvalue().splitlines()]
    assert [r["window"] for r in rows] == [0, 1] and all("start_tick" in r for r in rows)
    assert all(set(r["actions"]) <= set("IO012") and r["finished"] for r in rows)


def test_sampled_zone_windows_reach_a_deadline_that_is_not_a_whole_number_of_the_traces_ticks():
    # 60 h is 1,107.7 ticks of 195 s: windows of 1,107 ticks ended before it and every run was refused
    trace_dir = SHARED / "spot-traces" / "availability" / "1-node" / "aws-02-15-2023"
    files = ",".join(str(trace_dir / f"{z}_v100_1.json") for z in ("us-east-1a", "us-east-1c"))
    rows = cli_run(["--zones", files, "--windows", "2", "--seed", "1", "--deadline-hours", "60", "--policy", "greedy",
                    "--json"], out=io.StringIO())
    assert len(rows) == 2 and all(r["gap_seconds"] == 195 and r["finished"] for r in rows)


def test_told_a_short_job_and_a_short_changeover_the_broker_still_finishes_within_the_relaxed_bound():
    for w in WINDOWS[:5]:
        avail = np.atleast_2d(w["available"])
        for R in (52, 64):
            run = simulate(make_policy("broker"), avail, gap=600, work=round(C * 1.2 / 600) * 600, deadline=R * 3600, changeover=1440,
                           price_ratio=K, work_told=C, changeover_told=D, horizon=avail.shape[1] * 600)
            bound = R * 3600 + (round(C * 1.2 / 600) * 600 - C) + 2 * (1440 - D)
            assert run.finish_seconds is not None and run.finish_seconds <= bound


@pytest.mark.parametrize("extra", [0.0, 0.5])
def test_on_real_windows_a_budget_that_covers_on_demand_only_is_never_exceeded(extra):
    # Windows of the paper's where the broker's default run ends a little above on-demand only
    # (spot that flickered, then on-demand to the deadline): with a budget at on-demand only
    # (+ half a spot-hour) the allowance shrinks to it and no run costs more than the budget.
    from pricing.loading import read_windows

    od_only = 290 / 6 * 3.145
    windows = list(read_windows(WINDOWS_FILE))[944:1017:8]
    kw = dict(gap=600, work=C, changeover=720, price_ratio=3.145)
    free, bound = [], []
    for w in windows:
        avail = np.atleast_2d(np.asarray(w["available"]) > 0)
        for R in (52, 60):
            free.append(simulate(make_policy("broker"), avail, deadline=R * 3600, **kw))
            bound.append(simulate(make_policy("broker"), avail, deadline=R * 3600, budget=od_only + extra, **kw))
    assert sum(r.cost > od_only + extra + 1e-9 for r in free) >= 5  # without the budget, these windows go above it
    assert all(r.finished and r.cost <= od_only + extra + 1e-9 for r in bound)
    assert (sum(r.spot_hours for r in bound) > 0) == (extra > 0)  # with no room above on-demand only, spot is never risked


def test_simulate_cli_takes_a_budget_in_the_units_of_cost_and_refuses_a_bad_one(capsys):
    args = ["--windows", str(WINDOWS_FILE), "--limit", "6", "--deadline-hours", "52", "--spot-price", "0.9731"]
    od_only = cli_run(args + ["--json"], out=io.StringIO())[0]["ondemand_only_cost"]
    rows = cli_run(args + ["--json", "--budget", str(od_only)], out=io.StringIO())
    assert all(r["finished"] and r["spot_hours"] == 0 and Decimal(str(r["cost"])) <= Decimal(str(od_only)) for r in rows)
    table = io.StringIO()
    cli_run(args + ["--budget", str(od_only)], out=table)
    assert f"budget ${od_only}: runs over it: broker 0 of 6. It covers on-demand only, so the cost cap keeps each run " \
           "of the broker's policies (broker, slack_reserve) within it" in " ".join(table.getvalue().split())
    assert not any(r["over_budget"] for r in rows)
    # a budget below on-demand only: the runs that go over it are flagged and counted, never left unsaid
    low = cli_run(args + ["--json", "--budget", "20"], out=io.StringIO())
    assert [r["over_budget"] for r in low] == [r["cost"] > 20 for r in low] and any(r["over_budget"] for r in low)
    table = io.StringIO()
    cli_run(args + ["--budget", "20"], out=table)
    said = " ".join(table.getvalue().split())
    assert f"budget $20: runs over it: broker {sum(r['over_budget'] for r in low)} of 6. It is below on-demand only " \
           f"(${od_only:,.2f}), so no policy can promise to keep it" in said, said
    for bad, why in (("abc", "is not a number"), ("-1", "must be a number")):
        with pytest.raises(SystemExit, match=why):
            cli_run(args + ["--budget", bad], out=io.StringIO())


@pytest.mark.parametrize("available", [
    pytest.param([1, 1] + [0] * 552, id="spot for two ticks at the start, then never again"),
    pytest.param([1 if (t // 2) % 2 == 0 else 0 for t in range(554)], id="spot that flickers two ticks on, two off"),
])
def test_the_previous_default_policy_keeps_a_budget_that_covers_on_demand_only_in_the_simulator_too(tmp_path, available):
    """`broker simulate --policy slack_reserve` ran the broker's previous policy without the cost cap the benchmark and
    the live broker give it: a budget a tenth of a spot-hour above on-demand only was exceeded by a spot tick that
    made no progress (the changeover is longer than a tick) before spot was gone."""
    windows = tmp_path / "w.jsonl"
    windows.write_text(json.dumps({"trace": "t", "window": 0, "gap_seconds": 600, "available": available}) + "\n")
    args = ["--windows", str(windows), "--deadline-hours", "52", "--json"]
    od_only = cli_run(args + ["--policy", "ondemand"], out=io.StringIO())[0]["ondemand_only_cost"]
    budget = Decimal(str(od_only)).quantize(Decimal("0.000001")) + Decimal("0.1")  # read to the millionth
    for name in ("slack_reserve", "broker"):
        [row] = cli_run(args + ["--policy", name, "--budget", str(budget)], out=io.StringIO())
        assert row["finished"] and Decimal(str(row["cost"])) <= budget and not row["over_budget"], row


def test_a_budget_of_on_demand_only_in_spot_hours_as_it_can_be_typed_is_kept_by_a_run_that_never_takes_spot():
    """On-demand only is 152.008333… spot-hours; a budget is read to the millionth, so 152.008333 is the closest one
    can type. Every run that cost exactly on-demand only was flagged over it, and the footer said the budget was
    below on-demand only "(152.01 spot-hours)"."""
    args = ["--windows", str(WINDOWS_FILE), "--limit", "4", "--deadline-hours", "52", "--json"]
    od_only = cli_run(args + ["--policy", "ondemand"], out=io.StringIO())[0]["ondemand_only_cost"]
    typed = str(Decimal(str(od_only)).quantize(Decimal("0.000001")))
    assert Decimal(typed) < Decimal(str(od_only))  # the premise: not typeable exactly
    rows = cli_run(args + ["--budget", typed], out=io.StringIO())
    assert rows and all(r["spot_hours"] == 0 and not r["over_budget"] for r in rows), rows
    table = io.StringIO()
    cli_run(args[:-1] + ["--budget", typed], out=table)
    assert "It covers on-demand only" in table.getvalue()
    # a millionth below it is below on-demand only, said to the millionth
    below = str(Decimal(typed) - Decimal("0.000001"))
    table = io.StringIO()
    cli_run(args[:-1] + ["--budget", below], out=table)
    assert f"below on-demand only ({typed} spot-hours)" in " ".join(table.getvalue().split())


def test_a_policy_list_with_an_empty_name_is_refused_as_a_zone_list_is():
    with pytest.raises(SystemExit, match="--policy: an empty name in 'broker,' \\(a comma too many\\?\\)"):
        cli_run(["--windows", str(WINDOWS_FILE), "--limit", "1", "--policy", "broker,"], out=io.StringIO())


@pytest.mark.parametrize("written, plain", [("$140", "140"), ("140$", "140"), ("$1,000.50", "1000.50")],
                         ids=["a dollar sign before", "a dollar sign after", "a comma grouping thousands"])
def test_simulate_reads_a_budget_in_dollars_as_submit_does(written, plain):
    """`broker simulate --budget '$100'` was "not a number", though `broker submit --budget '$100'` is a budget."""
    from broker.spec import _money

    args = ["--windows", str(WINDOWS_FILE), "--limit", "3", "--deadline-hours", "52", "--spot-price", "$0.9731", "--json"]
    assert _money(written, "budget") == _money(plain, "budget")  # what submit makes of each
    assert cli_run(args + ["--budget", written], out=io.StringIO()) == cli_run(
        args[:-2] + ["0.9731", "--json", "--budget", plain], out=io.StringIO())


@pytest.mark.parametrize("args, field, message", [
    (["--budget", "$100"], "--budget", "is in dollars, but without --spot-price costs are in spot-hours"),
    (["--spot-price", "1", "--budget", "0,50"], "--budget", "write 0.50, with a point before the cents"),
    (["--job-hours", "-1"], "--job-hours", "must be a number > 0"),
    (["--budegt", "5"], None, "unrecognized arguments: --budegt 5 (did you mean --budget?)"),
    (["--job", "5"], None, "unrecognized arguments: --job 5 (did you mean --job-hours?)"),
    (["--job-hours", "many"], "--job-hours", "invalid float value: 'many'"),
], ids=["dollars with no spot price to count them in", "a decimal comma", "a negative job", "an unknown option",
        "an option cut short, not read as the one it begins", "a number in words"])
def test_simulate_with_json_says_a_refusal_as_one_json_object_too(capsys, args, field, message):
    """`broker simulate --json` refused with exit 2 and a line on stderr alone: a script had nothing to parse."""
    from broker.cli import main

    assert main(["simulate", "--windows", str(WINDOWS_FILE), "--limit", "1", "--json", *args]) == 2
    out, err = capsys.readouterr()
    error = json.loads(out)
    assert message in error["error"] and error.get("field") == field and error["error"] in err


@pytest.mark.parametrize("extra", [
    pytest.param([], id="a replay"),
    pytest.param(["--budget", "$100"], id="a refusal"),
])
def test_the_json_flag_before_simulate_writes_what_it_writes_after_it(extra):
    """`broker --json simulate ...` was refused ("unrecognized arguments", every simulate option named) where
    `broker simulate ... --json` replayed: the top-level flags may come before any command, simulate's too. The real
    CLI, as a process: the same JSON lines and the same exit status in both orders (the connection options, which
    simulate has no use for, are taken before it as before `broker serve`)."""
    import subprocess
    import sys

    args = ["--windows", str(WINDOWS_FILE), "--limit", "3", "--policy", "greedy,broker", *extra]

    def cli(*argv):
        done = subprocess.run([sys.executable, "-m", "broker.cli", *argv], capture_output=True, text=True, timeout=300,
                              cwd=Path(__file__).resolve().parents[2])
        return done.returncode, done.stdout.splitlines()

    after = cli("simulate", *args, "--json")
    before = cli("--json", "simulate", *args)
    with_connection = cli("--url", "http://127.0.0.1:9", "--json", "--token", "t", "simulate", *args)
    assert before == after == with_connection
    code, lines = after
    rows = [json.loads(x) for x in lines]
    if extra:
        assert code == 2 and rows == [{"error": rows[0]["error"], "field": "--budget"}]
    else:
        assert code == 0 and [(r["window"], r["policy"]) for r in rows] == [
            (w, p) for w in (0, 1, 2) for p in ("greedy", "broker")]


def test_multi_zone_runs_repeat_exactly_whatever_the_processs_string_hashing():
    # Zone names live in sets; Python salts str hashes per process, so set order differs between
    # processes. Decisions must not: the same windows give the same actions in every process.
    import os
    import subprocess
    import sys

    trace_dir = SHARED / "spot-traces" / "availability" / "1-node" / "aws-02-15-2023"
    files = ",".join(str(trace_dir / f"{z}_v100_1.json") for z in ("us-east-1a", "us-east-1c", "us-east-1d", "us-east-1f"))
    code = ("import sys; from pricing.simulate_cli import run; "
            f"run(['--zones', {files!r}, '--windows', '2', '--seed', '1', '--gap-seconds', '600', '--json'])")
    outputs = []
    for seed in ("1", "4"):  # under the old tie-break these two seeds already disagreed on both windows
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300,
                              cwd=Path(__file__).resolve().parents[2])
        assert done.returncode == 0, done.stderr
        outputs.append([json.loads(line)["actions"] for line in done.stdout.splitlines()])
    assert len(outputs[0]) == 2 and outputs[0] == outputs[1]


def test_piped_into_a_reader_that_stops_early_the_cli_exits_quietly():
    # `broker simulate ... | head -1`: once the reader has gone, writing raises BrokenPipeError;
    # the user must see head's line, not a Python traceback.
    import subprocess
    import sys

    code = "import sys; from broker.cli import main; sys.exit(main(sys.argv[1:]))"
    args = ["simulate", "--windows", str(WINDOWS_FILE), "--limit", "400", "--policy", "greedy", "--json"]
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=Path(__file__).resolve().parents[2])
    first = proc.stdout.readline()
    proc.stdout.close()  # the reader goes away after one line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141
    assert json.loads(first)["policy"] == "greedy"
    assert "Traceback" not in err and "Broken pipe" not in err, err


@pytest.mark.parametrize("args, message", [
    (["--job-hours", "-3"], "--job-hours: must be a number > 0"),
    (["--price-ratio", "nan"], "--price-ratio: must be a number > 0"),
    (["--changeover-hours", "-0.1"], "--changeover-hours: must be a number ≥ 0"),
    (["--deadline-hours", "10"], "--deadline-hours: 10 h is shorter than the job \\(48 h\\) plus one changeover"),
    (["--spot-price", "0"], "--spot-price: '0' must be a number > 0"),
    (["--spot-price", "cheap"], "--spot-price: 'cheap' is not a number"),
    (["--limit", "0"], "--limit: the number of windows to replay, ≥ 1"),
    (["--job-hours", "47.80001", "--deadline-hours", "52"], "--job-hours: 47.80001 h is 172080.036 s; the replay counts "
                                                             "time in whole seconds"),
    (["--deadline-hours", "48.3333"], "--deadline-hours: 48.3333 h is 173999.88 s"),
    (["--job-hours", "0.0001", "--deadline-hours", "1"], "--job-hours: 0.0001 h is 0.36 s"),
    (["--told-changeover-hours", "0.20001"], "--told-changeover-hours: 0.20001 h is 720.036 s"),
    (["--zones", "a.json,"], "--zones: an empty file name in 'a.json,'"),
    (["--deadline-hours", "100"], "window 0: 554 ticks of 600 s \\(92.3333 h\\) end before the deadline \\(100 h\\)"),
    (["--deadline-hours", "48.25"], "--deadline-hours: with 600 s ticks the job needs 290 whole ticks \\(48.3333 h"),
    (["--seed", "3"], "--seed: only with --zones"),
    (["--gap-seconds", "600"], "--gap-seconds: only with --zones"),
], ids=["a negative job", "a ratio that is not a number", "a negative changeover", "a deadline no policy can meet",
        "a free spot price", "a spot price in words", "a limit of no window",
        "a job that is not a whole number of seconds (rounding it replayed another job)",
        "a deadline that is not a whole number of seconds (rounded, its last tick was taken as inside it)",
        "a job shorter than a second (rounded, it was no work at all)", "a changeover the policy is told in part seconds",
        "an empty zone file name", "a deadline past the window's end",
        "a deadline between the job and its last whole tick", "a seed without zones", "a tick without zones"])
def test_simulate_refuses_bad_options_naming_the_option_and_the_reason(args, message):
    with pytest.raises(SystemExit, match=message):
        cli_run(["--windows", str(WINDOWS_FILE), *([] if "--limit" in args else ["--limit", "1"]), *args],
                out=io.StringIO())


@pytest.mark.parametrize("content, message", [
    ('{"trace": "t", "gap_seconds": 600, "available": [1, 0, 1]}\n{"trace": oops}\n', "line 2: not JSON"),
    ('{"trace": "t", "gap_seconds": 600, "available": [[1, 0], [1]]}\n', "line 1: the zones' available lists differ in length"),
    ('{"trace": "t", "gap_seconds": "600", "available": [1]}\n', "line 1: gap_seconds must be a whole number of seconds > 0"),
    ('{"trace": "t", "gap_seconds": 600}\n', "line 1: available must be a non-empty list"),
    ('\n\n[1, 2]\n', "line 3: a window is a JSON object"),
    ('{"trace": "t", "gap_seconds": 600, "available": [[1, 0], [0, 1]], "zones": ["a"]}\n', "line 1: zones must name each of the 2"),
    ('{"trace": "t", "gap_seconds": 600, "available": [[1, 0], [0, 1]], "zones": ["a", "a"]}\n', "line 1: zones must name each of the 2"),
], ids=["a line that is not JSON", "zones of different lengths", "a tick given as text", "no availability", "not an object",
        "fewer zone names than zones", "a zone name given twice"])
def test_a_malformed_windows_file_is_refused_naming_the_line(tmp_path, content, message):
    f = tmp_path / "w.jsonl"
    f.write_text(content)
    with pytest.raises(SystemExit, match=f"error: {f} {message}"):
        cli_run(["--windows", str(f), "--job-hours", "0.1", "--deadline-hours", "0.5"], out=io.StringIO())


def test_a_missing_or_malformed_trace_file_is_one_line_not_a_traceback(tmp_path):
    with pytest.raises(SystemExit, match=f"error: No such file or directory: {tmp_path / 'nope.jsonl'}"):
        cli_run(["--windows", str(tmp_path / "nope.jsonl")], out=io.StringIO())
    bad = tmp_path / "zone.json"
    bad.write_text('{"metadata": {}, "data": [1, 0]}')
    with pytest.raises(SystemExit, match="zone.json: a spot-traces file needs metadata.gap_seconds"):
        cli_run(["--zones", str(bad), "--windows", "2"], out=io.StringIO())
    with pytest.raises(SystemExit, match="--windows: with --zones, the number of windows to sample"):
        cli_run(["--zones", str(bad), "--windows", "many"], out=io.StringIO())


def test_a_spot_traces_file_given_as_windows_says_to_give_it_to_zones():
    """`--windows us-west-2a_k80_1.json` (a trace, as data/README.md lists them) said only "gap_seconds must be a
    whole number of seconds > 0, got None": the trace's gap is under metadata. It now says where a trace goes."""
    trace = SHARED / "spot-traces" / "availability" / "1-node" / "aws-10-26-2022" / "us-west-2a_k80_1.json"
    with pytest.raises(SystemExit, match=f"error: {trace} line 1: this is a spot-traces file, not a windows file: "
                                         "give it .* to --zones, with --windows the number of windows to sample"):
        cli_run(["--windows", str(trace)], out=io.StringIO())


def test_a_job_longer_than_it_was_told_may_still_be_replayed_past_its_deadline():
    # The robustness replay: the policy is told 48 h, the job really takes 57.6 h, the deadline is 52 h.
    rows = cli_run(["--windows", str(WINDOWS_FILE), "--limit", "1", "--job-hours", "57.6", "--told-job-hours", "48",
                    "--deadline-hours", "52", "--json"], out=io.StringIO())
    assert not rows[0]["finished"] and rows[0]["finish_hours"] > 52  # done, after the deadline it could not know


def test_more_zones_than_one_digit_can_name_are_refused():
    trace = str(SHARED / "spot-traces" / "availability" / "1-node" / "aws-02-15-2023" / "us-east-1a_v100_1.json")
    with pytest.raises(SystemExit, match="--zones: at most 10 zones"):
        cli_run(["--zones", ",".join([trace] * 11), "--windows", "1"], out=io.StringIO())


def test_an_empty_windows_file_is_refused(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(SystemExit, match="no windows in"):
        cli_run(["--windows", str(empty)], out=io.StringIO())


def test_zone_traces_of_different_lengths_are_sampled_where_all_cover_and_say_so(tmp_path, capsys):
    zones = SHARED / "spot-traces" / "availability" / "1-node" / "aws-02-15-2023"
    full = json.loads((zones / "us-east-1c_v100_1.json").read_text())
    short = tmp_path / "short.json"
    short.write_text(json.dumps({"metadata": full["metadata"], "data": full["data"][:5000]}))
    rows = cli_run(["--zones", f"{zones / 'us-east-1a_v100_1.json'},{short}", "--windows", "5", "--seed", "2",
                    "--deadline-hours", "52", "--policy", "greedy", "--json"], out=io.StringIO())
    assert "windows are drawn from the first" in capsys.readouterr().err
    assert all(r["start_tick"] + len(r["actions"]) <= 5000 for r in rows) and all(r["gap_seconds"] == 195 for r in rows)


@pytest.mark.parametrize("args, message", [
    (["--windows", "{tmp}/nope.jsonl"], "error: No such file or directory: {tmp}/nope.jsonl"),
    (["--windows", "{tmp}/empty.jsonl"], "no windows in {tmp}/empty.jsonl"),
    (["--windows", "{tmp}/bad.jsonl"], "error: {tmp}/bad.jsonl line 1: not JSON"),
    (["--windows", "{tmp}/uneven.jsonl"], "error: {tmp}/uneven.jsonl line 1: the zones' available lists differ in length"),
    (["--windows", "{windows}", "--policy", "cheapest"], "--policy: unknown policy 'cheapest'; known: broker"),
    (["--windows", "{windows}", "--deadline-hours", "40"], "--deadline-hours: 40 h is shorter than the job (48 h)"),
    (["--windows", "{windows}", "--deadline-hours", "48.25"], "--deadline-hours: with 600 s ticks the job needs 290 whole ticks"),
    (["--windows", "{windows}", "--policy", ","], "--policy: name at least one of broker, "),
    (["--zones", ",", "--windows", "3"], "--zones: name at least one spot-traces .json file"),
    (["--zones", "{tmp}/empty.jsonl", "--windows", "3"], "error: {tmp}/empty.jsonl: not a spot-traces JSON file"),
], ids=["a missing windows file", "an empty windows file", "a windows line cut short", "zones of different lengths",
        "an unknown policy", "a deadline shorter than the job", "a deadline short of the job's last whole tick",
        "no policy named", "no trace file named", "an empty trace file"])
def test_the_simulate_command_refuses_bad_input_with_one_line_and_exit_status_2(tmp_path, capsys, args, message):
    from broker.cli import main

    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "bad.jsonl").write_text('{"trace": "t", "window": 0, "gap_seconds": 600, "available": [1, 0\n')
    (tmp_path / "uneven.jsonl").write_text('{"trace": "t", "window": 0, "gap_seconds": 600, "available": [[1, 0], [1]]}\n')
    fill = {"tmp": str(tmp_path), "windows": str(WINDOWS_FILE)}
    code = main(["simulate", *(a.format(**fill) for a in args), "--limit", "1", "--json"])
    out, err = capsys.readouterr()
    expected = message.format(**fill)
    expected = expected if expected.startswith("error: ") else f"error: {expected}"  # one prefix, as the other commands
    assert code == 2 and err.startswith(expected) and err.count("\n") == 1, err
    assert json.loads(out)["error"] == err.removeprefix("error: ").rstrip("\n")  # --json: one object on stdout too


def test_zone_traces_whose_files_share_a_name_stay_two_zones():
    # us-west-2b_v100_1.json from two trace releases: under one name their availability merged, and
    # the runs took spot in the second zone at ticks where only the first one had it.
    one, two = (SHARED / "spot-traces" / "availability" / "1-node" / f / "us-west-2b_v100_1.json"
                for f in ("aws-10-26-2022", "aws-02-15-2023"))
    rows = cli_run(["--zones", f"{one},{two}", "--gap-seconds", "600", "--windows", "4", "--seed", "2", "--job-hours", "10",
                    "--deadline-hours", "14", "--policy", "greedy,broker", "--json"], out=io.StringIO())
    traces = [json.loads(f.read_text()) for f in (one, two)]
    assert rows[0]["trace"] == "us-west-2b_v100_1#0+us-west-2b_v100_1#1"
    used = set()
    for row in rows:
        s = row["start_tick"]
        avail = np.array([[t["data"][(s + i) * 600 // t["metadata"]["gap_seconds"]] > 0 for i in range(len(row["actions"]))]
                          for t in traces])
        cost, _, ticks = recost(row["actions"], avail, 600, 10 * 3600, D, K)
        assert ticks == len(row["actions"]) and cost == pytest.approx(row["cost"], abs=1e-6)
        used |= set(row["actions"]) & {"0", "1"}
    assert used == {"0", "1"}


def test_a_policy_told_there_is_no_changeover_is_replayed_as_told():
    # --told-changeover-hours 0 was read as "not given": the policy was told the real 0.2 h instead
    args = ["--windows", str(WINDOWS_FILE), "--limit", "3", "--deadline-hours", "52", "--policy", "greedy", "--json"]
    told = cli_run(args + ["--told-changeover-hours", "0"], out=io.StringIO())
    w = [json.loads(x) for x in WINDOWS_FILE.read_text().splitlines()[:3]]
    expected = [simulate(make_policy("greedy", cost_cap=False), np.atleast_2d(x["available"]), gap=600, work=C, deadline=52 * 3600,
                         changeover=D, price_ratio=K, changeover_told=0, horizon=len(x["available"]) * 600).actions for x in w]
    assert [r["actions"] for r in told] == expected
    assert expected != [r["actions"] for r in cli_run(args, out=io.StringIO())]


def test_a_dollar_cost_is_summed_exactly_from_the_actions(tmp_path):
    # This run's exact cost is $75.9261275, half a micro-dollar: summed in floats it came out a hair
    # under and was rounded to 75.926127, where the exact sum (the Decimal default, half to even) gives 75.926128.
    line = next(x for x in WINDOWS_FILE.read_text().splitlines() if x.startswith('{"trace":"us-west-2b_k80_8","window":127,'))
    (tmp_path / "w.jsonl").write_text(line + "\n")
    row = cli_run(["--windows", str(tmp_path / "w.jsonl"), "--policy", "uniform_progress", "--deadline-hours", "56",
                   "--spot-price", "0.9731", "--json"], out=io.StringIO())[0]
    ondemand = row["actions"].count("O")
    spot = len(row["actions"]) - ondemand - row["actions"].count("I")
    exact = (spot + Decimal("3.145") * ondemand) * 600 / 3600 * Decimal("0.9731")
    assert exact.quantize(Decimal("1e-7")) == exact == Decimal("75.9261275")
    assert Decimal(repr(row["cost"])) == Decimal("75.926128")
