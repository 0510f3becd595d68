"""Slack walkthrough 2: a long queue does not push the running and recently ended jobs off `status`."""

from __future__ import annotations

from .test_slack import command, queued_jobs, slack, slack_app, stub, text_of  # noqa: F401  (fixtures)

WAIT = "waiting: every matching pool or zone is full right now, and the next one frees in about an hour"


def test_status_with_a_long_queue_lists_running_then_queued_then_ended_and_says_the_wait_once(slack, store):
    queued_jobs(store, 200, reason=WAIT)
    listing = command(slack, "status").json()["blocks"][1]["text"]["text"]
    lines = [line for line in listing.split("\n") if " — " in line]
    assert "`j-a2`" in lines[0] and " — running" in lines[0]  # the running job first, not pushed off
    assert "`j-a1`" in listing and " — succeeded" in listing  # and the one that ended lately
    states = [line.split(" — ")[1].split(" ")[0] for line in lines]
    assert states == sorted(states, key=["running", "queued", "succeeded"].index)
    # the wait a dozen queued jobs share said once, not under each; the first of them to wait for the pool, whose head
    # the rest wait behind (broker.queue.waits), has a wait of its own, said under it
    assert listing.count("no start estimate") == 2, listing
    assert listing.count("no start estimate: it waits behind j-q002, first in line for pool local") == 1, listing
    assert "are waiting: " in listing and "waiting: waiting:" not in listing, listing.split("\n")[0]
    assert sum(1 for s in states if s == "queued") >= 10  # and so a dozen queued lines fit, not five


def test_the_more_line_says_where_to_see_the_rest(slack, store):
    queued_jobs(store, 40, reason=WAIT)
    for text in ("status", "queue"):
        last = command(slack, text).json()["blocks"][1]["text"]["text"].split("\n")[-1]
        assert last.startswith("…and ") and "`broker status`" in last and "/dashboard|" in last, last
