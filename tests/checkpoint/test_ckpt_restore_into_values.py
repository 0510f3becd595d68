"""``restore(into=...)`` loads every value of a dict it is given, not only its tensors.

QA: numpy arrays (which the docs list as first-class saveable) were skipped without a word — ``ema`` stayed zeros
while ``restored["ema"]`` was [3, 3, 3, 3] — and so were the plain values of a dict given to ``into``: its tensor was
loaded in place and ``best_val`` stayed ``inf``, ``step`` 0, ``hist`` []. Now arrays are copied in place (checked as
tensors are: a shape that differs is a ``CheckpointError`` before anything loads), plain values are put into the dict
(or list) that holds them, and one that cannot be put in place (a tuple's item) is said in a ``CheckpointWarning``.
"""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
import warnings
from types import MappingProxyType

import numpy as np
import pytest
import torch

from checkpoint import Checkpointer, CheckpointError, CheckpointWarning


def _ckpt(base) -> Checkpointer:
    return Checkpointer(str(base), env={}, handle_sigterm=False, every_steps=1)


def _restore(base, into, **kw):
    with warnings.catch_warnings(record=True) as caught, _ckpt(base) as ckpt:
        warnings.simplefilter("always")
        restored = ckpt.restore(into=into, **kw)
    return restored, [str(w.message) for w in caught if issubclass(w.category, CheckpointWarning)]


def test_numpy_arrays_given_to_into_are_loaded_in_place_at_the_top_and_in_dicts(tmp_path):
    with _ckpt(tmp_path / "run") as c:
        c.save(3, {"ema": np.full(4, 3.0), "counts": {"seen": np.arange(3), "w": torch.ones(2)}}, wait=True)
    ema, counts = np.zeros(4), {"seen": np.zeros(3, dtype=np.int64), "w": torch.zeros(2)}
    seen = counts["seen"]
    restored, said = _restore(tmp_path / "run", {"ema": ema, "counts": counts})
    assert ema.tolist() == [3.0] * 4 and seen.tolist() == [0, 1, 2] and counts["seen"] is seen, (ema, counts)
    assert counts["w"].tolist() == [1.0, 1.0] and said == []
    assert restored["ema"] is ema  # the result holds the live array, as it does a live tensor


def test_an_array_of_another_shape_is_a_checkpoint_error_and_nothing_is_loaded(tmp_path):
    with _ckpt(tmp_path / "run") as c:
        c.save(3, {"ema": np.full(4, 3.0), "other": np.ones(2)}, wait=True)
    ema, other = np.zeros(5), np.zeros(2)
    with _ckpt(tmp_path / "run") as ckpt, pytest.raises(CheckpointError) as raised:
        ckpt.restore(into={"other": other, "ema": ema})
    assert "'ema' saved (4,), live (5,)" in str(raised.value) and "Nothing was loaded" in str(raised.value)
    assert other.tolist() == [0.0, 0.0]


def test_an_array_of_another_dtype_is_cast_with_a_warning_as_a_tensor_is(tmp_path):
    with _ckpt(tmp_path / "run") as c:
        c.save(3, {"ema": np.full(2, 3.0)}, wait=True)
    ema = np.zeros(2, dtype=np.float32)
    _, said = _restore(tmp_path / "run", {"ema": ema})
    assert ema.tolist() == [3.0, 3.0] and ema.dtype == np.float32
    assert len(said) == 1 and "'ema' float64 → float32" in said[0], said


