"""Slack walkthrough 2: the "Raise budget to $X" button proposes what a resume needs, at the budget's precision,
and only where money is the matter."""

from __future__ import annotations

from broker.lifecycle import JobState
from broker.slack import messages

from . import world
from .test_slack import command, press, set_job, slack, slack_app, stub, text_of  # noqa: F401  (fixtures)


def buttons_of(reply: dict) -> dict:
    return {e["text"]["text"]: e for b in reply.get("blocks", []) if b["type"] == "actions" for e in b["elements"]}


def test_a_small_budget_is_raised_at_its_own_precision_not_to_a_whole_dollar():
    assert messages.raised_budget(500, 50) == 750  # $0.0005 → $0.00075, not $1.00
    assert messages.raised_budget(12_345, 50) == 19_000  # $0.012345 → $0.019
    assert messages.raised_budget(4_000_000, 50) == 6_000_000  # whole dollars from a dollar up, as before
    assert messages.raised_budget(500, 50, at_least=3_600) == 3_600  # what a resume needs, when that is more


def test_a_budget_stopped_jobs_raise_button_proposes_what_the_resume_needs(slack, store):
    set_job(store, "j-b1", state=JobState.STOPPED_BUDGET, budget=500, spent=500,
            diagnosis={"class": "budget_stop", "infrastructure": True, "text": "Stopped at its budget."})
    refused = text_of(command(slack, "resume j-b1", user="U_B").json())
    needed = messages.needed_to_resume(refused)
    assert needed is not None, refused
    labels = [label for label in buttons_of(command(slack, "status j-b1", user="U_B").json())
              if label.startswith("Raise budget to ")]
    proposed = messages.to_micros(labels[0].removeprefix("Raise budget to $"))
    assert needed <= proposed < 1_000_000, (labels, refused)  # enough to resume, not $1.00


def test_a_failure_of_the_jobs_own_offers_no_raise_budget(slack):
    # j-b1 failed out of GPU memory: more money does not help
    labels = set(buttons_of(command(slack, "status j-b1", user="U_B").json()))
    assert labels == {"Resume from step 400", "Switch to on-demand"}
