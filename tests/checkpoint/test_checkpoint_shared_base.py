"""Two jobs writing under one base URI (a task with an explicit ``broker.checkpoint`` submitted twice: two seeds,
or a re-submit after a tweak while the first still runs). Attempt fencing is per job, so it does not keep them
apart; what does: a writer that finds another job's claim on its base counts and deletes only its own job's
checkpoints (by their manifests), and leaves unattributable debris alone."""

from __future__ import annotations

import pytest
import torch

from checkpoint import Checkpointer, layout
from checkpoint.storage import open_storage


def run(uri: str, job: str, attempt: int = 1, resume_from: str | None = None, **kw) -> Checkpointer:
    env = {"BROKER_JOB_ID": job, "BROKER_ATTEMPT": str(attempt), "BROKER_CHECKPOINT_URI": uri}
    if resume_from is not None:  # the checkpoint the broker names for the attempt
        env["BROKER_RESUME_FROM"] = resume_from
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


def test_a_job_that_restored_another_jobs_checkpoint_deletes_none_of_that_jobs(tmp_path):
    """A listing cannot tell an ended job from one between attempts: job-a, preempted, waits for capacity and
    commits nothing while job-b (two submits raced on two brokers) restores job-a's newest and commits on. When
    job-b's retention took job-a for ended and thinned its checkpoints with its own, job-a's attempt 2 found the
    checkpoint the broker named for it gone and restored nothing; its save in flight went as debris. Another
    job's checkpoints, and what cannot be attributed, are left alone."""
    uri = str(tmp_path / "run")
    with run(uri, "job-a") as first:
        first.restore()
        for step in (100, 110):
            first.save(step, state(step), wait=True)
        newest = first.last_committed
    storage = open_storage(uri)
    in_flight = layout.CheckpointId(115, 1)  # job-a's next save: data written, no manifest yet
    storage.write(layout.path(in_flight, "00-w.safetensors"), b"x" * 8)
    second = run(uri, "job-b")
    assert second.restore().step == 110
    for step in (200, 210, 220):
        second.save(step, state(step), wait=True)
    second.close()
    again = run(uri, "job-b", attempt=2)  # job-b's next attempt restores its own newest and thins on
    assert again.restore().step == 220
    again.save(230, state(230), wait=True)
    again.close()
    assert committed(uri) == [100, 110, 220, 230]
    assert layout.path(in_flight, "00-w.safetensors") in storage.list()
    with run(uri, "job-a", attempt=2, resume_from=newest) as resumed:
        assert resumed.restore().step == 110


def test_a_job_continuing_an_ended_jobs_base_is_told_what_retention_does_not_that_it_is_wrong(tmp_path, caplog):
    """The broker tells the user of a cancelled job to continue it by submitting its task again with its base; the
    new job's first save then warned "is also claimed by job …: … (give each job a base of its own)", which read as
    the advice just given being wrong."""
    uri = str(tmp_path / "run")
    with run(uri, "job-a") as first:
        first.save(100, state(100), wait=True)
    with run(uri, "job-b") as second, caplog.at_level("WARNING", logger="checkpoint"):
        assert second.restore().step == 100
        second.save(101, state(101), wait=True)
    said = [r.getMessage() for r in caplog.records if "also holds checkpoints of job job-a" in r.getMessage()]
    assert len(said) == 1, caplog.text
    assert "retention deletes only job job-b's own there, and leaves the other's alone" in said[0]
    assert "right for a job that continues an ended one's checkpoints" in said[0]
    assert committed(uri) == [100, 101]
