"""What a PyTorch user does out of habit, and what the library makes of it: restoring into a ``state_dict()`` or a
bare tensor, a model whose head changed size, a checkpoint directory taken for a base, one step asked for,
``defaultdict`` and ``Counter`` in the state, ``keep_last=None``, a tensor as the step, saves faster than uploads."""

from __future__ import annotations

import collections
import logging
import warnings

import pytest
import torch
from fakes import GatedStorage, checkpointer, committed_steps, memory_store

from checkpoint import Checkpointer, CheckpointError, CheckpointWarning, layout
from checkpoint.storage import open_storage


def local_store(tmp_path):
    return open_storage(str(tmp_path / "run"))


def linear(fill: float, rows: int = 4, cols: int = 4) -> torch.nn.Linear:
    model = torch.nn.Linear(cols, rows)
    with torch.no_grad():
        model.weight.fill_(fill)
        model.bias.fill_(fill)
    return model


def checkpoint_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, CheckpointWarning)]


# -- 1. into= a state_dict, a tensor, containers of tensors ------------------------------------------------------


def test_restoring_into_a_models_state_dict_copies_the_saved_weights_into_the_model(tmp_path):
    """``restore(into={"model": model.state_dict()})`` returned the saved step and left the model untrained."""
    storage = local_store(tmp_path)
    with checkpointer(storage) as ckpt:
        ckpt.save(10, {"model": linear(7.0).state_dict(), "step": 10}, wait=True)
    model = linear(0.0)
    state = {"model": model.state_dict(), "step": 0}
    with checkpointer(storage) as ckpt:
        restored = ckpt.restore(into=state)
    assert restored.step == 10 and restored["step"] == 10 and state["step"] == 0  # a plain value: from the result
    assert torch.equal(model.weight, torch.full((4, 4), 7.0)) and torch.equal(model.bias, torch.full((4,), 7.0))
    assert model.weight.requires_grad and model.weight.grad_fn is None  # still a trainable leaf
    assert restored["model"]["weight"].data_ptr() == model.weight.data_ptr()  # the live tensor, not a copy


def test_restoring_into_tensors_and_containers_of_them_copies_each_in_place(tmp_path):
    storage = local_store(tmp_path)
    with checkpointer(storage) as ckpt:
        ckpt.save(5, {"ema": torch.full((3,), 7.0), "best_loss": 0.1,
                      "buffers": [torch.ones(2), (torch.full((2, 2), 3.0), 4)],
                      "nested": {"a": {"b": torch.arange(4.0)}, "note": "x"},
                      "param": torch.full((2,), 9.0)}, wait=True)
    ema, first, second, deep = torch.zeros(3), torch.zeros(2), torch.zeros(2, 2), torch.zeros(4)
    param = torch.nn.Parameter(torch.zeros(2))  # a leaf that requires grad: copied under no_grad
    into = {"ema": ema, "best_loss": float("inf"), "buffers": [first, (second, 0)],
            "nested": {"a": {"b": deep}, "note": "y"}, "param": param}
    with checkpointer(storage) as ckpt, warnings.catch_warnings():
        warnings.simplefilter("error", CheckpointWarning)
        restored = ckpt.restore(into=into)
    assert torch.equal(ema, torch.full((3,), 7.0)) and restored["ema"] is ema
    assert torch.equal(first, torch.ones(2)) and torch.equal(second, torch.full((2, 2), 3.0))
    assert torch.equal(deep, torch.arange(4.0)) and torch.equal(param.detach(), torch.full((2,), 9.0))
    assert restored["best_loss"] == 0.1 and into["best_loss"] == float("inf")
    assert restored["buffers"][1][1] == 4 and restored["nested"]["note"] == "x"


def test_a_tensor_of_another_shape_in_into_raises_naming_the_key_path_and_checkpoint_before_loading(tmp_path):
    storage = local_store(tmp_path)
    with checkpointer(storage) as ckpt:
        ckpt.save(1, {"ema": torch.full((3,), 7.0), "stats": {"mean": torch.ones(2, 2)}}, wait=True)
    ema, mean = torch.zeros(3), torch.zeros(2, 3)
    with checkpointer(storage) as ckpt:
        with pytest.raises(CheckpointError) as refused:
            ckpt.restore(into={"ema": ema, "stats": {"mean": mean}})
        uri = ckpt.uri
    said = str(refused.value)
    assert "'stats.mean' saved (2, 2), live (2, 3)" in said and uri in said and "Nothing was loaded" in said, said
    assert torch.equal(ema, torch.zeros(3))  # the key that matched was not loaded either


