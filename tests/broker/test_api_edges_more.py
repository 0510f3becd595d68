"""The HTTP API's last answers that did not name what they were about, through the real app: a 409 names the field
(the job's ``state``, ``budget``, ``broker.checkpoint``, ...) as every other 4xx does; a cost window that starts
after now (``until=9999-12-31``) is a 422 naming the bound; a body in a type or coding the API does not read is a
415 naming the header, where any type was read as a task and gzip bytes were answered a parse error about them; and
a request to no route, or with a method a route does not take, is JSON naming the ``path`` or the ``method``."""

from __future__ import annotations

import gzip
import json
import time
from datetime import datetime, timedelta, timezone

import pytest
from fastapi.testclient import TestClient

from broker.api.app import create_app
from broker.auth import job_token
from broker.engine.reconcile import Engine
from broker.store import open_store

from broker_testing import ADMIN, run_until

CONFIG = """
pools:
  - {name: gpu-box, slots: 4, accelerator: A100, price_per_slot_hour: "2.00"}
  - {name: cpu, slots: 2, price_per_slot_hour: "0.10"}
"""
AUTH = {"Authorization": f"Bearer {ADMIN}"}
TASK = {"run": "echo hi"}


@pytest.fixture
def settings(make_settings):
    return make_settings(config=CONFIG)


@pytest.fixture
def app(settings, tmp_path):
    return create_app(settings, store=open_store(f"sqlite://{tmp_path / 'api.db'}"), engine=False)


@pytest.fixture
def client(app):
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def _submit(client, task=TASK) -> str:
    r = client.post("/v1/jobs", json=task, headers=AUTH)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _refused(r, status: int, field: str, says: str) -> None:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json"), r.headers
    body = r.json()
    assert body["field"] == field, body
    assert says in body["detail"], body


def _cancelled(client) -> str:
    job_id = _submit(client)
    assert client.post(f"/v1/jobs/{job_id}/cancel", headers=AUTH).status_code == 200
    return job_id


# -- 1. a 409 names the field it is about ------------------------------------------------------------------------


@pytest.mark.parametrize("call, field, says", [
    (lambda c, j: c.post(f"/v1/jobs/{_cancelled(c)}/cancel", headers=AUTH), "state", "there is nothing to cancel"),
    (lambda c, j: c.post(f"/v1/jobs/{j}/resume", headers=AUTH), "state",
     "is queued, not ended: only a failed or budget-stopped job resumes"),
    (lambda c, j: c.post(f"/v1/jobs/{_cancelled(c)}/budget", json={"budget_usd": "40"}, headers=AUTH), "state",
     "its budget no longer changes"),
    (lambda c, j: c.post(f"/v1/jobs/{_cancelled(c)}/ondemand", headers=AUTH), "state",
     "there is nothing to move to on-demand"),
    (lambda c, j: c.post(f"/v1/jobs/{j}/ondemand", headers=AUTH), "resources", "no on-demand offer fits this job"),
    (lambda c, j: c.post("/v1/admin/faults", json={"kind": "preempt", "job_id": j}, headers=AUTH), "kind",
     "fault injection needs the local launcher with simulated zones"),
], ids=["a cancel of a job already cancelled names its state",
        "a resume of a queued job names its state",
        "a budget change of a cancelled job names its state",
        "a move to on-demand of a cancelled job names its state",
        "a move to on-demand where no on-demand offer fits names the job's resources",
        "a fault on a broker with no simulated zones names the kind of fault"])
def test_a_409_names_the_field_it_is_about(client, call, field, says):
    _refused(call(client, _submit(client)), 409, field, says)


def test_a_progress_report_refused_for_the_job_s_state_or_attempt_names_that_field(client, settings):
    job_id = _submit(client)
    as_job = {"Authorization": f"Bearer {job_token(settings, job_id)}"}
    _refused(client.post(f"/v1/jobs/{job_id}/progress", json={"step": 5, "attempt": 3}, headers=as_job), 409,
             "attempt", "the report is from attempt 3")
    assert client.post(f"/v1/jobs/{job_id}/cancel", headers=AUTH).status_code == 200
    _refused(client.post(f"/v1/jobs/{job_id}/progress", json={"step": 5}, headers=as_job), 409, "state",
             "the job is cancelled")


