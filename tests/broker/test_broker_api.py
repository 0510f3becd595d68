"""The HTTP API: submit, read, cancel, auth, and bad input that never becomes a 500."""

from dataclasses import replace
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient

from broker.api.app import create_app
from broker.lifecycle import JobState
from broker.service import _why_not_cancelled
from broker.store import Change, open_store

from broker_testing import ADMIN

CONFIG = """
pools:
  - {name: gpu-box, slots: 4, accelerator: A100, price_per_slot_hour: "2.00"}
  - {name: cpu, slots: 2, price_per_slot_hour: "0.10"}
default_budget_usd: "10"
teams:
  vision: {default_budget_usd: "30"}
"""

SOON = datetime.now(timezone.utc) + timedelta(days=7)  # a deadline a test may give: within a year, in the future
TASK = {"name": "train", "resources": {"accelerators": "A100:2"}, "run": "echo hi",
        "broker": {"budget_usd": 50, "expected_hours": 2}}


@pytest.fixture
def client(make_settings, tmp_path):
    settings = make_settings(config=CONFIG)
    app = create_app(settings, store=open_store(f"sqlite://{tmp_path / 'api.db'}"), engine=False)
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


@pytest.fixture
def served(make_settings, tmp_path):
    """A client with its store and settings, for a test that writes the store as an engine would (attempts
    launched, progress stored by an older broker)."""
    settings = make_settings(config=CONFIG)
    store = open_store(f"sqlite://{tmp_path / 'p.db'}")
    with TestClient(create_app(settings, store=store, engine=False), raise_server_exceptions=False) as c:
        yield c, store, settings


def auth(token=ADMIN):
    return {"Authorization": f"Bearer {token}"}


def test_submit_json_returns_201_with_a_quote(client):
    r = client.post("/v1/jobs", json=TASK, headers=auth())
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["state"] == "queued"
    assert client.get(f"/v1/jobs/{job['id']}", headers=auth()).json()["queue_position"] == 1
    assert job["budget"] == {"micros": 50_000_000, "usd": "$50.00"}
    # 2 A100 slots at $2.00 each for 2 hours
    assert job["quote"]["tiers"][0]["estimate"] == 8_000_000
    assert r.headers["location"] == f"/v1/jobs/{job['id']}"


def test_a_budget_with_more_than_cents_is_shown_as_set_and_its_raise_names_both_exactly(client):
    job = client.post("/v1/jobs", json={**TASK, "broker": {"budget_usd": "12.345"}}, headers=auth()).json()
    assert job["budget"] == {"micros": 12_345_000, "usd": "$12.345"}  # not "$12.35", more than the broker spends
    r = client.post(f"/v1/jobs/{job['id']}/budget", json={"budget_usd": "20.0001"}, headers=auth())
    assert r.status_code == 200 and r.json()["budget"]["usd"] == "$20.0001", r.text
    said = [e["reason"] for e in client.get(f"/v1/jobs/{job['id']}/events", headers=auth()).json()["events"]]
    assert any("budget $12.345 → $20.0001" in m for m in said), said


def test_a_budget_set_to_what_it_is_already_writes_nothing_and_says_no_change(client):
    """`broker budget J 0.2` twice logged "budget $0.20 → $0.20" the second time (and two concurrent raises to one
    figure, one such event each)."""
    job = client.post("/v1/jobs", json={**TASK, "broker": {"budget_usd": "5"}}, headers=auth()).json()
    for _ in range(2):
        r = client.post(f"/v1/jobs/{job['id']}/budget", json={"budget_usd": "7.50"}, headers=auth())
        assert r.status_code == 200 and r.json()["budget"]["usd"] == "$7.50", r.text
    changes = [e["reason"] for e in client.get(f"/v1/jobs/{job['id']}/events", headers=auth()).json()["events"]
               if e["event"] == "budget_changed"]
    assert len(changes) == 1 and "budget $5.00 → $7.50" in changes[0], changes


def test_submit_yaml_text_is_accepted(client):
    yaml_text = "name: y\nrun: echo hi\nresources: {cpus: 1}\n"
    r = client.post("/v1/jobs", content=yaml_text, headers={**auth(), "Content-Type": "application/yaml"})
    assert r.status_code == 201, r.text
    assert r.json()["budget"]["usd"] == "$10.00"  # the broker default


def test_a_team_default_budget_applies(client):
    r = client.post("/v1/jobs", json={"run": "echo"}, headers=auth("vision-token"))
    assert r.status_code == 201
    assert r.json()["team"] == "vision" and r.json()["budget"]["usd"] == "$30.00"


def test_over_budget_is_refused_with_the_estimates(client):
    task = {**TASK, "broker": {"budget_usd": 5, "expected_hours": 2}}
    r = client.post("/v1/jobs", json=task, headers=auth())
    assert r.status_code == 422
    body = r.json()
    assert body["field"] == "broker.budget_usd"
    assert ("estimated $8.00 on onprem 2x A100 gpu-box-2slot in local/gpu-box exceeds the budget of $5.00"
            in body["detail"])


def test_a_job_nothing_can_run_is_refused_naming_resources(client):
    r = client.post("/v1/jobs", json={"run": "x", "resources": {"accelerators": "H100:8"}}, headers=auth())
    assert r.status_code == 422 and r.json()["field"] == "resources.accelerators"  # no offer has H100
    assert "H100" in r.json()["detail"]


def test_a_price_cap_under_every_offer_is_refused_naming_the_cap_and_the_cheapest_price(client):
    r = client.post("/v1/jobs", json={**TASK, "broker": {"budget_usd": 50, "max_price_per_hour": "1.50"}}, headers=auth())
    assert r.status_code == 422 and r.json()["field"] == "broker.max_price_per_hour", r.text
    assert r.json()["detail"].endswith("the cheapest match, onprem 2x A100 gpu-box-2slot in local/gpu-box, costs $4.00/h, "
                                       "over the job's max_price_per_hour of $1.50")


