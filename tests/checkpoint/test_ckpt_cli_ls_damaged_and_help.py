"""`checkpoint ls` judges a commit as restore does, and `checkpoint --help` is help for its user.

QA: a checkpoint whose COMMITTED marker was empty was listed as ``committed`` while restore skipped it ("commit
marker is unreadable"); ls now uses restore's own rule (:func:`checkpoint.restore.read_commit`) and shows it as
damaged with that reason. ``checkpoint --help`` printed an internal docstring ("Parses, calls, renders; no rules
here."); it now says what the tool is for, with examples.
"""

from __future__ import annotations

import io
import subprocess
import sys
import warnings

import numpy as np

from checkpoint import Checkpointer, CheckpointWarning, layout
from checkpoint.cli import main
from checkpoint.storage import open_storage


def test_ls_shows_a_checkpoint_with_an_empty_commit_marker_as_damaged_as_restore_skips_it(tmp_path):
    base = str(tmp_path / "run")
    with Checkpointer(base, env={}, handle_sigterm=False, every_steps=1) as ckpt:
        for step in (1, 2):
            ckpt.save(step, {"w": np.full(2, float(step))}, wait=True)
    storage = open_storage(base)
    two = next(e for e in layout.scan(storage.list()) if e.id.step == 2)
    storage.write(layout.path(two.id, layout.COMMIT), b"")

    out = io.StringIO()
    assert main(["ls", base], out=out) == 0
    rows = {int(r.split()[0]): r for r in out.getvalue().splitlines()[1:]}
    assert "damaged" in rows[2] and rows[2].endswith("(commit marker is unreadable)"), rows[2]
    assert " committed " in rows[1] and "damaged" not in rows[1], rows[1]

    with warnings.catch_warnings(record=True) as caught, \
            Checkpointer(base, env={}, handle_sigterm=False) as ckpt:
        warnings.simplefilter("always")
        assert ckpt.restore().step == 1
    said = [str(w.message) for w in caught if issubclass(w.category, CheckpointWarning)]
    assert any(storage.uri(two.name) in s and "commit marker is unreadable" in s for s in said), said


def test_help_says_what_the_tool_is_for_with_an_example():
    done = subprocess.run([sys.executable, "-m", "checkpoint.cli", "--help"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "Parses, calls, renders" not in text and "no rules here" not in text, text
    assert "List and verify the checkpoints" in text and "examples:" in text, text
    assert "checkpoint ls s3://" in text and "checkpoint verify s3://" in text, text
