"""GCP end to end: priced from SkyPilot's GCP catalog, quoted, placed, and launched through real SkyPilot
task objects and its dry run, beside AWS.

The GCP catalog is made for the test (``fixtures/made_for_test_gcp_vms.csv``: host VM rows and GPU rows
priced apart, in SkyPilot's v8 GCP layout) and sits in the package's temporary ``~/.sky/catalogs/v8``
beside the AWS subset, where SkyPilot downloads its own. The scripted cloud (:class:`ScriptedSky`) runs
SkyPilot's real dry run and records what would be launched.

Its prices against the AWS subset: 4x V100 on-demand is cheaper on GCP ($11.81/h, n1-highmem-32 + 4 GPUs,
against p3.8xlarge's $12.24/h), 4x V100 on spot cheaper on AWS ($1.26/h against $4.37/h); 1x V100 and
1x A100 are GCP's alone.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
import yaml
from fastapi.testclient import TestClient
from skypilot_fakes import ScriptedSky
from test_skypilot_task import ENVS, request

from broker.api.app import create_app
from broker.config import load_settings
from broker.engine.reconcile import Engine
from broker.spec import parse
from broker.store import open_store
from launchers.base import LaunchError
from launchers.local import LocalLauncher
from launchers.router import RoutingLauncher
from launchers.skypilot import SkyPilotLauncher, attempt_config, build_task
from pricing.loading import load_price_table
from pricing.money import to_micros
from pricing.placement import Placement, place

SPOT_V100 = {"tier": "spot", "cloud": "gcp", "region": "us-central1", "zone": "us-central1-a",
             "instance_type": "n1-highmem-8+V100:1", "accelerator": "V100", "accelerator_count": 1, "num_nodes": 1,
             "price_per_hour": 1_091_620, "simulated": False}
ONDEMAND_A100 = {"tier": "ondemand", "cloud": "gcp", "region": "us-central1", "zone": "us-central1-b",
                 "instance_type": "a2-highgpu-1g+A100:1", "accelerator": "A100", "accelerator_count": 1,
                 "num_nodes": 1, "price_per_hour": 3_673_388, "simulated": False}
SPOT_A100X8 = {**ONDEMAND_A100, "tier": "spot", "zone": "us-central1-a", "instance_type": "a2-highgpu-8g+A100:8",
               "accelerator_count": 8, "num_nodes": 2}
TASK = {"name": "train", "resources": {"accelerators": "V100:1", "disk_size": 100}, "run": "python train.py"}


@pytest.fixture
def launcher(gcp, tmp_path):
    return SkyPilotLauncher(tmp_path / "state", client=ScriptedSky(real_plan=True))


@pytest.mark.parametrize("placement, vm, gpus, notice", [
    (SPOT_V100, "n1-highmem-8", {"V100": 1}, True),
    (ONDEMAND_A100, "a2-highgpu-1g", {"A100": 1}, False),
    (SPOT_A100X8, "a2-highgpu-8g", {"A100": 8}, True),
], ids=["1x V100 spot rides n1-highmem-8", "1x A100 on-demand rides its a2-highgpu-1g",
        "8x A100 spot on 2 nodes of a2-highgpu-8g"])
def test_a_gcp_placement_passes_skypilots_dry_run_pinned_to_its_vm_gpus_zone_and_notice(
        launcher, placement, vm, gpus, notice):
    launcher.launch(request(TASK, placement))
    [(cluster, dumped)] = launcher.client.launched
    assert launcher.client.planned == [cluster], "SkyPilot's own dry run accepted it first"
    resources = dumped["resources"]
    assert resources["infra"] == f"gcp/us-central1/{placement['zone']}"
    assert resources["instance_type"] == vm, "SkyPilot is asked for the VM, not the broker's name for the pair"
    assert resources["accelerators"] == gpus
    assert bool(resources.get("use_spot")) is (placement["tier"] == "spot")
    assert resources["disk_size"] == 100
    assert dumped.get("num_nodes", 1) == placement["num_nodes"]
    envs = dumped["envs"]
    given_to_job = {**envs, **dumped.get("secrets", {})}  # SkyPilot sets both in the job's environment
    assert {k: given_to_job[k] for k in ENVS} == ENVS
    if notice:  # the checkpoint library reads GCP's preemption notice from the metadata server, 30 s ahead
        assert (envs["BROKER_PREEMPTION_METADATA"], envs["BROKER_PREEMPTION_GRACE_S"]) == ("gcp", "25")
    else:
        assert "BROKER_PREEMPTION_METADATA" not in envs and "BROKER_PREEMPTION_GRACE_S" not in envs


def test_a_gcp_tpu_offer_asks_skypilot_for_the_tpu_not_a_vm(gcp):
    tpu = {"tier": "spot", "cloud": "gcp", "region": "us-central1", "zone": "us-central1-a",
           "instance_type": "tpu-v6e-1", "accelerator": "tpu-v6e-1", "accelerator_count": 1, "num_nodes": 1}
    resources = attempt_config(request(TASK, tpu))["resources"]
    assert "instance_type" not in resources and resources["accelerators"] == {"tpu-v6e-1": 1}


def test_a_gcp_zone_skypilot_does_not_know_is_refused_by_the_plan(launcher):
    with pytest.raises(LaunchError) as caught:
        launcher.launch(request(TASK, {**SPOT_V100, "zone": "us-central1-z"}))
    assert str(caught.value).startswith("SkyPilot ") and "us-central1-z" in str(caught.value)
    assert launcher.client.launched == []


AGREE = [
    ("1x V100 on spot: GCP's alone", {"accelerators": "V100:1", "use_spot": True}, "gcp"),
    ("1x A100 on-demand: GCP's alone", {"accelerators": "A100:1", "use_spot": False}, "gcp"),
    ("4x V100 on-demand: GCP is cheaper", {"accelerators": "V100:4", "use_spot": False}, "gcp"),
    ("4x V100 on spot: AWS is cheaper", {"accelerators": "V100:4", "use_spot": True}, "aws"),
    ("1x T4 on-demand: AWS is cheaper", {"accelerators": "T4:1", "use_spot": False}, "aws"),
    ("8x A100 on spot: AWS is cheaper", {"accelerators": "A100:8", "use_spot": True}, "aws"),
]


@pytest.mark.parametrize("resources, cloud", [(r, c) for _, r, c in AGREE], ids=[a[0] for a in AGREE])
def test_the_broker_and_skypilot_pick_the_same_cloud_vm_and_price_across_aws_and_gcp(gcp, sky, sky_env,
                                                                                    resources, cloud):
    from sky import dag as dag_lib
    from sky import optimizer

    task = sky.Task.from_yaml_config({"resources": dict(resources), "run": "true"})
    with dag_lib.Dag() as dag:
        dag.add(task)
    optimizer.Optimizer.optimize(dag, quiet=True)
    theirs = task.best_resources

    ours = place(parse({"resources": dict(resources), "run": "true"}, now=0.0).request,
                 load_price_table(sky_env["catalog"], clouds=("aws", "gcp")))
    assert isinstance(ours, Placement), ours
    assert (ours.offer.cloud, str(theirs.cloud).lower()) == (cloud, cloud)
    assert ours.offer.instance_type.split("+")[0] == theirs.instance_type
    assert ours.offer.price_per_hour == to_micros(Decimal(repr(theirs.get_cost(3600))))


@pytest.fixture
def api(gcp, tmp_path):
    """The broker's HTTP API with the SkyPilot launcher (the cloud scripted, SkyPilot's dry run real) and
    the engine ticked by the test. The price table is read from the package's ``~/.sky`` (AWS and GCP)."""

    def make(**env):
        settings = load_settings({"BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_LAUNCHER": "skypilot",
                                  "BROKER_ADMIN_TOKEN": "t", **env})
        cloud = ScriptedSky(real_plan=True)
        launcher = RoutingLauncher(LocalLauncher(settings.data_dir / "runs", zones=settings.zones),
                                   SkyPilotLauncher(settings.data_dir / "skypilot", client=cloud))
        store = open_store(f"sqlite://{tmp_path / 'api.db'}")
        client = TestClient(create_app(settings, store=store, launcher=launcher, engine=False),
                            raise_server_exceptions=False)
        client.headers["Authorization"] = "Bearer t"
        made.append(store)
        return client, Engine(settings, store, launcher), store, cloud

    made: list = []
    yield make
    for store in made:
        store.close()


