"""The broker with ``BROKER_LAUNCHER=skypilot``: SkyPilot checks submitted tasks, cloud offers come from
the catalog, and placements are routed to SkyPilot or to this host."""

from __future__ import annotations

import time

import pytest

from broker.auth import Principal
from broker.config import load_settings
from broker.offers import all_offers
from broker.runtime import open_launcher
from broker.service import BrokerService, Invalid
from broker.store import open_store
from launchers.base import LaunchRequest, Phase
from launchers.router import RoutingLauncher
from pricing.offers import Tier

ADMIN = Principal("admin", None, admin=True)


@pytest.fixture
def service(sky, tmp_path):
    settings = load_settings({"BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_LAUNCHER": "skypilot",
                              "BROKER_ADMIN_TOKEN": "t"})
    svc = BrokerService(settings, open_store(f"sqlite://{tmp_path / 'w.db'}"), open_launcher(settings))
    yield svc
    svc.store.close()


def test_an_invalid_task_is_refused_with_skypilots_message_naming_the_field(service):
    with pytest.raises(Invalid) as info:
        service.submit(ADMIN, {"runn": "echo", "broker": {"budget_usd": 5}})
    assert info.value.field == "runn"


def test_a_valid_skypilot_task_is_priced_on_the_clouds_catalog(service):
    job, created = service.submit(ADMIN, {"resources": {"accelerators": "A100:8", "use_spot": True}, "run": "x",
                                          "broker": {"budget_usd": 500, "expected_hours": 1}})
    assert created and job.quote["tiers"][0]["tier"] == "spot"
    assert "p4d.24xlarge" in job.quote["tiers"][0]["offer"]
    clouds = {o.cloud for o in all_offers(service.settings) if o.tier is not Tier.ONPREM}
    assert clouds == {"aws", "gcp"}, "every cloud with a SkyPilot catalog on this host is priced"


def test_local_pools_stay_on_this_host_and_clouds_go_to_skypilot(local_sky_server, service, tmp_path):
    launcher = service.launcher
    assert isinstance(launcher, RoutingLauncher)
    marker = tmp_path / "ran"
    request = LaunchRequest(attempt_id="j-w-a1", job_id="j-w", attempt=1, task={"run": f"touch {marker}"},
                            placement={"cloud": "local", "tier": "onprem", "location": "local"})
    launcher.launch(request)
    deadline = time.monotonic() + 20
    while launcher.status("j-w-a1").phase is not Phase.SUCCEEDED and time.monotonic() < deadline:
        time.sleep(0.1)
    assert marker.exists() and launcher.status("j-w-a1").phase is Phase.SUCCEEDED
    assert launcher.status("j-unknown-a1").phase is Phase.GONE  # SkyPilot has no such cluster either


K8S_POOL = """
pools:
  - {name: lab, slots: 4, accelerator: A100, price_per_slot_hour: "1.10", kubernetes_context: lab-gpus}
"""


def test_a_kubernetes_pool_is_on_prem_capacity_launched_through_skypilot_in_its_context(sky, tmp_path):
    from broker.engine.launch import launch_request  # noqa: F401 - the engine builds requests the same way
    from broker.offers import placement_record, pool_offers
    from launchers.skypilot import attempt_config, build_task

    cfg = tmp_path / "k8s.yaml"
    cfg.write_text(K8S_POOL)
    settings = load_settings({"BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_LAUNCHER": "skypilot",
                              "BROKER_ADMIN_TOKEN": "t"}, config_path=cfg)
    svc = BrokerService(settings, open_store(f"sqlite://{tmp_path / 'k.db'}"), open_launcher(settings))
    try:
        job, _ = svc.submit(ADMIN, {"resources": {"accelerators": "A100:2"}, "run": "python train.py",
                                    "broker": {"budget_usd": 50, "expected_hours": 1}})
        cheapest = job.quote["tiers"][0]
        assert cheapest["tier"] == "onprem" and "kubernetes/lab-gpus" in cheapest["offer"]  # $2.20/h, under any cloud
        two = next(o for o in pool_offers(settings.pools[0]) if o.accelerator_count == 2)
        placement = placement_record(two, 1)
        assert (placement["cloud"], placement["region"], placement["location"]) == ("kubernetes", "lab-gpus", "lab")
        request = LaunchRequest(attempt_id="j-k-a1", job_id="j-k", attempt=1,
                                task={"run": "python train.py", "resources": {"accelerators": "A100:2", "cpus": 8}},
                                placement=placement, envs={})
        assert svc.launcher._for_request(request) is svc.launcher.cloud  # not a process on this host
        resources = build_task(attempt_config(request)).to_yaml_config()["resources"]  # the real sky.Task
        assert resources["infra"] in ("k8s/lab-gpus", "kubernetes/lab-gpus")
        assert resources["accelerators"] == {"A100": 2} and "instance_type" not in resources
        assert str(resources["cpus"]) == "8" and not resources.get("use_spot")
        # a task that names no size gets its slots' share of the pool (2 vCPUs, 8 GiB a slot by default), not
        # SkyPilot's small default pod next to two A100s
        bare = LaunchRequest(attempt_id="j-k-a2", job_id="j-k", attempt=2,
                             task={"run": "python train.py", "resources": {"accelerators": "A100:2"}},
                             placement=placement, envs={})
        sized = build_task(attempt_config(bare)).to_yaml_config()["resources"]
        assert (str(sized["cpus"]), str(sized["memory"])) == ("4", "16"), sized
    finally:
        svc.store.close()


def test_a_kubernetes_pool_needs_the_skypilot_launcher(tmp_path):
    from broker.config import ConfigError

    cfg = tmp_path / "k8s.yaml"
    cfg.write_text(K8S_POOL)
    with pytest.raises(ConfigError, match=r"^pools\[0\]\.kubernetes_context: a Kubernetes pool is reached through SkyPilot"):
        load_settings({"BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_ADMIN_TOKEN": "t"}, config_path=cfg)


def test_a_kill_fault_for_an_attempt_on_a_cloud_is_refused_rather_than_reported_done(sky, tmp_path):
    """Faults act on this host's processes: with simulated zones beside SkyPilot, a kill of a cloud attempt found no
    process here and still answered applied: true."""
    from broker.lifecycle import AttemptState, JobState
    from broker.models import Attempt, Job
    from broker.service import Conflict
    from broker.store import Change

    config = tmp_path / "config.yaml"
    config.write_text("zones:\n  - {name: sim-a, tier: spot, instance_type: g5.xlarge}\n")
    settings = load_settings({"BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_LAUNCHER": "skypilot",
                              "BROKER_ADMIN_TOKEN": "t", "BROKER_CONFIG": str(config)})
    svc = BrokerService(settings, open_store(f"sqlite://{tmp_path / 'f.db'}"), open_launcher(settings))
    placement = {"tier": "spot", "cloud": "aws", "zone": "us-east-1a", "instance_type": "g5.xlarge"}
    job = Job(id="j-cloud", name="t", team="default", state=JobState.RUNNING, spec={"run": "x"}, budget=5_000_000,
              priority=0, submitted_at=1.0, updated_at=1.0, attempts=1, placement=placement)
    attempt = Attempt(id="j-cloud-a1", job_id="j-cloud", n=1, state=AttemptState.RUNNING, launcher="skypilot",
                      placement=placement, price_per_hour=1_000_000, created_at=1.0)
    svc.store.commit(Change(job=job, expected_version=None, attempts=(attempt,)))
    with pytest.raises(Conflict, match="not on this host"):
        svc.inject_fault(ADMIN, "kill", job_id="j-cloud")
    svc.store.close()
