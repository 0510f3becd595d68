"""`broker simulate` on bad input: every refusal is one line on stderr, exit status 2, naming the option or the file
and line (with --json also one object, its `field` the option), never a traceback and never after rows were written;
its amounts are read as `broker submit --budget` reads them."""

from __future__ import annotations

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


@pytest.mark.parametrize("trace", [None, ["a", "list"], ""], ids=["no trace", "a trace that is a list", "an empty trace"])
def test_a_window_whose_trace_is_no_name_is_still_replayed(capsys, tmp_path, trace):
    """A windows line with no "trace" was a KeyError, one whose trace is a list a TypeError (tracebacks); the trace is
    only a label, echoed in each row."""
    w = {k: v for k, v in json.loads(FIRST).items() if k != "trace"}
    f = tmp_path / "w.jsonl"
    f.write_text(json.dumps(w if trace is None else {**w, "trace": trace}) + "\n")
    code, rows, err = simulate(capsys, "--windows", str(f), "--policy", "greedy")
    _, named, _ = simulate(capsys, "--windows", str(WINDOWS_FILE), "--limit", "1", "--policy", "greedy")
    assert code == 0 and rows[0]["trace"] == trace and rows[0]["actions"] == named[0]["actions"], err


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
