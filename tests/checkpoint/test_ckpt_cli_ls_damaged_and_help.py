"""`checkpoint ls` judges a commit as restore does, and `checkpoint --help` is help for its user.

QA: a checkpoint whose COMMITTED marker was empty was listed as ``committed`` while restore skipped it ("commit
marker is unreadable"); ls now uses restore's own rule (:func:`checkpoint.restore.read_commit`) and shows it as
damaged with that reason. ``checkpoint --help`` printed an internal docstring ("Parses, calls, renders; no rules
here."); it now says what the tool is for, with examples.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

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


def _two_checkpoints(base: str):
    """Steps 1 and 2 saved under ``base``; the storage and step 2's entry."""
    with Checkpointer(base, env={}, handle_sigterm=False, every_steps=1) as ckpt:
        for step in (1, 2):
            ckpt.save(step, {"w": np.full(12, float(step))}, wait=True)
    storage = open_storage(base)
    two = next(e for e in layout.scan(storage.list()) if e.id.step == 2)
    return storage, two


def _data_file(storage, entry) -> str:
    from checkpoint.restore import read_commit

    name, = (n for n in read_commit(storage, entry.id).files if n.endswith(".safetensors"))
    return name


@pytest.mark.parametrize("damage, reason", [
    pytest.param("delete", "{name} is missing",
                 id="a data file deleted shows the checkpoint damaged, as restore skips it"),
    pytest.param("grow", "{name} is {grown} bytes, manifest says {size}",
                 id="a data file of another size than the manifest's shows it damaged, saying both sizes"),
])
def test_ls_shows_a_checkpoint_whose_files_differ_from_its_manifest_as_damaged(tmp_path, damage, reason):
    """QA: ls said ``committed`` where verify said ``00-w.safetensors is 104 bytes, manifest says 96`` and restore
    skipped it; ls compares the listing's names and sizes with the manifest (no hashing)."""
    base = str(tmp_path / "run")
    storage, two = _two_checkpoints(base)
    name = _data_file(storage, two)
    path = storage.local_path(layout.path(two.id, name))
    size = os.path.getsize(path)
    if damage == "delete":
        os.remove(path)
    else:
        with open(path, "ab") as f:
            f.write(b"\0" * 8)
    said = reason.format(name=name, grown=size + 8, size=size)

    out = io.StringIO()
    assert main(["ls", base], out=out) == 0
    rows = {int(r.split()[0]): r for r in out.getvalue().splitlines()[1:]}
    assert " damaged " in rows[2] and rows[2].endswith(f"({said})"), rows[2]
    assert " committed " in rows[1], rows[1]

    verified = io.StringIO()
    assert main(["verify", storage.uri(two.name)], out=verified) == 1
    assert said in verified.getvalue(), "ls says it as verify does"
    with warnings.catch_warnings(record=True) as caught, Checkpointer(base, env={}, handle_sigterm=False) as ckpt:
        warnings.simplefilter("always")
        assert ckpt.restore().step == 1
    assert any(said in str(w.message) for w in caught if issubclass(w.category, CheckpointWarning))


def test_ls_shows_a_whole_checkpoint_committed_with_its_manifests_size(tmp_path):
    base = str(tmp_path / "run")
    _two_checkpoints(base)
    out = io.StringIO()
    assert main(["ls", base], out=out) == 0
    rows = out.getvalue().splitlines()[1:]
    assert len(rows) == 2 and all(" committed " in r and "damaged" not in r for r in rows), rows


@pytest.mark.parametrize("target", [
    pytest.param("no-such-run", id="verify of a base that does not exist exits 2 saying so, not 1 as a failed check"),
    pytest.param("no-such-run/step-000000000002-1733011200123",
                 id="verify of a checkpoint that does not exist exits 2 saying so"),
])
def test_verify_of_a_path_that_does_not_exist_exits_2_saying_so(tmp_path, capsys, target):
    out = io.StringIO()
    assert main(["verify", str(tmp_path / target)], out=out) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.rstrip().endswith("(it does not exist)"), err
    assert str(tmp_path / target) in err, err


def test_verify_of_an_empty_base_still_exits_1_as_nothing_committed(tmp_path):
    (tmp_path / "empty").mkdir()
    out = io.StringIO()
    assert main(["verify", str(tmp_path / "empty")], out=out) == 1
    assert out.getvalue().strip() == f"no committed checkpoints under {tmp_path / 'empty'}"
