"""The job listing reads on past one page: ``list_jobs(before=...)`` in each store, a ``cursor`` and ``next_cursor``
on ``GET /v1/jobs``, and ``broker status`` following it, so no job past the first 1,000 of a state goes unlisted."""

import pytest
from fastapi.testclient import TestClient

import broker.client
from broker.api.app import create_app
from broker.client import BrokerClient
from broker.lifecycle import JobState
from broker.store import open_store

from broker_testing import ADMIN, stored_job as create

CONFIG = """
pools:
  - {name: gpu-box, slots: 4, accelerator: A100, price_per_slot_hour: "2.00"}
zones:
  - {name: sim-a, tier: spot, instance_type: g5.xlarge}
default_budget_usd: "10"
"""


def fill(store):
    """Ten jobs, several at one submit time (the order's ties are broken by id), two teams, two states."""
    for n, (t, team, state) in enumerate([(100.0, "vision", JobState.QUEUED), (100.0, "nlp", JobState.QUEUED),
                                          (100.0, "vision", JobState.SUCCEEDED), (101.5, "vision", JobState.QUEUED),
                                          (99.0, "nlp", JobState.SUCCEEDED), (100.0, "vision", JobState.QUEUED),
                                          (102.0, "vision", JobState.SUCCEEDED), (98.25, "vision", JobState.QUEUED),
                                          (101.5, "nlp", JobState.QUEUED), (100.0, "vision", JobState.QUEUED)]):
        create(store, f"j-{n:02d}", team=team, t=t, state=state)


def pages(store, size, **filters):
    out, before = [], None
    while True:
        page = store.list_jobs(limit=size, before=before, **filters)
        out += [j.id for j in page]
        if len(page) < size:
            return out
        before = (page[-1].submitted_at, page[-1].id)


@pytest.mark.parametrize("filters", [{}, {"team": "vision"}, {"states": ["queued"]},
                                     {"states": ["queued"], "team": "nlp"}, {"active_since": 101.0}])
@pytest.mark.parametrize("size", [1, 2, 3])
def test_each_store_pages_through_every_job_once_in_the_listing_order(store, filters, size):
    fill(store)
    whole = [j.id for j in store.list_jobs(limit=1000, **filters)]
    assert len(whole) >= 2
    assert pages(store, size, **filters) == whole


def test_a_page_starts_right_after_its_key_and_a_job_submitted_meanwhile_is_not_repeated(store):
    fill(store)
    first = store.list_jobs(limit=4)
    assert [j.id for j in first] == ["j-06", "j-08", "j-03", "j-09"]  # newest first; equal times: higher id first
    create(store, "j-99", t=500.0)  # newer than everything: on page one of a fresh listing, not on page two
    rest = store.list_jobs(limit=1000, before=(first[-1].submitted_at, first[-1].id))
    assert [j.id for j in rest] == ["j-05", "j-02", "j-01", "j-00", "j-04", "j-07"]


@pytest.fixture
def api(make_settings, tmp_path):
    store = open_store(f"sqlite://{tmp_path / 'api.db'}")
    with TestClient(create_app(make_settings(config=CONFIG), store=store, engine=False),
                    raise_server_exceptions=False) as c:
        yield c, store


def auth(token=ADMIN):
    return {"Authorization": f"Bearer {token}"}


def follow(c, token=ADMIN, **params):
    ids, cursor, seen = [], None, 0
    while True:
        r = c.get("/v1/jobs", params={**params, **({"cursor": cursor} if cursor else {})}, headers=auth(token))
        assert r.status_code == 200, r.text
        body = r.json()
        ids += [j["id"] for j in body["jobs"]]
        cursor = body["next_cursor"]
        seen += 1
        if cursor is None:
            return ids, seen


def test_the_api_answers_a_cursor_to_the_next_page_until_the_last(api):
    c, store = api
    fill(store)
    whole = [j["id"] for j in c.get("/v1/jobs", headers=auth()).json()["jobs"]]
    assert c.get("/v1/jobs", headers=auth()).json()["next_cursor"] is None  # all ten on the first page
    assert follow(c, limit=3) == (whole, 4)  # 3+3+3+1
    assert follow(c, limit=5) == (whole, 2)  # a full last page: the cursor says whether more follow
    queued = [j.id for j in store.list_jobs(states=["queued"])]
    assert follow(c, limit=2, state="queued") == (queued, 4)


def test_a_teams_token_pages_through_its_own_teams_jobs_only(api):
    from broker.api.query import job_cursor

    c, store = api
    fill(store)
    ids, _ = follow(c, "nlp-token", limit=1)
    assert ids == ["j-08", "j-01", "j-04"]
    r = c.get("/v1/jobs", params={"limit": 1, "team": "vision", "cursor": job_cursor(100.0, "j-09")},
              headers=auth("nlp-token"))
    assert r.status_code == 403 and r.json()["field"] == "team"
    r = c.get("/v1/jobs", params={"limit": 1, "state": "nope", "cursor": job_cursor(100.0, "j-09")},
              headers=auth())
    assert r.status_code == 422 and r.json()["field"] == "state"


@pytest.mark.parametrize("cursor", ["not base64 !", "abc", "W10", "WzEsMiwzXQ", "WyJ4Iiwiai0xIl0",
                                    "W3RydWUsImotMSJd", "WzEwMCwiIl0", "WzEwMCwxXQ", "bnVsbA", "A" * 600,
                                    "WzFlOTk5LCJqLTEiXQ"])
def test_a_malformed_cursor_is_a_422_naming_it(api, cursor):
    c, store = api
    fill(store)
    r = c.get("/v1/jobs", params={"cursor": cursor}, headers=auth())
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "cursor" and "next_cursor" in r.json()["detail"]


def test_the_document_names_the_cursor_and_next_cursor(api):
    c, _ = api
    doc = c.get("/openapi.json").json()
    op = doc["paths"]["/v1/jobs"]["get"]
    assert "cursor" in [p["name"] for p in op["parameters"]]
    ref = op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    assert "next_cursor" in doc["components"]["schemas"][ref]["properties"]


class Via(BrokerClient):
    """The real client's listing methods, answered by the app in process."""

    def __init__(self, c):
        self.c = c

    def _call(self, method, path, **kw):
        r = self.c.request(method, path, params=kw.get("params"), headers=auth())
        assert r.status_code == 200, r.text
        return r.json()


def test_broker_status_lists_every_job_of_a_state_past_one_page(api, monkeypatch):
    from broker.cli import _listed_jobs

    c, store = api
    monkeypatch.setattr(broker.client, "MAX_JOBS_LISTED", 3)
    for n in range(8):
        create(store, f"q-{n}", t=200.0 + n)
    jobs, note = _listed_jobs(Via(c), state="queued", team=None)
    assert [j["id"] for j in jobs] == [f"q-{n}" for n in range(7, -1, -1)] and note is None


def test_broker_status_lists_every_live_job_and_says_how_to_see_older_ended_ones(api, monkeypatch):
    from broker.cli import _listed_jobs

    c, store = api
    monkeypatch.setattr(broker.client, "MAX_JOBS_LISTED", 3)
    for n in range(4):
        create(store, f"old-{n}", t=50.0 + n, state=JobState.SUCCEEDED)
    for n in range(7):
        create(store, f"q-{n}", t=100.0 + n)
    create(store, "new-done", t=300.0, state=JobState.FAILED)
    jobs, note = _listed_jobs(Via(c), state=None, team=None)
    assert [j["id"] for j in jobs] == ["new-done", *[f"q-{n}" for n in range(6, -1, -1)]]
    assert "--state" in note and "succeeded" in note
