"""The price table: SkyPilot v8 catalog rows and on-prem pools as offers."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

import pytest

from pricing.catalog import CatalogError, onprem_offer, parse_az_mappings, parse_vms_csv
from pricing.loading import SNAPSHOT_DIR, catalog_files, load_price_table
from pricing.offers import JobRequest, ResourceRequest, Tier
from pricing.placement import NoFit, Placement, matches, place

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"

AWS_HEADER = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,AvailabilityZone,Arch\n"
GCP_HEADER = "InstanceType,vCPUs,MemoryGiB,AcceleratorName,AcceleratorCount,GpuInfo,Region,AvailabilityZone,Price,SpotPrice\n"


@pytest.mark.parametrize(
    "row, zone_names, expected",
    [
        pytest.param(
            "p3.8xlarge,V100,4.0,32.0,244.0,,12.24,3.6720,us-east-1,use1-az2,x86_64",
            {"use1-az2": "us-east-1a"},
            {(Tier.ONDEMAND, "us-east-1a", 12_240_000), (Tier.SPOT, "us-east-1a", 3_672_000)},
            id="a row with a spot price gives an on-demand and a spot offer in the named zone",
        ),
        pytest.param(
            "p3.8xlarge,V100,4.0,32.0,244.0,,12.24,,us-east-1,use1-az2,x86_64",
            {},
            {(Tier.ONDEMAND, "use1-az2", 12_240_000)},
            id="an empty spot price means no spot offer and an unmapped zone id stays an id",
        ),
        pytest.param(
            "g4dn.xlarge,T4,1.0,4.0,16.0,,0.5261234567,0.2158,us-east-1,use1-az1,x86_64",
            {"use1-az1": "us-east-1d"},
            {(Tier.ONDEMAND, "us-east-1d", 526_124), (Tier.SPOT, "us-east-1d", 215_800)},
            id="sub-micro fractions of a price round up, never down",
        ),
        pytest.param("m6i.2xlarge,,,8.0,32.0,,,,us-east-1,use1-az1,x86_64", {}, set(), id="a row without a price is skipped"),
    ],
)
def test_aws_rows_become_offers(row, zone_names, expected):
    offers = parse_vms_csv(AWS_HEADER + row + "\n", "aws", zone_names)
    assert {(o.tier, o.zone, o.price_per_hour) for o in offers} == expected


def test_gcp_gpu_rows_are_priced_with_their_host_vm():
    text = GCP_HEADER + "\n".join(
        [
            "n1-highmem-8,8.0,52.0,,,,us-central1,us-central1-a,0.47321,0.09962",
            ",,,V100,1,V100,us-central1,us-central1-a,2.48,0.992",
            ",,,tpu-v6e-1,1,tpu-v6e-1,us-central1,us-central1-a,2.7,0.54421",
        ]
    )
    offers = {(o.instance_type, o.tier): o.price_per_hour for o in parse_vms_csv(text, "gcp")}
    assert offers[("n1-highmem-8+V100:1", Tier.ONDEMAND)] == 2_953_210
    assert offers[("n1-highmem-8+V100:1", Tier.SPOT)] == 1_091_620
    assert offers[("tpu-v6e-1", Tier.ONDEMAND)] == 2_700_000


GCP_VMS = [  # VM rows as in skypilot-catalog v8 gcp/vms.csv (../shared/data/skypilot-catalog/v8/gcp/vms.sample.csv)
    "n1-standard-1,1.0,3.75,,,,us-central1,us-central1-a,0.0475,0.01",
    "n1-highmem-8,8.0,52.0,,,,us-central1,us-central1-a,0.47321,0.09962",
    "n1-standard-64,64.0,240.0,,,,us-central1,us-central1-a,3.04,0.64",
    "n1-highmem-64,64.0,416.0,,,,us-central1,us-central1-a,3.78,0.80",
    "a2-highgpu-1g,12.0,85.0,,,,us-central1,us-central1-a,0.73948,0.36975",
    "a2-highgpu-8g,96.0,680.0,,,,us-central1,us-central1-a,5.91582,2.958",
    "a3-highgpu-1g,26.0,234.0,,,,us-central1,us-central1-a,1.18251,0.36117",
]


@pytest.mark.parametrize(
    "gpu_row, expected",
    [
        pytest.param(",,,A100,8,,us-central1,us-central1-a,23.47,9.38", ("a2-highgpu-8g+A100:8", 29_385_820, 12_338_000),
                     id="8x A100 rides its own a2-highgpu-8g, never the cheapest n1 VM"),
        pytest.param(",,,A100,1,,us-central1,us-central1-a,2.934,1.17", ("a2-highgpu-1g+A100:1", 3_673_480, 1_539_750),
                     id="1x A100 rides a2-highgpu-1g"),
        pytest.param(",,,H100,1,,us-central1,us-central1-a,11.06,3.5", ("a3-highgpu-1g+H100:1", 12_242_510, 3_861_170),
                     id="1x H100 rides a3-highgpu-1g"),
        pytest.param(",,,V100,8,,us-central1,us-central1-a,19.84,7.94", ("n1-highmem-64+V100:8", 23_620_000, 8_740_000),
                     id="8x V100 asking nothing more rides an n1 VM with the 64 vCPUs and 256 GiB SkyPilot gives it, "
                        "not n1-standard-1"),
        pytest.param(",,,T4,1,,us-central1,us-central1-a,0.35,0.14", ("n1-highmem-8+T4:1", 823_210, 239_620),
                     id="1x T4 asking nothing more rides the cheapest n1 VM with 4+ vCPUs and 16+ GiB"),
        pytest.param(",,,A100,8,,us-central1,us-central1-b,23.47,9.38", None,
                     id="a GPU in a zone with no VM to carry it is no offer, not the GPU's price alone"),
        pytest.param(",,,A100,2,,us-central1,us-central1-a,5.87,2.35", None,
                     id="2x A100 with no a2-highgpu-2g in the zone is no offer"),
    ],
)
def test_gcp_gpu_rows_ride_the_host_vm_skypilot_would_launch(gpu_row, expected):
    offers = [o for o in parse_vms_csv(GCP_HEADER + "\n".join([*GCP_VMS, gpu_row]), "gcp") if o.accelerator]
    if expected is None:
        assert offers == []
        return
    plain = ResourceRequest(offers[0].accelerator, offers[0].accelerator_count)  # the GPUs and nothing more
    cheapest = [min((o for o in offers if o.tier is tier and matches(o, plain)), key=lambda o: o.price_per_hour)
                for tier in (Tier.ONDEMAND, Tier.SPOT)]
    instance_type, ondemand, spot = expected
    assert {(o.instance_type, o.tier, o.price_per_hour) for o in cheapest} == {
        (instance_type, Tier.ONDEMAND, ondemand), (instance_type, Tier.SPOT, spot)}


@pytest.mark.parametrize("want, expected", [
    pytest.param(ResourceRequest("L4", 1), "g2-standard-4+L4:1", id="1x L4 asking nothing more takes the cheapest g2"),
    pytest.param(ResourceRequest("L4", 1, cpus=Decimal(16)), "g2-standard-16+L4:1",
                 id="1x L4 with 16 vCPUs takes the larger g2 SkyPilot would launch, not a no fit"),
    pytest.param(ResourceRequest("L4", 1, instance_type="g2-standard-16"), "g2-standard-16+L4:1",
                 id="1x L4 naming its g2 VM takes it"),
    pytest.param(ResourceRequest("V100", 2, cpus=Decimal(16)), "n1-highmem-16+V100:2",
                 id="2x V100 with 16 vCPUs takes the larger n1 VM within GCP's limit for two"),
    pytest.param(ResourceRequest("V100", 1, instance_type="n1-highmem-16"), None,
                 id="1x V100 on an n1 VM past GCP's 12 vCPUs for one is no offer, as SkyPilot refuses it"),
])
def test_a_gcp_gpu_rides_any_vm_that_can_carry_it_the_cheapest_unless_asked(want, expected):
    rows = ["g2-standard-4,4.0,16.0,,,,us-central1,us-central1-a,0.70683,0.2827",
            "g2-standard-16,16.0,64.0,,,,us-central1,us-central1-a,1.0,0.4",
            "n1-highmem-8,8.0,52.0,,,,us-central1,us-central1-a,0.47321,0.09962",
            "n1-highmem-16,16.0,104.0,,,,us-central1,us-central1-a,0.94642,0.19924",
            ",,,L4,1,,us-central1,us-central1-a,0.56,0.22", ",,,V100,1,,us-central1,us-central1-a,2.48,0.99",
            ",,,V100,2,,us-central1,us-central1-a,4.96,1.98"]
    offers = parse_vms_csv(GCP_HEADER + "\n".join(rows), "gcp")
    placed = place(JobRequest(alternatives=(want,), allowed_tiers=frozenset({Tier.ONDEMAND})), offers)
    if expected is None:
        assert isinstance(placed, NoFit), placed
    else:
        assert isinstance(placed, Placement) and placed.offer.instance_type == expected, placed


N1_VMS = [  # GCP's n1 shapes at their us-central1 prices, and VMs of other families that carry no such GPU
    "n1-standard-1,1.0,3.75,,,,{region},{zone},0.0475,0.01",
    "n1-highcpu-2,2.0,1.8,,,,{region},{zone},0.0709,0.015",
    "n1-standard-2,2.0,7.5,,,,{region},{zone},0.095,0.02",
    "n1-highmem-2,2.0,13.0,,,,{region},{zone},0.1184,0.025",
    "n1-standard-4,4.0,15.0,,,,{region},{zone},0.19,0.04",
    "n1-highmem-4,4.0,26.0,,,,{region},{zone},0.2368,0.05",
    "n1-standard-16,16.0,60.0,,,,{region},{zone},0.76,0.16",
    "n1-highmem-32,32.0,208.0,,,,{region},{zone},1.8928,0.4",
    "n1-standard-64,64.0,240.0,,,,{region},{zone},3.04,0.64",
    "n1-highmem-64,64.0,416.0,,,,{region},{zone},3.78,0.80",
    "n1-megamem-96,96.0,1433.6,,,,{region},{zone},10.67,2.2",
    "n2-standard-2,2.0,8.0,,,,{region},{zone},0.0971,0.02",
    "g2-standard-4,4.0,16.0,,,,{region},{zone},0.70683,0.2827",
    "g4-standard-48,48.0,180.0,,,,{region},{zone},4.5,1.8",
]
N1_SMALL = {"n1-standard-1", "n1-highcpu-2", "n1-standard-2", "n1-highmem-2", "n1-standard-4", "n1-highmem-4"}


@pytest.mark.parametrize("gpu, zone, hosts, default_cpus", [
    pytest.param("T4,1", "us-central1-a", N1_SMALL | {"n1-standard-16", "n1-highmem-32"}, 4,
                 id="1x T4 rides every n1 VM within GCP's 48 vCPUs and 312 GiB for one, from n1-standard-1 up, "
                    "marked with the 4 vCPUs SkyPilot gives its host when a task asks no size"),
    pytest.param("V100,1", "us-central1-a", N1_SMALL, 8,
                 id="1x V100 rides every n1 VM within GCP's 12 vCPUs and 78 GiB for one, marked with 8 vCPUs"),
    pytest.param("P4,1", "us-central1-a", N1_SMALL | {"n1-standard-16"}, 8,
                 id="1x P4 takes SkyPilot's default of 8 vCPUs and GCP's 24 vCPUs and 156 GiB for one"),
    pytest.param("P100,4", "us-east1-b", N1_SMALL | {"n1-standard-16", "n1-highmem-32", "n1-standard-64",
                                                      "n1-highmem-64"}, 32,
                 id="4x P100 rides an n1 VM of up to 96 vCPUs and 624 GiB in most zones"),
    pytest.param("P100,4", "us-east1-c", N1_SMALL | {"n1-standard-16", "n1-highmem-32"}, 32,
                 id="4x P100 rides an n1 VM of up to 64 vCPUs and 208 GiB in us-east1-c, as SkyPilot checks there"),
    pytest.param("P100,8", "us-central1-a", set(), None,
                 id="8x P100, a count GCP does not attach to an n1 VM, is no offer"),
    pytest.param("K80,16", "us-central1-a", set(), None,
                 id="16x K80, a count SkyPilot gives a host size but GCP does not attach, is no offer"),
    pytest.param("X9,1", "us-central1-a", set(), None,
                 id="a GPU SkyPilot knows no n1 limit for is no offer, as SkyPilot refuses to attach it"),
    pytest.param("RTXPRO6000,1", "us-central1-a", {"g4-standard-48"}, None,
                 id="1x RTX PRO 6000 rides its own g4-standard-48, never an n1 VM"),
])
def test_a_gcp_gpu_is_offered_on_every_host_skypilot_can_attach_it_to(gpu, zone, hosts, default_cpus):
    region = zone.rsplit("-", 1)[0]
    rows = [r.format(region=region, zone=zone) for r in N1_VMS] + [f",,,{gpu},,{region},{zone},1.0,0.5"]
    offers = parse_vms_csv(GCP_HEADER + "\n".join(rows), "gcp")
    paired = [o for o in offers if o.accelerator]
    assert {o.instance_type.split("+")[0] for o in paired} == hosts
    assert {o.default_host_cpus for o in paired} <= {default_cpus}


def test_an_rtx_pro_6000s_own_vm_is_never_offered_without_its_gpus():
    rows = [r.format(region="us-central1", zone="us-central1-a") for r in N1_VMS]
    assert [o.instance_type for o in parse_vms_csv(GCP_HEADER + "\n".join(rows), "gcp")
            if o.instance_type.startswith(("g2-", "g4-"))] == []


def test_snapshot_ships_with_a_source_note_and_loads_offline(tmp_path):
    assert (SNAPSHOT_DIR / "aws" / "SOURCE.md").is_file()
    offers = load_price_table(home=tmp_path)  # an empty HOME: no SkyPilot catalog
    assert len(offers) > 200
    assert all(isinstance(o.price_per_hour, int) for o in offers)
    zones = {o.zone for o in offers}
    assert "us-east-1a" in zones
    assert not any(re.fullmatch(r"[a-z]+\d-az\d", z) for z in zones if z), "a regular zone id was left unmapped"
    p5 = [o for o in offers if o.instance_type == "p5.48xlarge" and o.tier is Tier.ONDEMAND]
    assert p5 and p5[0].accelerator == "H100" and p5[0].accelerator_count == 8


def test_a_skypilot_catalog_in_home_wins_over_the_snapshot(tmp_path):
    aws = tmp_path / ".sky" / "catalogs" / "v8" / "aws"
    aws.mkdir(parents=True)
    (aws / "vms.csv").write_text(AWS_HEADER + "p3.8xlarge,V100,4.0,32.0,244.0,,9.99,1.11,us-east-1,use1-az2,x86_64\n")
    offers = load_price_table(home=tmp_path)
    assert {(o.tier, o.zone, o.price_per_hour) for o in offers} == {
        (Tier.ONDEMAND, "us-east-1a", 9_990_000),
        (Tier.SPOT, "us-east-1a", 1_110_000),
    }


G5 = "g5.xlarge,A10G,1.0,4.0,16.0,,{price},{spot},us-east-1,use1-az1,x86_64"


@pytest.mark.parametrize(
    "text, message",
    [
        pytest.param("this is not,a catalog\nat,all\n", "no column InstanceType, AcceleratorName, AcceleratorCount, vCPUs, "
                     "MemoryGiB, Price, SpotPrice, Region, AvailabilityZone", id="a file with another header names the columns it lacks"),
        pytest.param("", "no column InstanceType", id="an empty file is not an empty price table"),
        pytest.param(AWS_HEADER + G5.format(price="1.0", spot="0.3") + "\n" + G5.format(price="NaN", spot="0.3"),
                     "line 3: Price 'NaN' is not a price in dollars per hour", id="a NaN price names its line and column"),
        pytest.param(AWS_HEADER + G5.format(price="abc", spot="0.3"), "line 2: Price 'abc' is not a price",
                     id="a price that is not a number is an error, not a skipped row"),
        pytest.param(AWS_HEADER + G5.format(price="1.0", spot="Infinity"), "line 2: SpotPrice 'Infinity' is not a price",
                     id="an infinite spot price names its column"),
        pytest.param(AWS_HEADER + G5.format(price="1e20", spot=""), "line 2: Price '1e20' is not a price",
                     id="a price too large for the money type is an error"),
        pytest.param(AWS_HEADER + G5.format(price="-1", spot=""), "line 2: Price '-1' is not a price",
                     id="a negative price is an error, not a skipped row"),
        pytest.param(AWS_HEADER + "g5.xlarge,A10G,one,4.0,16.0,,1.0,,us-east-1,use1-az1,x86_64",
                     "line 2: AcceleratorCount 'one' is not a number", id="an accelerator count that is not a number"),
        pytest.param(AWS_HEADER + "g5.xlarge,A10G,1,NaN,16.0,,1.0,,us-east-1,use1-az1,x86_64",
                     "line 2: vCPUs 'NaN' is not a number", id="a NaN vCPU count, which placement could not compare"),
        pytest.param(AWS_HEADER + "g5.xlarge,A10G,1,4.0,16.0,,1.0",
                     "line 2: 7 cells where the header has 11 (a line cut off or broken)",
                     id="a line cut off (a file caught while it is rewritten) is an error, not a crash"),
        pytest.param(AWS_HEADER + "g5.xlarge,A10G,1,4.0,16.0,,1.0,,us-east-1,use1-az1,x86_64,extra",
                     "line 2: 12 cells where the header has 11", id="a line with a cell too many is an error"),
    ],
)
def test_a_malformed_catalog_is_an_error_naming_the_line_and_column(text, message):
    with pytest.raises(CatalogError, match=re.escape(message)):
        parse_vms_csv(text, "aws")


def test_a_malformed_catalog_in_home_is_an_error_naming_the_file(tmp_path):
    aws = tmp_path / ".sky" / "catalogs" / "v8" / "aws"
    aws.mkdir(parents=True)
    (aws / "vms.csv").write_text(AWS_HEADER + G5.format(price="NaN", spot=""))
    with pytest.raises(CatalogError, match=re.escape(f"price catalog {aws / 'vms.csv'}: line 2: Price 'NaN'")):
        load_price_table(home=tmp_path)


def test_az_mappings_match_the_shared_reference_copy():
    text = (SHARED / "skypilot-catalog" / "v8" / "aws" / "az_mappings-default.csv").read_text()
    assert parse_az_mappings(text)["use1-az1"] == "us-east-1d"


@pytest.mark.parametrize(
    "gpus, price, hourly",
    [
        pytest.param(8, "1.25", 10_000_000, id="eight GPUs at $1.25 per GPU-hour cost $10 an hour, not zero"),
        pytest.param(1, Decimal("0.333333"), 333_333, id="one GPU at a Decimal price keeps every micro-dollar"),
    ],
)
def test_onprem_pool_is_priced_per_gpu_hour(gpus, price, hourly):
    offer = onprem_offer("lab-a100", gpus, "A100", price)
    assert offer.tier is Tier.ONPREM and offer.cloud == "local"
    assert offer.region == offer.zone == offer.location == "lab-a100"
    assert offer.price_per_hour == hourly and offer.accelerator_count == gpus


@pytest.fixture
def broker_table(tmp_path, monkeypatch):
    """The broker's cached price table, empty, over a HOME of its own and a clock the test moves."""
    from broker import offers as broker_offers

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("SKY_RUNTIME_DIR", raising=False)  # SkyPilot's catalog in HOME, as without it
    for cache in ("_tables", "_checked", "_joined"):
        monkeypatch.setattr(broker_offers, cache, {})
    clock = [1000.0]
    monkeypatch.setattr(broker_offers.time, "monotonic", lambda: clock[0])
    return broker_offers, clock


