"""`broker simulate` as a QA run found it (2026-12-07): `--zones … --windows 1000000` ran for ever (windows were drawn
with repeats from a trace holding ~19,000 different ones, and 300 asked gave 297 different), Ctrl-C printed a
traceback, and a window with no `trace` (or `"trace": 5`) was replayed with `"trace": null` / `5` in its row."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from broker.cli import main

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "data"
WINDOWS_FILE = SHARED / "cant-be-late-windows.jsonl"
FIRST = WINDOWS_FILE.open().readline().rstrip("\n")


def run(capsys, *argv: str) -> tuple[int, list, str]:
    code = main(["simulate", *argv, "--json"])
    out, err = capsys.readouterr()
    return code, [json.loads(line) for line in out.splitlines()], err


@pytest.fixture
def two_zones(tmp_path) -> str:
    """Two aligned traces of 130 ticks of 600 s: 50 different windows reach a 13.33 h deadline (81 ticks)."""
    files = []
    for name, pattern in (("east.json", [1, 1, 0]), ("west.json", [0, 1, 1, 1])):
        data = (pattern * 100)[:130]
        (tmp_path / name).write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": data}))
        files.append(str(tmp_path / name))
    return ",".join(files)


ARGS = ("--job-hours", "10", "--deadline-hours", "13.5", "--changeover-hours", "0.2", "--policy", "ondemand")


def test_more_windows_than_the_traces_hold_is_refused_naming_the_flag(capsys, two_zones):
    code, rows, err = run(capsys, "--zones", two_zones, "--windows", "51", *ARGS)
    assert code == 2 and rows == [{"error": rows[0]["error"], "field": "--windows"}], (rows, err)
    assert rows[0]["error"] == ("--windows: 51 windows asked, but the traces hold 50 different windows of 81 ticks of "
                                "600 s (one per first tick): ask for at most 50")
    code, rows, _ = run(capsys, "--zones", two_zones, "--windows", "99999999999999999999", *ARGS)
    assert code == 2 and rows[0]["field"] == "--windows"


def test_windows_sampled_from_traces_never_repeat_and_all_can_be_asked(capsys, two_zones):
    code, rows, err = run(capsys, "--zones", two_zones, "--windows", "50", "--seed", "3", *ARGS)
    assert code == 0, err
    starts = [r["start_tick"] for r in rows]
    assert sorted(starts) == list(range(50))  # every window once
    again = run(capsys, "--zones", two_zones, "--windows", "50", "--seed", "3", *ARGS)[1]
    assert [r["start_tick"] for r in again] == starts  # the seed still decides the order


def test_a_window_without_a_trace_is_named_by_its_file_and_line(capsys, tmp_path):
    w = json.loads(FIRST)
    del w["trace"]
    f = tmp_path / "mine.jsonl"
    f.write_text(FIRST + "\n" + json.dumps(w) + "\n")
    code, rows, err = run(capsys, "--windows", str(f), "--policy", "ondemand")
    assert code == 0, err
    assert [r["trace"] for r in rows] == [json.loads(FIRST)["trace"], "mine.jsonl line 2"]


@pytest.mark.parametrize("trace", [5, "", ["a"]], ids=["a number", "empty text", "a list"])
def test_a_window_whose_trace_is_not_a_name_is_refused_naming_the_line_and_field(capsys, tmp_path, trace):
    f = tmp_path / "bad.jsonl"
    f.write_text(json.dumps({**json.loads(FIRST), "trace": trace}) + "\n")
    code, rows, _ = run(capsys, "--windows", str(f))
    assert code == 2 and rows[0]["field"] == "--windows"
    assert rows[0]["error"].startswith(f"{f} line 1: trace must be the name of the trace the window was cut from "
                                       f"(text), got {json.dumps(trace)}"), rows


def test_ctrl_c_stops_a_simulation_with_a_line_not_a_traceback():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "broker.cli", "simulate", "--windows", str(WINDOWS_FILE),
                             "--optimum"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=str(REPO))
    time.sleep(4)  # imported and replaying (the optimum of 2,400 windows takes minutes)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (proc.returncode, err[-2000:])
    assert "Traceback" not in err and err.strip().endswith("interrupted"), err[-2000:]
