"""Slack: signed requests only, commands as a team member, deferred replies, notifications and their buttons.

Slack itself is never contacted: a stub of its Web API, webhooks and
response URLs listens on 127.0.0.1 and every request is signed by the test.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import time
from dataclasses import replace
from types import SimpleNamespace
from urllib.parse import urlencode

import pytest
from fastapi.testclient import TestClient

from broker import cli
from broker.api.edges import install_edges
from broker.auth import Principal
from broker.lifecycle import AttemptState, JobEvent, JobState
from broker.models import Event, event_for
from broker.service import BrokerService, Conflict
from broker.slack import commands, messages
from broker.slack.blocks import start_time
from broker.slack.commands import CommandError
from broker.store import Change
from broker.store.sqlite import SqliteStore
from launchers.base import AttemptStatus, Phase
from launchers.simzones import zones_from_config

from . import world
from .conftest import build_app
from .fakes import FakeLauncher, SlackStub

USERS = {"U_A": "team-a", "U_B": "team-b"}


@pytest.fixture
def stub():
    s = SlackStub()
    yield s
    s.close()


def slack_settings(tmp_path, stub, **notifications):
    cfg = {"signing_secret": world.SIGNING_SECRET, "bot_token": "xoxb-test", "users": USERS, "admins": ["U_ADMIN"],
           "channels": {"team-a": "C_A"}, "webhook_urls": {"team-b": stub.url + "/webhook/b"},
           "api_url": stub.url + "/api/", "spec_url_prefixes": [stub.url + "/specs/"]}
    return world.settings(tmp_path, slack=cfg, notifications={"retries": 3, **notifications})


@pytest.fixture
def slack_app(tmp_path, store, seeded, stub):
    app = build_app(slack_settings(tmp_path, stub), store)
    app.state.notifier.sleep = lambda s: None  # backoff without waiting
    yield app
    app.state.notifier.close()


@pytest.fixture
def slack(slack_app):
    with TestClient(slack_app) as c:
        yield c


def signed(body: str, *, ts: float | None = None, secret: str = world.SIGNING_SECRET) -> dict:
    stamp = str(int(ts if ts is not None else time.time()))
    sig = "v0=" + hmac.new(secret.encode(), f"v0:{stamp}:{body}".encode(), hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": sig,
            "Content-Type": "application/x-www-form-urlencoded"}


def command(client, text: str, *, user: str = "U_A", response_url: str = "", **sign):
    body = urlencode({"command": "/broker", "text": text, "user_id": user, "response_url": response_url,
                      "team_id": "T1", "channel_id": "C_A"})
    return client.post("/slack/commands", content=body, headers=signed(body, **sign))


def press(client, action_id: str, value: str, *, user: str = "U_A", response_url: str = ""):
    payload = {"type": "block_actions", "user": {"id": user}, "response_url": response_url,
               "actions": [{"action_id": action_id, "value": value, "type": "button"}]}
    body = urlencode({"payload": json.dumps(payload)})
    return client.post("/slack/interactions", content=body, headers=signed(body))


def text_of(reply: dict) -> str:
    parts = [reply.get("text", "")]
    for b in reply.get("blocks", []):
        parts.append((b.get("text") or {}).get("text", ""))
        parts += [f.get("text", "") for f in b.get("fields", [])] + [e.get("text", "") for e in b.get("elements", [])]
    return "\n".join(p for p in parts if isinstance(p, str))


# -- signatures -------------------------------------------------------------------------------------


@pytest.mark.parametrize("sign", [
    {"secret": "not-the-secret"},
    {"ts_offset": -6 * 60},
    {"ts_offset": 6 * 60},
], ids=["signed with another secret → 401", "timestamp older than 5 minutes → 401",
        "timestamp 6 minutes in the future → 401"])
def test_a_bad_signature_is_refused_and_does_nothing(slack, store, sign):
    sign = dict(sign)
    if "ts_offset" in sign:  # relative to when the test runs, not when the module was collected
        sign["ts"] = time.time() + sign.pop("ts_offset")
    before = len(store.list_jobs())
    r = command(slack, "submit budget=$5\nname: sneaky\nrun: echo hi", **sign)
    assert r.status_code == 401
    assert len(store.list_jobs()) == before
    payload = json.dumps({"type": "block_actions", "user": {"id": "U_A"},
                          "actions": [{"action_id": "broker_cancel", "value": '{"job":"j-a2"}'}]})
    body = urlencode({"payload": payload})
    assert slack.post("/slack/interactions", content=body, headers=signed(body, **sign)).status_code == 401
    assert store.get_job("j-a2").state is JobState.RUNNING


@pytest.mark.parametrize("payload", [
    "not json", "[1, 2]", '{"user": {"id": "U_A"}}', '{"user": {"id": "U_A"}, "actions": []}',
    '{"user": {"id": "U_A"}, "actions": ["broker_cancel"]}', '{"user": "U_A", "actions": [{}]}',
    "[" * 50_000 + "]" * 50_000,
], ids=["not JSON", "a list", "no actions", "an empty action list", "an action that is a string",
        "a user that is a string", "nested 50,000 deep (a RecursionError, a 500)"])
def test_a_signed_interaction_that_is_not_block_actions_is_a_400(slack, store, payload):
    body = urlencode({"payload": payload})
    r = slack.post("/slack/interactions", content=body, headers=signed(body))
    assert r.status_code == 400 and r.json() == {"detail": "payload: not a Slack block_actions payload",
                                                 "field": "payload"}
    assert store.get_job("j-a2").state is JobState.RUNNING


@pytest.mark.parametrize("headers", [
    {"X-Slack-Request-Timestamp": "9" * 5000, "X-Slack-Signature": "v0=00"},
    {"X-Slack-Request-Timestamp": "now", "X-Slack-Signature": "v0=\u00e9"},
], ids=["a timestamp of 5000 digits", "a fresh timestamp and a signature outside ASCII"])
def test_headers_slacks_sdk_raised_on_are_a_401_not_a_500(slack, store, headers):
    headers = {k: str(int(time.time())) if v == "now" else v for k, v in headers.items()}
    body = urlencode({"command": "/broker", "text": "cancel j-a2", "user_id": "U_A"})
    headers = {k: v.encode("latin-1") for k, v in headers.items()}  # as a client sends them: bytes, not UTF-8
    r = slack.post("/slack/commands", content=body, headers=headers)
    assert r.status_code == 401 and "signature" in r.json()["detail"]
    assert store.get_job("j-a2").state is JobState.RUNNING


def test_a_signed_body_that_is_not_utf8_is_a_401_not_a_500(slack):
    body = b"text=\xff\xfe&user_id=U_A"  # Slack's bodies are UTF-8: this one cannot be Slack's
    stamp = str(int(time.time()))
    sig = "v0=" + hmac.new(world.SIGNING_SECRET.encode(), f"v0:{stamp}:".encode() + body, hashlib.sha256).hexdigest()
    r = slack.post("/slack/commands", content=body, headers={"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": sig})
    assert r.status_code == 401


def test_a_body_changed_after_signing_is_refused(slack):
    body = urlencode({"command": "/broker", "text": "help", "user_id": "U_A"})
    headers = signed(body)
    assert slack.post("/slack/commands", content=body.replace("help", "queue"), headers=headers).status_code == 401


# -- commands ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("", commands.Command("help")),
    ("status", commands.Command("status")),
    ("status j-a1", commands.Command("status", job_id="j-a1")),
    ("resume j-b1 force", commands.Command("resume", job_id="j-b1", force=True)),
    ("budget j-a2 $12.50", commands.Command("budget", job_id="j-a2", amount=12_500_000)),
    ("costs 30d team-b", commands.Command("costs", team="team-b", period="30d")),
    ("costs 1d team-b", commands.Command("costs", team="team-b", period="24h")),  # as `broker costs --period 1d`
    ("costs", commands.Command("costs")),
    ("status `j-a1`", commands.Command("status", job_id="j-a1")),
    ("status j-a1.", commands.Command("status", job_id="j-a1")),
    ("submit <https://example.com/t.yaml> budget=$50",
     commands.Command("submit", url="https://example.com/t.yaml", options={"budget_usd": "50"})),
    ("submit budget=$5 priority=3\n```\nname: x\nrun: echo &lt;hi&gt;\n```",
     commands.Command("submit", yaml="name: x\nrun: echo <hi>", options={"budget_usd": "5", "priority": "3"})),
], ids=["nothing → help", "status alone → my jobs", "status with an id", "resume with force",
        "budget with dollars and cents → micro-dollars", "costs with period and team in any order",
        "costs with another spelling of a period → its own name",
        "costs with no period: none (the report's 7 days; a job's whole life)",
        "an id pasted as Slack shows code is that id", "an id closing a sentence is that id",
        "submit a Slack-wrapped link with a budget",
        "submit fenced inline YAML, unescaping Slack's &lt; &gt;"])
def test_command_text_parses(text, expected):
    assert commands.parse(text) == expected


@pytest.mark.parametrize("text", ["launch j-1", "budget j-a2 lots", "budget j-a2 $0", "cancel", "logs a b",
                                  "submit", "submit colour=red\nrun: x", "status j-1\nmore"],
                         ids=["an unknown command", "a budget that is not money", "a zero budget",
                              "cancel without an id", "logs with two ids", "submit without a task",
                              "submit with an unknown option", "status over two lines"])
def test_bad_command_text_says_how_to_write_it(text):
    with pytest.raises(CommandError):
        commands.parse(text)


def test_submit_inline_yaml_then_follow_it(slack, store):
    r = command(slack, "submit budget=$4 priority=2\nname: from-slack\nrun: echo hi")
    assert r.status_code == 200
    reply = r.json()
    assert reply["response_type"] == "ephemeral" and "Submitted" in text_of(reply)
    job = next(j for j in store.list_jobs() if j.name == "from-slack")
    assert (job.team, job.budget, job.priority, job.submitted_by) == ("team-a", 4_000_000, 2, "slack:U_A")
    status = text_of(command(slack, f"status {job.id}").json())
    assert job.id in status and "queued" in status
    queue = text_of(command(slack, "queue").json())
    assert "j-a3" in queue and job.id in queue and queue.index("j-a3") < queue.index(job.id)
    mine = text_of(command(slack, "status").json())
    assert "j-a2" in mine and "j-b1" not in mine


@pytest.mark.parametrize("priority", ["\u0661\u0662", "1.5", "high"], ids=["Arabic-Indic digits", "a fraction", "a word"])
def test_submit_reads_a_priority_as_the_api_does(slack, store, priority):
    """ASCII digits only: int() read "١٢" as 12, which the API refuses as broker.priority."""
    before = len(store.list_jobs())
    said = text_of(command(slack, f"submit budget=$4 priority={priority}\nname: p\nrun: echo hi").json())
    assert "priority: must be a whole number" in said and len(store.list_jobs()) == before


def test_submit_reads_a_deadline_as_the_cli_and_the_api_do(slack, store):
    """One parser for every edge: `deadline=45min` from Slack is 45 minutes, as `--deadline 45min` is."""
    before = time.time()
    r = command(slack, "submit budget=$4 deadline=45min\nname: soon\nrun: echo hi")
    assert r.status_code == 200 and "Submitted" in text_of(r.json()), text_of(r.json())
    job = next(j for j in store.list_jobs() if j.name == "soon")
    assert before + 45 * 60 <= job.deadline <= time.time() + 45 * 60
    # the moment read is said back, on each reader's own clock, the UTC minute for a client that cannot show that
    due = time.strftime("%Y-%m-%d %H:%MZ", time.gmtime(job.deadline))
    assert f" · due <!date^{int(job.deadline)}^{{date_short_pretty}} {{time}}|{due}>" in text_of(r.json())
    status = command(slack, f"status {job.id}").json()
    said = [f["text"] for b in status["blocks"] for f in b.get("fields", [])]
    assert f"*Due*\n<!date^{int(job.deadline)}^{{date_short_pretty}} {{time}}|{due}>" in said, said


def test_submit_reads_a_deadline_in_a_named_time_zone(slack, store):
    day = time.strftime("%Y-%m-%d", time.gmtime(time.time() + 2 * 86400))
    r = command(slack, f'submit budget=$4 deadline="{day} 09:00 Asia/Tokyo"\nname: tokyo\nrun: echo hi')
    assert "Submitted" in text_of(r.json()), text_of(r.json())
    job = next(j for j in store.list_jobs() if j.name == "tokyo")
    assert time.strftime("%Y-%m-%d %H:%M", time.gmtime(job.deadline + 9 * 3600)) == f"{day} 09:00"  # Tokyo: UTC+9


def test_submit_from_a_url_replies_later_through_response_url(slack, store, stub):
    stub.files["/specs/t.yaml"] = "name: from-url\nrun: echo hi\n"
    r = command(slack, f"submit <{stub.url}/specs/t.yaml> budget=$3", response_url=stub.url + "/respond/1")
    assert r.status_code == 200 and "Working" in r.json()["text"]
    (later,) = stub.wait_for("/respond/1")
    assert "Submitted" in text_of(later) and later["replace_original"] is False
    assert any(j.name == "from-url" and j.budget == 3_000_000 for j in store.list_jobs())
    r = command(slack, "submit https://evil.example/t.yaml", response_url=stub.url + "/respond/2")
    assert "not allowed" in text_of(stub.wait_for("/respond/2")[0])


def test_logs_come_later_through_response_url(slack_app, slack, stub):
    slack_app.state.service.launcher.output["j-a2-a1"] = b"step 100 loss 0.5\n"
    assert command(slack, "logs j-a2", response_url=stub.url + "/respond/logs").status_code == 200
    assert "step 100 loss 0.5" in text_of(stub.wait_for("/respond/logs")[0])


def test_a_user_acts_only_on_their_teams_jobs(slack, store):
    reply = text_of(command(slack, "cancel j-a2", user="U_B").json())
    assert "No job `j-a2`" in reply and "Did you mean" not in reply  # another team's id is not named
    assert "Did you mean `j-a2`?" in text_of(command(slack, "status a2", user="U_A").json())  # the j- left out
    assert store.get_job("j-a2").state is JobState.RUNNING
    assert "only your team" in text_of(command(slack, "costs team-a", user="U_B").json())
    typo = text_of(command(slack, "costs taem-b", user="U_B").json())  # no such team: a typo, not a permission
    assert "There is no team `taem-b`. Did you mean `team-b`? You can see your team's costs (team-b)." in typo, typo
    assert "not mapped to a team" in text_of(command(slack, "status", user="U_NOBODY").json())
    nobody = command(slack, "status", user="")  # signed, but no user: malformed, not "Your Slack user `None`"
    assert nobody.status_code == 400 and nobody.json() == {"detail": "a slash command carries user_id: none was sent",
                                                           "field": "user_id"}, nobody.text
    admin = text_of(command(slack, "costs team-a", user="U_ADMIN").json())
    assert "$6.50" in admin
    assert "there is no team 'team-z' (teams: " in text_of(command(slack, "costs team-z", user="U_ADMIN").json())
    assert "Cancelling" in text_of(command(slack, "cancel j-a2").json())
    assert store.get_job("j-a2").state is JobState.CANCELLING


def test_costs_command_matches_the_report(slack):
    reply = text_of(command(slack, "costs", user="U_B").json())
    assert "$0.40" in reply and "Saved $1.60 (80%)" in reply


def test_costs_keeps_and_says_the_spend_of_jobs_the_retention_policy_pruned(tmp_path, store, seeded, stub):
    from dataclasses import replace

    from broker.lifecycle import AttemptState, JobState
    from broker.models import Attempt, Job
    from broker.retention import DAY, Retention
    from broker.store import Change

    now = time.time()
    ended = now - 60 * DAY  # a job that ran for an hour two months ago, pruned at 30 days
    job = store.commit(Change(job=Job(id="j-pruned", name="old", team="team-a", state=JobState.QUEUED,
                                      spec={"run": "echo"}, budget=50_000_000, priority=0,
                                      submitted_at=ended - 7200, updated_at=ended - 7200), expected_version=None))
    ran = Attempt(id="j-pruned-a1", job_id=job.id, n=1, state=AttemptState.SUCCEEDED, launcher="local",
                  placement={"tier": "spot", "zone": "sim-a"}, price_per_hour=7_000_000, created_at=ended - 3600,
                  started_at=ended - 3600, ended_at=ended, billed_until=ended, cost=7_000_000)
    store.commit(Change(job=replace(job, state=JobState.SUCCEEDED, updated_at=ended, attempts=1, spent=7_000_000),
                        expected_version=job.version, attempts=[ran]))
    assert Retention(store, days=30, pause=0).prune(now) == 1
    app = build_app(replace(slack_settings(tmp_path, stub), job_retention_days=30), store)
    try:
        with TestClient(app) as client:
            quarter = text_of(command(client, "costs 90d", user="U_ADMIN").json())
            week = text_of(command(client, "costs 7d", user="U_ADMIN").json())
    finally:
        app.state.notifier.close()
    # the pruned job's $7.00 is still in the quarter's total (from the pruned-cost ledger), and the reply says so
    assert "Includes $7.00 spent in this window by jobs since pruned" in quarter and "`j-pruned`" not in quarter, \
        quarter
    assert "pruned" not in week, week  # a week is within the horizon: nothing pruned was in it


def test_costs_of_a_job_id_is_that_jobs_cost_not_a_team(slack):
    # `costs j-a1` was read as a team named "j-a1": "You can see only your team's costs (team-a)", for the user's
    # own job; the cost of one job is what `broker costs <job id>` and /v1/costs/jobs/{id} show
    reply = text_of(command(slack, "costs j-a1").json())
    assert "only your team" not in reply
    assert "`j-a1` (team-a, succeeded), over its whole life: $5.00 of its $20.00 budget" in reply, reply
    assert "Saved $15.00 (75%) against the same time on on-demand ($20.00)." in reply
    assert "1. preempted on spot in us-east-1a at $0.50/h, 4.0 h — $2.00" in reply
    assert "2. succeeded on spot in us-east-1b at $0.50/h, 6.0 h — $3.00" in reply
    assert "no attempt has run, so it has cost nothing" in text_of(command(slack, "costs j-a3").json()).lower()
    # admins see any team's job; another team's job is not found for a team member, and not named
    assert "`j-b1` (team-b, failed), over its whole life: $0.40" in text_of(command(slack, "costs j-b1",
                                                                                    user="U_ADMIN").json())
    other = text_of(command(slack, "costs j-b1", user="U_A").json())
    assert "No job `j-b1` that you can see." in other and "$0.40" not in other  # as `status j-b1` answers
    # a team is still a team
    assert "Spend for team-a, last 30d" in text_of(command(slack, "costs team-a 30d", user="U_ADMIN").json())
    # a period with a job is refused, as `broker costs JOB --period` is: it was answered with the whole life, unsaid
    with_period = text_of(command(slack, "costs j-a1 7d").json())
    assert "A job's costs are its whole life: `costs j-a1` takes no period (`7d`)." in with_period, with_period
    assert "$5.00" not in with_period


def test_a_mistyped_command_is_answered_with_the_likely_one(slack):
    said = text_of(command(slack, "stauts j-a1").json())
    assert "I don't know `stauts`. Did you mean `status`? Try `help`." in said, said
    assert "Did you mean" not in text_of(command(slack, "frobnicate").json())


def last_event(store, job_id: str) -> Event:
    return store.events(job_id)[-1]


def set_job(store, job_id: str, **fields):
    job = store.get_job(job_id)
    return store.commit(Change(job=replace(job, **fields), expected_version=job.version))


def test_budget_command_sets_the_budget_as_the_slack_user(slack, store):
    reply = text_of(command(slack, "budget j-a2 $30").json())
    assert "Budget raised from $2.00 to $30.00" in reply and "j-a2" in reply
    job = store.get_job("j-a2")
    assert (job.budget, job.state) == (30_000_000, JobState.RUNNING)
    ev = last_event(store, "j-a2")
    assert (ev.event, ev.actor, ev.data) == ("budget_changed", "slack:U_A", {"old": 2_000_000, "new": 30_000_000})
    # below what it already spent (its running attempt billed to now: $1.55 and the part of a second since, which is
    # billed too and so rounds up to $1.56; the engine last recorded $1.50): refused by the service, nothing recorded
    said = text_of(command(slack, "budget j-a2 $1").json())
    assert "already spent ($1.55)" in said or "already spent ($1.56)" in said, said
    assert store.get_job("j-a2").budget == 30_000_000 and last_event(store, "j-a2").seq == ev.seq
    assert "No job `j-a2`" in text_of(command(slack, "budget j-a2 $50", user="U_B").json())
    # a budget is a cap: a fraction of a micro-dollar is refused, never rounded up past what was typed
    assert "more than 6 decimal places" in text_of(command(slack, "budget j-a2 $40.0000001").json())
    assert store.get_job("j-a2").budget == 30_000_000 and last_event(store, "j-a2").seq == ev.seq


def test_resume_of_a_failure_in_the_jobs_own_code_answers_with_the_diagnosis_unless_forced(slack, store):
    before = len(store.events("j-b1"))
    reply = text_of(command(slack, "resume j-b1", user="U_B").json())
    assert "Out of GPU memory at step 450 (batch size 64)" in reply
    assert "/broker resume j-b1 force" in reply
    assert store.get_job("j-b1").state is JobState.FAILED and len(store.events("j-b1")) == before
    reply = text_of(command(slack, "resume j-b1 force", user="U_B").json())
    assert "Resumed `j-b1`" in reply and "from step 400 (forced)" in reply
    job = store.get_job("j-b1")
    assert job.state is JobState.QUEUED
    ev = last_event(store, "j-b1")
    assert (ev.event, ev.actor, ev.from_state, ev.to_state) == ("resume", "slack:U_B", "failed", "queued")
    assert ev.data == {"checkpoint_step": 400, "force": True}


def test_resume_of_an_infrastructure_failure_needs_no_force(slack, store):
    set_job(store, "j-b1", diagnosis={"class": "node_lost", "infrastructure": True, "text": "The node was lost."})
    assert "Resumed `j-b1`" in text_of(command(slack, "resume j-b1", user="U_B").json())
    assert store.get_job("j-b1").state is JobState.QUEUED
    assert last_event(store, "j-b1").data == {"checkpoint_step": 400, "force": False}


@pytest.mark.parametrize("job_id, says", [
    ("j-a2", ":warning: j-a2 is running, not ended: only a failed or budget-stopped job resumes"),
    ("j-a3", ":warning: j-a3 is queued, not ended: only a failed or budget-stopped job resumes"),
    ("j-a1", ":warning: j-a1 has already ended (succeeded): only a failed or budget-stopped job resumes"),
], ids=["running", "queued", "succeeded"])
def test_only_failed_or_budget_stopped_jobs_resume(slack, store, job_id, says):
    before = store.get_job(job_id)
    assert says in text_of(command(slack, f"resume {job_id} force").json())
    after = store.get_job(job_id)
    assert (after.state, after.version) == (before.state, before.version)


def test_a_budget_stopped_job_resumes_once_its_budget_is_raised(slack, store):
    set_job(store, "j-b1", state=JobState.STOPPED_BUDGET, spent=3_000_000,
            diagnosis={"class": "budget_stop", "infrastructure": True, "text": "Stopped at its budget."})
    reply = text_of(command(slack, "resume j-b1", user="U_B").json())
    assert "Not resumed: only $0.00 of the $3.00 budget is left" in reply
    assert store.get_job("j-b1").state is JobState.STOPPED_BUDGET
    assert "Budget raised from $3.00 to $4.00" in text_of(command(slack, "budget j-b1 $4", user="U_B").json())
    assert "Resumed `j-b1`" in text_of(command(slack, "resume j-b1", user="U_B").json())
    assert store.get_job("j-b1").state is JobState.QUEUED
    assert [(e.event, e.actor) for e in store.events("j-b1")[-2:]] == [("budget_changed", "slack:U_B"),
                                                                      ("resume", "slack:U_B")]


def test_a_stopped_job_that_saved_no_checkpoint_is_offered_a_resume_from_the_start(slack, store):
    """Its button read "Resume (no checkpoint yet)", of a job that has ended and saves nothing more until resumed."""
    set_job(store, "j-b1", state=JobState.STOPPED_BUDGET, spent=1_000_000, last_checkpoint={},
            diagnosis={"class": "budget_stop", "infrastructure": True, "text": "Stopped at its budget."})
    reply = command(slack, "status j-b1", user="U_B").json()
    buttons = {e["text"]["text"] for b in reply["blocks"] if b["type"] == "actions" for e in b["elements"]}
    assert "Resume from the start" in buttons, buttons
    assert not any("yet" in b for b in buttons), buttons


def test_status_of_a_failed_job_has_the_buttons_that_continue_it_in_one_click(slack, store, stub):
    # the buttons were only in the failure's notification: a user who came back later and asked `status` had to
    # find and type the command; a failure of the job's own asks before it runs again, with the diagnosis
    reply = command(slack, "status j-b1", user="U_B").json()
    buttons = {e["text"]["text"]: e for b in reply["blocks"] if b["type"] == "actions" for e in b["elements"]}
    assert set(buttons) == {"Resume from step 400", "Switch to on-demand"}  # out of memory: no raise budget
    resume = buttons["Resume from step 400"]
    assert json.loads(resume["value"]) == {"job": "j-b1", "force": True}
    assert "Out of GPU memory at step 450" in resume["confirm"]["text"]["text"]
    assert reply["blocks"][-1]["type"] == "context"  # the dashboard link stays last
    r = press(slack, resume["action_id"], resume["value"], user="U_B", response_url=f"{stub.url}/respond/status-b1")
    assert r.status_code == 200
    assert "Resumed `j-b1`" in text_of(stub.wait_for("/respond/status-b1")[0])
    assert store.get_job("j-b1").state is JobState.QUEUED
    assert (last_event(store, "j-b1").event, last_event(store, "j-b1").actor) == ("resume", "slack:U_B")


def test_status_of_an_infrastructure_failure_resumes_without_asking(slack, store, stub):
    set_job(store, "j-b1", diagnosis={"class": "node_lost", "infrastructure": True, "text": "The node was lost."})
    reply = command(slack, "status j-b1", user="U_B").json()
    resume = next(e for b in reply["blocks"] if b["type"] == "actions" for e in b["elements"]
                  if e["text"]["text"] == "Resume from step 400")
    assert json.loads(resume["value"]) == {"job": "j-b1"} and "confirm" not in resume
    assert "Resumed `j-b1`" in pressed(slack, stub, resume, "U_B", "infra")
    assert last_event(store, "j-b1").data == {"checkpoint_step": 400, "force": False}


def test_status_of_a_budget_stopped_job_offers_a_raise_then_a_resume(slack, store):
    set_job(store, "j-b1", state=JobState.STOPPED_BUDGET, spent=3_000_000,
            diagnosis={"class": "budget_stop", "infrastructure": True, "text": "Stopped at its budget."})
    reply = command(slack, "status j-b1", user="U_B").json()
    buttons = {e["text"]["text"]: e for b in reply["blocks"] if b["type"] == "actions" for e in b["elements"]}
    # what is left pays for no resume: the raise alone goes on (Resume and Switch could only be refused)
    assert set(buttons) == {"Raise budget to $5.00", "Cancel"}
    label = "Raise budget to $5.00"
    assert press(slack, buttons[label]["action_id"], buttons[label]["value"], user="U_B").status_code == 200
    reply = command(slack, "status j-b1", user="U_B").json()
    buttons = {e["text"]["text"]: e for b in reply["blocks"] if b["type"] == "actions" for e in b["elements"]}
    assert {"Resume from step 400", "Switch to on-demand"} <= set(buttons)
    label = "Resume from step 400"
    assert press(slack, buttons[label]["action_id"], buttons[label]["value"], user="U_B").status_code == 200
    job = store.get_job("j-b1")
    assert (job.state, job.budget) == (JobState.QUEUED, 5_000_000)


@pytest.mark.parametrize("job_id", ["j-a1", "j-a2", "j-a3"], ids=["succeeded", "running", "queued"])
def test_status_of_a_job_with_nothing_to_continue_has_no_buttons(slack, job_id):
    reply = command(slack, f"status {job_id}").json()
    assert [b for b in reply["blocks"] if b["type"] == "actions"] == []


def test_the_edges_use_the_apps_own_service_and_install_once(tmp_path, store, seeded, stub):
    app = build_app(slack_settings(tmp_path, stub), store)
    routes = len(app.routes)
    install_edges(app, BrokerService(app.state.settings, store), app.state.settings)  # a second call: no-op
    assert len(app.routes) == routes
    with TestClient(app) as c:  # the Slack routes reach the app's service, which holds the launcher's logs
        app.state.service.launcher.output["j-a2-a1"] = b"step 7 loss 0.1\n"
        assert command(c, "logs j-a2", response_url=stub.url + "/respond/own").status_code == 200
        assert "step 7 loss 0.1" in text_of(stub.wait_for("/respond/own")[0])
    app.state.notifier.close()


def test_without_a_channel_or_webhook_commands_work_and_nothing_is_notified(tmp_path, store, seeded):
    app = build_app(world.settings(tmp_path, slack={"signing_secret": world.SIGNING_SECRET, "users": USERS}), store)
    assert app.state.notifier is None
    with TestClient(app) as c:
        assert "Resumed `j-b1`" in text_of(command(c, "resume j-b1 force", user="U_B").json())
    assert store.get_job("j-b1").state is JobState.QUEUED



def test_a_resume_or_cancel_from_slack_is_posted_to_the_team_channel_once(slack_app, slack, store, stub):
    # the service commits these (not the engine), and the channel still hears who did what
    assert "Resumed `j-b1`" in text_of(command(slack, "resume j-b1 force", user="U_B").json())
    (msg,) = stub.wait_for("/webhook/b")
    assert "train-j-b1 j-b1 (team-b) resumed by slack:U_B from step 400 (forced)." in msg["text"]
    assert "Cancelling j-a3" in text_of(command(slack, "cancel j-a3").json())  # queued: cancelled at once
    (msg,) = stub.wait_for("/api/chat.postMessage")
    assert msg["channel"] == "C_A" and "train-j-a3 j-a3 (team-a) was cancelled by slack:U_A." in msg["text"]
    command(slack, "cancel j-a2")  # running: the engine's "ended" says it once the attempt has stopped
    assert slack_app.state.notifier.flush(5)
    assert len(stub.posts("/api/chat.postMessage")) == 1 and len(stub.posts("/webhook/b")) == 1

# -- notifications and buttons, from the real engine ------------------------------------------------


def buttons_of(msg: dict) -> dict[str, dict]:
    return {e["text"]["text"]: e for b in msg["blocks"] if b["type"] == "actions" for e in b["elements"]}


def pressed(client, stub, btn: dict, user: str, name: str, value: str | None = None) -> str:
    """Press a button as ``user``; the reply Slack gets on the response URL, as text."""
    r = press(client, btn["action_id"], value or btn["value"], user=user, response_url=f"{stub.url}/respond/{name}")
    assert r.status_code == 200
    return text_of(stub.wait_for(f"/respond/{name}")[0])


@pytest.fixture
def engine_app(tmp_path, stub):
    """A fresh store (no seeded world) and the app with its real engine, ticked by the test."""
    store = SqliteStore(tmp_path / "engine.db")
    launcher = FakeLauncher()
    # an on-demand zone, so that the "Switch to on-demand" buttons have somewhere to switch to
    settings = replace(slack_settings(tmp_path, stub),
                       zones=zones_from_config([{"name": "sim-od", "tier": "ondemand", "instance_type": "g5.xlarge"}]))
    app = build_app(settings, store, launcher=launcher, engine=True)
    app.state.notifier.sleep = lambda s: None
    yield app
    app.state.notifier.close()
    store.close()


def running(app, job_id: str, team: str, placement: dict, *, budget: int, checkpoint_step: int | None,
            last_step: int | None, started_ago: int = 3600):
    """A job running attempt 1 on ``placement``, with a committed checkpoint and a last reported step."""
    now = time.time()
    ckpt = {"step": checkpoint_step, "uri": f"file:///ckpt/{job_id}/{checkpoint_step}", "at": now - 60} \
        if checkpoint_step is not None else None
    job = world.job(job_id, team, JobState.RUNNING, submitted=now - started_ago - 60, budget=budget, spent=0,
                    attempts=1, placement=placement, checkpoint=ckpt)
    att = replace(world.attempt(job_id, 1, AttemptState.RUNNING, placement, start=now - started_ago, seconds=0,
                                cost=0, running=True), last_step=last_step, first_step=0)
    app.state.service.store.commit(Change(job=job, expected_version=None, attempts=[att], events=[
        Event(job_id=job_id, time=now, event="start", from_state="launching", to_state="running",
              reason="the attempt started", actor="engine", attempt=1)]))
    app.state.service.launcher.statuses[f"{job_id}-a1"] = AttemptStatus(Phase.RUNNING, started_at=now - started_ago)


def test_an_engine_failure_posts_the_diagnosis_and_its_buttons_act_as_the_presser(engine_app, stub):
    store, launcher = engine_app.state.service.store, engine_app.state.service.launcher
    running(engine_app, "j-oom", "team-b", world.onprem(200_000), budget=4_000_000, checkpoint_step=400,
            last_step=450)
    launcher.output["j-oom-a1"] = b"step 450 batch_size=64\ntorch.OutOfMemoryError: CUDA out of memory.\n"
    launcher.statuses["j-oom-a1"] = AttemptStatus(Phase.FAILED, exit_code=1, ended_at=time.time())
    engine_app.state.engine.tick()

    job = store.get_job("j-oom")
    assert job.state is JobState.FAILED and job.diagnosis["class"] == "gpu_oom"
    assert not job.diagnosis["infrastructure"]
    (msg,) = stub.wait_for("/webhook/b")  # team-b posts through its webhook
    assert f"failed: {job.diagnosis['text']}" in text_of(msg)
    assert "Out of GPU memory (batch size 64) after step 450 (the last the job reported)" in job.diagnosis["text"]
    buttons = buttons_of(msg)
    assert set(buttons) == {"Resume from step 400", "Switch to on-demand"}  # out of memory: no raise budget
    resume = buttons["Resume from step 400"]
    assert "failed for a reason of its own, likely to recur: Out of GPU memory" in resume["confirm"]["text"]["text"]

    slack = TestClient(engine_app)  # not entered: the lifespan would start the engine's own thread
    # another team presses it: refused, nothing changes
    assert "No job `j-oom`" in pressed(slack, stub, resume, "U_A", "other-team")
    # a button from before force was asked for (no "force" in its value): the diagnosis, nothing changes
    old = pressed(slack, stub, resume, "U_B", "old", value='{"job":"j-oom"}')
    assert "Not resumed: the job failed for a reason of its own that a resume would likely meet again: Out of GPU memory" in old and "resume j-oom force" in old
    assert "not resumed: not resumed" not in old.lower()  # the service's words begin so: said once
    assert store.get_job("j-oom").state is JobState.FAILED
    # raise the budget: the service records who did it
    assert "Budget raised from $4.00 to $6.00" in pressed(slack, stub, messages.raise_button(store.get_job("j-oom"), 50), "U_B", "r")
    ev = last_event(store, "j-oom")
    assert (store.get_job("j-oom").budget, ev.event, ev.actor) == (6_000_000, "budget_changed", "slack:U_B")
    # resume, confirmed: a new attempt will start from step 400
    assert "Resumed `j-oom`" in pressed(slack, stub, resume, "U_B", "resume")
    ev = last_event(store, "j-oom")
    assert store.get_job("j-oom").state is JobState.QUEUED
    assert (ev.event, ev.actor, ev.data) == ("resume", "slack:U_B", {"checkpoint_step": 400, "force": True})
    # queued now: resuming again is refused; switching to on-demand pins the tier of its next attempt
    assert "`j-oom` was already resumed by slack:U_B at " in pressed(slack, stub, resume, "U_B", "again")
    assert "Switched to on-demand `j-oom`" in pressed(slack, stub, buttons["Switch to on-demand"], "U_B", "od")
    job, ev = store.get_job("j-oom"), last_event(store, "j-oom")
    assert (job.state, job.force_tier, ev.event, ev.actor) == (JobState.QUEUED, "ondemand", "switch_tier",
                                                               "slack:U_B")



def test_switch_to_on_demand_after_a_failure_of_the_jobs_own_shows_the_diagnosis_before_it_runs_again(engine_app, stub):
    store, launcher = engine_app.state.service.store, engine_app.state.service.launcher
    running(engine_app, "j-oom", "team-b", world.onprem(200_000), budget=4_000_000, checkpoint_step=400,
            last_step=450)
    launcher.output["j-oom-a1"] = b"step 450 batch_size=64\ntorch.OutOfMemoryError: CUDA out of memory.\n"
    launcher.statuses["j-oom-a1"] = AttemptStatus(Phase.FAILED, exit_code=1, ended_at=time.time())
    engine_app.state.engine.tick()
    (msg,) = stub.wait_for("/webhook/b")
    ondemand = buttons_of(msg)["Switch to on-demand"]
    confirm = ondemand["confirm"]["text"]["text"]
    assert confirm.startswith("It failed for a reason of its own, likely to recur: Out of GPU memory (batch size 64) after step 450")
    assert confirm.endswith("On-demand will not change that. Run it again anyway, on on-demand, from step 400?")
    assert json.loads(ondemand["value"]) == {"job": "j-oom", "force": True}

    slack = TestClient(engine_app)  # not entered: the lifespan would start the engine's own thread
    # a button that did not show the diagnosis (one posted before it did): the diagnosis, and a button that asks
    r = press(slack, ondemand["action_id"], '{"job":"j-oom"}', user="U_B", response_url=f"{stub.url}/respond/old")
    assert r.status_code == 200
    (reply,) = stub.wait_for("/respond/old")
    assert "Not switched to on-demand: `j-oom` failed for a reason of its own, likely to recur: Out of GPU memory" \
        in text_of(reply)
    assert store.get_job("j-oom").state is JobState.FAILED and store.get_job("j-oom").force_tier is None
    again = buttons_of(reply)["Switch to on-demand"]
    assert again["confirm"] == ondemand["confirm"] and again["value"] == ondemand["value"]
    # confirmed: it runs again on on-demand, from its checkpoint, recorded as forced
    assert "Switched to on-demand `j-oom`" in pressed(slack, stub, again, "U_B", "od")
    job, ev = store.get_job("j-oom"), last_event(store, "j-oom")
    assert (job.state, job.force_tier) == (JobState.QUEUED, "ondemand")
    assert (ev.event, ev.actor, ev.data) == ("resume", "slack:U_B", {"checkpoint_step": 400, "force": True})


def test_a_long_diagnosis_is_shortened_in_a_confirmation_never_the_question():
    ask = "On-demand will not change that. Run it again anyway, on on-demand, from step 400?"
    text = messages.recur_warning("Out of GPU memory. " * 40, ask)
    assert len(text) == messages.CONFIRM_CHARS and text.endswith("… " + ask)
    assert text.startswith("It failed for a reason of its own, likely to recur: Out of GPU memory.")


def test_broker_worker_posts_its_engines_events(tmp_path, stub):
    # BROKER_ENGINE=off: the engine runs in `broker worker`, and its events reach Slack from there
    store, launcher = SqliteStore(tmp_path / "worker.db"), FakeLauncher()
    engine, notifier = cli.worker_engine(slack_settings(tmp_path, stub), store, launcher)
    notifier.sleep = lambda s: None
    holder = SimpleNamespace(state=SimpleNamespace(service=SimpleNamespace(store=store, launcher=launcher)))
    running(holder, "j-w", "team-b", world.onprem(200_000), budget=4_000_000, checkpoint_step=400, last_step=450)
    launcher.statuses["j-w-a1"] = AttemptStatus(Phase.FAILED, exit_code=1, ended_at=time.time())
    engine.tick()
    (msg,) = stub.wait_for("/webhook/b")
    notifier.close()
    store.close()
    assert "train-j-w j-w (team-b) failed:" in msg["text"] and "Resume from step 400" in buttons_of(msg)


def test_an_engine_preemption_posts_zone_and_steps_lost_then_the_resumed_start(engine_app, stub):
    store, launcher, engine = (engine_app.state.service.store, engine_app.state.service.launcher,
                               engine_app.state.engine)
    running(engine_app, "j-spot", "team-a", world.spot("us-east-1b", 500_000, od=2_000_000), budget=10_000_000,
            checkpoint_step=2400, last_step=2550)
    launcher.statuses["j-spot-a1"] = AttemptStatus(Phase.PREEMPTED, ended_at=time.time())
    launcher.statuses["j-spot-a2"] = AttemptStatus(Phase.RUNNING, started_at=time.time())
    engine.tick()  # monitor: preempted → queued; then place it (the spot zone is blocked: on-prem) and launch

    events = store.events("j-spot")
    assert [e.event for e in events[-3:]] == ["recover", "place", "launch"]
    ev = events[-3]
    assert (ev.data["zone"], ev.data["tier"], ev.data["steps_lost"], ev.data["checkpoint_step"]) == \
        ("us-east-1b", "spot", 150, 2400)
    assert "us-east-1b" in store.get_job("j-spot").blocked_zones
    (msg,) = stub.wait_for("/api/chat.postMessage")
    assert msg["channel"] == "C_A"
    assert "was preempted in us-east-1b (spot, attempt 1)" in text_of(msg)
    assert "150 steps lost; it is queued to resume from step 2400" in text_of(msg)

    engine.tick()  # attempt 2 runs
    assert launcher.launched == ["j-spot-a2"] and store.get_job("j-spot").state is JobState.RUNNING
    msgs = stub.wait_for("/api/chat.postMessage", 2)
    assert "resumed from step 2400 on onprem local-1slot in local (attempt 2)" in text_of(msgs[1])


def test_an_engine_budget_stop_posts_buttons_that_resume_only_once_the_budget_is_raised(engine_app, stub):
    store, launcher, engine = (engine_app.state.service.store, engine_app.state.service.launcher,
                               engine_app.state.engine)
    # $3.60/h for an hour: $3.60 of $3.604, less than the stop's reserve (33 s) left, and less than a resume's
    # minute and clean stop on the cheapest offer it may take (the $0.20/h pool: $0.005)
    running(engine_app, "j-cap", "team-b", world.onprem(3_600_000), budget=3_604_000, checkpoint_step=900,
            last_step=950)
    engine.tick()
    assert launcher.stopped == [("j-cap-a1", "budget")] and store.get_job("j-cap").state is JobState.STOPPING
    (warning,) = stub.wait_for("/webhook/b")
    assert "has used 99% of its budget" in text_of(warning)
    launcher.statuses["j-cap-a1"] = AttemptStatus(Phase.STOPPED, exit_code=0, ended_at=time.time())
    engine.tick()
    job = store.get_job("j-cap")
    assert job.state is JobState.STOPPED_BUDGET and job.spent <= job.budget
    stopped = stub.wait_for("/webhook/b", 2)[1]
    assert "was stopped: it spent its budget" in text_of(stopped) and "resume from step 900" in text_of(stopped)
    buttons = buttons_of(stopped)
    # what is left pays for no resume: the raise alone goes on (Resume and Switch could only be refused)
    assert set(buttons) == {"Raise budget to $6.00", "Cancel"}

    slack = TestClient(engine_app)
    pressed(slack, stub, buttons["Raise budget to $6.00"], "U_B", "raise")
    assert "Resume from step 900" in buttons_of(stub.wait_for("/respond/raise")[0])  # the resume it now pays for
    now = command(slack, "status j-cap", user="U_B").json()
    buttons = {e["text"]["text"]: e for b in now["blocks"] if b["type"] == "actions" for e in b["elements"]}
    assert "Switched to on-demand `j-cap`" in pressed(slack, stub, buttons["Switch to on-demand"], "U_B", "od")
    job = store.get_job("j-cap")
    assert (job.state, job.budget, job.force_tier) == (JobState.QUEUED, 6_000_000, "ondemand")
    # a stopped job is pinned and resumed in one write
    assert [(e.event, e.actor) for e in store.events("j-cap")[-2:]] == [
        ("budget_changed", "slack:U_B"), ("resume", "slack:U_B")]


# -- messages for engine-shaped events --------------------------------------------------------------


def engine_event(job, name: str, *, attempt: int | None = None, **data) -> Event:
    """An event as the engine commits it: a state change through ``event_for``, or a note (no state change)."""
    attempt = attempt or job.attempts or None
    try:
        kind = JobEvent(name)
    except ValueError:
        return Event(job_id=job.id, time=time.time(), event=name, from_state=job.state.value,
                     to_state=job.state.value, reason=name, actor="engine", attempt=attempt, data=data)
    ev = event_for(job, kind, job.state, time=time.time(), reason=job.reason, actor="engine",
                   from_state=JobState.RUNNING, data=data)
    ev.attempt = attempt
    return ev


PREEMPTED = {"attempt_id": "j-a1-a1", "exit_code": None, "diagnosis": "Spot capacity was preempted at step 2550. "
             "The broker resumes it from its last checkpoint elsewhere.", "diagnosis_class": "preempted",
             "zone": "us-east-1a", "tier": "spot", "checkpoint_step": 2400, "steps_lost": 150}


@pytest.mark.parametrize("name, attempt, data, says", [
    ("start", 2, {}, "resumed from step 2400 on spot g5.xlarge in aws/us-east-1b (attempt 2)"),
    ("start", 1, {}, "started on spot g5.xlarge in aws/us-east-1a."),
    ("recover", 1, PREEMPTED, "was preempted in us-east-1a (spot, attempt 1).\n150 steps lost; it is queued to "
                              "resume from step 2400"),
    ("recover", 1, {**PREEMPTED, "diagnosis_class": "node_lost", "steps_lost": None, "zone": None},
     "lost its node in spot g5.xlarge in aws/us-east-1a (attempt 1).\n"  # no zone in the data: the attempt's
     "0 steps lost; it is queued to resume from step 2400"),  # counted from the progress points
    ("recover", 1, {**PREEMPTED, "diagnosis_class": "cuda_error", "diagnosis": "A CUDA error stopped the job."},
     "attempt 1 on spot g5.xlarge in aws/us-east-1a ended: A CUDA error stopped the job.\nIt is queued again and "
     "resumes from step 2400 (150 steps lost)"),
    ("succeed", 2, {}, "Cost $5.00; saved $15.00 (75%) against on-demand ($20.00) over 2 attempt(s)"),
], ids=["a second start says resumed, from the job's last checkpoint, and where",
        "a first start says started", "a preemption says the zone, the steps lost and the resume step",
        "a lost node without steps_lost counts them from the progress points", "a retried error says the diagnosis",
        "finished says the cost and the saving against on-demand"])
def test_lifecycle_messages(slack_app, store, stub, name, attempt, data, says):
    job = replace(store.get_job("j-a1"), last_checkpoint={"step": 2400, "uri": "file:///c/2400", "at": 0})
    slack_app.state.notifier.handle(engine_event(job, name, attempt=attempt, **data), job)
    (msg,) = stub.wait_for("/api/chat.postMessage")
    assert says in text_of(msg)


def test_a_preemption_before_any_checkpoint_says_the_job_restarts_from_the_beginning(slack_app, store, stub):
    job = replace(store.get_job("j-a1"), last_checkpoint={})
    slack_app.state.notifier.handle(engine_event(job, "recover", attempt=1, **{**PREEMPTED, "checkpoint_step": None}),
                                    job)
    (msg,) = stub.wait_for("/api/chat.postMessage")
    assert "it is queued to resume from the beginning (it saved no checkpoint)" in text_of(msg)
    assert "last checkpoint" not in text_of(msg)


def test_a_budget_warning_with_minutes_left_says_so_not_0_0_hours(slack_app, store, stub):
    job = store.get_job("j-a2")
    job = replace(job, budget=job.spent + 1_000)  # a tenth of a cent left
    slack_app.state.notifier.handle(engine_event(job, "budget_warning", percent=99), job)
    (msg,) = stub.wait_for("/api/chat.postMessage")
    assert "Under 2 s left at $3.00/h." in text_of(msg) and "0.0 h" not in text_of(msg)  # 1.2 s


def test_budget_warning_posts_to_the_team_channel_with_cancel(slack_app, slack, store, stub):
    job = store.get_job("j-a2")
    slack_app.state.notifier.handle(engine_event(job, "budget_warning", spent=1_600_000, budget=2_000_000,
                                                 percent=80), job)
    (msg,) = stub.wait_for("/api/chat.postMessage")
    assert msg["channel"] == "C_A" and "80% of its budget" in text_of(msg)
    cancel = next(e for b in msg["blocks"] if b["type"] == "actions" for e in b["elements"]
                  if e["action_id"] == "broker_cancel")
    assert "confirm" in cancel
    press(slack, cancel["action_id"], cancel["value"], user="U_A", response_url=stub.url + "/respond/c")
    stub.wait_for("/respond/c")
    assert store.get_job("j-a2").state is JobState.CANCELLING
    assert (last_event(store, "j-a2").event, last_event(store, "j-a2").actor) == ("cancel", "slack:U_A")


def test_a_raise_budget_button_raises_once_and_never_lowers(slack_app, slack, store, stub):
    job = store.get_job("j-a2")  # running, $1.50 of $2.00
    slack_app.state.notifier.handle(engine_event(job, "budget_warning", percent=75), job)
    (msg,) = stub.wait_for("/api/chat.postMessage")
    btn = buttons_of(msg)["Raise budget to $3.00"]
    assert "Budget raised from $2.00 to $3.00" in pressed(slack, stub, btn, "U_A", "r1")
    events = len(store.events("j-a2"))
    # pressed again: nothing changes, nothing is recorded
    again = pressed(slack, stub, btn, "U_A", "r2")
    assert "Nothing changed: the budget of `j-a2` is already $3.00 (this button sets $3.00)" in again
    assert "/broker budget j-a2 &lt;$&gt;" in again and len(store.events("j-a2")) == events  # Slack shows <$>
    # the budget was set higher since: the old button does not lower it
    assert "Budget raised from $3.00 to $30.00" in text_of(command(slack, "budget j-a2 $30").json())
    assert "already $30.00 (this button sets $3.00)" in pressed(slack, stub, btn, "U_A", "stale")
    assert store.get_job("j-a2").budget == 30_000_000
    # two presses at once: the service's compare-and-set refuses the one that lost the race
    with pytest.raises(Conflict, match="already \\$30.00, not below \\$30.00"):
        slack_app.state.service.raise_budget(Principal("slack:U_A", team="team-a"), "j-a2", 30_000_000, only_up=True)


def test_a_notification_names_the_slash_command_the_broker_answers(tmp_path, store, seeded, stub):
    settings = slack_settings(tmp_path, stub)
    settings = replace(settings, extra={**settings.extra, "slack": {**settings.extra["slack"], "command": "/train"}})
    app = build_app(settings, store)
    job = store.get_job("j-a1")
    app.state.notifier.handle(engine_event(job, "succeed"), job)
    (msg,) = stub.wait_for("/api/chat.postMessage")
    app.state.notifier.close()
    assert "`/train status j-a1`" in text_of(msg) and "/broker" not in text_of(msg)


def test_delivery_retries_then_gives_up_without_blocking(slack_app, store, stub):
    notifier = slack_app.state.notifier
    job = store.get_job("j-a1")
    stub.fail_next["/api/chat.postMessage"] = 2
    notifier.handle(engine_event(job, "succeed"), job)
    stub.wait_for("/api/chat.postMessage")  # third try got through
    stub.fail_next["/api/chat.postMessage"] = 10
    stub.delay = 1.0
    started = time.perf_counter()
    notifier.handle(engine_event(job, "succeed"), job)
    notifier.handle(engine_event(job, "place"), job)  # not a notified event: ignored
    # a handle that waited for delivery would take its 4 tries at 1 s each; the rest is a loaded host's slack
    assert time.perf_counter() - started < 2.0
    assert notifier.flush(30)
    assert (notifier.sent, notifier.failed) == (1, 1)
    assert stub.fail_next["/api/chat.postMessage"] == 10 - 4  # 1 try + 3 retries, then given up


def test_queue_and_status_say_roughly_when_a_waiting_job_starts(slack, store, seeded):
    start = world.wait_behind_a_running_job(store, seeded)
    # on each reader's own clock (Slack's date token), the UTC minute where a client cannot show it: at the nearest
    # minute, as the reason beside it names a start (start_time)
    expected = f"#1 in queue, roughly starting at {start_time(start)}"
    assert expected in text_of(command(slack, "queue").json())
    assert expected in text_of(command(slack, "status j-a3").json())
    assert expected in text_of(command(slack, "status").json())


# -- text from jobs, users and logs; long lists; replays --------------------------------------------

PING = "<!channel> see <https://evil.example|click here> & more"
PING_ESCAPED = "&lt;!channel&gt; see &lt;https://evil.example|click here&gt; &amp; more"


def markup_of(msg: dict) -> str:
    """Everything of a message Slack reads as mrkdwn: its text, its blocks and its buttons' confirmations."""
    confirms = [e["confirm"]["text"]["text"] for e in buttons_of(msg).values() if "confirm" in e]
    return "\n".join([text_of(msg), *confirms])


