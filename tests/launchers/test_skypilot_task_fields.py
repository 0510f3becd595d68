"""Task fields SkyPilot reads that the broker decides itself (``autostop``, ``max_hourly_cost``, ``service``),
the ``any_of`` alternative launched being the one placed, and a launched cluster left ``INIT``."""

from __future__ import annotations

import time

import pytest
from skypilot_fakes import ScriptedSky
from test_skypilot_broker_wiring import service  # noqa: F401  (the fixture: a broker on the SkyPilot launcher)
from test_skypilot_task import SPOT_A100, request

from broker.auth import Principal
from broker.service import Invalid
from launchers.base import Phase
from launchers.skypilot import DEFAULT_AUTOSTOP_MINUTES, SkyPilotLauncher, TaskError, attempt_config, build_task, \
    validate_task
from launchers.skypilot_status import Launch, Observation, next_status

ADMIN = Principal("admin", None, admin=True)
AID = "j-0123456789-a2"
CLUSTER = "broker-j-0123456789-a2"

ONDEMAND_A100_WEST = {**SPOT_A100, "tier": "ondemand", "region": "us-west-2", "zone": "us-west-2a"}


# --- refused at submit -------------------------------------------------------------------------------------


@pytest.mark.parametrize("task, field, mentions", [
    ({"resources": {"accelerators": "A100:8", "autostop": False}}, "resources.autostop", "tears each cluster down"),
    ({"resources": {"accelerators": "A100:8", "autostop": {"idle_minutes": 600, "wait_for": "none"}}},
     "resources.autostop", "tears each cluster down"),
    ({"resources": {"any_of": [{"accelerators": "A100:8"}, {"accelerators": "H100:8", "autostop": 5}]}},
     "resources.any_of[1].autostop", "tears each cluster down"),
    ({"resources": {"ordered": [{"accelerators": "A100:8", "autostop": True}]}},
     "resources.ordered[0].autostop", "tears each cluster down"),
    ({"resources": {"accelerators": "A100:8", "max_hourly_cost": 1.0}}, "resources.max_hourly_cost",
     "broker.max_price_per_hour"),
    ({"resources": {"any_of": [{"accelerators": "A100:8", "max_hourly_cost": 40}]}},
     "resources.any_of[0].max_hourly_cost", "broker.max_price_per_hour"),
    ({"resources": {"accelerators": "A100:8"}, "service": {"readiness_probe": "/", "replicas": 1}}, "service",
     "sky serve"),
], ids=["autostop false", "autostop wait_for none", "any_of autostop", "ordered autostop", "max_hourly_cost",
        "any_of max_hourly_cost", "service"])
def test_a_setting_the_broker_decides_is_refused_at_submit_naming_it_and_why(service, task, field, mentions):
    with pytest.raises(Invalid) as info:
        service.submit(ADMIN, {**task, "run": "python train.py", "broker": {"budget_usd": 500}})
    assert info.value.field == field
    assert mentions in str(info.value)
    with pytest.raises(TaskError) as direct:
        validate_task({**task, "run": "python train.py"})
    assert direct.value.field == field


@pytest.mark.parametrize("resources", [
    {"accelerators": "A100:8", "autostop": False},
    {"accelerators": "A100:8", "autostop": {"idle_minutes": 600, "wait_for": "none"}},
    {"any_of": [{"accelerators": "A100:8", "autostop": False}]},
], ids=["false", "wait_for none", "any_of"])
def test_a_task_queued_before_with_its_own_autostop_launches_with_the_brokers_autodown_alone(sky, resources):
    config = attempt_config(request({"resources": resources, "run": "python train.py"}, SPOT_A100))
    assert "autostop" not in config["resources"]
    # what SkyPilot's SDK does in sky.launch(..., idle_minutes_to_autostop=10, down=True): its own setting merged
    # into the task's (`false` had turned the broker's autodown off, `wait_for: none` made it end a running job)
    [built] = list(build_task(config).resources)
    built.override_autostop_config(down=True, idle_minutes=DEFAULT_AUTOSTOP_MINUTES, wait_for=None)
    autostop = built.autostop_config
    assert autostop.enabled and autostop.down and autostop.idle_minutes == DEFAULT_AUTOSTOP_MINUTES
    assert autostop.wait_for is None or str(autostop.wait_for.value) != "none"


# --- the alternative placed is the one launched ---------------------------------------------------------------


