"""Slack's `deadline <job id> <when>` (the CLI's `broker deadline`, as `budget` is `broker budget`): set, moved or
removed as the Slack user, refused in the service's words; its parsing (the rest of the line is the deadline)."""

from __future__ import annotations

import time

import pytest

from broker.lifecycle import JobState
from broker.slack import commands
from broker.slack.commands import CommandError

from .test_slack import command, last_event, slack, slack_app, stub, text_of  # noqa: F401  (fixtures)


@pytest.mark.parametrize("text, parsed", [
    ("deadline j-a2 6h", commands.Command("deadline", job_id="j-a2", when="6h")),
    ("deadline j-a2 2026-12-08 09:00 Europe/Berlin",
     commands.Command("deadline", job_id="j-a2", when="2026-12-08 09:00 Europe/Berlin")),
    ('deadline j-a2 "1 hour 30 mins"', commands.Command("deadline", job_id="j-a2", when="1 hour 30 mins")),
    ("deadline j-a2 none", commands.Command("deadline", job_id="j-a2", when=None)),
], ids=["a duration", "a time and its zone, spaces and all", "a quoted duration, unquoted", "none → removed"])
def test_the_deadline_command_reads_the_rest_of_the_line_as_the_deadline(text, parsed):
    assert commands.parse(text) == parsed


@pytest.mark.parametrize("text", ["deadline", "deadline j-a2", "deadline j-a2 \"\""],
                         ids=["no job → usage", "no deadline → usage", "an empty one → usage"])
def test_the_deadline_command_without_a_deadline_answers_its_usage(text):
    with pytest.raises(CommandError) as refused:
        commands.parse(text)
    assert "Usage: `deadline <job id> <6h, 2026-12-08 09:00 Europe/Berlin, or none>`" in str(refused.value)


def test_deadline_command_sets_moves_and_removes_the_deadline_as_the_slack_user(slack, store):
    reply = text_of(command(slack, "deadline j-a2 6h").json())
    assert "Deadline set to <!date^" in reply and "j-a2" in reply, reply
    job = store.get_job("j-a2")
    assert job.deadline == pytest.approx(time.time() + 6 * 3600, abs=60) and job.state is JobState.RUNNING
    ev = last_event(store, "j-a2")
    assert (ev.event, ev.actor) == ("deadline_changed", "slack:U_A") and ev.reason.startswith("deadline none → ")
    moved = text_of(command(slack, "deadline j-a2 12h").json())
    assert "Deadline moved from <!date^" in moved, moved
    removed = text_of(command(slack, "deadline j-a2 none").json())
    assert "removed for" in removed and store.get_job("j-a2").deadline is None, removed


def test_deadline_command_is_refused_in_the_services_words_and_for_another_teams_job(slack, store):
    said = text_of(command(slack, "deadline j-a2 -2h").json())
    assert "deadline: -2h is negative" in said, said
    assert "No job `j-a2`" in text_of(command(slack, "deadline j-a2 6h", user="U_B").json())
    ended = text_of(command(slack, "deadline j-a1 6h").json())
    assert "has already ended (succeeded)" in ended, ended
    assert store.get_job("j-a2").deadline is None
