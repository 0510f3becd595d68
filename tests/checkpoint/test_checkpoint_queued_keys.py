"""A save waiting behind a running upload is replaced by a newer one only when the newer one holds every top-level
key it holds: ``save(2, {model, ema})`` then ``save(3, {model})`` dropped step 2, and with it the newest EMA, which
was then in no checkpoint (an INFO line said so)."""

from __future__ import annotations

import logging

import torch

from checkpoint import Checkpointer, layout
from fakes import GatedStorage, checkpointer, committed_steps, memory_store


def _hold_first_upload(storage) -> Checkpointer:
    ckpt = checkpointer(storage)
    ckpt.save(1, {"model": torch.ones(3), "ema": torch.ones(3)})
    assert storage.writes_started.acquire(timeout=5)  # step 1 is uploading, held
    return ckpt


def test_a_waiting_save_with_a_key_the_newer_one_lacks_is_written_too(caplog):
    storage = GatedStorage(memory_store())
    ckpt = _hold_first_upload(storage)
    ckpt.save(2, {"model": torch.full((3,), 2.0), "ema": torch.full((3,), 2.0)})
    with caplog.at_level(logging.INFO, logger="checkpoint"):
        ckpt.save(3, {"model": torch.full((3,), 3.0)})
    assert "dropped" not in caplog.text
    storage.open()
    ckpt.close()
    assert committed_steps(storage) == [1, 2, 3]
    restored = Checkpointer(storage=storage, env={}, handle_sigterm=False).restore(step=2)
    assert restored.step == 2 and float(restored["ema"][0]) == 2.0


def test_a_waiting_save_is_dropped_once_newer_ones_hold_each_of_its_keys(caplog):
    storage = GatedStorage(memory_store())
    ckpt = _hold_first_upload(storage)
    ckpt.save(2, {"model": torch.ones(3), "ema": torch.ones(3)})
    ckpt.save(3, {"model": torch.ones(3)})  # kept behind 2: lacks ema
    with caplog.at_level(logging.INFO, logger="checkpoint"):
        ckpt.save(4, {"model": torch.ones(3), "ema": torch.ones(3)})  # holds what 2 and 3 hold
    assert "step 2:" in caplog.text and "step 3:" in caplog.text
    storage.open()
    ckpt.close()
    assert committed_steps(storage) == [1, 4]
    assert [e.id.step for e in layout.scan(storage.list())] == [1, 4]


def test_past_the_most_waiting_snapshots_the_oldest_goes_with_a_warning_naming_its_lost_keys(caplog):
    """Every save with a key of its own (``metrics_<step>``) kept each snapshot in memory while the upload lagged:
    at most ``MAX_WAITING`` wait, and the oldest beyond them is dropped with a WARNING naming what only it held."""
    from checkpoint.background import MAX_WAITING

    storage = GatedStorage(memory_store())
    ckpt = checkpointer(storage, keep_last=None)
    ckpt.save(1, {"model": torch.ones(3)})
    assert storage.writes_started.acquire(timeout=5)  # step 1 is uploading, held
    last = 2 + MAX_WAITING
    with caplog.at_level(logging.INFO, logger="checkpoint"):
        for step in range(2, last + 1):
            ckpt.save(step, {"model": torch.ones(3), f"metrics_{step}": torch.ones(1)})
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "step 2:" in warnings[0].getMessage() \
        and "'metrics_2'" in warnings[0].getMessage(), [r.getMessage() for r in warnings]
    storage.open()
    ckpt.close()
    assert committed_steps(storage) == [1, *range(3, last + 1)], "the newest MAX_WAITING are written, in order"
