"""Placement: the offer a job runs on now, or why none fits, as a table of cases."""

from __future__ import annotations

from decimal import Decimal

import pytest

from pricing.catalog import onprem_offer
from pricing.offers import JobRequest, Offer, ResourceRequest, Tier
from pricing.placement import NoFit, Placement, billed_after_run, place, start_shortfall


def cloud(tier, zone, price, acc="V100", count=1, region="us-east-1"):
    return Offer(tier, "aws", region, zone, f"{acc}x{count}", acc, count, price)


POOL = onprem_offer("lab", 1, "V100", "0.80")  # $0.80/h
OFFERS = [
    POOL,
    cloud(Tier.ONDEMAND, "us-east-1a", 3_060_000),
    cloud(Tier.SPOT, "us-east-1a", 970_000),
    cloud(Tier.SPOT, "us-east-1b", 900_000),
    cloud(Tier.SPOT, "us-west-2a", 950_000, region="us-west-2"),
    cloud(Tier.ONDEMAND, "us-west-2a", 24_000_000, acc="A100", count=8, region="us-west-2"),
    cloud(Tier.ONDEMAND, "us-west-2b", 12_240_000, count=4, region="us-west-2"),
]
V100 = (ResourceRequest(accelerator="V100", accelerator_count=1),)


def job(**kw):
    kw.setdefault("alternatives", V100)
    return JobRequest(**kw)


