"""SkyPilot task settings the broker decides itself or never runs, refused at submit under every launcher.

``resources.max_hourly_cost`` was refused only under the SkyPilot launcher: under the local one (the default) a
task capped at $1/h was accepted and placed on whatever the broker chose. The same for ``resources.autostop``,
``resources.priority``, ``service``, ``event_callback`` (which SkyPilot runs only for a managed job, never for
the cluster launch the broker makes) and ``pool`` (a managed-jobs worker pool's definition)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from broker.api.app import create_app
from broker.spec import BROKER_DECIDED_RESOURCES, BROKER_DECIDED_TASK, SpecError, parse
from broker.store import open_store

from broker_testing import ADMIN

ADMIN_H = {"Authorization": f"Bearer {ADMIN}"}
TEAM_H = {"Authorization": "Bearer vision-token"}
NOW = 1_800_000_000.0


@pytest.fixture
def client(make_settings, tmp_path):
    settings = make_settings()
    assert settings.launcher == "local", "the default launcher, where these were dropped without a word"
    app = create_app(settings, store=open_store(f"sqlite://{tmp_path / 'a.db'}"), engine=False)
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


REFUSED = [
    pytest.param({"resources": {"cpus": 2, "max_hourly_cost": 1.0}}, "resources.max_hourly_cost",
                 "broker.max_price_per_hour", id="max_hourly_cost"),
    pytest.param({"resources": {"any_of": [{"cpus": 2}, {"cpus": 4, "max_hourly_cost": 3}]}},
                 "resources.any_of[1].max_hourly_cost", "broker.max_price_per_hour", id="any_of[1] max_hourly_cost"),
    pytest.param({"resources": {"ordered": [{"cpus": 2, "max_hourly_cost": "2.5"}, {"cpus": 4}]}},
                 "resources.ordered[0].max_hourly_cost", "broker.max_price_per_hour",
                 id="ordered[0] max_hourly_cost"),
    pytest.param({"resources": {"cpus": 2, "autostop": False}}, "resources.autostop", "tears each cluster down",
                 id="autostop"),
    pytest.param({"resources": {"any_of": [{"cpus": 2, "autostop": {"idle_minutes": 5, "wait_for": "none"}}]}},
                 "resources.any_of[0].autostop", "tears each cluster down", id="any_of[0] autostop"),
    pytest.param({"resources": {"cpus": 2, "priority": 900}}, "resources.priority", "broker.priority",
                 id="priority"),
    pytest.param({"resources": {"ordered": [{"cpus": 2}, {"cpus": 4, "priority": 10}]}},
                 "resources.ordered[1].priority", "broker.priority", id="ordered[1] priority"),
    pytest.param({"service": {"readiness_probe": "/", "replicas": 1}}, "service", "sky serve", id="service"),
    pytest.param({"event_callback": "echo $JOB_STATUS >> /tmp/status"}, "event_callback", "never run",
                 id="event_callback"),
    pytest.param({"pool": {"workers": 2}}, "pool", "sky jobs pool apply", id="pool"),
]


@pytest.mark.parametrize("task, field, points_to", REFUSED)
@pytest.mark.parametrize("who", [ADMIN_H, TEAM_H], ids=["admin", "team"])
def test_a_setting_the_broker_would_drop_is_refused_at_submit_under_the_local_launcher(client, who, task, field,
                                                                                      points_to):
    r = client.post("/v1/jobs", json={"run": "echo hi", **task}, headers=who)
    assert r.status_code == 422, r.text
    assert r.json()["field"] == field, r.text
    assert points_to in r.json()["detail"], r.text
    assert client.get("/v1/jobs", headers=ADMIN_H).json()["jobs"] == [], "nothing was stored"


def test_the_same_task_without_the_setting_is_taken(client):
    """Guard (kept behaviour): what is left once the refused setting is taken out is accepted, the broker's own
    settings included."""
    r = client.post("/v1/jobs", json={"run": "echo hi", "resources": {"any_of": [{"cpus": 2}, {"cpus": 4}]},
                                      "broker": {"max_price_per_hour": 3, "priority": 900}}, headers=TEAM_H)
    assert r.status_code == 201, r.text


@pytest.mark.parametrize("task, field, points_to", REFUSED)
def test_the_spec_itself_refuses_it_naming_the_field(task, field, points_to):
    with pytest.raises(SpecError) as info:
        parse({"run": "echo hi", **task}, now=NOW)
    assert info.value.field == field and points_to in info.value.reason


@pytest.mark.parametrize("task, field, points_to", REFUSED)
def test_a_job_stored_before_the_refusal_is_still_read(task, field, points_to):
    """The engine reads stored specs with ``strict=False``: a job queued before the refusal keeps its place."""
    spec = parse({"run": "echo hi", **task}, now=NOW, strict=False)
    assert spec.request.alternatives


def test_the_refused_settings_are_ones_skypilot_reads():
    """Each key refused is one SkyPilot's schema knows (the broker's TASK_KEYS / RESOURCE_KEYS, held to the installed
    SkyPilot by tests/launchers): a typo is refused as a typo, not with these reasons."""
    from broker.spec import RESOURCE_KEYS, TASK_KEYS

    assert set(BROKER_DECIDED_RESOURCES) <= RESOURCE_KEYS and set(BROKER_DECIDED_TASK) <= TASK_KEYS
