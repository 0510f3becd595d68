"""A job with ``ordered`` alternatives placed on an earlier one while a later one that fit was cheaper is told so in its
placement event: a user who listed them in the wrong order learns it, through the API, from a real engine's tick."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from broker.api.app import create_app
from broker.engine.reconcile import Engine
from broker.runtime import open_launcher
from broker.store import open_store

from broker_testing import ADMIN

AUTH = {"Authorization": f"Bearer {ADMIN}"}
CONFIG = """
pools: []
zones:
  - {name: sim-od, tier: ondemand, instance_type: g5.xlarge, price_per_hour: "1.006"}
  - {name: sim-spot, tier: spot, instance_type: g5.xlarge, price_per_hour: "0.40"}
"""
SPOT = {"accelerators": "A10G:1", "use_spot": True}
ON_DEMAND = {"accelerators": "A10G:1", "use_spot": False}


@pytest.mark.parametrize("order, placed", [
    pytest.param([ON_DEMAND, SPOT], "placed on ondemand 1x A10G g5.xlarge in aws/sim-od (simulated); spot 1x A10G "
                                    "g5.xlarge in aws/sim-spot (simulated) at $0.40/h is cheaper but comes later in "
                                    "`ordered`",
                 id="on-demand listed before a cheaper spot zone is placed there and told of the spot zone"),
    pytest.param([SPOT, ON_DEMAND], "placed on spot 1x A10G g5.xlarge in aws/sim-spot (simulated)",
                 id="the cheaper zone listed first is placed there and told of nothing else"),
])
def test_an_ordered_jobs_placement_event_names_a_cheaper_later_alternative(make_settings, tmp_path, order, placed):
    settings = make_settings(config=CONFIG)
    store = open_store(f"sqlite://{tmp_path / 'o.db'}")
    launcher = open_launcher(settings)
    try:
        with TestClient(create_app(settings, store=store, engine=False), raise_server_exceptions=False) as client:
            r = client.post("/v1/jobs", json={"run": "sleep 30", "resources": {"ordered": order},
                                              "broker": {"budget_usd": 5}}, headers=AUTH)
            assert r.status_code == 201, r.text
            job_id = r.json()["id"]
            Engine(settings, store, launcher).tick()
            events = client.get(f"/v1/jobs/{job_id}/events", headers=AUTH).json()["events"]
        said = [e["reason"] for e in events if (e["reason"] or "").startswith("placed on")]
        assert said == [placed], [(e["event"], e["reason"]) for e in events]
    finally:
        for run in launcher.runs_dir.glob("j*"):
            try:
                launcher.kill(run.name)
            except Exception:
                pass
        store.close()
