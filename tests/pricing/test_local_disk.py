"""``resources.local_disk`` in the price table and in placement, as tables of cases.

SkyPilot launches a task asking ``local_disk: nvme:1000+`` only on an instance type whose catalog row says it has
that disk (``sky.Resources._try_validate_local_disk``: "Specified instance type p3.2xlarge does not have specified
local disk"), and only on a cloud that selects one (AWS; not GCP nor Kubernetes). Placement ignored the field, so
the job was accepted, queued and placed on a type whose launch then failed. Now the price table reads the
catalog's optional ``LocalDisk*`` / ``NVMeSupported`` columns, and placement gives a local disk only to an offer
known to have it, saying in its no-fit sentence what the price table knows when none does.

``pricing`` never imports ``sky``: its rules are written again (:class:`pricing.offers.LocalDisk`), and the first
two tables hold them to the installed SkyPilot's own functions.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from decimal import Decimal

import pytest

from pricing.catalog import CatalogError, onprem_offer, parse_vms_csv
from pricing.loading import load_price_table
from pricing.offers import JobRequest, LocalDisk, Offer, ResourceRequest, Tier
from pricing.placement import NoFit, Placement, place

SKYPILOT_RULES = """
import json, sys
from sky.utils import resources_utils
forms, pairs = json.load(sys.stdin)
print(json.dumps([[resources_utils.normalize_local_disk(f) for f in forms],
                  [resources_utils.local_disk_satisfied(asked, has) for asked, has in pairs]]))
"""


def skypilots(forms, pairs, tmp_path):
    """SkyPilot's own ``normalize_local_disk`` of ``forms`` and ``local_disk_satisfied`` of ``pairs``, run by a Python
    of its own under a HOME of the test's (in this process only the launchers' tests' HOME may import ``sky``)."""
    env = {**os.environ, "HOME": str(tmp_path), "SKY_RUNTIME_DIR": str(tmp_path),
           "SKYPILOT_DISABLE_USAGE_COLLECTION": "1"}
    done = subprocess.run([sys.executable, "-c", SKYPILOT_RULES], input=json.dumps([forms, pairs]), env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])

# --- the forms SkyPilot takes, and its rule for a pinned instance type ------------------------------

FORMS = [
    pytest.param("nvme:1000+", "nvme:1000+", id="nvme:1000+ is an NVMe disk of at least 1000 GB"),
    pytest.param("ssd:500", "ssd:500", id="ssd:500 is an SSD of exactly 500 GB"),
    pytest.param("nvme", "nvme:100+", id="nvme alone is at least 100 GB"),
    pytest.param("ssd", "ssd:100+", id="ssd alone is at least 100 GB"),
    pytest.param("1000+", "nvme:1000+", id="a size alone is NVMe"),
    pytest.param("750", "nvme:750", id="a size alone without + is exactly that size of NVMe"),
    pytest.param(" NVMe:2000+ ", "nvme:2000+", id="case and spaces around are read as SkyPilot reads them"),
]


@pytest.mark.parametrize("text, normal", FORMS)
def test_a_local_disk_reads_as_skypilot_normalizes_it(text, normal):
    assert str(LocalDisk.parse(text)) == normal


REFUSED = [
    pytest.param("hdd:500", "is not a local disk", id="an HDD is no local disk SkyPilot selects"),
    pytest.param("nvme:1000:x", "is not a local disk", id="three parts are no local disk"),
    pytest.param("nvme:big", "is not a local disk", id="a size that is no number is refused"),
    pytest.param("nvme:", "is not a local disk", id="a mode with no size after its colon is refused"),
    pytest.param("nvme:0", "more than 0 GB", id="a size of 0 is refused"),
    pytest.param("-5", "more than 0 GB", id="a negative size is refused"),
    pytest.param("nvme:inf", "more than 0 GB", id="an endless size SkyPilot would take is refused, no instance has it"),
    pytest.param("nvme:nan", "more than 0 GB", id="nan SkyPilot would take is refused"),
]


@pytest.mark.parametrize("text, says", REFUSED)
def test_a_value_that_is_no_local_disk_is_refused_naming_the_forms(text, says):
    with pytest.raises(ValueError) as refused:
        LocalDisk.parse(text)
    assert says in str(refused.value) and '"nvme:1000+"' in str(refused.value) and '"1000+"' in str(refused.value)


SATISFIED = [
    pytest.param("nvme:500+", "nvme:1000", True, id="1000 GB of NVMe gives at least 500"),
    pytest.param("nvme:1000+", "nvme:500", False, id="500 GB of NVMe does not give at least 1000"),
    pytest.param("ssd:500+", "nvme:1000", True, id="NVMe gives an SSD asked"),
    pytest.param("nvme:500+", "ssd:1000", False, id="an SSD without NVMe does not give NVMe"),
    pytest.param("nvme:500", "nvme:500", True, id="exactly the size asked"),
    pytest.param("nvme:500", "nvme:600", False, id="a larger disk is not exactly the size asked"),
    pytest.param("ssd:900", "ssd:900.5", True, id="within 1 GB is exactly the size"),
]


