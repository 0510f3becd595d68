"""Slack notifications in a burst: many of one kind for one channel become one summary, not a message each.

Cancelling 200 jobs posted 200 messages to the team channel within seconds (Slack takes about one a second per
channel: minutes of backlog, a flooded channel). Now a delivery pass that holds more than ``summarize_over`` (5)
notifications of one kind for one destination posts ONE summary naming them, and each notification is in exactly
one post. Slack itself is the stub of ``fakes.SlackStub`` on 127.0.0.1, or a recording sender.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import replace

from broker.auth import Principal
from broker.lifecycle import JobState
from broker.models import Event
from broker.slack import sdk

from .test_slack import engine_event, queued_jobs, slack_app, stub, text_of  # noqa: F401  (fixtures)

IDS = re.compile(r"j-q\d{3}")


def cancelled(job, actor: str = "alice") -> Event:
    """The service's ``cancel`` of a queued job, as it hands it to the notifier."""
    return Event(job_id=job.id, time=time.time(), event="cancel", from_state="queued", to_state="cancelled",
                 reason="cancelled by the user", actor=actor)


def failed(job) -> Event:
    return Event(job_id=job.id, time=time.time(), event="fail", from_state="running", to_state="failed",
                 reason="CUDA out of memory", actor="engine", attempt=1,
                 data={"diagnosis": "CUDA out of memory at step 10."})


def accounted(posts: list[dict]) -> tuple[list[str], int]:
    """Every job id the posts name, and how many more their "and N more" count."""
    ids, more = [], 0
    for p in posts:  # the message's plain text (the blocks say it again, and the footer has no ids)
        ids += IDS.findall(p["text"])
        more += sum(int(n) for n in re.findall(r"and (\d+) more", p["text"]))
    return ids, more


class Gate:
    """A sender that records every post and holds the first one to each destination until ``open()`` (each
    destination has a sender of its own): what is handled meanwhile waits in the queue, and the next pass takes it
    all — a burst, without depending on the host's speed."""

    def __init__(self):
        self.posts: list[tuple[tuple[str, str], dict]] = []
        self.held = threading.Event()
        self.first = threading.Event()
        self.firsts: dict[tuple[str, str], threading.Event] = {}
        self.lock = threading.Lock()

    def __call__(self, dest, payload):
        with self.lock:
            first = dest not in self.firsts and not self.held.is_set()
            if first:
                self.firsts[dest] = threading.Event()
        if first:
            self.first.set()
            self.firsts[dest].set()
            self.held.wait(10)
        with self.lock:
            self.posts.append((dest, payload))

    def open(self):
        self.held.set()


def gated(notifier, store) -> Gate:
    gate = Gate()
    notifier.send = gate
    warm = store.get_job("j-a1")
    notifier.handle(engine_event(warm, "succeed"), warm)  # the post that holds the thread
    assert gate.first.wait(5)
    return gate


def test_200_cancels_through_the_service_post_a_handful_of_messages_that_account_for_every_job(slack_app, store,
                                                                                                stub):
    queued_jobs(store, 200)
    service, who = slack_app.state.service, Principal("alice", team="team-a")
    for i in range(200):
        service.cancel(who, f"j-q{i:03d}")
    assert slack_app.state.notifier.flush(30)
    posts = stub.posts("/api/chat.postMessage")
    assert 1 <= len(posts) <= 12, [text_of(p)[:80] for p in posts]  # was 200
    ids, more = accounted(posts)
    assert len(ids) == len(set(ids))  # none named twice
    assert len(ids) + more == 200
    summaries = [text_of(p) for p in posts if "jobs (team-a) were cancelled by alice" in text_of(p)]
    assert summaries and all("broker status" in s for s in summaries)
    assert slack_app.state.notifier.summarized + (len(posts) - len(summaries)) == 200


