"""Bad input an audit of the HTTP API and the CLI found still taken: whole numbers read leniently (``?limit=1_0``
listed ten jobs), a cost window bound with a control character in it, a HEAD from a load balancer's check answered
405, ``--url`` with a path answered a bare "Not Found", and a made-up cursor the README said was refused."""

from __future__ import annotations

import base64
import http.client
import json
from urllib.parse import urlsplit

import pytest
from testports import free_port

from broker import cli
from broker.api.query import job_cursor
from broker.store import StoreUnavailable
from broker.store.sqlite import SqliteStore

from . import world
from .conftest import auth, build_app, serving

DIGITS = "must be written in the digits 0-9 alone: no sign, space, underscore or decimal point"
BAD_DATE = "must be an ISO date or time, like 2025-01-31 or 2025-01-31T12:00:00Z"


# -- whole numbers in the query string -------------------------------------------------------------------------


@pytest.mark.parametrize("url, field", [
    pytest.param("/v1/jobs?limit=1_0", "limit", id="an underscore in limit is not read as ten"),
    pytest.param("/v1/jobs?limit=%2B1", "limit", id="a plus sign in limit is refused"),
    pytest.param("/v1/jobs?limit=-1", "limit", id="a minus sign in limit is refused: no parameter takes a negative"),
    pytest.param("/v1/jobs?limit=%201", "limit", id="a space before limit is refused"),
    pytest.param("/v1/jobs?limit=1%20", "limit", id="a space after limit is refused"),
    pytest.param("/v1/jobs?limit=1.0", "limit", id="a decimal point in limit is refused"),
    pytest.param("/v1/jobs?limit=%EF%BC%91", "limit", id="a fullwidth digit in limit is refused"),
    pytest.param("/v1/jobs?state=queued&limit=1e1", "limit", id="an exponent in limit beside a filter is named"),
    pytest.param("/v1/jobs/j-a1/logs?offset=1.0", "offset", id="a decimal point in a log offset is refused"),
    pytest.param("/v1/jobs/j-a1/logs?offset=-0", "offset", id="minus zero is not read as log offset 0"),
    pytest.param("/v1/jobs/j-a1/logs?attempt=1_0", "attempt", id="an underscore in an attempt number is refused"),
    pytest.param("/v1/jobs/j-a1/logs?attempt=%2B1", "attempt", id="a plus sign in an attempt number is refused"),
])
def test_a_whole_number_not_written_in_digits_alone_is_a_422_naming_it(client, url, field):
    r = client.get(url, headers=auth(world.ADMIN))
    assert r.status_code == 422, r.text
    assert r.json() == {"detail": f"{field}: {DIGITS}", "field": field}


def test_a_whole_number_in_digits_is_still_read_and_its_range_still_checked(client):
    assert len(client.get("/v1/jobs?limit=1", headers=auth(world.ADMIN)).json()["jobs"]) == 1
    assert len(client.get("/v1/jobs?limit=01", headers=auth(world.ADMIN)).json()["jobs"]) == 1  # digits all the same
    assert client.get("/v1/jobs/j-a1/logs?offset=0&attempt=1", headers=auth(world.ADMIN)).status_code == 200
    r = client.get("/v1/jobs?limit=0", headers=auth(world.ADMIN))
    assert r.status_code == 422 and r.json()["field"] == "limit" and "greater than or equal to 1" in r.json()["detail"]


def test_every_whole_number_parameter_of_the_api_refuses_an_underscore(client):
    """The rule is the app's, read from each route's declared types: a whole-number parameter added later has it."""
    spec = client.get("/openapi.json").json()
    checked = []
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            for p in op.get("parameters", []):
                if p["in"] == "query" and "integer" in json.dumps(p["schema"]):
                    url = path.replace("{job_id}", "j-a1")
                    r = client.request(method.upper(), f"{url}?{p['name']}=1_0", headers=auth(world.ADMIN))
                    assert r.status_code == 422 and r.json()["field"] == p["name"], (url, r.text)
                    checked.append(p["name"])
    assert sorted(checked) == ["attempt", "limit", "offset"]


# -- a cost window's bound -------------------------------------------------------------------------------------


@pytest.mark.parametrize("since", [
    pytest.param("2026-12-01T10:00Z%00", id="a NUL after the timezone"),
    pytest.param("2026-12-01T10:00%00Z", id="a NUL before the timezone"),
    pytest.param("2026-12-01T10:00Z%0A", id="a trailing newline"),
    pytest.param("2026-12-01%09", id="a trailing tab after a date"),
    pytest.param("2026-12-01T10:00Z%1F", id="a unit separator"),
    pytest.param("2026-12-01T10:00Z%7F", id="a DEL"),
    pytest.param("2026-12-01T10:00Z%C2%85", id="a C1 next-line control"),
])
def test_a_window_bound_with_a_control_character_is_a_422_naming_it_as_other_bad_dates_are(client, since):
    r = client.get(f"/v1/costs?since={since}", headers=auth(world.ADMIN))
    assert r.status_code == 422, r.text
    assert r.json() == {"detail": f"since: {BAD_DATE}", "field": "since"}
    r = client.get(f"/v1/costs?since=2026-11-01&until={since}", headers=auth(world.ADMIN))
    assert r.json() == {"detail": f"until: {BAD_DATE}", "field": "until"}


