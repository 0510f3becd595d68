"""Slack walkthrough 2: a second press of Resume says the job was already resumed, by whom and when."""

from __future__ import annotations

import json

from broker.lifecycle import JobState

from .test_slack import command, pressed, slack, slack_app, stub, text_of  # noqa: F401  (fixtures)


def test_a_second_resume_says_who_already_resumed_it_and_what_it_is_now(slack, store, stub):
    assert "Resumed `j-b1`" in text_of(command(slack, "resume j-b1 force", user="U_B").json())
    assert store.get_job("j-b1").state is JobState.QUEUED
    again = text_of(command(slack, "resume j-b1 force", user="U_B").json())
    assert "already resumed by slack:U_B at " in again and "it is queued" in again, again
    assert "only a failed or budget-stopped job resumes" not in again
    # the button pressed again, as a colleague would: the same answer
    btn = {"action_id": "broker_resume", "value": json.dumps({"job": "j-b1", "force": True})}
    said = pressed(slack, stub, btn, "U_B", "again")
    assert "already resumed by slack:U_B" in said and "it is queued" in said, said


def test_a_resume_of_a_job_never_ended_is_still_refused_as_before(slack):
    said = text_of(command(slack, "resume j-a3").json())  # queued since it was submitted: no resume to speak of
    assert "already resumed" not in said and "not ended" in said, said
