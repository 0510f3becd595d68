"""Two attempts of one job writing under the same base: the old one (a zombie, still running after the
broker started the next) must neither commit over nor delete what the new one writes."""

from __future__ import annotations

import pytest
import torch

from checkpoint import Checkpointer, CheckpointError, commit, layout
from checkpoint.errors import SupersededError
from checkpoint.retention import RetentionPolicy
from checkpoint.storage import open_storage


def attempt(uri: str, n: int, **kw) -> Checkpointer:
    env = {"BROKER_JOB_ID": "job-7", "BROKER_ATTEMPT": str(n), "BROKER_CHECKPOINT_URI": uri}
    return Checkpointer(uri, env=env, handle_sigterm=False, every_steps=1, keep_last=2, **kw)


def state(step: int) -> dict:
    return {"w": torch.full((16,), float(step)), "step": step}


@pytest.mark.parametrize("kind", ["file", "s3", "gcs"])
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


def test_a_zombie_deletes_no_damaged_checkpoint_either(tmp_path):
    """Retention deletes the checkpoints restore found damaged, but not from a superseded attempt."""
    uri = str(tmp_path / "run")
    with attempt(uri, 1) as old:
        for step in (100, 110):
            old.save(step, state(step), wait=True)
    storage = open_storage(uri)
    damaged = layout.scan(storage.list())[-1]
    storage.delete([layout.path(damaged.id, "00-w.safetensors")])
    attempt(uri, 2).restore()  # claims the base
    before = storage.list()
    with pytest.raises(SupersededError):
        commit.apply_retention(storage, RetentionPolicy(1), fence=("job-7", 1), damaged=frozenset({damaged.id}))
    assert storage.list() == before
    deleted = commit.apply_retention(storage, RetentionPolicy(1), fence=("job-7", 2), damaged=frozenset({damaged.id}))
    assert [e.id for e in deleted] == [damaged.id]  # the attempt that owns the base does delete it


def test_the_new_attempt_claims_the_base_as_it_restores_not_at_its_first_save(tmp_path):
    uri = str(tmp_path / "run")
    old = attempt(uri, 1)
    old.save(100, state(100), wait=True)
    new = attempt(uri, 2)
    assert new.restore().step == 100
    old.save(110, state(110))  # before the new attempt's first save (minutes away at every_seconds=300)
    with pytest.raises(CheckpointError, match="superseded"):
        old.wait()
    old.close()
    new.save(101, state(101), wait=True)
    new.save(102, state(102), wait=True)  # keep_last=2: 110 counted as newest would delete 101 now
    assert [e.id.step for e in layout.scan(open_storage(uri).list()) if e.committed] == [101, 102]
    new.close()


def test_a_checkpointer_opened_on_another_base_to_read_weights_claims_nothing_there(tmp_path):
    weights, run = str(tmp_path / "weights"), str(tmp_path / "run")
    with Checkpointer(weights, env={}, handle_sigterm=False) as c:
        c.save(1, state(1), wait=True)
    env = {"BROKER_JOB_ID": "job-7", "BROKER_ATTEMPT": "2", "BROKER_CHECKPOINT_URI": run}
    with Checkpointer(weights, env=env, handle_sigterm=False) as reader:
        assert reader.restore().step == 1
    assert not [p for p in open_storage(weights).list() if p.startswith("ATTEMPT-")]


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


@pytest.mark.parametrize("at_listing", [1, 2], ids=["zombie commits after the first listing of the restore",
                                                   "zombie commits after the second"])
def test_a_zombie_commit_landing_while_the_new_attempt_restores_never_costs_it_its_own_checkpoints(
        tmp_path, at_listing):
    """The restore listed the base, then claimed it: a zombie's commit landing in between was neither seen (not
    restored, not set aside as abandoned) nor fenced, and the new attempt's retention counted it as newest and
    deleted the new attempt's own checkpoints. Claimed first, a commit either lands before the claim (and is seen)
    or is fenced."""
    uri = str(tmp_path / "run")
    old = attempt(uri, 1)
    old.save(100, state(100), wait=True)
    new = attempt(uri, 2)
    real, calls = new._storage.list, []

    def listing_then_the_zombie_commits():
        paths = real()
        calls.append(1)
        if len(calls) == at_listing:
            try:
                old.save(110, state(110), wait=True)
            except CheckpointError:
                pass  # fenced
        return paths

    new._storage.list = listing_then_the_zombie_commits
    restored = new.restore().step
    new._storage.list = real
    mine = [restored + 1, restored + 2]
    for step in mine:
        new.save(step, state(step), wait=True)
    committed = [e.id.step for e in layout.scan(open_storage(uri).list()) if e.committed]
    assert set(mine) <= set(committed), committed  # keep_last=2: both of the new attempt's saves stay
    new.close()
    try:
        old.close()
    except CheckpointError:
        pass
