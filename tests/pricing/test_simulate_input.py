"""`broker simulate` on bad input: every refusal is one line on stderr, exit status 2, naming the option or the file
and line (with --json also one object, its `field` the option), never a traceback and never after rows were written;
its amounts are read as `broker submit --budget` reads them."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from broker.cli import main
from broker.spec import SpecError, _money

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"
WINDOWS_FILE = SHARED / "cant-be-late-windows.jsonl"
TRACES = SHARED / "spot-traces" / "availability" / "1-node" / "aws-02-15-2023"
ZONE = str(TRACES / "us-east-1a_v100_1.json")
FIRST = WINDOWS_FILE.open().readline().rstrip("\n")


def simulate(capsys, *argv: str) -> tuple[int, list, str]:
    """``broker simulate ARGV --json`` in this process (a traceback fails the test): the exit status, the JSON
    objects on stdout and stderr."""
    code = main(["simulate", *argv, "--json"])
    out, err = capsys.readouterr()
    return code, [json.loads(line) for line in out.splitlines()], err


def refused(capsys, *argv: str) -> tuple[str, str | None]:
    """The one refusal ``broker simulate ARGV --json`` gives: its sentence and its field. Exit status 2, one line on
    stderr, that sentence (after the usage, for an option argparse refused, as argparse says it), and nothing else on
    stdout."""
    code, rows, err = simulate(capsys, *argv)
    assert code == 2 and len(rows) == 1 and set(rows[0]) <= {"error", "field"}, (code, rows, err)
    said = rows[0]["error"]
    assert err == f"error: {said}\n" or (err.startswith("usage: broker simulate ")
                                         and err.endswith(f"\nbroker simulate: error: {said}\n")), err
    return rows[0]["error"], rows[0].get("field")


# -- 1. --budget is read as `broker submit --budget` reads an amount ------------------------------------------------

@pytest.mark.parametrize("written, said", [
    ("1e2", "'1e2' is not a number of spot-hours: write it as 100, not with an exponent"),
    ("2.5E-1", "'2.5E-1' is not a number of spot-hours: write it as 0.25, not with an exponent"),
    ("nan", "'nan' is not a number of spot-hours: write digits, with a point before any fraction"),
    ("inf", "'inf' is not a number of spot-hours: write digits, with a point before any fraction"),
    ("1e400", "'1e400' must be at most 1,000,000,000 spot-hours"),
    ("1.0000001", "'1.0000001' has more than 6 decimal places"),
    ("0,5", "'0,5' has a comma, which groups thousands only (1,000): write 0.5, with a point before the fraction"),
], ids=["an exponent (it was a budget of 100)", "a negative exponent", "nan", "inf", "past the largest amount",
        "a fraction of a millionth", "a decimal comma"])
def test_a_budget_in_spot_hours_submit_would_refuse_is_refused_saying_why(capsys, written, said):
    """`--budget 1e2` replayed with a budget of 100 spot-hours, and `--budget 1e400` with one past any cost, where
    `broker submit --budget 1e2` is refused for the exponent."""
    with pytest.raises(SpecError):
        _money(written, "budget")  # what submit makes of it
    sentence, field = refused(capsys, "--windows", str(WINDOWS_FILE), "--limit", "1", "--budget", written)
    assert sentence.startswith(f"--budget: {said}") and field == "--budget", sentence


@pytest.mark.parametrize("written, plain", [("1,000", "1000"), (" 150.5 ", "150.5"), ("+152", "152")],
                         ids=["a comma grouping thousands", "spaces around it", "a plus sign"])
def test_a_budget_in_spot_hours_takes_what_submit_takes(capsys, written, plain):
    assert _money(written, "budget") == _money(plain, "budget")
    args = ["--windows", str(WINDOWS_FILE), "--limit", "2", "--policy", "broker"]
    code, rows, _ = simulate(capsys, *args, "--budget", written)
    assert code == 0 and rows == simulate(capsys, *args, "--budget", plain)[1] and len(rows) == 2


@pytest.mark.parametrize("written, said", [
    ("1e2", "'1e2' is not an amount of dollars: write it as 100, not with an exponent"),
    ("inf", "'inf' is not an amount of dollars: write digits, with a point before the cents"),
], ids=["an exponent", "inf"])
def test_a_budget_in_dollars_submit_would_refuse_says_why(capsys, written, said):
    """With --spot-price the budget is dollars: `--budget 1e2` was "not a number"."""
    assert refused(capsys, "--windows", str(WINDOWS_FILE), "--limit", "1", "--spot-price", "0.9731",
                   "--budget", written) == (f"--budget: {said}", "--budget")


# -- 2. --spot-price: the option and the reason ------------------------------------------------------------------------

@pytest.mark.parametrize("written, said", [
    ("1e3", "'1e3' is not an amount of dollars: write it as 1000, not with an exponent"),
    ("nan", "'nan' is not an amount of dollars: write digits, with a point before the cents"),
    ("0.0000001", "'0.0000001' has more than 6 decimal places (money is counted in millionths of a dollar)"),
], ids=["an exponent (it was 'not a number')", "nan (it was 'not a number')",
        "a fraction of a micro-dollar (it was read as $0.000001, ten times what was written)"])
def test_a_spot_price_that_is_not_plain_dollars_is_refused_naming_the_option_and_why(capsys, written, said):
    assert refused(capsys, "--windows", str(WINDOWS_FILE), "--limit", "1", "--spot-price", written) == (
        f"--spot-price: {said}", "--spot-price")


# -- 3. every refusal names the option, or the file and line; --json's field is the option --------------------------

@pytest.mark.parametrize("args, sentence, field", [
    (["--windows", str(WINDOWS_FILE), "--policy", "cheapest"], "--policy: unknown policy 'cheapest'; known: ", "--policy"),
    ([], "the following arguments are required: --windows", "--windows"),
    (["--windows", str(WINDOWS_FILE), "--price-ratio", "lots"], "argument --price-ratio: invalid float value: 'lots'",
     "--price-ratio"),
    (["--windows"], "argument --windows: expected one argument", "--windows"),
    (["--zones", "{two}", "--windows", "1", "--deadline-hours", "60000"],
     "--zones: the traces hold 4000 ticks of 600 s (666.667 h), fewer than the 360000 a window needs to reach the "
     "deadline (60000 h): use a shorter --deadline-hours", "--zones"),
    (["--windows", "{tmp}/bad.jsonl"], "{tmp}/bad.jsonl line 2: not JSON", "--windows"),
    (["--windows", "{tmp}/eleven.jsonl"], "{tmp}/eleven.jsonl line 1, us-west-2a_k80_1 window 0: 11 zones; at most 10",
     "--windows"),
    (["--windows", "{tmp}/short.jsonl"], "{tmp}/short.jsonl line 1, us-west-2a_k80_1 window 0: 100 ticks of 600 s "
     "(16.6667 h) end before the deadline (60 h)", "--windows"),
    (["--windows", "{tmp}/empty.jsonl"], "no windows in {tmp}/empty.jsonl", "--windows"),
    (["--windows", "{tmp}/nope.jsonl"], "No such file or directory: {tmp}/nope.jsonl", "--windows"),
    (["--zones", "{tmp}/nope.json", "--windows", "2"], "No such file or directory: {tmp}/nope.json", "--zones"),
], ids=["an unknown policy", "no --windows", "a number in words", "an option without its value",
        "traces shorter than a window", "a windows line that is not JSON", "a window of 11 zones",
        "a window that ends before the deadline", "an empty windows file", "a missing windows file",
        "a missing trace file"])
def test_every_refusal_names_the_option_or_the_file_and_line(capsys, tmp_path, args, sentence, field):
    """`--policy cheapest`, a missing --windows, `--price-ratio lots`, traces too short for the deadline, and a
    windows file's line that is wrong gave a --json error with no field; a window of 11 zones, or one too short,
    named its trace and window, not the file and line where it is."""
    w = json.loads(FIRST)
    (tmp_path / "bad.jsonl").write_text(FIRST + "\n" + '{"trace": oops}\n')
    (tmp_path / "eleven.jsonl").write_text(json.dumps({**w, "available": [w["available"]] * 11}) + "\n")
    (tmp_path / "short.jsonl").write_text(json.dumps({**w, "available": w["available"][:100]}) + "\n")
    (tmp_path / "empty.jsonl").write_text("\n\n")
    (tmp_path / "two.json").write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": [0, 1, 1, 0] * 1000}))
    fill = {"tmp": str(tmp_path), "two": str(tmp_path / "two.json")}
    said, blamed = refused(capsys, *(a.format(**fill) for a in args))
    assert said.startswith(sentence.format(**fill)) and blamed == field, (said, blamed)


# -- 4. no rows, then an error: the input is checked whole before the first row --------------------------------------

@pytest.mark.parametrize("bad_line, said", [
    ('{"trace": "t", "gap_seconds": 600, "available": [1, 0\n', "line 5: not JSON"),
    ("[1, 2]\n", "line 5: a window is a JSON object"),
    ("short", "line 5, us-west-2a_k80_1 window 0: 100 ticks of 600 s (16.6667 h) end before the deadline"),
    ("negative", "line 5, us-west-2a_k80_1 window 0: available holds -1 at tick 3: 1 = spot available, 0 = not"),
], ids=["a line cut short", "a JSON array", "a window that ends before the deadline", "a negative availability"])
def test_a_windows_file_wrong_at_its_fifth_line_prints_no_row_before_its_error(capsys, tmp_path, bad_line, said):
    """With --json, a windows file whose fifth line was malformed printed four rows and then the error: a script
    piping the output to a checker took the four for a result. Now the whole file is read and every window checked
    before the first replay: exactly one JSON object, the error, and exit status 2."""
    w = json.loads(FIRST)
    if bad_line == "short":
        bad_line = json.dumps({**w, "available": w["available"][:100]}) + "\n"
    elif bad_line == "negative":
        bad_line = json.dumps({**w, "available": [1, 1, 1, -1, *w["available"][4:]]}) + "\n"
    lines = WINDOWS_FILE.open().readlines()[:4]
    f = tmp_path / "w.jsonl"
    f.write_text("".join(lines) + bad_line + lines[0])
    sentence, field = refused(capsys, "--windows", str(f), "--policy", "greedy")
    assert sentence.startswith(f"{f} {said}") and field == "--windows", sentence


def test_a_limit_reads_only_the_windows_it_replays(capsys, tmp_path):
    """A line past --limit is not read: `--limit 4` on that file replays its first four windows."""
    f = tmp_path / "w.jsonl"
    f.write_text("".join(WINDOWS_FILE.open().readlines()[:4]) + "not json\n")
    code, rows, _ = simulate(capsys, "--windows", str(f), "--policy", "greedy", "--limit", "4")
    assert code == 0 and [r["window"] for r in rows] == [0, 1, 2, 3]


# -- 5. bad input that was a traceback ---------------------------------------------------------------------------------

def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("args, sentence, field", [
    (["--zones", "{two}", "--windows", "²"], "--windows: with --zones, the number of windows to sample", "--windows"),
    (["--windows", str(WINDOWS_FILE), "--job-hours", "1e300", "--deadline-hours", "1e301"],
     f"{WINDOWS_FILE} line 1, us-west-2a_k80_1 window 0: 554 ticks of 600 s (92.3333 h) end before the deadline",
     "--windows"),
    (["--windows", "{tmp}/latin.jsonl"], "{tmp}/latin.jsonl line 2: not UTF-8 text (byte 0xe9 at column 15)", "--windows"),
    (["--zones", "{tmp}/latin.jsonl", "--windows", "2"], "{tmp}/latin.jsonl: not a spot-traces JSON file (not UTF-8 text",
     "--zones"),
    (["--windows", "{tmp}/deep.jsonl"], "{tmp}/deep.jsonl line 1: not JSON (lists nested too deeply to read)", "--windows"),
    (["--zones", "{tmp}/deep.jsonl", "--windows", "2"], "{tmp}/deep.jsonl: not a spot-traces JSON file (lists nested",
     "--zones"),
    (["--zones", "{tmp}/infinite.json", "--windows", "2"], "{tmp}/infinite.json: data[1] must be a whole number "
     "(>0: spot is up), got inf", "--zones"),
], ids=["a digit int() cannot read", "hours past 28 digits", "a windows file that is not UTF-8",
        "a trace file that is not UTF-8", "a windows line nested too deeply", "a trace nested too deeply",
        "Infinity among a trace's data"])
def test_input_that_was_a_traceback_is_one_refusal(capsys, tmp_path, args, sentence, field):
    (tmp_path / "latin.jsonl").write_bytes(FIRST.encode() + b"\n" + '{"trace": "café"}\n'.encode("latin-1"))
    (tmp_path / "deep.jsonl").write_text(_nested(100_000) + "\n")
    (tmp_path / "infinite.json").write_text('{"metadata": {"gap_seconds": 600}, "data": [1, Infinity]}')
    (tmp_path / "two.json").write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": [0, 1, 1, 0] * 1000}))
    fill = {"tmp": str(tmp_path), "two": str(tmp_path / "two.json")}
    said, blamed = refused(capsys, *(a.format(**fill) for a in args))
    assert said.startswith(sentence.format(**fill)) and blamed == field, said


@pytest.mark.parametrize("data, said", [
    ([1, 0, -1, 1] * 1000, "data holds -1 at tick 2: each tick is the number of spot instances available then"),
], ids=["a negative count (it was read as no spot)"])
def test_a_trace_with_a_count_below_zero_is_refused_naming_the_file_and_tick(capsys, tmp_path, data, said):
    f = tmp_path / "zone.json"
    f.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": data}))
    assert refused(capsys, "--zones", str(f), "--windows", "2") == (f"{f}: {said} (1 = spot available, 0 = not), "
                                                                     "never below 0", "--zones")


def test_a_directory_or_an_empty_name_given_as_a_file_is_refused(capsys, tmp_path):
    assert refused(capsys, "--windows", str(tmp_path)) == (f"Is a directory: {tmp_path}", "--windows")
    assert refused(capsys, "--zones", str(tmp_path), "--windows", "2") == (f"Is a directory: {tmp_path}", "--zones")
    # `--windows ''` was "Is a directory: ." (the empty path is the current folder)
    assert refused(capsys, "--windows", "") == (
        "--windows: give a windows .jsonl file, or with --zones the number of windows to sample", "--windows")
    # a number of windows with no --zones is looked for as a file: say what a number is for
    assert refused(capsys, "--windows", "20") == (
        "No such file or directory: 20 (a number of windows to sample needs --zones)", "--windows")


def test_a_window_with_no_trace_is_still_replayed_named_by_its_file_and_line(capsys, tmp_path):
    """A windows line with no "trace" was a KeyError (a traceback), then a row with "trace": null; one whose trace is
    not a name (a list, empty text) is refused naming its line (test_simulate_qa_dec7.py)."""
    w = {k: v for k, v in json.loads(FIRST).items() if k != "trace"}
    f = tmp_path / "w.jsonl"
    f.write_text(json.dumps(w) + "\n")
    code, rows, err = simulate(capsys, "--windows", str(f), "--policy", "greedy")
    _, named, _ = simulate(capsys, "--windows", str(WINDOWS_FILE), "--limit", "1", "--policy", "greedy")
    assert code == 0 and rows[0]["trace"] == "w.jsonl line 1" and rows[0]["actions"] == named[0]["actions"], err


def test_files_with_unicode_names_are_read(capsys, tmp_path):
    windows = tmp_path / "fenêtres ✓.jsonl"
    windows.write_text(FIRST + "\n")
    code, rows, _ = simulate(capsys, "--windows", str(windows), "--policy", "greedy")
    assert code == 0 and len(rows) == 1
    zone = tmp_path / "zöne ✓.json"
    zone.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": [0, 1, 1, 0] * 1000}))
    code, rows, _ = simulate(capsys, "--zones", str(zone), "--windows", "1", "--policy", "greedy")
    assert code == 0 and rows[0]["trace"] == "zöne ✓"


def test_zones_sampled_without_a_seed_are_those_of_seed_0(capsys):
    args = ["--zones", ZONE, "--windows", "2", "--policy", "greedy", "--deadline-hours", "52"]
    code, rows, _ = simulate(capsys, *args)
    assert code == 0 and rows == simulate(capsys, *args, "--seed", "0")[1] and len(rows) == 2


# -- 6. what a walkthrough of `broker simulate` found ------------------------------------------------------------------

def _steady(tmp_path, ticks: int = 200, gap: int = 60, **extra) -> Path:
    """A windows file of one window: spot up at every one of ``ticks`` ticks of ``gap`` s."""
    f = tmp_path / "steady.jsonl"
    f.write_text(json.dumps({"trace": "steady", "window": 0, "gap_seconds": gap, "available": [1] * ticks, **extra}) + "\n")
    return f


def test_a_deadline_of_exactly_the_job_and_one_changeover_is_never_refused_as_shorter(capsys, tmp_path):
    """`--job-hours 2.1 --changeover-hours 0.2 --deadline-hours 2.3` was "2.3 h is shorter than the job (2.1 h) plus
    one changeover (0.2 h)": compared in floats, 2.1 + 0.2 is 2.3000000000000003. The replay counts whole seconds."""
    from decimal import Decimal

    from pricing.simulate_cli import _check, parser

    for tenths, d in itertools.product(range(1, 800), ("0.1", "0.2", "0.3", "0.5")):
        job = f"{tenths / 10:.1f}"
        args = parser().parse_args(["--windows", "w.jsonl", "--job-hours", job, "--changeover-hours", d,
                                    "--deadline-hours", str(Decimal(job) + Decimal(d))])
        _check(args)  # no SystemExit
    code, rows, err = simulate(capsys, "--windows", str(_steady(tmp_path)), "--policy", "greedy", "--job-hours", "2.1",
                               "--changeover-hours", "0.2", "--deadline-hours", "2.3")
    assert code == 0 and rows[0]["finished"] and rows[0]["finish_hours"] == 2.3, (rows, err)


