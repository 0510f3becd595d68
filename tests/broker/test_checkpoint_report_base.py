"""A run's report of a committed checkpoint is kept as the job's last checkpoint — what the next attempt is handed as
``BROKER_RESUME_FROM`` — only where it lies in the job's own checkpoint base. One elsewhere (another team's job's
base on this host, a bucket the team could not have named as ``broker.checkpoint``) was kept from the job's token
alone, and the next attempt restored from it as its own."""

from __future__ import annotations

from fastapi.testclient import TestClient

from broker.api.app import create_app
from broker.auth import job_token
from broker.store import open_store

from broker_testing import ADMIN

CONFIG = """
pools:
  - {name: cpu, slots: 2, price_per_slot_hour: "0.10"}
default_budget_usd: "10"
"""
ADMIN_H = {"Authorization": f"Bearer {ADMIN}"}
VISION = {"Authorization": "Bearer vision-token"}
NLP = {"Authorization": "Bearer nlp-token"}
STEP = "step-000000000040-1733011200123"


def _served(make_settings, tmp_path):
    settings = make_settings(config=CONFIG)
    app = create_app(settings, store=open_store(f"sqlite://{tmp_path / 'r.db'}"), engine=False)
    return settings, TestClient(app, raise_server_exceptions=False)


def _report(client, settings, job_id: str, body: dict):
    r = client.post(f"/v1/jobs/{job_id}/progress", json=body,
                    headers={"Authorization": f"Bearer {job_token(settings, job_id)}"})
    assert r.status_code == 200, r.text
    return client.get(f"/v1/jobs/{job_id}", headers=ADMIN_H).json()


def _notes(client, job_id: str) -> list[dict]:
    events = client.get(f"/v1/jobs/{job_id}/events", headers=ADMIN_H).json()["events"]
    return [e for e in events if e["event"] == "checkpoint_outside_base"]


def test_a_checkpoint_reported_outside_the_jobs_base_is_not_its_last_checkpoint_and_is_noted_once(make_settings,
                                                                                                   tmp_path):
    settings, client = _served(make_settings, tmp_path)
    with client:
        theirs = client.post("/v1/jobs", json={"run": "echo hi"}, headers=NLP).json()
        mine = client.post("/v1/jobs", json={"run": "echo hi"}, headers=VISION).json()
        base = mine["checkpoint_uri"].rstrip("/")
        elsewhere = f"{theirs['checkpoint_uri'].rstrip('/')}/{STEP}"
        view = _report(client, settings, mine["id"], {"step": 40, "checkpoint": {"step": 40, "uri": elsewhere}})
        assert view["last_checkpoint"] is None  # not handed to the next attempt as BROKER_RESUME_FROM
        assert view["progress"]["step"] == 40  # the run's step is still its step
        (note,) = _notes(client, mine["id"])
        assert elsewhere in note["reason"] and base in note["reason"] and "not kept" in note["reason"]
        # another outside report of the same attempt: not kept, not noted again
        for uri in (f"{elsewhere}-2", f"{base}/sub/{STEP}", f"s3://any-bucket/run/{STEP}"):
            view = _report(client, settings, mine["id"], {"checkpoint": {"step": 41, "uri": uri}})
            assert view["last_checkpoint"] is None, uri
        assert len(_notes(client, mine["id"])) == 1
        # its own base, however spelled, is kept
        for uri in (f"{base}/{STEP}", f"{base}//{STEP}/", base.removeprefix("file://") + f"/{STEP}"):
            view = _report(client, settings, mine["id"], {"checkpoint": {"step": 42, "uri": uri}})
            assert view["last_checkpoint"]["uri"] == uri, uri


def test_a_named_base_its_mount_on_a_node_and_its_other_spellings_are_the_jobs_own(make_settings, tmp_path):
    """``broker.checkpoint: s3://…`` with ``file_mounts: {/ckpt: broker:checkpoint}``: a run saving to
    ``$BROKER_CHECKPOINT_DIR`` (``/ckpt/<the base's path>`` on a SkyPilot node) reports that path, its own base."""
    settings, client = _served(make_settings, tmp_path)
    task = {"run": "echo hi", "file_mounts": {"/ckpt": "broker:checkpoint"},
            "broker": {"checkpoint": "s3://vision-bucket/runs/exp1"}}
    with client:
        job = client.post("/v1/jobs", json=task, headers=VISION)
        assert job.status_code == 201, job.text
        job_id = job.json()["id"]
        for uri in (f"s3://vision-bucket/runs/exp1/{STEP}", f"s3a://vision-bucket/runs/exp1/{STEP}",
                    f"/ckpt/runs/exp1/{STEP}"):
            view = _report(client, settings, job_id, {"checkpoint": {"step": 40, "uri": uri}})
            assert view["last_checkpoint"]["uri"] == uri, uri
        assert _notes(client, job_id) == []
        for uri in (f"/ckpt/{STEP}", f"/ckpt/runs/exp2/{STEP}", f"s3://vision-bucket/runs/{STEP}"):
            view = _report(client, settings, job_id, {"checkpoint": {"step": 41, "uri": uri}})
            assert view["last_checkpoint"]["uri"] == f"/ckpt/runs/exp1/{STEP}", uri
        assert len(_notes(client, job_id)) == 1
