"""Small fixes (Dec 6) seen through the API's edges: who may inject a fault is decided before its body is read, and
every 401 and 403 about the token names the same field."""

from __future__ import annotations

from . import world
from .conftest import auth


def test_a_team_token_is_refused_fault_injection_before_its_body_is_read(client):
    token = world.TOKENS["team-a"]
    for body in ({"kind": "nonsense"}, {"kind": "kill", "job_id": "j-a2"}, {"stray": 1}):
        r = client.post("/v1/admin/faults", json=body, headers=auth(token))
        assert r.status_code == 403, r.text
        assert r.json() == {"detail": "Authorization: fault injection is for admins", "field": "Authorization"}
    bad = client.post("/v1/admin/faults", content=b"not json", headers=auth(token))
    assert bad.status_code == 403 and bad.json()["field"] == "Authorization"


def test_a_401_names_the_authorization_field_as_the_403s_do(client):
    for headers in ({}, auth("not-a-token"), {"Authorization": "Basic xyz"}):
        r = client.get("/v1/jobs", headers=headers)
        assert r.status_code == 401 and r.json()["field"] == "Authorization", r.text
        assert r.headers["www-authenticate"] == "Bearer"
    r = client.post("/v1/jobs/j-a2/progress", json={"step": 1}, headers=auth(world.TOKENS["team-a"]))
    assert r.status_code == 403 and r.json()["field"] == "Authorization"


def test_the_costs_team_list_names_the_default_team_only_once_it_has_a_job(client):
    admin = auth(world.ADMIN)
    assert client.get("/v1/costs", headers=admin).json()["teams"] == ["team-a", "team-b"]  # had "default" too
    job = client.post("/v1/jobs", json={"name": "by-admin", "run": "echo hi", "resources": {"cpus": 1},
                                        "broker": {"budget_usd": 1}}, headers=admin).json()
    assert job["team"] == "default"
    assert client.get("/v1/costs", headers=admin).json()["teams"] == ["default", "team-a", "team-b"]
    # filtered on one team, the list still offers the others
    assert client.get("/v1/costs?team=team-a", headers=admin).json()["teams"] == ["default", "team-a", "team-b"]
    assert client.get("/v1/costs", headers=auth(world.TOKENS["team-a"])).json()["teams"] == ["team-a"]


def test_a_lost_pool_node_is_counted_as_lost_not_as_a_preemption(client, store, seeded):
    from broker.lifecycle import AttemptState, JobState

    from .test_metrics import scrape

    now = seeded.now
    j = world.job("j-lost", "team-b", JobState.RUNNING, submitted=now - 3600, budget=5_000_000, spent=200_000,
                  attempts=2, placement=world.onprem(200_000), updated=now - 600)
    world._commit(store, j, [
        world.attempt("j-lost", 1, AttemptState.LOST, world.onprem(200_000), start=now - 3000, seconds=1200,
                      cost=100_000),
        world.attempt("j-lost", 2, AttemptState.RUNNING, world.onprem(200_000), start=now - 1740, seconds=600,
                      cost=100_000, running=True)])
    pre = client.get("/v1/costs?period=90d", headers=auth(world.ADMIN)).json()["preemptions"]
    assert pre["count"] == 1 and pre["lost"] == 1  # the seeded spot preemption; the pool's node apart (was 2)
    assert pre["by_zone"] == [{"zone": "us-east-1a", "count": 1}]
    lost = [e for e in pre["events"] if e["job_id"] == "j-lost"]
    assert [(e["state"], e["tier"], e["recovery_seconds"]) for e in lost] == [("lost", "onprem", 120)]
    m = scrape(client)
    assert ("broker_preemptions_total", (("tier", "onprem"), ("zone", "local"))) not in m
    assert m[("broker_preemptions_total", (("tier", "spot"), ("zone", "us-east-1a")))] == 1
    assert m[("broker_attempts_lost_total", (("tier", "onprem"), ("zone", "local")))] == 1
    assert m[("broker_recovery_seconds_count", ())] == 2  # the time to recover from a lost node still counts