def test_a_resume_refused_for_its_own_failure_or_a_shared_checkpoint_base_names_force_or_broker_checkpoint(
        client, app, tmp_path):
    """The two refusals of a resume that a person acts on differently: resume with force, or wait for the other job."""
    base = f"file://{tmp_path / 'ckpt'}"
    failed = _submit(client, {"run": "exit 3", "broker": {"checkpoint": base}})
    service = app.state.service
    run_until(Engine(service.settings, service.store, service.launcher), service.store, failed, {"failed"}, timeout=60)
    _refused(client.post(f"/v1/jobs/{failed}/resume", headers=AUTH), 409, "force",
             "the job failed for a reason of its own")
    other = _submit(client, {"run": "echo hi", "broker": {"checkpoint": base}})  # the failed job's base is free
    _refused(client.post(f"/v1/jobs/{failed}/resume", params={"force": "true"}, headers=AUTH), 409,
             "broker.checkpoint", f"is also that of job {other}")


# -- 2. the cost window's until is bounded as its since is ----------------------------------------------------------


def _day(days_from_now: int) -> str:
    return (datetime.now(timezone.utc) + timedelta(days=days_from_now)).date().isoformat()


@pytest.mark.parametrize("params, field, says", [
    ({"until": "9999-12-31"}, "until", "is more than 7d after now: the 7d window ending then starts after now"),
    ({"until": _day(30)}, "until", "nothing was spent in it yet"),
    ({"since": _day(-10), "until": "9999-12-31"}, "until", "the window can be at most 400 days"),
    ({"since": _day(2), "until": _day(9)}, "since", "is not in the past: the window starts after now"),
], ids=["until at the end of the calendar (was a 200: the week before it, all zeros)",
        "until a month ahead, with the default week",
        "a since in the past and an until at the end of the calendar names until, not since",
        "a window wholly in the future names its since"])
def test_a_cost_window_after_now_is_a_422_naming_its_bound(client, params, field, says):
    _refused(client.get("/v1/costs", params=params, headers=AUTH), 422, field, says)


def test_a_cost_window_may_still_end_after_now(client):
    r = client.get("/v1/costs", params={"since": _day(-3), "until": _day(3)}, headers=AUTH)
    assert r.status_code == 200, r.text
    assert len(r.json()["by_day"]) == 6


# -- 3. request bodies: the types and codings read ------------------------------------------------------------------


@pytest.mark.parametrize("content_type, body", [
    ("application/json", json.dumps(TASK)),
    ("application/json; charset=utf-8", json.dumps(TASK)),
    ("application/yaml", "run: echo hi\n"),
    ("application/x-yaml", "run: echo hi\n"),
    ("text/yaml", "run: echo hi\n"),
    ("text/x-yaml", "run: echo hi\n"),
    ("text/plain", "run: echo hi\n"),
    ("application/x-www-form-urlencoded", "run: echo hi\n"),
    (None, "run: echo hi\n"),
], ids=["JSON (the CLI's)", "JSON with a charset", "YAML", "x-yaml", "text/yaml", "text/x-yaml", "plain text",
        "curl -d's form type, holding the task's text", "no Content-Type"])
def test_a_task_in_a_type_the_api_reads_is_submitted(client, content_type, body):
    headers = {**AUTH, **({"Content-Type": content_type} if content_type else {})}
    r = client.post("/v1/jobs", content=body.encode(), headers=headers)
    assert r.status_code == 201, r.text


@pytest.mark.parametrize("route, content_type", [
    ("/v1/jobs", "multipart/form-data; boundary=x"),
    ("/v1/jobs", "application/octet-stream"),
    ("/v1/jobs", "application/gzip"),
    ("budget", "image/png"),
], ids=["curl -F's multipart form (was read as the task: a YAML error about its boundary lines)",
        "bytes of no type", "a gzip file", "a budget change as an image"])
