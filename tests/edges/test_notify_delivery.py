"""Slack notification delivery, per destination, against real HTTP receivers on 127.0.0.1.

QA (Dec 7): one sender thread posted every team's notifications one at a time, so team alpha's hung webhook (10 s
a try, 6 tries, ~91 s a message) held team beta's ``started``/``finished`` for minutes, and a restart then lost them
without a word; a receiver down for over ~31 s lost the notification for good, and nothing counted it; a
``Retry-After`` given as an HTTP date raised ValueError and dropped the message after one try. Now each destination
has a queue and a sender of its own, a transient failure is retried for up to 10 minutes with the destination's
later messages waiting behind it, a shutdown says what it discards, and the notifier counts what it did.
"""

from __future__ import annotations

import email.utils
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from broker.slack import notify, sdk
from broker.slack.config import SlackConfig
from broker.slack.notify import Notifier

from .fakes import SlackStub
from .test_slack import engine_event


class Receiver:
    """An HTTP receiver on 127.0.0.1 that records each POST (path, body, when) and answers it as told:
    ``hang`` paths wait until :meth:`release` (or 30 s); ``script[path]`` is a list of (status, headers) answered in
    turn, then 200."""

    def __init__(self):
        self.requests: list[tuple[str, dict, float]] = []
        self.hang: set[str] = set()
        self.script: dict[str, list[tuple[int, dict]]] = {}
        self.released = threading.Event()
        self.cond = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
                with receiver.cond:
                    receiver.requests.append((self.path, json.loads(raw) if raw.startswith("{") else {"raw": raw},
                                              time.monotonic()))
                    receiver.cond.notify_all()
                    answers = receiver.script.get(self.path) or []
                    status, headers = answers.pop(0) if answers else (200, {})
                if self.path in receiver.hang:
                    receiver.released.wait(30)
                try:
                    self.send_response(status)
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()
                    self.wfile.write(b'{"ok": true}' if status < 400 else b'{"ok": false, "error": "ratelimited"}')
                except OSError:  # the client gave up on a hung answer
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def posts(self, path: str) -> list[dict]:
        with self.cond:
            return [b for p, b, _ in self.requests if p == path]

    def wait_for(self, path: str, n: int = 1, timeout: float = 10.0) -> list[dict]:
        deadline = time.monotonic() + timeout
        with self.cond:
            while len([1 for p, _, _ in self.requests if p == path]) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"expected {n} request(s) to {path}, got {[p for p, _, _ in self.requests]}")
                self.cond.wait(left)
        return self.posts(path)

    def release(self):
        self.released.set()

    def close(self):
        self.release()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub():
    s = SlackStub()
    yield s
    s.close()


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


class Waits:
    """The notifier's ``sleep``: records each wait, waits none."""

    def __init__(self):
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def notifier_for(store, **webhooks) -> Notifier:
    cfg = SlackConfig(webhook_urls={team.replace("_", "-"): url for team, url in webhooks.items()})
    return Notifier(cfg, store, dashboard_url="http://127.0.0.1:8000/dashboard")


def test_a_hung_webhook_holds_up_only_its_own_team(store, seeded, receiver, stub):
    receiver.hang.add("/alpha")
    notifier = notifier_for(store, team_a=receiver.url + "/alpha", team_b=stub.url + "/webhook/b")
    try:
        a, b = store.get_job("j-a1"), store.get_job("j-b1")
        started = time.monotonic()
        notifier.handle(engine_event(a, "succeed"), a)
        receiver.wait_for("/alpha")  # alpha's post is under way, and hangs
        for _ in range(2):  # beta's, right behind it: its own sender, its own pace
            notifier.handle(engine_event(b, "fail"), b)
        assert time.monotonic() - started < 2  # handle() only queues
        posts = stub.wait_for("/webhook/b", 2, timeout=5)  # was ~91 s behind alpha's hung webhook
        assert all("j-b1" in p["text"] for p in posts)
        deadline = time.monotonic() + 5
        while notifier.queued() > 1 and time.monotonic() < deadline:  # beta's answers come back
            time.sleep(0.01)
        assert notifier.queued() == 1  # alpha's, in flight
    finally:
        notifier.close(0.2)


