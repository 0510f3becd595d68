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


def test_a_job_continuing_an_ended_jobs_run_keeps_its_retention(tmp_path):
    """A job submitted on purpose onto the base of a job that ended (the broker allows it) continues that run:
    the ended job's checkpoints are the run's history, and retention thins them as a single job's. Before, the
    new job took them for another job's and kept every one of them for ever (a chain of such jobs kept
    ``keep_last`` of each)."""
    uri = str(tmp_path / "run")
    with run(uri, "job-a") as first:
        first.restore()
        for step in (100, 110, 120):
            first.save(step, state(step), wait=True)
    assert committed(uri) == [110, 120]
    with run(uri, "job-b") as second:
        assert second.restore().step == 120
        second.save(130, state(130), wait=True)
        assert committed(uri) == [120, 130]
        second.save(140, state(140), wait=True)
        assert committed(uri) == [130, 140]
    with run(uri, "job-b", attempt=2) as again:  # job-b resumed: its own checkpoint, and still alone in the run
        assert again.restore().step == 140
        again.save(150, state(150), wait=True)
        assert committed(uri) == [140, 150]


def test_a_job_that_commits_after_the_continuing_job_began_is_not_taken_for_ended(tmp_path):
    """Two jobs live on one base (two submits racing on two brokers): job-b restored job-a's newest and runs
    ahead of it, yet job-a commits on after job-b's first commit, so its checkpoints stay its own."""
    uri = str(tmp_path / "run")
    first = run(uri, "job-a")
    first.restore()
    for step in (100, 110):
        first.save(step, state(step), wait=True)
    second = run(uri, "job-b")
    assert second.restore().step == 110
    second.save(500, state(500), wait=True)
    first.save(120, state(120), wait=True)
    for step in (510, 520):
        second.save(step, state(step), wait=True)
    assert committed(uri) == [110, 120, 510, 520]
    first.close()
    second.close()


def test_debris_of_a_continued_run_goes_once_the_run_has_restored_past_it(tmp_path):
    """On a base an ended job left, a save cut short (data written, no manifest) is debris as on a base of one
    job: the run deletes it once it has restored a checkpoint above it. Before, a claim of the ended job kept
    every such directory for ever."""
    uri = str(tmp_path / "run")
    with run(uri, "job-a") as first:
        first.restore()
        first.save(100, state(100), wait=True)
    storage = open_storage(uri)
    cut = layout.CheckpointId(105, 1)  # job-a's last save, cut short by a preemption
    storage.write(layout.path(cut, "00-w.safetensors"), b"x" * 8)
    with run(uri, "job-b") as second:
        assert second.restore().step == 100
        second.save(110, state(110), wait=True)
    assert layout.path(cut, "00-w.safetensors") in storage.list()  # above what job-b restored: maybe in flight
    with run(uri, "job-b", attempt=2) as again:
        assert again.restore().step == 110
        again.save(120, state(120), wait=True)
    assert not any(p.startswith(cut.name) for p in storage.list())
    assert committed(uri) == [110, 120]
