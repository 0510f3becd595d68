"""QA, Dec 8: a dry run of ``ordered`` alternatives quotes the offer it would be placed on, and says it plainly.

``ordered: [{A100:8, infra: gcp}, {A100:8, infra: aws}]`` with a $10 budget for 1 h: the quote priced GCP's $14.70 spot
alone, "the budget covers no tier, not spot, on-demand" (JSON ``budget_covers`` all false), and then "would be placed
on spot 8x A100 p4d.24xlarge in aws/us-east-1d, at $2.47/h", which the budget covers; the job was admitted. The words
of what the budget covers read "covers spot, not on-prem, on-demand" as if on-demand were covered, and the placement's
price came after the note of a cheaper later alternative, as if it were that one's."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest

from broker.admission import admit
from broker.engine.budget import reserve_seconds
from broker.offers import after_run
from broker.service import DryRun
from broker.spec import parse
from broker.views import dry_run_view
from broker_testing import cli_runner, start_broker, stop_broker
from launchers.skypilot import SkyPilotLauncher
from pricing.loading import SNAPSHOT_DIR, load_price_table
from pricing.offers import Offer, Tier
from pricing.placement import Placement, place

NOW = 1_800_000_000.0
STOP = reserve_seconds(30.0, 1.0)
GCP = [Offer(tier, "gcp", "us-central1", "us-central1-a", "a2-highgpu-8g", "A100", 8, price, vcpus=Decimal(96),
             memory_gib=Decimal(680)) for tier, price in ((Tier.SPOT, 14_700_000), (Tier.ONDEMAND, 29_388_000))]
GCP_THEN_AWS = {"run": "python train.py",
                "resources": {"ordered": [{"accelerators": "A100:8", "infra": "gcp"},
                                          {"accelerators": "A100:8", "infra": "aws"}]},
                "broker": {"budget_usd": 10, "expected_hours": 1}}


def test_the_qa_job_is_quoted_on_the_aws_spot_offer_placement_takes_and_its_budget_covers_it(tmp_path):
    offers = [*GCP, *load_price_table(SNAPSHOT_DIR, clouds=("aws",))]
    after = after_run(SkyPilotLauncher(tmp_path / "sky", client=object()), offers)
    spec = parse(GCP_THEN_AWS, now=NOW)
    job = admit(spec, job_id="j-ordered", team="default", budget=spec.broker.budget, offers=offers, now=NOW,
                actor="admin", checkpoint_uri="file:///tmp/h5_ckpt", idempotency_key=None, min_run_seconds=STOP,
                after_run_seconds=after).job
    placed = place(spec.request, offers, budget_left=job.budget, min_run_seconds=STOP, after_run_seconds=after)
    assert isinstance(placed, Placement) and placed.offer.cloud == "aws" and placed.tier is Tier.SPOT
    spot = next(t for t in job.quote["tiers"] if t["tier"] == "spot")
    assert spot["offer"] == placed.offer.describe(), "the spot tier is quoted on the offer the job is placed on"
    run = dry_run_view(DryRun(job, False, None, "", 1, None, None, STOP))
    assert run["budget_covers"]["spot"] is True, run["budget_covers"]
    assert run["estimate"]["micros"] == spot["estimate"] < 10_000_000


POOL_AND_ZONES = """
pools:
  - {name: lab, slots: 1, accelerator: A10G, price_per_slot_hour: "5"}
zones:
  - {name: sim-od, tier: ondemand, instance_type: g5.xlarge, price_per_hour: "1.006"}
  - {name: sim-spot, tier: spot, instance_type: g5.xlarge, price_per_hour: "0.40"}
stop_grace_seconds: 2
tick_seconds: 0.2
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("h5_dry")
    proc, url = start_broker(tmp, engine="off", config=POOL_AND_ZONES)
    try:
        yield cli_runner(url)
    finally:
        stop_broker(proc, url, wait_runs=False)


def test_a_dry_run_says_which_tiers_the_budget_leaves_out_as_one_list(run, tmp_path):
    task = tmp_path / "t.yaml"
    task.write_text("name: t\nresources: {accelerators: A10G:1}\nrun: echo hi\n"
                    "broker: {budget_usd: 0.5, expected_hours: 1}\n")
    out = run("submit", str(task), "--dry-run").stdout
    assert "; the budget covers spot, not on-demand or on-prem\n" in out, out


def test_a_dry_run_gives_the_placements_price_after_its_offer_not_after_the_cheaper_one_passed_over(run, tmp_path):
    task = tmp_path / "o.yaml"
    task.write_text("name: o\nrun: echo hi\nresources:\n  ordered:\n    - {accelerators: A10G:1, use_spot: false}\n"
                    "    - {accelerators: A10G:1, use_spot: true}\nbroker: {budget_usd: 5}\n")
    out = run("submit", str(task), "--dry-run").stdout
    line = next(line for line in out.splitlines() if line.startswith("would be placed"))
    assert re.fullmatch(r"would be placed on ondemand 1x A10G g5\.xlarge in aws/sim-od \(simulated\), at \$1\.0\d+/h; "
                        r"spot 1x A10G g5\.xlarge in aws/sim-spot \(simulated\) at \$0\.40/h is cheaper but comes "
                        r"later in `ordered`", line), line
