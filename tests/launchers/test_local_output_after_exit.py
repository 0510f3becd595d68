"""What a command's leftover processes write after it exits (a DataLoader's workers shutting down, `cmd &`): the
runner reads on until the output is quiet, judged by the reading thread itself, with a bound. It had waited a fixed
2 s and then closed the log: lines still coming were lost, and so, on a loaded host that let the reader fall
behind, were lines already in the pipe (a recovery test once found its attempt's last "step 6" line missing while
its checkpoint was of step 6). Real runners, real processes."""

from __future__ import annotations

import json
import os
import signal
import time

from launchers import local_runner
from launchers.local_runner import Runner


def _run(tmp_path, run: str) -> tuple[str, dict, float]:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "request.json").write_text(json.dumps({"attempt_id": "j-1-a1", "task": {"run": run}, "placement": {}}))
    began = time.monotonic()
    result = Runner(run_dir).run()
    return (run_dir / "output.log").read_text(), result, time.monotonic() - began


def _kill(pid_file) -> None:
    try:
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
    except (OSError, ValueError):
        pass


def test_lines_a_left_process_writes_after_the_command_exits_are_kept_while_they_keep_coming(tmp_path):
    # the command exits at once; what it left prints a line every 0.8 s for 4 s: every gap is shorter than the
    # quiet the runner waits for (2 s), the whole well past the fixed 2 s it used to wait
    out, result, _ = _run(tmp_path, "echo before; (for i in 1 2 3 4 5; do sleep 0.8; echo late $i; done) & exit 0")
    assert result["exit_code"] == 0
    assert out.splitlines()[-6:] == ["before", *(f"late {i}" for i in range(1, 6))], out


def test_a_silent_process_left_holding_the_output_keeps_the_attempt_only_for_the_quiet(tmp_path):
    pid = tmp_path / "holder.pid"
    try:
        out, result, took = _run(tmp_path, f"echo ran; sleep 60 & echo $! > {pid}; exit 4")
    finally:
        _kill(pid)
    assert result["exit_code"] == 4 and out.splitlines()[-1] == "ran", out
    assert local_runner.PUMP_LINGER_S <= took < local_runner.PUMP_LINGER_S + 4, took  # not the 60 s it sleeps


def test_a_process_left_printing_without_end_is_read_no_longer_than_the_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(local_runner, "PUMP_MAX_S", 3.0)
    monkeypatch.setenv(local_runner.OUTPUT_CAP_ENV, "1M")  # `yes` fills it in a moment: kept small on disk
    pid = tmp_path / "yes.pid"
    try:
        out, result, took = _run(tmp_path, f"echo ran; yes & echo $! > {pid}; exit 0")
    finally:
        _kill(pid)
    assert result["exit_code"] == 0 and out.startswith("ran\ny\n"), out[:100]
    assert 3.0 <= took < 3.0 + local_runner.PUMP_LINGER_S + 4, took