@pytest.mark.parametrize("policy", ["broker,broker", "greedy, broker,greedy"])
def test_a_policy_named_twice_is_refused(capsys, policy):
    """`--policy broker,broker` replayed broker twice: the table counted 2 windows for one, --json wrote each row
    twice, and the budget footer said "broker 0 of 2; broker 0 of 2"."""
    twice = "broker" if policy == "broker,broker" else "greedy"
    assert refused(capsys, "--windows", str(WINDOWS_FILE), "--limit", "1", "--policy", policy) == (
        f"--policy: {twice!r} is named twice in {policy!r}: name each policy once", "--policy")


@pytest.mark.parametrize("option, first, second", [
    ("--job-hours", "6", "7"), ("--deadline-hours", "60", "61"), ("--seed", "1", "2"), ("--policy", "broker", "greedy"),
    ("--limit", "1", "2"), ("--spot-price", "0.9", "1"), ("--budget", "1", "2"), ("--price-ratio", "3", "3.5"),
    ("--windows", "a.jsonl", "b.jsonl"),
])
def test_an_option_given_twice_is_refused_as_the_other_commands_refuse_one(capsys, option, first, second):
    """`--job-hours 6 --job-hours 7` replayed a 7-hour job without a word; `broker submit --budget 1 --budget 2` is
    refused, and so is this, in the same words."""
    zones = ["--zones", ZONE, "--windows", "2"] if option == "--seed" else ["--windows", str(WINDOWS_FILE)]
    if option == "--windows":
        zones = []
    assert refused(capsys, *zones, option, first, option, second) == (
        f"argument {option}: given twice ({first}, then {second}): give it once", option)


