"""Failures said early, and once: a local base that cannot be written (found only at the first save, after
the steps before it were trained), a failed background save that did not say which step or where, and the exit
flush repeating an upload failure the script had already died of."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import REPO
from fakes import FailingStorage, GatedStorage, checkpointer, memory_store

from checkpoint import Checkpointer, CheckpointError
from checkpoint.storage import open_storage


def refuse_new_files_in(directory, monkeypatch):
    """``directory`` as a read-only one is, for whoever runs the tests (root too): a new file there is refused."""
    real_open = os.open

    def refusing(path, flags, *args, **kwargs):
        if flags & os.O_CREAT and os.path.dirname(os.fspath(path)) == directory:
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_open(path, flags, *args, **kwargs)
    monkeypatch.setattr(os, "open", refusing)


def test_a_local_base_under_a_file_is_refused_when_the_checkpointer_is_made(tmp_path):
    (tmp_path / "afile").write_text("hi")
    base = tmp_path / "afile" / "run"
    with pytest.raises(CheckpointError) as refused:
        Checkpointer(str(base), env={}, handle_sigterm=False)
    said = str(refused.value)
    assert str(base) in said and f"{tmp_path / 'afile'} is a file" in said and "\n" not in said, said


def test_a_local_base_that_is_a_file_is_refused_when_the_checkpointer_is_made(tmp_path):
    (tmp_path / "run").write_text("hi")
    with pytest.raises(CheckpointError, match="is a file, not a directory"):
        Checkpointer(str(tmp_path / "run"), env={}, handle_sigterm=False)


def test_a_read_only_local_base_restores_but_is_refused_at_the_first_due(tmp_path, monkeypatch):
    """A read-only directory is a fine place to read pretrained weights from, so it is not refused when the
    checkpointer is made or restores; the first due() (or save()) of a run writing there says so at step 1."""
    base = str(tmp_path / "run")
    with Checkpointer(base, env={}, handle_sigterm=False) as ckpt:
        ckpt.save(3, {"w": np.ones(2)}, wait=True)
    refuse_new_files_in(base, monkeypatch)
    ckpt = Checkpointer(base, every_steps=5, env={}, handle_sigterm=False)
    try:
        assert ckpt.restore().step == 3
        with pytest.raises(CheckpointError, match=f"checkpoint base {base} is not writable"):
            ckpt.due(4)
    finally:
        ckpt.close()


def test_a_save_whose_folder_was_deleted_under_it_asks_whether_another_process_writes_to_the_base():
    """Two runs started by hand on one base (no BROKER_ATTEMPT: not fenced): the one ahead in steps took the other's
    save in progress for an older step's debris and deleted it, and the other died of a bare FileNotFoundError."""
    class FolderGone(FailingStorage):
        def write(self, path, data):
            raise FileNotFoundError(2, "No such file or directory", f"{self.uri()}/{path}")

    storage = FolderGone(memory_store())
    with checkpointer(storage) as ckpt:
        ckpt.save(60, {"w": np.ones(2)})
        with pytest.raises(CheckpointError) as failed:
            ckpt.wait()
        said = str(failed.value)
        assert "step 60" in said and "No such file or directory" in said, said
        assert "deleted while it was written: is another process saving checkpoints to this base?" in said, said


def test_a_failed_background_save_names_its_step_and_where_it_went():
    storage = FailingStorage(memory_store())
    with checkpointer(storage) as ckpt:
        ckpt.save(7, {"w": np.ones(2)})
        with pytest.raises(CheckpointError) as failed:
            ckpt.wait()
        said = str(failed.value)
        assert "step 7" in said and f"{storage.uri()}/step-000000000007-" in said, said
        assert "store unavailable" in said and "\n" not in said, said
        ckpt.save(8, {"w": np.ones(2)})
        with pytest.raises(CheckpointError):
            ckpt.close()


