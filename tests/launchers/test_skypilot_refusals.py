"""SkyPilot's dry run refuses a launch either for the task itself (no retry can succeed: the job fails, with
SkyPilot's reason) or for where or when it was placed (capacity, quota, a zone, a bucket: the job is requeued).
SkyPilot's real dry run and catalog; the cloud is scripted (:class:`ScriptedSky`)."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import pytest
from skypilot_fakes import ScriptedSky
from test_skypilot_task import GPU_TASK, SPOT_A100, request

import broker.offers as broker_offers
from broker.auth import Principal
from broker.config import load_settings
from broker.engine.reconcile import Engine
from broker.lifecycle import JobState
from broker.service import BrokerService
from broker.store import open_store
from launchers.base import LaunchError
from launchers.local import LocalLauncher
from launchers.router import RoutingLauncher
from launchers.skypilot import SkyPilotLauncher

ADMIN = Principal("admin", None, admin=True)


def with_resources(**extra):
    return {**GPU_TASK, "resources": {**GPU_TASK["resources"], **extra}}


REFUSALS = [
    ("more memory than the chosen p4d.24xlarge has → permanent, SkyPilot's words",
     with_resources(memory="4096+"), {}, True, "does not have enough memory"),
    ("more vCPUs than the chosen type has → permanent", with_resources(cpus="500+"), {}, True,
     "does not have enough vCPUs"),
    ("an exact vCPU count the chosen type does not have → permanent", with_resources(cpus="8"), {}, True,
     "does not have the requested number of vCPUs"),
    ("an accelerator the catalog does not know (no offer) → requeued", GPU_TASK,
     {"accelerator": "B999", "instance_type": None}, False, "B999"),
    ("a zone the catalog does not know → requeued", GPU_TASK, {"zone": "us-east-1z"}, False, "us-east-1z"),
]


@pytest.mark.parametrize("task, change, permanent, says", [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS])
def test_a_refusal_about_the_task_itself_is_permanent_one_about_the_placement_is_not(sky, tmp_path, task, change,
                                                                                      permanent, says):
    launcher = SkyPilotLauncher(tmp_path / "state", client=ScriptedSky(real_plan=True))
    with pytest.raises(LaunchError) as caught:
        launcher.launch(request(task, {**SPOT_A100, **change}))
    assert caught.value.permanent is permanent
    assert says in str(caught.value) and str(caught.value).startswith("SkyPilot ")
    assert launcher.client.launched == []


def test_a_task_no_placement_can_satisfy_fails_with_skypilots_reason_instead_of_requeuing_for_ever(sky, tmp_path,
                                                                                                    monkeypatch):
    settings = load_settings({"BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_LAUNCHER": "skypilot",
                              "BROKER_ADMIN_TOKEN": "t"})
    cloud = ScriptedSky(real_plan=True)
    launcher = RoutingLauncher(LocalLauncher(settings.data_dir / "runs"),
                               SkyPilotLauncher(settings.data_dir / "skypilot", client=cloud))
    store = open_store(f"sqlite://{tmp_path / 'r.db'}")
    service, engine = BrokerService(settings, store, launcher), Engine(settings, store, launcher)
    # placement holds an exact size to the instance type as SkyPilot does (an exact 15 GB is no g5.xlarge, 16 GB);
    # a price table older than SkyPilot's catalog may still disagree with it: here it says g5.xlarge has 15 GB
    table = broker_offers._price_table
    monkeypatch.setattr(broker_offers, "_price_table", lambda *a: tuple(
        replace(o, memory_gib=Decimal(15)) if o.instance_type == "g5.xlarge" else o for o in table(*a)))
    try:
        job, _ = service.submit(ADMIN, {"resources": {"accelerators": "A10G:1", "memory": "15"}, "run": "true",
                                        "broker": {"budget_usd": 5}})
        engine.tick()
        ended = store.get_job(job.id)
        assert ended.state is JobState.FAILED, (ended.state, ended.reason)
        assert "does not have the requested memory" in ended.reason and "15 is requested" in ended.reason
        assert len(cloud.planned) == 1 and cloud.launched == []
    finally:
        if engine._housekeeping is not None:  # the tick's workdir sweep, beside it: done before the store closes
            engine._housekeeping.result(timeout=30)
        store.close()
