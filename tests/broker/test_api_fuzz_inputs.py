"""What an HTTP fuzz of the API found: each was a 500, a traceback, an answer naming no field, or a task accepted that
then failed every attempt. Bad input is a 4xx naming the field and the reason."""

from __future__ import annotations

import base64
import json
import logging

import pytest
from fastapi.testclient import TestClient

from broker.api.app import create_app
from broker.config import load_settings
from broker.spec import MAX_ARG_BYTES, MAX_ENV_BYTES, SpecError, parse

from broker_testing import ADMIN

AUTH = {"Authorization": f"Bearer {ADMIN}"}


@pytest.fixture
def api(tmp_path):
    """The broker as a fresh install runs it: the default config (one CPU pool, ``local``)."""
    settings = load_settings({"BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_ADMIN_TOKEN": ADMIN})
    with TestClient(create_app(settings, engine=False), raise_server_exceptions=False) as c:
        yield c


def _cursor(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


# -- the listing's cursor ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("key", [
    '[1,"\\ud800"]',  # a lone surrogate as the job id: UnicodeEncodeError in the SQLite store
    '[1' + "0" * 320 + ',"x"]',  # a time no float holds: OverflowError
    '[-1' + "0" * 320 + ',"x"]',
    '[1,"j-1\\u0000"]', '[1,"' + "j" * 129 + '"]', '[NaN,"x"]', '[Infinity,"x"]', '[-Infinity,"x"]',
], ids=["surrogate id", "huge time", "huge negative time", "NUL in id", "id too long", "NaN", "inf", "-inf"])
def test_a_cursor_holding_what_no_cursor_holds_is_the_422_naming_it_not_a_500(api, key):
    r = api.get("/v1/jobs", params={"cursor": _cursor(key)}, headers=AUTH)
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "cursor" and "is not a cursor this broker gave" in r.json()["detail"]


def test_a_cursor_the_broker_gave_still_reads(api):
    from broker.api.query import job_cursor, read_cursor

    assert read_cursor(job_cursor(1765000000.25, "j-2bb07170b9")) == (1765000000.25, "j-2bb07170b9")
    assert api.get("/v1/jobs", params={"cursor": job_cursor(1.0, "j-2bb07170b9")}, headers=AUTH).status_code == 200


# -- text too long to start a process with ----------------------------------------------------------------------------

