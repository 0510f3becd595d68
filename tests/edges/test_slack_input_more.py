"""More Slack input checked against the real app with signed requests, as ``test_slack.py`` does: a form body with a
field given twice, and how much of the store ``status`` reads for its "recently ended" jobs."""

from __future__ import annotations

import json
import time
from urllib.parse import urlencode

import pytest

from broker.lifecycle import JobState
from broker.slack.dispatch import ENDED

from .test_slack import (  # noqa: F401  (fixtures: pytest finds them by name in this module)
    command, pressed, signed, slack, slack_app, stub, text_of,
)
from .test_slack_audit import ended

H = 3600


# -- a field given twice ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("fields, name", [
    pytest.param([("text", "cancel j-a2"), ("text", "status")], "text", id="two texts: neither is run"),
    pytest.param([("text", "status"), ("text", "cancel j-a2")], "text", id="two texts the other way round"),
    pytest.param([("text", "cancel j-a2"), ("user_id", "U_B")], "user_id", id="two users: whose is not guessed"),
    pytest.param([("text", "cancel j-a2"), ("command", "/other")], "command", id="two commands"),
])
def test_a_command_with_a_field_given_twice_is_a_400_naming_it_and_does_nothing(slack, store, fields, name):
    """Slack sends each field once; the first of two was taken without a word (``text=cancel j-a2&text=status``
    cancelled j-a2)."""
    base = [("command", "/broker"), ("user_id", "U_A"), ("response_url", ""), ("team_id", "T1"),
            ("channel_id", "C_A")]
    body = urlencode([*base, *fields])
    r = slack.post("/slack/commands", content=body, headers=signed(body))
    assert r.status_code == 400, r.text
    assert r.json() == {"detail": f"field '{name}' is given 2 times; Slack sends each field once, so nothing was "
                                  "done", "field": name}
    assert store.get_job("j-a2").state is JobState.RUNNING


