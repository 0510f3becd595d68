"""Every committed checkpoint damaged (one corrupt byte in each model file): restore returned ``default``, the run
started over from step 0, and its first commit's retention deleted the damaged checkpoints, whose other files were
whole. Now restore refuses, naming each and what is wrong, and nothing is deleted."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
from fakes import checkpointer, committed_steps

from checkpoint import CheckpointError, layout
from checkpoint.storage import open_storage


def _corrupt_model(storage, step: int) -> None:
    entry = next(e for e in layout.scan(storage.list()) if e.id.step == step)
    path = layout.path(entry.id, next(f for f in sorted(entry.files) if f.endswith(".safetensors")))
    data = bytearray(storage.read(path))
    data[len(data) // 2] ^= 0xFF
    storage.write(path, bytes(data))


def _state(value: float):
    model = torch.nn.Linear(4, 2)
    with torch.no_grad():
        model.weight.fill_(value)
    return {"model": model, "step": int(value)}


@pytest.mark.parametrize("kind", ["file", "s3"])
def test_when_every_checkpoint_is_damaged_restore_raises_naming_them_and_nothing_is_deleted(kind, make_uri):
    storage = open_storage(make_uri(kind))
    with checkpointer(storage, keep_last=2) as ckpt:
        for step in (10, 20):
            ckpt.save(step, _state(step), wait=True)
    for step in (10, 20):
        _corrupt_model(storage, step)
    live = _state(0)
    with checkpointer(storage, keep_last=2) as ckpt:
        with warnings.catch_warnings(record=True), pytest.raises(CheckpointError) as raised:
            warnings.simplefilter("always")
            ckpt.restore(default=None, into=live)
        message = str(raised.value)
        assert message.startswith(f"every checkpoint under {storage.base_uri} is damaged: step 20 ("), message
        assert "step 10 (" in message and "sha256 mismatch (corrupt)" in message, message
        assert "checkpoint verify" in message and "move them away or delete them" in message, message
        # a script that catches it and trains anyway deletes none of them at its first commit
        ckpt.save(1, _state(1), wait=True)
    assert committed_steps(storage) == [1, 10, 20]


def test_a_skipped_checkpoint_is_said_once_on_stderr(tmp_path):
    """Each skip was printed twice: the log's warning (logging's last-resort handler) and the CheckpointWarning."""
    base = tmp_path / "run"
    storage = open_storage(str(base))
    with checkpointer(storage) as ckpt:
        ckpt.save(10, _state(10), wait=True)
        ckpt.save(20, _state(20), wait=True)
    _corrupt_model(storage, 20)
    script = textwrap.dedent(f"""
        from checkpoint import Checkpointer
        ckpt = Checkpointer({str(base)!r}, env={{}}, handle_sigterm=False)
        print("restored", ckpt.restore().step)
        ckpt.close()
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "restored 10" in done.stdout
    assert done.stderr.count("skipping checkpoint") == 1, done.stderr


def test_the_broker_says_every_checkpoint_is_damaged_in_plain_words(tmp_path):
    from broker.diagnosis import Ending, diagnose

    base = tmp_path / "run"
    storage = open_storage(str(base))
    with checkpointer(storage) as ckpt:
        ckpt.save(10, _state(10), wait=True)
    _corrupt_model(storage, 10)
    script = textwrap.dedent(f"""
        from checkpoint import Checkpointer
        ckpt = Checkpointer({str(base)!r}, env={{}}, handle_sigterm=False)
        state = ckpt.restore(default=None)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    found = diagnose(Ending(phase="failed", exit_code=1, log_tail=done.stdout + done.stderr))
    assert found.cls == "checkpoints_damaged", found
    assert f"every checkpoint under {base} is damaged: step 10" in found.sentence, found
    assert "sha256 mismatch" in found.sentence and "checkpoint verify" in found.hint, found
    assert "Fix the error in the code" not in found.hint, found
