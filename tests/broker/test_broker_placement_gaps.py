"""Placement gaps found by an audit, through the broker: a job of more nodes than any simulated zone has is
refused at submit naming ``num_nodes`` (it was accepted and waited for ever), a pool given both names of its price
(or of its size) is refused naming both, and a catalog emptied while SkyPilot rewrites it keeps the prices read."""

from __future__ import annotations

import os

import pytest
from fastapi.testclient import TestClient

from broker.api.app import create_app
from broker.config import ConfigError
from broker.store import open_store

from broker_testing import ADMIN

AUTH = {"Authorization": f"Bearer {ADMIN}"}


def zones_config(*nodes: int) -> str:
    """Simulated on-demand g5.xlarge zones sim-0, sim-1, ... of these node counts, at $1/h a node."""
    return "zones:\n" + "".join(f"  - {{name: sim-{i}, tier: ondemand, instance_type: g5.xlarge, nodes: {n}, "
                                f"price_per_hour: \"1.00\"}}\n" for i, n in enumerate(nodes))


@pytest.fixture
def broker(make_settings, tmp_path):
    """A client of a broker with the given zones (no engine), its settings and its store."""
    opened = []

    def make(*nodes: int):
        settings = make_settings(config="pools: []\n" + zones_config(*nodes))
        store = open_store(f"sqlite://{tmp_path / 'gaps.db'}")
        client = TestClient(create_app(settings, store=store, engine=False), raise_server_exceptions=False)
        opened.append(client.__enter__())
        return client, settings, store

    yield make
    for client in opened:
        client.__exit__(None, None, None)


@pytest.mark.parametrize("zones, num_nodes, said", [
    pytest.param((4,), 8, "num_nodes: is 8, but the only zone it may use, sim-0, has 4 nodes: ask for at most that "
                          "many nodes", id="eight nodes of a broker whose one zone has four is refused naming num_nodes"),
    pytest.param((2, 4), 5, "num_nodes: is 5, but the largest zone it may use, sim-1, has 4 nodes: ask for at most "
                            "that many nodes", id="five nodes of zones of two and four is refused naming the larger"),
    pytest.param((1,), 2, "num_nodes: is 2, but the only zone it may use, sim-0, has 1 node: ask for at most that "
                          "many nodes", id="two nodes of a one-node zone is refused in the singular"),
])
def test_a_job_of_more_nodes_than_any_zone_has_is_refused_at_submit(broker, zones, num_nodes, said):
    client, _, _ = broker(*zones)
    r = client.post("/v1/jobs", json={"run": "echo hi", "num_nodes": num_nodes, "broker": {"budget_usd": 50}},
                    headers=AUTH)
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "num_nodes" and r.json()["detail"] == said, r.json()
    assert client.get("/v1/jobs", headers=AUTH).json()["jobs"] == []


@pytest.mark.parametrize("zones, num_nodes, placed", [
    pytest.param((4,), 4, "sim-0", id="as many nodes as the zone has are accepted and placed there"),
    pytest.param((2, 6), 5, "sim-1", id="five nodes with a six-node zone among the zones are accepted and placed on it"),
])
def test_a_job_some_zone_can_hold_is_accepted_and_placed_on_that_zone(broker, zones, num_nodes, placed):
    from broker.engine.schedule import Place, schedule
    from broker.offers import market

    client, settings, store = broker(*zones)
    r = client.post("/v1/jobs", json={"run": "echo hi", "num_nodes": num_nodes, "broker": {"budget_usd": 50}},
                    headers=AUTH)
    assert r.status_code == 201, r.text
    job = store.get_job(r.json()["id"])
    (decision,) = schedule([job], market(settings, []), now=job.submitted_at + 1)
    assert isinstance(decision, Place) and decision.placement["location"] == placed, decision
    assert decision.placement["num_nodes"] == num_nodes


@pytest.mark.parametrize("pool, said", [
    pytest.param('{name: lab, slots: 2, price_per_slot_hour: "0.50", price_per_gpu_hour: "2.00"}',
                 "pools[0]: price_per_slot_hour and price_per_gpu_hour are two names for one setting, and both are "
                 "given ('0.50' and '2.00'): keep one",
                 id="a pool priced per slot-hour and per GPU-hour is refused naming both, not priced at the first"),
    pytest.param('{name: lab, slots: 2, gpus: 8, price_per_slot_hour: "0.50"}',
                 "pools[0]: slots and gpus are two names for one setting, and both are given (2 and 8): keep one",
                 id="a pool sized in slots and in GPUs is refused naming both, not sized by the first"),
])
def test_a_pool_given_one_setting_under_both_its_names_is_refused_naming_both(make_settings, pool, said):
    with pytest.raises(ConfigError) as refused:
        make_settings(config=f"pools:\n  - {pool}\n")
    assert str(refused.value) == said


@pytest.mark.parametrize("pool, slots, micros", [
    pytest.param('{name: lab, gpus: 3, accelerator: A100, price_per_gpu_hour: "2.00"}', 3, 2_000_000,
                 id="a pool given gpus and price_per_gpu_hour alone is read as before"),
    pytest.param('{name: lab, slots: 3, price_per_slot_hour: "0.50"}', 3, 500_000,
                 id="a pool given slots and price_per_slot_hour alone is read as before"),
])
def test_a_pool_given_each_setting_once_under_either_name_is_read_as_before(make_settings, pool, slots, micros):
    (read,) = make_settings(config=f"pools:\n  - {pool}\n").pools
    assert (read.slots, read.price_per_slot_hour) == (slots, micros)


