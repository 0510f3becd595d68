"""An attempt's output on this host is capped on disk: a job printing without end (`run: yes`) wrote 77 GB in
3 minutes to the runner's output.log, filled the broker host's disk (the engine failed with ENOSPC), and its next
attempt wrote 35 GB more. The start of the output and its newest part are kept, with a line saying what was left
out between; the job itself runs on, unslowed — real runners, real processes, a cap of a few hundred KiB."""

from __future__ import annotations

import json
import os
import sys
import time

from broker.engine.reconcile import _log_tail
from launchers.base import LaunchRequest, Phase
from launchers.local import LocalLauncher
from launchers.local_runner import (CAP_FILE, DEFAULT_OUTPUT_CAP, OUTPUT_CAP_ENV, TAIL_PREFIX, CappedLog, Runner,
                                    output_cap, read_output)

CAP = 256 << 10  # 256 KiB
# ~3 MiB of numbered lines, then a last word: twelve times the cap
TALKER = ("import sys\n"
          "for i in range(40000): sys.stdout.write(f'line {i:06d} ' + 'x' * 64 + '\\n')\n"
          "print('the last line', flush=True)\n"
          "sys.exit(3)\n")


def _on_disk(run_dir) -> int:
    total = 0
    for name in os.listdir(run_dir):
        if name.startswith("output.log"):
            try:
                total += os.path.getsize(run_dir / name)
            except FileNotFoundError:  # a segment removed as the runner went on to a new one
                pass
    return total


def _whole(reader, limit=1 << 16) -> tuple[bytes, int]:
    """Read it all as a follower does: chunk after chunk, each from the offset the last answered."""
    out, offset = b"", 0
    while True:
        data, offset = reader(offset, limit)
        if not data:
            return out, offset
        out += data


def _run(tmp_path, monkeypatch, run: str):
    monkeypatch.setenv(OUTPUT_CAP_ENV, str(CAP))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "request.json").write_text(json.dumps({"attempt_id": "j-1-a1", "task": {"run": run}, "placement": {}}))
    return run_dir, Runner(run_dir).run()


def test_a_job_printing_far_past_the_cap_keeps_its_start_and_its_end_within_the_cap(tmp_path, monkeypatch):
    script = tmp_path / "talk.py"
    script.write_text(TALKER)
    run_dir, result = _run(tmp_path, monkeypatch, f"echo setup-done; {sys.executable} {script}")
    assert (result["exit_code"], result["step"]) == (3, "run")  # its exit recorded as it was
    assert _on_disk(run_dir) <= CAP + 4096
    assert os.path.getsize(run_dir / "output.log") == CAP // 4
    assert len([n for n in os.listdir(run_dir) if n.startswith(TAIL_PREFIX)]) <= 2
    assert (run_dir / CAP_FILE).read_text() == str(CAP)

    text, end = _whole(lambda o, n: read_output(run_dir, o, n))
    text = text.decode()
    assert end > 3_000_000  # the offset of the whole output: what was printed, kept or not
    assert text.startswith("setup-done\nline 000000 ")
    assert text.endswith("line 039999 " + "x" * 64 + "\nthe last line\n")
    assert text.count("[spot-broker]") == 1
    marker = next(line for line in text.splitlines() if line.startswith("[spot-broker]"))
    assert "bytes of output left out here: the attempt's output passed its cap of 256 KiB" in marker
    left_out = int(marker.split()[1])
    head = CAP // 4
    # the head ends in the middle of a line: the marker goes on a line of its own
    assert text[head:].startswith("\n" + marker + "\n")
    tail = text[head + 1 + len(marker) + 1:]
    assert head + left_out + len(tail.encode()) == end  # kept + left out = all of it
    assert CAP // 2 <= len(tail) <= CAP * 3 // 4

    # read at once, as `broker logs` does: the same
    once, offset = read_output(run_dir, 0, 1 << 20)
    assert (once.decode(), offset) == (text, end)


