"""Two jobs writing under one base URI (a task with an explicit ``broker.checkpoint`` submitted twice: two seeds,
or a re-submit after a tweak while the first still runs). Attempt fencing is per job, so it does not keep them
apart; what does: a writer that finds another job's claim on its base counts and deletes only its own job's
checkpoints (by their manifests), and leaves unattributable debris alone."""

from __future__ import annotations

import pytest
import torch

from checkpoint import Checkpointer, layout
from checkpoint.storage import open_storage


def run(uri: str, job: str, attempt: int = 1, **kw) -> Checkpointer:
    env = {"BROKER_JOB_ID": job, "BROKER_ATTEMPT": str(attempt), "BROKER_CHECKPOINT_URI": uri}
    return Checkpointer(uri, env=env, handle_sigterm=False, every_steps=1, keep_last=2, **kw)


def state(step: int) -> dict:
    return {"w": torch.full((8,), float(step)), "step": step}


def committed(uri: str) -> list[int]:
    return sorted(e.id.step for e in layout.scan(open_storage(uri).list()) if e.committed)


@pytest.mark.parametrize("kind", ["file", "s3"])
def test_two_jobs_on_one_base_keep_each_others_checkpoints(kind, make_uri):
    uri = make_uri(kind)
    first = run(uri, "job-a")
    assert first.restore() is None
    for step in (100, 110):
        first.save(step, state(step), wait=True)
    second = run(uri, "job-b")
    second.restore()  # claims the base for job-b
    for step in (1, 2, 3):  # job-b's retention: job-a's 100 and 110 are not its own, not counted, not deleted
        second.save(step, state(step), wait=True)
    assert committed(uri) == [2, 3, 100, 110]
    first.save(120, state(120), wait=True)  # job-a's retention: 2 and 3 are job-b's
    assert committed(uri) == [2, 3, 110, 120]
    first.close()
    second.close()


def test_a_trailing_slash_names_the_same_base(tmp_path):
    uri = str(tmp_path / "run")
    with run(uri, "job-a") as first:
        first.restore()
        first.save(100, state(100), wait=True)
        with run(uri + "/", "job-b") as second:
            second.restore()
            for step in (1, 2, 3):
                second.save(step, state(step), wait=True)
        assert committed(uri) == [2, 3, 100]


def test_a_base_inside_another_is_left_alone_by_the_outer_jobs_retention_and_restore(tmp_path):
    """The library reads one level of checkpoint directories: a base nested in another is not seen by it."""
    outer, inner = str(tmp_path / "run"), str(tmp_path / "run" / "seed2")
    with run(inner, "job-b") as second:
        for step in (500, 510):
            second.save(step, state(step), wait=True)
    with run(outer, "job-a") as first:
        assert first.restore() is None  # not job-b's step 510
        for step in (1, 2, 3):
            first.save(step, state(step), wait=True)
    assert committed(outer) == [2, 3] and committed(inner) == [500, 510]


def test_an_uncommitted_directory_on_a_shared_base_is_not_taken_for_debris(tmp_path):
    """Job b's save in flight (its data written, no manifest yet) is at a lower step than job a's newest commit:
    alone on its base, job a would delete it as the debris of a save that died."""
    uri = str(tmp_path / "run")
    with run(uri, "job-b") as second:
        second.restore()
    storage = open_storage(uri)
    in_flight = layout.CheckpointId(5, 1)
    storage.write(layout.path(in_flight, "00-w.safetensors"), b"x" * 8)
    with run(uri, "job-a") as first:
        first.save(100, state(100), wait=True)
    assert layout.path(in_flight, "00-w.safetensors") in storage.list()


def test_a_job_restoring_another_jobs_checkpoint_says_so(tmp_path, caplog):
    uri = str(tmp_path / "run")
    with run(uri, "job-a") as first:
        first.save(100, state(100), wait=True)
    with run(uri, "job-b") as second, caplog.at_level("WARNING", logger="checkpoint"):
        assert second.restore().step == 100  # a re-submit continuing a finished job's run is not refused
    assert "which job job-a committed, not this job (job-b)" in caplog.text
