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


BEST_THEN_MAIN = """
    best = Checkpointer(sys.argv[2], every_steps=10**6, grace_s=GRACE)   # the best model's: saved at an eval
    best.save(1, {"best": np.ones(4)}, wait=True)                        # improvement, then never again
    main = Checkpointer(sys.argv[3], every_steps=10**6, grace_s=GRACE)   # the run's own, opened after
"""


def _best_then_main(grace_s: int, loop: str) -> str:
    return textwrap.dedent(BEST_THEN_MAIN.replace("GRACE", str(grace_s))) + textwrap.dedent(loop)


MAIN_LOOP = """
    for step in range(2, 10**6):
        time.sleep(0.01)
        if step == 5:
            os.kill(os.getpid(), signal.SIGTERM)
        if main.due(step):
            main.save(step, {"w": np.full(4, step)})
            print("main saved", step, flush=True)
"""
"""The run's own loop: the notice at step 5, saved at the next due step (``AFTER_SAVE``: more of that step)."""


def _run_best_then_main(tmp_path, subprocess_env, grace_s: int, after_save: str = ""):
    """:data:`MAIN_LOOP` after the best model's checkpointer saved once: (what the run did, its seconds, the two
    bases)."""
    loop = MAIN_LOOP + (f"            {after_save}\n" if after_save else "")
    best, main = str(tmp_path / "best"), str(tmp_path / "main")
    started = time.monotonic()
    done = _run(_best_then_main(grace_s, loop), str(tmp_path / "pretrained"), best, main, env=subprocess_env(main),
                timeout=90)
    return done, time.monotonic() - started, best, main


def test_a_writer_that_saved_once_and_is_not_called_again_does_not_hold_the_exit(tmp_path, subprocess_env):
    """The reviewer's case: a "best model" checkpointer saved once (an eval improvement) and the run's own checkpointer
    saves at the notice. The best one's ``due()``/``save()`` is not called after the notice: the exit must not wait
    for it. Before, the run's save returned, training went on through the whole grace period (120 s on AWS), and
    the deadline then said "exiting without a final checkpoint" although the notice's checkpoint had committed."""
    done, took, best, main = _run_best_then_main(tmp_path, subprocess_env, 30)
    assert done.returncode == 143, done.stderr[-2000:]
    assert took < 15, (took, done.stderr[-2000:])  # the grace period is 30 s; the wait for the idle writer ~2 s
    assert done.stdout.count("main saved") == 1, done.stdout
    assert "exiting without a final checkpoint" not in done.stderr, done.stderr[-2000:]
    assert "not waiting for the checkpointer(s) of " + best in done.stderr, done.stderr[-2000:]
    assert _restored_step(main) == int(done.stdout.split()[-1]), done.stderr[-2000:]
    assert _restored_step(best) == 1


def test_the_grace_deadline_after_a_committed_notice_save_says_that_checkpoint_committed(tmp_path, subprocess_env):
    """The run's notice save committed, and the process is then ended by the grace deadline (the loop, in a long
    step, never calls ``due()`` again while the best model's checkpointer is still waited for): the log names the
    checkpoint that committed, not "exiting without a final checkpoint"."""
    done, took, best, main = _run_best_then_main(tmp_path, subprocess_env, 3,
                                                 "time.sleep(40)  # a long step: the deadline comes first")
    assert done.returncode == 143, done.stderr[-2000:]
    assert took < 30, done.stderr[-2000:]
    saved = int(done.stdout.split()[-1])
    assert "exiting without a final checkpoint" not in done.stderr, done.stderr[-2000:]
    line = next((x for x in done.stderr.splitlines() if "grace period (3 s) is over" in x), "")
    assert f"the checkpoint of step {saved} ({main}/step-" in line and "committed after the notice" in line, \
        done.stderr[-2000:]
    assert line.endswith(f"none of {best}"), line
    assert _restored_step(main) == saved


def test_a_second_writer_called_every_other_slow_step_is_still_waited_for(tmp_path, subprocess_env):
    """An EMA's checkpointer whose ``due()`` comes every other step, steps 2.5 s long: after the model's notice save
    the exit waits three of the model's steps (the time between its ``due()`` calls), not a fixed 2 s, so the EMA's
    save after the notice is made before the process exits 143."""
    script = """
        model = Checkpointer(sys.argv[2], every_steps=10**6, grace_s=60)
        ema = Checkpointer(sys.argv[3], every_steps=10**6, grace_s=60)
        for step in range(1, 10**6):
            if step == 3:
                os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(2.5)
            if model.due(step):
                model.save(step, {"a": np.full(4, step)})
                print("model saved", step, flush=True)
            if step % 2 == 0 and ema.due(step):
                ema.save(step, {"b": np.full(4, step)})
    """
    one, two = str(tmp_path / "model"), str(tmp_path / "ema")
    done = _run(script, str(tmp_path / "pretrained"), one, two, env=subprocess_env(one), timeout=90)
    assert done.returncode == 143, done.stderr[-2000:]
    assert done.stdout.count("model saved") == 1, done.stdout
    assert _restored_step(one) == 3, done.stderr[-2000:]
    assert _restored_step(two) == 4, done.stderr[-2000:]