def home_catalog(tmp_path, broker_table):
    """A SkyPilot catalog in the test's HOME with one g5.xlarge at $0.40/h spot: its file, the CSV header, the
    spot price the broker quotes now, and the broker's clock."""
    broker_offers, clock = broker_table
    vms = tmp_path / ".sky" / "catalogs" / "v8" / "aws" / "vms.csv"
    vms.parent.mkdir(parents=True)
    header = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,AvailabilityZone\n"
    vms.write_text(header + "g5.xlarge,A10G,1,4,16,1.006,0.40,us-east-1,use1-az1\n")

    def spot_price():
        return next(o.price_per_hour for o in broker_offers._price_table() if o.tier.value == "spot")

    return vms, header, spot_price, clock


def test_a_long_running_broker_prices_from_the_catalog_skypilot_refreshed(tmp_path, broker_table):
    """SkyPilot rewrites ~/.sky/catalogs/v8 every few hours; the broker notices within a minute."""
    import os

    vms, header, spot_price, clock = home_catalog(tmp_path, broker_table)

    assert spot_price() == 400_000
    vms.write_text(header + "g5.xlarge,A10G,1,4,16,1.006,0.35,us-east-1,use1-az1\n")
    os.utime(vms, ns=(vms.stat().st_mtime_ns + 10**9,) * 2)
    clock[0] += 30
    assert spot_price() == 400_000  # looked at once a minute
    clock[0] += 31
    assert spot_price() == 350_000


