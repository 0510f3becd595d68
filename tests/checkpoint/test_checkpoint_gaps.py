"""Gaps an audit found: a notice that came before the checkpointer was made, a checkpointer made on a thread of its
own, numpy scalars and OrderedDicts in the saved state, a restore that casts to another dtype, and the status of a
script that ended by ``sys.exit(n)`` with its last save lost.

Real parts: subprocesses that get a real SIGTERM, local files and moto's S3 server, torch on CPU.
"""

from __future__ import annotations

import collections
import io
import json
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import numpy as np
import pytest
import torch

from conftest import PYTHON

from checkpoint import Checkpointer, CheckpointWarning, layout, snapshot


def _restored_step(uri: str) -> int | None:
    with Checkpointer(uri, env={}, handle_sigterm=False) as ckpt:
        restored = ckpt.restore()
    return None if restored is None else restored.step


# -- 1. a notice that came before the checkpointer was made ------------------------------------------------------


def test_a_checkpointer_made_after_the_sigterm_came_saves_at_its_first_step_and_exits_143(tmp_path, subprocess_env):
    """A reader (pretrained weights, never closed) takes the SIGTERM while the script still sets up; the run's own
    checkpointer is made after it. Before, that one knew nothing of the notice: the loop trained on and the reader's
    deadline killed the process without the notice's checkpoint."""
    script = textwrap.dedent("""
        import os, signal, sys, time
        import numpy as np
        from checkpoint import Checkpointer
        with Checkpointer(sys.argv[1], handle_sigterm=False) as pre:
            pre.save(1, {"w": np.ones(4)}, wait=True)
        reader = Checkpointer(sys.argv[1], grace_s=20)    # pretrained weights; never closed
        reader.restore()
        os.kill(os.getpid(), signal.SIGTERM)              # the notice, while the script still loads its data
        time.sleep(0.5)
        ckpt = Checkpointer(every_steps=10**6, grace_s=30)
        ckpt.restore()
        for step in range(1, 10**6):
            time.sleep(0.01)
            if ckpt.due(step):
                ckpt.save(step, {"w": np.full(4, step)})
        print("the loop ended without the notice's save", flush=True)
    """)
    uri = str(tmp_path / "run")
    started = time.monotonic()
    done = subprocess.run([PYTHON, "-c", script, str(tmp_path / "pretrained")], env=subprocess_env(uri),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 143, done.stderr[-2000:]
    assert _restored_step(uri) == 1, done.stderr[-2000:]  # saved at its first step
    assert time.monotonic() - started < 15, done.stderr[-2000:]  # not at the reader's deadline (20 s)
    assert "exiting without a final checkpoint" not in done.stderr, done.stderr[-2000:]
    assert "a preemption notice came before this checkpointer was made" in done.stderr, done.stderr[-2000:]


# -- 2. a checkpointer made on a thread other than the main one ---------------------------------------------------


def _train_on_a_thread(make, *, close: bool) -> list[str]:
    """Run a short loop on a thread of its own (``make()`` gives its checkpointer there, ``close``: closed there too);
    the warnings it raised."""
    failures: list[BaseException] = []

    def train() -> None:
        try:
            ckpt = make()
            for step in range(1, 4):
                if ckpt.due(step):
                    ckpt.save(step, {"w": np.full(4, step)}, wait=True)
            if close:
                ckpt.close()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            failures.append(e)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        training = threading.Thread(target=train)
        training.start()
        training.join(30)
    assert not failures, failures
    return [str(w.message) for w in caught if issubclass(w.category, CheckpointWarning)]


def test_a_checkpointer_made_on_a_training_thread_says_at_its_first_step_that_it_cannot_hear_sigterm(tmp_path):
    """Only the main thread can set a signal handler: made on another thread, a SIGTERM ends the process without a
    checkpoint. Before, nothing said so until a preemption lost the save."""
    said = _train_on_a_thread(lambda: Checkpointer(tmp_path / "run", every_steps=1, env={}), close=True)
    assert len(said) == 1, said
    assert "not the main thread, so it cannot handle SIGTERM" in said[0], said
    assert "Make the Checkpointer on the main thread and hand it to the training thread" in said[0], said


def test_a_checkpointer_made_on_the_main_thread_and_used_on_a_training_thread_says_nothing(tmp_path):
    ckpt = Checkpointer(tmp_path / "run", every_steps=1, env={})
    try:
        assert _train_on_a_thread(lambda: ckpt, close=False) == []
    finally:
        ckpt.close()  # here: closed on the thread, its SIGTERM handler would stay until the main thread ends


# -- 3. numpy scalars and OrderedDict -----------------------------------------------------------------------------


def _state() -> dict:
    return {"extra": {
        "best": np.float32(0.1), "seen": np.int64(7), "done": np.bool_(True), "half": np.float16(0.5),
        "f64": np.float64(1 / 3), "tiny": np.uint8(3), "pair": (np.int32(-2), 1.5),
        "lr_history": collections.OrderedDict([("z", 1.0), ("a", np.float32(2.5))]),
        "by_epoch": collections.OrderedDict([(2, "b"), (1, "a")]),
        "nested": [collections.OrderedDict(q=np.float64(2.0))], "plain": {"b": 1, "a": 2},
        "name": np.str_("run-7"),
    }}


def _same(got, want) -> None:
    """Equal values of the same types (an OrderedDict's order included), all the way down."""
    assert type(got) is type(want), (got, want)
    if isinstance(want, dict):
        assert list(got) == list(want), (got, want)
        for k in want:
            _same(got[k], want[k])
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
    else:
        assert got == want, (got, want)
        if isinstance(want, np.generic):
            assert got.dtype == want.dtype


@pytest.mark.parametrize("kind", ["file", "s3"])
def test_numpy_scalars_and_ordered_dicts_come_back_as_torch_save_gives_them_back(kind, make_uri):
    """``np.float32(0.1)`` came back as the float64 0.10000000149011612 and an OrderedDict as a dict."""
    state = _state()
    uri = make_uri(kind)
    with Checkpointer(uri, env={}, handle_sigterm=False) as ckpt:
        ckpt.save(1, state, wait=True)
    with Checkpointer(uri, env={}, handle_sigterm=False) as ckpt:
        restored = ckpt.restore()
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    from_torch = torch.load(buffer, weights_only=False)["extra"]
    want = dict(_state()["extra"], name="run-7")  # a numpy string has no safetensors type: a str, as before
    _same(restored["extra"], want)
    for key in want:  # torch.save's types, but for the string
        if key != "name":
            _same(restored["extra"][key], from_torch[key])


def test_a_models_state_comes_back_an_ordered_dict_as_its_state_dict_is(tmp_path):
    model = torch.nn.Linear(3, 2)
    with Checkpointer(tmp_path / "run", env={}, handle_sigterm=False) as ckpt:
        ckpt.save(1, {"model": model, "opt": {"m": model.state_dict()}}, wait=True)
        restored = ckpt.restore()
    assert type(restored["model"]) is collections.OrderedDict
    assert list(restored["opt"]["m"]) == ["weight", "bias"] and type(restored["opt"]["m"]) is collections.OrderedDict


def test_an_earlier_version_reads_numpy_scalars_as_0d_arrays_of_their_dtype_and_ordered_dicts_as_dicts():
    """An earlier version ignores the two new lists of ``state.json`` (``scalars``, ``ordered``): what it reads is
    the value, of the same dtype and order — nothing it would return wrong (a tag inside the tree would have come
    back to it as a dict)."""
    files = snapshot.capture(_state()).files()
    doc = json.loads(b"".join(files[layout.STATE]))
    assert set(doc) == {"format", "tree", "arrays", "scalars", "ordered"} and doc["format"] == 1
    old = dict(files, **{layout.STATE: [json.dumps({k: doc[k] for k in ("format", "tree", "arrays")}).encode()]})
    extra = snapshot.decode(old)["extra"]
    assert isinstance(extra["best"], np.ndarray) and extra["best"].shape == () and extra["best"].dtype == np.float32
    assert extra["best"] == np.float32(0.1) and extra["seen"].dtype == np.int64 and extra["seen"] == 7
    assert type(extra["lr_history"]) is dict and list(extra["lr_history"]) == ["z", "a"]
    assert list(extra["by_epoch"]) == [2, 1]


def test_numpy_scalars_round_trip_in_a_numpy_only_script_without_loading_torch(tmp_path, subprocess_env):
    script = textwrap.dedent("""
        import sys
        import numpy as np
        from checkpoint import Checkpointer
        with Checkpointer(every_steps=1) as ckpt:
            ckpt.save(1, {"best": np.float32(0.25), "k": {np.int64(3): np.int16(-4)}}, wait=True)
            r = ckpt.restore()
        print(type(r["best"]).__name__, type(r["k"][3]).__name__, list(r["k"]), "torch" in sys.modules)
    """)
    done = subprocess.run([PYTHON, "-c", script], env=subprocess_env(str(tmp_path / "run")), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["float32", "int16", "[3]", "False"], done.stdout  # a key stays a Python value


# -- 4. a restore that casts to another dtype ---------------------------------------------------------------------


@pytest.mark.parametrize("strict", [True, False])
def test_a_restore_into_a_model_of_another_dtype_warns_naming_the_tensors_and_both_dtypes(strict, tmp_path):
    """torch's load_state_dict casts without a word (a model saved in float32, now bfloat16); the restore still
    loads, and says so."""
    saved = torch.nn.Linear(4, 3)
    with Checkpointer(tmp_path / "run", env={}, handle_sigterm=False) as ckpt:
        ckpt.save(1, {"model": saved}, wait=True)
    now = torch.nn.Linear(4, 3).to(torch.bfloat16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Checkpointer(tmp_path / "run", env={}, handle_sigterm=False) as ckpt:
            ckpt.restore(into={"model": now}, strict=strict)
    said = [str(w.message) for w in caught if issubclass(w.category, CheckpointWarning)]
    assert len(said) == 1, said
    assert "2 tensor(s) of 'model' were saved with another dtype" in said[0], said
    assert "'weight' float32 → bfloat16" in said[0] and "'bias' float32 → bfloat16" in said[0], said
    assert now.weight.dtype == torch.bfloat16 and torch.equal(now.weight, saved.weight.detach().to(torch.bfloat16))


def test_a_restore_into_a_model_of_the_same_dtype_says_nothing(tmp_path):
    saved = torch.nn.Linear(4, 3)
    with Checkpointer(tmp_path / "run", env={}, handle_sigterm=False) as ckpt:
        ckpt.save(1, {"model": saved, "opt": torch.optim.SGD(saved.parameters(), lr=0.1)}, wait=True)
    now = torch.nn.Linear(4, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CheckpointWarning)
        with Checkpointer(tmp_path / "run", env={}, handle_sigterm=False) as ckpt:
            ckpt.restore(into={"model": now, "opt": torch.optim.SGD(now.parameters(), lr=0.1)})
    assert torch.equal(now.weight, saved.weight)


# -- 5. sys.exit(n) with the last save lost ----------------------------------------------------------------------

#: Saves step 1, then the directory is replaced by a file (every write under it fails), then step 2 is saved in the
#: background and the script ends as ENDING says, never calling close().
LOST = """
import os, shutil, sys
import numpy as np
from checkpoint import Checkpointer
uri = os.environ["BROKER_CHECKPOINT_URI"]
ckpt = Checkpointer(every_steps=1)
ckpt.save(1, {"a": np.full(1024, 1.0)}, wait=True)
shutil.rmtree(uri)
open(uri, "w").close()
ckpt.save(2, {"a": np.full(1024, 2.0)})
"""


@pytest.mark.parametrize("ending, status", [
    ("sys.exit(3)", 3),
    ("def main():\n    sys.exit(4)\nmain()", 4),
    ("try:\n    sys.exit(3)\nexcept SystemExit:\n    pass", 1),  # caught: the script ended normally
    ("sys.exit(0)", 1),
    ("sys.exit('stopped: the data ran out')", 1),
], ids=["sys.exit(3)", "sys.exit(4) in a function", "a caught sys.exit(3)", "sys.exit(0)", "sys.exit(text)"])
def test_a_script_that_ends_by_sys_exit_n_keeps_its_status_when_its_last_save_was_lost(ending, status, tmp_path,
                                                                                      subprocess_env):
    """Before, every such script exited 1; a status that says how it failed (a scheduler's "requeue me") was lost."""
    done = subprocess.run([PYTHON, "-c", LOST + ending + "\n"], env=subprocess_env(str(tmp_path / "run")),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == status, (done.returncode, done.stderr[-2000:])
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("The last checkpoint (step 2) was not saved to "), last
    assert f"exits with status {status}" in last, last