@pytest.mark.parametrize("asked, has, fits", SATISFIED)
def test_an_instance_gives_the_disk_asked_as_skypilot_checks_a_pinned_type(asked, has, fits):
    assert LocalDisk.parse(has).satisfies(LocalDisk.parse(asked)) is fits


def test_both_tables_are_what_the_installed_skypilot_says(tmp_path):
    """The forms and the rule written again here, held to SkyPilot's own functions in one run of them."""
    forms = [p.values[0] for p in FORMS]
    pairs = [list(p.values[:2]) for p in SATISFIED]
    normal, satisfied = skypilots(forms, pairs, tmp_path)
    assert normal == [p.values[1] for p in FORMS]
    assert satisfied == [p.values[2] for p in SATISFIED]


# --- the price table ---------------------------------------------------------------------------------

HEADER = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,AvailabilityZone"
DISK_HEADER = HEADER + ",LocalDiskType,LocalDiskSize,LocalDiskCount,NVMeSupported"


@pytest.mark.parametrize("cells, disk", [
    pytest.param("ssd,1900,1,True", "nvme:1900", id="an SSD that takes NVMe is an NVMe disk"),
    pytest.param("ssd,450,2,False", "ssd:900", id="two SSDs without NVMe are one SSD size, their total"),
    pytest.param("ssd,237.5,2,true", "nvme:475", id="the total in whole GB, NVMeSupported in any case"),
    pytest.param("ssd,900,1,", "ssd:900", id="an empty NVMeSupported is no NVMe"),
    pytest.param("hdd,2000,2,False", None, id="an HDD is not known, SkyPilot selects none"),
    pytest.param(",,,", None, id="empty cells are not known"),
    pytest.param("ssd,,1,True", None, id="an SSD with no size is not known"),
])
def test_a_row_with_the_local_disk_columns_gives_the_offer_its_disk(cells, disk):
    text = f"{DISK_HEADER}\np3dn.24xlarge,V100,8,96,768,31.212,9.36,us-east-1,use1-az1,{cells}\n"
    offers = parse_vms_csv(text, "aws")
    assert {str(o.local_disk) if o.local_disk else None for o in offers} == {disk}
    assert {o.tier for o in offers} == {Tier.ONDEMAND, Tier.SPOT}


@pytest.mark.parametrize("cells, says", [
    pytest.param("ssd,lots,1,True", "LocalDiskSize 'lots' is not a number", id="a size that is no number is named"),
    pytest.param("ssd,900,-1,True", "LocalDiskCount '-1' is not a number", id="a negative count is named"),
    pytest.param("ssd,900,1,maybe", "NVMeSupported 'maybe' is not True or False", id="an NVMe flag of another word"),
])
def test_a_local_disk_cell_that_cannot_be_read_is_refused_naming_line_and_column(cells, says):
    text = f"{DISK_HEADER}\np3dn.24xlarge,V100,8,96,768,31.212,9.36,us-east-1,use1-az1,{cells}\n"
    with pytest.raises(CatalogError) as refused:
        parse_vms_csv(text, "aws")
    assert str(refused.value) == f"line 2: {says}"


def catalog(root, header, *rows):
    vms = root / "aws" / "vms.csv"
    vms.parent.mkdir(parents=True)
    vms.write_text("\n".join([header, *rows]) + "\n")
    return root


def test_the_loader_reads_the_local_disk_of_a_catalog_that_has_the_columns(tmp_path):
    root = catalog(tmp_path / "cat", DISK_HEADER,
                   "p3.2xlarge,V100,1,8,61,3.06,0.91,us-east-1,use1-az1,,,,",
                   "p3dn.24xlarge,V100,8,96,768,31.212,9.36,us-east-1,use1-az1,ssd,900,2,True")
    table = load_price_table(root, clouds=("aws",), home=tmp_path)
    assert {(o.instance_type, o.tier): (str(o.local_disk) if o.local_disk else None) for o in table} == {
        ("p3.2xlarge", Tier.ONDEMAND): None, ("p3.2xlarge", Tier.SPOT): None,
        ("p3dn.24xlarge", Tier.ONDEMAND): "nvme:1800", ("p3dn.24xlarge", Tier.SPOT): "nvme:1800"}


def test_a_catalog_without_the_columns_loads_as_before_with_no_local_disk_known(tmp_path):
    root = catalog(tmp_path / "cat", HEADER, "p3.2xlarge,V100,1,8,61,3.06,0.91,us-east-1,use1-az1")
    table = load_price_table(root, clouds=("aws",), home=tmp_path)
    assert [(o.tier, o.price_per_hour, o.local_disk) for o in table] == [(Tier.ONDEMAND, 3_060_000, None),
                                                                        (Tier.SPOT, 910_000, None)]


def test_the_shipped_snapshot_knows_no_local_disk(tmp_path):
    """Guard: the snapshot has no local-disk columns, so a local_disk is placed only from SkyPilot's own catalog."""
    table = load_price_table(clouds=("aws",), home=tmp_path)
    assert table and all(o.local_disk is None for o in table)


# --- placement -----------------------------------------------------------------------------------------