@pytest.mark.parametrize("bad", ["0.5", "true", "null", '"1"', "NaN", "[1]"])
def test_an_availability_that_is_not_a_whole_number_is_named_with_its_tick(capsys, tmp_path, bad):
    """A bad `available` value got only "available must be a non-empty list of 0/1 per tick, or one such list per
    zone": no tick, no value, and 0/1 where any whole number ≥ 0 is taken."""
    w = json.loads(FIRST)
    f = tmp_path / "w.jsonl"
    f.write_text(FIRST + "\n" + json.dumps(w)[:-1].replace('"available": [', '"available": [1, 1, 1, 1, ' + bad + ", ", 1)
                 + "}\n")
    sentence, field = refused(capsys, "--windows", str(f))
    assert sentence == f"{f} line 2: available holds {bad} at tick 4: each tick is a whole number of spot instances " \
                       "available then, ≥ 0 (>0 = spot is up)" and field == "--windows", sentence


def test_an_availability_that_is_not_a_whole_number_names_its_zone_too(capsys, tmp_path):
    w = json.loads(FIRST)
    f = tmp_path / "w.jsonl"
    f.write_text(json.dumps({**w, "available": [w["available"], [0, 0.5, *w["available"][2:]]]}) + "\n")
    assert refused(capsys, "--windows", str(f))[0].startswith(f"{f} line 1: available holds 0.5 at tick 1 of zone 1: ")
    f.write_text(json.dumps({**w, "available": []}) + "\n")
    said = refused(capsys, "--windows", str(f))[0]
    assert "0/1" not in said and "whole numbers per tick" in said and ">0 = spot is up" in said, said