def test_a_state_dict_key_missing_from_the_checkpoint_raises_and_strict_false_loads_the_rest(tmp_path):
    storage = local_store(tmp_path)
    with checkpointer(storage) as ckpt:
        ckpt.save(1, {"model": {"weight": torch.full((2,), 5.0)}}, wait=True)
    weight, extra = torch.zeros(2), torch.zeros(1)
    with checkpointer(storage) as ckpt, pytest.raises(CheckpointError, match=r"'model\.extra' missing"):
        ckpt.restore(into={"model": {"weight": weight, "extra": extra}})
    assert torch.equal(weight, torch.zeros(2))
    with checkpointer(storage) as ckpt, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ckpt.restore(into={"model": {"weight": weight, "extra": extra}}, strict=False)
    texts = checkpoint_warnings(caught)
    assert len(texts) == 1 and "'model.extra' missing" in texts[0] and "strict=False" in texts[0], texts
    assert torch.equal(weight, torch.full((2,), 5.0)) and torch.equal(extra, torch.zeros(1))


# -- 2. all or nothing: a model that changed -----------------------------------------------------------------------


def test_a_model_whose_head_changed_size_raises_before_anything_is_loaded(tmp_path):
    storage = local_store(tmp_path)
    with checkpointer(storage) as ckpt:
        ckpt.save(1, {"model": linear(7.0), "head": linear(1.0, rows=2)}, wait=True)
    model, head = linear(0.0), linear(0.0, rows=3)
    with checkpointer(storage) as ckpt:
        with pytest.raises(CheckpointError) as refused:
            ckpt.restore(into={"model": model, "head": head})
        assert ckpt.due(1)  # nothing restored
        uri = ckpt.uri
    said = str(refused.value)
    assert "'head'" in said and uri in said and "'weight' saved (2, 4), live (3, 4)" in said, said
    assert "'bias' saved (2,), live (3,)" in said and "Nothing was loaded" in said and "new checkpoint base" in said
    assert "size mismatch" not in said  # not torch's own error
    assert torch.equal(model.weight, torch.zeros(4, 4))  # the model before it in into= is not loaded


def test_a_model_that_gained_or_lost_a_parameter_raises_naming_it(tmp_path):
    storage = local_store(tmp_path)
    with checkpointer(storage) as ckpt:
        ckpt.save(1, {"model": torch.nn.Linear(4, 4, bias=False)}, wait=True)
    with checkpointer(storage) as ckpt, pytest.raises(CheckpointError, match=r"'bias' missing from the checkpoint"):
        ckpt.restore(into={"model": torch.nn.Linear(4, 4)})
    with checkpointer(storage) as ckpt:
        ckpt.save(2, {"model": torch.nn.Sequential(torch.nn.Linear(4, 4, bias=False))}, wait=True)
    with checkpointer(storage) as ckpt, pytest.raises(CheckpointError, match=r"'weight' missing from the checkpoint; "
                                                                              r"'0\.weight' saved, not in the model"):
        ckpt.restore(into={"model": torch.nn.Linear(4, 4, bias=False)})


def test_a_module_that_converts_an_older_version_of_its_state_still_loads_it(tmp_path):
    """The keys check before loading leaves a submodule whose saved version is not the live one to its own
    ``_load_from_state_dict``: BatchNorm of version 1 had no ``num_batches_tracked``, and version 2 adds it."""
    storage = local_store(tmp_path)
    old = torch.nn.BatchNorm1d(3)
    with torch.no_grad():
        old.running_mean.fill_(2.0)
    state = old.state_dict()
    del state["num_batches_tracked"]
    state._metadata[""]["version"] = 1
    with checkpointer(storage) as ckpt:
        ckpt.save(1, {"bn": state}, wait=True)
    bn = torch.nn.BatchNorm1d(3)
    with checkpointer(storage) as ckpt:
        assert ckpt.restore(into={"bn": bn}).step == 1
    assert torch.equal(bn.running_mean, torch.full((3,), 2.0)) and int(bn.num_batches_tracked) == 0


def test_strict_false_loads_the_tensors_that_match_and_warns_naming_the_others(tmp_path):
    storage = local_store(tmp_path)
    with checkpointer(storage) as ckpt:
        ckpt.save(1, {"model": torch.nn.Sequential(linear(7.0), linear(1.0, rows=2))}, wait=True)
    model = torch.nn.Sequential(linear(0.0), linear(0.0, rows=3))
    with checkpointer(storage) as ckpt, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        restored = ckpt.restore(into={"model": model}, strict=False)
    texts = checkpoint_warnings(caught)
    assert len(texts) == 1 and "'1.weight' saved (2, 4), live (3, 4)" in texts[0], texts
    assert restored.step == 1
    assert torch.equal(model[0].weight, torch.full((4, 4), 7.0))  # what matches is loaded
    assert torch.equal(model[1].weight, torch.zeros(3, 4))