def test_a_body_of_a_type_the_api_does_not_read_is_a_415_naming_content_type(client, route, content_type):
    job_id = _submit(client)
    path = f"/v1/jobs/{job_id}/budget" if route == "budget" else route
    r = client.post(path, content=b'{"budget_usd": "40"}', headers={**AUTH, "Content-Type": content_type})
    _refused(r, 415, "Content-Type", f"{content_type.split(';')[0]!r} is not a body this API reads: send JSON")
    assert [j["id"] for j in client.get("/v1/jobs", headers=AUTH).json()["jobs"]] == [job_id]  # nothing new stored
    assert client.get(f"/v1/jobs/{job_id}", headers=AUTH).json()["budget"]["usd"] == "$10.00"


def test_a_compressed_body_is_a_415_naming_content_encoding_and_saying_which_it_reads(client):
    """gzip bytes were read as the task: "is not UTF-8 (byte 0x8b at offset 1)", about a body the caller never wrote
    that way. Refused rather than decoded: no client of the broker compresses what it sends."""
    r = client.post("/v1/jobs", content=gzip.compress(json.dumps(TASK).encode()),
                    headers={**AUTH, "Content-Type": "application/json", "Content-Encoding": "gzip"})
    _refused(r, 415, "Content-Encoding", "'gzip' is not read here: send the body uncompressed")
    assert r.headers["Accept-Encoding"] == "identity"
    assert client.get("/v1/jobs", headers=AUTH).json()["jobs"] == []
    plain = client.post("/v1/jobs", content=json.dumps(TASK).encode(),
                        headers={**AUTH, "Content-Type": "application/json", "Content-Encoding": "identity"})
    assert plain.status_code == 201, plain.text


def test_a_bodyless_post_is_not_refused_for_a_type_left_over(client):
    job_id = _submit(client)
    r = client.post(f"/v1/jobs/{job_id}/cancel", headers={**AUTH, "Content-Type": "application/octet-stream"})
    assert r.status_code == 200, r.text


def test_the_workdir_upload_keeps_its_archive_types(client):
    """A pack is a tar.gz whatever its header calls it: its route checks the bytes (here, the digest first)."""
    r = client.put("/v1/workdirs/sha256:nope", content=b"\x1f\x8b", headers={**AUTH, "Content-Type": "application/gzip",
                                                                            "Content-Encoding": "gzip"})
    _refused(r, 422, "digest", "")


# -- 4. the router's own answers -------------------------------------------------------------------------------------


def test_a_request_to_no_route_is_json_naming_the_path(client):
    """Its detail stays "Not Found": the CLI adds its hint about --url with a path to that one."""
    r = client.get("/v1/jbos", headers=AUTH)
    _refused(r, 404, "path", "Not Found")
    assert r.json() == {"detail": "Not Found", "field": "path"}


def test_a_method_a_path_does_not_take_is_json_naming_the_method_and_those_it_takes(client):
    r = client.delete("/v1/jobs", headers=AUTH)
    _refused(r, 405, "method", "/v1/jobs does not take DELETE (it takes GET, POST)")
    assert r.headers["Allow"] == "GET, POST"  # the router's named POST alone, and this answer dropped it


def test_the_openapi_document_lists_the_415_and_says_a_409_names_its_field(client):
    doc = client.get("/openapi.json").json()
    submit = doc["paths"]["/v1/jobs"]["post"]["responses"]
    assert "415" in submit and "Content-Type" in submit["415"]["description"]
    assert "`field` names" in doc["paths"]["/v1/jobs/{job_id}/cancel"]["post"]["responses"]["409"]["description"]



def test_a_slack_request_with_a_bad_signature_names_the_signature_header(make_settings, tmp_path):
    settings = make_settings(config=CONFIG + "slack: {signing_secret: 8f742231b10e8888abcd99yyyzzz85a5}\n")
    app = create_app(settings, store=open_store(f"sqlite://{tmp_path / 'slack.db'}"), engine=False)
    with TestClient(app, raise_server_exceptions=False) as client:
        r = client.post("/slack/commands", content="command=/broker&text=status",
                        headers={"Content-Type": "application/x-www-form-urlencoded",
                                 "X-Slack-Request-Timestamp": str(int(time.time())), "X-Slack-Signature": "v0=00"})
    _refused(r, 401, "X-Slack-Signature", "invalid Slack signature")
