"""A header that decides what a request does, sent twice with different values, is a 400 naming it: nothing is done.

Starlette's ``request.headers.get`` reads the first of a header sent twice, so a second ``Idempotency-Key`` (a
proxy's, or a client's own on top of the one its library adds) was dropped without a word — a retry carrying the
same pair in the other order was a second job — and a second ``Authorization`` or ``X-Slack-Signature`` was
ignored whatever it said. Sent twice with the same value, a header is read once, as before.
"""

from __future__ import annotations

import http.client
import json
from urllib.parse import urlencode

import pytest
from testports import free_port

from broker.lifecycle import JobState

from . import world
from .conftest import build_app, serving
from .test_slack import signed, slack, slack_app, stub  # noqa: F401 - the Slack app fixtures, shared

ADMIN = f"Bearer {world.ADMIN}"
TEAM_A = f"Bearer {world.TOKENS['team-a']}"
TEAM_B = f"Bearer {world.TOKENS['team-b']}"
TASK = {"run": "echo hi"}


def headers(*pairs: tuple[str, str]) -> list[tuple[str, str]]:
    """Headers as a client sends them, in order, a name as often as it is given (a dict keeps one of each)."""
    return list(pairs)


def jobs_in(store) -> set[str]:
    return {j.id for j in store.list_jobs(limit=10_000)}


def test_a_submit_with_two_different_idempotency_keys_is_a_400_naming_the_header_and_stores_nothing(client, store):
    before = jobs_in(store)
    r = client.post("/v1/jobs", json=TASK, headers=headers(("Authorization", ADMIN), ("Idempotency-Key", "key-1"),
                                                           ("Idempotency-Key", "key-2")))
    assert r.status_code == 400, r.text
    assert r.json() == {"field": "Idempotency-Key",
                        "detail": "Idempotency-Key: was sent twice with different values; send one (a proxy on the "
                                  "way may be adding its own)"}
    assert jobs_in(store) == before
    # the same pair in the other order (a retry through the same proxy) is refused as well, not a second job
    r = client.post("/v1/jobs", json=TASK, headers=headers(("Authorization", ADMIN), ("Idempotency-Key", "key-2"),
                                                           ("Idempotency-Key", "key-1")))
    assert r.status_code == 400 and jobs_in(store) == before
    # and each key is still free for the submit that sends it once
    made = client.post("/v1/jobs", json=TASK, headers={"Authorization": ADMIN, "Idempotency-Key": "key-2"})
    assert made.status_code == 201, made.text


def test_a_third_different_key_is_counted_in_the_refusal(client, store):
    r = client.post("/v1/jobs", json=TASK, headers=headers(("Authorization", ADMIN), ("Idempotency-Key", "a"),
                                                           ("Idempotency-Key", "a"), ("Idempotency-Key", "b")))
    assert r.status_code == 400 and r.json()["detail"].startswith("Idempotency-Key: was sent 3 times with different")


def test_the_same_idempotency_key_sent_twice_is_read_as_one(client, store):
    twice = headers(("Authorization", ADMIN), ("Idempotency-Key", "same"), ("Idempotency-Key", "same"))
    made = client.post("/v1/jobs", json=TASK, headers=twice)
    assert made.status_code == 201, made.text
    again = client.post("/v1/jobs", json=TASK, headers={"Authorization": ADMIN, "Idempotency-Key": "same"})
    assert again.status_code == 200 and again.json()["id"] == made.json()["id"], again.text


@pytest.mark.parametrize("first, second", [
    pytest.param(ADMIN, "Bearer not-a-token", id="the admin's token then a wrong one is a 400, not the admin's answer"),
    pytest.param("Bearer not-a-token", ADMIN, id="a wrong token then the admin's is a 400, not a 401 for the first"),
    pytest.param(TEAM_A, TEAM_B, id="two teams' tokens are a 400, not the first team's jobs"),
])
def test_two_different_authorization_headers_are_a_400_naming_it(client, first, second):
    r = client.get("/v1/jobs", headers=headers(("Authorization", first), ("Authorization", second)))
    assert r.status_code == 400, r.text
    assert r.json()["field"] == "Authorization" and "sent twice with different values" in r.json()["detail"]
    # the same token twice is read once
    r = client.get("/v1/jobs", headers=headers(("Authorization", ADMIN), ("Authorization", ADMIN)))
    assert r.status_code == 200, r.text


