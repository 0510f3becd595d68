"""Reading job specs: any SkyPilot task is accepted; bad fields are named."""

from datetime import date, datetime, timezone
from decimal import Decimal

import pytest

from broker.spec import SpecError, parse, parse_deadline
from broker.task_text import load_text
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
workdir: /home/ml/llama-finetune  # absolute, as `broker submit` and BrokerClient send it
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
    raw = {"run": "python train.py",
           "resources": {"use_spot": True, "any_of": [{"accelerators": "A100:8"}, {"accelerators": {"H100": 8}, "infra": "aws"}]}}
    alts = parse(raw, now=NOW).request.alternatives
    assert [(a.accelerator, a.accelerator_count, a.use_spot, a.cloud) for a in alts] == [
        ("A100", 8, True, None), ("H100", 8, True, "aws")]


@pytest.mark.parametrize("resources", [
    pytest.param({"infra": "k8s/lab-ctx"}, id="infra k8s/<context>, as SkyPilot writes it"),
    pytest.param({"infra": "K8S/lab-ctx"}, id="infra's cloud in any case"),
    pytest.param({"cloud": "k8s", "region": "lab-ctx"}, id="cloud k8s"),
    pytest.param({"infra": "kubernetes/lab-ctx"}, id="infra kubernetes/<context>"),
])
def test_kubernetes_by_either_of_skypilots_names_places_on_the_kubernetes_pool(resources):
    """A Kubernetes pool's offers are in cloud "kubernetes"; ``infra: k8s/<context>`` (SkyPilot's own
    spelling, and the one docs/deploy.md shows) was kept as cloud "k8s" and matched no offer."""
    from broker.config import Pool
    from broker.offers import pool_offers
    from pricing.placement import Placement, place
    pool = Pool(name="lab", slots=2, accelerator="H100", price_per_slot_hour=2_000_000, kubernetes_context="lab-ctx")
    spec = parse({"run": "x", "resources": {"accelerators": "H100:1", **resources}}, now=NOW)
    assert spec.request.alternatives[0].cloud == "kubernetes"
    placed = place(spec.request, pool_offers(pool))
    assert isinstance(placed, Placement) and placed.offer.zone == "lab", placed


def test_a_kubernetes_pool_whose_context_holds_a_slash_is_placed_on_and_launched_there():
    """An EKS context (``arn:aws:eks:...:cluster/name``) was cut at its slash into a region and a zone, and a task
    naming the pool's own context matched no offer."""
    from broker.config import Pool
    from broker.offers import placement_record, pool_offers
    from launchers.skypilot_task import infra
    from pricing.placement import Placement, place
    context = "arn:aws:eks:us-east-1:123456789012:cluster/lab"
    pool = Pool(name="lab", slots=2, accelerator="H100", price_per_slot_hour=2_000_000, kubernetes_context=context)
    spec = parse({"run": "x", "resources": {"accelerators": "H100:1", "infra": f"k8s/{context}"}}, now=NOW)
    placed = place(spec.request, pool_offers(pool))
    assert isinstance(placed, Placement), placed
    assert infra(placement_record(placed.offer, 1)) == f"k8s/{context}"


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
        pytest.param({"broker": {"deadline": "99999999d"}}, "broker.deadline", id="a deadline centuries away is refused"),
        pytest.param({"broker": {"deadline": "P99999999D"}}, "broker.deadline", id="an ISO duration centuries away is refused"),
        pytest.param({"broker": {"deadline": "9" * 400 + "d"}}, "broker.deadline", id="a deadline too large for a float is refused"),
        pytest.param({"broker": {"deadline": "9999-12-31T23:00:00-05:00"}}, "broker.deadline", id="a deadline past the year 9999 is refused"),
        pytest.param({"broker": {"deadline": "1h", "expected_hours": 3}}, "broker.deadline",
                     id="a deadline sooner than the job's own expected length is refused"),
        pytest.param({"resources": {"acelerators": "A100:1"}}, "resources.acelerators", id="a misspelt resources key is named"),
        pytest.param({"resources": {"any_of": [{"acelerators": "A100:1"}]}}, "resources.any_of[0].acelerators",
                     id="a misspelt key inside any_of is named"),
        pytest.param({"setpu": "pip install torch"}, "setpu", id="a misspelt task key is named"),
        pytest.param({"broker": {"budget_usd": "1e300"}}, "broker.budget_usd", id="a budget beyond a billion dollars is refused"),
        pytest.param({"envs": {"MODEL": "llama", "HF_TOKEN": None}}, "envs.HF_TOKEN",
                     id="an env with no value is required, as SkyPilot reads it, and is named"),
        pytest.param({"secrets": {"WANDB_API_KEY": None}}, "secrets.WANDB_API_KEY", id="so is a secret with no value"),
        pytest.param({"secrets": ["HF_TOKEN"]}, "secrets", id="secrets that are not a mapping are refused"),
        pytest.param({"resources": {"accelerators": {"A100": float("inf")}}}, "resources.accelerators.A100",
                     id="an infinite accelerator count is named"),
        pytest.param({"resources": {"accelerators": {"A100": float("nan")}}}, "resources.accelerators.A100",
                     id="a NaN accelerator count is named"),
        pytest.param({"broker": {"expected_hours": "1e400000000"}}, "broker.expected_hours",
                     id="an expected length too large to price is refused"),
        pytest.param({"broker": {"expected_hours": 366 * 24 + 1}}, "broker.expected_hours",
                     id="an expected length over a year is refused"),
        pytest.param({"run": "echo a\x00b"}, "run", id="a run with a NUL character, which no process can take, is refused"),
        pytest.param({"setup": "pip install \ud800"}, "setup", id="a setup with a lone surrogate, not UTF-8, is refused"),
        pytest.param({"envs": {"MODEL": "llama\x00"}}, "envs.MODEL", id="an env value with a NUL character is named"),
        pytest.param({"secrets": {"KEY": "\udc80"}}, "secrets.KEY", id="a secret that is not UTF-8 is named"),
        pytest.param({"broker": {"budget_usd": "1.0000001"}}, "broker.budget_usd",
                     id="a budget finer than a millionth of a dollar is refused, not rounded up past it"),
        pytest.param({"broker": {"budget_usd": 0.1234567}}, "broker.budget_usd",
                     id="so is a JSON number budget with seven decimals"),
        pytest.param({"broker": {"max_price_per_hour": "2.0000005"}}, "broker.max_price_per_hour",
                     id="and a price cap finer than a millionth"),
        pytest.param({"broker": {"deadline": "2026-09-28T18:00"}}, "broker.deadline",
                     id="a deadline without a timezone is refused, not read as UTC"),
        pytest.param({"broker": {"deadline": datetime(2026, 9, 28, 18, 0)}}, "broker.deadline",
                     id="so is a YAML time without a timezone"),
        pytest.param({"broker": {"deadline": date(2026, 9, 28)}}, "broker.deadline",
                     id="and a YAML date, which has neither time nor timezone"),
    ],
)
def test_bad_fields_are_named(raw, field):
    with pytest.raises(SpecError) as info:
        parse({"run": "python train.py", **raw}, now=NOW)
    assert info.value.field == field


