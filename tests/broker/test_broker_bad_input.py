"""Bad input found by fuzzing the HTTP API (schemathesis, and bodies written by hand) against a real ``broker serve``:
each was a 500, a hang or a job that could never run. Each is now a 4xx naming the field and the reason, and the
broker goes on answering (its list and its cost report too) with nothing stored."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from broker.api.app import create_app
from broker.auth import job_token
from broker.store import open_store

from broker_testing import ADMIN, wait_for

CONFIG = """
pools:
  - {name: gpu-box, slots: 4, accelerator: A100, price_per_slot_hour: "2.00"}
  - {name: cpu, slots: 2, price_per_slot_hour: "0.10"}
"""
AUTH = {"Authorization": f"Bearer {ADMIN}"}
JSON = {**AUTH, "Content-Type": "application/json"}
YAML = {**AUTH, "Content-Type": "application/yaml"}


def _bomb(levels: int) -> str:
    """A "billion laughs": each level an alias of the one before, nine times over (9**levels * 9 strings)."""
    text = 'run: echo hi\nconfig:\n  l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    for i in range(1, levels + 1):
        text += f"  l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]\n"
    return text


@pytest.fixture
def client(make_settings, tmp_path):
    settings = make_settings(config=CONFIG)
    app = create_app(settings, store=open_store(f"sqlite://{tmp_path / 'api.db'}"), engine=False)
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def _still_answers(client) -> None:
    assert client.get("/v1/jobs", headers=AUTH).json()["jobs"] == []  # nothing half-created
    assert client.get("/v1/costs", headers=AUTH).status_code == 200


@pytest.mark.parametrize("body, headers, field, says", [
    pytest.param(_bomb(6), YAML, "body", "expands through its aliases",
                 id="YAML aliases that expand to 40 MB are a 422, not a broker stuck writing them out"),
    pytest.param("run: echo hi\nconfig: &a [1, *a]\n", YAML, "config[1]", "a loop",
                 id="an alias inside itself is a 422 naming where"),
    pytest.param("run: echo hi\nconfig: " + "[" * 50_000 + "]" * 50_000, YAML, "body", "levels deep",
                 id="YAML nested 50,000 deep is a 422, not a RecursionError"),
    pytest.param('{"run": "echo hi", "config": ' + "[" * 50_000 + "]" * 50_000 + "}", JSON, "body", "levels deep",
                 id="JSON nested 50,000 deep is a 422, not a RecursionError"),
    pytest.param('{"run": "echo hi", "config": ' + "[" * 150 + "]" * 150 + "}", JSON, "config", "levels deep",
                 id="JSON nested 150 deep names its top-level field"),
    pytest.param("run: echo hi\nfile_mounts: [" + "1," * 450_000 + "1]\n", YAML, "body", "more than 50,000 keys",
                 id="a YAML body of 450,000 tiny values is a 422 before 4-5 s of CPU builds them"),
    pytest.param("run: echo hi\nenvs: {MASK: 0x1F}\n", YAML, "envs.MASK",
                 "is 0x1F, which YAML reads as the number 31: the variable would hold '31'",
                 id="an unquoted hex environment value is a 422, not a variable holding 31"),
    pytest.param("run: echo hi\nenvs: {DEBUG: yes}\n", YAML, "envs.DEBUG",
                 "is yes, which YAML reads as the boolean True: the variable would hold 'True'",
                 id="an unquoted yes is a 422, not a variable holding True"),
    pytest.param("run: echo hi\nenvs: {PYTHON_VERSION: 3.10}\n", YAML, "envs.PYTHON_VERSION",
                 "is 3.10, which YAML reads as the number 3.1: the variable would hold '3.1'; quote it ('3.10')",
                 id="an unquoted 3.10 is a 422, not a variable holding 3.1"),
    pytest.param("run: echo hi\nenvs: {DROPOUT: .5}\n", YAML, "envs.DROPOUT",
                 "is .5, which YAML reads as the number 0.5: the variable would hold '0.5'",
                 id="an unquoted float with no digit before its point is a 422, not a variable holding another spelling"),
    pytest.param("run: echo hi\nenvs: {STEPS: 1_000}\n", YAML, "envs.STEPS",
                 "is 1_000, which YAML reads as the number 1000: the variable would hold '1000'",
                 id="an unquoted number with an underscore is a 422, not a variable holding it without"),
    pytest.param("run: echo hi\nsecrets: {PIN: .50}\n", YAML, "secrets.PIN", "its value is not shown",
                 id="a secret YAML reads as a float of another spelling is refused without echoing it"),
    pytest.param("run: echo hi\nsecrets: {TOKEN: 0b1011}\n", YAML, "secrets.TOKEN", "its value is not shown",
                 id="a secret YAML would read as another value is refused without echoing it"),
    pytest.param("run: echo hi\nnum_nodes: " + "9" * 5000 + "\n", YAML, "num_nodes", "digits",
                 id="a YAML number of 5000 digits is a 422 naming it"),
    pytest.param("run: echo hi\nenvs: {SEED: 0x" + "f" * 5000 + "}\n", YAML, "envs.SEED", "digits",
                 id="a YAML hex number of 5000 digits (6000 in decimal) is a 422 naming it, not a 500 storing it"),
    pytest.param('{"run": "echo hi", "num_nodes": ' + "9" * 5000 + "}", JSON, "num_nodes", "digits",
                 id="a JSON number of 5000 digits is a 422 naming it"),
    pytest.param("run: echo hi\nbroker:\n  budget_usd: 1\n  budget_usd: 1000\n", YAML, "broker.budget_usd", "twice",
                 id="a YAML key given twice is a 422, not the last one silently winning"),
    pytest.param('{"run": "echo hi", "broker": {"budget_usd": 1, "budget_usd": 1000}}', JSON, "broker.budget_usd",
                 "twice", id="a JSON key given twice is a 422 too"),
    pytest.param("run: echo hi\nenvs: {A: !!binary aGVsbG8=}\n", YAML, "envs.A", "binary",
                 id="YAML binary data is a 422, not a job that cannot be stored"),
    pytest.param("run: echo hi\nconfig: !!set {a, b}\n", YAML, "config", "set", id="a YAML set is a 422"),
    pytest.param("run: echo hi\nfile_mounts: {/d: 2026-01-01}\n", YAML, "file_mounts./d", "quote it",
                 id="an unquoted YAML date outside broker.deadline is a 422 saying to quote it"),
    pytest.param("run: echo hi\nresources: {disk_size: .nan}\n", YAML, "resources.disk_size", "finite",
                 id="a YAML NaN is a 422, not a stored job the cost report cannot read"),
    pytest.param('{"run": "echo hi", "resources": {"any_of": [{"disk_size": Infinity}]}}', JSON,
                 "resources.any_of[0].disk_size", "finite", id="a JSON Infinity is a 422 naming where"),
    pytest.param('{"run": "echo hi", "resources": {"labels": {"a": "\\ud800"}}}', JSON, "resources.labels.a",
                 "surrogate", id="a lone surrogate in a label is a 422, not a job that breaks its team's list"),
    pytest.param('{"run": "echo hi", "config": {"\\ud800": 1}}', JSON, "config.\\ud800", "surrogate",
                 id="a lone surrogate in a key is a 422 whose answer is UTF-8"),
    pytest.param('{"run": "echo hi", "broker": {"checkpoint": "s3://b/\\ud800"}}', JSON, "broker.checkpoint",
                 "surrogate", id="a lone surrogate in broker.checkpoint is a 422, not a stored job and a 500"),
    pytest.param('{"run": "echo hi", "broker": {"checkpoint": "s3://b/\\u0000"}}', JSON, "broker.checkpoint",
                 "control", id="a NUL in broker.checkpoint is a 422, not every attempt lost at launch"),
    pytest.param(json.dumps({"run": "echo hi", "broker": {"checkpoint": "s3://b/" + "a" * 200_000}}), JSON,
                 "broker.checkpoint", "4096", id="a checkpoint longer than an environment holds is a 422"),
    pytest.param('{"run": "echo hi", "resources": {"accelerators": "A100:inf"}}', JSON, "resources.accelerators",
                 "positive whole", id="an accelerator count of inf is a 422, not an OverflowError"),
    pytest.param('{"run": "echo hi", "resources": {"accelerators": "A100:nan"}}', JSON, "resources.accelerators",
                 "positive whole", id="an accelerator count of nan is a 422, not an InvalidOperation"),
    pytest.param('{"run": "echo hi", "broker": {"budget_usd": "1e999999999999"}}', JSON, "broker.budget_usd",
                 "at most", id="a budget past Decimal's exponent is a 422 saying the largest"),
    pytest.param('{"run": "echo hi", "broker": {"budget_usd": "1e-999999999999"}}', JSON, "broker.budget_usd",
                 "6 decimal places", id="a budget of a vanishing fraction is refused as too precise, not as $0"),
    pytest.param('{"run": "echo hi", "broker": {"expected_hours": "1e-30", "deadline": "6h"}}', JSON,
                 "broker.expected_hours", "less than a second",
                 id="an expected length under a second is a 422, not a job the spot policy waits on for ever"),
])
def test_a_task_that_cannot_be_stored_or_run_is_a_422_naming_where(client, body, headers, field, says):
    r = client.post("/v1/jobs", content=body.encode("utf-8", "surrogatepass"), headers=headers)
    assert r.status_code == 422, r.text[:500]
    assert r.json()["field"] == field and says in r.json()["detail"], r.json()
    _still_answers(client)


def test_a_task_that_is_not_utf8_is_a_422_not_run_with_its_bytes_replaced(client):
    r = client.post("/v1/jobs", content="run: echo caf\u00e9\n".encode("latin-1"), headers=YAML)
    assert r.status_code == 422 and r.json()["field"] == "body", r.text
    assert "not UTF-8 (byte 0xe9 at offset 13)" in r.json()["detail"]
    _still_answers(client)


def test_a_task_not_utf8_after_a_byte_order_mark_names_the_byte_and_its_offset_in_the_body(client):
    """The decoder counts from after the mark: the answer named the byte after the one at fault, three bytes early."""
    r = client.post("/v1/jobs", content=b"\xef\xbb\xbf" + "run: echo caf\u00e9\n".encode("latin-1"), headers=YAML)
    assert r.status_code == 422 and r.json()["field"] == "body", r.text
    assert "not UTF-8 (byte 0xe9 at offset 16)" in r.json()["detail"], r.json()["detail"]


def test_a_json_task_after_a_byte_order_mark_is_read(client):
    r = client.post("/v1/jobs", content=b"\xef\xbb\xbf" + json.dumps({"run": "echo hi"}).encode(), headers=JSON)
    assert r.status_code == 201, r.text


@pytest.mark.parametrize("body, field", [
    ({"kind": "preempt"}, "job_id"), ({"kind": "kill", "job_id": ""}, "job_id"), ({"kind": "zone"}, "zone"),
], ids=["a preempt without job_id (was 'no job ')", "a kill of an empty job_id", "a zone change without zone (was "
        "'no simulated zone None')"])
def test_a_fault_without_what_it_hits_names_the_missing_field(client, body, field):
    r = client.post("/v1/admin/faults", json=body, headers=AUTH)
    assert r.status_code == 422 and r.json()["field"] == field and "is required" in r.json()["detail"], r.text


@pytest.mark.parametrize("body, field, says", [
    ({"kind": "zone", "zone": "sim-a", "availble": False}, "availble", "did you mean 'available'?"),
    ({"kind": "preempt", "job_id": "j-x", "grace": 5}, "grace", "known: available, job_id, kind, zone"),
], ids=["a misspelt field", "a field no fault takes"])
def test_a_fault_names_a_field_it_does_not_take(client, body, field, says):
    """A misspelt "available": false set the zone back to its trace (null) without a word, instead of taking its
    capacity away; a field no fault takes was dropped."""
    r = client.post("/v1/admin/faults", json=body, headers=AUTH)
    assert r.status_code == 422 and r.json()["field"] == field and says in r.json()["detail"], r.text


@pytest.mark.parametrize("body", [
    "run: echo hi\nresources: {any_of: [&r {cpus: 1}, *r]}\n",
    "run: echo hi\nresources:\n  <<: &base {cpus: 1}\n  memory: 1\n",
    "run: echo hi\nbroker: {deadline: 2099-01-01T00:00:00Z, budget_usd: 5}\n".replace("2099-01-01", "{soon}"),
], ids=["an alias used twice", "a merge key", "an unquoted YAML time in broker.deadline"])
def test_yaml_aliases_merge_keys_and_a_deadline_time_still_work(client, body):
    from datetime import datetime, timedelta, timezone

    soon = (datetime.now(timezone.utc) + timedelta(days=2)).strftime("%Y-%m-%d")
    r = client.post("/v1/jobs", content=body.replace("{soon}", soon), headers=YAML)
    assert r.status_code == 201, r.text


def test_a_job_stored_with_a_lone_surrogate_still_lists(client):
    """A record stored before submits refused lone surrogates: the answers escape it (\\ud800) instead of failing."""
    from dataclasses import replace

    from broker.store import Change

    job = client.post("/v1/jobs", json={"run": "echo hi"}, headers=AUTH).json()
    store = client.app.state.service.store
    stored = store.get_job(job["id"])
    store.commit(Change(job=replace(stored, checkpoint_uri="s3://b/\ud800"), expected_version=stored.version))
    listed = client.get("/v1/jobs", headers=AUTH)
    assert listed.status_code == 200 and listed.json()["jobs"][0]["checkpoint_uri"] == "s3://b/\ud800"
    assert client.get(f"/v1/jobs/{job['id']}", headers=AUTH).status_code == 200


@pytest.mark.parametrize("body, field", [
    ('{"step": 1, "metrics": {"loss": ' + "9" * 400 + "}}", "metrics"),
    ('{"step": 1, "metrics": {"\\ud800": 1}}', "metrics.\\ud800"),
    ('{"step": 99999999999999999999}', "step"),
    ('{"checkpoint": {"step": true, "uri": "s3://b/c"}}', "checkpoint"),
    ('{"checkpoint": {"step": -5, "uri": "s3://b/c"}}', "checkpoint"),
    ('{"checkpoint": {"step": 5, "uri": "s3://b/\\u0000"}}', "checkpoint.uri"),
    ('{"checkpoint": {"step": 5, "uri": "' + "a" * 200_000 + '"}}', "checkpoint.uri"),
    ("[" * 50_000 + "]" * 50_000, "body"),
    ('{"step": 2, "metrics": []}', "metrics"),
    ('{"step": 2, "metrics": false}', "metrics"),
    ('{"step": 2, "metrics": ""}', "metrics"),
    ('{"checkpoint": {"step": 3, "uri": "../../other"}}', "checkpoint.uri"),
    ('{"checkpoint": {"step": 3, "uri": "javascript:alert(1)"}}', "checkpoint.uri"),
], ids=["a metric past 64 bits", "a metric named by a lone surrogate", "a step past 64 bits",
        "a checkpoint step that is a boolean", "a negative checkpoint step",
        "a checkpoint URI with a NUL (the next attempt could not be given it)",
        "a checkpoint URI of 200 kB (every later attempt failed at launch, E2BIG, and was retried 20 times)",
        "a body nested 50,000 deep (a RecursionError)",
        "metrics that are a list (were kept as no metrics)", "metrics that are false", "metrics that are empty text",
        "a relative checkpoint URI (was handed to the next attempt as where to resume from)",
        "a checkpoint URI that names no storage"])
def test_a_progress_report_that_cannot_be_kept_is_a_422_and_changes_nothing(make_settings, tmp_path, body, field):
    settings = make_settings(config=CONFIG)
    app = create_app(settings, store=open_store(f"sqlite://{tmp_path / 'p.db'}"), engine=False)
    with TestClient(app, raise_server_exceptions=False) as client:
        job_id = client.post("/v1/jobs", json={"run": "echo hi"}, headers=AUTH).json()["id"]
        as_job = {"Authorization": f"Bearer {job_token(settings, job_id)}", "Content-Type": "application/json"}
        r = client.post(f"/v1/jobs/{job_id}/progress", content=body.encode("utf-8", "surrogatepass"), headers=as_job)
        assert r.status_code == 422 and r.json()["field"] == field, r.text[:300]
        view = client.get(f"/v1/jobs/{job_id}", headers=AUTH).json()
        assert view["progress"] is None and view["last_checkpoint"] is None
        assert client.get(f"/v1/jobs/{job_id}/metrics", headers=AUTH).json() == {"points": []}
        assert client.get(f"/v1/costs/jobs/{job_id}", headers=AUTH).status_code == 200


@pytest.mark.parametrize("loss", ["NaN", "Infinity", "1e400"])
def test_a_diverged_loss_is_kept_as_null_with_the_rest_of_the_report(make_settings, tmp_path, loss):
    """checkpoint.progress sends a NaN loss as json.dumps writes it. Stored as NaN, the job's metrics and its cost
    report were 500s ever after; refused, the report's step would be lost too."""
    settings = make_settings(config=CONFIG)
    app = create_app(settings, store=open_store(f"sqlite://{tmp_path / 'p.db'}"), engine=False)
    with TestClient(app, raise_server_exceptions=False) as client:
        job_id = client.post("/v1/jobs", json={"run": "echo hi"}, headers=AUTH).json()["id"]
        as_job = {"Authorization": f"Bearer {job_token(settings, job_id)}", "Content-Type": "application/json"}
        body = '{"step": 7, "metrics": {"loss": %s, "lr": 0.1}}' % loss
        assert client.post(f"/v1/jobs/{job_id}/progress", content=body, headers=as_job).status_code == 200
        assert client.get(f"/v1/jobs/{job_id}", headers=AUTH).json()["progress"]["step"] == 7
        points = client.get(f"/v1/jobs/{job_id}/metrics", headers=AUTH)
        assert points.status_code == 200 and points.json()["points"][0]["metrics"] == {"loss": None, "lr": 0.1}
        assert client.get(f"/v1/costs/jobs/{job_id}", headers=AUTH).status_code == 200
        assert client.get("/v1/costs", headers=AUTH).status_code == 200


