"""Slack's *Switch to on-demand* and *Resume* offer to force only a refusal that force gets past.

``Dispatcher._switch`` answered every refusal of a failed job, not forced, with "failed for a reason of its own,
likely to recur" and a button that forces the switch; ``_resume`` added "To run it again anyway: … resume … force".
A job that failed for credentials it was not given, a spot-only job, a failed job whose budget left pays for no
on-demand attempt, ... was told to force what force does not fix (or could not fix at all). Only the service's refusal
on ``force`` (a failure of the job's own code) is answered so now; any other is the service's own sentence, which
says what to do, with no force button.

Through the real app with signed requests, as ``test_slack.py`` does (its helpers and fixtures).
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from fastapi.testclient import TestClient

from broker.lifecycle import JobState
from broker.slack import blocks
from launchers.simzones import zones_from_config

from .conftest import build_app
from .test_slack import buttons_of, command, press, set_job, slack_settings, stub, text_of  # noqa: F401

SWITCH = blocks.ACTIONS["switch_ondemand"]
RESUME = blocks.ACTIONS["resume"]
ZONE = {"name": "sim-od", "tier": "ondemand", "instance_type": "g5.xlarge", "nodes": 1, "price_per_hour": "1.00"}
CREDENTIALS = {"class": "auth", "infrastructure": False, "secrets": ["HF_TOKEN"],
               "text": "The job was refused by huggingface.co: 401 Unauthorized (no HF_TOKEN)."}
NODE_LOST = {"class": "node_lost", "infrastructure": True, "text": "The node was lost."}


@pytest.fixture
def client(tmp_path, store, seeded, stub):  # noqa: F811
    """The seeded world (team B's j-b1 failed in its own code, checkpoint at step 400) and an on-demand zone at
    $1.00/h, in a broker process that runs no engine."""
    app = build_app(replace(slack_settings(tmp_path, stub), zones=zones_from_config([ZONE])), store)
    app.state.notifier.sleep = lambda s: None
    with TestClient(app) as c:
        yield c
    app.state.notifier.close()


def _pressed(client, stub, action: str, job_id: str, name: str) -> dict:  # noqa: F811
    """Press ``action`` (not forced) for ``job_id`` as team B's user: the reply Slack gets on the response URL."""
    r = press(client, action, json.dumps({"job": job_id}), user="U_B", response_url=f"{stub.url}/respond/{name}")
    assert r.status_code == 200
    return stub.wait_for(f"/respond/{name}")[0]


def _unchanged(store, before) -> None:
    after = store.get_job(before.id)
    assert (after.state, after.version, after.force_tier) == (before.state, before.version, before.force_tier)


def test_a_switch_of_a_failure_of_its_own_code_still_offers_the_force_button(client, store, stub):  # noqa: F811
    before = store.get_job("j-b1")
    reply = _pressed(client, stub, SWITCH, "j-b1", "own")
    said = text_of(reply)
    assert "Not switched to on-demand: `j-b1` failed for a reason of its own, likely to recur: Out of GPU memory" \
        in said, said
    again = buttons_of(reply)["Switch to on-demand"]
    assert json.loads(again["value"]) == {"job": "j-b1", "force": True} and "confirm" in again
    _unchanged(store, before)
    # and the resume command still says how to force it
    said = text_of(command(client, "resume j-b1", user="U_B").json())
    assert "a reason of its own" in said and "/broker resume j-b1 force" in said, said


def test_a_switch_of_a_credentials_failure_says_to_resume_with_the_secret_not_to_force(client, store, stub):  # noqa: F811
    before = set_job(store, "j-b1", diagnosis=CREDENTIALS)
    reply = _pressed(client, stub, SWITCH, "j-b1", "creds")
    said = text_of(reply)
    assert "Not switched to on-demand: the job failed for credentials it was not given" in said, said
    assert "broker resume j-b1 --secret HF_TOKEN" in said, said
    assert "failed for a reason of its own, likely to recur" not in said, said
    assert not buttons_of(reply), reply  # no button that forces it
    _unchanged(store, before)


def test_a_resume_of_a_credentials_failure_has_no_force_hint(client, store, stub):  # noqa: F811
    before = set_job(store, "j-b1", diagnosis=CREDENTIALS)
    said = text_of(command(client, "resume j-b1", user="U_B").json())
    assert "Not resumed: the job failed for credentials it was not given" in said, said
    assert "broker resume j-b1 --secret HF_TOKEN" in said, said
    assert "resume j-b1 force" not in said and "run it again anyway" not in said.lower(), said
    said = text_of(_pressed(client, stub, RESUME, "j-b1", "creds-resume"))
    assert "Not resumed: the job failed for credentials" in said and "resume j-b1 force" not in said, said
    _unchanged(store, before)


def test_a_switch_of_a_spot_only_job_says_so_with_no_force_button(client, store, stub):  # noqa: F811
    job = store.get_job("j-b1")
    before = set_job(store, "j-b1", spec={**job.spec, "resources": {"use_spot": True}})
    reply = _pressed(client, stub, SWITCH, "j-b1", "spot")
    said = text_of(reply)
    assert "Its task asks for spot only (resources.use_spot: true)" in said, said
    assert "a reason of its own" not in said and not buttons_of(reply), said
    _unchanged(store, before)


def test_a_switch_refused_for_its_budget_says_so_with_no_force_button(client, store, stub):  # noqa: F811
    # an infrastructure failure (no force asked) whose budget left pays for no on-demand attempt: it was told it
    # "failed for a reason of its own" and offered a button that forced the same refusal
    before = set_job(store, "j-b1", diagnosis=NODE_LOST, spent=2_999_990)
    reply = _pressed(client, stub, SWITCH, "j-b1", "budget")
    said = text_of(reply)
    assert "Not moved to on-demand:" in said and "Raise the budget first" in said, said
    assert "a reason of its own" not in said and not buttons_of(reply), said
    _unchanged(store, before)