@pytest.mark.parametrize("deadline, expected_hours, said", [
    ("30s", "0.01", "is 30 s away, but broker.expected_hours says the job needs 0.01 h (36 s)"),
    ("20m", "0.5", "is 20 min away, but broker.expected_hours says the job needs 0.5 h (30 min)"),
    ("2h", "3", "is 2.0 h away, but broker.expected_hours says the job needs 3 h:"),
], ids=["seconds", "minutes", "hours"])
def test_a_deadline_sooner_than_the_job_says_both_lengths_in_a_unit_that_shows_them(deadline, expected_hours, said):
    """A deadline of 30s with expected_hours 0.01 was refused as "0.0 h away": a newcomer could not see why."""
    with pytest.raises(SpecError) as info:
        parse({"run": "python train.py", "broker": {"deadline": deadline, "expected_hours": expected_hours}}, now=NOW)
    assert said in str(info.value), str(info.value)


def test_a_misspelt_key_gets_the_likely_one_suggested():
    with pytest.raises(SpecError) as info:
        parse({"run": "python train.py", "resources": {"acelerators": "A100:1"}}, now=NOW)
    assert "did you mean 'accelerators'?" in info.value.reason


@pytest.mark.parametrize("broker, field, likely", [
    ({"budget": 5}, "broker.budget", "budget_usd"),
    ({"deadine": "6h"}, "broker.deadine", "deadline"),
    ({"retry": {"max_restarts": 2}}, "broker.retry.max_restarts", "max_restarts_on_errors"),
])
def test_a_misspelt_broker_setting_gets_the_likely_one_suggested(broker, field, likely):
    with pytest.raises(SpecError) as info:
        parse({"run": "python train.py", "broker": broker}, now=NOW)
    assert info.value.field == field and f"did you mean '{likely}'?" in info.value.reason


@pytest.mark.parametrize("task", [
    pytest.param({"resources": {"cpus": 1}}, id="a task with nothing to run"),
    pytest.param({"run": "   ", "setup": None}, id="a run that is only blanks"),
])
def test_a_task_with_nothing_to_run_is_refused_at_submit(task):
    with pytest.raises(SpecError) as info:
        parse(task, now=NOW)
    assert info.value.field == "run" and "required" in info.value.reason


def test_a_setup_only_task_is_accepted_as_skypilot_accepts_it():
    assert parse({"setup": "pip install -r requirements.txt"}, now=NOW).task["setup"]