@pytest.fixture
def served_over_http(make_settings, tmp_path):
    """The broker on a loopback port (uvicorn in a thread), and the settings that mint its job tokens."""
    import socket
    import threading
    import time

    import uvicorn

    settings = make_settings(config=CONFIG)
    app = create_app(settings, store=open_store(f"sqlite://{tmp_path / 'http.db'}"), engine=False)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}", settings
    server.should_exit = True
    thread.join(5)


def test_the_checkpoint_librarys_report_with_metrics_beyond_the_brokers_limits_keeps_its_step(served_over_http):
    """A metric named by 201 characters, a 51st metric, a bool or a 20-digit int: the broker refused the whole report
    (its step too), and checkpoint.progress swallowed the 422, so the script never knew. Such a metric is now left out,
    with a warning naming it and the limit, once."""
    import httpx

    from checkpoint.errors import CheckpointWarning
    from checkpoint.progress import MAX_METRIC_NAME, MAX_METRICS, Reporter

    url, settings = served_over_http
    with httpx.Client(base_url=url, headers=AUTH, timeout=10) as http:
        job_id = http.post("/v1/jobs", json={"run": "echo hi"}).json()["id"]
        reporter = Reporter(f"{url}/v1/jobs/{job_id}/progress", job_token(settings, job_id), interval_s=3600,
                            clock=lambda: 0.0)
        assert reporter.report(1, 10)  # sent; the next ones are held by the rate limit and sent by flush(), here
        wait_for(lambda: (http.get(f"/v1/jobs/{job_id}").json().get("progress") or {}).get("step") == 1, timeout=10)

        long_name, longest = "x" * (MAX_METRIC_NAME + 1), "y" * MAX_METRIC_NAME
        with pytest.warns(CheckpointWarning, match=f"at most {MAX_METRIC_NAME} characters, this one has 201"):
            reporter.report(7, 10, {"loss": 0.5, long_name: 1.0, longest: 2.0, "converged": True, "seen": 10**20})
        assert reporter.flush(timeout=10), "the broker refused the report"
        job = http.get(f"/v1/jobs/{job_id}").json()
        assert job["progress"]["step"] == 7
        assert job["progress"]["metrics"] == {"loss": 0.5, longest: 2.0, "converged": 1.0, "seen": 1e20}

        many = {f"m{i:02d}": float(i) for i in range(MAX_METRICS + 1)}
        with pytest.warns(CheckpointWarning, match=f"m{MAX_METRICS}' is not reported: a report holds at most {MAX_METRICS}"):
            reporter.report(8, 10, many)
        assert reporter.flush(timeout=10)
        assert http.get(f"/v1/jobs/{job_id}").json()["progress"]["metrics"] == {k: many[k] for k in list(many)[:MAX_METRICS]}

        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # said once: the same names again warn no more
            reporter.report(9, 10, {long_name: 1.0, **many})
        assert reporter.flush(timeout=10) and http.get(f"/v1/jobs/{job_id}").json()["progress"]["step"] == 9


