"""SIGKILL at each point of a save, on purpose rather than by chance (test_checkpoint_crash does that):
restore takes the newest complete checkpoint, never a partial one, and the next save cleans up."""

from __future__ import annotations

import signal
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from checkpoint import Checkpointer, CheckpointWarning, layout
from checkpoint.restore import load_verified
from checkpoint.storage import open_storage

SCRIPT = str(Path(__file__).with_name("kill_at.py"))

#: phase → the step restore must find afterwards
PHASES = {"before-data": 2, "before-manifest": 2, "before-commit": 2, "after-commit": 3, "mid-retention": 3}


def run(phase: str, env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, SCRIPT, phase], env=env, capture_output=True, text=True, timeout=60)


CASES = [(phase, "file") for phase in PHASES] + [("before-commit", "s3"), ("mid-retention", "s3")]


@pytest.mark.parametrize("phase, kind", CASES, ids=[f"{k}: killed {p} → restores step {PHASES[p]}" for p, k in CASES])
def test_a_save_killed_at_each_point_leaves_the_last_complete_checkpoint(phase, kind, make_uri, subprocess_env):
    uri = make_uri(kind)
    env = subprocess_env(uri)
    killed = run(phase, env)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]

    with warnings.catch_warnings():
        warnings.simplefilter("error", CheckpointWarning)  # a committed-but-partial checkpoint would warn
        with Checkpointer(uri, env={}, handle_sigterm=False) as reader:
            restored = reader.restore()
    assert restored is not None and restored.step == PHASES[phase]
    assert np.all(restored["a"] == restored.step)

    resumed = run("none", env)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"restored {PHASES[phase]}" in resumed.stdout
    storage = open_storage(uri)
    entries = layout.scan(storage.list())
    # keep_last=1: the resumed save is all that is left — debris of the killed save and the half-deleted one are gone
    assert [(e.id.step, e.committed) for e in entries] == [(PHASES[phase] + 1, True)], entries
    load_verified(storage, entries[0].id)