def test_a_numpy_only_script_restores_arrays_in_place_without_importing_torch(tmp_path):
    script = textwrap.dedent(f"""
        import sys
        import numpy as np
        from checkpoint import Checkpointer
        base = {str(tmp_path / "run")!r}
        with Checkpointer(base, env={{}}, handle_sigterm=False, every_steps=1) as c:
            c.save(3, {{"ema": np.full(4, 3.0), "counts": {{"seen": np.arange(3), "n": 5}}}}, wait=True)
        ema, counts = np.zeros(4), {{"seen": np.zeros(3, dtype=np.int64), "n": 0}}
        with Checkpointer(base, env={{}}, handle_sigterm=False) as c:
            c.restore(into={{"ema": ema, "counts": counts}})
        print(ema.tolist(), counts["seen"].tolist(), counts["n"], "torch" in sys.modules)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "[3.0, 3.0, 3.0, 3.0] [0, 1, 2] 5 False", done.stdout


def test_the_plain_values_of_a_dict_given_to_into_are_put_into_it(tmp_path):
    with _ckpt(tmp_path / "run") as c:
        c.save(3, {"extra": {"best_val": 0.5, "step": 7, "np_counter": np.int64(7), "ema": torch.full((2,), 3.0),
                             "hist": [1.0, 2.0], "note": "warm"}}, wait=True)
    hist, ema = [], torch.zeros(2)
    extra = {"best_val": math.inf, "step": 0, "np_counter": np.int64(0), "ema": ema, "hist": hist}
    restored, said = _restore(tmp_path / "run", {"extra": extra})
    assert extra["best_val"] == 0.5 and extra["step"] == 7 and extra["hist"] == [1.0, 2.0], extra
    assert extra["np_counter"] == 7 and type(extra["np_counter"]) is np.int64, extra
    assert extra["ema"] is ema and ema.tolist() == [3.0, 3.0]
    assert hist == [1.0, 2.0]  # the list itself holds them (a script holding a reference to it sees them)
    assert extra["note"] == "warm"  # saved, not in the live dict: added, so the dict holds what was saved
    assert said == [] and restored["extra"]["step"] == 7


def test_a_list_and_a_tuple_in_a_list_given_to_into_end_up_holding_what_was_saved(tmp_path):
    with _ckpt(tmp_path / "run") as c:
        c.save(3, {"w": np.ones(2), "epoch": 4, "losses": [0.5, 0.25],
                   "buffers": [torch.ones(2), (torch.full((2,), 3.0), 4, {"k": 1})]}, wait=True)
    second, inner = torch.zeros(2), {"k": 0}
    losses, buffers = [], [torch.zeros(2), (second, 0, inner)]
    into = {"w": np.zeros(2), "epoch": 0, "losses": losses, "buffers": buffers}
    restored, said = _restore(tmp_path / "run", into)
    assert losses == [0.5, 0.25] and into["losses"] is losses
    assert buffers[1][0] is second and second.tolist() == [3.0, 3.0] and buffers[1][1] == 4, buffers
    assert buffers[1][2] is inner and inner == {"k": 1}, buffers
    # a plain value of into itself is read from the result: the mapping given is not changed (as before)
    assert into["epoch"] == 0 and restored["epoch"] == 4 and said == []


def test_a_value_that_cannot_be_put_in_place_is_warned_about_by_name(tmp_path):
    with _ckpt(tmp_path / "run") as c:
        c.save(3, {"pair": (torch.ones(2), 7, "same"), "frozen": {"lr": 0.1, "w": torch.ones(1)}}, wait=True)
    pair = (torch.zeros(2), 0, "same")
    frozen = MappingProxyType({"lr": 0.5, "w": torch.zeros(1)})
    _, said = _restore(tmp_path / "run", {"pair": pair, "frozen": frozen})
    assert pair[0].tolist() == [1.0, 1.0] and frozen["w"].tolist() == [1.0]  # the tensors still load in place
    assert len(said) == 1, said
    assert "'pair[1]'" in said[0] and "'frozen.lr'" in said[0] and "'pair[2]'" not in said[0], said
    assert "keep the values they had" in said[0] and "restored[...]" in said[0], said


class _Count:
    """An object of the script's own with state_dict()/load_state_dict() (a scheduler, a data cursor)."""

    def __init__(self, n: int):
        self.n = n

    def state_dict(self):
        return {"n": self.n}

    def load_state_dict(self, state):
        self.n = state["n"]


def test_an_object_with_load_state_dict_held_in_a_dict_given_to_into_is_loaded(tmp_path):
    with _ckpt(tmp_path / "run") as c:
        c.save(3, {"extra": {"cursor": _Count(5), "ema": np.ones(2)}}, wait=True)
    cursor, ema = _Count(0), np.zeros(2)
    extra = {"cursor": cursor, "ema": ema}
    _, said = _restore(tmp_path / "run", {"extra": extra})
    assert extra["cursor"] is cursor and cursor.n == 5 and ema.tolist() == [1.0, 1.0] and said == []


def test_a_read_only_array_or_a_tensor_saved_for_an_array_is_a_checkpoint_error_naming_it(tmp_path):
    with _ckpt(tmp_path / "run") as c:
        c.save(3, {"ema": np.ones(2), "w": torch.ones(2)}, wait=True)
    frozen = np.zeros(2)
    frozen.setflags(write=False)
    with _ckpt(tmp_path / "run") as ckpt, pytest.raises(CheckpointError) as raised:
        ckpt.restore(into={"ema": frozen})
    assert "'ema' is a read-only numpy array here" in str(raised.value), raised.value
    with _ckpt(tmp_path / "run") as ckpt, pytest.raises(CheckpointError) as raised:
        ckpt.restore(into={"w": np.zeros(2)})
    assert "'w' is a numpy array here, a tensor in the checkpoint" in str(raised.value), raised.value
