"""What a training script gets wrong, and what the library does about it: forgotten close(), URL
typos, odd steps and values, restoring into the wrong names, a store that failed just before the
preemption notice."""

from __future__ import annotations

import argparse
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
import torch
from fakes import FailingStorage, checkpointer, committed_steps, memory_store

from checkpoint import Checkpointer, CheckpointError, CheckpointWarning, TransferOptions, UnsafeCheckpointError, snapshot
from checkpoint.cli import main as checkpoint_cli
from checkpoint.storage import open_storage

FORGETS_CLOSE = {
    "at the end of the script": "",
    "after sys.exit(0)": "sys.exit(0)",
    "after an uncaught exception": "raise RuntimeError('the loop crashed after saving')",
}


@pytest.mark.parametrize("kind", ["file", "s3"])
@pytest.mark.parametrize("ending", list(FORGETS_CLOSE), ids=lambda e: f"close() forgotten, {e}")
def test_a_script_that_forgets_close_still_commits_its_last_save(kind, ending, make_uri, subprocess_env):
    uri = make_uri(kind)
    script = textwrap.dedent(f"""
        import sys, torch
        from checkpoint import Checkpointer
        model = torch.nn.Linear(64, 64)
        ckpt = Checkpointer(every_steps=1)
        for step in (1, 2, 3):
            with torch.no_grad():
                model.weight.fill_(step)
            ckpt.save(step, {{"model": model}})
        {FORGETS_CLOSE[ending]}
    """)
    done = subprocess.run([sys.executable, "-c", script], env=subprocess_env(uri), capture_output=True, text=True,
                          timeout=120)
    assert "checkpoint upload failed at exit" not in done.stderr, done.stderr
    storage = open_storage(uri)
    assert committed_steps(storage)[-1] == 3, done.stderr
    with Checkpointer(uri, env={}, handle_sigterm=False) as ckpt:
        assert torch.equal(ckpt.restore()["model"]["weight"], torch.full((64, 64), 3.0))


@pytest.mark.parametrize("uri, says", [
    ("s3:/bucket/run", "needs '//'"),
    ("gs:/bucket/run", "needs '//'"),
    ("s3://", "no bucket"),
    ("gs:///run", "no bucket"),
    ("s3//bucket/run", "missing ':'"),
    ("s4://bucket/run", "unknown storage scheme 's4://'"),
    ("https://minio.local:9000/bucket/run", "cannot be written over plain HTTP.*AWS_ENDPOINT_URL"),
])
def test_a_url_typo_is_refused_instead_of_writing_to_the_local_disk(uri, says, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=says):
        Checkpointer(uri, env={}, handle_sigterm=False)
    assert list(tmp_path.iterdir()) == []  # nothing was written under the working directory


@pytest.mark.parametrize("kind", ["s3", "gcs"])
def test_an_upper_case_scheme_is_the_same_store(kind, make_uri):
    uri = make_uri(kind)
    shouted = uri.split("://", 1)[0].upper() + "://" + uri.split("://", 1)[1]
    with Checkpointer(shouted, env={}, handle_sigterm=False) as ckpt:
        ckpt.save(1, {"x": 1}, wait=True)
    assert committed_steps(open_storage(uri)) == [1]


