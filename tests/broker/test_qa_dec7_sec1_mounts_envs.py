"""What a task's ``file_mounts`` and ``envs``/``secrets`` may name, held at submit and at resume.

A source that only began as a broker value (``sha256:/../../etc/hosts``, ``broker:/../x``) was let through as "not a
path", while SkyPilot reads it as the path it climbs to on the broker's host and uploads it; a relative destination
was mounted wherever the job ran; and a task could set the variables the broker gives each attempt (its token, the
checkpoint to resume from), which were either dropped without a word or read by the job as the broker's own.
"""

from __future__ import annotations

import json
import os

import pytest
from fastapi.testclient import TestClient

from broker.api.app import create_app
from broker.config import load_settings
from broker.spec import RESERVED_ENVS, host_paths, is_local_path
from broker_testing import ADMIN, TEAM_TOKENS

HEX = "ab" * 32
TEAM = {"Authorization": f"Bearer {TEAM_TOKENS['vision']}"}
AS_ADMIN = {"Authorization": f"Bearer {ADMIN}"}


@pytest.fixture
def api(tmp_path):
    settings = load_settings({"BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_ADMIN_TOKEN": ADMIN,
                              "BROKER_TEAM_TOKENS": json.dumps(TEAM_TOKENS)})
    with TestClient(create_app(settings, engine=False), raise_server_exceptions=False) as c:
        yield c


def submit(api, task, headers=TEAM):
    return api.post("/v1/jobs", json={"run": "true", **task}, headers=headers)


# -- problem 1: only the exact broker values are "not a path" ----------------------------------------------------------


@pytest.mark.parametrize("mount, field, detail", [
    pytest.param({"source": "sha256:/../../../../../../../../tmp/somedir", "mode": "COPY", "name": "qa-bkt"},
                 "file_mounts./data/x.source", "a storage mapping's source is a path or a bucket URL",
                 id="a storage mapping's sha256: source climbing to a host folder is refused"),
    pytest.param({"source": ["sha256:/../../../../../../etc/hosts"]},
                 "file_mounts./data/x.source", "a storage mapping's source is a path or a bucket URL",
                 id="a storage mapping's list of sources, one climbing to /etc/hosts, is refused"),
    pytest.param("broker:/../../../../../../etc/hosts", "file_mounts./data/x", "the only broker: source is "
                 "broker:checkpoint", id="a broker: source that is not broker:checkpoint is refused"),
    pytest.param("broker:checkpointx", "file_mounts./data/x", "the only broker: source is broker:checkpoint",
                 id="a broker: source that only starts as broker:checkpoint is refused"),
    pytest.param("sha256:/../../../../../../etc/hosts", "file_mounts./data/x", "must be an uploaded pack, sha256: "
                 "and 64 lowercase hex digits", id="a sha256: source that is no digest is refused as broker.file_mounts"
                 " refuses one"),
    pytest.param(f"sha256:{HEX}/../../etc/hosts", "file_mounts./data/x", "must be an uploaded pack",
                 id="a digest followed by a path that climbs is refused"),
    pytest.param(f"sha256:{HEX[:-1]}", "file_mounts./data/x", "must be an uploaded pack",
                 id="a digest one digit short is refused"),
])
@pytest.mark.parametrize("who", [TEAM, AS_ADMIN], ids=["a team's submit", "an admin's submit"])
def test_a_source_that_only_starts_as_a_broker_value_is_refused_naming_the_field(api, mount, field, detail, who):
    r = submit(api, {"file_mounts": {"/data/x": mount}}, headers=who)
    assert r.status_code == 422 and r.json()["field"] == field, r.text
    assert detail in r.json()["detail"], r.text
    assert api.get("/v1/jobs", headers=AS_ADMIN).json()["jobs"] == []


def test_the_exact_broker_values_are_still_accepted_from_a_team(api):
    r = submit(api, {"file_mounts": {"/ckpt": "broker:checkpoint", "/data/t": f"sha256:{HEX}",
                                     "/data/v.txt": f"sha256:{HEX}/v.txt"}})
    assert r.status_code == 201, r.text


