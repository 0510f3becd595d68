"""`submit`'s options against the YAML's own `broker:` section, and `priority=` refused in the API's words.

`/broker submit budget=$1` with `broker: {budget_usd: '2'}` in its YAML submitted at $1, saying nothing of the $2
the YAML asked for: the option still wins, as `broker submit --budget` wins over broker.budget_usd, and the reply
says which of the YAML's settings it overrode; the same value written twice is one value, and overrides nothing. `priority=-1e308` answered "priority: must be a whole number" where the API says
which numbers it takes. Through the real app with signed requests, as ``test_slack.py`` does (its fixtures)."""

from __future__ import annotations

import pytest

from .test_slack import (  # noqa: F401  (fixtures: pytest finds them by name in this module)
    command, slack, slack_app, stub, text_of,
)


def _submit(slack, store, first_line: str, broker_yaml: str, name: str):
    before = len(store.list_jobs())
    reply = command(slack, f"submit {first_line}\nname: {name}\nrun: echo hi\nbroker:\n{broker_yaml}").json()
    return reply, text_of(reply), len(store.list_jobs()) - before


@pytest.mark.parametrize("first_line, broker_yaml, said, expected", [
    ("budget=$1", "  budget_usd: '2'", "budget=$1 overrides the YAML's broker.budget_usd '2'.", {"budget": 1_000_000}),
    ("budget=$4 priority=3", "  priority: 5", "priority=3 overrides the YAML's broker.priority 5.", {"priority": 3}),
    ("budget=$4 deadline=6h", "  deadline: 12h", "deadline=6h overrides the YAML's broker.deadline '12h'.", {}),
    ("budget=$4 expected_hours=2", "  expected_hours: 3",
     "expected_hours=2 overrides the YAML's broker.expected_hours 3.", {}),
    ("budget=$4 max_price=$2", "  max_price_per_hour: 3",
     "max_price=$2 overrides the YAML's broker.max_price_per_hour 3.", {}),
    ("budget=$4 team=team-a", "  team: team-b", "team=team-a overrides the YAML's broker.team 'team-b'.",
     {"team": "team-a"}),
    ("budget=$1 priority=3", "  budget_usd: 2\n  priority: 5",
     "budget=$1 overrides the YAML's broker.budget_usd 2; priority=3 overrides the YAML's broker.priority 5.",
     {"budget": 1_000_000, "priority": 3}),
], ids=["budget", "priority", "deadline", "expected_hours", "max_price", "team", "two at once"])
def test_an_option_overrides_the_yamls_broker_section_and_the_reply_says_so(slack, store, first_line, broker_yaml,
                                                                            said, expected):
    name = f"over-{len(store.list_jobs())}"
    _, text, made = _submit(slack, store, first_line, broker_yaml, name)
    assert made == 1 and "Submitted" in text, text
    assert said in text.splitlines(), text
    job = next(j for j in store.list_jobs() if j.name == name)
    assert {k: getattr(job, k) for k in expected} == expected


@pytest.mark.parametrize("first_line, broker_yaml, expected", [
    ("budget=$2", "  budget_usd: '2'", {"budget": 2_000_000}),
    ("budget=$2", "  budget_usd: 2.00", {"budget": 2_000_000}),
    ("budget=$4 priority=3", "  priority: 3", {"priority": 3}),
    ("budget=$4 deadline=6h", "  deadline: 360min", {}),
    ("budget=$4 team=team-a", "  team: team-a", {"team": "team-a"}),
    ("budget=$4", "  priority: 5", {"budget": 4_000_000, "priority": 5}),  # different settings: merged
], ids=["same budget as text", "same budget as a number", "same priority", "same deadline, other words",
        "same team", "different settings"])
def test_the_same_value_given_twice_or_different_settings_are_submitted(slack, store, first_line, broker_yaml,
                                                                       expected):
    name = f"agree-{len(store.list_jobs())}"
    _, text, made = _submit(slack, store, first_line, broker_yaml, name)
    assert made == 1 and "Submitted" in text, text
    assert "overrides" not in text, text
    job = next(j for j in store.list_jobs() if j.name == name)
    assert {k: getattr(job, k) for k in expected} == expected


@pytest.mark.parametrize("priority", ["-1e308", "1001", "-1001", "99999999999999999999999", "1" * 5000, "high"])
def test_a_priority_out_of_the_apis_range_is_refused_in_the_apis_words(slack, store, priority):
    before = len(store.list_jobs())
    reply = command(slack, f"submit budget=$4 priority={priority}\nname: p\nrun: echo hi").json()
    assert reply["text"] == ":warning: priority: must be a whole number from -1000 to 1000", reply
    assert len(store.list_jobs()) == before


def test_the_priority_range_is_the_apis_own(slack, store):
    """The same words the API answers for broker.priority: one bound, not a second copy of it."""
    from broker.spec import SpecError, _parse_broker

    with pytest.raises(SpecError) as api:
        _parse_broker({"priority": 1001}, now=0)
    reply = command(slack, "submit budget=$4 priority=1001\nname: p\nrun: echo hi").json()
    assert reply["text"] == f":warning: priority: {api.value.reason}"
    for edge in ("-1000", "1000"):
        text = text_of(command(slack, f"submit budget=$4 priority={edge}\nname: edge{edge}\nrun: echo hi").json())
        assert "Submitted" in text, text
