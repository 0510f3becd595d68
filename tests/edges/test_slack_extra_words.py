"""A Slack command given words it does not use answers its usage, naming them, and does nothing.

``/broker queue team-b`` showed the user's own team's queue as if it were team-b's, and the commands that refused
extra words (``cancel j-1 j-2``) answered a bare usage line that did not say which word was too many. Acting on
part of what was typed surprises, and a cancel cannot be undone; only ``submit`` takes free text (its YAML), and
``help`` answers whatever follows it. The CLI's argparse already refuses what a command does not take.
"""

from __future__ import annotations

import pytest
from testports import free_port

from broker import cli
from broker.lifecycle import JobState
from broker.slack import commands
from broker.slack.commands import CommandError

from .test_slack import command, slack, slack_app, stub, text_of  # noqa: F401 - the Slack app fixtures, shared


@pytest.mark.parametrize("text, unused, usage", [
    pytest.param("queue team-b", "`team-b` is", "queue", id="queue with a team is not your own team's queue"),
    pytest.param("queue everything now", "`everything` `now` are", "queue", id="queue names every word it does not use"),
    pytest.param("status j-a1 extra", "`extra` is", "status [job id]", id="status with a word after the id"),
    pytest.param("status j-a1 j-a2", "`j-a2` is", "status [job id]", id="status of two jobs"),
    pytest.param("cancel j-a2 j-a3", "`j-a3` is", "cancel <job id>", id="cancel of two jobs cancels neither"),
    pytest.param("cancel j-a2 please", "`please` is", "cancel <job id>", id="cancel with a word after the id"),
    pytest.param("logs j-a1 200", "`200` is", "logs <job id>", id="logs with a line count it does not take"),
    pytest.param("resume j-b1 now", "`now` is", "resume <job id> [force]", id="resume with a word that is not force"),
    pytest.param("resume j-b1 force j-b2", "`j-b2` is", "resume <job id> [force]", id="resume of two jobs"),
    pytest.param("budget j-a2 $40 $50", "`$50` is", "budget <job id> <$ new budget>", id="budget with two amounts"),
    pytest.param("costs team-a team-b", "`team-b` is", "costs [team]", id="costs of two teams"),
    pytest.param("costs 7d 30d", "`30d` is", "costs [team]", id="costs over two periods"),
])
def test_a_word_a_command_does_not_use_is_refused_naming_it_with_the_usage(text, unused, usage):
    with pytest.raises(CommandError) as refused:
        commands.parse(text)
    said = str(refused.value)
    name = text.split()[0]
    assert said.startswith(f"{unused} more than `{name}` takes, so nothing was done. Usage: `{usage}"), said


@pytest.mark.parametrize("text, expected", [
    ("queue", commands.Command("queue")),
    ("status j-a1", commands.Command("status", job_id="j-a1")),
    ("cancel j-a2", commands.Command("cancel", job_id="j-a2")),
    ("resume j-b1 FORCE", commands.Command("resume", job_id="j-b1", force=True)),
    ("budget j-a2 $40", commands.Command("budget", job_id="j-a2", amount=40_000_000)),
    ("costs 30d team-b", commands.Command("costs", team="team-b", period="30d")),
    ("help cancel", commands.Command("help")),
    ("submit budget=$5 name=two-words\nname: x\nrun: echo one two three", commands.Command(
        "submit", yaml="name: x\nrun: echo one two three", options={"budget_usd": "5", "name": "two-words"})),
], ids=["queue alone", "status with one id", "cancel with one id", "resume with force", "budget with one amount",
        "costs with a period and a team", "help answers whatever follows it (its answer is every usage line)",
        "submit keeps its free text"])
def test_a_command_with_the_words_it_takes_still_parses(text, expected):
    assert commands.parse(text) == expected


def test_cancel_of_two_jobs_from_slack_cancels_neither_and_says_which_word_was_too_many(slack, store):
    r = command(slack, "cancel j-a2 j-a3")
    assert r.status_code == 200
    said = text_of(r.json())
    assert "`j-a3` is more than `cancel` takes, so nothing was done" in said, said
    assert "cancel &lt;job id&gt;" in said, said  # Slack's text escapes < and >
    assert store.get_job("j-a2").state is JobState.RUNNING
    assert store.get_job("j-a3").state is JobState.QUEUED


def test_queue_with_a_team_from_slack_answers_the_usage_not_the_users_own_queue(slack):
    said = text_of(command(slack, "queue team-b").json())
    assert "`team-b` is more than `queue` takes" in said and "waiting" not in said, said


# -- the CLI -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv, extra", [
    (["status", "j-1", "extra"], "extra"),
    (["logs", "j-1", "200"], "200"),
    (["resume", "j-1", "force"], "force"),
    (["budget", "j-1", "40", "50"], "50"),
    (["queue", "team-b"], "team-b"),
    (["events", "j-1", "j-2"], "j-2"),
    (["ondemand", "j-1", "j-2"], "j-2"),
    (["fault", "preempt", "j-1", "j-2"], "j-2"),
    (["costs", "j-1", "j-2"], "j-2"),
    (["submit", "a.yaml", "b.yaml"], "b.yaml"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else v)
def test_the_cli_refuses_an_argument_a_command_does_not_take_before_asking_the_broker(capsys, argv, extra):
    """argparse does this already (checked, not changed): a usage error naming the word, and no request (the URL is a
    port nothing listens on, where a request would have been a connection error, exit 1)."""
    assert cli.main(["--url", f"http://127.0.0.1:{free_port()}", "--token", "t", *argv]) == 2
    assert f"unrecognized arguments: {extra}" in capsys.readouterr().err