def test_a_deadline_just_inside_the_limit_is_accepted():
    from broker.spec import MAX_DEADLINE_DAYS

    assert parse_deadline(f"{MAX_DEADLINE_DAYS}d", now=NOW) == NOW + MAX_DEADLINE_DAYS * 86400


@pytest.mark.parametrize("text, seconds", [
    pytest.param("45min", 45 * 60, id="45min is 45 minutes (refused once, though 90m was accepted)"),
    pytest.param("90m", 90 * 60, id="90m is 90 minutes"),
    pytest.param("30 sec", 30, id="30 sec is half a minute"),
    pytest.param("10s", 10, id="10s is ten seconds"),
    pytest.param("2hr", 2 * 3600, id="2hr is two hours"),
    pytest.param("3 hours", 3 * 3600, id="3 hours, with a space, is three hours"),
    pytest.param("1 hour 30 mins", 5400, id="1 hour 30 mins is an hour and a half"),
    pytest.param("2 days", 2 * 86400, id="2 days is two days"),
    pytest.param("1d12h", 36 * 3600, id="1d12h is a day and a half"),
    pytest.param("1.5H", 5400, id="units are read in any case"),
    pytest.param("PT6H", 6 * 3600, id="an ISO 8601 duration still reads"),
])
def test_a_deadline_reads_each_common_spelling_of_a_unit(text, seconds):
    assert parse_deadline(text, now=NOW) == NOW + seconds


@pytest.mark.parametrize("text", ["45 minz", "1ms", "5 mn", "1dh", "min"])
def test_a_unit_it_does_not_know_is_refused_naming_the_spellings_it_does(text):
    with pytest.raises(SpecError) as info:
        parse_deadline(text, now=NOW, where="broker.deadline")
    assert info.value.field == "broker.deadline" and "45min" in info.value.reason


def test_the_known_keys_are_installed_skypilots(tmp_path):
    """The spec refuses keys outside SkyPilot's schema; the lists must be SkyPilot's own. Read in a
    child process: ``sky`` fixes its paths from ``HOME`` at import, which must not leak into this one."""
    import json
    import os
    import subprocess
    import sys

    from broker.spec import RESOURCE_KEYS, TASK_KEYS

    code = ("import json; from sky.utils import schemas; print(json.dumps([sorted(schemas.get_task_schema()['properties']), "
            "sorted(schemas.get_resources_schema()['properties'])]))")
    env = {**os.environ, "HOME": str(tmp_path), "SKY_RUNTIME_DIR": str(tmp_path), "SKYPILOT_DISABLE_USAGE_COLLECTION": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=True)
    task, resources = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(task) == TASK_KEYS
    assert set(resources) == RESOURCE_KEYS


def test_ordered_resources_keep_the_users_order_of_preference_and_any_of_does_not():
    ordered = parse({"run": "x", "resources": {"ordered": [{"accelerators": "H100:8"}, {"accelerators": "A100:8"}]},
                     "broker": {"budget_usd": 5}}, now=NOW)
    assert ordered.request.ordered and [a.accelerator for a in ordered.request.alternatives] == ["H100", "A100"]
    any_of = parse({"run": "x", "resources": {"any_of": [{"accelerators": "H100:8"}, {"accelerators": "A100:8"}]},
                    "broker": {"budget_usd": 5}}, now=NOW)
    assert not any_of.request.ordered


def test_skypilots_job_recovery_retry_settings_are_the_retry_policy_unless_broker_retry_gives_one():
    task = {"run": "x", "resources": {"job_recovery": {"strategy": "FAILOVER", "max_restarts_on_errors": 3,
                                                       "recover_on_exit_codes": [33]}}}
    retry = parse({**task, "broker": {"budget_usd": 5}}, now=NOW).broker.retry
    assert (retry.max_restarts_on_errors, retry.recover_on_exit_codes) == (3, (33,))
    own = parse({**task, "broker": {"budget_usd": 5, "retry": {"max_restarts_on_errors": 1}}}, now=NOW).broker.retry
    assert (own.max_restarts_on_errors, own.recover_on_exit_codes) == (1, ())
    with pytest.raises(SpecError) as bad:
        parse({"run": "x", "resources": {"job_recovery": {"max_restarts_on_errors": -1}}}, now=NOW)
    assert bad.value.field == "resources.job_recovery.max_restarts_on_errors"


