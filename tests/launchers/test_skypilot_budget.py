"""A job's budget on SkyPilot clusters, through the engine: the broker, SkyPilot's real task objects and
catalog, and a scripted cloud (:class:`ScriptedSky`: what the clusters and their jobs do).

Sequences, one poll per arrow:

| | |
|---|---|
| launched with its limit → running → its guard stops the run (no broker asked) | stopped at its budget |
| launched with its limit → setting up (a download that hangs) → its guard stops the setup (no broker asked) | stopped at its budget, not failed: the run never started |
| launched with its limit → budget raised (the cluster's limit stays) → the guard stops the run at the old limit | resumed from its checkpoint on a new cluster with the new limit |
| launched with its limit → comes up only when what is left pays for no more than a clean stop | started, then stopping at its budget, in one tick (it read "running" until it ended) |
| launched with its limit → still provisioning when its run window ends | its launch cancelled, its cluster torn down: stopped at its budget, within it |
| launched → budget raised (the cluster's limit stays) → still provisioning at the old window's end | its launch cancelled, resumed on a new cluster with the new limit |
| launched → the broker away past the budget while it provisions → back | stopped, and the notes say what ran beyond the budget |
| launched → the broker away; the cluster comes up after its limit, its guard stops the setup at once, it idles → back | stopped at its budget by its cluster, and the notes say what ran beyond the budget |

The last three run on one clock, the engine's and the launcher's (``clock``): provisioning takes minutes.
"""

from __future__ import annotations

import re
import time
from types import SimpleNamespace

import pytest
from skypilot_fakes import ScriptedSky, run_as_skypilot_runs_setup

from broker.auth import Principal
from broker.config import load_settings
from broker.engine.reconcile import Engine
from broker.lifecycle import JobState
from broker.service import BrokerService
from broker.store import open_store
from launchers.local import LocalLauncher
from launchers.router import RoutingLauncher
from launchers.skypilot import SkyPilotLauncher, cluster_name
from launchers.skypilot_status import Launch
from pricing.money import cost_for_seconds

ADMIN = Principal("admin", None, admin=True)
TASK = {"resources": {"accelerators": "A100:8", "use_spot": True}, "run": "python train.py"}


@pytest.fixture
def broker(sky, tmp_path):
    settings = load_settings({"BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_LAUNCHER": "skypilot",
                              "BROKER_ADMIN_TOKEN": "t"})
    cloud = ScriptedSky(real_plan=False)
    launcher = RoutingLauncher(LocalLauncher(settings.data_dir / "runs", zones=settings.zones),
                               SkyPilotLauncher(settings.data_dir / "skypilot", client=cloud))
    store = open_store(f"sqlite://{tmp_path / 'b.db'}")
    yield BrokerService(settings, store, launcher), Engine(settings, store, launcher), cloud
    store.close()


def tick_until(engine, store, job_id, states, ticks=10):
    for _ in range(ticks):
        engine.tick()
        job = store.get_job(job_id)
        if job.state.value in states:
            return job
    raise AssertionError(f"{job_id} is {store.get_job(job_id).state.value}, not {states}")


def cluster_stop_at(cloud, cluster) -> int:
    [run] = [config["run"] for name, config in cloud.launched if name == cluster]
    return int(re.match(r"broker_stop_at=(\d+)\n", run).group(1))


def guard_stops(cloud, cluster, at: int) -> None:
    """What the cluster's guard does at its limit: the run stopped, its job FAILED, the lines in the logs."""
    cloud.jobs[cluster] = "FAILED"
    cloud.output[cluster] = (b"step 300\n[spot-broker] run exited with status 143\n"
                             b"[spot-broker] run stopped at its budget at %d\n" % at)


def running_job(service, engine, cloud, budget_usd):
    job, _ = service.submit(ADMIN, {**TASK, "broker": {"budget_usd": budget_usd}})
    engine.tick()
    (attempt,) = service.store.attempts(job.id)
    cluster = cluster_name(attempt.id)
    cloud.provisioned(cluster, spot=True, job="RUNNING")
    assert tick_until(engine, service.store, job.id, {"running"}).state is JobState.RUNNING
    return job, attempt, cluster