@pytest.mark.parametrize("source, path", [
    pytest.param("sha256:/../../etc/hosts", True, id="sha256: then a path is a path, as SkyPilot reads it"),
    pytest.param("broker:/../../etc/hosts", True, id="broker: then a path is a path"),
    pytest.param(f"sha256:{HEX}", False, id="an uploaded pack is not"),
    pytest.param(f"sha256:{HEX}/vocab.txt", False, id="a file of an uploaded pack is not"),
    pytest.param("broker:checkpoint", False, id="the checkpoint mount is not"),
])
def test_what_is_a_host_path_is_what_skypilot_reads_as_one(source, path):
    assert is_local_path(source) is path
    assert bool(host_paths({"file_mounts": {"/data/x": {"source": [source]}}})) is path


# -- problem 2: the task's file_mounts destinations, as SkyPilot's and broker.file_mounts' -----------------------------


@pytest.mark.parametrize("dest", [
    pytest.param("../../../tmp/x", id="a destination that climbs from the working folder"),
    pytest.param("data/x", id="a relative destination"),
    pytest.param("/data/x/", id="a destination with a trailing slash"),
    pytest.param("s3://bucket/x", id="a bucket URL as the destination"),
])
def test_a_task_mount_destination_that_is_not_absolute_nor_under_home_is_refused(api, dest):
    r = submit(api, {"file_mounts": {dest: f"sha256:{HEX}"}})
    assert r.status_code == 422 and r.json()["field"] == f"file_mounts.{dest}", r.text
    assert "must be mounted at an absolute path or one under ~" in r.json()["detail"], r.text


def test_a_task_mount_at_root_is_refused_as_broker_file_mounts_refuses_it(api):
    r = submit(api, {"file_mounts": {"/": "s3://bucket/x"}})
    assert r.status_code == 422 and r.json()["field"] == "file_mounts./", r.text
    assert "cannot be / itself" in r.json()["detail"], r.text


def test_a_task_mount_under_home_or_absolute_is_accepted(api):
    r = submit(api, {"file_mounts": {"~/cfg": "s3://bucket/cfg", "/data/raw": "s3://bucket/raw"}})
    assert r.status_code == 201, r.text


# -- problem 3: the variables the broker sets itself ------------------------------------------------------------------


@pytest.mark.parametrize("key", ["envs", "secrets"])
@pytest.mark.parametrize("name", sorted(RESERVED_ENVS))
def test_a_submit_naming_a_variable_the_broker_sets_is_refused(api, key, name):
    r = submit(api, {key: {name: "s3://other-teams-bucket/runs/j-x/step-400", "MINE": "1"}})
    assert r.status_code == 422 and r.json()["field"] == f"{key}.{name}", r.text
    assert "set by the broker itself" in r.json()["detail"], r.text


@pytest.mark.parametrize("key", ["envs", "secrets"])
def test_a_resume_naming_a_variable_the_broker_sets_is_refused_and_changes_nothing(api, key):
    from dataclasses import replace

    from broker.lifecycle import JobState
    from broker.store import Change

    r = submit(api, {"envs": {"MINE": "1"}})
    assert r.status_code == 201, r.text
    store = api.app.state.service.store
    job = store.get_job(r.json()["id"])
    store.commit(Change(job=replace(job, state=JobState.STOPPED_BUDGET), expected_version=job.version))
    r = api.post(f"/v1/jobs/{job.id}/resume", json={key: {"BROKER_RESUME_FROM": "s3://other/runs/j-y/step-9"}},
                 headers=TEAM)
    assert r.status_code == 422 and r.json()["field"] == f"{key}.BROKER_RESUME_FROM", r.text
    assert "set by the broker itself" in r.json()["detail"], r.text
    after = store.get_job(job.id)
    assert after.state == JobState.STOPPED_BUDGET and after.spec.get("envs") == {"MINE": "1"}


def test_a_stored_spec_that_named_one_before_the_check_is_still_read():
    from broker.spec import parse

    spec = parse({"run": "true", "envs": {"BROKER_JOB_TOKEN": "old"}}, now=0.0, strict=False)
    assert spec.task["envs"] == {"BROKER_JOB_TOKEN": "old"}