def test_a_cancel_with_two_teams_tokens_cancels_nothing(client, store):
    """Read first, team-b's token was refused and team-a's ignored; read the other way round, the job was cancelled.
    Which one a proxy puts first is not the caller's to know."""
    r = client.post("/v1/jobs/j-a2/cancel", headers=headers(("Authorization", TEAM_A), ("Authorization", TEAM_B)))
    assert r.status_code == 400 and r.json()["field"] == "Authorization", r.text
    assert store.get_job("j-a2").state is JobState.RUNNING


def test_a_json_and_a_yaml_content_type_together_are_a_400_not_a_guess(client, store):
    before = jobs_in(store)
    r = client.post("/v1/jobs", content=json.dumps(TASK),
                    headers=headers(("Authorization", ADMIN), ("Content-Type", "application/yaml"),
                                    ("Content-Type", "application/json")))
    assert r.status_code == 400 and r.json()["field"] == "Content-Type", r.text
    assert jobs_in(store) == before


def test_a_real_server_hands_both_headers_to_the_broker_which_refuses_them(tmp_path, store, seeded):
    """Over uvicorn, not only the test client: the HTTP parser passes a repeated header on as it came (it does not
    join the values), so the refusal is what a client behind a proxy gets."""
    port = free_port()
    with serving(build_app(world.settings(tmp_path), store), port):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        body = json.dumps(TASK).encode()
        conn.putrequest("POST", "/v1/jobs")
        for name, value in (("Authorization", ADMIN), ("Content-Type", "application/json"),
                            ("Content-Length", str(len(body))), ("Idempotency-Key", "from-the-client"),
                            ("Idempotency-Key", "from-the-proxy")):
            conn.putheader(name, value)
        conn.endheaders(body)
        answer = conn.getresponse()
        assert answer.status == 400 and json.loads(answer.read())["field"] == "Idempotency-Key"
        conn.close()
    assert not any(j.idempotency_key for j in store.list_jobs(limit=10_000))


# -- Slack's signature headers ------------------------------------------------------------------------


@pytest.mark.parametrize("order", ["valid first", "valid second"])
def test_two_different_slack_signatures_are_a_400_and_the_command_is_not_run(slack, store, order):
    """The signature read was the first: a signed request with a second, wrong signature added was acted on."""
    body = urlencode({"command": "/broker", "text": "cancel j-a2", "user_id": "U_A", "team_id": "T1"})
    good = signed(body)
    pairs = [("X-Slack-Signature", good["X-Slack-Signature"]), ("X-Slack-Signature", "v0=" + "0" * 64)]
    if order == "valid second":
        pairs.reverse()
    r = slack.post("/slack/commands", content=body,
                   headers=headers(("X-Slack-Request-Timestamp", good["X-Slack-Request-Timestamp"]),
                                   ("Content-Type", good["Content-Type"]), *pairs))
    assert r.status_code == 400 and r.json()["field"] == "X-Slack-Signature", r.text
    assert store.get_job("j-a2").state is JobState.RUNNING


def test_two_different_slack_timestamps_are_a_400(slack, store):
    body = urlencode({"command": "/broker", "text": "cancel j-a2", "user_id": "U_A", "team_id": "T1"})
    good = signed(body)
    r = slack.post("/slack/commands", content=body,
                   headers=headers(("X-Slack-Request-Timestamp", good["X-Slack-Request-Timestamp"]),
                                   ("X-Slack-Request-Timestamp", str(int(good["X-Slack-Request-Timestamp"]) - 60)),
                                   ("X-Slack-Signature", good["X-Slack-Signature"]),
                                   ("Content-Type", good["Content-Type"])))
    assert r.status_code == 400 and r.json()["field"] == "X-Slack-Request-Timestamp", r.text
    assert store.get_job("j-a2").state is JobState.RUNNING


def test_a_signed_command_with_each_header_once_still_runs(slack, store):
    body = urlencode({"command": "/broker", "text": "cancel j-a2", "user_id": "U_A", "team_id": "T1"})
    r = slack.post("/slack/commands", content=body, headers=signed(body))
    assert r.status_code == 200, r.text
    assert store.get_job("j-a2").state is not JobState.RUNNING


@pytest.mark.parametrize("length", ["ten", "-1", "1_0", "+9"],
                         ids=["a word", "a negative number", "digits with an underscore", "a plus sign"])
def test_a_content_length_that_is_not_a_number_of_bytes_is_a_400_naming_it_and_stores_nothing(client, store, length):
    before = jobs_in(store)
    body = json.dumps(TASK).encode()
    r = client.post("/v1/jobs", content=body, headers={"Authorization": ADMIN, "Content-Type": "application/json",
                                                       "Content-Length": length})
    assert r.status_code == 400, r.text
    assert r.json() == {"field": "Content-Length", "detail": "Content-Length: not a number of bytes"}
    assert jobs_in(store) == before