@pytest.mark.parametrize("body, field", [
    ('{"budget_usd": ' + "9" * 5000 + "}", "budget_usd"),
    ('{"budget_usd": 5, "budget_usd": 500}', "budget_usd"),
    ("[" * 50_000 + "]" * 50_000, "body"),
], ids=["a budget of 5000 digits (was 'not valid JSON')", "budget_usd given twice", "a body nested 50,000 deep"])
def test_a_budget_change_that_cannot_be_read_is_a_422_naming_why(client, body, field):
    job = client.post("/v1/jobs", json={"run": "echo hi", "broker": {"budget_usd": 5}}, headers=AUTH).json()
    r = client.post(f"/v1/jobs/{job['id']}/budget", content=body, headers=JSON)
    assert r.status_code == 422 and r.json()["field"] == field, r.text[:300]
    assert client.get(f"/v1/jobs/{job['id']}", headers=AUTH).json()["budget"]["usd"] == "$5.00"


def test_a_log_offset_the_filesystem_cannot_seek_to_reads_nothing_not_a_500(make_settings, tmp_path):
    """The API takes offsets up to 2**62; ext4 refuses a seek past 16 TiB (EINVAL). The real engine runs the job
    here, so its attempt has an output file to read."""
    settings = make_settings(config=CONFIG + "tick_seconds: 0.2\n")
    app = create_app(settings, store=open_store(f"sqlite://{tmp_path / 'l.db'}"))
    with TestClient(app, raise_server_exceptions=False) as client:
        job_id = client.post("/v1/jobs", json={"run": "echo hi"}, headers=AUTH).json()["id"]
        wait_for(lambda: client.get(f"/v1/jobs/{job_id}", headers=AUTH).json()["state"] == "succeeded", timeout=30)
        whole = client.get(f"/v1/jobs/{job_id}/logs", headers=AUTH).json()
        assert "hi" in whole["data"]
        r = client.get(f"/v1/jobs/{job_id}/logs", params={"offset": 2**62 - 1, "attempt": 1}, headers=AUTH)
        assert r.status_code == 200, r.text
        assert r.json()["data"] == "" and r.json()["offset"] == 2**62 - 1