def test_the_table_says_what_its_columns_compare_and_the_run_it_replayed(capsys):
    """The table had no legend: what "> on-demand" and "vs optimum" compare, against which on-demand-only cost, and
    the job, deadline, changeover and price ratio replayed were nowhere."""
    code = main(["simulate", "--windows", str(WINDOWS_FILE), "--limit", "2", "--policy", "greedy", "--optimum",
                 "--job-hours", "47", "--deadline-hours", "60.5", "--changeover-hours", "0.10", "--price-ratio", "3"])
    out = capsys.readouterr().out
    _, rows, _ = simulate(capsys, "--windows", str(WINDOWS_FILE), "--limit", "1", "--policy", "greedy",
                          "--job-hours", "47", "--changeover-hours", "0.10", "--price-ratio", "3")
    assert code == 0 and f"> on-demand: runs costing more than on-demand only ({rows[0]['ondemand_only_cost']:,.2f} " \
                         "spot-h: the job and one changeover, whole ticks); vs optimum: total cost ÷ the optimum's" in out
    assert "replayed: job 47 h, deadline 60.5 h, changeover 0.10 h, price ratio 3\n" in out, out


def test_a_run_not_done_says_how_far_it_got_and_the_table_says_its_cost_is_in_the_mean(capsys, tmp_path):
    """A run cut off at the window's end (a job longer than the policy was told) was averaged into "mean cost" with
    the cost of its ticks so far, unsaid, and its row said nothing of how far it got."""
    args = ["--windows", str(_steady(tmp_path, ticks=72, gap=600)), "--policy", "greedy", "--job-hours", "48",
            "--told-job-hours", "10", "--deadline-hours", "12"]
    code, rows, err = simulate(capsys, *args)
    assert code == 0 and rows[0]["finish_hours"] is None and 0 < rows[0]["progress_hours"] <= 12, (rows, err)
    assert main(["simulate", *args]) == 0
    assert "mean cost includes 1 run not done within twice the deadline or the window's end (their cost so far; " \
           "progress_hours in --json)" in capsys.readouterr().out
    # a row that is done keeps the keys it had, and gets none of these
    _, rows, _ = simulate(capsys, "--windows", str(WINDOWS_FILE), "--limit", "1", "--policy", "greedy")
    assert set(rows[0]) == {"trace", "window", "policy", "gap_seconds", "cost", "finished", "finish_hours",
                            "spot_hours", "ondemand_hours", "ondemand_only_cost", "actions", "start_tick"}


