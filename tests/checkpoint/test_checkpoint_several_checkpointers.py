"""Several checkpointers in one process and a preemption notice (``checkpoint/preemption.py``): every one
hears it; the exit waits for those that write checkpoints, never for one opened only to restore weights.

Before, only the newest checkpointer heard SIGTERM: a second one opened to load pretrained weights after the
run's own (and never closed) took the notice, the training loop's ``due()`` never saw it, and the process was
killed at the reader's grace deadline without the notice's checkpoint."""

from __future__ import annotations

import subprocess
import textwrap
import time

from conftest import PYTHON

from checkpoint import Checkpointer

PRETRAINED = """
    import os, signal, sys, time
    import numpy as np
    from checkpoint import Checkpointer
    with Checkpointer(sys.argv[1], handle_sigterm=False) as pre:
        pre.save(1, {"w": np.ones(4)}, wait=True)
"""


def _run(script: str, *args: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-c", textwrap.dedent(PRETRAINED) + textwrap.dedent(script), *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


def _restored_step(uri: str) -> int | None:
    with Checkpointer(uri, env={}, handle_sigterm=False) as ckpt:
        restored = ckpt.restore()
    return None if restored is None else restored.step


def test_a_reader_left_open_after_the_runs_checkpointer_does_not_take_its_preemption_notice(tmp_path, subprocess_env):
    """The auditor's case: the run's checkpointer first (grace 20 s), then ``Checkpointer(pre).restore(...)`` for
    pretrained weights, never closed (grace 30 s). The SIGTERM must reach the training loop, which saves at its next
    step and exits 143 at once, not 30 s later at the reader's deadline without a checkpoint."""
    script = """
        ckpt = Checkpointer(every_steps=10**6, grace_s=20)
        if ckpt.restore() is None:
            Checkpointer(sys.argv[1]).restore()          # pretrained weights; never closed
        for step in range(1, 10**6):
            time.sleep(0.01)
            if step == 5:
                os.kill(os.getpid(), signal.SIGTERM)
            if ckpt.due(step):
                ckpt.save(step, {"w": np.full(4, step)})
        print("the loop ended without the notice's save", flush=True)
    """
    uri = str(tmp_path / "run")
    started = time.monotonic()
    done = _run(script, str(tmp_path / "pretrained"), env=subprocess_env(uri))
    assert done.returncode == 143, done.stderr[-2000:]
    assert time.monotonic() - started < 15, done.stderr[-2000:]
    assert "exiting without a final checkpoint" not in done.stderr, done.stderr[-2000:]
    assert _restored_step(uri) is not None and _restored_step(uri) >= 5


def test_a_readers_shorter_grace_does_not_cut_the_writers_save_short(tmp_path, subprocess_env):
    """The deadline that counts is the writer's: a reader opened with grace 0.5 s must not end the process while
    the training loop, with 30 s of grace, is still in a step 2 s long."""
    script = """
        ckpt = Checkpointer(every_steps=10**6, grace_s=30)
        ckpt.restore()
        reader = Checkpointer(sys.argv[1], grace_s=0.5)  # never closed
        reader.restore()
        for step in range(1, 10**6):
            if ckpt.due(step):
                ckpt.save(step, {"w": np.full(4, step)})
            if step == 2:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(2)                            # a long step: the notice's save comes after it
    """
    uri = str(tmp_path / "run")
    done = _run(script, str(tmp_path / "pretrained"), env=subprocess_env(uri))
    assert done.returncode == 143, done.stderr[-2000:]
    assert "grace period (0 s) is over" not in done.stderr, done.stderr[-2000:]
    assert _restored_step(uri) == 3, done.stderr[-2000:]


def test_two_checkpointers_that_both_write_both_save_before_the_process_exits(tmp_path, subprocess_env):
    """Two models, each with its checkpointer, in one loop: the first save after the notice must not exit the
    process before the other has saved (its work would be lost); the last one to save exits 143."""
    script = """
        first = Checkpointer(sys.argv[2], every_steps=10**6)
        second = Checkpointer(sys.argv[3], every_steps=10**6)
        for step in range(1, 10**6):
            time.sleep(0.01)
            if step == 5:
                os.kill(os.getpid(), signal.SIGTERM)
            if first.due(step):
                first.save(step, {"a": np.full(4, step)})
                print("first saved", step, flush=True)
            if second.due(step):
                second.save(step, {"b": np.full(4, step)})
    """
    one, two = str(tmp_path / "one"), str(tmp_path / "two")
    done = _run(script, str(tmp_path / "pretrained"), one, two, env=subprocess_env(one))
    assert done.returncode == 143, done.stderr[-2000:]
    assert done.stdout.count("first saved") == 1, done.stdout  # saved once for the notice, then waited
    assert _restored_step(one) is not None, done.stderr[-2000:]
    assert _restored_step(two) is not None, done.stderr[-2000:]