@pytest.mark.parametrize("pool, said", [
    pytest.param('{name: lab, gpus: 2, price_per_gpu_hour: "0"}', "pools[0].price_per_gpu_hour: must be more than $0",
                 id="a price given as price_per_gpu_hour is named so when it is wrong"),
    pytest.param('{name: lab, gpus: 0, price_per_gpu_hour: "1"}', "pools[0].gpus: must be at least 1",
                 id="a size given as gpus is named so when it is wrong"),
])
def test_a_wrong_pool_setting_is_named_as_the_config_writes_it(make_settings, pool, said):
    with pytest.raises(ConfigError) as refused:
        make_settings(config=f"pools:\n  - {pool}\n")
    assert str(refused.value).startswith(said), str(refused.value)


@pytest.fixture
def broker_table(tmp_path, monkeypatch):
    """The broker's cached price table, empty, over a HOME of its own and a clock the test moves."""
    from broker import offers as broker_offers

    monkeypatch.setenv("HOME", str(tmp_path))
    for cache in ("_tables", "_checked", "_joined"):
        monkeypatch.setattr(broker_offers, cache, {})
    clock = [1000.0]
    monkeypatch.setattr(broker_offers.time, "monotonic", lambda: clock[0])
    return broker_offers, clock


HEADER = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,AvailabilityZone\n"


@pytest.mark.parametrize("emptied", [
    pytest.param(HEADER, id="a catalog left with its header alone while SkyPilot rewrites it keeps the prices read"),
    pytest.param("", id="a catalog emptied while SkyPilot rewrites it keeps the prices read, not the snapshot's"),
])
def test_a_catalog_emptied_mid_rewrite_keeps_the_prices_read_before(tmp_path, broker_table, caplog, emptied):
    broker_offers, clock = broker_table
    vms = tmp_path / ".sky" / "catalogs" / "v8" / "aws" / "vms.csv"
    vms.parent.mkdir(parents=True)
    vms.write_text(HEADER + "g5.xlarge,A10G,1,4,16,1.006,0.40,us-east-1,use1-az1\n")
    assert [o.price_per_hour for o in broker_offers._price_table(("aws",))] == [1_006_000, 400_000]
    vms.write_text(emptied)
    os.utime(vms, ns=(vms.stat().st_mtime_ns + 10**9,) * 2)
    clock[0] += 61
    assert [o.price_per_hour for o in broker_offers._price_table(("aws",))] == [1_006_000, 400_000]
    assert f"keeping the prices read before: {vms} has no rows after its header" in caplog.text
    vms.write_text(HEADER + "g5.xlarge,A10G,1,4,16,1.006,0.35,us-east-1,use1-az1\n")
    os.utime(vms, ns=(vms.stat().st_mtime_ns + 2 * 10**9,) * 2)
    clock[0] += 61
    assert [o.price_per_hour for o in broker_offers._price_table(("aws",))] == [1_006_000, 350_000]


def test_a_broker_whose_skypilot_catalog_has_no_rows_prices_from_the_snapshot(tmp_path, broker_table, caplog):
    """A header-only ~/.sky/catalogs/v8/aws/vms.csv at start-up hid the shipped snapshot: no AWS offer at all."""
    broker_offers, _ = broker_table
    vms = tmp_path / ".sky" / "catalogs" / "v8" / "aws" / "vms.csv"
    vms.parent.mkdir(parents=True)
    vms.write_text(HEADER)
    assert len(broker_offers._price_table(("aws",))) > 200
    assert f"price catalog {vms} has no rows after its header" in caplog.text


def test_the_placement_names_the_any_of_alternative_it_was_made_from(broker):
    """The engine's placement carries the index of the ``any_of`` entry placed (``alternative``), which the SkyPilot
    launcher launches with that entry's own settings: here the second, the only one whose zone is open."""
    from broker.engine.schedule import Place, schedule
    from broker.offers import market

    client, settings, store = broker(2, 2)
    task = {"run": "echo hi", "broker": {"budget_usd": 50},
            "resources": {"any_of": [{"infra": "aws/us-east-1/sim-0", "disk_size": 50},
                                     {"infra": "aws/us-east-1/sim-1", "disk_size": 600}]}}
    r = client.post("/v1/jobs", json=task, headers=AUTH)
    assert r.status_code == 201, r.text
    job = store.get_job(r.json()["id"])
    full = market(settings, [])
    (first,) = schedule([job], full, now=job.submitted_at + 1)
    assert isinstance(first, Place) and (first.placement["location"], first.placement["alternative"]) == ("sim-0", 0)
    only_one = type(full)(offers=tuple(o for o in full.offers if o.location == "sim-1"),
                          free_capacity=full.free_capacity, free_slots=full.free_slots)
    (second,) = schedule([job], only_one, now=job.submitted_at + 1)
    assert isinstance(second, Place), second
    assert (second.placement["location"], second.placement["alternative"]) == ("sim-1", 1), second.placement
