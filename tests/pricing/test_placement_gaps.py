"""Placement gaps found by an audit, as tables of cases: a job of more nodes than a zone ever has, a CPU job
on a GPU instance type, a catalog file with no rows, and the order of a budget refusal's sentence."""

from __future__ import annotations

import logging
from decimal import Decimal
from pathlib import Path

import pytest

from pricing.catalog import CatalogError
from pricing.loading import SNAPSHOT_DIR, catalog_files, load_price_table
from pricing.offers import JobRequest, Offer, ResourceRequest, Tier
from pricing.placement import NoFit, Placement, matches, nodes_shortfall, place, start_shortfall
from pricing.quote import quote


def zone(name, nodes, price=1_000_000, tier=Tier.SPOT):
    """A simulated zone of ``nodes`` nodes (a g5.xlarge stand-in)."""
    return Offer(tier, "aws", "us-east-1", name, "g5.xlarge", "A10G", 1, price, vcpus=Decimal(4),
                 memory_gib=Decimal(16), simulated=True, max_nodes=nodes)


REGION = Offer(Tier.SPOT, "aws", "us-east-1", "us-east-1a", "g5.xlarge", "A10G", 1, 2_000_000,
               vcpus=Decimal(4), memory_gib=Decimal(16))
"""A cloud zone: no known limit to its nodes."""


def nodes_job(n: int, **kw) -> JobRequest:
    """A job of ``n`` nodes of one A10G each."""
    return JobRequest(alternatives=(ResourceRequest("A10G", 1),), num_nodes=n, **kw)


@pytest.mark.parametrize("offers, nodes, free, expected", [
    pytest.param([zone("sim-a", 4)], 8, {"sim-a": 4},
                 "NoFit it asks for 8 nodes, but the only zone it may use, sim-a, has 4 nodes",
                 id="eight nodes asked of a four-node zone is no fit saying why, not 'full right now' for ever"),
    pytest.param([zone("sim-a", 2), zone("sim-b", 4)], 8, {},
                 "NoFit it asks for 8 nodes, but the largest zone it may use, sim-b, has 4 nodes",
                 id="of several zones too small the largest is named"),
    pytest.param([zone("sim-a", 1)], 2, {}, "NoFit it asks for 2 nodes, but the only zone it may use, sim-a, has 1 node",
                 id="a one-node zone is said in the singular"),
    pytest.param([zone("sim-a", 2, price=500_000), zone("sim-b", 6)], 5, {"sim-a": 2, "sim-b": 6}, "sim-b",
                 id="a job too big for the cheaper zone is placed on the zone that holds it"),
    pytest.param([zone("sim-a", 4, price=500_000), REGION], 8, {"sim-a": 4}, "us-east-1a",
                 id="a job too big for every simulated zone is placed in a cloud zone, which has no known limit"),
    pytest.param([zone("sim-a", 4)], 4, {"sim-a": 4}, "sim-a", id="as many nodes as the zone has fit"),
    pytest.param([zone("sim-a", 6)], 5, {"sim-a": 3}, "NoFit zone sim-a is full right now",
                 id="a zone that holds the job but is busy now is full right now, as before"),
])
def test_a_job_of_more_nodes_than_a_zone_has_is_never_placed_there(offers, nodes, free, expected):
    got = place(nodes_job(nodes), offers, free_capacity=free)
    if expected.startswith("NoFit"):
        assert isinstance(got, NoFit) and got.reason == expected[len("NoFit "):], got
    else:
        assert isinstance(got, Placement) and got.offer.location == expected, got


@pytest.mark.parametrize("offers, nodes, expected", [
    pytest.param([zone("sim-a", 4)], 8, "the only zone it may use, sim-a, has 4 nodes", id="too big for its one zone"),
    pytest.param([zone("sim-a", 4), REGION], 8, None, id="a cloud zone can hold it: nothing to say"),
    pytest.param([zone("sim-a", 4)], 3, None, id="a zone holds it: nothing to say"),
    pytest.param([], 8, None, id="no offer of its shape is for placement to say, not the node count"),
])
def test_the_node_shortfall_is_said_only_when_no_offer_of_its_shape_can_ever_hold_the_job(offers, nodes, expected):
    assert nodes_shortfall(nodes_job(nodes), offers) == expected