@pytest.mark.parametrize("recovery, field, says", [
    pytest.param({"max_restart_on_errors": 3}, "resources.job_recovery.max_restart_on_errors",
                 "did you mean 'max_restarts_on_errors'", id="a misspelt retry setting is named with the likely one"),
    pytest.param({"strategy": "EAGR"}, "resources.job_recovery.strategy", "give FAILOVER or EAGER_NEXT_REGION",
                 id="a misspelt strategy names the strategies"),
    pytest.param("EAGER", "resources.job_recovery", "'EAGER' is not a recovery strategy",
                 id="a strategy given alone is checked too"),
    pytest.param(5, "resources.job_recovery", "must be a strategy's name", id="a number is neither form"),
    pytest.param({"strategy": 1}, "resources.job_recovery.strategy", "is not a recovery strategy",
                 id="a strategy that is no name"),
])
def test_a_job_recovery_skypilot_would_refuse_is_refused_at_submit_under_any_launcher(recovery, field, says):
    """Under the local launcher no SkyPilot check runs: `max_restart_on_errors: 3` was accepted, and its retries never
    happened."""
    with pytest.raises(SpecError) as bad:
        parse({"run": "x", "resources": {"job_recovery": recovery}}, now=NOW)
    assert bad.value.field == field and says in bad.value.reason, bad.value
    parse({"run": "x", "resources": {"job_recovery": recovery}}, now=NOW, strict=False)  # a stored job still reads


@pytest.mark.parametrize("recovery", ["FAILOVER", "eager_next_region", {"strategy": None}, {"strategy": "failover"}],
                         ids=str)
def test_skypilots_recovery_strategies_are_taken_in_any_case(recovery):
    assert parse({"run": "x", "resources": {"job_recovery": recovery}}, now=NOW).broker.retry.max_restarts_on_errors == 0


def test_a_stored_job_whose_job_recovery_the_retry_check_refuses_is_still_read_by_the_engine():
    """resources.job_recovery was passed through unchecked before it became the retry policy: a job
    accepted then with values that check refuses must still re-read (strict=False) — the engine's
    schedule() and GET /v1/jobs' queue estimates parse every queued job, so one such job raised there
    on every tick and request. The stored job keeps the retry policy it was admitted with."""
    for recovery in ({"max_restarts_on_errors": 200}, {"recover_on_exit_codes": ["137"]}):
        spec = parse({"run": "x", "resources": {"job_recovery": recovery}}, now=NOW, strict=False)
        assert spec.broker.retry.max_restarts_on_errors == 0
        with pytest.raises(SpecError):
            parse({"run": "x", "resources": {"job_recovery": recovery}}, now=NOW)


@pytest.mark.parametrize("deadline, said", [
    pytest.param("2025-09-21T10:00Z", "2025-09-21T10:00Z", id="a deadline a year back names itself"),
    pytest.param("2026-09-21T16:00+09:00", "2026-09-21T07:00Z", id="a deadline whose offset puts it back says it in UTC"),
    # year 0 in UTC, which Python's datetime has not: saying when it was raised, and the submit was a 500
    pytest.param("0001-01-01T00:00+01:00", "before 0001-01-01T00:00Z", id="a deadline before year 1 in UTC says so"),
])
def test_a_deadline_in_the_past_says_when_it_is_and_when_now_is(deadline, said):
    """A new user's past deadline (a slip of the year or the timezone) was refused only as 'is in the past'."""
    with pytest.raises(SpecError) as info:
        parse({"run": "x", "broker": {"deadline": deadline}}, now=NOW)
    assert info.value.reason == (f"is in the past: {said}, and it is 2026-09-21T14:13Z now; give a later time with "
                                 "its timezone, or a duration from now such as 6h")


@pytest.mark.parametrize("deadline", ["0h", "0d0h0m", "PT0S"])
def test_a_deadline_of_no_time_from_now_asks_for_one_after_now(deadline):
    """`--deadline 0h` was refused as "in the past: 14:13Z, and it is 14:13Z now", a contradiction on its face."""
    with pytest.raises(SpecError) as info:
        parse({"run": "x", "broker": {"deadline": deadline}}, now=NOW)
    assert (info.value.field, info.value.reason) == (
        "broker.deadline", f"{deadline} from now is now: give a deadline after now, such as 6h")