@pytest.mark.parametrize("route", ["/slack/commands", "/slack/interactions"])
def test_a_body_over_the_limit_sent_in_chunks_is_a_413_naming_the_body(slack, store, route):
    """With no Content-Length for the middleware to check, the route reads the body to the limit and stops."""
    def chunks():
        for _ in range(20):
            yield b"text=" + b"x" * 100_000

    r = slack.post(route, content=chunks(), headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 413, r.text
    assert r.json() == {"detail": "body: larger than 1000000 bytes", "field": "body"}
    assert store.get_job("j-a2").state is JobState.RUNNING


def test_a_command_with_each_field_once_still_runs(slack, store):
    body = urlencode([("command", "/broker"), ("text", "cancel j-a2"), ("user_id", "U_A"), ("response_url", ""),
                      ("text_extra", "")])  # an empty field of its own is no repeat
    r = slack.post("/slack/commands", content=body, headers=signed(body))
    assert r.status_code == 200 and "j-a2" in text_of(r.json()), r.text
    assert store.get_job("j-a2").state in (JobState.CANCELLING, JobState.CANCELLED)


def test_a_button_press_with_its_payload_given_twice_is_a_400_and_does_nothing(slack, store):
    def payload(action_id: str) -> str:
        return json.dumps({"type": "block_actions", "user": {"id": "U_A"}, "response_url": "",
                           "actions": [{"action_id": action_id, "value": '{"job":"j-a2"}', "type": "button"}]})

    body = urlencode([("payload", payload("broker_cancel")), ("payload", payload("broker_status"))])
    r = slack.post("/slack/interactions", content=body, headers=signed(body))
    assert r.status_code == 400, r.text
    assert r.json() == {"detail": "field 'payload' is given 2 times; Slack sends each field once, so nothing was "
                                  "done", "field": "payload"}
    assert store.get_job("j-a2").state is JobState.RUNNING


# -- status: the recently ended jobs, without reading every job that ended in the last day -------------------------


def test_status_reads_the_jobs_that_ended_lately_not_all_of_the_days(slack, store, monkeypatch):
    """300 jobs ended over the last day, five in the last minutes: `status` read all 300 (and all 5,000 of a busy
    day, 0.2 s of each `status`) to list five. It reads the last ten minutes' first, and lists the same five."""
    now = time.time()
    for i in range(300):
        ended(store, f"j-day{i:03d}", JobState.SUCCEEDED, submitted=now - 30 * H, ended_at=now - 3 * H - i * 60)
    for i in range(5):
        ended(store, f"j-late{i}", JobState.FAILED, submitted=now - 40 * H, ended_at=now - 60 * (i + 1))
    read = []
    listing = store.list_jobs

    def counted(**kw):
        jobs = listing(**kw)
        if {getattr(s, "value", s) for s in kw.get("states") or ()} == {s.value for s in ENDED}:
            read.append(len(jobs))  # a read of ended jobs: how many it returned
        return jobs

    monkeypatch.setattr(store, "list_jobs", counted)
    said = text_of(command(slack, "status").json())
    assert [i for i in (f"j-late{n}" for n in range(5)) if i in said] == [f"j-late{n}" for n in range(5)], said
    assert "j-day000" not in said and "5 recently ended" in said, said
    assert read and max(read) < 50, read  # was 300: every job that ended in the last day


def test_status_still_finds_the_five_latest_when_they_ended_hours_apart(slack, store):
    """The windows widen until five are found: jobs that ended 2, 5, 9, 20 and 30 hours ago are the five listed, the
    latest first, and one that ended before them is not."""
    now = time.time()
    for i, hours in enumerate((2, 5, 9, 20, 30, 31)):
        ended(store, f"j-h{i}", JobState.SUCCEEDED, submitted=now - 40 * H, ended_at=now - hours * H)
    said = text_of(command(slack, "status").json())
    assert [i for i in ("j-h0", "j-h1", "j-h2", "j-h3", "j-h4") if i in said] == ["j-h0", "j-h1", "j-h2", "j-h3",
                                                                                    "j-h4"], said
    assert said.index("j-h0") < said.index("j-h1") < said.index("j-h4")
    assert "j-h5" not in said, said


# -- a button whose value is not one the broker wrote ---------------------------------------------------------------


@pytest.mark.parametrize("action_id", ["broker_resume", "broker_switch_ondemand", "broker_raise_budget",
                                       "broker_cancel"])
@pytest.mark.parametrize("value", [
    pytest.param("[" * 100_000, id="nested past the JSON parser's depth"),
    pytest.param('{"job":"\\ud800"}', id="a job id with a lone surrogate"),
    pytest.param('{"job":["j-a2"]}', id="a job id that is a list"),
    pytest.param('{"job":"j-a2 j-a1"}', id="a job id with a space"),
])
def test_a_button_whose_value_the_broker_did_not_write_is_out_of_date_not_a_500(slack, store, stub, action_id,
                                                                                value):
    """Before, a value nested past the parser's depth (RecursionError) and a job id with a lone surrogate (encoding
    it for the store) answered 500."""
    reply = pressed(slack, stub, {"action_id": action_id, "value": value}, "U_A", "odd")
    assert "That button is out of date." in reply
    assert store.get_job("j-a2").state is JobState.RUNNING


def test_a_raise_budget_button_past_the_largest_budget_is_refused_as_every_edge_refuses_it(slack, store, stub):
    """A button's budget is a number of micro-dollars, not read as typed money: 10**30 was stored as the budget (past a
    64-bit integer), where the API and Slack's `budget` command refuse anything above $1,000,000,000."""
    before = store.get_job("j-a2").budget
    btn = {"action_id": "broker_raise_budget", "value": json.dumps({"job": "j-a2", "budget": 10**30})}
    assert "must be at most $1,000,000,000" in pressed(slack, stub, btn, "U_A", "huge")
    assert store.get_job("j-a2").budget == before