def test_a_cluster_stops_its_run_at_the_budget_by_itself_and_the_broker_records_a_budget_stop(broker):
    service, engine, cloud = broker
    job, attempt, cluster = running_job(service, engine, cloud, 100)
    after_run = engine.launcher.cloud.after_run_seconds()
    # the whole cluster's cost fits: its run stops early enough for the idle minutes and the teardown
    assert cluster_stop_at(cloud, cluster) == pytest.approx(attempt.limit_at - after_run, abs=2)
    guard_stops(cloud, cluster, int(time.time()))
    final = tick_until(engine, service.store, job.id, {"stopped_budget", "queued", "failed"})
    assert final.state is JobState.STOPPED_BUDGET
    (attempt,) = service.store.attempts(job.id)
    assert attempt.stop_reason == "budget" and final.spent <= final.budget
    assert cluster in cloud.downed
    assert "budget_stop_requested" in [e.event for e in service.store.events(job.id)]


def test_a_budget_raised_after_launch_resumes_the_job_its_cluster_stopped_at_the_old_limit(broker):
    service, engine, cloud = broker
    job, first, cluster = running_job(service, engine, cloud, 100)
    old_stop = cluster_stop_at(cloud, cluster)
    service.raise_budget(ADMIN, job.id, 200_000_000)
    engine.tick()  # a cluster's limit cannot be moved: the attempt keeps the limit its cluster holds
    (attempt,) = service.store.attempts(job.id)
    assert attempt.limit_at == first.limit_at
    guard_stops(cloud, cluster, int(time.time()))  # ... and it comes, old as it is
    tick_until(engine, service.store, job.id, {"stopped_budget", "launching", "failed"})
    [recover] = [e for e in service.store.events(job.id) if e.event == "recover"]
    assert "budget was raised since" in recover.reason
    second = service.store.attempts(job.id)[-1]
    assert second.n == 2 and second.limit_at > first.limit_at + 3600
    assert cluster_stop_at(cloud, cluster_name(second.id)) > old_stop + 3600  # the new cluster, the new limit


def test_a_setup_still_running_at_the_limit_is_stopped_by_its_cluster_and_the_job_stops_at_its_budget(broker, tmp_path):
    service, engine, cloud = broker
    job, _ = service.submit(ADMIN, {**TASK, "setup": "echo downloading the dataset\nsleep 120",
                                    "broker": {"budget_usd": 100}})
    engine.tick()
    (attempt,) = service.store.attempts(job.id)
    cluster = cluster_name(attempt.id)
    cloud.provisioned(cluster, spot=True, job="SETTING_UP")
    assert tick_until(engine, service.store, job.id, {"running"}).state is JobState.RUNNING
    [setup] = [config["setup"] for name, config in cloud.launched if name == cluster]
    assert setup.startswith(f"broker_stop_at={cluster_stop_at(cloud, cluster)}\n")  # the run's limit
    # the launcher's own setup script, run as SkyPilot runs it, its limit brought 2-3 s near
    near = re.sub(r"^broker_stop_at=\d+", f"broker_stop_at={int(time.time()) + 3}", setup)
    done = run_as_skypilot_runs_setup(near, tmp_path / "node")
    assert done.returncode == 124 and b"downloading the dataset" in done.stdout
    cloud.jobs[cluster] = "FAILED_SETUP"
    cloud.output[cluster] = done.stdout
    final = tick_until(engine, service.store, job.id, {"stopped_budget", "queued", "failed"})
    assert final.state is JobState.STOPPED_BUDGET, "a setup stopped at the budget is no failure of the setup"
    (attempt,) = service.store.attempts(job.id)
    assert attempt.stop_reason == "budget" and final.spent <= final.budget
    assert cluster in cloud.downed