def _broker_envs(checkpoint_uri: str) -> dict[str, str]:
    """Every variable the engine gives an attempt: a resumed one, with a token and a second broker to report to."""
    from broker.engine.launch import broker_envs
    from broker.lifecycle import AttemptState, JobState
    from broker.models import Attempt, Job

    job = Job(id="j-1", name="train", team="vision", state=JobState.RUNNING, spec={"run": "true"}, budget=1,
              priority=0, submitted_at=0.0, updated_at=0.0, checkpoint_uri=checkpoint_uri)
    attempt = Attempt(id="j-1-a2", job_id="j-1", n=2, state=AttemptState.RUNNING, launcher="local", placement={},
                      price_per_hour=0, created_at=0.0, resume_from=checkpoint_uri + "/step-400")
    return broker_envs(job, attempt, public_url="http://127.0.0.1:18600", job_token="job-token",
                       fallback_urls=["http://127.0.0.1:18601"])


def _local_env(tmp_path, name: str, task_envs: dict[str, str], monkeypatch) -> dict[str, str]:
    """The ``BROKER_*`` variables a job on the local launcher sees, its task giving ``task_envs``."""
    from launchers.local_runner import Runner

    for k in [k for k in os.environ if k.startswith("BROKER_")]:
        monkeypatch.delenv(k)
    run_dir = tmp_path / name
    run_dir.mkdir()
    store = tmp_path / "ckpt"
    request = {"attempt_id": "j-1-a2", "placement": {}, "envs": _broker_envs(f"file://{store}/runs/j-1"),
               "task": {"run": "env", "envs": task_envs, "file_mounts": {str(tmp_path / "m"): "broker:checkpoint"}}}
    (run_dir / "request.json").write_text(json.dumps(request))
    assert Runner(run_dir).run()["exit_code"] == 0
    lines = (run_dir / "output.log").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line.startswith("BROKER_") and "=" in line)


def _skypilot_env(task_envs: dict[str, str]) -> dict[str, str]:
    """The ``BROKER_*`` variables of a SkyPilot attempt (envs and secrets), on Kubernetes with a checkpoint mount and
    on spot in AWS, its task giving ``task_envs``."""
    from launchers.skypilot_task import task_config

    seen: dict[str, str] = {}
    envs = _broker_envs("s3://ckpt/runs/j-1")
    for placement in ({"tier": "onprem", "cloud": "kubernetes", "region": "lab", "num_nodes": 1},
                      {"tier": "spot", "cloud": "aws", "region": "us-east-1", "num_nodes": 1}):
        task = {"run": "true", "envs": dict(task_envs), "file_mounts": {"/ckpt": "broker:checkpoint"}}
        config = task_config(task, placement, envs, job_id="j-1", attempt_id="j-1-a2")
        for part in ("envs", "secrets"):
            seen.update({k: str(v) for k, v in (config.get(part) or {}).items() if k.startswith("BROKER_")})
    return seen


def test_the_reserved_variables_are_those_the_engine_and_launchers_set_over_a_tasks_own(tmp_path, monkeypatch):
    """Each ``BROKER_*`` variable an attempt sees without the task naming it, then given by the task: those the broker
    replaces with its own are exactly :data:`RESERVED_ENVS` (the spot notice settings keep a task's value)."""
    ours = "the task's own"
    overridden = set()
    for run in (lambda envs, n: _local_env(tmp_path, n, envs, monkeypatch), lambda envs, n: _skypilot_env(envs)):
        given = run({}, "alone")
        assert given, "the broker set no variable for the attempt"
        again = run({name: ours for name in given}, "named")
        overridden |= {name for name in given if again.get(name) != ours}
    assert overridden == RESERVED_ENVS


# -- problem 4: a file: URL is said to be one ---------------------------------------------------------------------------


@pytest.mark.parametrize("source, field", [
    pytest.param("file:///etc/passwd", "file_mounts./data/x", id="a file:// URL"),
    pytest.param({"source": "file:///etc/passwd", "mode": "COPY"}, "file_mounts./data/x.source",
                 id="a storage mapping's file:// source"),
])
def test_a_file_url_source_is_refused_saying_what_to_give_instead(api, source, field):
    r = submit(api, {"file_mounts": {"/data/x": source}}, headers=AS_ADMIN)
    assert r.status_code == 422 and r.json()["field"] == field, r.text
    detail = r.json()["detail"]
    assert "names no bucket" not in detail and "file://BUCKET" not in detail, detail
    assert "a file: URL, which SkyPilot does not read as a file_mounts source" in detail, detail
    assert "give the path itself (/etc/passwd" in detail, detail