def test_a_catalog_caught_half_written_keeps_the_prices_read_before_until_it_is_whole(tmp_path, broker_table, caplog):
    """SkyPilot's refresh rewrites the file; a broker looking in the middle of it read a cut-off line and every
    submit answered 500 until the file was whole. It keeps quoting the prices it read last, and reads the file
    again at its next look."""
    import os

    vms, header, spot_price, clock = home_catalog(tmp_path, broker_table)

    assert spot_price() == 400_000
    vms.write_text(header + "g5.xlarge,A10G,1,4,16,1.0")  # cut off mid-line
    os.utime(vms, ns=(vms.stat().st_mtime_ns + 10**9,) * 2)
    clock[0] += 61
    assert spot_price() == 400_000
    assert "not re-read, keeping the prices read before" in caplog.text and str(vms) in caplog.text
    vms.write_text(header + "g5.xlarge,A10G,1,4,16,1.006,0.35,us-east-1,use1-az1\n")
    os.utime(vms, ns=(vms.stat().st_mtime_ns + 2 * 10**9,) * 2)
    clock[0] += 61
    assert spot_price() == 350_000


GCP_V100 = ",,,V100,1,V100,us-central1,us-central1-a,{price},{spot}"


def _gcp_catalog(home: Path, gpu_price: str = "2.48", gpu_spot: str = "0.992") -> Path:
    """A SkyPilot v8 GCP ``vms.csv`` under ``home`` (host VM rows plus a separately priced GPU row)."""
    vms = home / ".sky" / "catalogs" / "v8" / "gcp" / "vms.csv"
    vms.parent.mkdir(parents=True, exist_ok=True)
    vms.write_text(GCP_HEADER + "\n".join([*GCP_VMS, GCP_V100.format(price=gpu_price, spot=gpu_spot)]) + "\n")
    return vms