def test_every_api_route_refuses_a_query_parameter_it_does_not_take_and_lists_those_it_does(client):
    """`GET /v1/costs?perod=30d` answered the default week, and `GET /v1/jobs?stat=queued` every job, as if nothing
    were wrong: a query parameter a route does not take is now a 422 naming it and listing those the route takes
    (as its OpenAPI document declares them), on every route of the JSON API, before anything is done."""
    spec = client.get("/openapi.json").json()  # every route of the API, those added later too
    routes = [(method.upper(), path, op) for path, ops in spec["paths"].items() for method, op in ops.items()
              if path.startswith("/v1/") and path not in ("/v1/healthz", "/v1/readyz")]
    assert {("GET", "/v1/costs"), ("GET", "/v1/costs/jobs/{job_id}"), ("POST", "/v1/jobs")} <= {r[:2] for r in routes}
    for method, path, op in routes:
        taken = [p["name"] for p in op.get("parameters", []) if p["in"] == "query"]
        url = path.replace("{job_id}", "j-nope").replace("{digest}", "sha256:" + "0" * 64)
        r = client.request(method, url, params={"bogus": "1"}, headers=JSON, content=b"{}")
        assert r.status_code == 422, (method, path, r.text)
        assert r.json() == {"field": "bogus", "detail": f"bogus: is not a query parameter of {method} {path}; it takes "
                                                        f"{', '.join(taken) if taken else 'none'}"}, (method, path)
    assert client.post("/v1/jobs?budget=1", headers=YAML, content="run: echo hi\n").status_code == 422
    _still_answers(client)  # nothing was submitted