def test_a_failure_whose_diagnosis_quotes_slack_markup_neither_pings_the_channel_nor_hides_a_link(
        slack_app, store, stub):
    job = replace(store.get_job("j-b1"), diagnosis={**world.B1_DIAGNOSIS, "text": f"Traceback: {PING}"})
    slack_app.state.notifier.handle(engine_event(job, "fail", diagnosis=PING), job)
    (msg,) = stub.wait_for("/webhook/b")
    said = markup_of(msg)
    assert f"failed: Traceback: {PING_ESCAPED}" in said
    assert f"likely to recur: Traceback: {PING_ESCAPED}" in said  # the Resume button's confirmation too
    assert "<!channel>" not in said and "<https://evil" not in said
    assert "<http://127.0.0.1:8000/dashboard|Dashboard>" in said  # the bot's own link stays a link


def test_a_retried_errors_reason_is_said_as_text(slack_app, store, stub):
    job = store.get_job("j-a1")
    ev = engine_event(job, "recover", attempt=1, **{**PREEMPTED, "diagnosis_class": "cuda_error", "diagnosis": None})
    slack_app.state.notifier.handle(replace(ev, reason=PING), job)
    (msg,) = stub.wait_for("/api/chat.postMessage")
    assert f"ended: {PING_ESCAPED}" in text_of(msg) and "<!channel>" not in text_of(msg)


