"""Two attempts of one job writing under the same base: the old one (a zombie, still running after the
broker started the next) must neither commit over nor delete what the new one writes."""

from __future__ import annotations

import pytest
import torch

from checkpoint import Checkpointer, CheckpointError, layout
from checkpoint.storage import open_storage


def attempt(uri: str, n: int, **kw) -> Checkpointer:
    env = {"BROKER_JOB_ID": "job-7", "BROKER_ATTEMPT": str(n)}
    return Checkpointer(uri, env=env, handle_sigterm=False, every_steps=1, keep_last=2, **kw)


def state(step: int) -> dict:
    return {"w": torch.full((16,), float(step)), "step": step}


@pytest.mark.parametrize("kind", ["file", "s3"])
def test_a_zombie_attempt_ahead_in_steps_neither_commits_nor_deletes_the_new_attempts_checkpoints(kind, make_uri):
    uri = make_uri(kind)
    old = attempt(uri, 1)
    for step in (100, 110):
        old.save(step, state(step), wait=True)
    new = attempt(uri, 2)
    assert new.restore().step == 110
    new.save(111, state(111), wait=True)
    ours = new.last_committed

    old.save(120, state(120))  # the zombie goes on: it must stop, saying why
    with pytest.raises(CheckpointError, match=r"attempt 2 .*attempt 1"):
        old.wait()
    old.save(130, state(130))
    with pytest.raises(CheckpointError):
        old.close()

    storage = open_storage(uri)
    committed = [e.id.step for e in layout.scan(storage.list()) if e.committed]
    assert 111 in committed and not {120, 130} & set(committed), committed
    new.save(112, state(112), wait=True)  # the new attempt is not fenced by its own claim
    with attempt(uri, 3) as reader:
        assert reader.restore().uri == new.last_committed != ours
    new.close()


def test_without_an_attempt_number_nothing_is_fenced(tmp_path):
    uri = str(tmp_path / "run")
    with Checkpointer(uri, env={}, handle_sigterm=False, every_steps=1) as a, \
            Checkpointer(uri, env={}, handle_sigterm=False, every_steps=1) as b:
        a.save(1, state(1), wait=True)
        b.save(2, state(2), wait=True)
        a.save(3, state(3), wait=True)
        assert a.restore().step == 3


@pytest.mark.parametrize("paths, attempt, newer", [
    ([], 1, None),
    (["ATTEMPT-job-7-000000002"], 1, 2),
    (["ATTEMPT-job-7-000000002"], 2, None),
    (["ATTEMPT-job-7-000000001", "ATTEMPT-job-7-000000003"], 2, 3),
    (["ATTEMPT-job-8-000000009", "ATTEMPT-job-70-000000009"], 1, None),
    (["step-000000000001-1733011200123/ATTEMPT-job-7-000000009"], 1, None),
], ids=["nothing claimed → not superseded", "attempt 2 claimed → attempt 1 is superseded",
        "its own claim does not supersede an attempt", "the newest claim counts",
        "another job's claims do not count", "a claim is only one at the top of the base"])
def test_superseded_by(paths, attempt, newer):
    assert layout.superseded_by(paths, "job-7", attempt) == newer
    assert layout.scan(paths + [layout.fence_name("job-7", 5)]) == layout.scan(paths)