def test_a_follower_goes_on_across_what_was_left_out(tmp_path):
    """`broker logs -f` reads on from the offset it was given: one that fell in what was left out since reads on from
    the oldest output kept, after the line that says so; nothing is read twice, nothing kept is skipped."""
    log = CappedLog(tmp_path, 8192)  # a head of 2048 bytes, segments of 3072
    lines = [f"{i:05d}\n".encode() for i in range(3000)]  # 6 bytes each
    with log:
        for line in lines[:300]:
            log.write(line)
        first, offset = read_output(tmp_path, 0, 1 << 20)
        assert first == b"".join(lines[:300]) and offset == 1800  # nothing left out yet
        for line in lines[300:]:
            log.write(line)
    assert _on_disk(tmp_path) <= 8192
    rest, end = read_output(tmp_path, offset, 1 << 20)
    assert end == 18000
    whole = b"".join(lines)
    assert rest.startswith(whole[1800:2048] + b"\n[spot-broker] ")  # the rest of the head, then the marker
    marker, kept = rest[2048 - 1800 + 1:].split(b"\n", 1)
    assert b"bytes of output left out here" in marker and b"its cap of 8 KiB" in marker
    assert 2048 + int(marker.split()[1]) + len(kept) == end
    assert whole.endswith(kept)
    assert kept.endswith(b"02999\n") and len(kept) >= 3072
    # a follower whose offset is in what was left out since it read: on from the oldest output kept
    again, at = read_output(tmp_path, 5000, 1 << 20)
    assert again.startswith(b"\n[spot-broker] ") and again.endswith(kept) and at == end
    assert int(again.split()[1]) == end - len(kept) - 5000
    # one in what is kept: from there, no marker
    assert read_output(tmp_path, end - 12, 1 << 20) == (whole[-12:], end)
    assert read_output(tmp_path, end, 1 << 20) == (b"", end)  # at the end: nothing more, the same offset
    assert read_output(tmp_path, 1 << 45, 10) == (b"", 1 << 45)  # far past it (once a 500: EINVAL)


def test_the_brokers_diagnosis_and_logs_read_the_newest_output_of_a_capped_attempt(tmp_path, monkeypatch):
    """Through the launcher, as the broker reads it: the tail its failure diagnosis reads is the attempt's last
    output, and `yes` (endless) is drained at full speed — the job is stopped by its stop, never by its output."""
    monkeypatch.setenv(OUTPUT_CAP_ENV, "256K")
    script = tmp_path / "talk.py"
    script.write_text(TALKER)
    launcher = LocalLauncher(tmp_path / "data" / "runs", python=sys.executable)
    placement = {"tier": "onprem", "cloud": "local", "region": "cpu", "zone": "cpu", "num_nodes": 1}
    launcher.launch(LaunchRequest(attempt_id="j-1-a1", job_id="j-1", attempt=1, task={"run": f"{sys.executable} {script}"},
                                  placement=placement, stop_grace_seconds=1.0))
    launcher.launch(LaunchRequest(attempt_id="j-2-a1", job_id="j-2", attempt=1, task={"run": "yes"},
                                  placement=placement, stop_grace_seconds=1.0))
    runs = tmp_path / "data" / "runs"
    try:
        end = time.monotonic() + 60
        while launcher.status("j-1-a1").phase in (Phase.PENDING, Phase.RUNNING) and time.monotonic() < end:
            time.sleep(0.2)
        status = launcher.status("j-1-a1")
        assert status.phase is Phase.FAILED and status.exit_code == 3
        tail = _log_tail(launcher, "j-1-a1")
        assert tail.endswith("line 039999 " + "x" * 64 + "\nthe last line\n")
        assert _on_disk(runs / "j-1-a1") <= CAP + 4096

        # `yes` runs on, its output drained (well past the cap in a few seconds) and kept bounded
        data, offset = b"", 0
        while offset <= 8 * CAP and time.monotonic() < end:
            time.sleep(0.2)
            data, offset = launcher.logs("j-2-a1", offset=0, limit=1 << 22)
        assert offset > 8 * CAP, "the endless writer was slowed or stopped"
        assert launcher.status("j-2-a1").phase is Phase.RUNNING
        assert _on_disk(runs / "j-2-a1") <= CAP + 4096
        assert b"bytes of output left out here" in data and set(data[-1000:]) == set(b"y\n")
    finally:
        launcher.stop("j-2-a1", grace_seconds=1.0, reason="cancelled")
        end = time.monotonic() + 30
        while launcher.status("j-2-a1").phase in (Phase.PENDING, Phase.RUNNING) and time.monotonic() < end:
            time.sleep(0.2)
    assert launcher.status("j-2-a1").phase is Phase.STOPPED
    assert _on_disk(runs / "j-2-a1") <= CAP + 4096


def test_the_cap_setting():
    assert output_cap({}) == DEFAULT_OUTPUT_CAP == 64 << 20
    assert output_cap({OUTPUT_CAP_ENV: "1048576"}) == 1 << 20
    assert output_cap({OUTPUT_CAP_ENV: "256K"}) == output_cap({OUTPUT_CAP_ENV: "256KiB"}) == 256 << 10
    assert output_cap({OUTPUT_CAP_ENV: "2g"}) == 2 << 30
    assert output_cap({OUTPUT_CAP_ENV: "lots"}) == DEFAULT_OUTPUT_CAP
    assert output_cap({OUTPUT_CAP_ENV: "10"}) == 4096  # the least it takes
