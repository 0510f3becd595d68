"""QA walkthrough (Dec 7, b): budget-stop buttons that could only fail, "Not resumed:" on every refused resume, CLI
words in Slack replies, long input that hid the reason, option typos, `costs <typo of another team>`, and where an
admin's submit without team= is notified. Through the real app with signed requests, as ``test_slack.py`` does."""

from __future__ import annotations

import json

from broker.lifecycle import JobState
from broker.slack import blocks, messages
from broker.slack.commands import CommandError, parse

from .test_slack import command, press, set_job, slack, slack_app, stub, text_of  # noqa: F401  (fixtures)

BUDGET_STOP = {"class": "budget_stop", "infrastructure": True, "text": "Stopped at its budget."}


def labels_of(reply: dict) -> list[str]:
    return [e["text"]["text"] for b in reply.get("blocks", []) if b["type"] == "actions" for e in b["elements"]]


def buttons_of(reply: dict) -> dict:
    return {e["text"]["text"]: e for b in reply.get("blocks", []) if b["type"] == "actions" for e in b["elements"]}


def _stopped_short(store):
    """j-b1 stopped at its budget with $0.0005 of $0.002 left: too little for a minute's run and a clean stop."""
    return set_job(store, "j-b1", state=JobState.STOPPED_BUDGET, budget=2_000, spent=1_500, diagnosis=BUDGET_STOP,
                   reason="stopped at its budget")


def test_a_stopped_job_that_its_budget_cannot_resume_offers_only_the_raise(slack, store, stub):
    _stopped_short(store)
    reply = command(slack, "status j-b1", user="U_B").json()
    labels = labels_of(reply)
    assert labels[0].startswith("Raise budget to ") and "Cancel" in labels, labels
    assert not any(x.startswith("Resume") or x == "Switch to on-demand" for x in labels), labels
    raise_btn = buttons_of(reply)[labels[0]]
    assert raise_btn.get("style") == "primary"
    # pressed, the raise's reply offers the resume its reason speaks of, and that resume runs
    r = press(slack, raise_btn["action_id"], raise_btn["value"], user="U_B", response_url=f"{stub.url}/respond/raise")
    assert r.status_code == 200
    raised = stub.wait_for("/respond/raise")[0]
    resume = buttons_of(raised).get("Resume from step 400")
    assert resume is not None, text_of(raised)
    r = press(slack, resume["action_id"], resume["value"], user="U_B", response_url=f"{stub.url}/respond/resume")
    said = text_of(stub.wait_for("/respond/resume")[0])
    assert store.get_job("j-b1").state is JobState.QUEUED, said


def test_a_budget_stop_notification_whose_budget_cannot_resume_offers_only_the_raise(store, seeded):
    job = _stopped_short(store)
    buttons = messages.continue_buttons(job, 53, 50, state=JobState.STOPPED_BUDGET, at_least=5_100)
    labels = [e["text"]["text"] for e in buttons["elements"]]
    assert labels == ["Raise budget to $0.0051", "Cancel"], labels
    # one that pays keeps Resume and Switch
    paid = messages.continue_buttons(job, 53, 50, state=JobState.STOPPED_BUDGET, at_least=None)
    assert [e["text"]["text"] for e in paid["elements"]][1:] == ["Resume from step 53", "Switch to on-demand"]


def test_a_refused_resume_of_a_budget_stopped_job_says_not_resumed(slack, store):
    _stopped_short(store)
    said = text_of(command(slack, "resume j-b1", user="U_B").json())
    assert said.startswith(":warning: Not resumed: only $0.0005 of the $0.002 budget is left"), said


def test_a_resume_of_a_failure_of_its_own_says_slacks_words_not_the_clis(slack):
    said = text_of(command(slack, "resume j-b1", user="U_B").json())
    assert "--force" not in said and "resume it with force" in said, said
    assert "/broker resume j-b1 force" in said, said
    assert "`broker resume j-b1 --env NAME=value`" in said and "Slack's resume sets no env" in said, said


def test_for_slack_says_max_price_as_the_option():
    from broker.slack.dispatch import for_slack
    said = for_slack("would wait for ever: submit it again with a max_price_per_hour that covers on-demand (or none)")
    assert "with a `max_price=` that covers" in said, said


def test_long_input_keeps_the_reason_and_fits_slacks_limits(slack):
    for text, reason in [("status " + "x " * 15_000, "more than `status` takes"),
                         ("status j-" + "a" * 5000, "is not a job id. Usage: `status [job id]`"),
                         ("z" * 4000, "Try `help`"),
                         ("cancel j-1 " + "y" * 4000, "more than `cancel` takes, so nothing was done. Usage"),
                         ("costs " + "t" * 4000, "You can see your team's costs")]:
        reply = command(slack, text).json()
        assert len(reply["text"]) < 4000, (text[:20], len(reply["text"]))
        assert all(len(b["text"]["text"]) <= 3000 for b in reply["blocks"] if b.get("text"))
        assert reason in text_of(reply), (text[:20], text_of(reply)[:400])


def test_error_text_is_cut_as_its_section():
    r = blocks.error("a" * 60_000)
    assert len(r.text) <= 3000 and len(r.payload()["text"]) <= 3000


def _refusal(text: str) -> str:
    try:
        parse(text)
    except CommandError as exc:
        return str(exc)
    raise AssertionError(f"{text!r} parsed")


def test_option_slips_are_named():
    assert "`budget=` has no value" in _refusal("submit budget= https://x.io/a.yaml")
    assert "Did you mean `budget`?" in _refusal("submit budgt=$5 https://x.io/a.yaml")
    assert parse("submit Budget=$5 https://x.io/a.yaml").options == {"budget_usd": "5"}
    assert "did you mean `force`?" in _refusal("resume j-1 forse")


def test_costs_of_a_typo_of_another_team_suggests_it(slack):
    said = text_of(command(slack, "costs teamb").json())  # U_A is team-a's
    assert "Did you mean `team-b`?" in said and "You can see only your team's costs (team-a)" in said, said


def test_an_admins_submit_without_team_says_where_it_went(slack, store):
    reply = text_of(command(slack, "submit\nname: t\nrun: echo hi", user="U_ADMIN").json())
    assert "your team's channel" not in reply, reply
    assert "default" in reply and "no team= given" in reply, reply