def test_the_cli_says_what_is_wrong_with_a_url_in_one_line(capsys):
    assert checkpoint_cli(["ls", "s3:/bucket/run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: 's3:/bucket/run': a URL needs '//'") and "Traceback" not in err


@pytest.mark.parametrize("array", [
    pytest.param(np.arange(4, dtype=">f4"), id="big-endian float32"),
    pytest.param(np.arange(4, dtype=">i8") * 3, id="big-endian int64"),
    pytest.param(np.array(5.0), id="a 0-d array"),
    pytest.param(np.array(7, dtype=">i4"), id="a 0-d big-endian array"),
    pytest.param(np.arange(12, dtype="<u2").reshape(3, 4)[:, ::2], id="a non-contiguous view"),
])
def test_numpy_arrays_come_back_with_their_values_and_shape(array):
    files = snapshot.capture({"x": {"a": array}}).files()
    back = snapshot.decode(files)["x"]["a"]
    assert back.shape == array.shape and np.array_equal(back, array)
    assert back.dtype == array.dtype.newbyteorder("=")  # the value's type, in native byte order


@pytest.mark.parametrize("step, restored", [(np.int64(5), 5), (torch.tensor(6), 6)])  # a bool is refused
def test_integer_like_steps_are_saved_as_ints(step, restored):
    storage = memory_store()
    with checkpointer(storage) as ckpt:
        ckpt.save(step, {"x": 1}, wait=True)
    assert committed_steps(storage) == [restored]


@pytest.mark.parametrize("step", [2.5, "7", None])
def test_a_step_that_is_not_an_integer_is_refused_before_anything_is_written(step):
    storage = memory_store()
    with checkpointer(storage) as ckpt:
        with pytest.raises(TypeError, match="step must be an integer"):
            ckpt.save(step, {"x": 1})
        with pytest.raises(TypeError, match="step must be an integer"):
            ckpt.due(step)
    assert storage.list() == []


@pytest.mark.parametrize("value, says", [
    pytest.param(lambda x: x, "model.hook: a function cannot be checkpointed", id="a lambda names its key"),
    pytest.param((i for i in range(3)), "model.hook: a generator cannot be checkpointed", id="a generator names its key"),
    pytest.param(torch.eye(3).to_sparse(), "model.hook: tensors of layout torch.sparse_coo", id="a sparse tensor"),
    pytest.param(torch.empty(3, device="meta"), "model.hook: a tensor on the meta device", id="a meta tensor"),
])
def test_what_cannot_be_saved_is_refused_at_save_naming_where_it_is(value, says):
    storage = memory_store()
    with checkpointer(storage) as ckpt:
        with pytest.raises(TypeError) as refused:
            ckpt.save(1, {"model": {"hook": value}})
    assert str(refused.value).startswith(says), refused.value
    assert storage.list() == []


def test_restoring_into_a_name_the_checkpoint_lacks_raises_before_loading_anything():
    """A top-level key renamed between runs ("model" saved, "net" restored into) resumed at the saved step with
    untrained weights and only a warning, and retention then deleted the trained checkpoint. Now a one-line
    CheckpointError names the missing key and what the checkpoint holds, and nothing is loaded (as torch's
    load_state_dict(strict=True))."""
    storage = memory_store()
    saved, saved_head = torch.nn.Linear(3, 3), torch.nn.Linear(2, 2)
    with checkpointer(storage) as ckpt:
        ckpt.save(1, {"model": saved, "head": saved_head, "epoch": 4}, wait=True)
    fresh, fresh_head = torch.nn.Linear(3, 3), torch.nn.Linear(2, 2)
    before = fresh_head.weight.detach().clone()
    with checkpointer(storage) as ckpt:
        with pytest.raises(CheckpointError) as refused:
            ckpt.restore(into={"net": fresh, "head": fresh_head, "epoch": 0})
        assert ckpt.due(1)  # nothing restored: step 1 is not taken as saved
    said = str(refused.value)
    assert "\n" not in said and "has no 'net'" in said and "'model'" in said and "strict=False" in said, said
    assert torch.equal(fresh_head.weight, before)  # the key that was there is not loaded either
    assert not torch.equal(fresh.weight, saved.weight)


def test_restoring_into_a_name_the_checkpoint_lacks_with_strict_false_warns_and_loads_the_rest():
    storage = memory_store()
    saved = torch.nn.Linear(3, 3)
    with checkpointer(storage) as ckpt:
        ckpt.save(1, {"model": saved, "epoch": 4}, wait=True)
    fresh = torch.nn.Linear(3, 3)
    with checkpointer(storage) as ckpt, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        restored = ckpt.restore(into={"net": fresh, "epoch": 0}, strict=False)
    texts = [str(w.message) for w in caught if issubclass(w.category, CheckpointWarning)]
    assert len(texts) == 1 and "has no 'net'" in texts[0] and "'model'" in texts[0], texts  # a plain value is no news
    assert restored.step == 1 and restored["epoch"] == 4
    assert not torch.equal(fresh.weight, saved.weight)


def test_a_preemption_notice_after_a_failed_save_still_tries_its_own_save():
    """A store that failed once (say, for a minute) must not cost the save the notice asks for."""

    class FailsOnce(FailingStorage):
        failed = False

        def write(self, path, data):
            if not FailsOnce.failed:
                FailsOnce.failed = True
                raise OSError(503, "store unavailable")
            self._inner.write(path, data)

    storage = FailsOnce(memory_store())
    ckpt = checkpointer(storage)
    ckpt.save(1, {"x": torch.ones(3)})
    ckpt._runner.wait()  # the save of step 1 failed in the background
    ckpt.preemption.notify()
    assert ckpt.due(2)  # no error here: the notice's save comes first
    with pytest.raises(SystemExit) as exited:
        ckpt.save(2, {"x": torch.full((3,), 2.0)})
    assert exited.value.code == 143
    assert committed_steps(storage) == [2]
    ckpt.preemption.uninstall()


def test_without_a_notice_an_earlier_failure_still_stops_the_next_save():
    ckpt = checkpointer(FailingStorage(memory_store()))
    ckpt.save(1, {"x": torch.ones(3)})
    ckpt._runner.wait()
    with pytest.raises(CheckpointError, match=r"OSError: \[Errno 503\] store unavailable"):
        ckpt.save(2, {"x": torch.ones(3)})


def test_state_that_needs_pickle_is_named_at_the_first_save_not_first_at_the_resume():
    """An argparse Namespace or a set in the state saves fine, but the resume after a preemption would
    stop at UnsafeCheckpointError: the first save says so, and the refusal names where they are."""
    storage = memory_store()
    state = {"model": torch.nn.Linear(2, 2), "args": argparse.Namespace(lr=0.1), "data": {"seen": {1, 2}}}
    with checkpointer(storage) as ckpt, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ckpt.save(1, state, wait=True)
        ckpt.save(2, state, wait=True)  # said once, not at every save
    texts = [str(w.message) for w in caught if issubclass(w.category, CheckpointWarning)]
    assert len(texts) == 1 and caught[0].filename == __file__, texts
    assert texts[0].startswith("step 1: args (a Namespace), data.seen (a set) can only be saved pickled"), texts
    with checkpointer(storage) as ckpt, pytest.raises(UnsafeCheckpointError) as refused:
        ckpt.restore()
    assert str(refused.value).startswith(f"{storage.uri()}/step-000000000002-"), refused.value
    assert "pickled Python objects (at args, data.seen)" in str(refused.value)


def test_a_save_that_fails_while_the_notices_save_waits_is_logged_and_the_run_still_exits_143(caplog):
    """The periodic save is still uploading when the notice comes, and fails only while save() waits for the
    notice's own commit: that failure must not stand in for the preemption (a traceback and status 1, threads
    left running, the SIGTERM handler not put back) once the notice's checkpoint has committed."""
    import signal
    import threading

    class FailsStepOneLate(FailingStorage):
        """Step 1's first write waits for ``gate``, then raises; every other write goes through."""

        def write(self, path, data):
            if path.startswith("step-000000000001-"):
                self.writes_started.release()
                assert self.gate.wait(10), "test never opened the gate"
                raise OSError(503, "store unavailable")
            self._inner.write(path, data)

    class OpensTheGate:
        """Captured by save(2) after its own check for earlier failures: step 1 fails only after that."""

        def __init__(self, gate):
            self.gate = gate

        def state_dict(self):
            self.gate.set()
            return {"w": torch.ones(3)}

        def load_state_dict(self, state):
            pass

    if threading.current_thread() is not threading.main_thread():
        pytest.fail("must run on the main thread to install the SIGTERM handler")
    before = signal.getsignal(signal.SIGTERM)
    storage = FailsStepOneLate(memory_store())
    storage.gate.clear()
    ckpt = checkpointer(storage, every_steps=1000, every_seconds=3600)
    assert ckpt.preemption.install()
    ckpt.save(1, {"x": torch.ones(3)})
    assert storage.writes_started.acquire(timeout=5)  # step 1 is uploading, held at the gate
    ckpt.preemption.notify()
    assert ckpt.due(2)
    with pytest.raises(SystemExit) as exited, caplog.at_level("ERROR", logger="checkpoint"):
        ckpt.save(2, {"model": OpensTheGate(storage.gate)})
    assert exited.value.code == 143
    assert committed_steps(storage) == [2]
    assert any("store unavailable" in r.getMessage() for r in caplog.records), caplog.records
    assert not ckpt._runner._thread.is_alive()
    assert signal.getsignal(signal.SIGTERM) == before



REFUSED_ARGUMENTS = [
    ("keep_last=2.5 (each save committed, then failed its retention)", {"keep_last": 2.5}, {},
     TypeError, r"^keep_last must be an integer, got float 2\.5$"),
    ("keep_last=True (a bool is not a count)", {"keep_last": True}, {}, TypeError,
     r"^keep_last must be an integer, got bool True$"),
    ("keep_every='100' (a numeric string is not a number)", {"keep_every": "100"}, {}, TypeError,
     r"^keep_every must be an integer, got str '100'$"),
    ("every_steps='50'", {"every_steps": "50"}, {}, TypeError, r"^every_steps must be an integer, got str '50'$"),
    ("every_steps=True", {"every_steps": True}, {}, TypeError, r"^every_steps must be an integer, got bool True$"),
    ("every_seconds='60'", {"every_seconds": "60"}, {}, TypeError,
     r"^every_seconds must be a number of seconds, got str '60'$"),
    ("every_seconds=nan", {"every_seconds": float("nan")}, {}, ValueError, r"^every_seconds must be > 0 seconds"),
    ("grace_s='2' (at SIGTERM it killed the watchdog, and the forced exit with it)", {"grace_s": "2"}, {}, TypeError,
     r"^grace_s must be a number of seconds, got str '2'$"),
    ("grace_s=-1", {"grace_s": -1}, {}, ValueError, r"^grace_s must be >= 0 seconds, got -1$"),
    ("exit_code='143'", {"exit_code": "143"}, {}, TypeError, r"^exit_code must be an integer, got str '143'$"),
    ("exit_code=400", {"exit_code": 400}, {}, ValueError, r"^exit_code must be <= 255"),
    ("BROKER_PREEMPTION_GRACE_S=soon", {}, {"BROKER_PREEMPTION_GRACE_S": "soon"}, ValueError,
     r"^BROKER_PREEMPTION_GRACE_S must be a number of seconds, got 'soon'$"),
]


@pytest.mark.parametrize("kw, env, error, says", [r[1:] for r in REFUSED_ARGUMENTS],
                         ids=[f"{r[0]} is refused at construction" for r in REFUSED_ARGUMENTS])
def test_a_wrong_count_or_duration_is_refused_when_the_checkpointer_is_built_naming_it(kw, env, error, says):
    import signal
    import threading

    before, threads = signal.getsignal(signal.SIGTERM), set(threading.enumerate())
    storage = memory_store()
    with pytest.raises(error, match=says):
        Checkpointer(storage=storage, env=env, **kw)
    assert signal.getsignal(signal.SIGTERM) == before and set(threading.enumerate()) <= threads
    assert storage.list() == []


@pytest.mark.parametrize("field, value, error, says", [
    ("part_size", "32MiB", TypeError, r"^part_size must be an integer, got str '32MiB'$"),
    ("concurrency", 0, ValueError, r"^concurrency must be >= 1, got 0$"),
    ("retries", 1.5, TypeError, r"^retries must be an integer, got float 1\.5$"),
    ("retry_backoff_s", None, TypeError, r"^retry_backoff_s must be a number of seconds, got NoneType None$"),
], ids=["a part size as text", "no parts in flight", "a fraction of a retry", "no backoff"])
def test_wrong_transfer_options_are_refused_when_made_not_mid_upload(field, value, error, says):
    with pytest.raises(error, match=says):
        TransferOptions(**{field: value})


def test_a_pathlib_path_is_a_checkpoint_location(tmp_path):
    base = tmp_path / "run"
    with Checkpointer(base, env={}, handle_sigterm=False) as ckpt:
        ckpt.save(1, {"x": 1}, wait=True)
        assert ckpt.uri == str(base)
    assert committed_steps(open_storage(base)) == [1]


@pytest.mark.parametrize("uri", [123, b"/tmp/run"], ids=["an int", "a bytes path"])
def test_a_location_that_is_neither_a_str_nor_a_path_says_what_is_needed(uri):
    with pytest.raises(TypeError, match=r"^a checkpoint URI must be a str \(s3://bucket/run, gs://bucket/run or a "
                                        r"path\) or an os\.PathLike such as pathlib\.Path, got (int|bytes) "):
        Checkpointer(uri, env={}, handle_sigterm=False)


@pytest.mark.parametrize("into", [torch.nn.Linear(2, 2), torch.nn.Sequential(torch.nn.Linear(2, 2))],
                         ids=["a bare Linear", "a bare Sequential"])
def test_restoring_into_a_bare_model_says_a_dict_is_needed_like_save(into):
    storage = memory_store()
    with checkpointer(storage) as ckpt:
        ckpt.save(1, {"model": torch.nn.Linear(2, 2)}, wait=True)
    with checkpointer(storage) as ckpt, warnings.catch_warnings():
        warnings.simplefilter("error", CheckpointWarning)  # no bogus "has no Linear(...)" warning first
        with pytest.raises(TypeError, match=rf"^restore\(into=\.\.\.\) takes a dict of name → object, like save\(\), "
                                            rf"got {type(into).__name__}$"):
            ckpt.restore(into=into)
