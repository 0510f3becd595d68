"""What an API integrator found, driving the broker over HTTP only: the same body set a job's environment differently
by its Content-Type, a retry with `envs: {}` was "a different task", `cpus: "2++"` (which SkyPilot refuses) was
admitted, `s3://` with no bucket was a 403 about host paths, `POST /v1/jobs/` was a 307 to whatever host the request
named, and a cost window of a tenth of a second was answered as since == until. Real parts: the FastAPI app on a
SQLite store, called over HTTP (Starlette's TestClient), and the service that stored the job."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from broker.api.app import create_app
from broker.config import load_settings

from broker_testing import ADMIN

AUTH = {"Authorization": f"Bearer {ADMIN}"}


@pytest.fixture
def api(tmp_path):
    settings = load_settings({"BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_ADMIN_TOKEN": ADMIN})
    with TestClient(create_app(settings, engine=False), raise_server_exceptions=False) as c:
        yield c


BODY = '{"name": "envs", "run": "echo $A", "envs": {"A": 1e3, "B": 1.0E-2, "C": 1.5, "D": 1.0e2}}'


@pytest.mark.parametrize("ctype", ["application/json", None, "text/plain"])
def test_a_number_written_with_an_exponent_is_the_same_env_value_whatever_the_content_type(api, ctype):
    headers = {**AUTH, **({"Content-Type": ctype} if ctype else {})}
    r = api.post("/v1/jobs", content=BODY.encode(), headers=headers)
    assert r.status_code == 201, r.text
    job = api.app.state.service.store.get_job(r.json()["id"])
    # as YAML reads them (1e3 is text there; 1.5 a number, run as "1.5" either way)
    assert {k: str(v) for k, v in job.spec["envs"].items()} == {"A": "1e3", "B": "0.01", "C": "1.5", "D": "1.0e2"}, job.spec


def test_a_resume_given_an_env_written_with_an_exponent_sets_that_text(api):
    from dataclasses import replace

    from broker.lifecycle import JobState
    from broker.store import Change

    r = api.post("/v1/jobs", json={"run": "echo $A"}, headers=AUTH)
    store = api.app.state.service.store
    job = store.get_job(r.json()["id"])
    store.commit(Change(job=replace(job, state=JobState.STOPPED_BUDGET), expected_version=job.version))
    r = api.post(f"/v1/jobs/{job.id}/resume", content=b'{"envs": {"A": 2e5}}',
                 headers={**AUTH, "Content-Type": "application/json"})
    assert r.status_code == 200, r.text
    assert store.get_job(job.id).spec["envs"]["A"] == "2e5"


@pytest.mark.parametrize("first, again", [
    pytest.param({"envs": {}}, {}, id="envs {} then left out"),
    pytest.param({}, {"envs": None}, id="left out then envs null"),
    pytest.param({"file_mounts": {}}, {}, id="file_mounts {} then left out"),
])
def test_a_retry_that_writes_an_empty_key_otherwise_is_the_same_task(api, first, again):
    task = {"name": "same", "run": "true", "broker": {"budget_usd": "1"}}
    headers = {**AUTH, "Idempotency-Key": "k-1"}
    one = api.post("/v1/jobs", json={**task, **first}, headers=headers)
    two = api.post("/v1/jobs", json={**task, **again}, headers=headers)
    assert one.status_code == 201 and two.status_code == 200, (one.text, two.text)
    assert one.json()["id"] == two.json()["id"]
    three = api.post("/v1/jobs", json={**task, "envs": {"X": "1"}}, headers=headers)
    assert three.status_code == 422 and three.json()["field"] == "Idempotency-Key", three.text


@pytest.mark.parametrize("resources, field", [
    pytest.param({"cpus": "2++"}, "resources.cpus", id="cpus 2++ is refused, as SkyPilot refuses it"),
    pytest.param({"cpus": "2+++"}, "resources.cpus", id="cpus 2+++ too"),
    pytest.param({"memory": "4++"}, "resources.memory", id="memory 4++ too"),
])
def test_more_than_one_plus_is_refused_naming_the_field(api, resources, field):
    r = api.post("/v1/jobs?dry_run=true", json={"run": "true", "resources": resources}, headers=AUTH)
    assert r.status_code == 422 and r.json()["field"] == field, r.text
    assert "a number" in r.json()["detail"], r.text
    ok = api.post("/v1/jobs?dry_run=true", json={"run": "true", "resources": {"cpus": "1+"}}, headers=AUTH)
    assert ok.status_code == 200, ok.text


@pytest.mark.parametrize("source, field", [
    pytest.param("s3://", "file_mounts./data", id="s3:// alone"),
    pytest.param("gs:///data", "file_mounts./data", id="gs:// with no bucket before the path"),
    pytest.param({"source": "s3://", "mode": "MOUNT"}, "file_mounts./data.source", id="a storage mapping's source"),
])
def test_a_bucket_url_that_names_no_bucket_is_a_422_saying_so(api, source, field):
    team = {"Authorization": f"Bearer {ADMIN}"}
    r = api.post("/v1/jobs?dry_run=true", json={"run": "true", "file_mounts": {"/data": source}}, headers=team)
    assert r.status_code == 422 and r.json()["field"] == field, r.text
    assert "names no bucket" in r.json()["detail"], r.text


def test_a_path_with_a_trailing_slash_is_a_404_naming_it_not_a_redirect_to_the_host_asked(api):
    r = api.post("/v1/jobs/", json={"run": "true"}, headers={**AUTH, "Host": "evil.example"}, follow_redirects=False)
    assert r.status_code == 404 and r.json()["field"] == "path", (r.status_code, r.headers.get("location"))
    for name in ("dashboard", "docs", "redoc"):
        page = api.get(f"/{name}/", follow_redirects=False)
        assert page.status_code == 308 and page.headers["location"] == f"../{name}", (name, page.headers)
        assert api.get(f"/{name}/", follow_redirects=True).status_code == 200, name


def test_a_cost_window_under_a_second_is_refused_as_since_equal_to_until(api):
    r = api.get("/v1/costs", params={"since": "2026-12-07T09:00:00.5Z", "until": "2026-12-07T09:00:00.6Z"},
                headers=AUTH)
    assert r.status_code == 422 and r.json()["field"] == "since", r.text
    assert r.json()["detail"] == "since: must be at least a second before until: the report counts whole seconds" \
        or r.json()["detail"].endswith("must be at least a second before until: the report counts whole seconds"), r.text
    r = api.get("/v1/costs", params={"since": "2026-12-07T09:00:00.5Z", "until": "2026-12-07T09:00:02Z"},
                headers=AUTH)
    assert r.status_code == 200, r.text
