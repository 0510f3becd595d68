"""QA, Dec 8: "the budget pays for about X" is the time until the engine's budget stop.

A job priced per hour was told its budget over the price ("the budget pays for about 40 s … a clean stop at its end
included") while the engine stops it once what is left pays only for the clean stop — and, on a SkyPilot cluster, for
the idle minutes before autodown and the teardown its launcher keeps of the budget: a T4 told "15 min on spot or 5 min
on ondemand" had $0.0476 of its $0.0495 billed after the run, and could not start on on-demand at all. The CLI's words
and a dry run's ``budget_lasts_seconds`` now both tell the time until that stop, and a tier the budget cannot start
the job on is said so."""

from __future__ import annotations

import json

import pytest

from broker.admission import admit, budget_lasts
from broker.cli import _budget_lasts
from broker.engine.budget import check, reserve_seconds
from broker.offers import after_run
from broker.spec import parse
from broker_testing import cli_runner, start_broker, stop_broker
from launchers.skypilot import SkyPilotLauncher
from pricing.loading import SNAPSHOT_DIR, load_price_table
from pricing.money import cost_for_seconds, to_micros

NOW = 1_800_000_000.0
STOP = reserve_seconds(30.0, 1.0)  # the clean stop at the default grace period and tick


def engine_stops_after(budget: int, price_per_hour: int, grace: float, tick: float) -> int:
    """The seconds of running after which the engine's budget check (broker/engine/budget.py) stops the job."""
    seconds = 0
    while not check(spent=cost_for_seconds(price_per_hour, seconds), budget=budget, price_per_hour=price_per_hour,
                    grace_seconds=grace, tick_seconds=tick, warned=True).stop:
        seconds += 1
    return seconds


@pytest.fixture(scope="module")
def t4_on_aws(tmp_path_factory):
    """A T4 task on AWS admitted as the broker with the SkyPilot launcher admits it: the shipped AWS catalog, each
    offer billed the launcher's idle minutes before autodown and its teardown after its run."""
    offers = load_price_table(SNAPSHOT_DIR, clouds=("aws",))
    launcher = SkyPilotLauncher(tmp_path_factory.mktemp("sky-state"), client=object())
    spec = parse({"run": "python train.py", "resources": {"accelerators": "T4", "infra": "aws"}}, now=NOW)

    def admitted(budget: str):
        return admit(spec, job_id="j-t4", team="default", budget=to_micros(budget), offers=offers, now=NOW,
                     actor="admin", checkpoint_uri="file:///tmp/h5_ckpt", idempotency_key=None, min_run_seconds=STOP,
                     after_run_seconds=after_run(launcher, offers)).job

    return admitted, launcher.after_run_seconds()


def test_a_t4_on_a_skypilot_cluster_runs_until_its_budget_less_the_billing_after_the_run_and_a_clean_stop(t4_on_aws):
    admitted, after_seconds = t4_on_aws
    job = admitted("0.0495")
    spot = next(t for t in job.quote["tiers"] if t["tier"] == "spot")
    lasts = budget_lasts(job.quote, job.budget)
    whole = job.budget * 3600 // spot["price_per_hour"]
    assert whole >= 15 * 60 - 30, "the budget over the price alone: the 15 min it was said to pay for"
    assert lasts["spot"] == whole - after_seconds - STOP
    assert lasts["ondemand"] is None, "on-demand's billing after the run alone is more than the budget"
    said = _budget_lasts({"quote": job.quote, "budget": {"micros": job.budget}})
    assert "15 min" not in said and "; it cannot start on on-demand at all" in said, said
    assert "a clean stop and the billing after its run kept out of it" in said, said


def test_a_t4_with_a_minute_to_run_on_spot_is_told_that_minute(t4_on_aws):
    admitted, after_seconds = t4_on_aws
    job = admitted("0.06")
    spot = next(t for t in job.quote["tiers"] if t["tier"] == "spot")
    seconds = budget_lasts(job.quote, job.budget)["spot"]
    assert seconds == job.budget * 3600 // spot["price_per_hour"] - after_seconds - STOP
    # what the budget pays for in all: the run said, its clean stop and the billing after it
    assert cost_for_seconds(spot["price_per_hour"], seconds + STOP + after_seconds) <= job.budget \
        < cost_for_seconds(spot["price_per_hour"], seconds + 1 + STOP + after_seconds)


POOL = """
pools:
  - {name: dgx, slots: 8, accelerator: A100, price_per_slot_hour: "1.125"}
stop_grace_seconds: 2
tick_seconds: 0.2
"""


@pytest.fixture
def broker(tmp_path):
    proc, url = start_broker(tmp_path, engine="off", config=POOL)
    try:
        yield cli_runner(url), tmp_path
    finally:
        stop_broker(proc, url, wait_runs=False)


def test_a_pool_jobs_dry_run_and_submit_tell_the_time_until_the_engines_budget_stop(broker):
    run, tmp = broker
    task = tmp / "eight.yaml"
    task.write_text("name: eight\nresources: {accelerators: A100:8}\nrun: sleep 600\nbroker: {budget_usd: 0.1}\n")
    dry = json.loads(run("--json", "submit", str(task), "--dry-run").stdout)
    stops = engine_stops_after(100_000, 9_000_000, grace=2, tick=0.2)
    assert dry["budget_lasts_seconds"] == stops == 34, "40 s of budget, 6 s of it the clean stop"
    said = run("submit", str(task), "--dry-run").stdout
    assert "the budget runs it for about 34 s on on-prem until its budget stop, a clean stop kept out of it" in said, said
    assert "40 s" not in said, said
    out = run("submit", str(task)).stdout
    assert "the budget runs it for about 34 s on on-prem until its budget stop" in out, out