def test_a_jobs_name_reason_and_attempts_in_status_and_queue_are_text_not_markup(slack, store):
    set_job(store, "j-a3", reason=f"waiting: {PING}")
    for text in ("status j-a3", "status", "queue"):
        said = text_of(command(slack, text).json())
        assert f"_waiting: {PING_ESCAPED}_" in said and "<!channel>" not in said, text
    assert "<http://127.0.0.1:8000/dashboard|Open the cost dashboard>" in text_of(command(slack, "status j-a3").json())


def test_logs_that_print_slack_markup_show_it_as_written(slack_app, slack, stub):
    slack_app.state.service.launcher.output["j-a2-a1"] = f"step 1\n{PING}\n".encode()
    command(slack, "logs j-a2", response_url=stub.url + "/respond/ping")
    said = text_of(stub.wait_for("/respond/ping")[0])
    assert PING_ESCAPED in said and "<!channel>" not in said


@pytest.mark.parametrize("output", [b"```\n" * 2000 + b"newest line\n", b"<&>" * 3000 + b"\nnewest line\n"],
                         ids=["a log of fences", "a log of characters Slack escapes"])
def test_logs_show_the_newest_lines_in_one_closed_block_whatever_they_hold(slack_app, slack, stub, output):
    slack_app.state.service.launcher.output["j-a2-a1"] = output
    command(slack, "logs j-a2", response_url=stub.url + "/respond/tail")
    (reply,) = stub.wait_for("/respond/tail")
    block = reply["blocks"][1]["text"]["text"]
    assert len(block) <= 3000
    assert block.startswith("```…\n") and block.endswith("newest line\n```") and block.count("```") == 2