def test_idempotency_key_returns_the_first_job(client):
    h = {**auth(), "Idempotency-Key": "abc"}
    first = client.post("/v1/jobs", json=TASK, headers=h)
    again = client.post("/v1/jobs", json=TASK, headers=h)
    assert first.status_code == 201 and again.status_code == 200
    assert first.json()["id"] == again.json()["id"]
    assert len(client.get("/v1/jobs", headers=auth()).json()["jobs"]) == 1


def test_a_job_id_drawn_twice_is_drawn_again_never_answered_with_the_other_teams_job(client, monkeypatch):
    import broker.service

    ids = iter(["j-00000000aa", "j-00000000aa", "j-00000000bb"])  # the second submit draws the first's id first
    monkeypatch.setattr(broker.service, "new_job_id", lambda: next(ids))
    theirs = client.post("/v1/jobs", json={**TASK, "broker": {**TASK["broker"], "team": "vision"}}, headers=auth())
    mine = client.post("/v1/jobs", json=TASK, headers=auth())
    assert theirs.status_code == 201 and theirs.json()["id"] == "j-00000000aa"
    assert mine.status_code == 201, mine.text
    assert mine.json()["id"] == "j-00000000bb" and mine.json()["team"] == "default"
    assert client.get("/v1/jobs/j-00000000aa", headers=auth()).json()["team"] == "vision"


def test_an_idempotency_key_reused_for_another_task_is_refused_not_answered_with_the_first_job(client):
    h = {**auth(), "Idempotency-Key": "abc"}
    first = client.post("/v1/jobs", json=TASK, headers=h).json()
    other = client.post("/v1/jobs", json={**TASK, "run": "python other.py"}, headers=h)
    assert other.status_code == 422 and other.json()["field"] == "Idempotency-Key"
    assert first["id"] in other.json()["detail"] and "different task" in other.json()["detail"]
    # a retry is the same submit, the budget written another way too (50 and "50.00" are one amount)
    retry = client.post("/v1/jobs", json={**TASK, "broker": {**TASK["broker"], "budget_usd": "50.00"}}, headers=h)
    assert retry.status_code == 200 and retry.json()["id"] == first["id"]
    assert len(client.get("/v1/jobs", headers=auth()).json()["jobs"]) == 1


def test_an_idempotency_key_reused_with_another_budget_or_price_cap_is_refused_naming_it(client):
    """A retry asking $60 under the key of a $50 submit was answered 200 with the $50 job, without a word: the budget
    was left out of the comparison (it may be raised after the submit, so the job's own can differ from a retry's).
    The budget the submit gave is compared now, which a raise since does not move."""
    h = {**auth(), "Idempotency-Key": "budget-key"}
    first = client.post("/v1/jobs", json=TASK, headers=h).json()
    other = client.post("/v1/jobs", json={**TASK, "broker": {**TASK["broker"], "budget_usd": 60}}, headers=h)
    assert other.status_code == 422 and other.json()["field"] == "Idempotency-Key", other.text
    assert other.json()["detail"] == (f"Idempotency-Key: was already used for job {first['id']} with a different "
                                      "budget ($50 at submit; this one asks $60); use a new key to submit this one")
    none = client.post("/v1/jobs", json={**TASK, "broker": {k: v for k, v in TASK["broker"].items()
                                                             if k != "budget_usd"}}, headers=h)
    assert none.status_code == 422 and "this one asks the team's default" in none.json()["detail"], none.text
    capped = client.post("/v1/jobs", json={**TASK, "broker": {**TASK["broker"], "max_price_per_hour": "9"}}, headers=h)
    assert capped.status_code == 422 and "different max_price_per_hour" in capped.json()["detail"], capped.text
    # raised since: a retry of the submit as it was is still the same submit
    assert client.post(f"/v1/jobs/{first['id']}/budget", json={"budget_usd": "80"}, headers=auth()).status_code == 200
    retry = client.post("/v1/jobs", json=TASK, headers=h)
    assert retry.status_code == 200 and retry.json()["id"] == first["id"] and retry.json()["budget"]["usd"] == "$80.00"
    assert len(client.get("/v1/jobs", headers=auth()).json()["jobs"]) == 1