@pytest.fixture
def clock(monkeypatch):
    """One clock for the engine and the SkyPilot launcher, moved by the test (``clock[0] += ...``)."""
    now = [time.time()]
    monkeypatch.setattr("launchers.skypilot.time", SimpleNamespace(time=lambda: now[0]))
    return now


@pytest.fixture
def clocked(broker, clock):
    service, engine, cloud = broker
    # the clock moved is the time that passes: the engine's wall clock and the one it bills by
    engine = Engine(engine.settings, service.store, engine.launcher, clock=lambda: clock[0],
                    monotonic=lambda: clock[0])
    return BrokerService(service.settings, service.store, service.launcher, clock=lambda: clock[0]), engine, cloud


def provisioning_job(service, engine, cloud, budget_usd):
    job, _ = service.submit(ADMIN, {**TASK, "setup": "pip install -r requirements.txt",
                                    "broker": {"budget_usd": budget_usd}})
    engine.tick()
    (attempt,) = service.store.attempts(job.id)
    [(cluster, _)] = cloud.launched
    assert service.store.get_job(job.id).state is JobState.LAUNCHING
    assert cloud.requests == {"req-1": (Launch.IN_FLIGHT, "")}
    return job, attempt, cluster


def test_a_cluster_still_provisioned_when_its_run_window_ends_is_cancelled_and_the_job_stops_within_its_budget(
        clocked, clock):
    service, engine, cloud = clocked
    job, attempt, cluster = provisioning_job(service, engine, cloud, 100)
    window_end = cluster_stop_at(cloud, cluster)  # the cluster's guard would start no setup after it
    clock[0] = window_end - 5
    engine.tick()
    assert service.store.get_job(job.id).state is JobState.LAUNCHING and cloud.cancelled == []
    clock[0] = window_end + 1
    engine.tick()
    stopping = service.store.get_job(job.id)
    assert stopping.state is JobState.STOPPING, stopping.reason
    assert cloud.cancelled == ["req-1"] and cluster in cloud.downed  # the launch in flight too, not only the cluster
    assert stopping.reason.startswith("stopped at its budget while its cluster was still being provisioned: spent $")
    final = tick_until(engine, service.store, job.id, {"stopped_budget", "queued", "failed"})
    assert final.state is JobState.STOPPED_BUDGET
    assert final.reason.startswith("Stopped at its budget while its cluster was still being provisioned"), final.reason
    (attempt,) = service.store.attempts(job.id)
    assert attempt.stop_reason == "budget" and attempt.started_at is None
    # what it was billed, and the teardown still to come, fit in the budget: the minutes after the run were kept
    teardown = engine.launcher.cloud.after_run_seconds()
    assert attempt.ended_at + teardown <= attempt.limit_at + engine.settings.stop_grace_seconds
    assert final.spent <= final.budget
    [stop] = [e for e in service.store.events(job.id) if e.event == "budget_stop_requested"]
    assert "its cluster was still being provisioned when its run window ended" in stop.reason
    assert stop.data["beyond_budget"] == 0


def test_a_cluster_that_comes_up_in_the_tick_its_run_window_ends_shows_started_then_stopping_at_its_budget(
        clocked, clock):
    """The start and the budget stop in one tick: the job read "running" (the start's event, with a stop already
    asked for) until the attempt ended; both are now recorded, in order, and the job is stopping."""
    service, engine, cloud = clocked
    job, attempt, cluster = provisioning_job(service, engine, cloud, 100)
    clock[0] = attempt.limit_at  # it came up late: what is left pays only for a clean stop
    cloud.provisioned(cluster, spot=True, job="RUNNING")
    engine.tick()
    now = service.store.get_job(job.id)
    assert now.state is JobState.STOPPING and now.reason.startswith("budget nearly used"), now.reason
    said = [(e.event, e.to_state) for e in service.store.events(job.id)][-2:]
    assert said == [("start", "running"), ("stop_budget", "stopping")], said
    (attempt,) = service.store.attempts(job.id)
    assert attempt.started_at is not None and attempt.stop_reason == "budget"
    final = tick_until(engine, service.store, job.id, {"stopped_budget", "queued", "failed"})
    assert final.state is JobState.STOPPED_BUDGET and final.spent <= final.budget


