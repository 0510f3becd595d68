"""A run that saves steps lower than checkpoints already on its base keeps what it commits.

"Newest" is by step. A run started afresh on a base holding a longer run's checkpoints (run again by hand without
restoring, a script that restores only when asked), or one that restored and then counted its steps from 0 again
(fine-tuning from the restored weights), committed each save and then deleted it at once in that same save's
retention: the higher steps counted as the newest ``keep_last``. ``last_committed`` (and the commit reported to the
broker) named a checkpoint already gone, and a preemption lost all the run's work.
"""

from __future__ import annotations

import torch

from checkpoint import Checkpointer, layout
from checkpoint.storage import open_storage


def checkpointer(uri: str, **kw) -> Checkpointer:
    return Checkpointer(uri, env={}, handle_sigterm=False, every_steps=1, **kw)


def committed(uri: str) -> list[int]:
    return sorted(e.id.step for e in layout.scan(open_storage(uri).list()) if e.committed)


def save_steps(ckpt: Checkpointer, steps) -> list[str]:
    uris = []
    for step in steps:
        ckpt.save(step, {"w": torch.full((8,), float(step)), "step": step}, wait=True)
        uris.append(ckpt.last_committed)
    return uris


def test_a_run_started_afresh_on_a_base_with_higher_steps_keeps_its_checkpoints(store_uri):
    with checkpointer(store_uri) as earlier:
        save_steps(earlier, [100, 200, 300])
    with checkpointer(store_uri, keep_last=2) as ckpt:  # never restores
        uris = save_steps(ckpt, [10, 20, 30])
    assert committed(store_uri) == [20, 30, 100, 200, 300]  # its newest 2; the earlier run's left alone
    with Checkpointer(store_uri, env={"BROKER_RESUME_FROM": uris[-1]}, handle_sigterm=False) as resumed:
        assert resumed.restore().step == 30  # the checkpoint it said it committed is there to resume from


def test_a_run_that_counts_from_0_again_after_restoring_keeps_its_checkpoints(store_uri):
    with checkpointer(store_uri) as pretraining:
        save_steps(pretraining, [1000, 2000])
    with checkpointer(store_uri, keep_last=1) as ckpt:
        assert ckpt.restore().step == 2000
        last = save_steps(ckpt, [50])[-1]  # fine-tuning from the restored weights, step 50
        assert ckpt.last_committed == last
    assert committed(store_uri) == [50, 1000, 2000]
