"""kill -9 the writer at random moments, again and again: restore only ever sees whole,
verified checkpoints, and never loses one a writer had seen committed."""

from __future__ import annotations

import sys

import os
import random
import signal
import subprocess
import time
import warnings
from pathlib import Path

import numpy as np
import pytest


from checkpoint import Checkpointer, CheckpointWarning, layout
from checkpoint.restore import load_verified
from checkpoint.storage import open_storage

PYTHON = sys.executable

WRITER = str(Path(__file__).with_name("writer.py"))
KILLS = {"file": 12, "s3": 10}  # 22 kills in all


def start_writer(env) -> subprocess.Popen:
    proc = subprocess.Popen([PYTHON, WRITER, "--sleep", "0.01"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    first = proc.stdout.readline()
    assert first.startswith("ready"), first
    return proc


def kill_9(proc: subprocess.Popen) -> list[str]:
    """Kill the writer; return the lines it printed whole (the kill can cut the last one short)."""
    os.kill(proc.pid, signal.SIGKILL)
    out, _ = proc.communicate(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    return out.split("\n")[:-1]


@pytest.mark.parametrize("kind", list(KILLS), ids=lambda k: f"writer killed {KILLS[k]} times while uploading to {k}")
def test_kill_9_during_uploads_never_leaves_a_restorable_partial_checkpoint(kind, make_uri, subprocess_env):
    uri = make_uri(kind)
    env = subprocess_env(uri)
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    newest_seen = -1
    for attempt in range(KILLS[kind]):
        proc = start_writer(env)
        before = []
        if newest_seen < 0 and attempt == KILLS[kind] - 1:
            # nothing committed yet (on a loaded host an 11 MiB first save to moto may outlast every random
            # moment): the last run is killed at its random moment after a commit, so the checks below have one
            for line in proc.stdout:
                before.append(line.rstrip("\n"))
                if line.startswith("committed"):
                    break
        time.sleep(rng.uniform(0.05, 0.9))
        lines = before + kill_9(proc)
        committed = [layout.parse_name(line.split()[1]).step for line in lines if line.startswith("committed")]
        newest_seen = max([newest_seen, *committed])

        with Checkpointer(uri, env={}, handle_sigterm=False) as ckpt, warnings.catch_warnings():
            warnings.simplefilter("error", CheckpointWarning)  # a committed-but-partial one would warn
            restored = ckpt.restore()
        context = f"seed={seed} attempt={attempt} lines={lines[-3:]}"
        if newest_seen < 0 and restored is None:
            continue
        assert restored is not None, f"a committed checkpoint was lost: {context}"
        assert restored.step >= newest_seen, context
        assert restored["meta"] == {"step": restored.step, "n": restored["a"].size}, context
        assert np.all(restored["a"] == restored.step), context
    assert newest_seen >= 0, f"no save ever committed in {KILLS[kind]} runs (seed={seed})"
    # Debris of killed saves may exist, but every *committed* directory verifies.
    storage = open_storage(uri)
    committed = [e for e in layout.scan(storage.list()) if e.committed]
    assert committed
    for e in committed:
        load_verified(storage, e.id)