def test_a_cluster_provisioned_past_its_budget_while_the_broker_was_away_is_stopped_and_the_overrun_said(
        clocked, clock):
    service, engine, cloud = clocked
    job, attempt, cluster = provisioning_job(service, engine, cloud, 100)
    clock[0] = attempt.limit_at + 3600  # an hour past the budget, the cluster still pending (a Kubernetes pod)
    engine.tick()
    assert service.store.get_job(job.id).state is JobState.STOPPING
    assert cloud.cancelled == ["req-1"] and cluster in cloud.downed
    [stop] = [e for e in service.store.events(job.id) if e.event == "budget_stop_requested"]
    # the hour past its limit at its price, less the grace period and margin the budget still held
    grace = engine.settings.stop_grace_seconds
    beyond = stop.data["beyond_budget"]
    assert cost_for_seconds(attempt.price_per_hour, 3600 - grace - 5) <= beyond <= cost_for_seconds(
        attempt.price_per_hour, 3600), beyond
    assert "is beyond the budget, said here and not counted in its spend" in stop.reason and stop.reason.startswith(
        "stopping at $100.00 of $100.00: the budget is used up; it ran on while the broker was not watching")
    final = tick_until(engine, service.store, job.id, {"stopped_budget", "queued", "failed"})
    assert final.state is JobState.STOPPED_BUDGET and final.spent == final.budget


def test_a_cluster_up_after_its_limit_while_the_broker_was_away_says_what_it_was_billed_beyond_the_budget(
        clocked, clock):
    service, engine, cloud = clocked
    job, attempt, cluster = provisioning_job(service, engine, cloud, 100)
    up = cluster_stop_at(cloud, cluster) + 180  # the cluster came up three minutes after its limit
    cloud.provisioned(cluster, spot=True, job="FAILED_SETUP")  # its guard started no setup: exit 124 at once
    cloud.output[cluster] = (b"[spot-broker] the budget's limit came before the setup started: not starting it\n"
                             b"[spot-broker] setup stopped at its budget at %d\n" % up)
    clock[0] = up + engine.launcher.cloud.after_run_seconds() - 60  # the broker is back while the cluster idles
    engine.tick()
    [stop] = [e for e in service.store.events(job.id) if e.event == "budget_stop_requested"]
    assert stop.data["by"] == "launcher" and stop.data["beyond_budget"] > 0, stop.reason
    assert stop.reason.startswith("stopped at its budget by the launcher itself: the budget is used up; it ran on")
    assert cluster in cloud.downed
    final = tick_until(engine, service.store, job.id, {"stopped_budget", "queued", "failed"})
    assert final.state is JobState.STOPPED_BUDGET and final.spent == final.budget


def test_a_launch_whose_budget_was_raised_meanwhile_is_cancelled_at_its_old_window_and_resumed_with_the_new(
        clocked, clock):
    service, engine, cloud = clocked
    job, first, cluster = provisioning_job(service, engine, cloud, 100)
    old_stop = cluster_stop_at(cloud, cluster)
    service.raise_budget(ADMIN, job.id, 200_000_000)  # the cluster being made keeps its limit
    clock[0] = old_stop + 1
    engine.tick()
    assert cloud.cancelled == ["req-1"] and cluster in cloud.downed
    resumed = tick_until(engine, service.store, job.id, {"launching", "stopped_budget", "failed"})
    assert resumed.state is JobState.LAUNCHING and resumed.attempts == 2, resumed.reason
    second = service.store.attempts(job.id)[-1]
    assert second.limit_at > first.limit_at + 3600
    assert cluster_stop_at(cloud, cluster_name(second.id)) > old_stop + 3600
    notes = {e.event for e in service.store.events(job.id)}
    assert not notes & {"budget_warning", "budget_stop_requested"}, "a raised budget is no budget stop"


