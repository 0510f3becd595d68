"""A query parameter with no value (``?team=``, ``?state=``, ``?limit=``, a bare ``?team``) is a 422 naming it.

The routes read an empty value each their own way: ``GET /v1/jobs?team=`` and ``GET /v1/costs?team=`` as no
filter (an admin's every team: a script's unset ``$TEAM`` widened what it was shown), ``?state=`` as a state the
broker does not know, ``?limit=`` and ``?offset=`` as a number FastAPI could not read, ``/v1/costs?period=`` as
the default week alone but as a second window beside ``since``. Now one rule on every ``/v1`` route, and the
CLI refuses an empty option the same way instead of leaving it out.
"""

from __future__ import annotations

import pytest
from testports import free_port

from broker import cli
from broker.lifecycle import JobState

from . import world
from .conftest import auth

SAYS = "is empty: give it a value, or leave it out for the default"


def refused(r, field: str) -> None:
    assert r.status_code == 422, (r.request.url, r.text)
    assert r.json() == {"field": field, "detail": f"{field}: {SAYS}"}, r.request.url


@pytest.mark.parametrize("method, url, field", [
    pytest.param("GET", "/v1/jobs?team=", "team", id="an empty team is not every team's jobs"),
    pytest.param("GET", "/v1/jobs?team", "team", id="a bare team with no = is empty too"),
    pytest.param("GET", "/v1/jobs?state=", "state", id="an empty state names the parameter, not the list of states"),
    pytest.param("GET", "/v1/jobs?limit=", "limit", id="an empty limit is empty, not 'not a valid integer'"),
    pytest.param("GET", "/v1/jobs?state=queued&team=", "team", id="an empty one beside a filled one is named"),
    pytest.param("GET", "/v1/costs?team=", "team", id="an empty team is not every team's costs"),
    pytest.param("GET", "/v1/costs?period=", "period", id="an empty period is not the default week"),
    pytest.param("GET", "/v1/costs?period=&since=2026-01-01", "period",
                 id="an empty period beside since is named as empty, not as a second window"),
    pytest.param("GET", "/v1/costs?since=", "since", id="an empty since is not the default week"),
    pytest.param("GET", "/v1/costs?period=30d&until=", "until", id="an empty until is not now"),
    pytest.param("GET", "/v1/jobs/j-a1/logs?offset=", "offset", id="an empty log offset"),
    pytest.param("GET", "/v1/jobs/j-a1/logs?attempt=", "attempt", id="an empty attempt is not the newest"),
    pytest.param("POST", "/v1/jobs/j-b1/resume?force=", "force", id="an empty force on a resume"),
    pytest.param("POST", "/v1/jobs/j-b1/ondemand?force=", "force", id="an empty force on a switch to on-demand"),
])
@pytest.mark.parametrize("token", [world.ADMIN, world.TOKENS["team-b"]], ids=["admin", "a team's token"])
def test_an_empty_query_value_is_a_422_naming_the_parameter(client, store, method, url, field, token):
    refused(client.request(method, url, headers=auth(token)), field)
    assert store.get_job("j-b1").state is JobState.FAILED  # nothing was done


def test_every_parameter_of_every_api_route_refuses_an_empty_value(client):
    """The rule is the app's, not each route's: every query parameter the OpenAPI document lists, those of routes
    added later too."""
    spec = client.get("/openapi.json").json()
    checked = 0
    for path, ops in spec["paths"].items():
        if not path.startswith("/v1/") or path in ("/v1/healthz", "/v1/readyz"):
            continue
        for method, op in ops.items():
            url = path.replace("{job_id}", "j-a1").replace("{digest}", "sha256:" + "0" * 64)
            for p in op.get("parameters", []):
                if p["in"] == "query":
                    refused(client.request(method.upper(), f"{url}?{p['name']}=", headers=auth(world.ADMIN)),
                            p["name"])
                    checked += 1
    assert checked >= 10, checked


def test_the_openapi_document_says_a_text_parameter_takes_no_empty_value(client):
    """A generated client, or a reader of /docs, learns the rule from the document: every text query parameter of a
    ``/v1`` route has ``minLength: 1`` (numbers and booleans already exclude an empty value by their type)."""
    spec = client.get("/openapi.json").json()
    text = {}
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            for p in op.get("parameters", []):
                schemas = p["schema"].get("anyOf", [p["schema"]])
                for schema in schemas:
                    if p["in"] == "query" and schema.get("type") == "string":
                        text[f"{method.upper()} {path}?{p['name']}"] = schema.get("minLength")
    assert set(text) >= {"GET /v1/jobs?state", "GET /v1/jobs?team", "GET /v1/costs?team", "GET /v1/costs?period",
                         "GET /v1/costs?since", "GET /v1/costs?until"}, text
    assert {k: v for k, v in text.items() if v != 1} == {}