CASES = [
    ("a free on-prem pool cheaper than spot is chosen", job(), {}, "onprem lab"),
    ("a full on-prem pool is not a choice, the cheapest spot zone is", job(), dict(free_capacity={"lab": 0}), "spot us-east-1b"),
    ("a zone blocked after a preemption is skipped", job(), dict(free_capacity={"lab": 0}, blocked_zones=frozenset({"us-east-1b"})), "spot us-west-2a"),
    (
        "a risky spot zone loses to a slightly dearer stable one",
        job(),
        dict(free_capacity={"lab": 0}, preemption_risk={"us-east-1b": Decimal("0.2")}),
        "spot us-west-2a",
    ),
    ("use_spot false with the pool full falls to on-demand", job(alternatives=(ResourceRequest("V100", 1, use_spot=False),)), dict(free_capacity={"lab": 0}), "ondemand us-east-1a"),
    ("an explicit region is honoured", job(alternatives=(ResourceRequest("V100", 1, region="us-west-2"),)), {}, "spot us-west-2a"),
    ("an explicit zone is honoured", job(alternatives=(ResourceRequest("V100", 1, zone="us-east-1a", use_spot=True),)), {}, "spot us-east-1a"),
    (
        "any_of takes the cheapest alternative that exists",
        job(alternatives=(ResourceRequest("H100", 8), ResourceRequest("A100", 8))),
        {},
        "ondemand us-west-2a",
    ),
    (
        "ordered alternatives: the first that has an offer wins over a cheaper later one",
        job(alternatives=(ResourceRequest("A100", 8), ResourceRequest("V100", 1)), ordered=True),
        {},
        "ondemand us-west-2a",
    ),
    (
        "ordered alternatives: a first choice that is full falls to the next",
        job(alternatives=(ResourceRequest("V100", 1, use_spot=False), ResourceRequest("V100", 1, use_spot=True)),
            ordered=True),
        dict(free_capacity={"lab": 0, "us-east-1a": 0}),
        "spot us-east-1b",
    ),
    (
        "any_of with the same alternatives ignores their order and takes the cheapest",
        job(alternatives=(ResourceRequest("A100", 8), ResourceRequest("V100", 1))),
        {},
        "onprem lab",
    ),
    ("the tier limit keeps a job off spot", job(allowed_tiers=frozenset({Tier.ONDEMAND})), {}, "ondemand us-east-1a"),
    ("max_price_per_hour under on-prem's price leaves nothing", job(max_price_per_hour=500_000), {}, "NoFit over the job's max_price_per_hour"),
    ("max_price_per_hour allows only spot when the pool is full", job(max_price_per_hour=1_000_000), dict(free_capacity={"lab": 0}), "spot us-east-1b"),
    ("an accelerator nobody sells, naming those sold", job(alternatives=(ResourceRequest("TPU", 1),)), {},
     "NoFit no offer has 1x TPU (accelerators offered: A100, V100)"),
    ("too many GPUs for any offer, naming the counts offers have", job(alternatives=(ResourceRequest("V100", 8),)), {},
     "NoFit no offer has 8x V100 (an offer here has 1 or 4 V100)"),
    ("a GPU count is matched exactly: one A100 is not an offer of eight, which would bill all eight",
     job(alternatives=(ResourceRequest("A100", 1),)), {}, "NoFit no offer has 1x A100 (an offer here has 8 A100)"),
    ("a cloud with no offer at all is said to have no prices, and how GCP gets them, not what another cloud has",
     job(alternatives=(ResourceRequest("V100", 1, cloud="gcp"),)), {},
     "NoFit no offer has 1x V100 in gcp (no offer is priced in gcp at all: with BROKER_LAUNCHER=skypilot the broker "
     "prices each cloud of its `clouds` setting that has SkyPilot's catalog on the broker's host; for GCP, "
     "`sky show-gpus --cloud gcp` fetches it; see docs/deploy.md)"),
    ("a GPU count between those offered names them all",
     job(alternatives=(ResourceRequest("V100", 2),)), {}, "NoFit no offer has 2x V100 (an offer here has 1 or 4 V100)"),
    ("an offer with more GPUs than asked is not taken when one with the count asked exists",
     job(alternatives=(ResourceRequest("V100", 4),)), {}, "ondemand us-west-2b"),
    ("every zone blocked", job(alternatives=(ResourceRequest("V100", 1, use_spot=True),)), dict(blocked_zones=frozenset({"us-east-1a", "us-east-1b", "us-west-2a"})), "NoFit blocked"),
    ("the one zone under the price cap blocked says the rest are over the cap, not that every zone is blocked",
     job(alternatives=(ResourceRequest("V100", 1, use_spot=True),), max_price_per_hour=920_000),
     dict(blocked_zones=frozenset({"us-east-1b"})),
     "NoFit zone us-east-1b is blocked for this job after recent preemptions or refused launches and the rest are "
     "over the job's max_price_per_hour of $0.92"),
    ("a full pool beside blocked zones says which is full and which blocked, not that all are full",
     job(max_price_per_hour=1_000_000),
     dict(free_capacity={"lab": 0}, blocked_zones=frozenset({"us-east-1a", "us-east-1b", "us-west-2a"})),
     "NoFit the pool lab is full right now, zones us-east-1a, us-east-1b and us-west-2a are blocked for this job "
     "after recent preemptions or refused launches and the rest are over the job's max_price_per_hour of $1.00"),
    ("every match full is said as such", job(), dict(free_capacity={"lab": 0, "us-east-1a": 0, "us-east-1b": 0,
                                                                      "us-west-2a": 0, "us-west-2b": 0}),
     "NoFit the pool lab and zones us-east-1a, us-east-1b and us-west-2a are full right now"),
    ("a full pool alone is named", job(alternatives=(ResourceRequest("V100", 1, use_spot=False, cloud="local"),)),
     dict(free_capacity={"lab": 0}), "NoFit the pool lab is full right now"),
    ("a spent budget places nothing", job(), dict(budget_left=0), "NoFit is spent"),
    (
        "a budget too small for the expected hours on any free offer",
        job(expected_hours=Decimal(100)),
        dict(budget_left=50_000_000, free_capacity={"lab": 0}),
        "NoFit does not cover 100 h",
    ),
    ("a budget that covers the pool for the expected hours picks the pool", job(expected_hours=Decimal(10)), dict(budget_left=8_000_000), "onprem lab"),
    (
        "a budget that covers only the cheapest spot zone for the hours picks it over a safer one",
        job(expected_hours=Decimal(10)),
        dict(budget_left=9_200_000, free_capacity={"lab": 0}, preemption_risk={"us-east-1b": Decimal("0.1")}),
        "spot us-east-1b",
    ),
    ("two nodes need two free pool nodes", job(num_nodes=2), dict(free_capacity={"lab": 1}), "spot us-east-1b"),
]


