"""Reading job specs: any SkyPilot task is accepted; bad fields are named."""

from decimal import Decimal

import pytest

from broker.spec import SpecError, load_text, parse, parse_deadline
from pricing.money import to_micros

NOW = 1_790_000_000.0  # 2026-09-21

SKYPILOT_TASK = """
name: llama-finetune
resources:
  accelerators: A100:8
  use_spot: true
  infra: aws/us-east-1
  disk_size: 256
num_nodes: 2
envs:
  MODEL: llama
setup: pip install -r requirements.txt
run: torchrun train.py
file_mounts:
  /data: s3://bucket/data
workdir: .
"""


def test_a_plain_skypilot_task_without_broker_section_is_accepted_as_is():
    spec = parse(load_text(SKYPILOT_TASK), now=NOW)
    assert spec.task["name"] == "llama-finetune"
    assert spec.task["resources"]["disk_size"] == 256  # kept untouched for the launcher
    alt = spec.request.alternatives[0]
    assert (alt.accelerator, alt.accelerator_count, alt.use_spot, alt.cloud, alt.region) == ("A100", 8, True, "aws", "us-east-1")
    assert spec.request.num_nodes == 2
    assert spec.broker.budget is None


def test_broker_section_is_read_exactly():
    raw = load_text(SKYPILOT_TASK + """
broker:
  team: vision
  budget_usd: 20.10
  deadline: 6h
  priority: 5
  max_price_per_hour: "3.50"
  expected_hours: 2.5
  retry: {max_restarts_on_errors: 2, recover_on_exit_codes: [3, 77]}
""")
    b = parse(raw, now=NOW).broker
    assert b.budget == to_micros("20.10") == 20_100_000
    assert b.deadline == NOW + 6 * 3600
    assert (b.team, b.priority, b.max_price_per_hour) == ("vision", 5, 3_500_000)
    assert b.expected_hours == Decimal("2.5")
    assert b.retry.recover_on_exit_codes == (3, 77)


def test_any_of_expands_to_alternatives():
    raw = {"resources": {"use_spot": True, "any_of": [{"accelerators": "A100:8"}, {"accelerators": {"H100": 8}, "infra": "aws"}]}}
    alts = parse(raw, now=NOW).request.alternatives
    assert [(a.accelerator, a.accelerator_count, a.use_spot, a.cloud) for a in alts] == [
        ("A100", 8, True, None), ("H100", 8, True, "aws")]


@pytest.mark.parametrize(
    "raw, field",
    [
        pytest.param({"broker": {"budget_usd": "lots"}}, "broker.budget_usd", id="a budget that is not money names broker.budget_usd"),
        pytest.param({"broker": {"budget_usd": -5}}, "broker.budget_usd", id="a negative budget is refused"),
        pytest.param({"broker": {"deadline": "yesterday"}}, "broker.deadline", id="an unreadable deadline names broker.deadline"),
        pytest.param({"broker": {"deadline": "2001-01-01T00:00:00Z"}}, "broker.deadline", id="a deadline in the past is refused"),
        pytest.param({"broker": {"budget": 5}}, "broker.budget", id="an unknown broker setting is named"),
        pytest.param({"resources": {"accelerators": "A100:zero"}}, "resources.accelerators", id="an accelerator count that is not a number"),
        pytest.param({"resources": {"accelerators": {"A100": -1}}}, "resources.accelerators.A100", id="a negative accelerator count"),
        pytest.param({"resources": {"cpus": "many"}}, "resources.cpus", id="cpus that are not a number"),
        pytest.param({"resources": {"use_spot": "maybe"}}, "resources.use_spot", id="use_spot that is not a boolean"),
        pytest.param({"resources": {"any_of": []}}, "resources.any_of", id="an empty any_of"),
        pytest.param({"num_nodes": 0}, "num_nodes", id="zero nodes"),
        pytest.param({"run": ["echo"]}, "run", id="a run that is not a script"),
        pytest.param({"envs": {"1BAD": "x"}}, "envs.1BAD", id="an environment variable with a bad name"),
        pytest.param({"name": "has spaces"}, "name", id="a name with spaces"),
        pytest.param({"broker": {"retry": {"max_restarts_on_errors": -1}}}, "broker.retry.max_restarts_on_errors", id="negative restarts"),
    ],
)
def test_bad_fields_are_named(raw, field):
    with pytest.raises(SpecError) as info:
        parse(raw, now=NOW)
    assert info.value.field == field


def test_yaml_syntax_error_says_where():
    with pytest.raises(SpecError) as info:
        load_text("name: x\nresources: [unclosed\n")
    assert info.value.field == "body" and "line" in info.value.reason


@pytest.mark.parametrize(
    "text, seconds",
    [("6h", 6 * 3600), ("1d12h", 36 * 3600), ("90m", 5400), ("PT2H30M", 9000), ("45s", 45)],
    ids=["six hours", "a day and a half", "ninety minutes", "an ISO duration", "seconds"],
)
def test_deadline_durations(text, seconds):
    assert parse_deadline(text, now=NOW) == NOW + seconds


def test_deadline_iso_time():
    from datetime import datetime, timezone

    expected = datetime(2027, 1, 15, 12, tzinfo=timezone.utc).timestamp()
    assert parse_deadline("2027-01-15T12:00:00Z", now=NOW) == expected