def test_leaving_the_parameter_out_still_asks_for_the_default(client):
    jobs = client.get("/v1/jobs", headers=auth(world.ADMIN))
    assert jobs.status_code == 200 and len(jobs.json()["jobs"]) > 1
    costs = client.get("/v1/costs", headers=auth(world.ADMIN))
    assert costs.status_code == 200 and costs.json()["window"]["period"] == "7d" and costs.json()["team"] is None
    assert client.get("/v1/jobs?team=team-a&state=running&limit=5", headers=auth(world.ADMIN)).status_code == 200


def test_the_probes_and_the_routes_outside_the_api_keep_taking_empty_values(client):
    """A load balancer's check is set up outside the broker; the dashboard page and /metrics are not the JSON API."""
    assert client.get("/v1/healthz?check=").status_code == 200
    assert client.get("/v1/readyz?check=").status_code == 200
    assert client.get("/dashboard?team=").status_code == 200
    assert client.get("/metrics?x=").status_code == 200


def test_a_repeated_parameter_is_still_named_before_an_empty_one(client):
    r = client.get("/v1/jobs?state=&state=queued", headers=auth(world.ADMIN))
    assert r.status_code == 422 and r.json()["field"] == "state" and "given 2 times" in r.json()["detail"]


# -- the CLI ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv, option", [
    pytest.param(["status", "--team", ""], "--team", id="status --team '' is not every team's jobs"),
    pytest.param(["status", "--state="], "--state", id="status --state= is not every job"),
    pytest.param(["status", ""], "id", id="status '' is not the list of jobs"),
    pytest.param(["queue", "--team", " "], "--team", id="queue --team ' ' is not every team's queue"),
    pytest.param(["costs", "--team", ""], "--team", id="costs --team '' is not every team's costs"),
    pytest.param(["costs", "--period", ""], "--period", id="costs --period '' is not the default week"),
    pytest.param(["costs", "--since", "", "--until", "2026-01-01"], "--since", id="costs --since ''"),
    pytest.param(["costs", ""], "id", id="costs '' is not the team report"),
    pytest.param(["submit", "task.yaml", "--idempotency-key", ""], "--idempotency-key",
                 id="submit --idempotency-key '' is not a fresh key"),
])
def test_the_cli_refuses_an_empty_option_before_asking_the_broker(capsys, argv, option):
    """The CLI left an empty option out (``if v``), so ``--team "$TEAM"`` with TEAM unset asked for every team. The
    URL is a port nothing listens on: a request sent would have been a connection error (exit 1), not a usage one."""
    url = f"http://127.0.0.1:{free_port()}"
    assert cli.main(["--url", url, "--token", "t", *argv]) == 2
    assert f"argument {option}: {SAYS}" in capsys.readouterr().err


@pytest.mark.parametrize("method, url, takes", [
    pytest.param("GET", "/v1/jobs?=", "GET /v1/jobs takes state, team, name, limit, cursor", id="?= names the problem, not ''"),
    pytest.param("GET", "/v1/jobs?=queued", "GET /v1/jobs takes state, team, name, limit, cursor", id="a value with no name"),
    pytest.param("GET", "/v1/jobs?state=queued&=", "GET /v1/jobs takes state, team, name, limit, cursor",
                 id="a nameless one beside a good one"),
    pytest.param("GET", "/v1/costs?=", "GET /v1/costs takes team, period, since, until", id="on the cost report"),
    pytest.param("POST", "/v1/jobs/j-b1/resume?=", "POST /v1/jobs/{job_id}/resume takes force",
                 id="on a resume, which is not done"),
])
def test_a_query_parameter_with_no_name_is_a_422_that_says_so(client, store, method, url, takes):
    """``?=`` (a script's ``?$NAME=$VALUE`` with both unset) was refused as ": is not a query parameter of ...", an
    empty name before the colon and no field: now ``query``, saying what is wrong."""
    r = client.request(method, url, headers=auth(world.ADMIN))
    assert r.status_code == 422, r.text
    assert r.json() == {"field": "query", "detail": "query: holds a parameter with no name (an '=' with nothing "
                                                    f"before it): name it, or leave it out; {takes}"}
    assert store.get_job("j-b1").state is JobState.FAILED  # nothing was done
