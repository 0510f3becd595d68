"""A local checkpoint base that cannot be made was said to be one "this process cannot write in /proc ([Errno 2] No
such file or directory)": a reason (permissions) the error (no such file) did not give. The sentence is worded by the
errno: a permission is "cannot write in", a read-only file system says so, and anything else names what could not be
created and the error."""

from __future__ import annotations

import errno
import os

import pytest

from checkpoint import checkpointer as module
from checkpoint import Checkpointer, CheckpointError


def test_a_base_under_proc_names_the_folder_that_cannot_be_made_and_its_error_not_a_permission():
    assert os.path.isdir("/proc/self"), "this test needs Linux's /proc (the project runs on Debian)"
    ckpt = Checkpointer("/proc/h10_qa_dec8b/run", every_steps=5, env={}, handle_sigterm=False)
    try:
        with pytest.raises(CheckpointError) as caught:
            ckpt.due(1)
    finally:
        ckpt.close()
    assert str(caught.value) == ("checkpoint base /proc/h10_qa_dec8b/run cannot be created: cannot create "
                                 "/proc/h10_qa_dec8b: [Errno 2] No such file or directory (a folder cannot be made "
                                 "there)"), str(caught.value)


@pytest.mark.parametrize("code, said", [
    pytest.param(errno.EACCES, "this process cannot write in {parent} ([Errno 13] Permission denied)",
                 id="a permission denied says the process cannot write there"),
    pytest.param(errno.EROFS, "{parent} is on a read-only file system ([Errno 30] Read-only file system)",
                 id="a read-only file system says so"),
    pytest.param(errno.ENOENT, "cannot create {parent}/a: [Errno 2] No such file or directory (a folder cannot be "
                 "made there)", id="no such file names what could not be created"),
])
def test_a_base_that_cannot_be_created_is_worded_by_the_errno(tmp_path, monkeypatch, code, said):
    monkeypatch.setattr(module, "_cannot_write_in", lambda d: OSError(code, os.strerror(code)))
    base = f"{tmp_path}/a/b/run"
    assert module._uncreatable(base) == f"checkpoint base {base} cannot be created: " + said.format(parent=tmp_path)


@pytest.mark.parametrize("code, why", [(errno.EACCES, "its permissions"), (errno.EROFS, "a read-only file system"),
                                       (errno.ENOENT, "nothing can be made in it")],
                         ids=["permission denied", "read-only", "no such file"])
def test_an_existing_base_not_writable_is_worded_by_the_errno(tmp_path, monkeypatch, code, why):
    monkeypatch.setattr(module, "_cannot_write_in", lambda d: OSError(code, os.strerror(code)))
    assert module._unwritable(str(tmp_path)) == (f"checkpoint base {tmp_path} is not writable by this process ({why}: "
                                                 f"[Errno {code}] {os.strerror(code)}): no checkpoint could be saved "
                                                 "there")