def aws(name, price, disk=None, tier=Tier.ONDEMAND, acc="V100", count=1, cloud="aws", simulated=False):
    return Offer(tier, cloud, "us-east-1", "us-east-1a", name, acc, count, price, vcpus=Decimal(8),
                 memory_gib=Decimal(61), simulated=simulated,
                 local_disk=LocalDisk.parse(disk) if disk else None)


def asks(disk, acc="V100", count=1, **kw):
    return JobRequest(alternatives=(ResourceRequest(acc, count, local_disk=LocalDisk.parse(disk) if disk else None,
                                                    **kw),))


NVME_TABLE = [
    aws("p3.2xlarge", 910_000, tier=Tier.SPOT),  # the cheapest V100, no local disk known
    aws("g4-ssd.xlarge", 1_500_000, "ssd:2000"),  # an SSD without NVMe
    aws("p3-small.xlarge", 2_000_000, "nvme:500"),
    aws("p3dn.xlarge", 4_000_000, "nvme:1900"),
    aws("p3dn.2xlarge", 6_000_000, "nvme:3800"),
]

PLACED = [
    pytest.param(asks("nvme:1000+"), NVME_TABLE, "p3dn.xlarge",
                 id="nvme:1000+ takes the cheapest instance with enough NVMe, not a cheaper one without"),
    pytest.param(asks("nvme"), NVME_TABLE, "p3-small.xlarge", id="nvme alone takes the cheapest with 100+ GB of NVMe"),
    pytest.param(asks("ssd:1000+"), NVME_TABLE, "g4-ssd.xlarge", id="an SSD asked takes an SSD"),
    pytest.param(asks("ssd:3000+"), NVME_TABLE, "p3dn.2xlarge", id="an SSD asked takes NVMe when only NVMe is large"),
    pytest.param(asks("nvme:1900"), NVME_TABLE, "p3dn.xlarge", id="an exact size takes only that size"),
    pytest.param(asks(None), NVME_TABLE, "p3.2xlarge", id="no local disk asked is placed as before, disk or none"),
]


@pytest.mark.parametrize("request_, offers, instance", PLACED)
def test_placement_gives_the_local_disk_asked(request_, offers, instance):
    got = place(request_, offers)
    assert isinstance(got, Placement), got
    assert got.offer.instance_type == instance


POOL = onprem_offer("lab", 1, "V100", "0.50")
GCP = aws("n1-highmem-8+V100:1", 1_000_000, "nvme:3000", cloud="gcp")
SIM = aws("p3dn.xlarge", 100_000, "nvme:1900", simulated=True)

NO_FIT = [
    pytest.param(asks("nvme:1000+"), [aws("p3.2xlarge", 3_060_000), aws("p3.2xlarge", 910_000, tier=Tier.SPOT)],
                 "no offer has 1x V100 with local disk nvme:1000+: resources.local_disk needs an instance type whose "
                 "local disk the price table knows, and the price table lists no instance's local disk: a SkyPilot "
                 "catalog with the LocalDiskType, LocalDiskSize, LocalDiskCount and NVMeSupported columns in "
                 "~/.sky/catalogs/v8 provides them",
                 id="a price table that knows no local disk says so and where SkyPilot's catalog gives them"),
    pytest.param(asks("nvme:4000+"), NVME_TABLE,
                 "no offer has 1x V100 with local disk nvme:4000+: resources.local_disk fits none of the instance "
                 "types that fit otherwise, whose local disks are nvme:500, nvme:1900, ssd:2000, nvme:3800 or not known",
                 id="a disk larger than any known says the disks there are"),
    pytest.param(asks("nvme:500+"), [POOL, GCP],
                 "no offer has 1x V100 with local disk nvme:500+: resources.local_disk is given only by a cloud "
                 "instance type on AWS, where SkyPilot selects one by its local disk, and every offer of that shape "
                 "here is an on-prem pool or on GCP",
                 id="a pool and GCP give no local disk, whatever their catalog says"),
    pytest.param(asks("nvme:500+"), [SIM],
                 "no offer has 1x V100 with local disk nvme:500+: resources.local_disk is given only by a cloud "
                 "instance type on AWS, where SkyPilot selects one by its local disk, and every offer of that shape "
                 "here is a simulated zone",
                 id="a simulated zone is a process on this host, with no disk it can promise"),
]


@pytest.mark.parametrize("request_, offers, reason", NO_FIT)
def test_no_fit_for_a_local_disk_says_what_the_price_table_knows(request_, offers, reason):
    got = place(request_, offers)
    assert isinstance(got, NoFit), got
    assert got.reason == reason


def test_an_any_of_alternative_without_a_local_disk_is_placed_when_the_disk_cannot_be():
    """Guard: a local disk narrows only its own alternative."""
    request_ = JobRequest(alternatives=(ResourceRequest("V100", 1, local_disk=LocalDisk.parse("nvme:9000+")),
                                        ResourceRequest("V100", 1)))
    got = place(request_, NVME_TABLE)
    assert isinstance(got, Placement) and got.offer.instance_type == "p3.2xlarge"