def submit(client, resources: dict, budget: str = "100"):
    task = {"name": "train", "resources": resources, "run": "python train.py",
            "broker": {"budget_usd": budget, "expected_hours": 2}}
    return client.post("/v1/jobs", content=yaml.safe_dump(task), headers={"Content-Type": "application/yaml"})


def test_a_job_for_gcp_is_quoted_at_gcps_price_placed_there_and_launched_through_skypilot(api):
    client, engine, store, cloud = api()
    r = submit(client, {"cloud": "gcp", "accelerators": "V100:1", "use_spot": True})
    assert r.status_code == 201, r.text
    job = r.json()
    [spot] = job["quote"]["tiers"]
    assert spot["offer"] == "spot 1x V100 n1-highmem-8+V100:1 in gcp/us-central1-a"
    assert spot["price_per_hour"] == 1_091_620  # the n1-highmem-8 host ($0.09962) + the V100 ($0.992)
    engine.tick()
    placed = client.get(f"/v1/jobs/{job['id']}").json()
    assert placed["state"] == "launching"
    [attempt] = placed["attempt_list"]
    assert {k: attempt["placement"][k] for k in ("cloud", "region", "zone", "tier", "instance_type")} == {
        "cloud": "gcp", "region": "us-central1", "zone": "us-central1-a", "tier": "spot",
        "instance_type": "n1-highmem-8+V100:1"}
    [(_, dumped)] = cloud.launched
    assert dumped["resources"]["infra"] == "gcp/us-central1/us-central1-a"
    assert dumped["resources"]["instance_type"] == "n1-highmem-8"
    assert dumped["envs"]["BROKER_PREEMPTION_METADATA"] == "gcp"