def queued_jobs(store, n: int, *, team: str = "team-a", name: str = "q", reason: str = "waiting: no capacity"):
    now = time.time()
    for i in range(n):
        j = replace(world.job(f"j-q{i:03d}", team, JobState.QUEUED, submitted=now - 100 + i / 1000, budget=1_000_000,
                              spent=0, attempts=0, reason=reason), name=f"{name}{i:03d}"[-128:])
        store.commit(Change(job=j, expected_version=None))


def test_a_long_queue_shows_what_fits_and_says_how_many_more_with_no_line_cut(slack, store):
    queued_jobs(store, 40, name="n" * 125, reason="waiting: " + "every matching pool is full " * 20)
    reply = command(slack, "queue").json()
    listing = reply["blocks"][1]["text"]["text"]
    lines = listing.split("\n")
    shown = sum(1 for line in lines if " — queued" in line)
    assert len(listing) <= 3000 and 1 < shown < 15
    assert lines[-1].startswith(f"…and {41 - shown} more (")  # the 40, and the world's j-a3; where to see them
    assert all(line.count("*") == 2 for line in lines if " — queued" in line)  # every name in bold, closed


def test_a_queue_of_sixteen_short_lines_shows_fifteen_and_one_more(slack, store):
    queued_jobs(store, 15)
    listing = command(slack, "queue").json()["blocks"][1]["text"]["text"]
    assert listing.count(" — queued") == 15 and "\n…and 1 more (" in listing