@pytest.mark.parametrize("request_, kwargs, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_place(request_, kwargs, expected):
    result = place(request_, OFFERS, **kwargs)
    if expected.startswith("NoFit"):
        assert isinstance(result, NoFit), result
        assert expected.removeprefix("NoFit ") in result.reason
        assert result.reason and not result.reason.endswith(".")
    else:
        assert isinstance(result, Placement), result
        tier, where = expected.split()
        assert (result.tier.value, result.offer.location) == (tier, where)
        assert result.price_per_hour == result.offer.price_per_hour * request_.num_nodes


SIZED = [Offer(Tier.ONDEMAND, "aws", "us-east-1", "us-east-1a", "m6i.2xlarge", None, 0, 384_000, vcpus=Decimal(8),
               memory_gib=Decimal(32))]


@pytest.mark.parametrize("want, expected", [
    pytest.param(ResourceRequest(memory_gib=Decimal(4096)), "no offer has 4096+ GiB of memory (the largest offer has 32 GiB of memory)",
                 id="more memory than any offer says how much the largest has"),
    pytest.param(ResourceRequest(cpus=Decimal(64), use_spot=True), "no offer has 64+ vCPUs on spot",
                 id="a CPU-only shape is described by its size, not as 'no accelerator'"),
    pytest.param(ResourceRequest(instance_type="p5.48xlarge", region="us-west-2"),
                 "no offer has instance type p5.48xlarge in us-west-2", id="an instance type and region are named"),
])
def test_a_shape_nothing_offers_is_described_as_asked(want, expected):
    result = place(JobRequest(alternatives=(want,)), SIZED)
    assert isinstance(result, NoFit) and result.reason.startswith(expected), result


def test_a_gpu_asked_of_a_broker_with_only_cpu_offers_says_how_it_gets_one():
    """A first-day broker has only its CPU pool: a GPU job was refused '(no offer has an accelerator)', not
    saying that nothing here has one, nor where GPUs come from."""
    result = place(JobRequest(alternatives=(ResourceRequest("A100", 8),)), [onprem_offer("local", 1, None, "0.20")])
    assert isinstance(result, NoFit), result
    assert result.reason.startswith("no offer has 8x A100 (every offer here is CPU only: a GPU needs a pool with an "
                                    "accelerator or a GPU zone in the broker's config"), result.reason
    assert "BROKER_LAUNCHER=skypilot" in result.reason and not result.reason.endswith("."), result.reason


@pytest.mark.parametrize("instance_type, matched", [
    ("n1-highmem-8", True), ("N1-HIGHMEM-8", True), ("n1-highmem-8+V100:1", True), ("n1-highmem-", False),
    ("V100:1", False),
], ids=["a task names the GCP VM a GPU rides", "case aside", "or the broker's own name for the pair",
        "a prefix is not the VM", "nor is the GPU part"])
def test_a_gcp_gpu_offer_matches_the_vm_type_a_task_names(instance_type, matched):
    from pricing.placement import matches

    offer = Offer(Tier.SPOT, "gcp", "us-central1", "us-central1-a", "n1-highmem-8+V100:1", "V100", 1, 1_091_620)
    assert matches(offer, ResourceRequest(instance_type=instance_type)) is matched


# --- what a cloud cluster is billed after its run ----------------------------------------------------
# A SkyPilot cluster idles autostop_minutes before autodown and takes minutes to terminate; its launcher
# stops the run that much (15 minutes by default) before the budget runs out. A pool or simulated zone on
# this host bills nothing after its run. Offers here, per hour: a dear pool $2.00, a simulated on-demand
# zone $1.00, cloud spot $0.90 (15 minutes after its run: $0.225), cloud on-demand $3.06.

DEAR_POOL = onprem_offer("lab", 1, "V100", "2.00")
SIM_ZONE = Offer(Tier.ONDEMAND, "aws", "us-east-1", "sim-od", "V100x1", "V100", 1, 1_000_000, simulated=True)
CLOUD_SPOT = cloud(Tier.SPOT, "us-east-1b", 900_000)
CLOUD_OD = cloud(Tier.ONDEMAND, "us-east-1a", 3_060_000)
HERE_AND_CLOUD = [DEAR_POOL, SIM_ZONE, CLOUD_SPOT, CLOUD_OD]
AFTER_RUN = {CLOUD_SPOT: 900, CLOUD_OD: 900}
START = 64  # a start and a clean stop, as the broker counts it with its defaults

SIM_OD_BUSY = "zone sim-od is busy right now, and it is what the budget covers: "
"""What a job waits for when the budget left pays for the simulated zone, full now, and none of the free offers: that
zone, not a bigger budget."""

AFTER_RUN_CASES = [
    pytest.param(job(), dict(budget_left=200_000, free_capacity={"sim-od": 0}), "onprem lab",
                 id="a budget left that cannot pay a cluster's 15 minutes after its run takes the dearer pool that can run"),
    pytest.param(job(), dict(budget_left=300_000), "spot us-east-1b",
                 id="a budget left that pays for them takes the cheaper cloud offer"),
    pytest.param(job(), dict(budget_left=200_000, after_run_seconds={}), "spot us-east-1b",
                 id="without after-run figures the cheapest offer is taken as before"),
    # with the hours known, the budget must cover them, the clean stop after them (64 s) and any billing after the run
    pytest.param(job(expected_hours=Decimal(1)), dict(budget_left=1_020_000, free_capacity={"lab": 0}), "ondemand sim-od",
                 id="an hour that the budget pays on spot but not with the billing after it takes the simulated zone"),
    pytest.param(job(expected_hours=Decimal(1)), dict(budget_left=1_141_000, free_capacity={"lab": 0, "sim-od": 0}),
                 "spot us-east-1b",
                 id="the estimate, a clean stop and the billing after the run exactly at the budget left fits"),
    pytest.param(job(expected_hours=Decimal(1)), dict(budget_left=1_140_999, free_capacity={"lab": 0, "sim-od": 0}),
                 f"NoFit {SIM_OD_BUSY}the budget left, $1.14, cannot pay an AWS cluster's 15 minutes of billing "
                 "after its run on the cheapest free match, spot 1x V100 V100x1 in aws/us-east-1b: $0.2250 on top of $0.9160 for 1 h and a "
                 "clean stop (64 s)",
                 id="a micro-dollar short of the estimate, a clean stop and the billing after the run does not fit"),
    pytest.param(job(expected_hours=Decimal(1)), dict(budget_left=50_000_000), "ondemand sim-od",
                 id="with the hours known, a cheaper rate whose billing after the run makes the job dearer loses"),
    pytest.param(job(expected_hours=Decimal(10)), dict(budget_left=50_000_000), "spot us-east-1b",
                 id="over enough hours the cheaper rate wins despite the billing after its run"),
    pytest.param(job(), dict(budget_left=50_000_000), "spot us-east-1b",
                 id="without the hours the lowest rate is taken, the billing after the run aside"),
    pytest.param(job(), dict(budget_left=200_000, free_capacity={"lab": 0, "sim-od": 0}),
                 "NoFit the pool lab and zone sim-od are busy right now, and they are what the budget covers: the "
                 "budget left, $0.20, cannot pay an AWS cluster's 15 minutes of billing after its run on the "
                 "cheapest free match, spot 1x V100 V100x1 in aws/us-east-1b: $0.2250 on top of $0.0160 for a start "
                 "and a clean stop (64 s)",
                 id="only cloud offers free and a budget left short of their billing after the run says so"),
    pytest.param(job(expected_hours=Decimal(1)), dict(budget_left=1_000_000, free_capacity={"lab": 0, "sim-od": 0}),
                 "NoFit the budget left, $1.00, cannot pay an AWS cluster's 15 minutes of billing after its run on the "
                 "cheapest free match, spot 1x V100 V100x1 in aws/us-east-1b: $0.2250 on top of $0.9160 for 1 h and a "
                 "clean stop (64 s)",
                 id="an hour the budget left pays on spot but not the billing after it names that billing"),
    pytest.param(job(expected_hours=Decimal(10)), dict(budget_left=5_000_000, free_capacity={"lab": 0, "sim-od": 0}),
                 "NoFit the budget left, $5.00, does not cover 10 h and a clean stop (64 s) on the cheapest free "
                 "match, spot 1x V100 V100x1 in aws/us-east-1b, estimated at $9.00, plus $0.0160 for the stop and "
                 "$0.2250 for an AWS cluster's billing after its run",
                 id="a budget left short of the hours themselves says so and adds the billing after them"),
    pytest.param(job(), dict(budget_left=30_000, free_capacity={"sim-od": 0, "us-east-1a": 0, "us-east-1b": 0}),
                 f"NoFit {SIM_OD_BUSY}the budget left, $0.03, cannot pay for a start and a clean stop (64 s) on the "
                 "cheapest free match, onprem 1x V100 lab-1gpu in local/lab, which costs $0.0356",
                 id="a budget left short of a start on the only free offer on this host waits, saying so"),
    pytest.param(job(), dict(budget_left=29_995, free_capacity={"sim-od": 0, "us-east-1a": 0, "us-east-1b": 0}),
                 f"NoFit {SIM_OD_BUSY}the budget left, $0.0299, cannot pay for a start and a clean stop (64 s) on "
                 "the cheapest free match, onprem 1x V100 lab-1gpu in local/lab, which costs $0.0356",
                 id="the budget left is rounded down, never up to more than is left ($0.03), nor said to the micro"),
]


@pytest.mark.parametrize("request_, kwargs, expected", AFTER_RUN_CASES)
def test_place_counts_the_billing_after_a_clusters_run(request_, kwargs, expected):
    kwargs = {"after_run_seconds": AFTER_RUN, "min_run_seconds": START, **kwargs}
    result = place(request_, HERE_AND_CLOUD, **kwargs)
    if expected.startswith("NoFit"):
        assert isinstance(result, NoFit), result
        assert result.reason == expected.removeprefix("NoFit ")
    else:
        assert isinstance(result, Placement), result
        assert (result.tier.value, result.offer.location) == tuple(expected.split())


@pytest.mark.parametrize("offers, budget, expected", [
    pytest.param(HERE_AND_CLOUD, 50_000, None, id="a budget that can start on a pool or zone here can start"),
    pytest.param([CLOUD_SPOT, CLOUD_OD], 250_000, None, id="a budget that pays a start and the billing after it can start"),
    pytest.param([CLOUD_SPOT, CLOUD_OD], 200_000,
                 "cannot pay for a start and a clean stop (64 s) and the billing after its run on any offer: on the "
                 "cheapest, spot 1x V100 V100x1 in aws/us-east-1b, that is $0.0160 and $0.2250 for an AWS cluster's "
                 "15 minutes of billing after its run",
                 id="a budget that pays only the start on the cloud names the billing after the run"),
    pytest.param([DEAR_POOL, CLOUD_SPOT], 10_000, "cannot pay for a start and a clean stop (64 s) on any offer: the cheapest, spot 1x V100 V100x1 in "
                 "aws/us-east-1b, costs $0.90/h",
                 id="a budget short of any start names the cheapest offer, its cloud and its price"),
])
def test_start_shortfall_counts_the_billing_after_the_run(offers, budget, expected):
    assert start_shortfall(job(), offers, budget, min_run_seconds=START, after_run_seconds=AFTER_RUN) == expected


GCP_SPOT = Offer(Tier.SPOT, "gcp", "us-east1", "us-east1-b", "n1-standard-8+V100:1", "V100", 1, 900_000)
K8S_POOL = Offer(Tier.ONPREM, "kubernetes", "lab-ctx", "gpus", "gpus-1slot", "V100", 1, 900_000)


@pytest.mark.parametrize("offer, expected", [
    pytest.param(CLOUD_SPOT, "an AWS cluster's", id="an AWS offer is billed by an AWS cluster"),
    pytest.param(GCP_SPOT, "a GCP cluster's", id="a GCP offer is billed by a GCP cluster"),
    pytest.param(K8S_POOL, "a Kubernetes pool's", id="a Kubernetes pool is named as the pool it is, not a cloud cluster"),
    pytest.param(DEAR_POOL, "a pool's", id="a pool on this host is a pool"),
    pytest.param(SIM_ZONE, "a simulated AWS zone's", id="a simulated zone is named as simulated"),
])
def test_the_billing_after_a_run_is_named_by_what_bills_it(offer, expected):
    assert billed_after_run(offer) == expected


@pytest.mark.parametrize("offers, expected", [
    pytest.param([K8S_POOL], "cannot pay a Kubernetes pool's 15 minutes of billing after its run on the cheapest free "
                             "match, onprem 1x V100 gpus-1slot in kubernetes/lab-ctx, pool gpus",
                 id="a Kubernetes pool short of its billing after the run names the pool, not a cloud cluster"),
    pytest.param([GCP_SPOT], "cannot pay a GCP cluster's 15 minutes of billing after its run on the cheapest free "
                             "match, spot 1x V100 n1-standard-8+V100:1 in gcp/us-east1-b",
                 id="a GCP offer short of its billing after the run names GCP"),
])
def test_a_budget_short_of_the_billing_after_the_run_names_what_bills_it(offers, expected):
    result = place(job(), offers, budget_left=200_000, min_run_seconds=START,
                   after_run_seconds={o: 900 for o in offers})
    assert isinstance(result, NoFit) and expected in result.reason, result


# --- a start the job may take: only offers at or under its max price count ----------------------------
# CLOUD_SPOT $0.90/h (after its run: $0.225), CLOUD_OD $3.06/h, the dear pool $2.00/h with nothing after.

@pytest.mark.parametrize("offers, max_price, budget, expected", [
    pytest.param([DEAR_POOL, CLOUD_SPOT], 1_000_000, 50_000,
                 "cannot pay for a start and a clean stop (64 s) and the billing after its run on any offer: on the "
                 "cheapest, spot 1x V100 V100x1 in aws/us-east-1b, that is $0.0160 and $0.2250 for an AWS cluster's "
                 "15 minutes of billing after its run (it could pay for onprem 1x V100 lab-1gpu in local/lab, over "
                 "the job's max_price_per_hour of $1.00)",
                 id="a budget that pays only for a pool over the job's max price cannot start and says both"),
    pytest.param([CLOUD_OD, CLOUD_SPOT], 1_000_000, 10_000,
                 "cannot pay for a start and a clean stop (64 s) on any offer: the cheapest, spot 1x V100 V100x1 in "
                 "aws/us-east-1b, costs $0.90/h",
                 id="a budget short of any start under the max price names the cheapest offer it may take"),
    pytest.param([DEAR_POOL, CLOUD_SPOT], 2_000_000, 50_000, None,
                 id="a budget that pays for a pool at the job's max price can start"),
    pytest.param([DEAR_POOL, CLOUD_OD], 500_000, 10_000, None,
                 id="a max price below every offer is not the budget's to say"),
])
def test_start_shortfall_counts_only_offers_at_or_under_the_jobs_max_price(offers, max_price, budget, expected):
    request = job(max_price_per_hour=max_price)
    assert start_shortfall(request, offers, budget, min_run_seconds=START, after_run_seconds=AFTER_RUN) == expected


def test_a_price_cap_a_tenth_of_a_cent_under_the_price_says_both_exactly():
    """Rounded up to the cent, a $1.006 on-demand price over a $1.005 cap read "costs $1.01/h, over the job's
    max_price_per_hour of $1.01": a refusal that contradicted itself."""
    offers = [cloud(Tier.ONDEMAND, "us-east-1a", 1_006_000), cloud(Tier.ONDEMAND, "us-east-1b", 1_004_000)]
    alone = place(job(max_price_per_hour=1_005_000), offers[:1])
    assert isinstance(alone, NoFit)
    assert alone.reason.endswith("costs $1.006/h, over the job's max_price_per_hour of $1.005"), alone.reason
    rest = place(job(max_price_per_hour=1_005_000), offers, free_capacity={"us-east-1b": 0})
    assert isinstance(rest, NoFit) and "the rest are over the job's max_price_per_hour of $1.005" in rest.reason, \
        rest.reason


def test_spot_asked_of_a_broker_with_no_spot_offer_says_so_and_where_spot_comes_from():
    """A CPU job with use_spot on a pool-only broker read "no offer has 1+ vCPUs on spot": nothing said that no
    offer here is spot at all (the GPU case said where GPUs come from)."""
    result = place(JobRequest(alternatives=(ResourceRequest(cpus=Decimal(1), use_spot=True),)),
                   [onprem_offer("local", 1, None, "0.20")])
    assert isinstance(result, NoFit), result
    assert result.reason == ("no offer has 1+ vCPUs on spot (no offer here is spot: spot needs a spot zone in the "
                             "broker's config or the clouds priced with BROKER_LAUNCHER=skypilot; see docs/deploy.md)"), \
        result.reason