@pytest.mark.parametrize("use_spot, offer", [
    (False, "ondemand 4x V100 n1-highmem-32+V100:4 in gcp/us-central1-a"),
    (True, "spot 4x V100 p3.8xlarge in aws/us-east-2b"),
], ids=["on-demand: GCP's $11.81/h over AWS's $12.24/h", "spot: AWS's $1.26/h over GCP's $4.37/h"])
def test_a_job_for_any_cloud_is_placed_on_the_cheaper_of_aws_and_gcp(api, use_spot, offer):
    client, engine, store, cloud = api()
    r = submit(client, {"accelerators": "V100:4", "use_spot": use_spot})
    assert r.status_code == 201, r.text
    assert r.json()["quote"]["tiers"][0]["offer"] == offer
    engine.tick()
    [attempt] = client.get(f"/v1/jobs/{r.json()['id']}").json()["attempt_list"]
    assert attempt["placement"]["cloud"] == offer.split(" in ")[1].split("/")[0]
    assert len(cloud.launched) == 1


def test_a_broker_set_to_price_aws_only_refuses_a_job_for_gcp_naming_the_field(api):
    client, engine, store, cloud = api(BROKER_CLOUDS="aws")
    r = submit(client, {"cloud": "gcp", "accelerators": "V100:1"})
    assert r.status_code == 422 and r.json()["field"] == "resources", r.text
    offer = submit(client, {"accelerators": "V100:4", "use_spot": False}).json()["quote"]["tiers"][0]["offer"]
    assert offer.startswith("ondemand 4x V100 p3.8xlarge in aws/"), "GCP's cheaper offer is not one this broker may buy"
