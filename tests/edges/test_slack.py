"""Slack: signed requests only, commands as a team member, deferred replies, notifications and their buttons.

Slack itself is never contacted: a stub of its Web API, webhooks and
response URLs listens on 127.0.0.1 and every request is signed by the test.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from dataclasses import replace
from urllib.parse import urlencode

import pytest
from fastapi.testclient import TestClient

from broker.lifecycle import IllegalTransition, JobEvent, JobState, apply
from broker.models import Event, event_for
from broker.service import BrokerService, Conflict
from broker.slack import commands
from broker.slack.commands import CommandError
from broker.store import Change

from . import world
from .conftest import build_app
from .fakes import SlackStub

USERS = {"U_A": "team-a", "U_B": "team-b"}


class NewerService(BrokerService):
    """Stand-in for the service methods the lead is adding (resume, raise_budget, switch_to_ondemand):
    same signatures, minimal behaviour, every call recorded."""

    calls: list[tuple] = []

    def _move(self, principal, job_id, event, **fields):
        job = self.get(principal, job_id)
        try:
            t = apply(job.state, event)
        except IllegalTransition as exc:
            raise Conflict(str(exc)) from None
        new = replace(job, state=t.to_state, updated_at=self.clock(), **fields)
        ev = event_for(new, event, t.to_state, time=self.clock(), reason="from slack", actor=principal.name,
                       from_state=job.state)
        return self.store.commit(Change(job=new, expected_version=job.version, events=[ev]))

    def resume(self, principal, job_id, *, force=False):
        self.calls.append(("resume", principal.name, job_id, force))
        return self._move(principal, job_id, JobEvent.RESUME)

    def switch_to_ondemand(self, principal, job_id):
        self.calls.append(("switch_to_ondemand", principal.name, job_id))
        return self._move(principal, job_id, JobEvent.RESUME)

    def raise_budget(self, principal, job_id, new_budget_micros):
        self.calls.append(("raise_budget", principal.name, job_id, new_budget_micros))
        job = self.get(principal, job_id)
        if new_budget_micros <= job.budget:
            raise Conflict("the new budget must be more than the current one")
        return self.store.commit(Change(job=replace(job, budget=new_budget_micros), expected_version=job.version))


@pytest.fixture
def stub():
    s = SlackStub()
    yield s
    s.close()


@pytest.fixture
def slack_app(tmp_path, store, seeded, stub):
    NewerService.calls = []
    cfg = {"signing_secret": world.SIGNING_SECRET, "bot_token": "xoxb-test", "users": USERS, "admins": ["U_ADMIN"],
           "channels": {"team-a": "C_A"}, "webhook_urls": {"team-b": stub.url + "/webhook/b"},
           "api_url": stub.url + "/api/", "spec_url_prefixes": [stub.url + "/specs/"]}
    app = build_app(world.settings(tmp_path, slack=cfg, notifications={"retries": 3}), store,
                    service_class=NewerService)
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
    {"ts": time.time() - 6 * 60},
    {"ts": time.time() + 6 * 60},
], ids=["signed with another secret → 401", "timestamp older than 5 minutes → 401",
        "timestamp 6 minutes in the future → 401"])
def test_a_bad_signature_is_refused_and_does_nothing(slack, store, sign):
    before = len(store.list_jobs())
    r = command(slack, "submit budget=$5\nname: sneaky\nrun: echo hi", **sign)
    assert r.status_code == 401
    assert len(store.list_jobs()) == before
    payload = json.dumps({"type": "block_actions", "user": {"id": "U_A"},
                          "actions": [{"action_id": "broker_cancel", "value": '{"job":"j-a2"}'}]})
    body = urlencode({"payload": payload})
    assert slack.post("/slack/interactions", content=body, headers=signed(body, **sign)).status_code == 401
    assert store.get_job("j-a2").state is JobState.RUNNING


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
    ("costs", commands.Command("costs", period="7d")),
    ("submit <https://example.com/t.yaml> budget=$50",
     commands.Command("submit", url="https://example.com/t.yaml", options={"budget_usd": "50"})),
    ("submit budget=$5 priority=3\n```\nname: x\nrun: echo &lt;hi&gt;\n```",
     commands.Command("submit", yaml="name: x\nrun: echo <hi>", options={"budget_usd": "5", "priority": "3"})),
], ids=["nothing → help", "status alone → my jobs", "status with an id", "resume with force",
        "budget with dollars and cents → micro-dollars", "costs with period and team in any order",
        "costs defaults to 7 days", "submit a Slack-wrapped link with a budget",
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
    assert "No job `j-a2`" in reply
    assert store.get_job("j-a2").state is JobState.RUNNING
    assert "only your team" in text_of(command(slack, "costs team-a", user="U_B").json())
    assert "not mapped to a team" in text_of(command(slack, "status", user="U_NOBODY").json())
    admin = text_of(command(slack, "costs team-a", user="U_ADMIN").json())
    assert "$6.50" in admin
    assert "Cancelling" in text_of(command(slack, "cancel j-a2").json())
    assert store.get_job("j-a2").state is JobState.CANCELLING


def test_costs_command_matches_the_report(slack):
    reply = text_of(command(slack, "costs", user="U_B").json())
    assert "$0.40" in reply and "Saved $1.60 (80%)" in reply


def test_budget_and_resume_call_the_service_as_the_slack_user(slack, store):
    assert "Budget raised to $30.00" in text_of(command(slack, "budget j-a2 $30").json())
    assert store.get_job("j-a2").budget == 30_000_000
    assert "Resumed" in text_of(command(slack, "resume j-b1 force", user="U_B").json())
    assert NewerService.calls == [("raise_budget", "slack:U_A", "j-a2", 30_000_000),
                                  ("resume", "slack:U_B", "j-b1", True)]
    assert "Not now" in text_of(command(slack, "resume j-a2").json())  # running: cannot resume


def test_without_the_newer_service_methods_the_reply_says_so(tmp_path, store, seeded):
    app = build_app(world.settings(tmp_path, slack={"signing_secret": world.SIGNING_SECRET, "users": USERS}), store)
    with TestClient(app) as c:
        assert "cannot `resume` yet" in text_of(command(c, "resume j-a1").json())
        assert app.state.notifier is None  # no channel or webhook configured


# -- notifications and buttons ----------------------------------------------------------------------


def _event(job, name, **data):
    return Event(job_id=job.id, time=time.time(), event=name, from_state="running", to_state=job.state.value,
                 reason=job.reason, actor="engine", attempt=job.attempts or None, data=data)


def test_failure_notification_buttons_work_through_interactions(slack_app, slack, store, stub):
    notifier = slack_app.state.notifier
    job = store.get_job("j-b1")
    started = time.perf_counter()
    notifier.handle(_event(job, "fail", diagnosis="CUDA out of memory: lower the batch size", checkpoint_step=400),
                    job)
    assert time.perf_counter() - started < 0.05
    (msg,) = stub.wait_for("/webhook/b")  # team-b posts through its webhook
    assert "CUDA out of memory" in text_of(msg)
    buttons = {e["text"]["text"]: e for b in msg["blocks"] if b["type"] == "actions" for e in b["elements"]}
    assert set(buttons) == {"Resume from step 400", "Switch to on-demand", "Raise budget to $5.00"}
    b = buttons["Resume from step 400"]
    # someone from another team presses it: refused, nothing changes
    press(slack, b["action_id"], b["value"], user="U_A", response_url=stub.url + "/respond/x")
    assert "No job `j-b1`" in text_of(stub.wait_for("/respond/x")[0])
    assert store.get_job("j-b1").state is JobState.FAILED
    assert press(slack, b["action_id"], b["value"], user="U_B", response_url=stub.url + "/respond/b").status_code == 200
    assert "Resumed" in text_of(stub.wait_for("/respond/b")[0])
    assert store.get_job("j-b1").state is JobState.QUEUED
    raise_btn = buttons["Raise budget to $5.00"]
    press(slack, raise_btn["action_id"], raise_btn["value"], user="U_B", response_url=stub.url + "/respond/r")
    stub.wait_for("/respond/r")
    assert store.get_job("j-b1").budget == 5_000_000


def test_budget_warning_posts_to_the_team_channel_with_cancel(slack_app, slack, store, stub):
    job = store.get_job("j-a2")
    slack_app.state.notifier.handle(_event(job, "budget_warning", percent=80), job)
    (msg,) = stub.wait_for("/api/chat.postMessage")
    assert msg["channel"] == "C_A" and "80% of its budget" in text_of(msg)
    cancel = next(e for b in msg["blocks"] if b["type"] == "actions" for e in b["elements"]
                  if e["action_id"] == "broker_cancel")
    assert "confirm" in cancel
    press(slack, cancel["action_id"], cancel["value"], user="U_A", response_url=stub.url + "/respond/c")
    stub.wait_for("/respond/c")
    assert store.get_job("j-a2").state is JobState.CANCELLING


@pytest.mark.parametrize("name, data, says", [
    ("start", {}, "resumed from its last checkpoint on spot g5.xlarge in aws/us-east-1b (attempt 2)"),
    ("preempted", {"checkpoint_step": 2400}, "steps lost; it is queued to resume from step 2400"),
    ("succeed", {}, "Cost $5.00; saved $15.00 (75%) against on-demand ($20.00) over 2 attempt(s)"),
], ids=["a second start says resumed, and where", "a preemption says the steps lost and the resume step",
        "finished says the cost and the saving against on-demand"])
def test_lifecycle_messages(slack_app, store, stub, name, data, says):
    job = store.get_job("j-a1")
    ev = _event(job, name, **data)
    if name == "preempted":
        ev.attempt = 1
    slack_app.state.notifier.handle(ev, job)
    (msg,) = stub.wait_for("/api/chat.postMessage")
    assert says in text_of(msg)


def test_delivery_retries_then_gives_up_without_blocking(slack_app, store, stub):
    notifier = slack_app.state.notifier
    job = store.get_job("j-a1")
    stub.fail_next["/api/chat.postMessage"] = 2
    notifier.handle(_event(job, "succeed"), job)
    stub.wait_for("/api/chat.postMessage")  # third try got through
    stub.fail_next["/api/chat.postMessage"] = 10
    stub.delay = 0.2
    started = time.perf_counter()
    notifier.handle(_event(job, "succeed"), job)
    notifier.handle(_event(job, "submit"), job)  # not a notified event: ignored
    assert time.perf_counter() - started < 0.05
    assert notifier.flush(10)
    assert (notifier.sent, notifier.failed) == (1, 1)
    assert stub.fail_next["/api/chat.postMessage"] == 10 - 4  # 1 try + 3 retries, then given up