@pytest.mark.parametrize("deadline, said", [
    pytest.param("6", "6 has no unit: write 6h for hours from now (or d, m, s), or an ISO time with its timezone",
                 id="--deadline 6 is asked for its unit"),
    pytest.param(6, "6 has no unit: write 6h for hours from now (or d, m, s), or an ISO time with its timezone",
                 id="a YAML deadline: 6 too"),
    pytest.param(3600, "3600 has no unit: 3600h is 150 days, 3600m is 2.5 days, 3600s is 1 h from now; write the one "
                       "meant, or an ISO time with its timezone",
                 id="a number too large to be likely hours is given each reading, not only hours (150 days)"),
    pytest.param("1733500000", "1733500000 has no unit, and looks like a Unix time: a deadline is an ISO time with its "
                               "timezone (2026-12-01T18:00Z; `date -u -d @SECONDS +%FT%TZ` writes one) or a duration "
                               "from now (6h, 90m)",
                 id="a Unix time is said to be one, not sent to write 1733500000h"),
    pytest.param("2026-09-28", "is a date (2026-09-28); give the time and its timezone too, such as 2026-09-28T18:00:00Z",
                 id="a date sent as text is told as a YAML date is, not 'has no timezone' at midnight"),
])
def test_a_deadline_without_its_unit_or_its_time_says_what_to_add(deadline, said):
    """`--deadline 6` was told "must be an ISO time (...) or a duration (6h, ...)", and a date the CLI sends as text
    was read as midnight UTC without a timezone."""
    with pytest.raises(SpecError) as info:
        parse({"run": "x", "broker": {"deadline": deadline}}, now=NOW)
    assert (info.value.field, info.value.reason) == ("broker.deadline", said)


def test_a_timezone_less_deadline_says_how_to_write_it():
    with pytest.raises(SpecError) as info:
        parse({"run": "python train.py", "broker": {"deadline": "2026-09-28T18:00"}}, now=NOW)
    assert info.value.reason == ("has no timezone: write 2026-09-28T18:00Z for UTC, its offset such as "
                                 "2026-09-28T18:00+01:00, or its time zone's name such as '2026-09-28T18:00 Europe/Berlin'")


@pytest.mark.parametrize("deadline, utc", [
    pytest.param("2026-09-28T18:00 Europe/Berlin", "2026-09-28T16:00Z", id="Berlin in summer time is UTC+2"),
    pytest.param("2026-11-28 18:00 Europe/Berlin", "2026-11-28T17:00Z", id="and UTC+1 in winter, a space as well"),
    pytest.param("2026-09-28T18:00 America/New_York", "2026-09-28T22:00Z", id="New York in summer time"),
    pytest.param("2026-09-28T18:00 UTC", "2026-09-28T18:00Z", id="UTC by name"),
])
def test_a_deadline_in_a_named_time_zone_is_read_on_that_zones_clock(deadline, utc):
    """"2026-09-28T18:00 Europe/Berlin" was refused with the generic message: a user had to work out the offset,
    and the summer-time one at that."""
    job = parse({"run": "x", "broker": {"deadline": deadline}}, now=NOW)
    assert datetime.fromtimestamp(job.broker.deadline, timezone.utc).strftime("%Y-%m-%dT%H:%MZ") == utc


@pytest.mark.parametrize("deadline, said", [
    pytest.param("2026-09-28T18:00 Mars/Olympus", "names the time zone 'Mars/Olympus', which the broker does not know",
                 id="an unknown zone is named"),
    pytest.param("2026-09-28T18:00+01:00 Europe/Berlin", "gives both an offset and a time zone",
                 id="an offset and a zone: which one is meant cannot be told"),
    pytest.param("tomorrow Europe/Berlin", "must be an ISO time before its time zone", id="a zone after no time"),
])
def test_a_named_zone_deadline_that_cannot_be_read_says_why(deadline, said):
    with pytest.raises(SpecError) as info:
        parse({"run": "x", "broker": {"deadline": deadline}}, now=NOW)
    assert info.value.field == "broker.deadline" and info.value.reason.startswith(said), info.value.reason


@pytest.mark.parametrize("deadline, epoch", [
    pytest.param("2026-09-28T18:00Z", 1790618400.0, id="an ISO time in UTC"),
    pytest.param("2026-09-28T18:00+02:00", 1790618400.0 - 7200, id="an ISO time with its offset"),
    pytest.param(datetime.fromisoformat("2026-09-28T18:00:00+00:00"), 1790618400.0, id="a YAML time with its timezone"),
])
def test_a_deadline_with_its_timezone_is_read_exactly(deadline, epoch):
    assert parse({"run": "x", "broker": {"deadline": deadline}}, now=NOW).broker.deadline == epoch


def test_a_stored_spec_is_reread_as_it_was_admitted():
    # the engine re-reads stored specs leniently: one admitted before these checks keeps its meaning
    spec = parse({"run": "x", "broker": {"deadline": "2026-09-28T18:00", "budget_usd": "1.0000001"}}, now=NOW,
                 strict=False)
    assert spec.broker.deadline == 1790618400.0 and spec.broker.budget == 1_000_001


def test_a_budget_to_the_millionth_is_kept_exactly():
    assert parse({"run": "x", "broker": {"budget_usd": "1.000001"}}, now=NOW).broker.budget == 1_000_001


def test_a_broker_setting_a_newer_version_added_is_refused_at_submit_but_a_stored_spec_holding_it_still_reads():
    task = {"run": "x", "broker": {"budget_usd": 5, "preemption_budget": 3}}
    with pytest.raises(SpecError) as refused:
        parse(task, now=NOW)
    assert refused.value.field == "broker.preemption_budget"
    spec = parse(task, now=NOW, strict=False)  # the engine's re-read of a job a newer broker accepted
    assert spec.broker.budget == to_micros(5)