def test_each_destination_keeps_slacks_pace_of_a_message_a_second(store, seeded, receiver):
    notifier = notifier_for(store, team_a=receiver.url + "/a", team_b=receiver.url + "/b")
    try:
        a, b = store.get_job("j-a1"), store.get_job("j-b1")
        notifier.handle(engine_event(a, "succeed"), a)
        receiver.wait_for("/a")
        notifier.handle(engine_event(a, "fail"), a)
        notifier.handle(engine_event(b, "fail"), b)
        receiver.wait_for("/a", 2)
        receiver.wait_for("/b")
        times = {p: [t for q, _, t in receiver.requests if q == p] for p in ("/a", "/b")}
        assert times["/a"][1] - times["/a"][0] >= 0.9  # the second to one webhook waits out Slack's second
        assert times["/b"][0] - times["/a"][0] < 0.9  # another webhook does not wait for it
    finally:
        notifier.close(1)


def test_a_full_queue_drops_the_newest_naming_the_destination_and_counts_it(store, seeded, receiver, said):
    receiver.hang.add("/alpha")
    cfg = SlackConfig(webhook_urls={"team-a": receiver.url + "/alpha"})
    notifier = Notifier(cfg, store, dashboard_url="http://x/dashboard", max_queue=2)
    try:
        a = store.get_job("j-a1")
        notifier.handle(engine_event(a, "succeed"), a)
        receiver.wait_for("/alpha")
        for name in ("fail", "start", "succeed"):
            notifier.handle(engine_event(a, name), a)
        assert notifier.counters()["dropped"] == 1
        assert "slack: the queue of webhook 127.0.0.1 is full (2 waiting); dropped succeed for j-a1" in said.lines()
        assert "/alpha" not in said.text  # a webhook's URL is a secret: its host only
    finally:
        notifier.close(0.2)


def test_a_receiver_down_for_minutes_gets_its_message_and_later_ones_wait_behind_in_order(store, seeded, stub):
    stub.fail_next["/webhook/b"] = 10  # down for 1+2+4+8+16+32+60+60+60+60 s of backoff: ~5 minutes
    notifier = notifier_for(store, team_b=stub.url + "/webhook/b")
    notifier.sleep = waits = Waits()
    b = store.get_job("j-b1")
    notifier.handle(engine_event(b, "start", attempt=1), b)
    notifier.handle(engine_event(b, "fail"), b)
    assert notifier.flush(20)
    posts = stub.posts("/webhook/b")
    assert [" started on " in p["text"] or " resumed " in p["text"] for p in posts] == [True, False]  # in order
    assert "failed" in posts[1]["text"]
    assert waits.waits == [1, 2, 4, 8, 16, 32, 60, 60, 60, 60]  # was given up after 5 retries (31 s)
    assert notifier.counters() == {"sent": 2, "failed": 0, "dropped": 0, "discarded": 0, "summarized": 0}
    notifier.close(1)


def test_a_receiver_down_for_good_is_given_up_after_ten_minutes_naming_destination_event_and_job(store, seeded, stub,
                                                                                                   said):
    stub.fail_next["/webhook/b"] = 1000
    notifier = notifier_for(store, team_b=stub.url + "/webhook/b")
    notifier.sleep = waits = Waits()
    b = store.get_job("j-b1")
    notifier.handle(engine_event(b, "fail"), b)
    assert notifier.flush(30)
    window = getattr(notify, "RETRY_WINDOW", 600)
    assert window - 30 <= sum(waits.waits) <= window  # about ten minutes of waiting, then no more
    assert max(waits.waits) <= 60
    assert notifier.counters()["failed"] == 1
    assert any(m.startswith("slack: dropped fail for j-b1 to webhook 127.0.0.1 after ") and " tries over " in m
               for m in said.lines()), said.lines()
    notifier.close(1)