def test_a_tick_given_too_long_for_the_deadline_blames_gap_seconds_in_the_singular(capsys, tmp_path):
    """`--zones a.json --gap-seconds 100000` said "--deadline-hours: ... the job needs 1 whole ticks", blaming the
    deadline for the tick the user chose."""
    zone = tmp_path / "a.json"
    zone.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": [0, 1, 1, 0] * 1000}))
    assert refused(capsys, "--zones", str(zone), "--windows", "1", "--gap-seconds", "100000", "--job-hours", "10",
                   "--deadline-hours", "20") == (
        "--gap-seconds: with 100000 s ticks the job needs 1 whole tick (27.7778 h, ticks are billed and progress whole) "
        "but the deadline holds 0: no policy can finish in time", "--gap-seconds")


@pytest.mark.parametrize("lines", [2, 1], ids=["a windows file", "a windows file of one line"])
def test_a_windows_file_given_to_zones_says_to_give_it_to_windows(capsys, tmp_path, lines):
    """The reverse mistake (a trace given to --windows) said where to give it; this said "not a spot-traces JSON file
    (Extra data: line 2 column 1 (char 3311))", or that the file needs metadata.gap_seconds."""
    f = tmp_path / "w.jsonl"
    f.write_text("".join(WINDOWS_FILE.open().readlines()[:lines]))
    assert refused(capsys, "--zones", str(f), "--windows", "2") == (
        f"{f}: this looks like a windows JSONL file (one window a line), not a spot-traces file: give it to --windows, "
        "without --zones", "--zones")