@pytest.mark.parametrize("url, field, says", [
    pytest.param("/v1/costs?perod=30d", "perod", "(did you mean 'period'?); it takes team, period, since, until",
                 id="a typo in the cost report's window is a 422 saying the one meant, not the default week"),
    pytest.param("/v1/jobs?stat=queued&tem=a", "stat", "(did you mean 'state'?); nor is tem; it takes state, team, name, limit, cursor",
                 id="a job list's typos are named, the first as the field"),
    pytest.param("/v1/jobs/j-nope/logs?ofset=10", "ofset", "(did you mean 'offset'?); it takes offset, attempt",
                 id="a log offset misspelt is not read from 0"),
])
def test_a_misspelt_query_parameter_is_a_422_saying_the_one_meant(client, url, field, says):
    r = client.get(url, headers=AUTH)
    assert r.status_code == 422 and r.json()["field"] == field and r.json()["detail"].endswith(says), r.text


@pytest.mark.parametrize("url, field, times", [
    pytest.param("/v1/jobs?state=queued&state=running", "state", 2,
                 id="a job list asked for two states is a 422, not the last state's jobs read as all"),
    pytest.param("/v1/costs?period=7d&team=default&period=30d&period=24h", "period", 3,
                 id="a cost window given three times is a 422 naming it"),
    pytest.param("/v1/jobs/j-nope/logs?offset=0&offset=10", "offset", 2,
                 id="a log offset given twice is refused before the job is looked up"),
])
def test_a_query_parameter_given_more_than_once_is_a_422_naming_it(client, url, field, times):
    """FastAPI keeps the last of a repeated parameter without a word: `?state=queued&state=running` listed the
    running jobs alone, as if they were every job asked for."""
    r = client.get(url, headers=AUTH)
    assert r.status_code == 422, r.text
    assert r.json() == {"field": field, "detail": f"{field}: is given {times} times; it takes one value (ask once for "
                                                  f"each)"}


