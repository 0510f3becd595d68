"""What a Slack notification's plain text and a list's reason keep.

QA (Dec 7): the plain text of a notification (a phone's push) stripped every ``*`` and backtick, the job's own
too: a masked secret ``***`` in a diagnosis read "key was ''". And Slack's status and queue lists cut a budget-limited
job's reason at 300 characters, losing its last words, the ones that matter today: "if spot does not come by about
18:21Z, it cannot meet its deadline" (or when it "moves to on-demand"), behind a long parenthetical.
"""

from __future__ import annotations

import time

from broker.lifecycle import JobState
from broker.models import Event
from broker.slack import blocks
from broker.slack.blocks import REASON_CHARS, job_line, jobs_reply
from broker.slack.messages import notification, summary

from . import world

H = 3600

FAILED = world.job("j-fx", "team-a", JobState.FAILED, submitted=time.time() - H, budget=5_000_000, spent=100_000,
                   attempts=1, diagnosis={"text": "KeyError: API key was '***' (masked); set `WANDB_API_KEY`",
                                          "infrastructure": False})


def test_the_plain_text_keeps_the_jobs_own_stars_and_backticks_and_drops_only_the_brokers_markup():
    event = Event(job_id="j-fx", time=time.time(), event="fail", from_state="running", to_state="failed",
                  reason="failed", actor="engine", attempt=1)
    reply = notification(event, FAILED, [], [], dashboard_url="http://x/dashboard")
    assert reply.text == (":x: train-j-fx j-fx (team-a) failed: KeyError: API key was '***' (masked); set "
                          "`WANDB_API_KEY`")  # was "key was '' (masked); set WANDB_API_KEY"
    assert reply.blocks[0]["text"]["text"].startswith(":x: *train-j-fx* `j-fx` (team-a) failed: KeyError: API key "
                                                      "was '***' (masked)")


def test_a_job_named_with_stars_keeps_them_in_a_summarys_plain_text():
    jobs = [world.job(f"j-s{i}", "team-a", JobState.CANCELLED, submitted=time.time() - H, budget=1_000_000, spent=0,
                      attempts=0) for i in range(6)]
    jobs = [j.__class__(**{**j.__dict__, "name": f"lr*{i}*"}) for i, j in enumerate(jobs)]
    reply = summary("cancelled", jobs, dashboard_url="http://x/dashboard")
    assert reply.text.startswith(":no_entry_sign: 6 jobs (team-a) were cancelled: lr*0* j-s0, lr*1* j-s1")
    assert reply.blocks[0]["text"]["text"].startswith(":no_entry_sign: 6 jobs (team-a) were cancelled: *lr*0** "
                                                      "`j-s0`")


OFFER = "ondemand 1x A10G g5.xlarge in aws/sim-od (simulated)"
REASON = ("waiting: spot zones aws/sim-a, aws/sim-b, aws/sim-c are busy right now, and they are what the budget covers "
          f"(the budget left, $1.2000 of $5.0000, does not cover {OFFER}, estimated at $4.2000 for the 3.0 h of "
          "work left and a clean stop; raise the budget to at least $8.0000 to let it move)")
DEADLINE = "its budget covers only spot: if spot does not come by about 2026-12-07 18:21Z, it cannot meet its deadline"
MOVES = ("if spot does not come, it moves to on-demand (or a free pool) by about 2026-12-07 18:21Z to meet its "
         "deadline")


def queued(job_id: str = "j-late"):
    return world.job(job_id, "team-a", JobState.QUEUED, submitted=time.time() - H, budget=5_000_000,
                     spent=3_800_000, attempts=0, reason=REASON)


def test_a_queued_jobs_line_keeps_the_deadline_sentence_and_shortens_the_parenthetical():
    line = job_line(queued(), waiting=DEADLINE)
    reason = line.split("\n", 1)[1].strip().strip("_")
    assert reason.endswith("if spot does not come by about 2026-12-07 18:21Z, it cannot meet its deadline")  # was cut
    assert reason.startswith("waiting: spot zones aws/sim-a, aws/sim-b, aws/sim-c are busy right now")
    assert len(reason) <= REASON_CHARS


def test_the_moves_to_on_demand_sentence_is_kept_too():
    line = job_line(queued(), waiting=MOVES)
    assert line.endswith("it moves to on-demand (or a free pool) by about 2026-12-07 18:21Z to meet its deadline_")


def test_a_reason_said_once_above_a_queue_keeps_its_end_too():
    jobs = [queued("j-l1"), queued("j-l2")]
    reply = jobs_reply("Queue", jobs, {"j-l1": 1, "j-l2": 2}, "empty", waiting={"j-l1": DEADLINE, "j-l2": DEADLINE})
    head = reply.blocks[1]["text"]["text"].split("\n")[0]
    assert head.endswith("it cannot meet its deadline_"), head


def test_clip_reason_keeps_a_short_reason_whole_and_cuts_a_long_last_clause_at_its_end():
    assert blocks.clip_reason("waiting: no capacity", 300) == "waiting: no capacity"
    long = "x" * 500
    assert blocks.clip_reason(long, 300) == "x" * 299 + "…"
    cut = blocks.clip_reason("a" * 400 + "; the end that matters", 100)
    assert cut.endswith("…; the end that matters") and len(cut) <= 100
