"""The price table: SkyPilot v8 catalog rows and on-prem pools as offers."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

import pytest

from pricing.catalog import CatalogError, onprem_offer, parse_az_mappings, parse_vms_csv
from pricing.loading import SNAPSHOT_DIR, load_price_table
from pricing.offers import Tier

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
                     id="8x V100 rides an n1 VM with the 64 vCPUs and 256 GiB SkyPilot gives it, not n1-standard-1"),
        pytest.param(",,,T4,1,,us-central1,us-central1-a,0.35,0.14", ("n1-highmem-8+T4:1", 823_210, 239_620),
                     id="1x T4 rides the cheapest n1 VM with 4+ vCPUs and 16+ GiB"),
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
    instance_type, ondemand, spot = expected
    assert {(o.instance_type, o.tier, o.price_per_hour) for o in offers} == {
        (instance_type, Tier.ONDEMAND, ondemand), (instance_type, Tier.SPOT, spot)}


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


def test_a_long_running_broker_prices_from_the_catalog_skypilot_refreshed(tmp_path, monkeypatch):
    """SkyPilot rewrites ~/.sky/catalogs/v8 every few hours; the broker notices within a minute."""
    import os

    from broker import offers as broker_offers

    vms = tmp_path / ".sky" / "catalogs" / "v8" / "aws" / "vms.csv"
    vms.parent.mkdir(parents=True)
    header = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,AvailabilityZone\n"
    vms.write_text(header + "g5.xlarge,A10G,1,4,16,1.006,0.40,us-east-1,use1-az1\n")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(broker_offers, "_table", None)
    clock = [1000.0]
    monkeypatch.setattr(broker_offers.time, "monotonic", lambda: clock[0])

    def spot_price():
        return next(o.price_per_hour for o in broker_offers._price_table() if o.tier.value == "spot")

    assert spot_price() == 400_000
    vms.write_text(header + "g5.xlarge,A10G,1,4,16,1.006,0.35,us-east-1,use1-az1\n")
    os.utime(vms, ns=(vms.stat().st_mtime_ns + 10**9,) * 2)
    clock[0] += 30
    assert spot_price() == 400_000  # looked at once a minute
    clock[0] += 31
    assert spot_price() == 350_000
