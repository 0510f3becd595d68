"""QA walkthrough, 7 Dec: `POST /v1/jobs/J/budget` with `{"budget_usd": 1e400}` answered "budget_usd: is inf, not a
finite number": Python reads a number too large for a float as infinity, and the refusal named a value nobody typed.
The README says such a value is "refused naming the value": it is now named as typed and said to be too large, in
JSON (the API's bodies), YAML (the API's, `broker submit`'s task file, Slack's submit) and every field."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from broker.task_text import load_json, load_text
from broker.spec import SpecError

from . import world
from .conftest import auth
from .test_slack import command, slack, slack_app, stub, text_of  # noqa: F401  (fixtures)

HUGE = "1" + "0" * 400 + ".0"  # no exponent, and still past a float


def _refused(r, field: str, *says: str) -> None:
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["field"] == field and all(s in body["detail"] for s in says), body
    assert "inf" not in body["detail"].replace("infinity", ""), body


def test_a_budget_raised_to_1e400_is_named_as_typed_and_too_large(client):
    r = client.post("/v1/jobs/j-a2/budget", content='{"budget_usd": 1e400}',
                    headers={**auth(world.TOKENS["team-a"]), "Content-Type": "application/json"})
    _refused(r, "budget_usd", "is 1e400, too large", "give at most $1,000,000,000")


@pytest.mark.parametrize(("broker", "field", "says"), [
    ('{"budget_usd": 1e400}', "broker.budget_usd", "is 1e400, too large: give at most $1,000,000,000"),
    ('{"budget_usd": "5", "max_price_per_hour": -1E+999}', "broker.max_price_per_hour", "is -1E+999, too large"),
    ('{"budget_usd": "5", "expected_hours": 1e400}', "broker.expected_hours",
     "is 1e400, too large to be a number (it reads as infinity)"),
    (f'{{"budget_usd": "5", "expected_hours": {HUGE}}}', "broker.expected_hours", "(403 characters), too large"),
])
def test_a_json_submit_names_a_number_too_large_as_typed(client, broker, field, says):
    body = f'{{"run": "echo hi", "broker": {broker}}}'
    r = client.post("/v1/jobs", content=body, headers={**auth(world.TOKENS["team-a"]),
                                                          "Content-Type": "application/json"})
    _refused(r, field, says)


@pytest.mark.parametrize(("line", "field", "says"), [
    ("expected_hours: 1.0e+400", "broker.expected_hours", "is 1.0e+400 (line 3), too large to be a number"),
    (f"max_price_per_hour: {HUGE}", "broker.max_price_per_hour", "(line 3), too large: give at most $1,000,000,000"),
])
def test_a_yaml_submit_names_a_number_too_large_as_typed_with_its_line(client, line, field, says):
    body = f"run: echo hi\nbroker:\n  {line}\n  budget_usd: '5'\n"
    r = client.post("/v1/jobs", content=body, headers={**auth(world.TOKENS["team-a"]),
                                                          "Content-Type": "application/yaml"})
    _refused(r, field, says)


def test_what_the_user_typed_as_inf_or_nan_is_still_said_so():
    for text in ('{"x": Infinity}', '{"x": NaN}'):
        with pytest.raises(SpecError, match=r"x: is (inf|nan), not a finite number"):
            load_json(text)
    with pytest.raises(SpecError, match=r"x: is inf, not a finite number"):
        load_text("x: .inf\n")
    assert load_json('{"x": 1e300}') == {"x": 1e300} and load_text("x: 1.5e+3\n") == {"x": 1500.0}


def test_slacks_submit_names_a_number_too_large_as_typed(slack):
    said = text_of(command(slack, "submit budget=$5\nrun: echo hi\nbroker:\n  expected_hours: 1.0e+400").json())
    assert "broker.expected_hours: is 1.0e+400 (line 3), too large to be a number" in said, said
    assert "is inf" not in said, said


def test_the_clis_submit_names_a_number_too_large_as_typed_before_it_sends_anything(tmp_path):
    task = tmp_path / "t.yaml"
    task.write_text("run: echo hi\nbroker:\n  expected_hours: 1.0e+400\n")
    # no broker listens there (ports 18400-18499 are this suite's): the file is refused before any request
    r = subprocess.run([sys.executable, "-m", "broker.cli", "--url", "http://127.0.0.1:18499", "submit", str(task)],
                       env={"BROKER_TOKEN": "t", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "broker.expected_hours: is 1.0e+400 (line 3), too large" in r.stderr, r.stderr
    assert json.dumps(r.stderr).count("is inf") == 0