@pytest.mark.parametrize(
    "body, headers, status, field",
    [
        pytest.param(b"{not json", {"Content-Type": "application/json"}, 422, "body", id="broken JSON is a 422 on body"),
        pytest.param(b"- a\n- list\n", {"Content-Type": "application/yaml"}, 422, "body", id="a YAML list is a 422 on body"),
        pytest.param(b"", {}, 422, "body", id="an empty body is a 422 on body"),
        pytest.param(b'{"broker": {"budget_usd": "free"}}', {"Content-Type": "application/json"}, 422, "broker.budget_usd",
                     id="a bad budget is a 422 naming broker.budget_usd"),
        pytest.param(b'{"num_nodes": -1}', {"Content-Type": "application/json"}, 422, "num_nodes", id="bad num_nodes is named"),
        pytest.param(b"x" * 2_000_000, {}, 413, "body", id="an oversized body is a 413"),
        pytest.param(b'{"run": "echo", "broker": {"deadline": "99999999d"}}', {"Content-Type": "application/json"}, 422,
                     "broker.deadline", id="a deadline centuries away is a 422, not a job no list can show"),
        pytest.param(b'{"resources": {"cpus": 1}}', {"Content-Type": "application/json"}, 422, "run",
                     id="a task with nothing to run is a 422 naming run"),
        pytest.param(b'{"run": "echo", "resources": {"acelerators": "A100:1"}}', {"Content-Type": "application/json"}, 422,
                     "resources.acelerators", id="a misspelt resources key is a 422 naming it"),
        pytest.param(b'{"run": "echo", "resources": {"accelerators": {"A100": Infinity}}}', {"Content-Type": "application/json"},
                     422, "resources.accelerators.A100", id="an Infinity accelerator count is a 422, not a 500"),
        pytest.param(b'{"run": "echo", "resources": {"accelerators": {"A100": NaN}}}', {"Content-Type": "application/json"},
                     422, "resources.accelerators.A100", id="a NaN accelerator count is a 422, not a 500"),
        pytest.param(b'{"run": "echo", "broker": {"expected_hours": "1e400000000"}}', {"Content-Type": "application/json"},
                     422, "broker.expected_hours", id="an expected length too large to price is a 422, not a 500"),
        pytest.param(b'{"run": "echo a\\u0000b"}', {"Content-Type": "application/json"}, 422, "run",
                     id="a run with a NUL is a 422, not a job whose every attempt is lost at launch"),
        pytest.param(b'{"run": "echo \\ud800"}', {"Content-Type": "application/json"}, 422, "run",
                     id="a run with a lone surrogate is a 422"),
        pytest.param(b'{"run": "echo", "broker": {"budget_usd": "0.1000001"}}', {"Content-Type": "application/json"}, 422,
                     "broker.budget_usd", id="a budget finer than a millionth is a 422, not rounded up"),
        pytest.param(b'{"run": "echo", "broker": {"budget_usd": "0,50"}}', {"Content-Type": "application/json"}, 422,
                     "broker.budget_usd", id="a budget with a decimal comma is a 422, not read as 100 times it"),
        pytest.param(b'{"run": "echo", "broker": {"budget_usd": 1e3}}', {"Content-Type": "application/json"}, 422,
                     "broker.budget_usd", id="a JSON budget with an exponent is a 422, as in a file or as text"),
        pytest.param(b'{"run": "echo", "broker": {"budget_usd": "5", "max_price_per_hour": 2.5E0}}',
                     {"Content-Type": "application/json"}, 422, "broker.max_price_per_hour",
                     id="so is a JSON price cap with an exponent"),
        pytest.param(f"run: echo\nbroker: {{deadline: {SOON:%Y-%m-%d %H:%M:%S}}}\n".encode(), {"Content-Type": "application/yaml"},
                     422, "broker.deadline", id="a YAML deadline without a timezone is a 422, not read as UTC"),
        pytest.param(f'{{"run": "echo", "broker": {{"deadline": "{SOON:%Y-%m-%dT%H:%M}"}}}}'.encode(),
                     {"Content-Type": "application/json"}, 422, "broker.deadline",
                     id="a JSON deadline without a timezone is a 422"),
    ],
)
def test_bad_input_gets_a_4xx_naming_the_field(client, body, headers, status, field):
    r = client.post("/v1/jobs", content=body, headers={**auth(), **headers})
    assert r.status_code == status, r.text
    assert r.json().get("field") == field
    assert client.get("/v1/jobs", headers=auth()).json()["jobs"] == []  # nothing half-created


def test_a_budget_change_finer_than_a_millionth_is_refused_and_changes_nothing(client):
    job = client.post("/v1/jobs", json=TASK, headers=auth()).json()
    r = client.post(f"/v1/jobs/{job['id']}/budget", json={"budget_usd": "60.0000001"}, headers=auth())
    assert r.status_code == 422 and r.json()["field"] == "budget_usd"
    assert "6 decimal places" in r.json()["detail"]
    r = client.post(f"/v1/jobs/{job['id']}/budget", json={"budget_usd": "60,5"}, headers=auth())  # not $605
    assert r.status_code == 422 and r.json()["field"] == "budget_usd" and "write 60.5" in r.json()["detail"], r.text
    assert client.get(f"/v1/jobs/{job['id']}", headers=auth()).json()["budget"]["micros"] == 50_000_000


def test_a_budget_change_written_with_an_exponent_is_refused_and_one_written_out_is_exact(client):
    """``{"budget_usd": 1e3}`` was read as $1,000 where the README says an exponent is refused; a JSON number written
    out (0.00001, 60.5) is still read exactly as typed."""
    job = client.post("/v1/jobs", json=TASK, headers=auth()).json()
    for text in ("1e3", "1E+3", "6.05e1"):
        r = client.post(f"/v1/jobs/{job['id']}/budget", content=f'{{"budget_usd": {text}}}'.encode(),
                        headers={**auth(), "Content-Type": "application/json"})
        assert r.status_code == 422 and r.json()["field"] == "budget_usd", r.text
        assert "not with an exponent" in r.json()["detail"], r.text
    assert client.get(f"/v1/jobs/{job['id']}", headers=auth()).json()["budget"]["micros"] == 50_000_000
    r = client.post(f"/v1/jobs/{job['id']}/budget", content=b'{"budget_usd": 60.00001}',
                    headers={**auth(), "Content-Type": "application/json"})
    assert r.status_code == 200 and r.json()["budget"]["micros"] == 60_000_010, r.text


@pytest.mark.parametrize("body, detail", [
    pytest.param({"budget": 40}, "budget_usd: is required: send {\"budget_usd\": \"40\"}; 'budget' is not a field "
                                 "this takes (did you mean 'budget_usd'?)", id="a wrong key is named, not its amount"),
    pytest.param({}, "budget_usd: is required: send {\"budget_usd\": \"40\"}", id="an empty body"),
])
def test_a_budget_change_without_budget_usd_says_it_is_required(client, body, detail):
    """{"budget": 40} was answered "budget_usd: must be an amount of dollars", as if 40 were the mistake."""
    job = client.post("/v1/jobs", json=TASK, headers=auth()).json()
    r = client.post(f"/v1/jobs/{job['id']}/budget", json=body, headers=auth())
    assert r.status_code == 422 and r.json() == {"detail": detail, "field": "budget_usd"}, r.text
    assert client.get(f"/v1/jobs/{job['id']}", headers=auth()).json()["budget"]["micros"] == 50_000_000


