"""``resources.local_disk`` and ``resources.ephemeral_storage`` at submit.

``local_disk`` was accepted and queued whatever it asked, placed on an instance type the price table knew nothing of
the disk of, and its SkyPilot launch failed ("Specified instance type p3.2xlarge does not have specified local
disk"). Now it is read as SkyPilot normalizes it (a value SkyPilot refuses is a 422 naming the field and the forms
taken), and a job no offer can give it is refused at submit with placement's sentence saying what the price table
knows. ``ephemeral_storage`` SkyPilot 0.14 drops without a word: it is refused, pointing to ``disk_size``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from fastapi.testclient import TestClient

from broker.api.app import create_app
from broker.spec import SpecError, parse
from broker.store import open_store

from broker_testing import ADMIN

ADMIN_H = {"Authorization": f"Bearer {ADMIN}"}
TEAM_H = {"Authorization": "Bearer vision-token"}
NOW = 1_800_000_000.0


READ = [
    pytest.param({"local_disk": "nvme:1000+"}, ["nvme:1000+"], id="nvme:1000+ is read as written"),
    pytest.param({"local_disk": "NVMe"}, ["nvme:100+"], id="nvme alone is at least 100 GB, in any case"),
    pytest.param({"local_disk": "1000+"}, ["nvme:1000+"], id="a size alone is NVMe"),
    pytest.param({"local_disk": "ssd:500"}, ["ssd:500"], id="ssd:500 is exactly 500 GB of SSD"),
    pytest.param({"local_disk": "nvme:500+", "any_of": [{"cpus": 2}, {"local_disk": "ssd:900"}]},
                 ["nvme:500+", "ssd:900"], id="an any_of entry's own local_disk replaces the one around it"),
    pytest.param({"ordered": [{"accelerators": "V100:1", "local_disk": "nvme"}, {"accelerators": "T4:1"}]},
                 ["nvme:100+", None], id="an ordered entry without one asks for none"),
    pytest.param({"cpus": 2}, [None], id="no local_disk asks for none"),
]


@pytest.mark.parametrize("resources, disks", READ)
def test_a_local_disk_is_read_into_each_alternative(resources, disks):
    spec = parse({"run": "echo hi", "resources": resources}, now=NOW)
    assert [str(a.local_disk) if a.local_disk else None for a in spec.request.alternatives] == disks


REFUSED = [
    pytest.param({"local_disk": "hdd:500"}, "resources.local_disk", "is not a local disk",
                 id="an HDD is refused naming resources.local_disk"),
    pytest.param({"local_disk": "nvme:0"}, "resources.local_disk", "more than 0 GB", id="a size of 0 is refused"),
    pytest.param({"local_disk": 1000}, "resources.local_disk", "must be a string",
                 id="a number is refused, as SkyPilot's schema takes a string alone"),
    pytest.param({"any_of": [{"cpus": 2}, {"local_disk": "nvme:lots"}]}, "resources.any_of[1].local_disk",
                 "is not a local disk", id="a bad one in an any_of entry names the entry"),
    pytest.param({"ordered": [{"local_disk": "x:1"}, {"cpus": 2}]}, "resources.ordered[0].local_disk",
                 "is not a local disk", id="a bad one in an ordered entry names the entry"),
]


@pytest.mark.parametrize("resources, field, says", REFUSED)
def test_a_local_disk_skypilot_would_refuse_is_refused_naming_the_field_and_the_forms(resources, field, says):
    with pytest.raises(SpecError) as refused:
        parse({"run": "echo hi", "resources": resources}, now=NOW)
    assert refused.value.field == field and says in refused.value.reason
    assert '"nvme:1000+"' in refused.value.reason and '"ssd:500"' in refused.value.reason


@pytest.mark.parametrize("resources, field", [
    pytest.param({"ephemeral_storage": "10GB"}, "resources.ephemeral_storage", id="ephemeral_storage"),
    pytest.param({"any_of": [{"cpus": 2}, {"ephemeral_storage": "10GB"}]}, "resources.any_of[1].ephemeral_storage",
                 id="ephemeral_storage in an any_of entry"),
])
def test_ephemeral_storage_is_refused_pointing_to_disk_size(resources, field):
    with pytest.raises(SpecError) as refused:
        parse({"run": "echo hi", "resources": resources}, now=NOW)
    assert refused.value.field == field and "disk_size" in refused.value.reason


@pytest.mark.parametrize("resources", [
    pytest.param({"ephemeral_storage": "10GB"}, id="with ephemeral_storage"),
    pytest.param({"local_disk": "hdd:500"}, id="with a local_disk that is no local disk, read as none"),
])
def test_a_job_stored_before_the_refusal_is_still_read(resources):
    """The engine reads stored specs with ``strict=False``: a job queued before keeps its place."""
    spec = parse({"run": "echo hi", "resources": resources}, now=NOW, strict=False)
    assert [a.local_disk for a in spec.request.alternatives] == [None]


# --- through the HTTP API ---------------------------------------------------------------------------------

SKYPILOT_BROKER = """
import json, sys
from pathlib import Path
from fastapi.testclient import TestClient
from broker import offers as broker_offers
from broker.api.app import create_app
from broker.config import load_settings
from broker.engine.schedule import Place, schedule
from broker.offers import market
from broker.store import open_store

