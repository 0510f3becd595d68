"""``GET /v1/jobs?name=`` (the start of the jobs' names, as ``squeue --name``) and ``?state=queued,running`` (as
``squeue -t PD,R``): each filter checked, and the cursor reading on along the jobs that match."""

import pytest
from fastapi.testclient import TestClient

from broker.api.app import create_app
from broker.lifecycle import JobState
from broker.store import open_store

from broker_testing import ADMIN, stored_job as create

CONFIG = """
pools:
  - {name: gpu-box, slots: 4, accelerator: A100, price_per_slot_hour: "2.00"}
default_budget_usd: "10"
"""


@pytest.fixture
def api(make_settings, tmp_path):
    store = open_store(f"sqlite://{tmp_path / 'api.db'}")
    rows = [("sweep3-lr0.1", "vision", JobState.QUEUED), ("other", "vision", JobState.QUEUED),
            ("sweep3-lr0.3", "vision", JobState.RUNNING), ("sweep3-lr1", "vision", JobState.FAILED),
            ("sweep3-lr3", "nlp", JobState.QUEUED), ("sweep30", "vision", JobState.QUEUED),
            ("sweep3-lr10", "vision", JobState.CANCELLED), ("sweep3-lr30", "vision", JobState.QUEUED)]
    for n, (name, team, state) in enumerate(rows):
        create(store, f"j-{n:02d}", name, team=team, t=100.0 + n // 2, state=state)  # ties: ordered by id
    with TestClient(create_app(make_settings(config=CONFIG), store=store, engine=False),
                    raise_server_exceptions=False) as c:
        yield c


def follow(c, token=ADMIN, **params):
    names, cursor, pages = [], None, 0
    while True:
        r = c.get("/v1/jobs", params={**params, **({"cursor": cursor} if cursor else {})},
                  headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200, r.text
        names += [j["name"] for j in r.json()["jobs"]]
        cursor, pages = r.json()["next_cursor"], pages + 1
        if cursor is None:
            return names, pages


def test_name_lists_the_jobs_whose_name_begins_so_page_by_page(api):
    every = ["sweep3-lr30", "sweep3-lr10", "sweep30", "sweep3-lr3", "sweep3-lr1", "sweep3-lr0.3", "sweep3-lr0.1"]
    assert follow(api, name="sweep3") == (every, 1)
    dashed = [n for n in every if n.startswith("sweep3-")]
    assert follow(api, name="sweep3-") == (dashed, 1)
    # a page is full while more match, and the cursor reads on along the matches alone: each once, in order
    assert follow(api, name="sweep3-", limit=2) == (dashed, 3)
    assert follow(api, name="sweep3-", limit=1) == (dashed, 6)
    assert follow(api, name="sweep3-", state="queued", limit=1) == (["sweep3-lr30", "sweep3-lr3", "sweep3-lr0.1"], 3)
    assert follow(api, "vision-token", name="sweep3-", state="queued") == (["sweep3-lr30", "sweep3-lr0.1"], 1)
    assert follow(api, name="Sweep3") == ([], 1)  # case-sensitive, as the names are


def test_state_takes_several_with_commas(api):
    assert follow(api, state="queued,running", name="sweep3-") == (
        ["sweep3-lr30", "sweep3-lr3", "sweep3-lr0.3", "sweep3-lr0.1"], 1)
    assert follow(api, state="failed,cancelled", limit=1) == (["sweep3-lr10", "sweep3-lr1"], 2)
    assert follow(api, state="queued,queued", name="sweep3-lr3") == (["sweep3-lr30", "sweep3-lr3"], 1)


@pytest.mark.parametrize("params, field, says", [
    ({"state": "queued,runing"}, "state", "state: 'runing' is not a job state (did you mean 'running'?): each must be "
                                          "one of queued, "),
    ({"state": "queued,"}, "state", "state: holds an empty state (a comma too many): each must be one of "),
    ({"state": "PD,R"}, "state", "state: 'PD' is not a job state"),
    ({"name": "sweep 3"}, "name", "name: is the start of a job's name, so it must be 1-128 ASCII letters (a-z, A-Z), digits"),
    ({"name": "-lr"}, "name", "name: is the start of a job's name, so it must be 1-128"),
    ({"name": "x" * 129}, "name", "name: is the start of a job's name, so it must be 1-128"),
])
def test_a_bad_filter_is_a_422_naming_it(api, params, field, says):
    r = api.get("/v1/jobs", params=params, headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 422 and r.json()["field"] == field and r.json()["detail"].startswith(says), r.text


def test_the_route_declares_name_among_its_parameters(api):
    r = api.get("/v1/jobs", params={"nmae": "x"}, headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 422 and r.json()["detail"].endswith(
        "(did you mean 'name'?); it takes state, team, name, limit, cursor"), r.text
    params = api.get("/openapi.json").json()["paths"]["/v1/jobs"]["get"]["parameters"]
    assert "name" in [p["name"] for p in params]


@pytest.mark.parametrize("body, field", [
    ({}, "ids"), ({"ids": []}, "ids"), ({"ids": "j-00"}, "ids"), ({"ids": [""]}, "ids"), ({"ids": [1]}, "ids"),
    ({"ids": ["j-00"], "name": "s"}, "ids"), ({"name": ""}, "name"), ({"name": "a b"}, "name"),
    ({"all": "yes"}, "all"), ({"all": True}, "team"), ({"ids": ["j-00"], "team": "vision"}, "team"),
    ({"nmae": "s"}, "nmae"),
])
def test_a_cancel_of_several_is_given_one_way_to_pick_them(api, body, field):
    r = api.post("/v1/jobs/cancel", json=body, headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 422 and r.json()["field"] == field, r.text
    assert api.get("/v1/jobs", params={"state": "cancelled"},
                   headers={"Authorization": f"Bearer {ADMIN}"}).json()["jobs"][0]["id"] == "j-06"  # nothing more


def test_a_cancel_by_name_answers_each_job_in_its_list(api):
    r = api.post("/v1/jobs/cancel", json={"name": "sweep3-", "team": "vision"},
                 headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 200
    assert [j["name"] for j in r.json()["cancelled"]] == ["sweep3-lr30", "sweep3-lr0.3", "sweep3-lr0.1"]
    r = api.post("/v1/jobs/cancel", json={"ids": ["j-00", "j-03", "j-04", "j-nope"]},
                 headers={"Authorization": "Bearer vision-token"})
    body = r.json()
    assert body["cancelled"] == [] and body["already_ended"] == [
        {"id": "j-00", "name": "sweep3-lr0.1", "state": "cancelled"},
        {"id": "j-03", "name": "sweep3-lr1", "state": "failed"}]
    # another team's job is no job this token sees
    assert [(x["id"], x["detail"].split(" (")[0]) for x in body["refused"]] == [("j-04", "no job j-04"),
                                                                               ("j-nope", "no job j-nope")]


def test_a_job_another_cancel_is_already_stopping_is_named_so_not_counted_as_this_ones(api):
    """Two ``cancel --name`` at once each listed the running jobs both were stopping as cancelled by it (134
    cancels claimed for 132 jobs): a job already being cancelled is still in ``cancelled``, as before, and named in
    ``already_cancelling`` too."""
    admin = {"Authorization": f"Bearer {ADMIN}"}
    first = api.post("/v1/jobs/cancel", json={"ids": ["j-02"]}, headers=admin).json()
    assert [j["state"] for j in first["cancelled"]] == ["cancelling"] and first["already_cancelling"] == []
    again = api.post("/v1/jobs/cancel", json={"ids": ["j-02", "j-00"]}, headers=admin).json()
    assert [j["id"] for j in again["cancelled"]] == ["j-02", "j-00"], again
    assert again["already_cancelling"] == ["j-02"], again
