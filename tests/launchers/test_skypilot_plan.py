"""Layer 2: SkyPilot's own optimizer and dry run, in process, against the catalog subset and moto.

The launcher plans every launch with SkyPilot's dry run; these tests run that dry run for real
(catalog, optimizer, storage checks against moto's S3) and script only what needs a VM.
"""

from __future__ import annotations

import pytest
from skypilot_fakes import ScriptedSky
from test_skypilot_task import ENVS, GPU_TASK, SPOT_A100, request

from launchers.base import LaunchError, Phase
from launchers.skypilot import SkyPilotLauncher, build_task
from launchers.skypilot_task import CHECKPOINT_MOUNT

MOUNTED = {**GPU_TASK, "file_mounts": {"/ckpt": CHECKPOINT_MOUNT}}


@pytest.fixture
def launcher(sky, tmp_path):
    return SkyPilotLauncher(tmp_path / "state", client=ScriptedSky(real_plan=True))


def optimize(sky, config):
    from sky import dag as dag_lib
    from sky import optimizer

    task = sky.Task.from_yaml_config(dict(config))
    with dag_lib.Dag() as dag:
        dag.add(task)
    optimizer.Optimizer.optimize(dag, quiet=True)
    return task.best_resources


@pytest.mark.parametrize("resources, instance_type", [
    ({"accelerators": "A100:8", "use_spot": True}, "p4d.24xlarge"),
    ({"accelerators": "V100:4"}, "p3.8xlarge"),
    ({"accelerators": "T4:1", "use_spot": True}, "g4dn.xlarge"),
    ({"accelerators": "H100:8"}, "p5.48xlarge"),
], ids=["8x A100 on spot → p4d", "4x V100 on demand → p3.8xlarge", "1x T4 on spot → g4dn.xlarge",
        "8x H100 on demand → p5.48xlarge"])
def test_skypilots_optimizer_picks_from_the_catalog_subset(sky, resources, instance_type):
    best = optimize(sky, {"resources": resources, "run": "x"})
    assert best.instance_type == instance_type
    assert best.use_spot is bool(resources.get("use_spot"))


def test_a_pinned_launch_with_the_checkpoint_bucket_mounted_passes_the_dry_run(launcher, bucket):
    launcher.launch(request(MOUNTED, SPOT_A100))
    client = launcher.client
    assert client.planned == ["broker-j-0123456789-a2"]
    [(cluster, dumped)] = client.launched
    assert cluster == "broker-j-0123456789-a2"
    assert dumped["file_mounts"]["/ckpt"]["source"] == f"s3://{bucket}"
    assert launcher.status("j-0123456789-a2").phase is Phase.PENDING


def test_a_missing_checkpoint_bucket_is_refused_with_skypilots_error_as_a_sentence(launcher, bucket):
    envs = {**ENVS, "BROKER_CHECKPOINT_URI": "s3://no-such-bucket/runs/j-0123456789"}
    with pytest.raises(LaunchError) as caught:
        launcher.launch(request(MOUNTED, SPOT_A100, envs=envs))
    message = str(caught.value)
    assert message.startswith("SkyPilot cannot mount the storage for p4d.24xlarge (spot) in aws/us-east-1/us-east-1b")
    assert "non-existent bucket" in message and "s3://no-such-bucket" in message
    assert message.endswith(".")
    assert launcher.client.launched == [], "nothing is launched after a refusal"


@pytest.mark.parametrize("change, says", [
    ({"accelerator": "B999", "instance_type": None}, "B999"),
    ({"zone": "us-east-1z"}, "us-east-1z"),
    ({"instance_type": "p4d.24xlarge", "region": "eu-west-9", "zone": None}, "eu-west-9"),
], ids=["an accelerator SkyPilot does not know is refused", "a zone that does not exist is refused",
        "a region outside the catalog is refused"])
def test_a_placement_skypilot_cannot_satisfy_is_refused_by_the_plan(launcher, change, says):
    placement = {**SPOT_A100, **change}
    with pytest.raises(LaunchError) as caught:
        launcher.launch(request(GPU_TASK, placement))
    assert str(caught.value).startswith("SkyPilot ")
    assert says in str(caught.value)
    assert launcher.client.launched == []