payload = json.load(sys.stdin)
home = Path(payload["home"])
settings = load_settings({"BROKER_DATA_DIR": str(home / "data"), "BROKER_ADMIN_TOKEN": payload["admin"],
                          "BROKER_TEAM_TOKENS": '{"vision": "vision-token"}', "BROKER_LAUNCHER": "skypilot",
                          "BROKER_CLOUDS": "aws"})
store = open_store(f"sqlite://{home / 'disk.db'}")
out = {}
with TestClient(create_app(settings, store=store, engine=False), raise_server_exceptions=False) as client:
    for name, catalog, task in payload["scenarios"]:
        if catalog is not None:  # SkyPilot's own catalog, read again at once (the price table's cache emptied)
            vms = home / ".sky" / "catalogs" / "v8" / "aws" / "vms.csv"
            vms.parent.mkdir(parents=True, exist_ok=True)
            vms.write_text(catalog)
            for cache in (broker_offers._tables, broker_offers._checked, broker_offers._joined):
                cache.clear()
        r = client.post("/v1/jobs", json=task, headers={"Authorization": "Bearer vision-token"})
        got = {"status": r.status_code, "body": r.json(), "quoted": None, "placed": None}
        if r.status_code == 201:
            job = store.get_job(r.json()["id"])
            got["quoted"] = sorted({t["offer"].split()[3] for t in job.quote["tiers"]})
            (placed,) = schedule([job], market(settings, []), now=job.submitted_at + 1)
            got["placed"] = placed.placement["instance_type"] if isinstance(placed, Place) else repr(placed)
        out[name] = got