@pytest.mark.parametrize("raw, field", [
    ({"run": "x", "broker": {"file_mounts": {"/data/a'$(touch pwned)": "sha256:" + "ab" * 32}}},
     "broker.file_mounts./data/a'$(touch pwned)"),
    ({"run": "x", "file_mounts": {"/data/a'$(touch pwned)": "/etc/hostname"}}, "file_mounts./data/a'$(touch pwned)"),
    ({"run": "x", "file_mounts": {"/data/a\\b": "s3://bucket/a"}}, "file_mounts./data/a\\b"),
    ({"run": "x", "file_mounts": {"/data/a'\"$(touch pwned)\"": "/etc/hostname"}}, "file_mounts./data/a'\"$(touch pwned)\""),
    ({"run": "x", "file_mounts": {"/data/a'`touch pwned`": "/etc/hostname"}}, "file_mounts./data/a'`touch pwned`"),
    ({"run": "x", "file_mounts": {"/data/a\nb": "s3://bucket/a"}}, "file_mounts./data/a\nb"),
    ({"run": "x", "file_mounts": {"/data/a": "/tmp/x'$(touch pwned)"}}, "file_mounts./data/a"),
    ({"run": "x", "workdir": "/tmp/x'$(touch pwned)"}, "workdir"),
], ids=["uploaded", "a path of the broker's host", "a backslash", "both quotes", "backquotes", "a newline", "a source", "a workdir"])
def test_a_path_skypilot_rsyncs_that_a_shell_would_not_read_as_written_is_refused_at_submit(raw, field):
    """SkyPilot rsyncs a local source (or a workdir) to its destination through a shell, quoting each path with
    Python's repr: one holding a quote is put in double quotes, where ``$(...)`` runs on the broker's host."""
    with pytest.raises(SpecError) as refused:
        parse(raw, now=NOW)
    assert refused.value.field == field and "cannot be handed to a shell" in refused.value.reason, refused.value
    parse(raw, now=NOW, strict=False)  # a job stored before the check is still read by the engine


def test_a_path_with_spaces_and_dollars_or_a_quote_alone_reads_as_written_and_is_accepted():
    spec = parse({"run": "x", "workdir": "/home/o'brien/proj", "file_mounts": {"/data/my $HOME (1)": "s3://bucket/a"},
                  "broker": {"file_mounts": {"~/o'brien's data": "sha256:" + "ab" * 32}}}, now=NOW)
    assert spec.broker.file_mounts == {"~/o'brien's data": "sha256:" + "ab" * 32}


def test_a_run_line_holding_colon_space_is_refused_saying_where_what_and_how_to_write_it():
    """`run: echo "NCCL error: x"; exit 1` — YAML reads the ': ' as a key. The API said only "is not valid YAML at
    line 2, column 22", the CLI what broke but not how a first task is written instead."""
    with pytest.raises(SpecError) as caught:
        load_text('name: x\nrun: echo "NCCL error: x"; exit 1\n')
    assert caught.value.field == "body"
    assert caught.value.reason.startswith("is not valid YAML at line 2, column 22: mapping values are not allowed")
    assert "`run: |`" in caught.value.reason
    with pytest.raises(SpecError) as caught:  # another mistake says what broke, and no hint that is not its own
        load_text("run: x\nresources: {cpus: 1+\n")
    assert "line 3" in caught.value.reason and "run: |" not in caught.value.reason


def _alternatives(spec):
    return [(a.cloud, a.region, a.zone, a.accelerator, a.accelerator_count, a.memory_gib)
            for a in spec.request.alternatives]


