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
    assert clouds == {"aws"}


def test_local_pools_stay_on_this_host_and_clouds_go_to_skypilot(service, tmp_path):
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
