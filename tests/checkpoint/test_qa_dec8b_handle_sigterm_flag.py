"""``Checkpointer(uri, handle_sigterm="no")`` was read for its truth: the SIGTERM handler was installed and the
notice watchers started, which the script had said not to do. ``handle_sigterm`` is a flag as ``wait``,
``allow_pickle`` and ``strict`` are (:func:`checkpoint.arguments.flag`): ``True`` or ``False`` itself, anything else a
``TypeError`` naming it, before anything is opened or installed."""

from __future__ import annotations

import signal
import threading

import pytest
from fakes import memory_store

from checkpoint import Checkpointer


@pytest.mark.parametrize("value", ["no", 0, None, "False"], ids=["the string no", "zero", "None", "the string False"])
def test_a_handle_sigterm_that_is_not_a_bool_is_refused_naming_it_and_nothing_is_installed(tmp_path, value):
    before, threads = signal.getsignal(signal.SIGTERM), set(threading.enumerate())
    with pytest.raises(TypeError, match=r"^handle_sigterm must be True or False, got "):
        Checkpointer(str(tmp_path / "run"), handle_sigterm=value, env={"BROKER_NOTICE_FILE": str(tmp_path / "n")})
    assert signal.getsignal(signal.SIGTERM) is before
    assert set(threading.enumerate()) <= threads
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("value", [True, False])
def test_a_handle_sigterm_of_true_or_false_is_taken(value):
    before = signal.getsignal(signal.SIGTERM)
    ckpt = Checkpointer(storage=memory_store(), env={}, handle_sigterm=value, every_steps=1)
    try:
        assert (signal.getsignal(signal.SIGTERM) is not before) is value
    finally:
        ckpt.close()
        signal.signal(signal.SIGTERM, before)
