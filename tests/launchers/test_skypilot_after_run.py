"""Placement and the admission quote count what a SkyPilot cluster is billed after its run (the idle
minutes before autodown and the teardown, which its launcher keeps of the budget), through the broker:
SkyPilot's real task objects and catalog, a scripted cloud (:class:`ScriptedSky`), and a simulated
on-demand zone run by the local launcher on this host.

The A10G offers, per hour: cloud spot g5.xlarge in us-east-2a $0.377 (15 minutes after its run: $0.0943),
the simulated on-demand zone $1.006 (nothing after its run). A start and a clean stop is 36 s with the
defaults (the 30 s grace period, two 1 s ticks, a second and the launcher's 3 s).

| budget left | placed |
|---|---|
| $0.05 (pays for a start on the zone, not for a cluster's 15 minutes after its run) | the simulated zone, no cluster launched |
| $0.05, no zone it may use | stopped at its budget before any attempt, saying why |
| $1 | the cloud spot offer, the cheaper |
"""

from __future__ import annotations

import pytest
from skypilot_fakes import ScriptedSky

from broker.auth import Principal
from broker.config import load_settings
from broker.engine.reconcile import Engine
from broker.lifecycle import JobState
from broker.offers import after_run, all_offers
from broker.service import BrokerService, Invalid
from broker.store import open_store
from launchers.local import LocalLauncher
from launchers.router import RoutingLauncher
from launchers.skypilot import SkyPilotLauncher, cluster_name
from pricing.money import cost_for_seconds

ADMIN = Principal("admin", None, admin=True)
ZONE = ("zones:\n  - {name: sim-od, tier: ondemand, instance_type: g5.xlarge}\n"
        "pools:\n  - {name: local, slots: 2, price_per_slot_hour: '0.20'}\n")  # this host's CPU pool, asked for
TASK = {"resources": {"accelerators": "A10G:1"}, "run": "true"}
SPOT = 377_000  # g5.xlarge spot in us-east-2a, the catalog's cheapest A10G


@pytest.fixture
def broker(sky, tmp_path):
    cfg = tmp_path / "broker.yaml"
    cfg.write_text(ZONE)
    settings = load_settings({"BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_LAUNCHER": "skypilot",
                              "BROKER_ADMIN_TOKEN": "t"}, config_path=cfg)
    cloud = ScriptedSky(real_plan=False)
    launcher = RoutingLauncher(LocalLauncher(settings.data_dir / "runs", zones=settings.zones),
                               SkyPilotLauncher(settings.data_dir / "skypilot", client=cloud))
    store = open_store(f"sqlite://{tmp_path / 'b.db'}")
    yield BrokerService(settings, store, launcher), Engine(settings, store, launcher), cloud
    store.close()


def test_a_budget_left_too_small_for_a_clusters_billing_after_its_run_takes_the_simulated_zone(broker):
    service, engine, cloud = broker
    job, _ = service.submit(ADMIN, {**TASK, "broker": {"budget_usd": "0.05"}})
    engine.tick()
    placed = service.store.get_job(job.id)
    assert (placed.placement["location"], placed.placement["simulated"]) == ("sim-od", True), placed.reason
    assert cloud.planned == [] and cloud.launched == []  # no cluster that would end at once
    engine.run_until_idle(timeout=60)
    final = service.store.get_job(job.id)
    assert final.state is JobState.SUCCEEDED and final.spent <= final.budget


def test_a_budget_that_pays_for_the_billing_after_the_run_takes_the_cheaper_cloud_offer(broker):
    service, engine, cloud = broker
    job, _ = service.submit(ADMIN, {**TASK, "broker": {"budget_usd": 1}})
    engine.tick()
    placed = service.store.get_job(job.id)
    assert (placed.placement["tier"], placed.placement["price_per_hour"]) == ("spot", SPOT)
    assert [name for name, _ in cloud.launched] == [cluster_name(f"{job.id}-a1")]


def _lowered(service, job_id: str, budget: int) -> None:
    """The queued job's budget set to ``budget``, written as it stands: `broker budget` refuses to lower a queued
    job's below a start, but one lowered while it ran and then requeued (a preemption) has such a budget."""
    from dataclasses import replace

    from broker.store import Change

    job = service.store.get_job(job_id)
    service.store.commit(Change(job=replace(job, budget=budget), expected_version=job.version))


def test_with_no_offer_on_this_host_the_job_stops_at_its_budget_instead_of_launching_a_cluster(broker):
    service, engine, cloud = broker
    task = {**TASK, "resources": {"accelerators": "A10G:1", "use_spot": True}}  # the zone is on-demand
    job, _ = service.submit(ADMIN, {**task, "broker": {"budget_usd": 1}})
    _lowered(service, job.id, 50_000)  # $0.05: a start, but not the cluster's 15 minutes after it
    engine.tick()
    stopped = service.store.get_job(job.id)
    assert stopped.state is JobState.STOPPED_BUDGET
    assert service.store.attempts(job.id) == [] and cloud.launched == []
    assert "an AWS cluster's 15 minutes of billing after its run" in stopped.reason, stopped.reason
    assert stopped.reason.startswith("stopped: the budget left, $0.05, cannot pay for a start and a clean stop (36 s) and")