def test_the_parameters_a_route_takes_and_the_probes_query_strings_are_still_answered(client):
    assert client.get("/v1/costs?period=30d&team=default", headers=AUTH).status_code == 200
    assert client.get("/v1/jobs?state=queued&limit=5", headers=AUTH).status_code == 200
    # a load balancer's check is set up outside the broker: a query string there is not refused
    assert client.get("/v1/healthz?from=lb").status_code == 200 and client.get("/v1/readyz?x=1").status_code == 200


@pytest.mark.parametrize("body, headers, field, says", [
    pytest.param('{"run": "echo hi", "resources": {"cpus": "1e999999999"}}', JSON, "resources.cpus",
                 "at most 10000 vCPUs", id="a vCPU count past what Decimal writes out is a 422, not a 500"),
    pytest.param('{"run": "echo hi", "resources": {"memory": "1e999999999"}}', JSON, "resources.memory",
                 "at most 1048576 GB", id="a memory size past what Decimal writes out is a 422, not a 500"),
    pytest.param('{"run": "echo hi", "resources": {"any_of": [{"cpus": 1e300}]}}', JSON, "resources.any_of[0].cpus",
                 "no node has more", id="1e300 vCPUs is a 422 naming the field, not a refusal 300 digits long"),
    pytest.param("run: echo hi\nresources: {memory: 99999999999999PB}\n", YAML, "resources.memory", "at most",
                 id="a memory size with a unit past any node is a 422 naming it"),
    pytest.param("run: echo hi\nresources: {acelerators: 'A10G:1', any_of: [{clud: aws}]}\nbroker: {dedline: 6h, "
                 "budget_usd: 1}\n", YAML, "broker.dedline",
                 "is not a broker setting (did you mean 'deadline'?); other unknown keys: resources.acelerators (did "
                 "you mean 'accelerators'?), resources.any_of[0].clud (did you mean 'cloud'?)",
                 id="several misspelt keys are said in one 422, not one per submit"),
    pytest.param("run: echo hi\nbroker: {1: a, x: b, budget_usd: 5}\n", YAML, "broker.1", "is not a broker setting",
                 id="a YAML number and a name as unknown keys of broker: are a 422, not a 500 sorting them"),
    pytest.param("run: echo hi\nbroker: {retry: {~: 1, 2: 3}}\n", YAML, "broker.retry.2", "is not a retry setting",
                 id="keys of mixed YAML types in broker.retry are a 422, not a 500"),
    pytest.param("run: echo hi\nbroker: {expected_hours: 1:30}\n", YAML, "broker.expected_hours",
                 "is 1:30, hours and minutes: write the hours as a decimal number (1.5 for 1:30)",
                 id="expected_hours 1:30 is a 422, not planned as 90 hours, saying what to write instead"),
    pytest.param("run: echo hi\nbroker: {deadline: 1:30}\n", YAML, "broker.deadline",
                 "is a time alone (1:30): give its date too",
                 id="a deadline of 1:30 is a 422 asking for its date, not read as the base-60 number 90"),
    pytest.param("run: echo hi\nbroker: {budget_usd: 1:30}\n", YAML, "broker.budget_usd",
                 "must be an amount of dollars", id="a budget of 1:30 is a 422, not a cap of $90"),
    pytest.param("run: echo hi\nenvs: {ZIP: 010}\n", YAML, "envs.ZIP", "reads as the octal number 8: quote it ('010') to give the text as written, or write the number meant "
                 "without a leading zero (10 for ten-based, 8 for the octal reading)",
                 id="an environment value 010 is a 422, not run as 8"),
    pytest.param('{"run": "echo hi", "resources": {"accelerators": {"": 1}}}', JSON, "resources.accelerators",
                 "'' is not a name", id="an accelerator with no name is a 422 naming it, not 'no offer has it'"),
    pytest.param("run: echo hi\nresources: {accelerators: {~: 1}}\n", YAML, "resources.accelerators",
                 "None is not a name", id="a YAML null accelerator name is a 422, not a search for a GPU called None"),
    pytest.param('{"run": "echo hi", "resources": {"any_of": [{"cpus": 1}], "ordered": [{"cpus": 2}]}}', JSON,
                 "resources.ordered", "cannot be given with resources.any_of",
                 id="any_of and ordered together are a 422, not ordered dropped without a word"),
    pytest.param('{"run": "echo hi", "num_nodes": %d}' % 10**3000, JSON, "num_nodes", "at most 10000",
                 id="a node count past any cluster is a 422 naming it, not a refusal of the budget with a price "
                    "thousands of digits long"),
])
def test_a_task_misread_or_a_500_before_is_a_422_naming_where_and_leaves_its_key_free(client, body, headers, field,
                                                                                       says):
    """Found fuzzing every field of a task: each was a 500, a refusal hundreds of digits long, or a job run with
    another value than the one written. Refused, nothing is stored and the submit's Idempotency-Key is still free
    for the corrected task."""
    key = {"Idempotency-Key": "fix-and-retry"}
    r = client.post("/v1/jobs", content=body, headers={**headers, **key})
    assert r.status_code == 422, r.text[:500]
    assert r.json()["field"] == field and says in r.json()["detail"], r.json()
    assert len(r.json()["detail"]) < 300, r.json()
    _still_answers(client)
    fixed = client.post("/v1/jobs", json={"run": "echo hi"}, headers={**AUTH, **key})
    assert fixed.status_code == 201, fixed.text


