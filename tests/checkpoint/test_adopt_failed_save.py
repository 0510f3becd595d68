"""A failed save (a full disk) left its partial step directory behind: the disk stayed full, and each restart that
failed again added another. And the plain-words notes of a save's error."""

from __future__ import annotations

import errno
import os

import pytest
import torch
from fakes import checkpointer, committed_steps

from checkpoint import CheckpointError, layout
from checkpoint.storage import open_storage


def _refusing(storage, errno_code: int, name: str):
    """Make the local store refuse writing ``name`` with ``errno_code`` (after the files before it were written)."""
    real = storage._write_local

    def write(full, data):
        if full.endswith(name):
            raise OSError(errno_code, os.strerror(errno_code))
        real(full, data)

    storage._write_local = write
    return real


def test_a_save_that_fails_on_a_full_disk_removes_its_own_partial_files(tmp_path):
    base = tmp_path / "run"
    storage = open_storage(str(base))
    with checkpointer(storage, keep_last=2) as ckpt:
        ckpt.save(10, {"model": torch.nn.Linear(64, 64), "step": 10}, wait=True)
        real = _refusing(storage, errno.ENOSPC, "manifest.json")
        with pytest.raises(CheckpointError) as raised:
            ckpt.save(20, {"model": torch.nn.Linear(64, 64), "step": 20}, wait=True)
        message = str(raised.value)
        assert "No space left on device" in message, message
        assert "keep_last=N needs room for N + 1 checkpoints" in message and "lower keep_last" in message, message
        # nothing of step 20 is left: not its model file, not its directory
        assert [e.id.step for e in layout.scan(storage.list())] == [10]
        assert not [n for n in os.listdir(base) if n.startswith("step-000000000020")], os.listdir(base)
        storage._write_local = real
        ckpt.save(20, {"model": torch.nn.Linear(64, 64), "step": 20}, wait=True)  # room again: it is written
    assert committed_steps(storage) == [10, 20]


def test_eperm_gets_a_plain_words_note_as_eacces_does(tmp_path):
    storage = open_storage(str(tmp_path / "run"))
    _refusing(storage, errno.EPERM, "safetensors")
    with checkpointer(storage) as ckpt, pytest.raises(CheckpointError, match=r"Operation not permitted.* \(the "
                                                                               r"operation is not permitted there"):
        ckpt.save(1, {"model": torch.nn.Linear(4, 4)}, wait=True)