def test_the_quote_and_the_start_check_leave_out_a_zone_too_small_for_the_job():
    """A four-node zone at $0.50/h beside a cloud zone at $2/h, for eight nodes: the quote prices the cloud zone
    only, and a budget that could start the small zone but not the cloud one is short."""
    offers = [zone("sim-a", 4, price=500_000), REGION]
    request = nodes_job(8, expected_hours=Decimal(1))
    q = quote(request, offers)
    assert [t.offer.location for t in q.tiers] == ["us-east-1a"] and q.cheapest().estimate == 16_000_000
    assert start_shortfall(request, offers, 100_000, min_run_seconds=60) is not None  # $0.10: not 8 x $2/h for 60 s
    assert start_shortfall(request, offers, 300_000, min_run_seconds=60) is None  # $0.30: 8 x $2/h for 60 s = $0.27


def gpu_type(name, vcpus, memory, price, tier=Tier.SPOT, **kw):
    return Offer(tier, "aws", "us-east-1", "us-east-1a", name, "T4", 1, price, vcpus=Decimal(vcpus),
                 memory_gib=Decimal(memory), **kw)


def cpu_type(name, vcpus, memory, price, tier=Tier.SPOT):
    return Offer(tier, "aws", "us-east-1", "us-east-1a", name, None, 0, price, vcpus=Decimal(vcpus),
                 memory_gib=Decimal(memory))


G4DN = gpu_type("g4dn.xlarge", 4, 16, 190_100)
M6I = cpu_type("m6i.xlarge", 4, 16, 250_000)
M6I_2X = cpu_type("m6i.2xlarge", 8, 32, 131_800)


def exactly(cpus=None, memory=None, **kw):
    return ResourceRequest(cpus=None if cpus is None else Decimal(cpus),
                           memory_gib=None if memory is None else Decimal(memory),
                           cpus_exact=cpus is not None, memory_exact=memory is not None, **kw)


@pytest.mark.parametrize("want, offers, expected", [
    pytest.param(exactly(4, 16), [G4DN, M6I], "m6i.xlarge",
                 id="cpus 4 and memory 16 with no GPU take the CPU type, not the cheaper GPU type of that size"),
    pytest.param(exactly(4, 16), [G4DN],
                 "NoFit no offer has exactly 4 vCPUs and exactly 16 GiB of memory",
                 id="with only a GPU type of that size a CPU job is not placed, as SkyPilot would not launch it there"),
    pytest.param(ResourceRequest(cpus=Decimal(4)), [G4DN, M6I_2X], "m6i.2xlarge",
                 id="at least 4 vCPUs with no GPU take the CPU type, never the GPU one"),
    pytest.param(exactly(4, 16, instance_type="g4dn.xlarge"), [G4DN, M6I], "g4dn.xlarge",
                 id="an instance type the task names is taken as named, GPU and all"),
    pytest.param(ResourceRequest("T4", 1), [G4DN, M6I], "g4dn.xlarge", id="a task asking for the GPU gets the GPU type"),
    pytest.param(exactly(4, 16), [gpu_type("sim-g4dn", 4, 16, 190_100, simulated=True)], "sim-g4dn",
                 id="a simulated zone, a process on this host, takes a CPU job whatever instance type it stands for"),
])
def test_a_job_asking_no_accelerator_is_never_placed_on_a_cloud_type_that_carries_one(want, offers, expected):
    got = place(JobRequest(alternatives=(want,)), offers)
    if expected.startswith("NoFit"):
        assert isinstance(got, NoFit) and got.reason == expected[len("NoFit "):], got
    else:
        assert isinstance(got, Placement) and got.offer.instance_type == expected, got


def test_on_the_shipped_aws_table_cpus_4_memory_16_is_no_longer_a_spot_t4(tmp_path):
    """The shipped snapshot has one CPU type (m6i.2xlarge) and a g4dn.xlarge (4 vCPUs, 16 GiB, a T4): a CPU job
    of that exact size was placed on the T4, paying for a GPU it never asked for."""
    table = load_price_table(home=tmp_path, clouds=("aws",))
    request = JobRequest(alternatives=(exactly(4, 16),))
    assert not any(matches(o, request.alternatives[0]) for o in table if o.accelerator)
    loose = place(JobRequest(alternatives=(ResourceRequest(cpus=Decimal(4), memory_gib=Decimal(16)),)), table)
    assert isinstance(loose, Placement) and loose.offer.accelerator is None, loose


AWS_HEADER = ("InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,"
              "AvailabilityZone,Arch\n")