def test_an_optimizer_of_another_model_raises_before_the_model_is_loaded(tmp_path):
    storage = local_store(tmp_path)
    saved = linear(7.0)
    with checkpointer(storage) as ckpt:
        ckpt.save(1, {"model": saved, "optim": torch.optim.SGD(saved.parameters(), lr=0.1)}, wait=True)
    model = linear(0.0)
    optim = torch.optim.SGD([model.weight], lr=0.1)  # one parameter, not two
    with checkpointer(storage) as ckpt, pytest.raises(CheckpointError, match=r"'optim' does not match.*sizes \[2\] "
                                                                              r"saved, \[1\] live"):
        ckpt.restore(into={"model": model, "optim": optim})
    assert torch.equal(model.weight, torch.zeros(4, 4))


class Refuses:
    def state_dict(self):
        return {"n": 1}

    def load_state_dict(self, state):
        raise ValueError("this version reads no such state")


def test_an_error_of_load_state_dict_itself_names_the_key_and_the_checkpoint(tmp_path):
    storage = local_store(tmp_path)
    with checkpointer(storage) as ckpt:
        ckpt.save(1, {"sampler": Refuses()}, wait=True)
    with checkpointer(storage) as ckpt, pytest.raises(CheckpointError) as refused:
        ckpt.restore(into={"sampler": Refuses()})
    said = str(refused.value)
    assert "'sampler'" in said and str(tmp_path / "run") in said and "this version reads no such state" in said, said
    assert isinstance(refused.value.__cause__, ValueError)


# -- 3. a checkpoint directory is not a base; restore(step=) ------------------------------------------------------


def test_a_checkpoint_directory_given_as_the_base_is_refused_naming_its_parent(tmp_path):
    base = str(tmp_path / "run")
    with Checkpointer(base, env={}, handle_sigterm=False, every_steps=1) as ckpt:
        ckpt.save(35, {"x": 1}, wait=True)
        committed = ckpt.last_committed
    before = sorted(p for p in (tmp_path / "run").rglob("*"))
    with pytest.raises(CheckpointError) as refused:
        Checkpointer(committed, env={}, handle_sigterm=False)
    said = str(refused.value)
    assert said.startswith(f"{committed} is a checkpoint, not a checkpoint base"), said
    assert f"Checkpointer({base!r})" in said and "restore(step=35)" in said and "BROKER_RESUME_FROM" in said
    assert sorted(p for p in (tmp_path / "run").rglob("*")) == before  # nothing nested inside it


def test_restore_step_restores_that_step_not_the_newest(tmp_path):
    storage = local_store(tmp_path)
    with checkpointer(storage) as ckpt:
        for step in (1, 2, 3):
            ckpt.save(step, {"w": torch.full((2,), float(step))}, wait=True)
    weight = torch.zeros(2)
    with checkpointer(storage) as ckpt:
        restored = ckpt.restore(into={"w": weight}, step=2)
        assert restored.step == 2 and not ckpt.due(2)
    assert torch.equal(weight, torch.full((2,), 2.0))
    with checkpointer(storage) as ckpt:  # a numpy integer or 0-d tensor step is an int here too
        assert ckpt.restore(step=torch.tensor(1)).step == 1


def test_restore_step_that_is_not_there_raises_naming_the_steps_held(tmp_path):
    storage = local_store(tmp_path)
    with checkpointer(storage) as ckpt:
        for step in (10, 20):
            ckpt.save(step, {"x": step}, wait=True)
    with checkpointer(storage) as ckpt, pytest.raises(CheckpointError) as refused:
        ckpt.restore("fresh", step=15)
    said = str(refused.value)
    assert "restore(step=15)" in said and "holds step(s) 10, 20" in said and "nothing was restored" in said, said


def test_restore_step_whose_checkpoint_is_damaged_raises_rather_than_restore_another(tmp_path):
    storage = local_store(tmp_path)
    with checkpointer(storage) as ckpt:
        for step in (1, 2):
            ckpt.save(step, {"w": torch.full((64,), float(step))}, wait=True)
    entry = next(e for e in layout.scan(storage.list()) if e.id.step == 2)
    path = layout.path(entry.id, next(f for f in entry.files if f.endswith(".safetensors")))
    data = bytearray(storage.read(path))
    data[-1] ^= 0xFF
    storage.write(path, bytes(data))
    weight = torch.zeros(64)
    with checkpointer(storage) as ckpt, warnings.catch_warnings(record=True), \
            pytest.raises(CheckpointError, match=r"restore\(step=2\): the checkpoint\(s\) of that step did not verify"):
        warnings.simplefilter("always")
        ckpt.restore(into={"w": weight}, step=2)
    assert torch.equal(weight, torch.zeros(64))  # not step 1's weights either


