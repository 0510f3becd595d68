"""A local base is found unwritable by trying it (a file made and removed there), not by ``os.access``, which passes
for root — what a container runs as — whatever the mode, and in ``/proc``, where nothing can be made; and a save
whose folder could never be made is not said to have had it deleted under it by another process."""

from __future__ import annotations

import os

import numpy as np
import pytest
from fakes import FailingStorage, checkpointer, memory_store

from checkpoint import Checkpointer, CheckpointError


def test_a_base_in_a_directory_nothing_can_be_made_in_is_refused_at_the_first_due_whoever_runs_it():
    assert os.path.isdir("/proc/self"), "this test needs Linux's /proc (the project runs on Debian)"
    ckpt = Checkpointer("/proc/h6_qa_dec8/run", every_steps=5, env={}, handle_sigterm=False)
    try:
        with pytest.raises(CheckpointError, match=r"checkpoint base /proc/h6_qa_dec8/run cannot be created: cannot "
                                                  r"create /proc/h6_qa_dec8: \[Errno 2\] No such file or directory "
                                                  r"\(a folder cannot be made there\)"):
            ckpt.due(1)
    finally:
        ckpt.close()


def test_a_writable_base_leaves_no_probe_file_behind(tmp_path):
    base = tmp_path / "run"
    base.mkdir()
    with Checkpointer(str(base), every_steps=5, env={}, handle_sigterm=False) as ckpt:
        assert ckpt.due(5)
    assert os.listdir(base) == []
    assert sorted(os.listdir(tmp_path)) == ["run"]


def test_a_save_whose_folder_could_never_be_made_is_not_said_to_be_deleted_by_another_process():
    class NoFolder(FailingStorage):
        def write(self, path, data):  # the makedirs of its folder failed above it, at the base
            raise FileNotFoundError(2, "No such file or directory", self.uri())

    with checkpointer(NoFolder(memory_store())) as ckpt:
        ckpt.save(60, {"w": np.ones(2)})
        with pytest.raises(CheckpointError) as failed:
            ckpt.wait()
    said = str(failed.value)
    assert "step 60" in said and "No such file or directory" in said, said
    assert "deleted while it was written" not in said and "could not be created there" in said, said
