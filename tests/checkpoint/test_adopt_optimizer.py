"""An optimizer's saved state that does not fit: restore(strict=False) after a layer changed size loaded the old
shapes' state and the first opt.step() failed inside torch; AdamW's state in an SGD(momentum) restored silently and
failed with KeyError 'momentum'. Now checked before anything is loaded, as the model is."""

from __future__ import annotations

import warnings

import pytest
import torch
from fakes import checkpointer, memory_store

from checkpoint import CheckpointError, CheckpointWarning


def _model(hidden: int):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 2))


def _train(model, opt):
    opt.zero_grad()
    model(torch.randn(4, 8)).sum().backward()
    opt.step()


def _saved(hidden: int, make_opt):
    storage = memory_store()
    model = _model(hidden)
    opt = make_opt(model)
    _train(model, opt)
    with checkpointer(storage) as ckpt:
        ckpt.save(10, {"model": model, "optim": opt}, wait=True)
    return storage


def test_after_a_layer_changed_size_strict_false_leaves_the_optimizer_out_and_training_goes_on():
    storage = _saved(32, lambda m: torch.optim.AdamW(m.parameters()))
    model = _model(64)
    opt = torch.optim.AdamW(model.parameters())
    with checkpointer(storage) as ckpt, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ckpt.restore(into={"model": model, "optim": opt}, strict=False)
    said = [str(w.message) for w in caught if issubclass(w.category, CheckpointWarning)]
    assert any("'optim' does not match what was saved" in m and "it was not loaded" in m
               and "saved (32, 8), the parameter is (64, 8)" in m for m in said), said
    assert opt.state_dict()["state"] == {}
    _train(model, opt)  # before: "The size of tensor a (64) must match the size of tensor b (32)"


def test_after_a_layer_changed_size_strict_refuses_naming_the_optimizer():
    storage = _saved(32, lambda m: torch.optim.AdamW(m.parameters()))
    model = _model(32)
    other = _model(64)  # the optimizer of a resized model beside the old model: only the optimizer differs
    opt = torch.optim.AdamW(other.parameters())
    with checkpointer(storage) as ckpt, pytest.raises(CheckpointError, match=r"'optim' does not match what was saved: "
                                                                              r"the state 'exp_avg' of parameter 0"):
        ckpt.restore(into={"model": model, "optim": opt})
    assert opt.state_dict()["state"] == {}


def test_another_optimizer_class_is_refused_or_left_out_not_loaded():
    storage = _saved(32, lambda m: torch.optim.AdamW(m.parameters()))
    model = _model(32)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with checkpointer(storage) as ckpt, pytest.raises(
            CheckpointError, match=r"'optim' does not match what was saved: saved by another optimizer than this SGD"
                                   r".*not .*momentum"):
        ckpt.restore(into={"model": model, "optim": opt})
    with checkpointer(storage) as ckpt, warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        ckpt.restore(into={"model": model, "optim": opt}, strict=False)
    _train(model, opt)  # before: KeyError: 'momentum' in torch/optim/sgd.py


def test_the_same_optimizer_still_restores_its_state():
    storage = _saved(32, lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9))
    model = _model(32)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with checkpointer(storage) as ckpt:
        ckpt.restore(into={"model": model, "optim": opt})
    assert len(opt.state_dict()["state"]) == 4
    _train(model, opt)