def test_status_counts_every_active_job_not_the_first_two_hundred(slack, store):
    queued_jobs(store, 300)
    said = text_of(command(slack, "status").json())
    assert "302 active job(s), 1 recently ended" in said  # the 300, j-a2 running and j-a3 queued; j-a1 ended


def retried(client, text: str, trigger: str, *, user: str = "U_A", response_url: str = "") -> list[dict]:
    """The same signed body sent twice, the second time as Slack retries it; both replies."""
    body = urlencode({"command": "/broker", "text": text, "user_id": user, "response_url": response_url,
                      "trigger_id": trigger, "team_id": "T1", "channel_id": "C_A"})
    headers = signed(body)
    first = client.post("/slack/commands", content=body, headers=headers)
    again = client.post("/slack/commands", content=body, headers={**headers, "X-Slack-Retry-Num": "1",
                                                                  "X-Slack-Retry-Reason": "http_timeout"})
    return [first.json(), again.json()]


def test_a_retried_submit_submits_once_and_answers_with_the_same_job(slack, store):
    first, again = retried(slack, "submit budget=$4\nname: once\nrun: echo hi", "13345224609.738474920.8088")
    (job,) = [j for j in store.list_jobs() if j.name == "once"]
    assert f"Submitted {job.id}" in text_of(first) and f"Already submitted {job.id}" in text_of(again)
    assert job.idempotency_key == "slack:13345224609.738474920.8088"