def test_skypilots_catalog_is_read_under_its_runtime_folder_when_sky_runtime_dir_is_set(tmp_path, monkeypatch):
    """SkyPilot reads and writes its catalog under ``$SKY_RUNTIME_DIR`` when that is set; the broker read HOME's,
    quoting prices the optimizer did not see and never finding the GCP catalog ``sky show-gpus`` had fetched."""
    home, runtime = tmp_path / "home", tmp_path / "runtime"
    stale = _gcp_catalog(home, gpu_spot="0.10")  # a catalog SkyPilot no longer reads
    vms = _gcp_catalog(runtime)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("SKY_RUNTIME_DIR", str(runtime))
    assert [f[0] for f in catalog_files(clouds=("gcp",))] == [str(vms)]
    monkeypatch.setenv("SKY_RUNTIME_DIR", "")  # set but empty: as unset, the home folder's
    assert [f[0] for f in catalog_files(clouds=("gcp",))] == [str(stale)]
    monkeypatch.delenv("SKY_RUNTIME_DIR")
    assert [f[0] for f in catalog_files(clouds=("gcp",))] == [str(stale)]


def test_gcp_is_priced_from_skypilots_catalog_beside_aws(tmp_path):
    _gcp_catalog(tmp_path)
    offers = load_price_table(home=tmp_path)
    assert {o.cloud for o in offers} == {"aws", "gcp"}, "AWS from the shipped snapshot, GCP from ~/.sky"
    v100 = {(o.tier, o.zone, o.instance_type): o.price_per_hour for o in offers
            if o.cloud == "gcp" and matches(o, ResourceRequest("V100", 1))}  # the host a task asking V100:1 gets
    assert v100 == {(Tier.ONDEMAND, "us-central1-a", "n1-highmem-8+V100:1"): 2_953_210,
                    (Tier.SPOT, "us-central1-a", "n1-highmem-8+V100:1"): 1_091_620}
    assert load_price_table(home=tmp_path, clouds=("aws",)) == tuple(o for o in offers if o.cloud == "aws")