def test_a_retry_after_given_as_an_http_date_is_waited_out_not_a_lost_message(store, seeded, receiver):
    soon = email.utils.formatdate(time.time() + 20, usegmt=True)  # "Wed, 21 Oct 2026 07:28:00 GMT"
    receiver.script["/a"] = [(429, {"Retry-After": soon})]
    notifier = notifier_for(store, team_a=receiver.url + "/a")
    notifier.sleep = waits = Waits()
    a = store.get_job("j-a1")
    notifier.handle(engine_event(a, "succeed"), a)
    assert notifier.flush(10)
    assert len(receiver.posts("/a")) == 2 and notifier.counters()["sent"] == 1  # was dropped after one try
    assert len(waits.waits) == 1 and 15 <= waits.waits[0] <= 21
    notifier.close(1)


def test_shutdown_says_what_it_discards_per_destination(store, seeded, receiver, stub, said):
    receiver.hang.add("/alpha")
    notifier = notifier_for(store, team_a=receiver.url + "/alpha", team_b=stub.url + "/webhook/b")
    a, b = store.get_job("j-a1"), store.get_job("j-b1")
    notifier.handle(engine_event(a, "succeed"), a)
    receiver.wait_for("/alpha")
    notifier.handle(engine_event(a, "fail"), a)
    a2 = store.get_job("j-a2")
    notifier.handle(engine_event(a2, "start", attempt=1), a2)
    notifier.handle(engine_event(b, "fail"), b)
    stub.wait_for("/webhook/b")
    started = time.monotonic()
    notifier.close(0.3)
    assert time.monotonic() - started < 3  # a hung destination does not hold the shutdown
    assert said.lines() == ["slack: shutting down: 3 notification(s) to webhook 127.0.0.1 not sent, discarded: succeed for "
                    "j-a1, fail for j-a1, start for j-a2"], said.lines()  # beta's was sent: nothing said of it
    assert notifier.counters()["discarded"] == 3


def test_the_counters_are_there_for_metrics_from_the_start(store, seeded):
    notifier = notifier_for(store, team_a="http://127.0.0.1:9/x")
    assert notifier.counters() == {"sent": 0, "failed": 0, "dropped": 0, "discarded": 0, "summarized": 0}
    assert notifier.queued() == 0


def test_sdk_reads_retry_after_in_either_form_and_caps_it(receiver):
    far = email.utils.formatdate(time.time() + 86400, usegmt=True)
    soon = email.utils.formatdate(time.time() + 30, usegmt=True)
    receiver.script["/hook"] = [(429, {"Retry-After": soon}), (429, {"Retry-After": far}), (429, {"Retry-After": "7"}),
                                (429, {"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}),
                                (429, {"Retry-After": "soon"})]
    got = []
    for _ in range(5):
        with pytest.raises(sdk.DeliveryError) as caught:  # was ValueError for a date
            sdk.post_webhook(receiver.url + "/hook", {"text": "hi"})
        assert not caught.value.permanent
        got.append(caught.value.retry_after)
    assert 25 <= got[0] <= 30
    assert got[1:] == [sdk.RETRY_AFTER_CAP, 7.0, 0.0, None]  # capped; a past date: now; unreadable: backoff


def test_chat_post_message_reads_a_retry_after_date_too(receiver):
    soon = email.utils.formatdate(time.time() + 30, usegmt=True)
    receiver.script["/api/chat.postMessage"] = [(429, {"Retry-After": soon})]
    with pytest.raises(sdk.DeliveryError) as caught:
        sdk.post_message("xoxb-test", "C1", {"text": "hi"}, api_url=receiver.url + "/api/")
    assert 25 <= caught.value.retry_after <= 30