@pytest.mark.parametrize("resources, alternatives", [
    pytest.param("{memory: 64GB}", [(None, None, None, None, 0, Decimal(64))],
                 id="memory: 64GB, with its unit as SkyPilot's docs write it, is 64 GB"),
    pytest.param("{memory: 1024MB}", [(None, None, None, None, 0, Decimal(1))], id="memory: 1024MB is 1 GB"),
    pytest.param("{memory: 32GB+}", [(None, None, None, None, 0, Decimal(32))], id="memory: 32GB+ is at least 32 GB"),
    pytest.param("{memory: 2Ti}", [(None, None, None, None, 0, Decimal(2048))], id="memory: 2Ti is 2048 GB"),
    pytest.param("{accelerators: {A10G:1, T4:1}}",
                 [(None, None, None, "A10G", 1, None), (None, None, None, "T4", 1, None)],
                 id="accelerators: {A10G:1, T4:1}, SkyPilot's set of alternatives, is one A10G or one T4"),
    pytest.param("{accelerators: {'A100:8': null}}", [(None, None, None, "A100", 8, None)],
                 id="an accelerator named with its count and no value is that many"),
    pytest.param("{accelerators: {A100: null}}", [(None, None, None, "A100", 1, None)],
                 id="an accelerator with no count is one"),
    pytest.param("{infra: 'aws/*/us-east-1a'}", [("aws", None, "us-east-1a", None, 0, None)],
                 id="infra's * in the region is any region"),
    pytest.param("{infra: '*/us-east-1'}", [(None, "us-east-1", None, None, 0, None)],
                 id="infra's * as the cloud is any cloud"),
    pytest.param("{infra: 'k8s/arn:aws:eks:us-east-1:123456789012:cluster/my-cluster'}",
                 [("kubernetes", "arn:aws:eks:us-east-1:123456789012:cluster/my-cluster", None, None, 0, None)],
                 id="a Kubernetes context holding a slash, as an EKS one does, is the context whole"),
    pytest.param("{infra: aws, image_id: {us-east-1: ami-0729d913a335efca7, us-west-2: ami-050814f384259894c}}",
                 [("aws", "us-east-1", None, None, 0, None), ("aws", "us-west-2", None, None, 0, None)],
                 id="an image per region limits the job to those regions, as SkyPilot's failover"),
])
def test_skypilots_resource_forms_are_read_as_skypilot_reads_them(resources, alternatives):
    """Each of these was refused (a memory unit), placed on nothing or on the wrong thing (an accelerator named
    ``A10G:1``, a region ``*``, a context cut at its slash), or placed where the launch then failed (a region
    with no image), though SkyPilot takes each as it is."""
    spec = parse(load_text(f"run: x\nresources: {resources}\n"), now=NOW)
    assert _alternatives(spec) == alternatives


@pytest.mark.parametrize("resources, sizes", [
    pytest.param("{cpus: 16}", [(Decimal(16), True, None, False)], id="cpus: 16 is exactly 16 vCPUs, as SkyPilot reads it"),
    pytest.param("{cpus: 16+}", [(Decimal(16), False, None, False)], id="cpus: 16+ is at least 16"),
    pytest.param("{cpus: '16'}", [(Decimal(16), True, None, False)], id="cpus written as the text 16 is exact too"),
    pytest.param("{cpus: 0.5}", [(Decimal("0.5"), True, None, False)], id="a fractional cpus is exact"),
    pytest.param("{memory: 64}", [(None, False, Decimal(64), True)], id="memory: 64 is exactly 64 GB"),
    pytest.param("{memory: 64GB}", [(None, False, Decimal(64), True)], id="memory: 64GB with its unit is exact"),
    pytest.param("{memory: 65536MB}", [(None, False, Decimal(64), True)], id="memory: 65536MB is exactly 64 GB"),
    pytest.param("{memory: 32GB+}", [(None, False, Decimal(32), False)], id="memory: 32GB+ is at least 32 GB"),
    pytest.param("{memory: 7.5}", [(None, False, Decimal("7.5"), True)], id="a fractional memory is exact"),
    pytest.param("{cpus: 8+, memory: 64}", [(Decimal(8), False, Decimal(64), True)],
                 id="each size is exact or at least on its own"),
    pytest.param("{cpus: 8, any_of: [{memory: 32}, {cpus: 16+}]}",
                 [(Decimal(8), True, Decimal(32), True), (Decimal(16), False, None, False)],
                 id="an any_of entry takes the base size, or its own with its own '+'"),
    pytest.param("{accelerators: A100:1}", [(None, False, None, False)], id="no size asked is neither"),
])
def test_a_size_without_plus_is_exact_as_skypilot_reads_it(resources, sizes):
    """SkyPilot filters its catalog with ``vCPUs == 16`` for ``cpus: 16`` and ``>= 16`` for ``cpus: 16+`` (and
    ``memory`` alike, after its unit: ``sky/catalog/common.py``); placement needs to know which was written."""
    spec = parse(load_text(f"run: x\nresources: {resources}\n"), now=NOW)
    assert [(a.cpus, a.cpus_exact, a.memory_gib, a.memory_exact) for a in spec.request.alternatives] == sizes


@pytest.mark.parametrize("resources, ordered", [
    pytest.param({"accelerators": ["A10G:1", "T4:1"]}, True,
                 id="a list of accelerators is SkyPilot's order of preference"),
    pytest.param({"accelerators": {"A10G": 1, "T4": 1}}, False, id="a mapping of them is not"),
    pytest.param({"any_of": [{"accelerators": "A10G:1"}, {"accelerators": "T4:1"}]}, False, id="nor is any_of"),
])
def test_a_list_of_accelerators_is_tried_in_its_order(resources, ordered):
    """SkyPilot tries ``accelerators: [A10G:1, T4:1]`` in the listed order; the broker took the cheapest (T4)."""
    spec = parse({"run": "x", "resources": resources}, now=NOW)
    assert spec.request.ordered is ordered
    assert [a.accelerator for a in spec.request.alternatives] == ["A10G", "T4"]