def test_a_submit_replayed_to_another_broker_process_is_made_once_by_the_stores_key(tmp_path, slack, store, stub):
    text = "submit budget=$4\nname: twice\nrun: echo hi"
    body = urlencode({"command": "/broker", "text": text, "user_id": "U_A", "trigger_id": "T.1"})
    slack.post("/slack/commands", content=body, headers=signed(body))
    other = build_app(slack_settings(tmp_path, stub), store)  # a second process: its own memory of triggers
    with TestClient(other) as c:
        again = c.post("/slack/commands", content=body, headers={**signed(body), "X-Slack-Retry-Num": "1"})
    other.state.notifier.close()
    assert len([j for j in store.list_jobs() if j.name == "twice"]) == 1
    assert "Already submitted" in text_of(again.json())


def test_a_retried_budget_command_acts_once_and_says_so(slack, store):
    before = len(store.events("j-a2"))
    first, again = retried(slack, "budget j-a2 $30", "T.budget")
    assert "Budget raised from $2.00 to $30.00" in text_of(first)
    assert "it is not run twice" in text_of(again) and len(store.events("j-a2")) == before + 1


def test_a_retried_button_press_acts_once(slack, store, stub):
    payload = {"type": "block_actions", "user": {"id": "U_A"}, "trigger_id": "T.press",
               "response_url": stub.url + "/respond/press",
               "actions": [{"action_id": "broker_raise_budget", "value": '{"job":"j-a2","budget":3000000}'}]}
    body = urlencode({"payload": json.dumps(payload)})
    headers = signed(body)
    assert slack.post("/slack/interactions", content=body, headers=headers).status_code == 200
    assert slack.post("/slack/interactions", content=body, headers={**headers, "X-Slack-Retry-Num": "1"}
                      ).status_code == 200
    stub.wait_for("/respond/press")
    assert slack.app.state.notifier.flush(5)
    assert len(stub.posts("/respond/press")) == 1
    assert [e.event for e in store.events("j-a2")].count("budget_changed") == 1


