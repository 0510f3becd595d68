"""A workdir that is a path on the broker's host (an admin's submit: never packed) is read from there at each
attempt's launch. A user edited train.py after submitting; after `broker fault kill` (as after a preemption or a
resume) attempt 2 ran the edited code on the old checkpoint, and nothing said so. Each launch now records a
fingerprint of the directory (its files' sizes and times, walked as a pack is) on the attempt, and a launch that finds
it changed since the previous attempt says so in its launch event and the job's reason while it launches.

The engine, the local launcher's real runner processes and a simulated spot zone (what `broker fault` needs), on
SQLite; the job's checkpoint is reported through the service as the checkpoint library reports it."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import broker.workdir as workdir_module
from broker.auth import Principal, job_token
from broker.engine.launch import host_workdir
from broker.lifecycle import AttemptState, JobState
from broker.models import Attempt, Job
from broker.workdir import changed_note, fingerprint

from broker_testing import local_broker, wait_for

ADMIN = Principal("admin", None, admin=True)
CONFIG = """
pools: []
zones:
  - {name: sim-a, tier: spot, instance_type: g5.xlarge, cloud_zone: us-east-1a, grace_seconds: 1}
  - {name: sim-b, tier: spot, instance_type: g5.xlarge, cloud_zone: us-east-1b, grace_seconds: 1}
tick_seconds: 0.05
stop_grace_seconds: 1
"""


@pytest.fixture
def broker(make_settings, tmp_path):
    with local_broker(make_settings, tmp_path, CONFIG) as parts:
        yield parts


def code(root: Path) -> Path:
    root.mkdir()
    (root / "train.py").write_text("print('training, version 1')\n")
    (root / "model.py").write_text("LAYERS = 2\n")
    (root / ".gitignore").write_text("out/\n")
    return root


def running(engine, store, job_id: str, n: int) -> Job:
    def now_running():
        engine.tick()
        job = store.get_job(job_id)
        return job if job.state is JobState.RUNNING and job.attempts == n else None

    return wait_for(now_running, timeout=30)


def launch_event(store, job_id: str, n: int):
    return next(e for e in store.events(job_id) if e.event == "launch" and e.attempt == n)


@pytest.mark.parametrize("edited", [True, False])
def test_a_host_workdir_edited_between_attempts_is_said_at_the_next_launch(broker, tmp_path, edited):
    service, engine, store, launcher = broker
    wd = code(tmp_path / "code")
    task = {"name": "t", "workdir": str(wd), "run": "cat train.py; sleep 60",
            "resources": {"accelerators": "A10G:1", "use_spot": True}, "broker": {"budget_usd": 5}}
    job = service.submit(ADMIN, task)[0]
    try:
        job = running(engine, store, job.id, 1)
        uri = f"{job.checkpoint_uri}/step-40"
        service.report_progress(job.id, job_token(service.settings, job.id),
                                {"step": 40, "checkpoint": {"step": 40, "uri": uri}})
        assert "version 1" in wait_for(lambda: service.logs(ADMIN, job.id)["data"])
        # what the job writes itself: ignored (.gitignore) or Python's caches, never "a change of the code"
        (wd / "out").mkdir()
        (wd / "out" / "metrics.txt").write_text("loss 0.1\n")
        (wd / "__pycache__").mkdir()
        (wd / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"\0" * 16)
        if edited:
            (wd / "train.py").write_text("print('training, version 2: a new learning rate')\n")
        assert service.inject_fault(ADMIN, "kill", job_id=job.id)["applied"]
        job = running(engine, store, job.id, 2)
        first, second = sorted(store.attempts(job.id), key=lambda a: a.n)
        assert first.workdir["path"] == str(wd) and first.workdir["files"] == 3  # train.py, model.py, .gitignore
        log = wait_for(lambda: service.logs(ADMIN, job.id, attempt=2)["data"])
        event = launch_event(store, job.id, 2)
        if edited:
            said = (f"the workdir {wd} changed since attempt 1 (1 file differs: train.py changed): this attempt runs "
                    "the code as it is now, on the checkpoint from step 40")
            assert event.reason.endswith(f"resuming from step 40; {said}"), event.reason
            assert event.data["workdir_changed"] == said
            assert first.workdir["digest"] != second.workdir["digest"]
            assert wait_for(lambda: "version 2" in service.logs(ADMIN, job.id, attempt=2)["data"])
        else:
            assert "changed" not in event.reason and "workdir_changed" not in event.data, event
            assert first.workdir["digest"] == second.workdir["digest"]
            assert "version 1" in log, log
        assert "changed since" not in launch_event(store, job.id, 1).reason
    finally:
        for a in store.attempts(job.id):
            launcher.stop(a.id, grace_seconds=0)


def test_a_packed_or_git_workdir_is_not_fingerprinted(tmp_path):
    def job(spec):
        return Job(id="j", name="j", team="t", state=JobState.QUEUED, spec=spec, budget=1, priority=0,
                   submitted_at=0.0, updated_at=0.0)

    assert host_workdir(job({"workdir": "/srv/code", "run": "x"})) == "/srv/code"
    assert host_workdir(job({"workdir": {"url": "https://example.com/r.git", "ref": "v1"}})) is None
    assert host_workdir(job({"broker": {"workdir": "sha256:" + "0" * 64}})) is None
    assert host_workdir(job({"run": "x"})) is None


def test_a_large_workdir_is_fingerprinted_within_its_caps_and_said_changed_without_a_count(tmp_path, monkeypatch):
    monkeypatch.setattr(workdir_module, "FINGERPRINT_LISTED", 3)
    wd = tmp_path / "big"
    wd.mkdir()
    for i in range(5):
        (wd / f"f{i}.py").write_text(f"{i}\n")
    before = fingerprint(str(wd))
    assert before["files"] == 5 and "listing" not in before and "partial" not in before
    (wd / "f4.py").write_text("four, edited\n")
    after = fingerprint(str(wd))
    assert changed_note(before, after, since=1, resumes="from the start (no checkpoint was committed)") == (
        f"the workdir {wd} changed since attempt 1 (it has 5 files, too many to say which differ): this attempt "
        "runs the code as it is now, from the start (no checkpoint was committed)")
    monkeypatch.setattr(workdir_module, "FINGERPRINT_MAX_FILES", 2)
    capped = fingerprint(str(wd))
    assert capped["files"] == 2 and capped["partial"] is True
    # a link out of the tree (a data folder) is fine here, its target counts; a missing directory has no fingerprint
    os.symlink("/nonexistent/data", wd / "data")
    monkeypatch.setattr(workdir_module, "FINGERPRINT_MAX_FILES", 100)
    assert fingerprint(str(wd))["files"] == 6
    assert fingerprint(str(tmp_path / "nope")) == {}


def test_an_attempt_record_of_a_broker_before_fingerprints_reads_as_none_and_a_newer_one_keeps_its_fingerprint():
    seen = {"path": "/srv/code", "digest": "ab", "files": 1, "listing": {"train.py": "0123abcd"}}
    a = Attempt(id="j-a1", job_id="j", n=1, state=AttemptState.LAUNCHING, launcher="local", placement={},
                price_per_hour=0, created_at=time.time(), workdir=seen)
    d = a.to_dict()
    assert Attempt.from_dict(d).workdir == seen
    d.pop("workdir")  # written by a broker before this field: nothing to compare with, so nothing is said
    assert Attempt.from_dict(d).workdir == {} and "workdir" not in Attempt.from_dict(d).extra