def test_a_budget_change_with_a_field_it_does_not_take_is_refused_naming_it_and_changes_nothing(client):
    """{"budget_usd": "40", "deadline": "6h"} answered 200, the deadline dropped without a word."""
    job = client.post("/v1/jobs", json=TASK, headers=auth()).json()
    r = client.post(f"/v1/jobs/{job['id']}/budget", json={"budget_usd": "60", "budget_usd_": 1}, headers=auth())
    assert r.status_code == 422 and r.json() == {
        "detail": "budget_usd_: is not a field this takes (did you mean 'budget_usd'?)", "field": "budget_usd_"}, r.text
    r = client.post(f"/v1/jobs/{job['id']}/budget", json={"budget_usd": "60", "deadline": "6h"}, headers=auth())
    assert r.status_code == 422 and r.json()["field"] == "deadline" and "known: budget_usd" in r.json()["detail"], r.text
    assert client.get(f"/v1/jobs/{job['id']}", headers=auth()).json()["budget"]["micros"] == 50_000_000


def test_auth_is_required_and_checked(client):
    assert client.get("/v1/jobs").status_code == 401
    assert client.get("/v1/jobs", headers=auth("wrong")).status_code == 401


def test_a_team_sees_only_its_own_jobs(client):
    mine = client.post("/v1/jobs", json={"run": "x"}, headers=auth("vision-token")).json()
    theirs = client.post("/v1/jobs", json={"run": "x"}, headers=auth("nlp-token")).json()
    assert [j["id"] for j in client.get("/v1/jobs", headers=auth("vision-token")).json()["jobs"]] == [mine["id"]]
    assert client.get(f"/v1/jobs/{theirs['id']}", headers=auth("vision-token")).status_code == 404
    assert client.post(f"/v1/jobs/{theirs['id']}/cancel", headers=auth("vision-token")).status_code == 404
    assert len(client.get("/v1/jobs", headers=auth()).json()["jobs"]) == 2  # admin sees all


def test_a_team_cannot_submit_for_another_team(client):
    r = client.post("/v1/jobs", json={"run": "x", "broker": {"team": "nlp"}}, headers=auth("vision-token"))
    assert r.status_code == 403 and r.json()["field"] == "broker.team"


def test_unknown_job_is_a_404(client):
    assert client.get("/v1/jobs/j-nope", headers=auth()).status_code == 404
    assert client.get("/v1/jobs/j-nope/events", headers=auth()).status_code == 404


def test_a_part_of_an_id_is_a_404_that_names_the_callers_job_it_begins_never_another_teams(client):
    """`broker status j-3fa9` (a part of the id copied) or `3fa9c1b2e0` (the j- left out) said only 'no job': the
    user could not tell a typo from a job that is gone."""
    mine = client.post("/v1/jobs", json={"run": "x"}, headers=auth("vision-token")).json()["id"]
    theirs = client.post("/v1/jobs", json={"run": "x"}, headers=auth("nlp-token")).json()["id"]
    for given in (mine[:6], mine[2:], mine[:-1].upper(), mine.upper()):
        r = client.get(f"/v1/jobs/{given}", headers=auth("vision-token"))
        assert r.status_code == 404 and r.json()["detail"] == f"no job {given} (did you mean {mine}?)", r.text
    r = client.post(f"/v1/jobs/{theirs[:6]}/cancel", headers=auth("vision-token"))
    assert r.status_code == 404 and r.json()["detail"] == f"no job {theirs[:6]}", r.text  # ids don't leak
    assert r.json()["field"] == "job_id"  # as every bad input names its field
    assert client.get(f"/v1/jobs/{theirs}", headers=auth("vision-token")).json()["detail"] == f"no job {theirs}"
    r = client.get(f"/v1/jobs/{theirs[:6]}/logs", headers=auth())  # an admin sees every team's
    assert r.status_code == 404 and f"(did you mean {theirs}?)" in r.json()["detail"], r.text
    assert client.get("/v1/jobs/j-/events", headers=auth()).json()["detail"] == "no job j-"  # begins every id


def test_an_id_one_or_two_characters_off_is_a_404_that_names_the_callers_job_never_another_teams(client):
    """`broker status j-a9f5e61915` for j-a9f5e61914 (a typo in the last character) said only 'no job'."""
    mine = client.post("/v1/jobs", json={"run": "x"}, headers=auth("vision-token")).json()["id"]
    theirs = client.post("/v1/jobs", json={"run": "x"}, headers=auth("nlp-token")).json()["id"]
    other = "0" if mine[-1] != "0" else "1"
    for given in (mine[:-1] + other,  # one changed
                  mine[:-2] + mine[-1] + mine[-2],  # the last two swapped
                  mine[:4] + mine[5:],  # one dropped
                  mine[:-2] + other + other):  # two changed
        r = client.get(f"/v1/jobs/{given}", headers=auth("vision-token"))
        if given == mine:
            continue
        assert r.status_code == 404 and r.json()["detail"] == f"no job {given} (did you mean {mine}?)", r.text
    far = mine[:-3] + "xyz"  # three off (ids are hex): no guess
    assert client.get(f"/v1/jobs/{far}", headers=auth("vision-token")).json()["detail"] == f"no job {far}"
    near_theirs = theirs[:-1] + ("0" if theirs[-1] != "0" else "1")
    assert client.get(f"/v1/jobs/{near_theirs}", headers=auth("vision-token")).json()["detail"] == \
        f"no job {near_theirs}"  # another team's ids do not leak


