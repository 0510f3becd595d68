"""Two jobs not final on one checkpoint base (a task naming ``broker.checkpoint``, submitted twice): refused,
as each one's retention would delete the other's checkpoints and a restore could take the other's."""

from __future__ import annotations

from dataclasses import replace

import pytest
from fastapi.testclient import TestClient

from broker.api.app import create_app
from broker.lifecycle import JobState
from broker.spec import checkpoint_base
from broker.store import Change

from broker_testing import ADMIN

CONFIG = """
pools:
  - {name: cpu, slots: 2, price_per_slot_hour: "0.10"}
default_budget_usd: "10"
"""
ADMIN_H = {"Authorization": f"Bearer {ADMIN}"}
VISION = {"Authorization": "Bearer vision-token"}
NLP = {"Authorization": "Bearer nlp-token"}


def task(base: str | None, **broker) -> dict:
    section = {"budget_usd": 5, **({"checkpoint": base} if base is not None else {}), **broker}
    return {"name": "train", "resources": {"cpus": 1}, "run": "echo hi", "broker": section}


@pytest.fixture
def served(make_settings, store):
    with TestClient(create_app(make_settings(config=CONFIG), store=store, engine=False),
                    raise_server_exceptions=False) as client:
        yield client, store


def end(store, job_id: str, state: JobState) -> None:
    """As the engine would: the job reaches a final state."""
    job = store.get_job(job_id)
    store.commit(Change(job=replace(job, state=state, reason="ended in the test"), expected_version=job.version))


@pytest.mark.parametrize("again", ["s3://runs/exp1", "s3://runs/exp1/", "S3://runs/exp1//", "s3a://runs/exp1"],
                         ids=["the same text", "a trailing slash", "the scheme in capitals, two slashes", "s3a://"])
def test_a_second_job_on_the_base_of_a_live_one_is_refused_naming_the_field_and_the_job(served, again):
    client, store = served
    first = client.post("/v1/jobs", json=task("s3://runs/exp1"), headers=VISION)
    assert first.status_code == 201, first.text
    r = client.post("/v1/jobs", json=task(again), headers=VISION)
    assert r.status_code == 409, r.text
    detail = r.json()["detail"]
    assert detail.startswith("broker.checkpoint: ") and first.json()["id"] in detail and "queued" in detail
    assert len(client.get("/v1/jobs", headers=ADMIN_H).json()["jobs"]) == 1  # nothing stored


def test_another_teams_job_is_not_named_to_a_team(served):
    client, _ = served
    mine = client.post("/v1/jobs", json=task("gs://shared/run"), headers=NLP).json()
    r = client.post("/v1/jobs", json=task("gcs://shared/run/"), headers=VISION)
    # refused as another team's base (403), not as a live job's (409: it said the job's state, and to cancel it)
    assert r.status_code == 403 and "a job of another team" in r.text and mine["id"] not in r.text, r.text
    assert "queued" not in r.json()["detail"], r.text


def test_a_base_inside_another_or_beside_it_and_a_default_base_are_accepted(served):
    client, _ = served
    for base in ("s3://runs/exp1", "s3://runs/exp1/seed2", "s3://runs/exp", "s3://runs/exp10", None, None):
        r = client.post("/v1/jobs", json=task(base), headers=VISION)
        assert r.status_code == 201, (base, r.text)


def test_once_the_first_job_ended_its_base_may_be_used_again_and_the_ended_job_is_then_not_resumed(served):
    client, store = served
    # paths on the broker's host outside its checkpoint root: an admin's to name (for team vision)
    first = client.post("/v1/jobs", json=task("/data/ckpt/exp1", team="vision"), headers=ADMIN_H).json()
    end(store, first["id"], JobState.FAILED)
    second = client.post("/v1/jobs", json=task("file:///data/ckpt/./exp1/", team="vision"), headers=ADMIN_H)
    assert second.status_code == 201, second.text  # continues from the failed job's checkpoints: not refused
    r = client.post(f"/v1/jobs/{first['id']}/resume?force=true", headers=VISION)
    assert r.status_code == 409 and second.json()["id"] in r.text and "not resumed" in r.text, r.text
    end(store, second.json()["id"], JobState.CANCELLED)
    r = client.post(f"/v1/jobs/{first['id']}/resume?force=true", headers=VISION)
    assert r.status_code == 200 and r.json()["state"] == "queued", r.text


def test_a_job_resumed_on_its_default_base_that_another_job_named_is_refused(served, make_settings):
    client, store = served
    first = client.post("/v1/jobs", json=task(None), headers=VISION).json()
    end(store, first["id"], JobState.STOPPED_BUDGET)
    client.post(f"/v1/jobs/{first['id']}/budget", json={"budget_usd": "9"}, headers=VISION)
    taken = client.post("/v1/jobs", json=task(first["checkpoint_uri"] + "/"), headers=VISION)
    assert taken.status_code == 201, taken.text
    r = client.post(f"/v1/jobs/{first['id']}/resume", headers=VISION)
    assert r.status_code == 409 and taken.json()["id"] in r.text, r.text