def test_submit_takes_a_quoted_deadline_with_spaces(slack, store):
    before = time.time()
    r = command(slack, 'submit budget=$1 deadline="1 hour 30 mins"\nname: quoted\nrun: echo hi')
    assert "Submitted" in text_of(r.json()), text_of(r.json())
    job = next(j for j in store.list_jobs() if j.name == "quoted")
    assert before + 5400 <= job.deadline <= time.time() + 5400


def test_a_deadline_with_a_space_and_no_quotes_is_refused_naming_the_word_and_how_to_write_it(slack, store):
    before = len(store.list_jobs())
    said = text_of(command(slack, "submit budget=$1 deadline=1 hour\nrun: python train.py").json())
    assert '`hour` after `deadline=1` is not an option: a value with spaces goes in quotes (deadline="1 hour")' in said
    assert "YAML" in said and "yaml" not in said.replace("YAML", "")  # not the YAML parser's error
    assert len(store.list_jobs()) == before


def test_slacks_auto_links_in_inline_yaml_run_as_typed(slack, store):
    r = command(slack, "submit budget=$1\nname: linked\nrun: python <http://train.py|train.py> "
                       "--mail <mailto:a@b.io|a@b.io> --from <https://example.com/data>")
    assert "Submitted" in text_of(r.json()), text_of(r.json())
    job = next(j for j in store.list_jobs() if j.name == "linked")
    assert job.spec["run"] == "python train.py --mail a@b.io --from https://example.com/data"