def test_cancel_then_cancel_again_is_a_409(client):
    job = client.post("/v1/jobs", json=TASK, headers=auth()).json()
    r = client.post(f"/v1/jobs/{job['id']}/cancel", headers=auth())
    assert r.status_code == 200 and r.json()["state"] == "cancelled"
    again = client.post(f"/v1/jobs/{job['id']}/cancel", headers=auth())
    assert again.status_code == 409, again.text
    assert again.json()["detail"] == f"{job['id']} has already ended (cancelled): there is nothing to cancel"
    events = client.get(f"/v1/jobs/{job['id']}/events", headers=auth()).json()["events"]
    assert [(e["event"], e["from"], e["to"], e["actor"]) for e in events] == [
        ("submit", None, "queued", "admin"), ("cancel", "queued", "cancelled", "admin")]


@pytest.mark.parametrize("state, said", [
    pytest.param(JobState.CANCELLING, "j-1 is already being cancelled", id="a cancel of a job being cancelled says so"),
    pytest.param(JobState.SUCCEEDED, "j-1 has already ended (succeeded): there is nothing to cancel",
                 id="a cancel of a job that succeeded says it has ended"),
])
def test_a_refused_cancel_says_why_in_plain_words(state, said):
    """A second cancel said 'cannot cancel a job that is cancelling' (or 'that is succeeded')."""
    assert _why_not_cancelled(SimpleNamespace(id="j-1", state=state)) == said


def test_a_job_that_ended_or_has_not_is_refused_a_budget_an_on_demand_switch_or_a_resume_in_plain_words(served):
    """'the job is succeeded' (on-demand) and 'cannot change the budget of a job that is succeeded' read as slips of
    grammar and did not say why; each 409 now says the job ended, as a refused cancel does."""
    client, store, _ = served
    queued = client.post("/v1/jobs", json=TASK, headers=auth()).json()["id"]
    done = client.post("/v1/jobs", json=TASK, headers=auth()).json()["id"]
    job = store.get_job(done)
    store.commit(Change(job=replace(job, state=JobState.SUCCEEDED), expected_version=job.version))
    for path, body, said in [
        (f"/v1/jobs/{done}/budget", {"budget_usd": "60"}, f"{done} has already ended (succeeded): its budget no longer "
                                                           "changes (only a failed or budget-stopped job's does, as it may resume)"),
        (f"/v1/jobs/{done}/ondemand", None, f"{done} has already ended (succeeded): there is nothing to move to on-demand"),
        (f"/v1/jobs/{done}/resume", None, f"{done} has already ended (succeeded): only a failed or budget-stopped job resumes"),
        (f"/v1/jobs/{queued}/resume", None, f"{queued} is queued, not ended: only a failed or budget-stopped job resumes"),
    ]:
        r = client.post(path, json=body, headers=auth())
        assert r.status_code == 409 and r.json()["detail"] == said, r.text
    assert store.get_job(done).budget == job.budget and store.get_job(done).force_tier is None


def test_a_cancelled_job_with_a_checkpoint_is_refused_a_resume_with_the_way_to_continue_it(served):
    """"has already ended (cancelled): only a failed or budget-stopped job resumes" left a user stuck, though a new
    submit naming its checkpoint base continues it from its checkpoint."""
    client, store, _ = served
    ids = [client.post("/v1/jobs", json=TASK, headers=auth()).json()["id"] for _ in range(2)]
    for job_id, point in zip(ids, ({"step": 68, "uri": "file:///ckpt/step-68"}, {})):
        job = store.get_job(job_id)
        store.commit(Change(job=replace(job, state=JobState.CANCELLED, last_checkpoint=point),
                            expected_version=job.version))
    with_one, without = (client.post(f"/v1/jobs/{i}/resume", headers=auth()) for i in ids)
    base = store.get_job(ids[0]).checkpoint_uri
    assert with_one.status_code == 409 and with_one.json()["detail"] == (
        f"{ids[0]} has already ended (cancelled): only a failed or budget-stopped job resumes; to continue it from its "
        f"checkpoint (step 68), submit its task again with broker.checkpoint: {base}"), with_one.text
    assert without.status_code == 409 and without.json()["detail"] == (
        f"{ids[1]} has already ended (cancelled): only a failed or budget-stopped job resumes; it saved no "
        "checkpoint, so to run it again, submit its task again (it starts over)"), without.text
    again = client.post("/v1/jobs", json={**TASK, "broker": {**TASK["broker"], "checkpoint": base}}, headers=auth())
    assert again.status_code == 201, again.text  # the base is free: the cancelled job writes it no more


def test_list_filters_and_bad_filter(client):
    client.post("/v1/jobs", json=TASK, headers=auth())
    assert len(client.get("/v1/jobs?state=queued", headers=auth()).json()["jobs"]) == 1
    assert client.get("/v1/jobs?state=running", headers=auth()).json()["jobs"] == []
    r = client.get("/v1/jobs?state=bogus", headers=auth())
    assert r.status_code == 422 and r.json()["field"] == "state"
    r = client.get("/v1/jobs?limit=0", headers=auth())
    assert r.status_code == 422 and r.json()["field"] == "limit"


def test_openapi_docs_are_served(client):
    assert client.get("/docs").status_code == 200
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/v1/jobs", "/v1/jobs/{job_id}", "/v1/jobs/{job_id}/cancel", "/v1/healthz"} <= set(paths)


def test_a_body_that_is_not_text_or_has_the_wrong_types_is_a_422_not_a_500(client):
    # both were 500s until the schemathesis fuzz (test_openapi_conformance.py) sent them
    job = client.post("/v1/jobs", json=TASK, headers=auth()).json()
    r = client.post(f"/v1/jobs/{job['id']}/budget", content=b"\x96\xffzH", headers={**auth(), "Content-Type": "application/json"})
    assert r.status_code == 422 and r.json() == {"detail": "body: is not valid JSON", "field": "body"}
    r = client.post("/v1/admin/faults", json={"kind": "preempt", "job_id": [job["id"]]}, headers=auth())
    assert r.status_code == 422 and r.json()["field"] == "job_id"
    assert client.get(f"/v1/jobs/{job['id']}", headers=auth()).json()["budget"]["usd"] == "$50.00"  # nothing changed