def test_gcp_has_no_shipped_snapshot_so_without_skypilots_catalog_it_has_no_offers(tmp_path):
    assert not (SNAPSHOT_DIR / "gcp").exists()
    assert {o.cloud for o in load_price_table(home=tmp_path)} == {"aws"}
    assert catalog_files(home=tmp_path) == catalog_files(home=tmp_path, clouds=("aws",))


def test_a_gpus_own_vm_is_never_offered_without_its_gpus(tmp_path):
    """An a2-highgpu-1g alone at its VM price ($0.74/h) would be a quote $2.93/h short of what GCP bills
    (and what SkyPilot launches: the A100 comes with it)."""
    text = GCP_HEADER + "\n".join([*GCP_VMS, ",,,A100,1,A100,us-central1,us-central1-a,2.933908,1.173563"])
    a2 = [o for o in parse_vms_csv(text, "gcp") if o.instance_type.startswith("a2-")]
    assert {(o.instance_type, o.accelerator, o.tier, o.price_per_hour) for o in a2} == {
        ("a2-highgpu-1g+A100:1", "A100", Tier.ONDEMAND, 3_673_388), ("a2-highgpu-1g+A100:1", "A100", Tier.SPOT, 1_543_313)}
    assert any(o.instance_type == "n1-standard-1" for o in parse_vms_csv(text, "gcp")), "a plain VM is still offered"


