"""A training script's own SIGTERM handler beside the checkpointer's.

Set before the Checkpointer is made, it is called once the preemption's checkpoint has committed (it never ran at
all before: a Slurm requeue, a tracker's flush), and its ``sys.exit(0)`` does not turn the preempted run into a
finished one. Set after, it takes the checkpointer's place: said at the first ``due()``, long before a preemption,
because a handler of the script's that exits at once loses the preemption's checkpoint."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

SCRIPT = textwrap.dedent("""
    import os, signal, sys, time
    from checkpoint import Checkpointer

    mode, marks = sys.argv[1], sys.argv[2]

    def mine(signum, frame):
        # where the checkpoints stood when the script's handler ran
        base = os.environ["BROKER_CHECKPOINT_URI"]
        done = [p for p in os.listdir(base) if p.startswith("step-")] if os.path.isdir(base) else []
        # one write: the checkpointer's notice, on stderr into the same pipe, came between print's pieces
        sys.stdout.write(f"my handler ran; committed: {len(done)}\\n")
        sys.stdout.flush()
        if mode.endswith("_exit"):
            sys.exit(0)

    if mode.startswith("before"):
        signal.signal(signal.SIGTERM, mine)
    ck = Checkpointer(every_steps=10_000)
    if mode.startswith("after"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN if mode == "after_ignored" else mine)
    state = {"w": [0.0]}
    for step in range(1, 100_000):
        state["w"][0] = float(step)
        if ck.due(step):
            ck.save(step, state)
        if step == 1:
            open(marks, "w").close()  # the first due() is behind it: SIGTERM may come
        time.sleep(0.01)
    ck.close()
""")


def _run(tmp_path: Path, subprocess_env, mode: str, *, signal_it: bool = True) -> tuple[int, str]:
    base, marks = tmp_path / "ckpt", tmp_path / "ready"
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script), mode, str(marks)], env=subprocess_env(str(base)),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while not marks.exists():
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, "the script never reached its first step"
            time.sleep(0.05)
        if signal_it:
            proc.send_signal(signal.SIGTERM)
        else:
            time.sleep(0.3)
            proc.kill()
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out


def _committed(tmp_path: Path) -> list[str]:
    base = tmp_path / "ckpt"
    return sorted(p for p in os.listdir(base) if p.startswith("step-")) if base.exists() else []


def test_a_handler_set_before_the_checkpointer_runs_once_the_preemption_checkpoint_committed(tmp_path, subprocess_env):
    status, out = _run(tmp_path, subprocess_env, "before")
    assert status == 143, out
    assert len(_committed(tmp_path)) == 1, out
    assert "my handler ran; committed: 1" in out, out
    assert out.index("committed, exiting") < out.index("my handler ran"), out


def test_a_handler_of_the_scripts_that_exits_0_does_not_make_a_preempted_run_look_finished(tmp_path, subprocess_env):
    status, out = _run(tmp_path, subprocess_env, "before_exit")
    assert status == 143, out
    assert len(_committed(tmp_path)) == 1 and "my handler ran; committed: 1" in out, out


def test_a_handler_set_after_the_checkpointer_is_said_at_the_first_step_before_any_preemption(tmp_path,
                                                                                               subprocess_env):
    status, out = _run(tmp_path, subprocess_env, "after", signal_it=False)
    assert status == -signal.SIGKILL, out
    said = [line for line in out.splitlines() if "set SIGTERM's handler after making its Checkpointer" in line]
    assert said and "SIGTERM's handler is now mine" in said[0], out
    assert "Set your handler before making the Checkpointer" in said[0], out
    assert sum("CheckpointWarning" in line for line in out.splitlines()) == 1, out  # once, not at every step


def test_a_handler_set_after_that_only_prints_still_lets_the_checkpointer_save(tmp_path, subprocess_env):
    status, out = _run(tmp_path, subprocess_env, "after")
    assert status == 143, out
    assert len(_committed(tmp_path)) == 1 and "my handler ran; committed: 0" in out, out


def test_ignoring_sigterm_after_the_checkpointer_is_made_is_said_as_no_notice_heard(tmp_path, subprocess_env):
    status, out = _run(tmp_path, subprocess_env, "after_ignored", signal_it=False)
    assert "SIGTERM is now ignored: a preemption notice by SIGTERM is not heard" in out, out


def test_a_grace_period_under_ten_seconds_is_said_to_the_tenth_not_rounded_to_zero():
    from checkpoint.preemption import seconds

    assert [seconds(v) for v in (0.5, 0.04, 2.0, 9.5, 30.0, 119.6)] == ["0.5", "0", "2", "9.5", "30", "120"]
