"""Saving in the background: what blocks, what supersedes what, where errors surface."""

from __future__ import annotations

import pytest
import torch
from fakes import FailingStorage, GatedStorage, checkpointer, committed_steps, memory_store

from checkpoint import Checkpointer, CheckpointError
from checkpoint.preemption import PreemptionNotice


def test_save_returns_before_the_upload_and_keeps_a_private_copy_of_the_tensors():
    storage = GatedStorage(memory_store())
    ckpt = checkpointer(storage)
    weights = torch.zeros(1000)
    ckpt.save(1, {"w": weights})
    assert storage.writes_started.acquire(timeout=5)  # the upload is running...
    assert committed_steps(storage) == []  # ...but nothing is committed, and save() returned
    weights += 1  # training goes on mutating the live tensor
    storage.open()
    ckpt.close()
    assert committed_steps(storage) == [1]
    assert torch.equal(checkpointer(storage).restore()["w"], torch.zeros(1000))


def test_a_newer_save_replaces_one_still_queued_behind_a_running_upload():
    storage = GatedStorage(memory_store())
    ckpt = checkpointer(storage)
    ckpt.save(1, {"x": torch.ones(3)})
    assert storage.writes_started.acquire(timeout=5)
    ckpt.save(2, {"x": torch.ones(3)})
    ckpt.save(3, {"x": torch.ones(3)})
    storage.open()
    ckpt.close()
    assert committed_steps(storage) == [1, 3]


@pytest.mark.parametrize("next_call", ["save", "due", "wait", "close"],
                         ids=lambda c: f"a failed upload is raised by the next {c}()")
def test_background_errors_surface_on_the_next_call(next_call):
    ckpt = checkpointer(FailingStorage(memory_store()))
    ckpt.save(1, {"x": torch.ones(3)})
    ckpt._runner.wait()
    call = {"save": lambda: ckpt.save(2, {"x": torch.ones(3)}), "due": lambda: ckpt.due(2),
            "wait": ckpt.wait, "close": ckpt.close}[next_call]
    with pytest.raises(CheckpointError, match="store unavailable"):
        call()


def test_after_a_preemption_notice_save_commits_then_exits_with_143():
    storage = memory_store()
    ckpt = checkpointer(storage, every_steps=1000, every_seconds=3600)
    assert not ckpt.due(7)
    ckpt.preemption.notify()
    assert ckpt.due(7)
    with pytest.raises(SystemExit) as exited:
        ckpt.save(7, {"x": torch.ones(3)})
    assert exited.value.code == 143
    assert committed_steps(storage) == [7]
    ckpt.preemption.uninstall()


def test_the_exit_after_a_preemption_leaves_none_of_the_librarys_threads_running():
    # A daemon thread still alive when the interpreter finalizes is ended mid-call; with native
    # code on its stack that can abort the process (SIGABRT, not 143). So the exit stops them.
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        pytest.fail("must run on the main thread to install the SIGTERM handler")
    before = signal.getsignal(signal.SIGTERM)
    earlier = set(threading.enumerate())  # other tests' checkpointers may still be winding down
    storage = memory_store()
    ckpt = checkpointer(storage, every_steps=1000, every_seconds=3600)
    assert ckpt.preemption.install()
    ckpt.save(1, {"x": torch.ones(3)})
    ckpt.wait()
    ours = set(threading.enumerate()) - earlier
    assert {t.name for t in ours} >= {"checkpoint-preemption", "checkpoint-upload"}
    ckpt.preemption.notify()
    with pytest.raises(SystemExit) as exited:
        ckpt.save(2, {"x": torch.ones(3)})
    assert exited.value.code == 143 and committed_steps(storage) == [1, 2]
    assert [t.name for t in ours if t.is_alive()] == []
    assert signal.getsignal(signal.SIGTERM) == before


EXITS = [
    ("a second notice forces exit at once", lambda n: n.notify(), 0.0),
    ("the grace deadline forces exit", lambda n: None, 0.05),
]


@pytest.mark.parametrize("then, wait_s", [e[1:] for e in EXITS], ids=[e[0] for e in EXITS])
def test_forced_exit(then, wait_s):
    import threading

    exited = threading.Event()
    codes = []
    notice = PreemptionNotice(grace_s=0.05 if wait_s else 60, force_exit=lambda c: (codes.append(c), exited.set()))
    notice.notify()
    then(notice)
    assert exited.wait(5)
    assert codes == [143]
    notice.uninstall()


def test_a_step_whose_upload_failed_is_written_when_saved_again():
    """save(step, wait=True) raised: retrying the same step must write it, not skip it as already saved."""

    class FailsOnce(FailingStorage):
        failed = False

        def write(self, path, data):
            if not self.failed:
                self.failed = True
                raise OSError(503, "store unavailable")
            self._inner.write(path, data)

    storage = FailsOnce(memory_store())
    ckpt = checkpointer(storage)
    with pytest.raises(CheckpointError, match="store unavailable"):
        ckpt.save(5, {"x": torch.ones(3)}, wait=True)
    assert ckpt.due(5)  # step 5 was never saved
    ckpt.save(5, {"x": torch.ones(3)}, wait=True)
    ckpt.close()
    assert committed_steps(storage) == [5]


def test_closing_on_a_training_thread_puts_the_scripts_sigterm_handler_back_at_the_next_sigterm():
    """close() on a thread cannot call signal.signal (the main thread's): it left a no-op handler behind and closed
    the wakeup socket under it, so SIGTERM was ignored for the rest of the process. Now the next SIGTERM reaches
    the handler that was there before, and the main thread puts it back; it is no preemption notice."""
    import os
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        pytest.fail("must run on the main thread to install the SIGTERM handler")
    heard = threading.Event()
    scripts_own = lambda signum, frame: heard.set()  # noqa: E731
    original = signal.signal(signal.SIGTERM, scripts_own)
    try:
        storage = memory_store()
        ckpt = Checkpointer(storage=storage, env={}, every_steps=1)  # installs its handler over the script's
        training = threading.Thread(target=lambda: (ckpt.save(1, {"x": torch.ones(3)}), ckpt.close()))
        training.start()
        training.join(10)
        assert committed_steps(storage) == [1]
        os.kill(os.getpid(), signal.SIGTERM)
        assert heard.wait(5), "the script's SIGTERM handler never ran"
        assert signal.getsignal(signal.SIGTERM) is scripts_own
        assert not ckpt.preemption.requested
        assert "checkpoint-preemption" not in {t.name for t in threading.enumerate() if t.is_alive()}
    finally:
        signal.signal(signal.SIGTERM, original)
