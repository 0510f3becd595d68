"""Resumes that went wrong quietly: a save at the step that was restored (fine-tuning that counts from 0
again) was skipped without a word, and a ``BROKER_RESUME_FROM`` naming a checkpoint that is not there started
training from scratch on a base holding the trained steps."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from fakes import checkpointer, committed_steps, memory_store

from checkpoint import Checkpointer, CheckpointWarning
from checkpoint.storage import open_storage


def test_saving_the_step_that_was_restored_writes_it_and_restore_then_takes_the_newer():
    """Fine-tuning: restore step 20 (pretrained), train counting from 0, save(20). Before, nothing was written
    and nothing said: the fine-tuned weights were lost."""
    storage = memory_store()
    model = torch.nn.Linear(4, 1)
    with checkpointer(storage, every_steps=1000) as ckpt:
        ckpt.save(20, {"model": model}, wait=True)
    with checkpointer(storage, every_steps=1000) as ckpt:
        ckpt.restore(into={"model": model})
        with torch.no_grad():
            model.weight.add_(1.0)  # "training"
        ckpt.save(20, {"model": model}, wait=True)
    assert committed_steps(storage) == [20, 20]  # two checkpoints of one step: the creation time orders them
    with checkpointer(storage) as ckpt:
        assert torch.equal(ckpt.restore()["model"]["weight"], model.weight.detach())


def test_due_at_the_restored_step_is_false_until_another_step_comes_then_follows_the_interval():
    """A loop that asks due() for the step it resumed at (nothing trained since) does not save it again; a
    fine-tune that counts from 0 and reaches the restored step with other weights does."""
    storage = memory_store()
    with checkpointer(storage, every_steps=20) as ckpt:
        ckpt.save(20, {"w": np.zeros(2)}, wait=True)
    with checkpointer(storage, every_steps=20) as ckpt:
        ckpt.restore()
        assert not ckpt.due(20)  # right after the restore: nothing could have changed
        assert not any(ckpt.due(step) for step in range(1, 20))
        assert ckpt.due(20)


def test_saving_the_step_saved_last_again_still_does_nothing():
    storage = memory_store()
    with checkpointer(storage) as ckpt:
        ckpt.save(5, {"w": np.zeros(2)}, wait=True)
        ckpt.save(5, {"w": np.ones(2)}, wait=True)
    assert committed_steps(storage) == [5]


def _saved(uri: str, *steps: int) -> None:
    with Checkpointer(uri, env={}, handle_sigterm=False) as ckpt:
        for step in steps:
            ckpt.save(step, {"w": np.full(2, step)}, wait=True)


@pytest.mark.parametrize("named", ["missing", "uncommitted"])
def test_a_resume_from_a_checkpoint_that_is_not_there_says_so_and_restores_the_newest_of_its_base(named, tmp_path):
    """Before: "skipping checkpoint …: not committed (no commit marker)", then nothing older beside it, so the
    run started from scratch on a base holding steps 10, 15 and 20."""
    uri = str(tmp_path / "run")
    _saved(uri, 10, 15, 20)
    storage = open_storage(uri)
    if named == "missing":
        resume = f"{uri}/step-000000000002-1796416711111"
    else:  # retention deletes a checkpoint's commit marker first: one cut short there is no longer committed
        with Checkpointer(uri, env={}, handle_sigterm=False) as ckpt:
            ckpt.save(2, {"w": np.zeros(2)}, wait=True)
        two = next(p for p in storage.list() if p.startswith("step-000000000002-") and p.endswith("/COMMITTED"))
        storage.delete([two])
        resume = f"{uri}/{two.split('/')[0]}"
    with Checkpointer(uri, env={"BROKER_RESUME_FROM": resume}, handle_sigterm=False) as ckpt, \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        restored = ckpt.restore()
    texts = [str(w.message) for w in caught if issubclass(w.category, CheckpointWarning)]
    assert restored is not None and restored.step == 20, texts
    said = "does not exist" if named == "missing" else "is not committed"
    assert len(texts) == 1 and resume in texts[0] and said in texts[0] and "10, 15, 20" in texts[0], texts


def test_a_resume_from_a_checkpoint_that_exists_still_rolls_back_to_it(tmp_path):
    uri = str(tmp_path / "run")
    _saved(uri, 10, 15, 20)
    fifteen = next(p.split("/")[0] for p in open_storage(uri).list() if p.startswith("step-000000000015-"))
    with Checkpointer(uri, env={"BROKER_RESUME_FROM": f"{uri}/{fifteen}"}, handle_sigterm=False) as ckpt:
        assert ckpt.restore().step == 15


def test_a_resume_from_a_checkpoint_on_an_empty_base_says_the_run_starts_from_the_beginning(tmp_path):
    """A store that lost its data (a bucket emptied, re-created): the warning said "restoring the newest committed
    checkpoint there instead" of a base holding none, and the run then trained from step 0 beside it."""
    uri = str(tmp_path / "run")
    resume = f"{uri}/step-000000000100-1796416711111"
    with Checkpointer(uri, env={"BROKER_RESUME_FROM": resume}, handle_sigterm=False) as ckpt, \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        restored = ckpt.restore()
    texts = [str(w.message) for w in caught if issubclass(w.category, CheckpointWarning)]
    assert restored is None
    assert len(texts) == 1 and resume in texts[0] and "it holds no committed checkpoint" in texts[0], texts
    assert "restoring the newest" not in texts[0] and "starts from the beginning" in texts[0], texts
