"""What an API integrator found reading ``/openapi.json`` against the API: no bearer security scheme (the token was an
optional header parameter of each route, so Swagger UI had no "Authorize" and generated clients no token setting),
an untyped ``/v1/jobs/{id}/metrics`` whose points matched no schema, JobOut saying every time is ISO though the
reported ones are epoch seconds, and request bodies and headers documented narrower or looser than they are read."""

from __future__ import annotations

import jsonschema
import pytest
from fastapi.testclient import TestClient

from broker.api.app import create_app
from broker.auth import job_token
from broker.config import load_settings

from broker_testing import ADMIN

AUTH = {"Authorization": f"Bearer {ADMIN}"}


@pytest.fixture
def world(tmp_path):
    """The broker as a fresh install runs it (the default config), its settings, and its OpenAPI document."""
    settings = load_settings({"BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_ADMIN_TOKEN": ADMIN})
    with TestClient(create_app(settings, engine=False), raise_server_exceptions=False) as c:
        yield c, settings, c.get("/openapi.json").json()


def _resolved(doc: dict, schema: dict) -> dict:
    """``schema`` with the document's components beside it, so that its ``$ref``s resolve."""
    return {**schema, "components": doc["components"]}


def test_the_bearer_token_is_a_security_scheme_asked_by_the_routes_that_need_one(world):
    c, _, doc = world
    schemes = doc["components"]["securitySchemes"]
    assert schemes["bearerAuth"] == {**schemes["bearerAuth"], "type": "http", "scheme": "bearer"}
    assert schemes["jobToken"]["type"] == "http" and schemes["jobToken"]["scheme"] == "bearer"
    assert doc["security"] == [{"bearerAuth": []}]
    paths = doc["paths"]
    for path, method in [("/v1/jobs", "post"), ("/v1/jobs", "get"), ("/v1/jobs/{job_id}/metrics", "get"),
                         ("/v1/costs", "get"), ("/v1/whoami", "get")]:
        assert paths[path][method].get("security", doc["security"]) == [{"bearerAuth": []}], (method, path)
        assert c.request(method, path.replace("{job_id}", "j-0000000000")).status_code == 401  # as documented
    for path in ("/v1/healthz", "/v1/readyz"):  # open: a balancer's check sends no token
        assert paths[path]["get"]["security"] == []
        assert c.get(path).status_code == 200
    assert paths["/v1/jobs/{job_id}/progress"]["post"]["security"] == [{"jobToken": []}]
    # the token is no longer an optional header parameter of each route (clients sent it twice, or not at all)
    headers = [(path, p["name"]) for path, ops in paths.items() for op in ops.values()
               for p in op.get("parameters", []) if p["in"] == "header"]
    assert not [h for h in headers if h[1].lower() == "authorization"], headers
    assert ("/v1/jobs", "idempotency-key") in headers  # the other header parameters stay


def test_the_metrics_route_documents_the_points_it_answers(world):
    c, settings, doc = world
    job_id = c.post("/v1/jobs", json={"run": "true", "resources": {"cpus": 1}}, headers=AUTH).json()["id"]
    as_job = {"Authorization": f"Bearer {job_token(settings, job_id)}", "Content-Type": "application/json"}
    for body in ('{"step": 3, "total_steps": 10, "metrics": {"loss": 0.5}, "attempt": 0}',  # refused: attempt 0
                 '{"step": 3, "total_steps": 10, "metrics": {"loss": 0.5}}',
                 '{"step": 4, "metrics": {"loss": NaN, "lr": 1}}'):  # no total_steps; a diverged loss
        c.post(f"/v1/jobs/{job_id}/progress", content=body, headers=as_job)
    answer = c.get(f"/v1/jobs/{job_id}/metrics", headers=AUTH).json()
    points = answer["points"]
    assert [p["step"] for p in points] == [3, 4] and points[1]["metrics"]["loss"] is None
    assert "total_steps" not in points[1] and "seq" in points[1]  # what the route answers, unchanged

    schema = doc["paths"]["/v1/jobs/{job_id}/metrics"]["get"]["responses"]["200"]["content"]["application/json"]
    jsonschema.validate(answer, _resolved(doc, schema["schema"]))
    point = doc["components"]["schemas"]["ReportedPoint"]
    assert "seq" in point["required"] and "total_steps" not in point["required"]
    assert {"type": "null"} in point["properties"]["metrics"]["additionalProperties"]["anyOf"]
    assert point["properties"]["time"]["type"] == "number" and "epoch" in point["properties"]["time"]["description"]


def test_job_out_says_which_times_are_epoch_seconds_not_that_all_are_iso(world):
    c, settings, doc = world
    job_out = doc["components"]["schemas"]["JobOut"]
    assert "times are ISO 8601 UTC" not in job_out["description"]
    for field in ("progress.at", "progress.first_at", "last_checkpoint.at"):
        assert field in job_out["description"]
    assert "epoch" in job_out["properties"]["progress"]["description"]
    assert "epoch" in job_out["properties"]["last_checkpoint"]["description"]
    job = c.post("/v1/jobs", json={"run": "true", "resources": {"cpus": 1}}, headers=AUTH).json()
    job_id, base = job["id"], job["checkpoint_uri"].rstrip("/")
    as_job = {"Authorization": f"Bearer {job_token(settings, job_id)}"}
    r = c.post(f"/v1/jobs/{job_id}/progress", json={"step": 5, "checkpoint": {"step": 5, "uri": f"{base}/step-5"}},
               headers=as_job)
    assert r.status_code == 200, r.text
    job = c.get(f"/v1/jobs/{job_id}", headers=AUTH).json()
    assert isinstance(job["progress"]["at"], float) and isinstance(job["last_checkpoint"]["at"], float)  # unchanged


def test_request_bodies_and_headers_are_documented_as_they_are_read(world):
    c, _, doc = world
    resume = doc["paths"]["/v1/jobs/{job_id}/resume"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    body = {"envs": {"DEBUG": True}}
    jsonschema.validate(body, resume)  # a boolean is taken: refused by the document, a generated client would not send it
    job_id = c.post("/v1/jobs", json={"run": "true", "resources": {"cpus": 1}}, headers=AUTH).json()["id"]
    r = c.post(f"/v1/jobs/{job_id}/resume", json=body, headers=AUTH)
    assert r.status_code == 409 and r.json()["field"] != "envs.DEBUG", r.text  # the envs pass; a queued job is not resumed

    budget = doc["paths"]["/v1/jobs/{job_id}/budget"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert budget["additionalProperties"] is False
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"budget_usd": "40", "deadline": "6h"}, budget)
    r = c.post(f"/v1/jobs/{job_id}/budget", json={"budget_usd": "40", "deadline": "6h"}, headers=AUTH)
    assert r.status_code == 422 and r.json()["field"] == "deadline"  # as the document now says

    key = next(p for p in doc["paths"]["/v1/jobs"]["post"]["parameters"] if p["name"] == "idempotency-key")
    assert "1 to 200 characters" in key["description"]
    for sent in ("", "k" * 201):
        r = c.post("/v1/jobs", json={"run": "true"}, headers={**AUTH, "Idempotency-Key": sent})
        assert r.status_code == 422 and "must be 1 to 200 characters" in r.json()["detail"], r.text