@pytest.mark.parametrize("since", ["2026-11-30", "2026-11-30T10:00Z", "2026-W48-1", "%202026-11-30"],
                         ids=["a date", "a time with its timezone", "an ISO week date", "a date after a space"])
def test_a_window_bound_without_a_control_character_is_read_as_before(client, since):
    assert client.get(f"/v1/costs?since={since}", headers=auth(world.ADMIN)).status_code == 200


# -- the probes answer HEAD ------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/v1/healthz", "/v1/readyz"])
def test_a_load_balancers_head_on_a_probe_is_answered_as_a_get_without_the_body(client, path):
    head, get = client.head(path), client.get(path)
    assert (head.status_code, get.status_code) == (200, 200)
    assert head.content == b"" and head.headers["content-type"] == get.headers["content-type"]


def test_a_head_on_readyz_is_a_503_while_the_store_does_not_answer(tmp_path):
    from fastapi.testclient import TestClient

    class DownStore(SqliteStore):
        def get_job(self, job_id):
            raise StoreUnavailable("the store is down")

    store = DownStore(tmp_path / "down.db")
    try:
        client = TestClient(build_app(world.settings(tmp_path), store), raise_server_exceptions=False)
        assert client.head("/v1/readyz").status_code == 503
        assert client.head("/v1/healthz").status_code == 200  # liveness: the store is not the process's fault
    finally:
        store.close()


def test_a_head_on_a_probe_over_http_sends_no_body(app):
    with serving(app, free_port()) as url:
        conn = http.client.HTTPConnection(urlsplit(url).hostname, urlsplit(url).port, timeout=10)
        try:
            for path in ("/v1/healthz", "/v1/readyz"):
                conn.request("HEAD", path)
                r = conn.getresponse()
                assert r.status == 200 and r.read() == b""
        finally:
            conn.close()


def test_the_openapi_document_lists_the_probes_as_get_alone(client):
    paths = client.get("/openapi.json").json()["paths"]
    assert set(paths["/v1/healthz"]) == {"get"} and set(paths["/v1/readyz"]) == {"get"}


# -- the CLI's --url with a path -------------------------------------------------------------------------------


@pytest.fixture
def broker_url(app):
    with serving(app, free_port()) as url:
        yield url


def test_a_url_with_a_path_that_the_broker_answers_404_says_to_give_its_base_url(broker_url, capsys):
    assert cli.main(["--url", f"{broker_url}/v1", "--token", world.ADMIN, "status"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error [404]: Not Found (the broker has no such route under "), err
    assert f"--url is the broker's base URL, without a path, like {broker_url})" in err


def test_a_broker_url_with_a_path_names_broker_url_and_the_json_error_holds_the_hint(broker_url, capsys,
                                                                                      monkeypatch):
    monkeypatch.setenv("BROKER_URL", f"{broker_url}/v1/")
    assert cli.main(["--token", world.ADMIN, "--json", "status"]) == 1
    out, err = capsys.readouterr()
    assert f"BROKER_URL is the broker's base URL, without a path, like {broker_url})" in err
    body = json.loads(out)
    assert body["status"] == 404 and "without a path" in body["error"]


def test_a_404_for_a_job_or_from_a_url_without_a_path_gets_no_hint(broker_url, capsys):
    assert cli.main(["--url", broker_url, "--token", world.ADMIN, "status", "j-nope"]) == 1
    assert "without a path" not in capsys.readouterr().err
    assert cli.main(["--url", f"{broker_url}/v1", "--token", world.ADMIN, "status", "j-nope"]) == 1
    assert "without a path" in capsys.readouterr().err  # /v1/v1/jobs/j-nope is no route: the URL is to blame


# -- a cursor the broker did not give --------------------------------------------------------------------------


def _made_up(key: list) -> str:
    return base64.urlsafe_b64encode(json.dumps(key).encode()).decode().rstrip("=")


def test_a_well_formed_cursor_the_broker_never_gave_is_read_as_a_position_as_the_readme_says(client):
    """Cursors are not signed: the README said "a cursor not from the broker is a 422", which was not so."""
    before_any = client.get(f"/v1/jobs?cursor={_made_up([1, 'x'])}", headers=auth(world.ADMIN))
    assert before_any.status_code == 200 and before_any.json() == {"jobs": [], "next_cursor": None}
    after_all = client.get(f"/v1/jobs?cursor={job_cursor(4e9, 'z')}", headers=auth(world.ADMIN)).json()
    assert after_all == client.get("/v1/jobs", headers=auth(world.ADMIN)).json()
    malformed = client.get(f"/v1/jobs?cursor={_made_up([1])}", headers=auth(world.ADMIN))
    assert malformed.status_code == 422 and malformed.json()["field"] == "cursor"