def test_a_malformed_gcp_catalog_in_home_is_an_error_naming_the_file(tmp_path):
    vms = _gcp_catalog(tmp_path, gpu_price="NaN")
    with pytest.raises(CatalogError, match=re.escape(f"price catalog {vms}: line {len(GCP_VMS) + 2}: Price 'NaN'")):
        load_price_table(home=tmp_path)
    load_price_table(home=tmp_path, clouds=("aws",))  # a cloud not priced is not read


def test_the_broker_notices_a_gcp_catalog_appearing_and_refreshing(tmp_path, broker_table):
    """SkyPilot downloads a cloud's catalog the first time it is used, then refreshes it every 7 hours."""
    import os

    broker_offers, clock = broker_table

    def gcp_spot():
        return sorted(o.price_per_hour for o in broker_offers._price_table(("aws", "gcp"))
                      if o.cloud == "gcp" and o.tier is Tier.SPOT and matches(o, ResourceRequest("V100", 1)))

    assert gcp_spot() == []
    vms = _gcp_catalog(tmp_path)
    clock[0] += 61
    assert gcp_spot() == [1_091_620]
    assert [f[0] for f in catalog_files(home=tmp_path)] == [str(SNAPSHOT_DIR / "aws" / "vms.csv"), str(vms)]
    _gcp_catalog(tmp_path, gpu_spot="0.80")
    os.utime(vms, ns=(vms.stat().st_mtime_ns + 10**9,) * 2)
    clock[0] += 61
    assert gcp_spot() == [899_620]
    assert {o.cloud for o in broker_offers._price_table(("aws",))} == {"aws"}, "each setting gets its own clouds"
    assert gcp_spot() == [899_620]