def home_vms(home: Path, text: str) -> Path:
    vms = home / ".sky" / "catalogs" / "v8" / "aws" / "vms.csv"
    vms.parent.mkdir(parents=True, exist_ok=True)
    vms.write_text(text)
    return vms


@pytest.mark.parametrize("text", [
    pytest.param(AWS_HEADER, id="a header-only catalog in HOME is passed over for the shipped snapshot"),
    pytest.param("", id="an empty catalog file in HOME is passed over for the shipped snapshot"),
    pytest.param(AWS_HEADER + "\n\n", id="a header and blank lines are passed over for the shipped snapshot"),
])
def test_a_catalog_with_no_rows_is_taken_as_absent_with_a_warning_naming_it(tmp_path, caplog, text):
    vms = home_vms(tmp_path, text)
    with caplog.at_level(logging.WARNING, logger="pricing.loading"):
        offers = load_price_table(home=tmp_path, clouds=("aws",))
    assert len(offers) == len(load_price_table(home=tmp_path / "nobody", clouds=("aws",))) > 200
    assert [f[0] for f in catalog_files(home=tmp_path, clouds=("aws",))][0] == str(SNAPSHOT_DIR / "aws" / "vms.csv")
    assert f"price catalog {vms} has no rows after its header: passed over as if absent" in caplog.text


@pytest.mark.parametrize("text, said", [
    pytest.param("not,a,catalog\n", "no column InstanceType",
                 id="a file of another header and no rows is no catalog, an error naming it, not passed over"),
    pytest.param(AWS_HEADER + "g5.xlarge,A10G,1,4.0,16.0,,NaN,,us-east-1,use1-az1,x86_64\n", "line 2: Price 'NaN'",
                 id="a catalog with a broken row is an error naming it, as before"),
])
def test_a_catalog_that_is_not_merely_empty_is_still_an_error_naming_it(tmp_path, text, said):
    vms = home_vms(tmp_path, text)
    with pytest.raises(CatalogError) as refused:
        load_price_table(home=tmp_path, clouds=("aws",))
    assert str(refused.value).startswith(f"price catalog {vms}: ") and said in str(refused.value)


def test_a_catalog_with_one_row_still_wins_over_the_snapshot(tmp_path, caplog):
    home_vms(tmp_path, AWS_HEADER + "p3.8xlarge,V100,4.0,32.0,244.0,,9.99,1.11,us-east-1,use1-az2,x86_64\n")
    with caplog.at_level(logging.WARNING, logger="pricing.loading"):
        offers = load_price_table(home=tmp_path, clouds=("aws",))
    assert {o.price_per_hour for o in offers} == {9_990_000, 1_110_000} and "no rows" not in caplog.text


ONPREM = Offer(Tier.ONPREM, "local", "lab", "lab", "lab-1slot", "V100", 1, 2_000_000)
SPOT = Offer(Tier.SPOT, "aws", "us-east-1", "us-east-1a", "p3.2xlarge", "V100", 1, 1_000_000)
ONDEMAND = Offer(Tier.ONDEMAND, "aws", "us-east-1", "us-east-1a", "p3.2xlarge", "V100", 1, 3_060_000)


@pytest.mark.parametrize("offers, after, expected", [
    pytest.param([ONPREM, SPOT, ONDEMAND], {},
                 "estimated $10.00 on spot 1x V100 p3.2xlarge in aws/us-east-1a exceeds the budget of $5.00: "
                 "give at least $10.00; on-prem is estimated at $20.00; on-demand is estimated at $30.60",
                 id="the cheapest tier leads: its estimate is the least budget that would do, the dearer follow"),
    pytest.param([ONPREM, SPOT, ONDEMAND], {SPOT: 39_600},
                 "estimated $20.00 on onprem 1x V100 lab-1slot in local/lab exceeds the budget of $5.00: "
                 "give at least $20.00; spot is estimated at $21.00 ($11.00 of it billed after the run); on-demand is estimated at $30.60",
                 id="a tier's billing after its run counts: the cheaper hourly price is not the cheaper estimate"),
])
def test_a_budget_refusal_leads_with_the_cheapest_way_to_run_the_job(offers, after, expected):
    q = quote(JobRequest(alternatives=(ResourceRequest("V100", 1),), expected_hours=Decimal(10)), offers,
              after_run_seconds=after)
    assert not q.fits(5_000_000) and q.refusal(5_000_000) == expected
