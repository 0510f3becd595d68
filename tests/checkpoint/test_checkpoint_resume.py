"""The example training script, killed or preempted at a random step and resumed, ends with
weights bit-identical to a run that never stopped (CPU). SIGTERM saves, then exits 143."""

from __future__ import annotations

import sys

import random
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
import torch


from checkpoint import Checkpointer

PYTHON = sys.executable
REPO = Path(__file__).resolve().parents[2]

EXAMPLE = str(REPO / "examples" / "train_mlp.py")
WRITER = str(Path(__file__).with_name("writer.py"))
TOTAL = 90  # crosses an epoch boundary (64 batches per epoch)
ARGS = ["--total-steps", str(TOTAL), "--save-every", "7", "--log-every", "1", "--hidden", "32"]


def train(env, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([PYTHON, EXAMPLE, *ARGS, *extra], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def final_state(uri: str) -> dict:
    with Checkpointer(uri, env={}, handle_sigterm=False) as ckpt:
        restored = ckpt.restore()
    assert restored.step == TOTAL
    return restored


def wait_for_step(proc: subprocess.Popen, step: int) -> list[str]:
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith(f"step {step}/"):
            return lines
    raise AssertionError(f"run ended before step {step}: {lines[-3:]} {proc.stderr.read()[-2000:]}")


def assert_bit_identical(a, b):
    for key in ("model", "optim"):
        flat_a, flat_b = _tensors(a[key]), _tensors(b[key])
        assert flat_a.keys() == flat_b.keys()
        for name in flat_a:
            assert torch.equal(flat_a[name], flat_b[name]), f"{key}.{name} differs"
    assert a["sched"] == b["sched"] and a["data"] == b["data"]


def _tensors(tree, prefix=""):
    if isinstance(tree, torch.Tensor):
        return {prefix: tree}
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, (list, tuple)) else []
    out = {}
    for k, v in items:
        out |= _tensors(v, f"{prefix}.{k}")
    return out


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    uri = str(tmp_path_factory.mktemp("ckpt") / "uninterrupted")
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
    env["PYTHONPATH"] = str(REPO)
    proc = train(env, "--step-sleep", "0", "--checkpoint-uri", uri)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]
    return final_state(uri)


@pytest.mark.parametrize("how", ["kill -9", "SIGTERM"],
                         ids=["killed with kill -9 at a random step, resumed → bit-identical weights",
                              "preempted with SIGTERM at a random step → saves, exits 143, resumes bit-identical"])
def test_interrupted_and_resumed_run_matches_an_uninterrupted_one(how, uninterrupted, tmp_path, subprocess_env):
    uri = str(tmp_path / "interrupted")
    env = subprocess_env(uri)
    # between interval saves, 30 steps or more before the end: the run must still be going when the signal comes,
    # however far behind its output the test reads on a loaded host
    kill_at = random.choice([s for s in range(10, TOTAL - 30) if s % 7])

    first = train(env, "--step-sleep", "0.04")
    wait_for_step(first, kill_at)
    first.send_signal(signal.SIGKILL if how == "kill -9" else signal.SIGTERM)
    out, err = first.communicate(timeout=60)
    if how == "SIGTERM":
        assert first.returncode == 143, err[-2000:]
        assert "Traceback" not in err
        with Checkpointer(uri, env={}, handle_sigterm=False) as ckpt:
            saved = ckpt.restore()
        assert saved.step >= kill_at  # saved at the step boundary after the notice, not the last interval
    else:
        assert first.returncode == -signal.SIGKILL

    second = train(env, "--step-sleep", "0")
    out, err = second.communicate(timeout=120)
    assert second.returncode == 0, err[-2000:]
    assert "resumed from" in out.splitlines()[0], out[:500]
    assert_bit_identical(final_state(uri), uninterrupted)


FORCED = [
    ("a second SIGTERM forces exit at once", {}, True),
    ("the grace deadline forces exit", {"BROKER_PREEMPTION_GRACE_S": "0.5"}, False),
]


@pytest.mark.parametrize("extra_env, second_signal", [f[1:] for f in FORCED], ids=[f[0] for f in FORCED])
def test_preemption_exit_is_forced_when_no_step_boundary_comes(extra_env, second_signal, tmp_path, subprocess_env):
    env = subprocess_env(str(tmp_path / "stuck"), **extra_env)
    proc = subprocess.Popen([PYTHON, WRITER, "--sleep", "60"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().startswith("ready")
    assert proc.stdout.readline().startswith("saved")  # now inside a 60 s "step"
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    if second_signal:
        time.sleep(0.2)
        assert proc.poll() is None  # the first notice alone waits for the step boundary
        proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=20)
    assert proc.returncode == 143
    assert time.monotonic() - started < 10


def test_closing_an_older_checkpointer_leaves_the_newest_hearing_sigterm(tmp_path, subprocess_env):
    """A second checkpointer opened to read pretrained weights, closed after the run's own was created:
    the run's checkpointer must still take SIGTERM as its notice, not die of it without a save."""
    script = textwrap.dedent(f"""
        import os, signal, time
        import numpy as np
        from checkpoint import Checkpointer
        pretrained = Checkpointer({str(tmp_path / "pretrained")!r})
        pretrained.restore()
        ckpt = Checkpointer(every_steps=1000)
        pretrained.close()
        os.kill(os.getpid(), signal.SIGTERM)
        for step in range(1, 200):
            time.sleep(0.05)
            if ckpt.due(step):
                ckpt.save(step, {{"w": np.full(4, step)}})
    """)
    uri = str(tmp_path / "run")
    done = subprocess.run([PYTHON, "-c", script], env=subprocess_env(uri), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 143, done.stderr[-2000:]
    with Checkpointer(uri, env={}, handle_sigterm=False) as ckpt:
        assert ckpt.restore() is not None


def test_a_preemption_of_a_loop_on_a_thread_of_its_own_exits_143_through_the_main_thread(tmp_path, subprocess_env):
    """SystemExit(143) on a training thread ended only that thread: the main thread's join() returned and the
    process exited 0, a preempted run taken for a finished one. The main thread now exits 143, running its finally."""
    script = textwrap.dedent("""
        import os, signal, threading, time
        from checkpoint import Checkpointer
        ckpt = Checkpointer(every_steps=1000)            # made on the main thread: it hears SIGTERM
        started = threading.Event()
        def train():
            for step in range(1, 10**6):
                started.set()
                time.sleep(0.01)
                if ckpt.due(step):
                    ckpt.save(step, {"step": step})
            ckpt.close()
        training = threading.Thread(target=train)
        training.start()
        started.wait()
        os.kill(os.getpid(), signal.SIGTERM)
        try:
            training.join()
            print("join returned: the process would exit 0")
        finally:
            print("main finally ran", flush=True)
    """)
    uri = str(tmp_path / "run")
    done = subprocess.run([PYTHON, "-c", script], env=subprocess_env(uri), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 143, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["main finally ran"], done.stdout
    with Checkpointer(uri, env={}, handle_sigterm=False) as ckpt:
        assert ckpt.restore() is not None