TWO_REGIONS = {"resources": {"any_of": [
    {"infra": "aws/us-west-2", "accelerators": "A100:8", "disk_size": 100, "image_id": "ami-0west0000000000"},
    {"infra": "aws/us-east-1", "accelerators": "A100:8", "disk_size": 2000, "image_id": "ami-0east0000000000"},
]}, "run": "python train.py"}


@pytest.mark.parametrize("placement, disk, image", [
    (SPOT_A100, 2000, "ami-0east0000000000"), (ONDEMAND_A100_WEST, 100, "ami-0west0000000000")],
    ids=["us-east-1", "us-west-2"])
def test_of_two_alternatives_of_one_accelerator_the_placed_regions_keeps_its_own_disk_and_image(
        sky, placement, disk, image):
    config = attempt_config(request(TWO_REGIONS, placement))
    assert config["resources"]["infra"].startswith(f"aws/{placement['region']}")
    assert (config["resources"]["disk_size"], config["resources"]["image_id"]) == (disk, image)


@pytest.mark.parametrize("variants", [
    [{"cloud": "gcp", "accelerators": "A100:8", "disk_size": 100}, {"cloud": "aws", "accelerators": "A100:8",
                                                                     "disk_size": 2000}],
    [{"infra": "aws/*/us-east-1a", "accelerators": "A100:8", "disk_size": 100},
     {"infra": "aws/*/us-east-1b", "accelerators": "A100:8", "disk_size": 2000}],
    [{"accelerators": "A100:8", "use_spot": False, "disk_size": 100},
     {"accelerators": "A100:8", "use_spot": True, "disk_size": 2000}],
    [{"region": "us-west-2", "accelerators": "A100:8", "disk_size": 100},
     {"region": "us-east-1", "accelerators": "A100:8", "disk_size": 2000}],
], ids=["cloud", "zone", "use_spot", "region"])
def test_alternatives_differing_by_cloud_zone_or_spot_launch_the_one_placed(sky, variants):
    task = {"resources": {"ordered": variants}, "run": "python train.py"}
    config = attempt_config(request(task, SPOT_A100))  # aws us-east-1b, spot
    assert config["resources"]["disk_size"] == 2000


def test_with_no_alternative_of_the_placements_location_the_accelerator_still_decides(sky):
    task = {"resources": {"any_of": [{"infra": "gcp", "accelerators": "T4:1", "disk_size": 50},
                                     {"infra": "gcp", "accelerators": "A100:8", "disk_size": 700}]},
            "run": "python train.py"}
    assert attempt_config(request(task, SPOT_A100))["resources"]["disk_size"] == 700


# --- a launched cluster left INIT ------------------------------------------------------------------------------


def test_a_cluster_init_after_its_launch_ended_is_waited_for_with_a_reason_then_lost():
    waiting = next_status(Phase.PENDING, Observation(launch=Launch.DONE, cluster="INIT", init_seconds=10))
    assert waiting.phase is Phase.PENDING and "INIT" in waiting.reason and "180 s" in waiting.reason
    lost = next_status(Phase.PENDING, Observation(launch=Launch.DONE, cluster="INIT", init_seconds=10_000))
    assert lost.phase is Phase.LOST and "INIT" in lost.reason
    spot = next_status(Phase.PENDING, Observation(launch=Launch.DONE, cluster="INIT", spot=True, init_seconds=10_000))
    assert spot.phase is Phase.PREEMPTED
    provisioning = next_status(Phase.PENDING, Observation(launch=Launch.IN_FLIGHT, cluster="INIT",
                                                          init_seconds=10_000))
    assert provisioning.phase is Phase.PENDING, "a launch still provisioning is not bounded by the wait"


def test_the_launcher_tears_down_a_launched_cluster_left_init_past_the_wait(sky, tmp_path):
    sky_client = ScriptedSky(real_plan=False)
    launcher = SkyPilotLauncher(tmp_path / "state", client=sky_client)
    launcher.init_wait_seconds = 0.3
    launcher.launch(request({"resources": {"accelerators": "A100:8"}, "run": "python train.py"}, SPOT_A100))
    sky_client.provisioned(CLUSTER, status="INIT", job=None, spot=True)  # the launch request is done
    status = launcher.status(AID)
    assert status.phase is Phase.PENDING and "INIT" in status.reason
    time.sleep(0.35)
    status = launcher.status(AID)
    assert status.phase is Phase.PREEMPTED and "INIT" in status.reason
    assert sky_client.downed == [CLUSTER]