def test_a_burst_names_ten_jobs_and_counts_the_rest(slack_app, store, stub):
    queued_jobs(store, 40)
    notifier = slack_app.state.notifier
    gate = gated(notifier, store)
    for i in range(40):
        job = store.get_job(f"j-q{i:03d}")
        notifier.handle(cancelled(job), job)
    gate.open()
    assert notifier.flush(10)
    (warm, (dest, summary)) = gate.posts
    assert dest == ("channel", "C_A")
    text = text_of(summary)
    assert summary["text"].startswith(":no_entry_sign: 40 jobs (team-a) were cancelled by alice: q000 j-q000, "
                                      "q001 j-q001")
    assert summary["blocks"][0]["text"]["text"].startswith(":no_entry_sign: 40 jobs (team-a) were cancelled by "
                                                           "alice: *q000* `j-q000`, *q001* `j-q001`")
    assert "q009 j-q009, and 30 more." in text and "j-q010" not in text
    assert "`/broker status <job id>` shows one" in text and "`broker status` in a terminal lists them all" in text
    assert (notifier.sent, notifier.summarized, notifier.failed) == (2, 40, 0)


def test_three_cancels_are_three_messages_as_before(slack_app, store, stub):
    queued_jobs(store, 3)
    service, who = slack_app.state.service, Principal("alice", team="team-a")
    for i in range(3):
        service.cancel(who, f"j-q{i:03d}")
    posts = stub.wait_for("/api/chat.postMessage", 3)
    assert slack_app.state.notifier.flush(5)
    assert sorted(p["text"] for p in stub.posts("/api/chat.postMessage")) == [
        f":no_entry_sign: q00{i} j-q00{i} (team-a) was cancelled by alice." for i in range(3)]
    assert len(posts) == 3


def test_five_of_a_kind_stay_single_and_six_are_summarized(slack_app, store, stub):
    queued_jobs(store, 11)
    notifier = slack_app.state.notifier
    gate = gated(notifier, store)
    for i in range(5):
        job = store.get_job(f"j-q{i:03d}")
        notifier.handle(cancelled(job), job)
    gate.open()
    assert notifier.flush(10)
    assert len(gate.posts) == 1 + 5 and notifier.summarized == 0
    gate = gated(notifier, store)
    for i in range(5, 11):
        job = store.get_job(f"j-q{i:03d}")
        notifier.handle(cancelled(job), job)
    gate.open()
    assert notifier.flush(10)
    (_, (_, summary)) = gate.posts
    assert text_of(summary).startswith(":no_entry_sign: 6 jobs (team-a) were cancelled by alice:")
    assert accounted([summary]) == ([f"j-q{i:03d}" for i in range(5, 11)], 0)


def test_mixed_kinds_are_grouped_per_kind_and_per_channel_and_few_failures_keep_their_buttons(slack_app, store):
    queued_jobs(store, 20)
    queued_jobs_b = [replace(store.get_job(f"j-q{i:03d}"), team="team-b") for i in range(14, 20)]  # webhook b
    notifier = slack_app.state.notifier
    gate = gated(notifier, store)
    warm_b = replace(store.get_job("j-a1"), team="team-b")  # holds team-b's sender (a thread of its own) too
    notifier.handle(engine_event(warm_b, "succeed"), warm_b)
    deadline = time.monotonic() + 5
    while len(gate.firsts) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(gate.firsts) == 2
    jobs = [store.get_job(f"j-q{i:03d}") for i in range(14)]
    for job in jobs[:7]:
        notifier.handle(cancelled(job, actor=f"u{job.id}"), job)  # by several people: no "by" in the summary
    for job in jobs[7:12]:
        notifier.handle(engine_event(job, "succeed"), job)  # five: single
    for job in jobs[12:14]:
        job = replace(job, state=JobState.FAILED, diagnosis={"text": "CUDA out of memory at step 10.",
                                                             "infrastructure": False})
        notifier.handle(failed(job), job)
    for job in queued_jobs_b:
        notifier.handle(cancelled(job), job)
    gate.open()
    assert notifier.flush(10)
    posts = [(dest, text_of(p), p) for dest, p in gate.posts if "j-a1" not in p["text"]]  # less the two held
    # each destination's sender posts on its own: their posts interleave in any order
    summaries = sorted((d, t) for d, t, _ in posts if " jobs " in t)
    assert [d for d, _ in summaries] == [("channel", "C_A"), ("webhook", stub_url_b(slack_app))]
    assert summaries[0][1].startswith(":no_entry_sign: 7 jobs (team-a) were cancelled:")
    assert summaries[1][1].startswith(":no_entry_sign: 6 jobs (team-b) were cancelled by alice:")
    assert sum(" finished. Cost" in t for _, t, _ in posts) == 5
    fails = [p for _, t, p in posts if " failed: CUDA out of memory" in t]
    assert len(fails) == 2 and all(any(b["type"] == "actions" for b in p["blocks"]) for p in fails)
    assert len(posts) == 2 + 5 + 2
    assert (notifier.summarized, notifier.sent) == (13, 2 + 9)


