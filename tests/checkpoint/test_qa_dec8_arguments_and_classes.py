"""What a script passes that is not what it means is refused, naming it: a flag that is not a bool (read for its
truth, ``allow_pickle="no"`` unpickled), a step that is a bool (``save(True, state)`` was step 1), and a class given
where an object of it was meant (``GlobalRNG`` for ``GlobalRNG()``: a raw "missing 1 required positional argument:
'self'" from inside the save)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from fakes import checkpointer, committed_steps, memory_store

from checkpoint import CheckpointWarning, GlobalRNG


@pytest.mark.parametrize("value", ["no", 1, None], ids=["a string", "an int", "None"])
def test_restore_refuses_an_allow_pickle_that_is_not_a_bool_before_anything_is_unpickled(value):
    storage = memory_store()
    with checkpointer(storage) as ckpt:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CheckpointWarning)
            ckpt.save(1, {"cfg": object()}, wait=True)  # only pickle can save it
        with pytest.raises(TypeError, match=r"allow_pickle must be True or False, got "):
            ckpt.restore(allow_pickle=value)


def test_restore_refuses_a_strict_that_is_not_a_bool():
    with checkpointer(memory_store()) as ckpt:
        with pytest.raises(TypeError, match=r"strict must be True or False, got str 'no'"):
            ckpt.restore(strict="no")


def test_save_refuses_a_wait_that_is_not_a_bool_and_writes_nothing():
    storage = memory_store()
    with checkpointer(storage) as ckpt:
        with pytest.raises(TypeError, match=r"wait must be True or False, got str 'no'"):
            ckpt.save(1, {"w": np.ones(2)}, wait="no")
        ckpt.wait()
    assert committed_steps(storage) == []


def test_a_step_that_is_a_bool_is_refused_rather_than_saved_as_step_1():
    storage = memory_store()
    with checkpointer(storage) as ckpt:
        with pytest.raises(TypeError, match=r"step must be an integer, got bool True"):
            ckpt.save(True, {"w": np.ones(2)})
        ckpt.wait()
    assert committed_steps(storage) == []


def test_a_stateful_class_given_for_its_instance_names_the_key_and_says_to_give_an_instance():
    with checkpointer(memory_store()) as ckpt:
        with pytest.raises(TypeError) as refused:
            ckpt.save(6, {"w": np.ones(2), "rng": GlobalRNG})
    said = str(refused.value)
    assert said.startswith("rng: GlobalRNG is a class, not an object of it"), said
    assert "give an instance of it (GlobalRNG(...)" in said and "missing 1 required" not in said, said


def test_a_torch_module_class_given_for_a_module_names_the_key():
    torch = pytest.importorskip("torch")
    with checkpointer(memory_store()) as ckpt:
        with pytest.raises(TypeError, match=r"^m: Linear is a class, not an object of it"):
            ckpt.save(6, {"m": torch.nn.Linear})


def test_a_value_saved_pickled_is_named_with_its_article():
    with checkpointer(memory_store()) as ckpt:
        with pytest.warns(CheckpointWarning) as said:
            ckpt.save(1, {"cfg": object()}, wait=True)
    text = " ".join(str(w.message) for w in said)
    assert "cfg (an object) can only be saved pickled" in text, text