def test_the_dry_run_alone_accepts_the_built_task(sky, bucket):
    from sky import execution

    from launchers.skypilot import attempt_config

    task = build_task(attempt_config(request(MOUNTED, SPOT_A100)))
    job_id, handle = execution.launch(task, cluster_name="broker-dry", dryrun=True, stream_logs=False,
                                      _quiet_optimizer=True)
    assert (job_id, handle) == (None, None)


ON_DEMAND_T4 = {"tier": "ondemand", "cloud": "aws", "region": "us-east-1", "zone": None,
                "instance_type": "g4dn.xlarge", "accelerator": "T4", "accelerator_count": 1, "num_nodes": 1}
ON_DEMAND_A100 = {**SPOT_A100, "tier": "ondemand"}
ON_DEMAND_CPU = {"tier": "ondemand", "cloud": "aws", "region": "us-east-2", "zone": None,
                 "instance_type": "m6i.2xlarge", "accelerator": None, "accelerator_count": 0, "num_nodes": 1}


@pytest.mark.parametrize("any_of, placement, own", [
    ([{"accelerators": "T4:4", "memory": "64+"}, {"accelerators": "T4:1", "memory": "8+"}], ON_DEMAND_T4,
     {"memory": "8+"}),
    ([{"accelerators": {"A100-80GB": 8}, "disk_size": 2000}, {"accelerators": ["A100:8"], "disk_size": 500}],
     ON_DEMAND_A100, {"disk_size": 500}),
    ([{"accelerators": "T4:1", "memory": "64+"}, {"cpus": "4+", "memory": "16+"}], ON_DEMAND_CPU, {"memory": "16+"}),
], ids=["T4:1 placed takes the T4:1 alternative's memory, not the T4:4 one's listed first",
        "A100 placed takes the A100 alternative's disk, not A100-80GB's whose name contains it",
        "a CPU VM placed takes the CPU alternative's memory, not the GPU one's listed first"])
def test_the_alternative_the_placement_chose_is_the_one_whose_settings_are_pinned(sky, any_of, placement, own):
    from launchers.skypilot import attempt_config

    task = {"resources": {"any_of": any_of}, "run": "python train.py"}
    config = attempt_config(request(task, placement))
    assert {k: config["resources"].get(k) for k in own} == own
    best = optimize(sky, config)  # SkyPilot's own optimizer takes the pinned shape with those settings
    assert best.instance_type == placement["instance_type"]


def test_every_aws_placement_the_price_table_holds_is_one_skypilots_optimizer_takes_as_pinned(sky, sky_env):
    """Zones by the names SkyPilot launches by: the account's (moto's here, fetched by SkyPilot's first look at
    the catalog), not the default mapping's, under which some zones hold no such instance for this account."""
    from broker.offers import placement_record
    from launchers.skypilot import attempt_config
    from pricing.loading import load_price_table

    optimize(sky, {"resources": {"accelerators": "T4:1"}, "run": "x"})  # SkyPilot fetches the account's zone names
    offers = {(o.tier, o.zone, o.instance_type): o for o in load_price_table(home=sky_env["home"], clouds=("aws",))
              if o.region == "us-east-1" and o.zone}
    assert len(offers) > 20
    refused = []
    for offer in offers.values():
        placement = placement_record(offer, 1)
        want = {"accelerators": f"{offer.accelerator}:{offer.accelerator_count}"} if offer.accelerator else {}
        try:
            best = optimize(sky, attempt_config(request({"resources": want, "run": "x"}, placement)))
            assert (best.instance_type, best.zone, best.use_spot) == (offer.instance_type, offer.zone,
                                                                      offer.tier.value == "spot")
        except Exception as exc:  # noqa: BLE001 — every refusal is listed
            refused.append(f"{offer.describe()}: {type(exc).__name__}: {str(exc)[:100]}")
    assert refused == []