def stub_url_b(app) -> str:
    return app.state.notifier.cfg.webhook_urls["team-b"]


def test_many_failures_are_one_summary_that_points_to_their_buttons(slack_app, store):
    queued_jobs(store, 8)
    notifier = slack_app.state.notifier
    gate = gated(notifier, store)
    for i in range(8):
        job = replace(store.get_job(f"j-q{i:03d}"), state=JobState.FAILED)
        notifier.handle(failed(job), job)
    gate.open()
    assert notifier.flush(10)
    (_, (_, summary)) = gate.posts
    text = text_of(summary)
    assert text.startswith(":x: 8 jobs (team-a) failed: q000 j-q000")
    assert "`/broker status <job id>` shows one (with the buttons that continue it)" in text
    assert not any(b["type"] == "actions" for b in summary["blocks"])


def test_a_summary_that_cannot_be_delivered_is_given_up_once_never_posted_one_by_one(slack_app, store):
    queued_jobs(store, 9)
    notifier = slack_app.state.notifier
    gate = gated(notifier, store)
    tries = []

    def refuse(dest, payload):
        tries.append(payload)
        raise sdk.DeliveryError("rate_limited", retry_after=0.0)

    for i in range(9):
        job = store.get_job(f"j-q{i:03d}")
        notifier.handle(cancelled(job), job)
    notifier.send = refuse  # the gate's held post is already under way
    gate.open()
    assert notifier.flush(10)
    assert len(tries) == notifier.cfg.retries + 1 and all(t == tries[0] for t in tries)
    assert "9 jobs (team-a) were cancelled" in tries[0]["text"]
    assert (notifier.sent, notifier.failed, notifier.summarized) == (1, 1, 9)


def test_a_burst_after_a_post_waits_for_slacks_pace_and_gathers(slack_app, store, stub):
    """Not held by the test: the first cancel goes out at once, the ones right behind it wait out the second
    Slack allows and go out together."""
    queued_jobs(store, 12)
    service, who = slack_app.state.service, Principal("alice", team="team-a")
    service.cancel(who, "j-q000")
    stub.wait_for("/api/chat.postMessage")
    started = time.monotonic()
    for i in range(1, 12):
        service.cancel(who, f"j-q{i:03d}")
    posts = stub.wait_for("/api/chat.postMessage", 2)
    assert slack_app.state.notifier.flush(5)
    posts = stub.posts("/api/chat.postMessage")
    assert len(posts) == 2, [p["text"] for p in posts]
    assert accounted(posts[1:]) == ([f"j-q{i:03d}" for i in range(1, 11)], 1)
    assert time.monotonic() - started < 5


def test_a_pass_posts_single_messages_in_the_order_their_events_came(slack_app, store):
    """Grouping by kind must not put a job's "finished" before its "started" when another job finished first."""
    queued_jobs(store, 2)
    notifier = slack_app.state.notifier
    gate = gated(notifier, store)
    a, b = store.get_job("j-q000"), store.get_job("j-q001")
    for job, name in ((b, "succeed"), (a, "start"), (a, "succeed")):
        notifier.handle(engine_event(job, name, attempt=1), job)
    gate.open()
    assert notifier.flush(10)
    said = [(IDS.findall(p["text"])[0], "started" if " started on " in p["text"] else "finished")
            for _, p in gate.posts[1:]]
    assert said == [("j-q001", "finished"), ("j-q000", "started"), ("j-q000", "finished")]