@pytest.mark.parametrize("a, b, same", [
    ("s3://b/x", "s3://b/x/", True), ("gs://b/x", "gcs://b/x", True), ("/a/b/../c", "file:///a/c/", True),
    ("s3://b/x", "s3://b/x/y", False), ("s3://b/x", "gs://b/x", False), ("s3://b/x", "s3://b/xy", False),
], ids=lambda v: str(v))
def test_checkpoint_bases_compare_as_the_library_reads_them(a, b, same):
    assert (checkpoint_base(a) == checkpoint_base(b)) is same


def test_a_teams_base_is_its_own_not_the_root_another_teams_job_or_a_host_path(served, make_settings):
    """A team's token pointed broker.checkpoint at another team's finished job's base (restoring its weights, then
    writing into it) and at /etc (the runner wrote step-* folders there): each is a 403 naming the field."""
    client, store = served
    root = make_settings(config=CONFIG).checkpoint_root.rstrip("/")
    theirs = client.post("/v1/jobs", json=task(None), headers=NLP).json()
    end(store, theirs["id"], JobState.SUCCEEDED)
    mine = client.post("/v1/jobs", json=task(None), headers=VISION).json()
    end(store, mine["id"], JobState.CANCELLED)
    for base, says in [
        (theirs["checkpoint_uri"], "inside the checkpoint base of a job of another team"),
        (theirs["checkpoint_uri"] + "/../" + theirs["id"] + "/sub", "inside the checkpoint base of a job of another team"),
        (root, "is the broker's checkpoint root"),
        (root + "/", "is the broker's checkpoint root"),
        ("/etc", "a path on the broker's host outside its checkpoint root"),
        ("file:///tmp/x", "a path on the broker's host outside its checkpoint root"),
        # no such job: refused the same, so that the answer does not tell which of another team's job ids exist
        (root + "/j-0123456789", "inside the checkpoint base of a job of another team or of no job"),
    ]:
        r = client.post("/v1/jobs", json=task(base), headers=VISION)
        assert r.status_code == 403 and r.json()["field"] == "broker.checkpoint", (base, r.text)
        assert says in r.json()["detail"], (base, r.text)
        assert f"job {theirs['id']}" not in r.json()["detail"]  # the base given is quoted, the job not named
    # the team's own ended job (to continue it), a new name under the root and a bucket are its own to name
    for base in (mine["checkpoint_uri"], root + "/vision-run-7", "s3://vision-bucket/run"):
        r = client.post("/v1/jobs", json=task(base), headers=VISION)
        assert r.status_code == 201, (base, r.text)
        end(store, r.json()["id"], JobState.CANCELLED)
    # an admin is not held to it
    r = client.post("/v1/jobs", json=task(theirs["checkpoint_uri"], team="vision"), headers=ADMIN_H)
    assert r.status_code == 201, r.text



def test_a_teams_own_jobs_base_stays_its_own_after_the_checkpoint_root_moved(make_settings, store, tmp_path):
    """`broker status` tells a cancelled job to be submitted again with `broker.checkpoint: <its base>`; once the
    operator moved `checkpoint_root`, that base was a path outside the root, and the team was refused (403) for
    naming its own job's checkpoints."""
    with TestClient(create_app(make_settings(config=CONFIG), store=store, engine=False),
                    raise_server_exceptions=False) as client:
        mine = client.post("/v1/jobs", json=task(None), headers=VISION).json()
        theirs = client.post("/v1/jobs", json=task(None), headers=NLP).json()
    end(store, mine["id"], JobState.CANCELLED)
    end(store, theirs["id"], JobState.CANCELLED)
    moved = CONFIG + f"checkpoint_root: file://{tmp_path / 'elsewhere'}\n"
    with TestClient(create_app(make_settings(config=moved), store=store, engine=False),
                    raise_server_exceptions=False) as client:
        old = mine["checkpoint_uri"].rstrip("/")
        for base, team in [(theirs["checkpoint_uri"], VISION),  # another team's job's base
                           (old + "/sub", VISION),  # inside its own, not its base
                           (old.rsplit("/", 1)[0] + "/j-0123456789", VISION)]:  # of no job
            r = client.post("/v1/jobs", json=task(base), headers=team)
            assert r.status_code == 403 and "outside its checkpoint root" in r.json()["detail"], (base, r.text)
        r = client.post("/v1/jobs", json=task(mine["checkpoint_uri"]), headers=VISION)
        assert r.status_code == 201, r.text
        assert checkpoint_base(r.json()["checkpoint_uri"]) == checkpoint_base(mine["checkpoint_uri"])
