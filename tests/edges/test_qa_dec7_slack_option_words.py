"""QA walkthrough, 7 Dec: docs/slack.md says a refusal names the command's own word (`budget: …`, not `budget_usd`),
and `budget=` did, but `/broker submit deadline=yesterday` was answered "broker.deadline: must be an ISO time …" and
`team=nlp` "broker.team: you can submit only for your team (vision)". Every setting a submit option gives is now named
by the option's word, in the field and in the sentence; a setting the YAML's own `broker:` gives keeps its field."""

from __future__ import annotations

import pytest

from .test_slack import command, slack, slack_app, stub, text_of  # noqa: F401  (fixtures)

TASK = "\nname: qa\nrun: echo hi"


@pytest.mark.parametrize(("options", "user", "starts", "says"), [
    ("deadline=yesterday", "U_A", "deadline: ", "must be an ISO time"),
    ("deadline=2020-01-01T00:00Z", "U_A", "deadline: ", "is in the past"),
    ('deadline="2026-12-07 09:00 Mars/Base"', "U_A", "deadline: ", "names the time zone 'Mars/Base'"),
    ("team=team-b", "U_A", "team: ", "you can submit only for your team (team-a)"),
    ("team=nope", "U_ADMIN", "team: ", "there is no team 'nope'"),
    ("team=a/b", "U_A", "team: ", "must be a team name"),
    ("expected_hours=0", "U_A", "expected_hours: ", "must be a positive number of hours"),
    ("expected_hours=1:30", "U_A", "expected_hours: ", ""),
    ("max_price=$0", "U_A", "max_price: ", "must be more than $0"),
    ("max_price=lots", "U_A", "max_price: ", ""),
    ("priority=5000", "U_A", "priority: ", "from -1000 to 1000"),
    ("deadline=1h expected_hours=6", "U_A", "deadline: ", "but expected_hours says the job needs 6 h"),
])
def test_a_refused_option_is_named_by_its_own_word(slack, options, user, starts, says):
    said = text_of(command(slack, f"submit budget=$50 {options}{TASK}", user=user).json())
    assert said.startswith(f":warning: {starts}") and says in said, said
    assert "broker." not in said and "max_price_per_hour" not in said, said


@pytest.mark.parametrize(("section", "starts"), [
    ("  deadline: yesterday", "broker.deadline: "),
    ("  team: team-b", "broker.team: "),
    ("  expected_hours: 0", "broker.expected_hours: "),
    ("  max_price_per_hour: 0", "broker.max_price_per_hour: "),
])
def test_a_setting_the_yamls_own_broker_section_gives_keeps_its_fields_name(slack, section, starts):
    said = text_of(command(slack, f"submit budget=$50{TASK}\nbroker:\n{section}").json())
    assert said.startswith(f":warning: {starts}"), said


def test_an_option_refused_against_the_yamls_setting_names_each_where_it_came_from(slack):
    """`expected_hours=6` beside the YAML's `deadline: 1h`: the deadline is the YAML's, the length the option's."""
    said = text_of(command(slack, f"submit budget=$50 expected_hours=6{TASK}\nbroker:\n  deadline: 1h").json())
    assert said.startswith(":warning: broker.deadline: ") and "but expected_hours says" in said, said