def test_a_budget_too_small_for_any_clusters_billing_after_its_run_is_refused_at_submit(broker):
    service, _, _ = broker
    task = {**TASK, "resources": {"accelerators": "A10G:1", "use_spot": True}}
    with pytest.raises(Invalid) as info:
        service.submit(ADMIN, {**task, "broker": {"budget_usd": "0.05"}})
    assert info.value.field == "broker.budget_usd"
    assert "an AWS cluster's 15 minutes of billing after its run" in str(info.value), str(info.value)
    assert service.store.list_jobs() == []


def test_the_quote_counts_a_clusters_billing_after_its_run_and_none_for_the_simulated_zone(broker):
    service, _, _ = broker
    after = service.launcher.cloud.after_run_seconds()
    job, _ = service.submit(ADMIN, {**TASK, "broker": {"budget_usd": 5, "expected_hours": 1}})
    tiers = {t["tier"]: t for t in job.quote["tiers"]}
    spot, zone = tiers["spot"], tiers["ondemand"]
    assert spot["after_run"] == cost_for_seconds(SPOT, after)
    assert spot["estimate"] == SPOT + cost_for_seconds(SPOT, after)
    assert "billed after the run" in spot["text"]
    assert "sim-od" in zone["offer"] and zone["after_run"] == 0 and zone["estimate"] == 1_006_000


def test_a_budget_that_covers_the_hours_but_not_the_billing_after_them_is_refused(broker):
    service, _, _ = broker
    task = {**TASK, "resources": {"accelerators": "A10G:1", "use_spot": True}}
    with pytest.raises(Invalid) as info:  # $0.377 for the hour, $0.0943 after it
        service.submit(ADMIN, {**task, "broker": {"budget_usd": "0.40", "expected_hours": 1}})
    assert info.value.field == "broker.budget_usd"
    assert "of it billed after the run" in str(info.value) and "exceeds the budget of $0.40" in str(info.value)


def test_the_router_says_a_clusters_billing_after_its_run_for_cloud_offers_and_none_for_this_hosts(broker):
    service, _, _ = broker
    offers = all_offers(service.settings)
    seconds = after_run(service.launcher, offers)
    here = [o for o in offers if o.simulated or o.cloud == "local"]  # the zone, and the host's own CPU pool
    assert {o.zone for o in here} == {"sim-od", "local"} and not set(here) & set(seconds)
    assert set(seconds) == set(offers) - set(here)
    assert set(seconds.values()) == {service.launcher.cloud.after_run_seconds()} == {15 * 60}


def test_a_job_stopped_at_its_budget_before_any_attempt_resumes_only_once_the_budget_pays_for_a_start(broker):
    from broker.service import Conflict

    service, engine, cloud = broker
    task = {**TASK, "resources": {"accelerators": "A10G:1", "use_spot": True}}  # cloud spot only: 15 min after its run
    job, _ = service.submit(ADMIN, {**task, "broker": {"budget_usd": 1}})
    _lowered(service, job.id, 50_000)
    engine.tick()
    assert service.store.get_job(job.id).state is JobState.STOPPED_BUDGET
    # no attempt, so no price of its own: the resume is weighed as the engine will weigh the start
    with pytest.raises(Conflict) as info:
        service.resume(ADMIN, job.id)
    assert "an AWS cluster's 15 minutes of billing after its run" in str(info.value), str(info.value)
    assert "raise the budget" in str(info.value)
    assert service.store.get_job(job.id).state is JobState.STOPPED_BUDGET  # not resumed only to stop again
    service.raise_budget(ADMIN, job.id, 1_000_000)
    assert service.resume(ADMIN, job.id).state is JobState.QUEUED
    engine.tick()
    assert service.store.get_job(job.id).placement["tier"] == "spot" and cloud.launched


def test_a_job_whose_budget_pays_only_for_an_offer_over_its_max_price_is_stopped_and_resumes_once_it_pays(broker):
    from broker.service import Conflict

    service, engine, cloud = broker
    # the zone ($1.006/h, nothing after its run) is over the cap; cloud spot ($0.377/h) is under it
    job, _ = service.submit(ADMIN, {**TASK, "broker": {"budget_usd": 1, "max_price_per_hour": "0.50"}})
    _lowered(service, job.id, 50_000)  # $0.05: a start on the zone, not spot's 15 minutes after its run
    engine.tick()
    stopped = service.store.get_job(job.id)
    assert stopped.state is JobState.STOPPED_BUDGET and cloud.launched == []
    assert "over the job's max_price_per_hour of $0.50" in stopped.reason, stopped.reason
    with pytest.raises(Conflict) as info:
        service.resume(ADMIN, job.id)
    assert "an AWS cluster's 15 minutes of billing after its run" in str(info.value), str(info.value)
    assert "over the job's max_price_per_hour of $0.50" in str(info.value), str(info.value)
    service.raise_budget(ADMIN, job.id, 1_000_000)
    assert service.resume(ADMIN, job.id).state is JobState.QUEUED