def test_numbers_yaml_would_misread_are_kept_as_written_when_quoted_and_others_as_they_were(client):
    """Refusing what YAML 1.1 misreads takes nothing else: quoted, 1:30, 010 and 0x10 are the text; 07 (the same
    number in octal), 09 (not octal: text) and true read as before, as does ordered without any_of."""
    body = ("run: echo hi\nenvs: {T: '1:30', Z: '010', SEVEN: 07, NINE: 09, HEX: '0x10', HOURS: 1.5, ENABLED: true}\n"
            "resources: {ordered: [{cpus: 1}, {cpus: 2}]}\nbroker: {expected_hours: 1.5, deadline: 6h}\n")
    r = client.post("/v1/jobs", content=body, headers=YAML)
    assert r.status_code == 201, r.text
    job = client.app.state.service.store.get_job(r.json()["id"])
    assert job.spec["envs"] == {"T": "1:30", "Z": "010", "SEVEN": 7, "NINE": "09", "HEX": "0x10", "HOURS": 1.5,
                                "ENABLED": True}
    assert job.expected_hours == "1.5"


def test_a_file_mode_with_a_leading_zero_in_the_tasks_kubernetes_config_is_the_octal_mode_it_means(client):
    """SkyPilot's config is Kubernetes' YAML, where `defaultMode: 0755` is the mode 0o755 (493) as meant: refused as
    a misread octal, every pod_config with a file mode was, and the advice (drop the zero) set another mode."""
    body = ("run: echo hi\nconfig: {kubernetes: {pod_config: {spec: {volumes: [{name: keys, secret: {secretName: "
            "keys, defaultMode: 0755}}]}}}}\n")
    r = client.post("/v1/jobs", content=body, headers=YAML)
    assert r.status_code == 201, r.text
    job = client.app.state.service.store.get_job(r.json()["id"])
    assert job.spec["config"]["kubernetes"]["pod_config"]["spec"]["volumes"][0]["secret"]["defaultMode"] == 0o755


@pytest.mark.parametrize("body, field", [
    ("run: echo hi\nconfig: {x: &m 010}\nenvs: {RANK: *m}\n", "envs.RANK"),
    ("run: echo hi\nconfig: {x: &m 010}\nresources: {cpus: *m}\n", "resources.cpus"),
    ("run: echo hi\nconfig: {x: &k {RANK: 010}}\nenvs: {<<: *k}\n", "envs.<<.RANK"),
], ids=["an alias in envs", "an alias in resources", "a merge key"])
def test_a_leading_zero_anchored_under_config_is_still_refused_where_an_alias_uses_it_outside(client, body, field):
    """An anchor is checked once: set under config (where octal is meant) and used elsewhere, it slipped through, and
    RANK ran as 8."""
    r = client.post("/v1/jobs", content=body, headers=YAML)
    assert r.status_code == 422 and r.json()["field"] == field, r.text