@pytest.mark.parametrize("option, typed", [("--job-hours", "0"), ("--price-ratio", "0.00"), ("--changeover-hours", "-1")])
def test_a_number_refused_is_echoed_as_typed(capsys, option, typed):
    """`--job-hours 0` said "got 0.0"."""
    assert refused(capsys, "--windows", str(WINDOWS_FILE), option, typed)[0].endswith(f", got {typed}")


def test_a_price_ratio_below_1_says_on_demand_is_the_cheaper_tier(capsys):
    code, _, err = simulate(capsys, "--windows", str(WINDOWS_FILE), "--limit", "1", "--policy", "greedy",
                            "--price-ratio", "0.5")
    assert code == 0 and err == "note: --price-ratio 0.5 is below 1, so on-demand is the cheaper tier; the policies " \
                                "are built for on-demand costing more (k > 1)\n"
    assert simulate(capsys, "--windows", str(WINDOWS_FILE), "--limit", "1", "--policy", "greedy")[2] == ""


def test_hours_in_a_row_are_rounded_as_its_cost_and_a_windows_zones_are_echoed(capsys, tmp_path):
    """`spot_hours` and `finish_hours` were raw floats (49.666666666666664) beside a cost rounded to 9 decimals; a
    windows line's `zones` names were not in its rows, so the digits of `actions` could not be mapped back."""
    from decimal import Decimal

    _, rows, _ = simulate(capsys, "--windows", str(WINDOWS_FILE), "--limit", "20", "--policy", "broker,greedy")
    for row in rows:
        for key in ("spot_hours", "ondemand_hours", "finish_hours"):
            assert Decimal(repr(row[key])) == Decimal(repr(row[key])).quantize(Decimal("1e-9")), (key, row[key])
    w = json.loads(FIRST)
    f = tmp_path / "w.jsonl"
    f.write_text(json.dumps({**w, "available": [w["available"], w["available"]], "zones": ["east", "west"]}) + "\n")
    code, rows, _ = simulate(capsys, "--windows", str(f), "--policy", "greedy")
    assert code == 0 and rows[0]["zones"] == ["east", "west"]
    code, rows, _ = simulate(capsys, "--zones", ZONE, "--windows", "1", "--policy", "greedy", "--deadline-hours", "52")
    assert code == 0 and rows[0]["zones"] == [Path(ZONE).stem]


def test_the_help_says_how_zones_are_aligned_and_what_a_price_ratio_below_1_means():
    from pricing.simulate_cli import parser

    text = " ".join(parser().format_help().split())
    assert "aligned by their first tick only (the files hold no timestamps)" in text
    assert "below 1 on-demand is the cheaper tier" in text
