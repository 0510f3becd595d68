"""Slack's words for a job, made consistent with the CLI's and with themselves (QA, Dec 7):

* a submit's reply gave two start times: "#7 in queue, roughly starting at <!date^…|2026-12-07 15:44Z>" (a start at
  15:44:34, which Slack shows cut to 15:44) beside "estimated to start at 2026-12-07 15:45Z, after its deadline" (the
  minute rounded, as the queue's column reads it). The token now names the same minute, in its time and its fallback;
* ``status <id>`` of a job queued again after a preemption showed "*Where* spot g5.xlarge in aws/sim-b", the preempted
  attempt, as if it ran there: it is said to be where its last attempt ran;
* ``status <id>`` of an ended job never said whether it met its deadline, which ``broker status ID`` does ("missed by
  1 min", "met, 5.9 h before it"): it does now, by the same function (:func:`broker.views.deadline_met_words`).

Pure: the reply builders run on jobs and attempts as the store keeps them (``tests/edges/world.py``)."""

from __future__ import annotations

import re
import time

from edges import world

from broker.lifecycle import AttemptState, JobState
from broker.slack import blocks, dispatch
from broker.views import LATE_START, deadline_words, minute


def _fields(reply) -> dict[str, str]:
    out = {}
    for b in reply.blocks:
        for f in b.get("fields") or []:
            name, _, value = f["text"].partition("*\n")
            out[name.strip("*")] = value
    return out


def test_a_submit_reply_names_one_start_minute_in_its_date_token_and_its_late_words():
    base = time.mktime((2026, 12, 7, 15, 44, 0, 0, 0, -1)) - time.timezone  # 15:44:00 UTC
    base = (int(base) // 60) * 60
    start, deadline = base + 34, base - 2 * 60  # a start at 15:44:34, a deadline at 15:42:00
    said = dispatch._queue_words(7, start)
    token = re.search(r"<!date\^(\d+)\^[^|]*\|([^>]*)>", said)
    assert token, said
    # the token's moment is the minute the late words name (Slack cuts a token's time to its minute)
    assert int(token.group(1)) == base + 60, said
    assert token.group(2) == minute(start), said
    job = world.job("j-late", "team-a", JobState.QUEUED, submitted=base - 600, budget=4_000_000, spent=0, attempts=0)
    job.deadline = deadline
    late = deadline_words(job, start)
    assert late.startswith(f"{LATE_START}{minute(start)}, "), late
    assert time.strftime("%H:%M", time.gmtime(int(token.group(1)))) == minute(start)[11:16]


def test_a_queued_job_after_a_preemption_is_said_to_have_last_run_there_not_to_be_there():
    now = time.time()
    job = world.job("j-pre", "team-a", JobState.QUEUED, submitted=now - 900, budget=4_000_000, spent=10_000,
                    attempts=1, reason="waiting: the spot policy waits for spot capacity")
    ran = world.attempt("j-pre", 1, AttemptState.PREEMPTED, world.spot("sim-b", 426_000), start=now - 800,
                        seconds=120, cost=10_000)
    fields = _fields(blocks.job_reply(job, [ran], 1, "http://127.0.0.1:1/"))
    assert "Where" not in fields, fields
    assert fields["Last attempt"] == "spot g5.xlarge in aws/sim-b (attempt 1, preempted)", fields
    # running, it is where it runs
    running = world.job("j-run", "team-a", JobState.RUNNING, submitted=now - 900, budget=4_000_000, spent=10_000,
                        attempts=1, placement=world.spot("sim-a", 426_000))
    fields = _fields(blocks.job_reply(running, [ran], None, "http://127.0.0.1:1/"))
    assert fields["Where"] == "spot g5.xlarge in aws/sim-a", fields


def test_an_ended_job_says_whether_it_met_its_deadline_as_the_cli_does():
    now = time.time()
    missed = world.job("j-miss", "team-a", JobState.SUCCEEDED, submitted=now - 3600, budget=4_000_000, spent=10_000,
                       attempts=1, updated=now - 600, placement=world.ondemand(1_006_000))
    missed.deadline = now - 660  # it ended a minute after it
    fields = _fields(blocks.job_reply(missed, [], None, "http://127.0.0.1:1/"))
    assert "Due" not in fields, fields
    assert fields["Deadline"].endswith(" (missed by 1 min)"), fields
    assert fields["Deadline"].startswith(blocks.local_time(missed.deadline)), fields
    met = world.job("j-met", "team-a", JobState.SUCCEEDED, submitted=now - 3600, budget=4_000_000, spent=10_000,
                    attempts=1, updated=now - 600, placement=world.ondemand(1_006_000))
    met.deadline = now - 600 + 5.9 * 3600
    fields = _fields(blocks.job_reply(met, [], None, "http://127.0.0.1:1/"))
    assert fields["Deadline"].endswith(" (met, 5.9 h before it)"), fields