def test_close_after_the_store_went_down_names_the_last_step_lost_too_and_the_checkpoint_a_resume_uses(tmp_path):
    """The store goes down after step 10 commits, with the saves of steps 20 and 30 still to upload (each took minutes
    of retries on GCS): close() said only that step 20 could not be written — not that step 30, the final checkpoint,
    was lost too, nor that a resume goes back to step 10, as the exit flush of a script without close() says."""
    import shutil
    import threading

    base = tmp_path / "run"
    storage = GatedStorage(open_storage(str(base)))
    storage.open()
    ckpt = checkpointer(storage)
    ckpt.save(10, {"w": np.ones(2)}, wait=True)
    kept = ckpt.last_committed
    storage.gate.clear()  # step 20's upload is under way when the store goes
    storage.writes_started = threading.Semaphore(0)
    ckpt.save(20, {"w": np.full(2, 2.0)})
    assert storage.writes_started.acquire(timeout=10)
    ckpt.save(30, {"w": np.full(2, 3.0)})  # queued behind it: the run trained on, not waiting
    shutil.rmtree(base)
    base.write_text("")  # the base is a file now: every write under it fails, as to a store that is down
    storage.open()
    with pytest.raises(CheckpointError) as failed:
        ckpt.close()
    said = str(failed.value)
    assert said.startswith("background checkpoint save failed: the checkpoint of step 20 could not be written"), said
    assert "; the last checkpoint (step 30) was not saved either: " in said, said
    assert said.endswith(f"; a resume uses the checkpoint of step 10 ({kept})"), said
    assert "\n" not in said


SCRIPT = """
import numpy as np
from checkpoint import Checkpointer
from checkpoint.storage import open_storage

class Refuses:  # a store that is down (every write fails after its retries)
    def __init__(self, inner):
        self._inner, self.base_uri = inner, inner.base_uri
    def write(self, path, data):
        raise OSError(28, "No space left on device")
    def read(self, path):
        return self._inner.read(path)
    def list(self):
        return self._inner.list()
    def delete(self, paths):
        self._inner.delete(paths)
    def uri(self, path=""):
        return self._inner.uri(path)

ckpt = Checkpointer(storage=Refuses(open_storage("memory://exit/run")), env={}, handle_sigterm=False, every_steps=1)
ckpt.save(2, {"w": np.ones(2)})
"""


def _run(ending: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(REPO), os.environ.get("PYTHONPATH")] if p)
    return subprocess.run([sys.executable, "-c", SCRIPT + textwrap.dedent(ending)], env=env, capture_output=True,
                          text=True, timeout=120)


def test_an_upload_failure_the_script_died_of_is_not_said_again_at_exit():
    """due()/wait() raised the failure, the script did not catch it: its traceback ends with it, and the exit
    flush added "checkpoint upload failed at exit: … the script ended without calling close() (which raises
    this)" after it, the same error again with a cause that was not so."""
    done = _run("ckpt.wait()\n")
    assert done.returncode == 1, done.stderr[-2000:]
    assert "CheckpointError: background checkpoint save failed: the checkpoint of step 2" in done.stderr, done.stderr
    assert "No space left on device" in done.stderr and "the disk is full" in done.stderr, done.stderr
    assert "failed at exit" not in done.stderr and "without calling close()" not in done.stderr, done.stderr


def test_an_upload_failure_the_script_caught_is_still_said_at_exit_and_exits_1():
    """Caught and gone on from, the last save is still lost: the exit flush says so and exits 1, as before."""
    done = _run("""
        try:
            ckpt.wait()
        except Exception:
            pass
    """)
    assert done.returncode == 1, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("The last checkpoint (step 2) was not saved to memory://exit/run: "), last


def test_a_local_base_whose_parent_cannot_be_written_is_refused_at_the_first_due_not_when_made(tmp_path, monkeypatch):
    """Made (and restored from: nothing there) without a word, as a reader of a path that may not exist does; the
    first due() says the base cannot be created, at step 1 rather than at the first save."""
    parent = str(tmp_path / "ro")
    os.mkdir(parent)
    base = os.path.join(parent, "run")
    refuse_new_files_in(parent, monkeypatch)
    ckpt = Checkpointer(base, every_steps=5, env={}, handle_sigterm=False)
    try:
        assert ckpt.restore() is None
        with pytest.raises(CheckpointError, match=f"checkpoint base {base} cannot be created: this process cannot "
                                                  f"write in {parent}"):
            ckpt.due(1)
    finally:
        ckpt.close()