print(json.dumps(out))
"""
"""A broker with the SkyPilot launcher pricing AWS from SkyPilot's catalog under a HOME of its own, each scenario a
submit through the HTTP API (and for one accepted, the engine's placement): in a Python of its own, as the launcher
checks each task with ``sky`` itself, which in this process only the launchers' tests' HOME may import."""

HEADER = ("InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,AvailabilityZone,"
          "LocalDiskType,LocalDiskSize,LocalDiskCount,NVMeSupported\n")
ROWS = ("p3.2xlarge,V100,1,8,61,3.06,0.91,us-east-1,use1-az1,,,,\n"
        "p3dn.xlarge,V100,1,8,61,4.00,1.50,us-east-1,use1-az1,ssd,1900,1,True\n")
TASK = {"run": "python train.py", "resources": {"infra": "aws", "accelerators": "V100:1", "local_disk": "nvme:1000+"},
        "broker": {"budget_usd": 100}}
SCENARIOS = [  # in order: the first prices from the shipped snapshot (T4s on g4dn, no local-disk columns)
    ("snapshot", None, {**TASK, "resources": {**TASK["resources"], "accelerators": "T4:1"}}),
    ("with the columns", HEADER + ROWS, TASK),
    ("without local_disk", None, {**TASK, "resources": {"infra": "aws", "accelerators": "V100:1"}}),
    ("ephemeral_storage", None, {**TASK, "resources": {"infra": "aws", "ephemeral_storage": "10GB"}}),
]


@pytest.fixture(scope="module")
def submitted(tmp_path_factory):
    home = tmp_path_factory.mktemp("skypilot-home")
    env = {**os.environ, "HOME": str(home), "SKY_RUNTIME_DIR": str(home), "SKYPILOT_DISABLE_USAGE_COLLECTION": "1"}
    done = subprocess.run([sys.executable, "-c", SKYPILOT_BROKER], input=json.dumps(
        {"home": str(home), "admin": ADMIN, "scenarios": SCENARIOS}), env=env, capture_output=True, text=True,
        timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_local_disk_no_offer_can_give_is_refused_at_submit_not_queued(make_settings, tmp_path):
    """Under the local launcher the offers are pools and simulated zones, which promise no disk."""
    settings = make_settings()
    client = TestClient(create_app(settings, store=open_store(f"sqlite://{tmp_path / 'a.db'}"), engine=False),
                        raise_server_exceptions=False)
    with client:
        r = client.post("/v1/jobs", json={"run": "echo hi", "resources": {"local_disk": "nvme:1000+"}},
                        headers=TEAM_H)
        assert r.status_code == 422, r.text
        assert "resources.local_disk" in r.json()["detail"] and r.json()["field"] == "resources.local_disk", r.text
        assert client.get("/v1/jobs", headers=ADMIN_H).json()["jobs"] == [], "nothing was stored"


def test_a_local_disk_the_shipped_price_table_cannot_place_is_refused_saying_what_it_lacks(submitted):
    got = submitted["snapshot"]
    assert got["status"] == 422 and got["body"]["field"] == "resources.local_disk", got
    detail = got["body"]["detail"]
    assert "resources.local_disk" in detail and "lists no instance's local disk" in detail, detail
    assert "~/.sky/catalogs/v8" in detail, detail


def test_an_any_of_entry_asking_a_local_disk_nothing_gives_is_the_field_blamed(make_settings, tmp_path):
    settings = make_settings()
    client = TestClient(create_app(settings, store=open_store(f"sqlite://{tmp_path / 'a.db'}"), engine=False),
                        raise_server_exceptions=False)
    task = {"run": "echo hi", "resources": {"any_of": [{"cpus": "1+", "local_disk": "nvme"},
                                                       {"cpus": "2+", "local_disk": "ssd:500"}]}}
    with client:
        r = client.post("/v1/jobs", json=task, headers=TEAM_H)
        assert r.status_code == 422 and r.json()["field"] == "resources", r.text  # two entries ask one: the list
        task["resources"]["any_of"][0].pop("local_disk")
        task["resources"]["any_of"][0]["cpus"] = "10000+"  # the first fits nothing however its disk
        r = client.post("/v1/jobs", json=task, headers=TEAM_H)
        assert r.status_code == 422 and r.json()["field"] == "resources.any_of[1].local_disk", r.text


def test_a_local_disk_is_accepted_and_placed_on_the_instance_that_has_it(submitted):
    got = submitted["with the columns"]
    assert got["status"] == 201, got
    assert (got["quoted"], got["placed"]) == (["p3dn.xlarge"], "p3dn.xlarge"), got


def test_the_same_task_without_a_local_disk_takes_the_cheaper_instance(submitted):
    """Guard: the disk is what moved the placement."""
    got = submitted["without local_disk"]
    assert got["status"] == 201 and got["placed"] == "p3.2xlarge", got


def test_ephemeral_storage_is_refused_at_submit_under_the_skypilot_launcher(submitted):
    got = submitted["ephemeral_storage"]
    assert got["status"] == 422, got
    assert got["body"]["field"] == "resources.ephemeral_storage" and "disk_size" in got["body"]["detail"], got