def test_an_explicit_step_wins_over_broker_resume_from(tmp_path):
    base = str(tmp_path / "run")
    with Checkpointer(base, env={}, handle_sigterm=False, every_steps=1) as ckpt:
        ckpt.save(1, {"x": 1}, wait=True)
        first = ckpt.last_committed
        ckpt.save(2, {"x": 2}, wait=True)
    with Checkpointer(base, env={"BROKER_RESUME_FROM": first}, handle_sigterm=False) as ckpt:
        assert ckpt.restore().step == 1  # as before, without step=
        assert ckpt.restore(step=2).step == 2


# -- 4. defaultdict, Counter, other mappings ------------------------------------------------------------------------


def test_counter_and_defaultdict_of_a_builtin_come_back_as_they_were(tmp_path):
    storage = local_store(tmp_path)
    state = {"hist": collections.defaultdict(list, {"loss": [0.5]}),
             "seen": collections.Counter({"a": 2, 3: 1}),
             "nested": {"by_epoch": collections.defaultdict(int, {1: 4}), "none": collections.defaultdict(None)}}
    with checkpointer(storage) as ckpt, warnings.catch_warnings():
        warnings.simplefilter("error", CheckpointWarning)
        ckpt.save(1, state, wait=True)
    with checkpointer(storage) as ckpt:
        restored = ckpt.restore()
    hist = restored["hist"]
    assert type(hist) is collections.defaultdict and hist.default_factory is list and hist == {"loss": [0.5]}
    hist["acc"].append(0.9)  # a KeyError before
    assert type(restored["seen"]) is collections.Counter and restored["seen"] == {"a": 2, 3: 1}
    assert restored["seen"]["missing"] == 0
    by_epoch = restored["nested"]["by_epoch"]
    assert type(by_epoch) is collections.defaultdict and by_epoch.default_factory is int and by_epoch[1] == 4
    assert type(restored["nested"]["none"]) is collections.defaultdict


class Config(dict):
    pass


def test_other_mappings_are_saved_as_dicts_with_a_warning_naming_where(tmp_path):
    storage = local_store(tmp_path)
    state = {"hist": collections.defaultdict(lambda: 0, {"a": 1}), "extra": {"cfg": Config(lr=0.1)}}
    with checkpointer(storage) as ckpt, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ckpt.save(1, state, wait=True)
        ckpt.save(2, state, wait=True)  # said once
    texts = checkpoint_warnings(caught)
    assert len(texts) == 1 and "hist (a defaultdict(" in texts[0] and "extra.cfg (a Config)" in texts[0], texts
    assert "plain dict" in texts[0]
    with checkpointer(storage) as ckpt:
        restored = ckpt.restore()
    assert type(restored["hist"]) is dict and restored["hist"] == {"a": 1}
    assert type(restored["extra"]["cfg"]) is dict and restored["extra"]["cfg"] == {"lr": 0.1}


# -- 5. keep_last=None, a tensor step, saves replaced in the queue -------------------------------------------------


def test_keep_last_none_keeps_every_checkpoint():
    storage = memory_store()
    with checkpointer(storage, keep_last=None) as ckpt:
        for step in range(1, 7):
            ckpt.save(step, {"x": step}, wait=True)
    assert committed_steps(storage) == [1, 2, 3, 4, 5, 6]


def test_a_zero_d_tensor_step_is_recorded_as_an_int_and_a_longer_tensor_is_refused():
    storage = memory_store()
    with checkpointer(storage) as ckpt:
        ckpt.save(torch.tensor(4), {"x": 1}, wait=True)
        with pytest.raises(TypeError, match=r"step must be an integer \(or a 0-d integer tensor\), got a tensor of "
                                            r"shape \(1,\)"):
            ckpt.save(torch.tensor([5]), {"x": 1})
        with pytest.raises(TypeError, match="step must be an integer"):
            ckpt.save(torch.tensor(5.0), {"x": 1})
    with checkpointer(storage) as ckpt:
        restored = ckpt.restore()
    assert type(restored.step) is int and restored.step == 4 and restored.manifest.step == 4
    assert committed_steps(storage) == [4]


def test_a_save_replaced_while_waiting_for_the_upload_is_logged_naming_its_step(caplog):
    storage = GatedStorage(memory_store())
    with checkpointer(storage, keep_last=None) as ckpt:
        caplog.set_level(logging.INFO, logger="checkpoint")
        ckpt.save(1, {"x": 1})
        assert storage.writes_started.acquire(timeout=10)  # step 1 is uploading (held)
        ckpt.save(2, {"x": 2})
        ckpt.save(3, {"x": 3})  # replaces 2, never written
        storage.open()
    dropped = [r for r in caplog.records if r.levelno == logging.INFO and "dropped" in r.getMessage()]
    assert len(dropped) == 1 and dropped[0].getMessage().startswith("step 2:"), caplog.records
    assert "newer step 3" in dropped[0].getMessage() and "save(wait=True)" in dropped[0].getMessage()
    assert committed_steps(storage) == [1, 3]