@pytest.mark.parametrize("resources, field, says", [
    pytest.param({"memory": "lots"}, "resources.memory", "64GB", id="memory that is no size says how to write one"),
    pytest.param({"memory": "64XB"}, "resources.memory", "64GB", id="so does memory in a unit SkyPilot does not know"),
    pytest.param({"infra": "aws/us-east-2", "image_id": {"us-west-2": "ami-050814f384259894c"}}, "resources.image_id",
                 "us-east-2", id="an image per region with none for the region asked is refused, naming it"),
    pytest.param({"image_id": "ami-0729d913a335efca7"}, "resources.image_id", "infra",
                 id="a cloud's image with no cloud is refused, as SkyPilot refuses it"),
    pytest.param({"image_id": {"us-east-1": "ami-0729d913a335efca7"}}, "resources.image_id", "infra",
                 id="so is an image per region with no cloud"),
    pytest.param({"infra": "aws", "image_id": "ami-0729d913a335efca7"}, "resources.image_id", "region",
                 id="an AWS image with no region is refused, as SkyPilot refuses it"),
    pytest.param({"accelerators": "A100:1e400"}, "resources.accelerators", "at most 1024",
                 id="a count of 401 digits is refused in a short sentence, not written out in a later one"),
    pytest.param({"accelerators": {"A100": 4096}}, "resources.accelerators.A100", "at most 1024",
                 id="a mapping's count beyond any node is refused naming its accelerator"),
])
def test_resources_skypilot_refuses_or_cannot_read_are_refused_naming_the_field(resources, field, says):
    with pytest.raises(SpecError) as info:
        parse({"run": "x", "resources": resources}, now=NOW)
    assert info.value.field == field and says in info.value.reason, info.value


@pytest.mark.parametrize("resources", [
    pytest.param({"image_id": "docker:nvcr.io/nvidia/pytorch:24.01-py3"}, id="a docker image runs anywhere"),
    pytest.param({"infra": "aws/us-east-1", "image_id": "ami-0729d913a335efca7"}, id="an AWS image in its region"),
    pytest.param({"infra": "aws", "image_id": "skypilot:gpu-ubuntu-2204"}, id="a SkyPilot image tag in any region"),
    pytest.param({"infra": "gcp", "image_id": "projects/deeplearning-platform-release/global/images/x"},
                 id="a GCP image, which is global"),
])
def test_images_skypilot_takes_are_accepted(resources):
    assert parse({"run": "x", "resources": resources}, now=NOW).request.alternatives


def test_a_stored_job_whose_image_the_submit_check_refuses_is_still_read_by_the_engine():
    for resources in ({"image_id": "ami-0729d913a335efca7"},
                      {"infra": "aws/us-east-2", "image_id": {"us-west-2": "x"}}):
        assert parse({"run": "x", "resources": resources}, now=NOW, strict=False).request.alternatives


@pytest.mark.parametrize("envs, field, reason", [
    ({"": "5"}, "envs", "has a name '', which is not a valid environment variable name (letters, digits and _, not "
                        "starting with a digit)"),
    ({"1X": "5"}, "envs.1X", "is not a valid environment variable name (letters, digits and _, not starting with a "
                             "digit)"),
    ({"A-B": "5"}, "envs.A-B", "is not a valid environment variable name (letters, digits and _, not starting with a "
                               "digit)"),
], ids=["an empty name (broker submit --env =5) is named as such, not as 'envs.'",
        "a name starting with a digit is named with the rule", "a dash in a name is named with the rule"])
def test_a_bad_environment_variable_name_is_refused_saying_the_rule(envs, field, reason):
    with pytest.raises(SpecError) as err:
        parse({"run": "echo", "envs": envs}, now=NOW)
    assert (err.value.field, err.value.reason) == (field, reason)


@pytest.mark.parametrize("raw, field", [
    ({"name": "evil\n", "run": "x"}, "name"),
    ({"name": "ok", "run": "x", "broker": {"team": "vision\n"}}, "broker.team"),
], ids=["a name ending in a newline", "a team ending in a newline"])
def test_a_name_that_ends_in_a_newline_is_refused_but_a_stored_one_is_still_read(raw, field):
    """``$`` matches before a last newline: ``name: "evil\\n"`` was taken, and shown as ``evil`` in a table. A job
    stored before is read as it was taken (``strict=False``), never stranded."""
    with pytest.raises(SpecError) as refused:
        parse(raw, now=0.0)
    assert refused.value.field == field
    parse(raw, now=0.0, strict=False)
