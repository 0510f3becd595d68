"""The published OpenAPI document is true, and no input makes a 5xx.

Schemathesis generates requests from ``/openapi.json`` (valid ones and broken ones: wrong types,
bytes that are not text, missing fields) and sends them to the real app in process, with the
admin token, a team's token or none, at jobs that exist (queued, cancelled, another team's) as
well as at made-up ids. Every answer must be a status the document lists for that route, with the
content type, headers and body it documents (a job: ``JobOut``, with its attempts; errors:
``{"detail", "field"}``), and never a 5xx.
What it found when it was added: a body that is not UTF-8 sent to ``/budget`` or ``/progress``
was a 500; a retried submit answered a 200 the document did not list.
"""

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (content_type_conformance, response_headers_conformance,
                                               response_schema_conformance, status_code_conformance)

from broker.api.app import create_app
from broker.engine.reconcile import Engine
from broker.lifecycle import JobState
from broker.store import open_store

from broker_testing import ADMIN, wait_for

CONFIG = """
pools:
  - {name: gpu-box, slots: 4, accelerator: A100, price_per_slot_hour: "2.00"}
zones:
  - {name: sim-a, tier: spot, instance_type: g5.xlarge}
default_budget_usd: "10"
"""
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance,
          response_headers_conformance]
CALLERS = ({"Authorization": f"Bearer {ADMIN}"}, {"Authorization": "Bearer vision-token"}, {})


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The app (engine off: nothing generated is ever run) and the ids of a few real jobs: one that
    ran to success (attempt, logs, events), one queued, another team's, one cancelled."""
    from broker.config import load_settings

    tmp = tmp_path_factory.mktemp("openapi")
    (tmp / "config.yaml").write_text(CONFIG)
    env = {"BROKER_DATA_DIR": str(tmp / "data"), "BROKER_ADMIN_TOKEN": ADMIN,
           "BROKER_TEAM_TOKENS": '{"vision": "vision-token", "nlp": "nlp-token"}'}
    app = create_app(load_settings(env, config_path=tmp / "config.yaml"),
                     store=open_store(f"sqlite://{tmp / 'api.db'}"), engine=False)
    with TestClient(app) as client:
        def submit(token):
            r = client.post("/v1/jobs", json={"run": "true", "resources": {"accelerators": "A100:1"}},
                            headers={"Authorization": f"Bearer {token}"})
            assert r.status_code == 201, r.text
            return r.json()["id"]

        ran = submit("vision-token")  # run through the engine first, so that it has an attempt, logs and events
        service = app.state.service
        engine = Engine(service.settings, service.store, service.launcher)
        wait_for(lambda: engine.tick() or service.store.get_job(ran).state is JobState.SUCCEEDED, timeout=30)
        queued, nlp = submit("vision-token"), submit("nlp-token")
        cancelled = submit("vision-token")
        assert client.post(f"/v1/jobs/{cancelled}/cancel", headers={"Authorization": f"Bearer {ADMIN}"}).status_code == 200
        yield app, [ran, queued, nlp, cancelled, "j-0000000000"]


@pytest.fixture(scope="module")
def api_schema(world):
    return schemathesis.openapi.from_asgi("/openapi.json", world[0])


OPERATIONS = [
    "GET /v1/healthz", "GET /v1/readyz", "POST /v1/jobs", "GET /v1/jobs", "GET /v1/jobs/{job_id}",
    "GET /v1/jobs/{job_id}/events",
    "GET /v1/jobs/{job_id}/logs", "POST /v1/jobs/{job_id}/cancel", "POST /v1/jobs/{job_id}/resume",
    "POST /v1/jobs/{job_id}/budget", "POST /v1/jobs/{job_id}/deadline", "POST /v1/jobs/{job_id}/ondemand", "DELETE /v1/jobs/{job_id}/ondemand",
    "POST /v1/jobs/{job_id}/progress",
    "GET /v1/jobs/{job_id}/metrics", "POST /v1/admin/faults", "GET /v1/zones", "GET /v1/costs",
    "GET /v1/costs/jobs/{job_id}", "GET /v1/workdirs", "GET /v1/workdirs/{digest}", "PUT /v1/workdirs/{digest}",
    "GET /v1/whoami",
    "POST /v1/jobs/cancel",  # last: it may cancel the world's jobs that the operations before it read
]


def test_every_documented_operation_is_fuzzed(api_schema):
    assert sorted(r.ok().label for r in api_schema.get_all_operations()) == sorted(OPERATIONS)


@pytest.mark.parametrize("label", OPERATIONS)
def test_every_answer_is_one_the_document_lists_and_none_is_a_5xx(label, world, api_schema):
    operation = api_schema.find_operation_by_label(label)
    job_ids = world[1] if "{job_id}" in label else [None]
    cases = st.one_of([operation.as_strategy(mode, path_parameters={"job_id": j} if j else None)
                       for mode in GenerationMode for j in job_ids])

    @given(case=cases, caller=st.sampled_from(CALLERS))
    @settings(max_examples=40, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    def answer_is_documented(case, caller):
        case.call_and_validate(headers=caller, checks=CHECKS)

    answer_is_documented()