def died_inside_the_launch_call(service, engine, cloud):
    """A job submitted and launched by ``engine``, whose process died inside the launch call, after the API server
    took the request and before its id came back: the job, and the attempt the engine had recorded."""
    sent = cloud.launch

    def dies(task, cluster, *, autostop_minutes):
        sent(task, cluster, autostop_minutes=autostop_minutes)  # the API server has it
        cloud.launch = sent
        raise KeyboardInterrupt("the broker process died here")

    cloud.launch = dies
    job, _ = service.submit(ADMIN, {**TASK, "broker": {"budget_usd": 100}})
    with pytest.raises(KeyboardInterrupt):
        engine.tick()
    (recorded,) = service.store.attempts(job.id)
    return job, recorded


def restarted(engine, service, cloud, clock):
    """The broker started again on the same store and data directory: a new engine, a new SkyPilot launcher (and
    that launcher, for a look of the test's own)."""
    settings = engine.settings
    sky_launcher = SkyPilotLauncher(settings.data_dir / "skypilot", client=cloud)
    launcher = RoutingLauncher(LocalLauncher(settings.data_dir / "runs", zones=settings.zones), sky_launcher)
    return Engine(settings, service.store, launcher, clock=lambda: clock[0], monotonic=lambda: clock[0]), sky_launcher


def test_a_broker_that_died_inside_the_launch_call_bills_the_cluster_from_that_launch_and_sends_it_once(
        clocked, clock):
    """The engine recorded the attempt and called the launcher, which saved its intent and sent the request; the
    process died before the request's id came back. Ten minutes later the broker is back and the request has made
    the cluster. Before, the attempt read gone: the engine billed it from its return (ten minutes of a running
    cluster never counted against the budget) and launched it again, which found the cluster by chance only."""
    service, engine, cloud = clocked
    job, recorded = died_inside_the_launch_call(service, engine, cloud)
    cluster = cluster_name(recorded.id)
    clock[0] += 600  # the request still provisions (the cloud bills from it): no cluster listed yet
    again, _ = restarted(engine, service, cloud, clock)
    again.tick()
    assert service.store.get_job(job.id).state is JobState.LAUNCHING
    clock[0] += 60
    cloud.provisioned(cluster, spot=True, job="RUNNING")
    running = tick_until(again, service.store, job.id, {"running"})
    (attempt,) = service.store.attempts(job.id)
    assert attempt.created_at == recorded.created_at and attempt.limit_at == recorded.limit_at
    assert running.spent >= cost_for_seconds(attempt.price_per_hour, 660)
    assert [c for c, _ in cloud.launched] == [cluster]


def test_an_attempt_that_ran_unwatched_and_is_gone_is_resumed_without_closing_its_spot_zone(clocked, clock):
    """The broker died inside the launch call; while it was away the request made the cluster, the attempt ran and
    autodown took the cluster. The attempt is lost (how it ended is not known) and the job resumes — but its zone
    did nothing wrong: a preempted spot attempt closes its zone to the job for a cooldown, this one did, and the
    resumed job could not go back to its cheapest zone for an hour."""
    service, engine, cloud = clocked
    job, first = died_inside_the_launch_call(service, engine, cloud)
    [(request_id, _)] = cloud.requests.items()
    cloud.requests[request_id] = (Launch.DONE, "")  # it ran, and its cluster is gone
    clock[0] += 3600
    again, sky_launcher = restarted(engine, service, cloud, clock)
    resumed = tick_until(again, service.store, job.id, {"launching", "failed", "stopped_budget"})
    assert resumed.attempts == 2, resumed.reason
    lost, second = service.store.attempts(job.id)
    assert lost.state.value == "lost"
    again = sky_launcher.status(first.id)  # read back from the launcher's state, as on every later look
    assert "while no broker watched it" in again.reason and not again.zone_to_blame
    assert not resumed.blocked_zones, "how the attempt ended is not known: its zone is not to blame"
    assert second.placement["zone"] == first.placement["zone"]  # still the cheapest
    assert [c for c, _ in cloud.launched] == [cluster_name(first.id), cluster_name(second.id)]