@pytest.mark.parametrize("task, field", [
    ({"run": "x" * (MAX_ARG_BYTES + 1)}, "run"),
    ({"run": "true", "setup": "é" * (MAX_ARG_BYTES // 2 + 1)}, "setup"),  # bytes, not characters
    ({"run": "true", "envs": {"A": "x" * (MAX_ARG_BYTES - 1)}}, "envs.A"),  # A=... is one string of 131,072
    ({"run": "true", "secrets": {"B": "x" * 200_000}}, "secrets.B"),
], ids=["run", "setup in UTF-8 bytes", "an env var with its name", "a secret"])
@pytest.mark.parametrize("dry_run", [True, False], ids=["dry run", "submit"])
def test_a_script_or_variable_too_long_for_linux_to_start_is_refused_naming_it(api, task, field, dry_run):
    r = api.post("/v1/jobs", params={"dry_run": "true"} if dry_run else {}, json=task, headers=AUTH)
    assert r.status_code == 422, r.text[:300]
    assert r.json()["field"] == field and f"at most {MAX_ARG_BYTES:,} bytes" in r.json()["detail"]
    assert api.get("/v1/jobs", headers=AUTH).json()["jobs"] == []  # nothing stored, to fail at each launch


def test_the_longest_that_starts_is_accepted():
    parse({"run": "x" * MAX_ARG_BYTES, "envs": {"A": "x" * (MAX_ARG_BYTES - 2)}}, now=0)


def test_a_resume_that_sets_a_variable_too_long_is_refused_naming_it(api):
    r = api.post("/v1/jobs/j-0000000000/resume", params={"force": "true"},
                 json={"envs": {"HF_HOME": "x" * MAX_ARG_BYTES}}, headers=AUTH)
    assert r.status_code == 422 and r.json()["field"] == "envs.HF_HOME", r.text[:300]


@pytest.mark.parametrize("task, field", [
    ({"envs": {f"V{i}": "x" * 100_000 for i in range(11)}}, "envs"),
    ({"envs": {f"V{i}": "x" * 100_000 for i in range(6)}, "secrets": {f"S{i}": "x" * 100_000 for i in range(5)}},
     "secrets"),
], ids=["envs alone", "envs and secrets together"])
def test_variables_too_many_bytes_together_are_refused_with_the_limit(task, field):
    with pytest.raises(SpecError) as err:
        parse({"run": "true", **task}, now=0)
    assert err.value.field == field and f"{MAX_ENV_BYTES:,}" in err.value.reason


# -- an empty key ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path, body, field", [
    ("/v1/jobs?dry_run=true", {"": 1, "run": "true"}, "body"),
    ("/v1/jobs?dry_run=true", {"": 1, "nmae": "x", "run": "true"}, "body"),  # among several unknown keys
    ("/v1/jobs?dry_run=true", {"run": "true", "broker": {"": 1}}, "broker"),
    ("/v1/jobs?dry_run=true", {"run": "true", "broker": {"retry": {"": 1}}}, "broker.retry"),
    ("/v1/jobs?dry_run=true", {"run": "true", "resources": {"": 1}}, "resources"),
    ("/v1/jobs?dry_run=true", {"run": "true", "resources": {"any_of": [{"": 1}]}}, "resources.any_of[0]"),
    ("/v1/jobs?dry_run=true", {"run": "true", "workdir": {"url": "https://h/r.git", "": 1}}, "workdir"),
    ("/v1/jobs/j-0000000000/budget", {"": 1, "budget_usd": "3"}, "body"),
    ("/v1/jobs/j-0000000000/budget", {"": 1}, "body"),
    ("/v1/jobs/j-0000000000/resume", {"": 1}, "body"),
    ("/v1/admin/faults", {"": 1, "kind": "preempt"}, "body"),
])
def test_an_empty_key_is_refused_naming_where_it_is(api, path, body, field):
    r = api.post(path, json=body, headers=AUTH)
    assert r.status_code == 422, r.text
    assert r.json()["field"] == field and "an empty key is not a field" in r.json()["detail"], r.text


# -- a YAML value its tag cannot read ---------------------------------------------------------------------------------

@pytest.mark.parametrize("text, field, said", [
    ("broker: {deadline: !!timestamp 2020-13-45, budget_usd: '1'}\nrun: x\n", "broker.deadline",
     "month must be in 1..12"),
    ("run: x\nbroker: {deadline: !!timestamp soon}\n", "broker.deadline", "'soon' (line 2)"),  # was a 500
    ("run: x\nenvs: {A: !!bool maybe}\n", "envs.A", "not true or false"),  # was a 500 (KeyError)
    ("run: x\nnum_nodes: !!int two\n", "num_nodes", "cannot be read as a number"),
])
def test_a_yaml_value_its_tag_cannot_read_is_refused_naming_its_field(api, text, field, said):
    r = api.post("/v1/jobs?dry_run=true", content=text, headers={**AUTH, "Content-Type": "application/yaml"})
    assert r.status_code == 422, r.text
    assert r.json()["field"] == field and said in r.json()["detail"], r.text


@pytest.mark.parametrize("value", ["!!int s3cr3t-TAG-9x", "!!timestamp s3cr3t-TAG-9x", "!!float s3cr3t-TAG-9x",
                                   "0123456", "!!int 190:20:34"])
def test_a_secret_yaml_cannot_read_is_refused_without_echoing_its_value(api, value):
    """The refusal goes back to the submitter's terminal, a CI log or a Slack channel: for a secret it names the
    field and what to do, not the value (nor the number YAML read it as, which gives the value away)."""
    text = f"run: x\nsecrets:\n  WANDB_API_KEY: {value}\n"
    r = api.post("/v1/jobs?dry_run=true", content=text, headers={**AUTH, "Content-Type": "application/yaml"})
    assert r.status_code == 422 and r.json()["field"] == "secrets.WANDB_API_KEY", r.text
    shown = value.split()[-1]
    assert shown not in r.text and "not shown" in r.json()["detail"] and "quote it" in r.json()["detail"], r.text
    if value == "0123456":
        assert str(int(value, 8)) not in r.text, r.text


# -- a job id holding a '/' -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("method, path, shown", [
    ("GET", "/v1/jobs/%2F", "/"), ("GET", "/v1/jobs/a%2fb", "a/b"), ("POST", "/v1/jobs/a%2Fb/cancel", "a/b"),
    ("GET", "/v1/jobs/a%2Fb/events", "a/b"),
])
def test_a_job_id_with_a_slash_is_an_unknown_job_not_the_list_or_a_missing_route(api, method, path, shown):
    r = api.request(method, path, headers=AUTH, follow_redirects=False)
    assert r.status_code == 404, (r.status_code, r.headers.get("location"))
    assert r.json() == {"detail": f"no job {shown}", "field": "job_id"}


# -- a header sent twice ----------------------------------------------------------------------------------------------

def test_content_encoding_sent_twice_is_refused_naming_it(api):
    r = api.post("/v1/jobs?dry_run=true", content=b'{"run": "true"}',
                 headers=[("Authorization", AUTH["Authorization"]), ("Content-Type", "application/json"),
                          ("Content-Encoding", "identity"), ("Content-Encoding", "gzip")])
    assert r.status_code == 400 and r.json()["field"] == "Content-Encoding", r.text


# -- the document's example ---------------------------------------------------------------------------------------------

def test_the_submit_example_try_it_out_sends_is_accepted_by_the_default_broker(api):
    content = api.get("/openapi.json").json()["paths"]["/v1/jobs"]["post"]["requestBody"]["content"]
    shown = content["application/json"]
    first = shown["example"] if "example" in shown else next(iter(shown["examples"].values()))["value"]
    r = api.post("/v1/jobs?dry_run=true", json=first, headers=AUTH)
    assert r.status_code == 200, r.text


# -- one 500, one traceback ---------------------------------------------------------------------------------------------

def test_an_unexpected_error_is_answered_and_logged_once_and_goes_no_further(tmp_path, caplog):
    app = create_app(load_settings({"BROKER_DATA_DIR": str(tmp_path), "BROKER_ADMIN_TOKEN": ADMIN}), engine=False)

    @app.get("/v1/test-bug")
    def bug():
        raise RuntimeError("a bug")

    caplog.set_level(logging.ERROR)
    # raise_server_exceptions: what the app raises past its handlers reaches the client here, as it reached uvicorn,
    # which logged it again ("Exception in ASGI application", with an exception group and a chained copy)
    with TestClient(app) as c:
        r = c.get("/v1/test-bug", headers=AUTH)
    assert r.status_code == 500 and "unexpected error" in r.json()["detail"]
    assert r.headers["connection"] == "close"
    logged = [rec for rec in caplog.records if rec.exc_info]
    assert len(logged) == 1 and logged[0].name == "broker.api"
    assert json.dumps(r.json())  # a plain answer, no traceback in it
    assert "Traceback" not in r.text