def test_zones_are_named_as_the_cloud_account_skypilot_fetched_names_them_the_newest_account_last(tmp_path):
    """AWS names zones per account: SkyPilot fetches the account's names at its first launch into
    ``az_mappings-<account hash>.csv`` and pins launches by them. The broker must quote and place by the same
    names, and notice the file appearing (a zone named by the default mapping is another zone for SkyPilot)."""
    import os

    aws = tmp_path / ".sky" / "catalogs" / "v8" / "aws"
    aws.mkdir(parents=True)
    (aws / "vms.csv").write_text(AWS_HEADER + "p3dn.24xlarge,V100-32GB,8.0,96.0,768.0,,31.212,8.2921,us-east-1,use1-az1,x86_64\n")
    before = catalog_files(home=tmp_path)
    assert {o.zone for o in load_price_table(home=tmp_path)} == {"us-east-1d"}  # the default mapping's name

    header = "AvailabilityZoneName,AvailabilityZone\n"
    older, newer = aws / "az_mappings-zzzzzzz0.csv", aws / "az_mappings-aaaaaaaa.csv"  # not by name
    newer.write_text(header + "us-east-1b,use1-az1\n")
    older.write_text(header + "us-east-1f,use1-az1\n")
    os.utime(older, ns=(newer.stat().st_mtime_ns - 10**9,) * 2)
    assert catalog_files(home=tmp_path) != before, "the account's zone names appearing makes the price table stale"
    assert {o.zone for o in load_price_table(home=tmp_path)} == {"us-east-1b"}, "the newest account's names win"