def test_the_openapi_document_gives_the_error_body_the_api_sends(client):
    doc = client.get("/openapi.json").json()
    assert set(doc["components"]["schemas"]["ApiError"]["properties"]) == {"detail", "field"}
    assert "HTTPValidationError" not in doc["components"]["schemas"]  # FastAPI's default 422 body is never sent
    submit = doc["paths"]["/v1/jobs"]["post"]
    assert {"application/json", "application/yaml"} == set(submit["requestBody"]["content"])
    assert {"200", "201", "401", "403", "422"} <= set(submit["responses"])
    assert submit["responses"]["422"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ApiError"}
    one = doc["paths"]["/v1/jobs/{job_id}"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert one == {"$ref": "#/components/schemas/JobOut"}  # the job's shape, for generated clients
    assert doc["components"]["schemas"]["JobOut"]["properties"]["state"] == {"$ref": "#/components/schemas/JobState"}


def test_a_log_offset_past_any_file_is_a_422_not_a_500(client):
    job = client.post("/v1/jobs", json=TASK, headers=auth()).json()
    r = client.get(f"/v1/jobs/{job['id']}/logs", params={"offset": 10**23}, headers=auth())
    assert r.status_code == 422 and r.json()["field"] == "offset"


def test_a_job_stored_with_a_deadline_past_year_9999_still_lists(client, tmp_path):
    """Rows stored before deadlines were bounded: the views render them instead of failing every list."""
    from dataclasses import replace

    from broker.store import Change

    job = client.post("/v1/jobs", json=TASK, headers=auth()).json()
    store = client.app.state.service.store
    stored = store.get_job(job["id"])
    store.commit(Change(job=replace(stored, deadline=8.7e12), expected_version=stored.version))
    listed = client.get("/v1/jobs", headers=auth())
    assert listed.status_code == 200 and listed.json()["jobs"][0]["deadline"] == "8700000000000"
    assert client.get(f"/v1/jobs/{job['id']}", headers=auth()).status_code == 200


def test_an_admin_submitting_for_a_team_that_does_not_exist_is_told_the_teams(client):
    r = client.post("/v1/jobs", json={**TASK, "broker": {**TASK["broker"], "team": "nosuch"}}, headers=auth())
    assert r.status_code == 422 and r.json()["field"] == "broker.team"
    assert "no team 'nosuch'" in r.json()["detail"] and "vision" in r.json()["detail"]


def test_a_team_filter_naming_no_team_is_refused_with_the_teams_there_are(client):
    """`broker status --team nope`, `broker costs --team nope` and GET /v1/jobs?team=nope answered an empty result,
    as if the team had nothing yet: a typo for a team is now told so, with the teams the broker knows."""
    from dataclasses import replace

    from broker.store import Change

    said = "team: there is no team 'nope' (teams: default, nlp, vision)"
    for path in ("/v1/jobs", "/v1/costs"):
        r = client.get(path, params={"team": "nope"}, headers=auth())
        assert r.status_code == 422 and r.json() == {"detail": said, "field": "team"}, (path, r.text)
        assert client.get(path, params={"team": "vision"}, headers=auth()).status_code == 200  # known, nothing yet
    # a team taken out of the config still has its jobs to list
    job = client.post("/v1/jobs", json=TASK, headers=auth()).json()
    store = client.app.state.service.store
    stored = store.get_job(job["id"])
    store.commit(Change(job=replace(stored, team="retired"), expected_version=stored.version))
    listed = client.get("/v1/jobs", params={"team": "retired"}, headers=auth())
    assert listed.status_code == 200 and [j["id"] for j in listed.json()["jobs"]] == [job["id"]], listed.text
    assert client.get("/v1/costs", params={"team": "retired"}, headers=auth()).status_code == 200
    # a team member asking for another team's jobs is refused, as for its costs (it was an empty list)
    r = client.get("/v1/jobs", params={"team": "nlp"}, headers=auth("vision-token"))
    assert r.status_code == 403 and r.json() == {"detail": "team: you can see only your team's jobs (vision)",
                                                 "field": "team"}, r.text
    assert client.get("/v1/costs", params={"team": "nlp"}, headers=auth("vision-token")).status_code == 403
    assert client.get("/v1/jobs", params={"team": "vision"}, headers=auth("vision-token")).status_code == 200


@pytest.fixture
def zone_client(make_settings, tmp_path):
    """The API of a broker that also has a simulated on-demand zone (several nodes: not a pool's)."""
    settings = make_settings(config=CONFIG + "zones:\n  - {name: sim-od, tier: ondemand, instance_type: g5.xlarge}\n")
    app = create_app(settings, store=open_store(f"sqlite://{tmp_path / 'api.db'}"), engine=False)
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def test_any_token_sees_the_simulated_zones_and_only_an_admin_injects_faults(zone_client):
    """What README's route table says: where a job may be placed is not an admin's secret; a fault is an admin's."""
    for token in (ADMIN, "vision-token"):
        r = zone_client.get("/v1/zones", headers=auth(token))
        assert r.status_code == 200 and [z["name"] for z in r.json()["zones"]] == ["sim-od"], r.text
        assert r.json()["zones"][0]["simulated"] is True
    assert zone_client.get("/v1/zones").status_code == 401
    r = zone_client.post("/v1/admin/faults", json={"kind": "zone", "zone": "sim-od", "available": False},
                         headers=auth("vision-token"))
    assert r.status_code == 403, r.text


@pytest.mark.parametrize("body", [
    pytest.param({"run": "echo", "broker": {"budget_usd": "0.000001"}}, id="a budget of one micro-dollar"),
    pytest.param({"run": "echo", "num_nodes": 4, "broker": {"budget_usd": "0.02"}},
                 id="more nodes than the budget can start (one node's start it could pay for)"),
])
def test_a_budget_that_cannot_pay_for_a_start_is_refused_at_submit_not_stopped_at_once(zone_client, body):
    client = zone_client
    r = client.post("/v1/jobs", json=body, headers=auth())
    assert r.status_code == 422 and r.json()["field"] == "broker.budget_usd", r.text
    assert "cannot pay for a start and a clean stop" in r.json()["detail"]
    assert client.get("/v1/jobs", headers=auth()).json()["jobs"] == []


@pytest.mark.parametrize("token", [ADMIN, "vision-token"], ids=["the admin token", "a team token"])
def test_progress_with_a_users_token_says_to_use_the_jobs_own(client, token):
    job = client.post("/v1/jobs", json=TASK, headers=auth()).json()
    r = client.post(f"/v1/jobs/{job['id']}/progress", json={"step": 1}, headers=auth(token))
    assert r.status_code == 403 and r.json()["field"] == "Authorization" and "BROKER_JOB_TOKEN" in r.json()["detail"]


@pytest.mark.parametrize("token", ["not-this-jobs", "\u00e9t\u00e9"], ids=["another token", "one outside ASCII"])
def test_progress_with_a_token_that_is_not_the_jobs_is_unauthorized(client, token):
    job = client.post("/v1/jobs", json=TASK, headers=auth()).json()
    r = client.post(f"/v1/jobs/{job['id']}/progress", json={"step": 1},
                    headers={"Authorization": f"Bearer {token}".encode("latin-1")})
    # a token outside ASCII was a 500, and a traceback in the log per request; a 404 "no job" sent an operator
    # whose brokers held different BROKER_SECRETS_KEY values looking for a job that was there
    assert r.status_code == 401 and "not valid for job" in r.json()["detail"], r.text


def test_a_checkpoint_committed_past_the_last_step_reported_moves_the_jobs_progress_to_it(make_settings, tmp_path):
    """Step reports are rate-limited and commits are not: after a report of step 10, a commit at step 50 shows
    the run reached 50; a commit behind the last step reported leaves the progress where it is."""
    from broker.auth import job_token

    settings = make_settings(config=CONFIG)
    app = create_app(settings, store=open_store(f"sqlite://{tmp_path / 'p.db'}"), engine=False)
    with TestClient(app, raise_server_exceptions=False) as client:
        job = client.post("/v1/jobs", json=TASK, headers=auth()).json()
        job_id, base = job["id"], job["checkpoint_uri"]  # a checkpoint is kept in the job's own base
        as_job = {"Authorization": f"Bearer {job_token(settings, job_id)}"}

        def report(body):
            r = client.post(f"/v1/jobs/{job_id}/progress", json=body, headers=as_job)
            assert r.status_code == 200, r.text
            view = client.get(f"/v1/jobs/{job_id}", headers=auth()).json()
            return view["progress"]["step"], view["last_checkpoint"]["step"] if view["last_checkpoint"] else None

        assert report({"step": 10, "total_steps": 300, "metrics": {"loss": 2.5}}) == (10, None)
        first = client.get(f"/v1/jobs/{job_id}", headers=auth()).json()["progress"]
        assert report({"checkpoint": {"step": 50, "uri": f"{base}/step-50"}}) == (50, 50)
        assert report({"step": 60}) == (60, 50)
        # the first report's step and time stay: the queue follows the job's rate from them
        later = client.get(f"/v1/jobs/{job_id}", headers=auth()).json()["progress"]
        assert (later["first_step"], later["first_at"]) == (10, first["at"]) and later["at"] >= first["at"]
        assert report({"checkpoint": {"step": 55, "uri": f"{base}/step-55"}}) == (60, 55)
        progress = client.get(f"/v1/jobs/{job_id}", headers=auth()).json()["progress"]
        assert progress["total_steps"] == 300


def test_a_report_from_an_attempt_the_job_has_moved_past_is_refused_and_changes_nothing(served):
    """A preempted attempt's process still running beside the next one reported as if it were the new attempt: its
    steps and its checkpoint were taken for the job's, and the next resume started from its checkpoint."""
    from dataclasses import replace

    from broker.auth import job_token
    from broker.store import Change

    client, store, settings = served
    job_id = client.post("/v1/jobs", json=TASK, headers=auth()).json()["id"]
    job = store.get_job(job_id)
    store.commit(Change(job=replace(job, attempts=2), expected_version=job.version))  # attempt 2 was launched
    as_job = {"Authorization": f"Bearer {job_token(settings, job_id)}"}

    def post(body):
        return client.post(f"/v1/jobs/{job_id}/progress", json=body, headers=as_job)

    assert post({"step": 10, "attempt": 2}).status_code == 200
    stale = post({"checkpoint": {"step": 90, "uri": "file:///c/90"}, "attempt": 1})
    assert stale.status_code == 409 and "attempt 1" in stale.json()["detail"] and "attempt 2" in stale.json()["detail"]
    assert post({"step": 95, "attempt": 1}).status_code == 409
    view = client.get(f"/v1/jobs/{job_id}", headers=auth()).json()
    assert view["progress"]["step"] == 10 and view["last_checkpoint"] is None
    assert post({"step": 11}).status_code == 200  # a library that names no attempt (an older one) is heard
    bad = post({"step": 12, "attempt": 0})
    assert bad.status_code == 422 and bad.json()["field"] == "attempt"



def test_progress_stored_before_first_at_was_kept_starts_its_rate_afresh_not_from_its_old_first_step(served):
    """After an upgrade, a running job's stored progress had a first_step (step 50, an hour ago) and no first_at:
    the next report stamped first_at now and kept step 50, so the queue took 460 steps in a few seconds for the
    job's rate and told the jobs behind it that it ends at once. The first step and its time are kept as a pair."""
    from dataclasses import replace

    from broker.auth import job_token
    from broker.store import Change

    client, store, settings = served
    job_id = client.post("/v1/jobs", json=TASK, headers=auth()).json()["id"]
    job = store.get_job(job_id)
    old = {"step": 500, "total_steps": 1000, "at": job.submitted_at, "metrics": {}, "attempt": job.attempts,
           "first_step": 50}  # as the broker before first_at stored it
    store.commit(Change(job=replace(job, progress=old), expected_version=job.version))
    as_job = {"Authorization": f"Bearer {job_token(settings, job_id)}"}
    for step in (510, 520):
        assert client.post(f"/v1/jobs/{job_id}/progress", json={"step": step}, headers=as_job).status_code == 200
    progress = store.get_job(job_id).progress
    assert progress["first_step"] == 510 and progress["first_at"] < progress["at"]


def test_a_move_to_on_demand_the_budget_left_cannot_pay_for_is_refused_not_left_waiting_for_ever(zone_client):
    """Pinned to on-demand with too little budget left for it, a job waited for ever ("the budget left ... does not
    cover ..."), with no way back. The move is refused now, saying what the budget must cover; raised, it moves."""
    client = zone_client
    job = client.post("/v1/jobs", json={"run": "echo", "resources": {"cpus": 1},
                                        "broker": {"budget_usd": "0.02", "expected_hours": "0.1"}}, headers=auth())
    assert job.status_code == 201, job.text  # the cpu pool: $0.01 for the tenth of an hour
    job = job.json()
    r = client.post(f"/v1/jobs/{job['id']}/ondemand", headers=auth())
    assert r.status_code == 409, r.text
    assert r.json()["detail"].startswith("not moved to on-demand: the budget left, $0.02, does not cover 0.1 h and a "
                                         "clean stop (36 s) on the cheapest free match, "), r.text
    assert r.json()["detail"].endswith(f"Raise the budget first (broker budget {job['id']} <dollars>), then move it")
    def moves() -> list:
        events = client.get(f"/v1/jobs/{job['id']}/events", headers=auth()).json()["events"]
        return [e for e in events if e["event"] == "switch_tier"]

    assert moves() == []
    assert client.post(f"/v1/jobs/{job['id']}/budget", json={"budget_usd": "5"}, headers=auth()).status_code == 200
    assert client.get(f"/v1/jobs/{job['id']}", headers=auth()).json()["pinned_tier"] is None
    moved = client.post(f"/v1/jobs/{job['id']}/ondemand", headers=auth())
    assert moved.status_code == 200 and moved.json()["pinned_tier"] == "ondemand", moved.text
    assert len(moves()) == 1
    assert client.get(f"/v1/jobs/{job['id']}", headers=auth()).json()["pinned_tier"] == "ondemand"
    # and back: there was no way to take a pin back
    back = client.delete(f"/v1/jobs/{job['id']}/ondemand", headers=auth())
    assert back.status_code == 200 and back.json()["pinned_tier"] is None, back.text
    assert len(moves()) == 2 and moves()[-1]["data"] == {"tier": None}
    again = client.delete(f"/v1/jobs/{job['id']}/ondemand", headers=auth())  # not pinned: answered as it is
    assert again.status_code == 200 and len(moves()) == 2
    assert client.delete(f"/v1/jobs/{job['id']}/ondemand").status_code == 401
    assert client.delete("/v1/jobs/j-nope/ondemand", headers=auth()).status_code == 404
    # an ended job, pinned or not, has no next attempts to place: refused as pinning it is, not "not pinned" (200)
    assert client.post(f"/v1/jobs/{job['id']}/cancel", headers=auth()).status_code == 200
    ended = client.delete(f"/v1/jobs/{job['id']}/ondemand", headers=auth())
    assert ended.status_code == 409 and "it runs no more attempts to move" in ended.json()["detail"], ended.text


def test_taking_an_on_demand_zone_down_is_refused_naming_the_spot_zones_not_answered_as_done(make_settings, tmp_path):
    """`broker fault zone <an on-demand zone> --down` answered "no capacity" and changed nothing: placement reads
    only spot zones' capacity, so jobs went on being placed there."""
    settings = make_settings(config=CONFIG + "zones:\n  - {name: sim-od, tier: ondemand, instance_type: g5.xlarge}\n"
                                             "  - {name: sim-spot, tier: spot, instance_type: g5.xlarge}\n")
    app = create_app(settings, store=open_store(f"sqlite://{tmp_path / 'api.db'}"), engine=False)
    with TestClient(app, raise_server_exceptions=False) as client:
        r = client.post("/v1/admin/faults", json={"kind": "zone", "zone": "sim-od", "available": False},
                        headers=auth())
        assert r.status_code == 422 and r.json()["field"] == "zone", r.text
        assert r.json()["detail"] == ("zone: sim-od is an on-demand zone, whose capacity the simulation always has: "
                                      "only a spot zone's can be taken away or given back (spot zones: sim-spot)")
        zones = {z["name"]: z for z in client.get("/v1/zones", headers=auth()).json()["zones"]}
        assert zones["sim-od"]["available"] is True
        r = client.post("/v1/admin/faults", json={"kind": "zone", "zone": "sim-spot", "available": False},
                        headers=auth())
        assert r.status_code == 200, r.text
        zones = {z["name"]: z for z in client.get("/v1/zones", headers=auth()).json()["zones"]}
        assert zones["sim-spot"]["available"] is False
