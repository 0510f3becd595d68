"""A "Raise budget" button whose budget is not one the broker writes (above nothing, in micro-dollars) is out of
date: ``"budget": -5`` and ``"budget": true`` (an int to Python) were answered "Nothing changed: ... this button sets
-$0.000005", as if the broker had made the button."""

from __future__ import annotations

import json

import pytest

from broker.lifecycle import JobState

from .test_slack import pressed, slack, slack_app, stub  # noqa: F401  (fixtures: pytest finds them by name)


@pytest.mark.parametrize("budget", [
    pytest.param(-5, id="a negative budget"),
    pytest.param(0, id="a budget of nothing"),
    pytest.param(True, id="true, which Python counts as the int 1"),
    pytest.param(False, id="false, which Python counts as the int 0"),
    pytest.param(3.0, id="a float"),
    pytest.param("3000000", id="a string of digits"),
    pytest.param(None, id="null"),
])
def test_a_raise_budget_button_whose_budget_is_not_a_positive_int_is_out_of_date(slack, store, stub, budget):
    before, events = store.get_job("j-a2"), len(store.events("j-a2"))
    btn = {"action_id": "broker_raise_budget", "value": json.dumps({"job": "j-a2", "budget": budget})}
    reply = pressed(slack, stub, btn, "U_A", "odd")
    assert "That button is out of date." in reply and "Nothing changed" not in reply
    after = store.get_job("j-a2")
    assert (after.budget, after.state, len(store.events("j-a2"))) == (before.budget, JobState.RUNNING, events)


def test_a_raise_budget_button_with_a_positive_budget_still_raises(slack, store, stub):
    btn = {"action_id": "broker_raise_budget", "value": json.dumps({"job": "j-a2", "budget": 3_000_000})}
    assert "Budget raised from $2.00 to $3.00" in pressed(slack, stub, btn, "U_A", "ok")
    assert store.get_job("j-a2").budget == 3_000_000
