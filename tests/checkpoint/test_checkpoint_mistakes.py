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

from checkpoint import Checkpointer, CheckpointError, CheckpointWarning, UnsafeCheckpointError, snapshot
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


@pytest.mark.parametrize("step, restored", [(np.int64(5), 5), (torch.tensor(6), 6), (True, 1)])
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


def test_restoring_into_names_the_checkpoint_lacks_warns_instead_of_loading_nothing_quietly():
    storage = memory_store()
    saved = torch.nn.Linear(3, 3)
    with checkpointer(storage) as ckpt:
        ckpt.save(1, {"model": saved, "epoch": 4}, wait=True)
    fresh = torch.nn.Linear(3, 3)
    with checkpointer(storage) as ckpt, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        restored = ckpt.restore(into={"net": fresh, "epoch": 0})
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