@pytest.mark.parametrize("text, expected", [
    ("submit budget=$5\nrun: python <http://train.py|train.py>",
     commands.Command("submit", yaml="run: python train.py", options={"budget_usd": "5"})),
    ("submit budget=$5\nrun: mail <mailto:a@b.io|a@b.io>",
     commands.Command("submit", yaml="run: mail a@b.io", options={"budget_usd": "5"})),
    ("submit budget=$5\nrun: echo <@U123|alice> <#C9|general> <!here>",
     commands.Command("submit", yaml="run: echo @alice #general @here", options={"budget_usd": "5"})),
    ("submit budget=$5 max_price=$2 name=fast ```\nrun: x\n```",
     commands.Command("submit", yaml="run: x",
                      options={"budget_usd": "5", "max_price_per_hour": "$2", "name": "fast"})),
    ("submit budget=$5 ```yaml\nrun: x\n```", commands.Command("submit", yaml="run: x", options={"budget_usd": "5"})),
    ("submit budget=$5 deadline=“2 days”\nrun: x",
     commands.Command("submit", yaml="run: x", options={"budget_usd": "5", "deadline": "2 days"})),
], ids=["an auto-linked file name is the name typed", "an auto-linked address is the address typed",
        "mentions read as @name and #channel", "a fence opened on the first line, after max_price and name",
        "a fence with a language on the first line", "a value in typographic quotes"])
def test_slack_markup_and_quoted_options_parse_as_typed(text, expected):
    assert commands.parse(text) == expected


@pytest.mark.parametrize("text, says", [
    ("submit budget=$1 deadline=1 hour\nrun: x", '`hour` after `deadline=1` is not an option'),
    ('submit deadline="1 hour\nrun: x', "the quote after `deadline=` is not closed"),
    ("submit budget=$1 name: x\nrun: y", "`name:` is not an option (key=value) or a URL: put the YAML on the lines"),
    ("submit https://a.example/t.yaml\nrun: x", "as a URL or as YAML, not both"),
    ("costs 1y", "`1y` is not a period I know: costs takes 24h (or 1d), 7d (or 1w, 168h), 30d (or 720h), 90d (or 2160h)"),
    ("costs team-b 12h", "`12h` is not a period I know"),
    ("submit budget=$5 budget=$6\nrun: x", "`budget` is given twice: give it once; nothing was submitted"),
    ("submit name=a priority=1 name=b\nrun: x", "`name` is given twice"),
], ids=["an unquoted value with a space", "an unclosed quote", "YAML on the first line",
        "a URL and YAML", "a period costs does not take is not read as a team", "nor after a team",
        "an option given twice (the last one won)", "an option given twice with another between"])
def test_words_that_do_not_fit_are_refused_with_a_sentence_naming_them(text, says):
    with pytest.raises(CommandError, match=re.escape(says)):
        commands.parse(text)


def test_costs_of_an_unknown_period_names_the_periods_not_another_team(slack):
    said = text_of(command(slack, "costs 1y", user="U_B").json())
    assert "`1y` is not a period I know: costs takes 24h (or 1d), 7d (or 1w, 168h), 30d (or 720h), 90d (or 2160h)" in said and "only your team" not in said


def test_a_refused_resume_says_not_resumed_once(slack):
    said = text_of(command(slack, "resume j-b1", user="U_B").json())
    assert "Not resumed: the job failed for a reason of its own" in said
    assert "not resumed: not resumed" not in said.lower()


def test_help_lists_every_submit_option_and_budget_as_optional(slack):
    said = text_of(command(slack, "help").json())
    assert "max_price=" in said and "name=" in said and "[budget=$50" in said
    assert "`/broker logs &lt;job id&gt;`" in said  # Slack would read a bare <job id> as its own markup
    assert "team's default budget" in said and 'deadline="1 hour 30 mins"' in said


@pytest.mark.parametrize("yaml, says, cli", [
    ("name: needs\nrun: echo $TOKEN\nenvs:\n  TOKEN:", 'a value in the YAML (TOKEN: …, or TOKEN: "" for an empty one)',
     "--env"),
    ("name: local\nrun: ls\nworkdir: /srv/code", "give the workdir as a git repository", "--upload-workdir"),
], ids=["an env without a value", "a workdir on the broker's host"])
def test_a_refused_submit_says_what_to_do_in_slack_not_a_cli_flag(slack, store, yaml, says, cli):
    said = text_of(command(slack, f"submit budget=$1\n{yaml}").json())
    assert says in said and cli not in said


def test_an_admins_status_of_several_teams_says_whose_each_job_is(slack):
    """An admin's list mixed team-a's and team-b's jobs with nothing to tell them apart; a team's own list, of one
    team, does not repeat it on every line."""
    admin = text_of(command(slack, "status", user="U_ADMIN").json())
    assert "`j-a1` (team-a)" in admin and "`j-b1` (team-b)" in admin, admin
    own = text_of(command(slack, "status").json())
    assert "`j-a1`" in own and "(team-a)" not in own, own


def test_a_command_still_at_work_near_slacks_timeout_answers_through_response_url(slack, stub, monkeypatch):
    """Slack gives up on an answer after 3 s. `costs` over a large store took up to 1.9 s, and `status` more at
    scale; past the edge's inline time, a command is acknowledged and its answer posted to response_url when done.
    Here the inline time is made short and `costs` slow, rather than the store large."""
    from broker.api import slack as edge
    from broker.slack.dispatch import Dispatcher

    real = Dispatcher._cmd_costs

    def slow(self, *args, **kwargs):
        time.sleep(0.5)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(edge, "INLINE_SECONDS", 0.1)
    monkeypatch.setattr(Dispatcher, "_cmd_costs", slow)
    r = command(slack, "costs", response_url=stub.url + "/respond/slow")
    assert r.status_code == 200 and r.json()["text"] == ":hourglass: Working on `costs`… the answer follows here."
    (later,) = stub.wait_for("/respond/slow")
    assert later["replace_original"] is False and "Spend" in text_of(later), text_of(later)
    # with no response_url to post to, the answer waits for the command, as before
    assert "Spend" in text_of(command(slack, "costs").json())


def test_a_command_that_fails_after_it_was_acknowledged_says_so_through_response_url(slack, stub, monkeypatch):
    from broker.api import slack as edge
    from broker.slack.dispatch import Dispatcher

    def broken(self, *args, **kwargs):
        time.sleep(0.3)
        raise RuntimeError("the store went away")

    monkeypatch.setattr(edge, "INLINE_SECONDS", 0.05)
    monkeypatch.setattr(Dispatcher, "_cmd_queue", broken)
    assert "Working on `queue`" in command(slack, "queue", response_url=stub.url + "/respond/broken").json()["text"]
    (later,) = stub.wait_for("/respond/broken")
    assert "That command failed on the broker" in text_of(later)


def test_a_job_past_its_expected_length_is_told_to_a_team_that_asked_for_it(tmp_path, store, seeded, stub):
    """Opt-in (`notifications.events`): a job running past its `expected_hours` delays the jobs the queue let in
    on that length; its team hears it, with a cancel button."""
    app = build_app(slack_settings(tmp_path, stub, events=["past_expected_length", "fail"]), store)
    app.state.notifier.sleep = lambda s: None
    try:
        job = store.get_job("j-a2")
        event = engine_event(job, "past_expected_length")
        event.reason = "running 5 min, past its expected 18 s (broker: expected_hours 0.005): …"
        app.state.notifier.handle(event, job)
        (msg,) = stub.wait_for("/api/chat.postMessage")
        assert msg["channel"] == "C_A" and "is running 5 min, past its expected" in text_of(msg), text_of(msg)
        assert any(e["action_id"] == "broker_cancel" for b in msg["blocks"] if b["type"] == "actions"
                   for e in b["elements"])
    finally:
        app.state.notifier.close()


def test_costs_of_a_job_of_two_nodes_says_its_nodes_and_its_exact_seconds_as_a_span(slack, store):
    # billed to the part of a second (16.9201335 s) and for both nodes: said "16 s" and ", 2 nodes", as the dashboard
    now = time.time()
    place = {**world.spot("sim-a", 849_200), "num_nodes": 2}
    job = world.job("j-n2", "team-a", JobState.SUCCEEDED, submitted=now - 600, budget=5_000_000, spent=4_000,
                    attempts=1, updated=now - 60)
    att = world.attempt("j-n2", 1, AttemptState.SUCCEEDED, place, start=now - 500, seconds=17, cost=4_000)
    world._commit(store, job, [replace(att, billed_until=now - 500 + 16.9201335, ended_at=now - 500 + 16.9201335)])
    reply = text_of(command(slack, "costs j-n2").json())
    assert "1. succeeded on spot in sim-a, 2 nodes at $0.8492/h, 16 s — $0.0040" in reply, reply