@pytest.mark.parametrize("first, retry", [
    pytest.param({}, {"deadline": "6h"}, id="a retry adding a deadline"),
    pytest.param({"deadline": "6h"}, {}, id="a retry dropping the deadline"),
    pytest.param({"deadline": "6h"}, {"deadline": "7h"}, id="a retry with a longer deadline"),
    pytest.param({"deadline": "{day}T18:00Z"}, {"deadline": "{day}T19:00Z"}, id="a retry moving an ISO deadline"),
])
def test_an_idempotency_key_reused_with_another_deadline_is_refused_not_answered_with_the_first_job(client, first,
                                                                                                     retry):
    """The deadline is kept beside the task, not in it, and was never compared: the retry was answered 200 with the
    first job, whose deadline was not the one the retry asked for."""
    from datetime import datetime, timedelta, timezone

    day = (datetime.now(timezone.utc) + timedelta(days=2)).strftime("%Y-%m-%d")
    h = {**AUTH, "Idempotency-Key": "one-submit"}
    first, retry = ({k: v.replace("{day}", day) for k, v in section.items()} for section in (first, retry))
    made = client.post("/v1/jobs", json={"run": "echo hi", "broker": first}, headers=h)
    assert made.status_code == 201, made.text
    r = client.post("/v1/jobs", json={"run": "echo hi", "broker": retry}, headers=h)
    assert r.status_code == 422 and r.json()["field"] == "Idempotency-Key", r.text
    assert made.json()["id"] in r.json()["detail"] and "different task" in r.json()["detail"]
    assert len(client.get("/v1/jobs", headers=AUTH).json()["jobs"]) == 1


@pytest.mark.parametrize("deadline", ["6h", "{day}T18:00Z"])
def test_a_retry_with_the_same_deadline_later_is_still_the_same_submit(client, deadline):
    """A duration is the same length from each submit (the retry's deadline lies later); an ISO time the same time
    (written with another offset too)."""
    import time
    from datetime import datetime, timedelta, timezone

    day = (datetime.now(timezone.utc) + timedelta(days=2)).strftime("%Y-%m-%d")
    h = {**AUTH, "Idempotency-Key": "one-submit"}
    task = {"run": "echo hi", "broker": {"deadline": deadline.replace("{day}", day)}}
    made = client.post("/v1/jobs", json=task, headers=h)
    assert made.status_code == 201, made.text
    time.sleep(1.1)  # the clock moves on between a submit and its retry
    again = client.post("/v1/jobs", json=task, headers=h)
    assert again.status_code == 200 and again.json()["id"] == made.json()["id"], again.text
    if "T" in deadline:
        same = {"run": "echo hi", "broker": {"deadline": f"{day}T19:00+01:00"}}
        assert client.post("/v1/jobs", json=same, headers=h).json()["id"] == made.json()["id"]


def test_a_log_attempt_past_the_jobs_attempts_says_how_many_there_are(client, make_settings, tmp_path):
    """A queued job's `?attempt=2` was told "must be between 1 and 0"."""
    job_id = client.post("/v1/jobs", json={"run": "echo hi"}, headers=AUTH).json()["id"]
    r = client.get(f"/v1/jobs/{job_id}/logs", params={"attempt": 2}, headers=AUTH)
    assert r.status_code == 404 and r.json()["field"] == "attempt", r.text
    assert r.json()["detail"] == (f"attempt: is 2, but {job_id} has had no attempt (it is queued): leave attempt out "
                                  "to read the newest once it runs")
    settings = make_settings(config=CONFIG + "tick_seconds: 0.2\n")
    app = create_app(settings, store=open_store(f"sqlite://{tmp_path / 'ran.db'}"))
    with TestClient(app, raise_server_exceptions=False) as ran:
        job_id = ran.post("/v1/jobs", json={"run": "echo hi"}, headers=AUTH).json()["id"]
        wait_for(lambda: ran.get(f"/v1/jobs/{job_id}", headers=AUTH).json()["state"] == "succeeded", timeout=30)
        r = ran.get(f"/v1/jobs/{job_id}/logs", params={"attempt": 3}, headers=AUTH)
        assert r.status_code == 404 and r.json()["detail"] == f"attempt: is 3, but {job_id} has had 1 attempt: give 1"


def test_a_stored_task_is_read_as_it_was_admitted_past_the_submit_checks_added_later():
    """The engine re-reads stored tasks leniently: a job admitted before the size and accelerator-name checks (an
    offer of unknown size takes any size) still runs, while a submit of the same task is refused."""
    from broker.spec import SpecError, parse

    raw = {"run": "echo hi", "resources": {"cpus": 20000, "memory": "2PB", "accelerators": {"": 1, "A100": 1}}}
    alternatives = parse(raw, now=0, strict=False).request.alternatives
    assert [(a.accelerator, a.cpus) for a in alternatives] == [("", 20000), ("A100", 20000)]
    with pytest.raises(SpecError):
        parse(raw, now=0)


def test_a_task_of_exactly_max_nodes_is_read_and_one_more_is_refused():
    from broker.spec import SpecError
    from broker.task_text import MAX_NODES, load_text

    def task(items):  # the mapping, run, its value, config, the list: 5 nodes, then the items
        return "run: echo hi\nconfig: [" + ",".join(["1"] * items) + "]\n"

    assert len(load_text(task(MAX_NODES - 5))["config"]) == MAX_NODES - 5
    with pytest.raises(SpecError, match="more than 50,000"):
        load_text(task(MAX_NODES - 4))
