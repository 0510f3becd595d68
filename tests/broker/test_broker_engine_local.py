"""The engine with the local launcher: real processes from queued to an end state."""

import json
import os
import time
from dataclasses import replace

import pytest

from broker.auth import Principal
from broker.engine.billing import billed_seconds
from broker.engine.reconcile import Engine
from broker.lifecycle import JobState
from broker.runtime import open_launcher
from broker.service import BrokerService, Invalid
from broker.store import open_store
from launchers.base import AttemptStatus, Capabilities, Phase
from pricing.money import cost_for_seconds, fmt

from broker_testing import local_broker, run_until, wait_for

ADMIN = Principal("admin", None, admin=True)
CONFIG = """
pools:
  - {name: gpus, slots: 2, accelerator: A100, price_per_slot_hour: "3.60"}
  - {name: cpu, slots: 1, price_per_slot_hour: "0.36"}
stop_grace_seconds: 2
tick_seconds: 0.05
"""


@pytest.fixture
def broker(make_settings, tmp_path):
    with local_broker(make_settings, tmp_path, CONFIG) as parts:
        yield parts


def submit(service, run, **resources):
    task = {"name": "t", "run": run, "resources": resources or {"cpus": 1}, "broker": {"budget_usd": 5}}
    return service.submit(ADMIN, task)[0]


def test_a_job_runs_to_success_with_its_events_logs_and_cost(broker):
    service, engine, store, launcher = broker
    job = submit(service, "echo job=$BROKER_JOB_ID attempt=$BROKER_ATTEMPT ckpt=$BROKER_CHECKPOINT_URI; sleep 1.2")
    final = run_until(engine, store, job.id, {"succeeded", "failed"})
    assert final.state is JobState.SUCCEEDED
    assert [e.event for e in store.events(job.id)] == ["submit", "place", "launch", "start", "succeed"]
    log = service.logs(ADMIN, job.id)["data"]
    assert f"job={job.id} attempt=1 ckpt={final.checkpoint_uri}" in log
    (attempt,) = store.attempts(job.id)
    assert attempt.placement["location"] == "cpu" and attempt.exit_code == 0
    # $0.36/h is 100 micro-dollars a second; at least one whole second ran
    assert attempt.cost >= 100 and final.spent == attempt.cost


def test_a_failing_job_fails_with_its_exit_code(broker):
    service, engine, store, _ = broker
    job = submit(service, "echo boom >&2; exit 3")
    final = run_until(engine, store, job.id, {"succeeded", "failed"})
    assert final.state is JobState.FAILED
    assert "exited with code 3" in final.reason
    assert "boom" in service.logs(ADMIN, job.id)["data"]


def test_an_error_exit_listed_in_retry_settings_is_retried(broker):
    service, engine, store, _ = broker
    task = {"run": "if [ $BROKER_ATTEMPT = 1 ]; then exit 75; fi; echo second", "resources": {"cpus": 1},
            "broker": {"budget_usd": 5, "retry": {"recover_on_exit_codes": [75]}}}
    job = service.submit(ADMIN, task)[0]
    final = run_until(engine, store, job.id, {"succeeded", "failed"})
    assert final.state is JobState.SUCCEEDED and final.attempts == 2
    # placed again after a backoff, not at the next tick (20 attempts of a script failing at once took 20 s), and
    # the job said when while it waited
    first, second = store.attempts(job.id)
    assert second.created_at - first.ended_at >= 5.0, (first.ended_at, second.created_at)
    recovered = [e for e in store.events(job.id) if e.event == "recover"]
    assert len(recovered) == 1 and "retrying (its exit code is in recover_on_exit_codes); tries again at " in \
        recovered[0].reason, recovered[0].reason


def test_an_error_retry_the_attempt_limit_stops_says_so():
    """A job the retry settings would retry, at its last attempt: "failed: the job exited with code 75" did not say
    why the retries stopped."""
    from broker.engine.monitor import MAX_ATTEMPTS, decide
    from broker.lifecycle import AttemptState
    from broker.models import Attempt, Job

    job = Job(id="j-1", name="t", team="default", state=JobState.RUNNING, spec={"run": "exit 75"}, budget=5_000_000,
              priority=0, submitted_at=0.0, updated_at=0.0, attempts=MAX_ATTEMPTS,
              retry={"max_restarts_on_errors": 0, "recover_on_exit_codes": [75]})
    attempt = Attempt(id="a", job_id="j-1", n=MAX_ATTEMPTS, state=AttemptState.RUNNING, launcher="local",
                      placement={}, price_per_hour=0, created_at=0.0)
    failed = AttemptStatus(phase=Phase.FAILED, exit_code=75)
    out = decide(job, attempt, failed)
    assert out.event.value == "fail" and out.reason == (f"failed: the job exited with code 75; not retried: the job "
                                                        f"already used its {MAX_ATTEMPTS} attempts, the most a job gets")
    one_short = decide(replace(job, attempts=MAX_ATTEMPTS - 1), attempt, failed)
    assert one_short.event.value == "recover" and one_short.retried_error
    not_listed = decide(job, attempt, replace(failed, exit_code=3))
    assert not_listed.reason == "failed: the job exited with code 3"  # no retry was due: nothing to explain


def test_gpu_slots_are_handed_out_through_cuda_visible_devices(broker):
    service, engine, store, _ = broker
    a = submit(service, 'echo "gpus=[$CUDA_VISIBLE_DEVICES]"; sleep 1', accelerators="A100:1")
    b = submit(service, 'echo "gpus=[$CUDA_VISIBLE_DEVICES]"; sleep 1', accelerators="A100:1")
    run_until(engine, store, a.id, {"succeeded"})
    run_until(engine, store, b.id, {"succeeded"})
    seen = {service.logs(ADMIN, j.id)["data"].strip() for j in (a, b)}
    assert seen == {"gpus=[0]", "gpus=[1]"}  # both ran at once, on different GPUs


def test_a_full_pool_makes_the_next_job_wait_with_its_reason_and_position(broker, tmp_path):
    service, engine, store, _ = broker
    go = tmp_path / "go"  # the first job holds the pool until the test has looked (a fixed sleep may end first)
    first = submit(service, f"while [ ! -e {go} ]; do sleep 0.05; done")
    second = submit(service, "echo second")
    try:
        run_until(engine, store, first.id, {"running"})
        engine.tick()
        waiting = store.get_job(second.id)
        assert waiting.state is JobState.QUEUED
        assert "full" in waiting.reason and "position" not in waiting.reason  # a field, never stale text
        assert service.queue_positions() == {second.id: 1}
    finally:
        go.touch()
    final = run_until(engine, store, second.id, {"succeeded"})
    assert final.state is JobState.SUCCEEDED


def test_cancelling_a_running_job_stops_its_process(broker):
    service, engine, store, _ = broker
    job = submit(service, "trap 'echo got-sigterm; exit 143' TERM; echo armed; while true; do sleep 0.1; done")
    run_until(engine, store, job.id, {"running"})
    wait_for(lambda: "armed" in service.logs(ADMIN, job.id)["data"])  # bash has installed its trap
    assert service.cancel(ADMIN, job.id).state is JobState.CANCELLING
    final = run_until(engine, store, job.id, {"cancelled"})
    assert final.state is JobState.CANCELLED
    assert "got-sigterm" in service.logs(ADMIN, job.id)["data"]
    assert [e.event for e in store.events(job.id)][-2:] == ["cancel", "ended"]


def test_a_job_that_ignores_sigterm_is_killed_after_the_grace_period(broker):
    service, engine, store, _ = broker
    job = submit(service, "trap '' TERM; sleep 30")
    run_until(engine, store, job.id, {"running"})
    started = time.monotonic()
    service.cancel(ADMIN, job.id)
    run_until(engine, store, job.id, {"cancelled"})
    assert time.monotonic() - started < 10  # grace is 2 s in this config


def test_a_stop_that_comes_while_the_runner_starts_the_command_still_reaches_it(tmp_path, monkeypatch):
    """The runner reads "running" before its command is started: a cancel then may SIGTERM it while the command is
    being started, when its handler finds no live child to signal. Before, the stop was lost there and the command
    ran to its end (here 30 s, in CI a cancel that never ended); it is delivered once the command has started."""
    import signal
    import subprocess

    from launchers import local_runner

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "request.json").write_text(json.dumps({"attempt_id": "j-1-a1", "placement": {}, "stop_grace_seconds": 1,
                                                      "task": {"run": "trap '' TERM; sleep 30"}}))
    runner = local_runner.Runner(run_dir)
    started = subprocess.Popen

    def stop_arrives_meanwhile(*args, **kwargs):
        (run_dir / "stop.json").write_text(json.dumps({"reason": "cancelled", "grace_seconds": 1}))
        runner.on_sigterm(signal.SIGTERM, None)  # the handler, run before the new child is the runner's
        return started(*args, **kwargs)

    monkeypatch.setattr(local_runner.subprocess, "Popen", stop_arrives_meanwhile)
    began = time.monotonic()
    result = runner.run()
    assert time.monotonic() - began < 15, "the command ran on after its stop"
    assert result["stopped"] and result["reason"] == "cancelled"
    # SIGTERM, when it reached bash before its trap; SIGKILL at the end of the grace period, after
    assert result["signal"] in (signal.SIGTERM, signal.SIGKILL)


def test_launching_twice_runs_the_attempt_once(broker, tmp_path):
    from launchers.base import LaunchRequest, Phase

    _, _, _, launcher = broker
    marker = tmp_path / "count"
    req = LaunchRequest(attempt_id="j-x-a1", job_id="j-x", attempt=1, task={"run": f"echo run >> {marker}"},
                        placement={}, envs={})
    for _ in range(3):
        launcher.launch(req)
    wait_for(lambda: launcher.status("j-x-a1").phase is Phase.SUCCEEDED)
    launcher.launch(req)
    time.sleep(0.5)
    assert marker.read_text().count("run") == 1
    assert launcher.status("nope-a1").phase is Phase.GONE


def test_the_engine_sweeps_cloud_clusters_no_active_attempt_owns(broker):
    service, engine, store, launcher = broker

    class Sweeping:
        """A launcher with the optional ``sweep`` ability, wrapping the local one."""

        def __init__(self, inner):
            self.inner, self.name, self.capabilities, self.swept = inner, inner.name, inner.capabilities, []

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def sweep(self, known):
            self.swept.append(set(known()))
            return []

    wrapped = Sweeping(launcher)
    engine.launcher = wrapped
    job = submit(service, "sleep 30")  # still running at the sweep, however slow the host
    try:
        run_until(engine, store, job.id, {"running"})
        engine._last_sweep = 0.0
        engine.tick()
        assert {f"{job.id}-a1"} in wrapped.swept
    finally:
        launcher.kill(f"{job.id}-a1")


def test_the_sweep_keeps_a_cluster_launched_in_its_own_tick_and_not_a_requeued_jobs_ended_one(broker):
    """The sweep reads the jobs after the tick's launches: a job placed and launched in the tick the sweep runs
    keeps its new attempt's cluster. A job sent back to the queue has ended its latest attempt: that
    attempt's cluster (one a cancelled launch made after all) is no longer kept."""
    from dataclasses import replace

    from broker.store import Change

    service, engine, store, launcher = broker
    swept = []
    launcher.sweep = lambda known: swept.append(set(known())) or []
    engine.launcher = launcher
    earlier = submit(service, "sleep 30")
    running = run_until(engine, store, earlier.id, {"running"})
    launcher.stop(f"{earlier.id}-a1", grace_seconds=0, reason="test")
    # requeued once its attempt ended, as the engine does, and now asking for what no pool has: it stays queued
    spec = {**running.spec, "resources": {"accelerators": "H100:1"}}
    store.commit(Change(job=replace(running, state=JobState.QUEUED, placement={}, slots=[], spec=spec),
                        expected_version=running.version))
    fresh = submit(service, "sleep 30")
    engine._last_sweep = float("-inf")
    engine.tick()  # places and launches the new job, then sweeps
    assert store.get_job(fresh.id).attempts == 1 and store.get_job(earlier.id).state is JobState.QUEUED
    assert f"{fresh.id}-a1" in swept[-1] and f"{earlier.id}-a1" not in swept[-1], swept
    launcher.stop(f"{fresh.id}-a1", grace_seconds=0, reason="test over")


def test_the_sweep_reads_the_jobs_once_the_launcher_has_listed_its_clusters(broker):
    """The engine read the jobs, then the launcher listed its clusters: a job another broker placed and launched
    in between had its new cluster swept as unknown. The engine hands the sweep the read, which runs after the
    listing."""
    service, engine, store, launcher = broker
    seen, others = [], []

    def sweep(known):  # while it lists, another broker takes a job submitted just now and launches it
        if others:  # the other broker's own first tick sweeps too, through this same launcher: not under test
            return []  # (left to recurse, it nested a broker per level until a level's wait timed out)
        others.append(submit(service, "sleep 30"))
        run_until(Engine(engine.settings, store, launcher, actor="other-broker"), store, others[0].id, {"running"})
        seen.append(set(known()))
        return []

    launcher.sweep = sweep
    engine.launcher = launcher
    engine._last_sweep = float("-inf")
    engine.tick()
    assert seen and f"{others[0].id}-a1" in seen[-1], seen
    launcher.stop(f"{others[0].id}-a1", grace_seconds=0, reason="test over")


def test_a_job_waiting_for_a_full_pool_gets_a_rough_start_estimate(broker):
    service, engine, store, launcher = broker
    # runs past its expected 36 s (an overdue job's estimate is another matter), however slow the host
    task = {"run": "sleep 60", "resources": {"cpus": 1}, "broker": {"budget_usd": 5, "expected_hours": "0.01"}}
    first = service.submit(ADMIN, task)[0]
    second = submit(service, "echo next")
    try:
        running = run_until(engine, store, first.id, {"running"})
        engine.tick()
        positions, starts = service.queue()
        assert positions == {second.id: 1}
        # the running job expects 36 s: the next one starts when it ends
        assert starts[second.id] == pytest.approx(running.running_since + 36, abs=0.01)
    finally:
        launcher.kill(f"{first.id}-a1")


def test_a_start_estimate_follows_only_running_jobs_on_capacity_the_waiting_job_can_use(broker):
    """A GPU job waits for the GPU pool and a CPU job for the CPU pool: each follows the running job on
    its own pool, not whichever running job ends first."""
    service, engine, store, _ = broker

    def expecting(hours, **resources):
        task = {"run": "sleep 30", "resources": resources,
                "broker": {"budget_usd": 5, "expected_hours": hours}}
        return service.submit(ADMIN, task)[0]

    cpu = expecting("0.002", cpus=1)  # 7.2 s
    gpu = expecting("0.02", accelerators="A100:2")  # 72 s, both GPU slots
    try:
        running_cpu = run_until(engine, store, cpu.id, {"running"})
        running_gpu = run_until(engine, store, gpu.id, {"running"})
        gpu_next = submit(service, "echo gpu", accelerators="A100:1")
        cpu_next = submit(service, "echo cpu")
        engine.tick()
        assert all("full" in store.get_job(j.id).reason for j in (gpu_next, cpu_next))
        positions, starts = service.queue()
        assert positions == {gpu_next.id: 1, cpu_next.id: 2}
        assert starts[gpu_next.id] == pytest.approx(running_gpu.running_since + 72, abs=0.01)
        assert starts[cpu_next.id] == pytest.approx(running_cpu.running_since + 7.2, abs=0.01)
    finally:
        for job in (cpu, gpu):
            service.cancel(ADMIN, job.id)
            run_until(engine, store, job.id, {"cancelled"})


def test_a_queued_job_whose_budget_is_spent_is_stopped_not_queued_forever(broker):
    from dataclasses import replace as dc_replace

    from broker.store import Change

    service, engine, store, _ = broker
    job = submit(service, "echo never")
    store.commit(Change(job=dc_replace(job, spent=job.budget - 1), expected_version=job.version))
    engine.tick()
    stopped = store.get_job(job.id)
    assert stopped.state is JobState.STOPPED_BUDGET and "raise the budget" in stopped.reason


def test_a_task_the_launcher_can_never_run_fails_once_instead_of_requeuing_forever(broker):
    """A job stored before submit required a command (its task has none): the local launcher refuses it
    for good, so the job fails with that reason after one attempt rather than cycling through the queue
    holding a slot."""
    from dataclasses import replace as dc_replace

    from broker.store import Change

    service, engine, store, _ = broker
    job = submit(service, "echo placeholder")
    spec = {k: v for k, v in job.spec.items() if k != "run"}
    store.commit(Change(job=dc_replace(job, spec=spec), expected_version=job.version))
    final = run_until(engine, store, job.id, {"failed", "succeeded"})
    for _ in range(5):
        engine.tick()
    assert store.get_job(job.id).state is JobState.FAILED
    assert len(store.attempts(job.id)) == 1
    assert final.diagnosis["class"] == "launch_refused" and final.diagnosis["infrastructure"] is False
    assert "no run command" in final.reason and "submit it again" in final.reason
    assert [e.event for e in store.events(job.id)] == ["submit", "place", "launch", "fail"]


def test_a_deadline_job_with_no_spot_offer_waits_for_the_full_pool_not_for_spot(broker):
    """With no spot zone for it, the spot policy has nothing to decide: the job says the pool is full and
    gets a start estimate, instead of 'the spot policy waits for spot capacity'."""
    service, engine, store, launcher = broker
    task = {"run": "sleep 60", "resources": {"cpus": 1}, "broker": {"budget_usd": 5, "expected_hours": "0.01"}}
    first = service.submit(ADMIN, task)[0]
    late = {"run": "echo late", "resources": {"cpus": 1},
            "broker": {"budget_usd": 5, "deadline": "2h", "expected_hours": "0.5"}}
    second = service.submit(ADMIN, late)[0]
    try:
        run_until(engine, store, first.id, {"running"})
        engine.tick()
        waiting = store.get_job(second.id)
        assert waiting.state is JobState.QUEUED
        assert "full" in waiting.reason and "spot" not in waiting.reason, waiting.reason
        assert second.id in service.queue()[1]
    finally:
        launcher.kill(f"{first.id}-a1")


def test_pinning_a_job_to_on_demand_where_there_is_none_is_refused(broker):
    from broker.service import Conflict

    service, _, store, _ = broker
    job = submit(service, "echo x")
    with pytest.raises(Conflict, match="no on-demand offer fits this job"):
        service.switch_to_ondemand(ADMIN, job.id)
    assert store.get_job(job.id).force_tier is None


def test_a_launch_cut_short_before_its_process_started_is_launched_again_once(broker):
    """The broker killed inside launch(), after the run folder was made but before the process was
    spawned: the attempt is launched again, not left 'launching' for good — and runs once."""
    import json as _json

    service, engine, store, launcher = broker
    real_launch = launcher.launch
    cut = []

    def dies_midway(request):
        if not cut:  # what a kill -9 at that moment leaves behind: the lock, the request, no process
            cut.append(request.attempt_id)
            run_dir = launcher.runs_dir / request.attempt_id
            run_dir.mkdir(parents=True)
            (run_dir / "launch.lock").touch()
            (run_dir / "request.json").write_text(_json.dumps({"attempt_id": request.attempt_id}))
            (run_dir / "runner.log").touch()
            past = time.time() - 60  # the broker came back after the start-up grace
            os.utime(run_dir, (past, past))
            return
        real_launch(request)

    launcher.launch = dies_midway
    job = submit(service, "echo ran-$BROKER_ATTEMPT; sleep 0.5")
    final = run_until(engine, store, job.id, {"succeeded", "failed"})
    assert final.state is JobState.SUCCEEDED and cut == [f"{job.id}-a1"]
    assert len(store.attempts(job.id)) == 1
    assert service.logs(ADMIN, job.id)["data"].count("ran-1") == 1
    assert [e.event for e in store.events(job.id)] == ["submit", "place", "launch", "start", "succeed"]


def test_an_attempt_whose_launch_is_in_progress_elsewhere_is_pending_not_gone(broker, tmp_path):
    import fcntl

    from launchers.base import Phase

    _, _, _, launcher = broker
    run_dir = launcher.runs_dir / "j-x-a1"
    run_dir.mkdir(parents=True)
    (run_dir / "launch.lock").touch()
    assert launcher.status("j-x-a1").phase is Phase.PENDING  # just made: a launch() may be about to lock it
    past = time.time() - 60
    os.utime(run_dir, (past, past))
    with open(run_dir / "launch.lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another broker process is inside launch()
        assert launcher.status("j-x-a1").phase is Phase.PENDING
    assert launcher.status("j-x-a1").phase is Phase.GONE  # nobody launching, nothing spawned: cut short
    (run_dir / "spawned").write_text("1")
    assert launcher.status("j-x-a1").phase is not Phase.GONE  # a launch that spawned is never "cut short"



SKYPILOT_STYLE_RUN = """
MASTER_ADDR=$(echo "$SKYPILOT_NODE_IPS" | head -n1)
echo "nodes=$SKYPILOT_NUM_NODES rank=$SKYPILOT_NODE_RANK master=$MASTER_ADDR gpus=$SKYPILOT_NUM_GPUS_PER_NODE"
echo "task=$SKYPILOT_TASK_ID token=$HF_TOKEN model=$MODEL ckpt=$BROKER_CHECKPOINT_DIR"
"""


def test_a_task_written_for_skypilot_sees_its_variables_secrets_and_checkpoint_folder(broker):
    service, engine, store, _ = broker
    task = {"name": "ddp", "resources": {"accelerators": "A100:2"}, "run": SKYPILOT_STYLE_RUN,
            "envs": {"MODEL": "llama", "HF_TOKEN": "from-envs"}, "secrets": {"HF_TOKEN": "hf_secret"},
            "file_mounts": {"/ckpt": "broker:checkpoint", "/data": "s3://some-bucket/data"},
            "broker": {"budget_usd": 5}}
    job = service.submit(ADMIN, task)[0]
    final = run_until(engine, store, job.id, {"succeeded", "failed"})
    assert final.state is JobState.SUCCEEDED, final.reason
    (attempt,) = store.attempts(job.id)
    log = service.logs(ADMIN, job.id)["data"]
    assert "nodes=1 rank=0 master=127.0.0.1 gpus=2" in log  # torchrun --nnodes/--node_rank/--nproc_per_node work
    folder = final.checkpoint_uri.removeprefix("file://")
    # secrets over envs, as SkyPilot (the envs' value would be shown; the secret's is hidden in the logs answer)
    assert f"task={attempt.id} token=*** model=llama ckpt={folder}" in log
    assert os.path.isdir(folder)
    # what this host does not do is said, not silently dropped
    assert "file_mounts are not mounted on this host (only SkyPilot placements mount them): /data" in log


def test_a_mount_whose_source_is_not_on_this_host_is_said_so_beside_one_linked_from_it(broker, tmp_path):
    """A missing source read "file_mounts are not mounted on this host (only SkyPilot placements mount them)" while a
    source that exists on the same broker was linked: the log said something untrue of the one it named."""
    service, engine, store, _ = broker
    (tmp_path / "tok.txt").write_text("tok\n")
    mnt = tmp_path / "mnt"
    task = {"name": "m", "run": f"cat {mnt}/tok.txt", "resources": {"cpus": 1}, "broker": {"budget_usd": 5},
            "file_mounts": {f"{mnt}/tok.txt": str(tmp_path / "tok.txt"), f"{mnt}/nope": str(tmp_path / "nope.txt"),
                            "/data": "s3://some-bucket/data"}}
    job = service.submit(ADMIN, task)[0]
    final = run_until(engine, store, job.id, {"succeeded", "failed"})
    log = service.logs(ADMIN, job.id)["data"]
    assert final.state is JobState.SUCCEEDED, (final.reason, log)
    assert f"file_mounts {mnt}/tok.txt: a link to {tmp_path / 'tok.txt'} on this host" in log, log
    assert (f"file_mounts {mnt}/nope: not mounted: its source {tmp_path / 'nope.txt'} does not exist on this host"
            in log), log
    # a bucket is still SkyPilot's to mount, and only it is named so
    assert "file_mounts are not mounted on this host (only SkyPilot placements mount them): /data\n" in log, log


def test_a_job_of_several_nodes_is_refused_where_only_a_pool_could_take_it(broker):
    service, _, store, _ = broker
    task = {"num_nodes": 2, "resources": {"accelerators": "A100:1"}, "run": "torchrun train.py",
            "broker": {"budget_usd": 5}}
    with pytest.raises(Invalid) as caught:  # before: accepted, then queued forever as "every pool is full"
        service.submit(ADMIN, task)
    assert caught.value.field == "num_nodes"
    assert "one node" in caught.value.reason and store.list_jobs() == []


def test_a_job_of_several_nodes_on_a_simulated_zone_runs_as_one_node_and_says_so(make_settings, tmp_path):
    settings = make_settings(config=CONFIG + "zones:\n  - {name: sim-a, tier: ondemand, instance_type: g5.xlarge}\n")
    store = open_store(f"sqlite://{tmp_path / 'z.db'}")
    launcher = open_launcher(settings)
    service, engine = BrokerService(settings, store, launcher), Engine(settings, store, launcher)
    task = {"num_nodes": 2, "run": SKYPILOT_STYLE_RUN, "broker": {"budget_usd": 5}, "volumes": {"/mnt/data": "ds"},
            "resources": {"accelerators": "A10G:1", "image_id": "docker:pytorch/pytorch:latest", "ports": 8888,
                          "network_tier": "best", "disk_tier": "high", "disk_size": 200, "labels": {"team": "ml"}}}
    job = service.submit(ADMIN, task)[0]
    final = run_until(engine, store, job.id, {"succeeded", "failed"})
    assert final.state is JobState.SUCCEEDED, final.reason
    log = service.logs(ADMIN, job.id)["data"]
    assert "nodes=1 rank=0 master=127.0.0.1 gpus=2" in log
    assert "num_nodes: 2 runs on this host as one node with the GPUs of all 2" in log
    assert "image_id docker:pytorch/pytorch:latest is not used on this host" in log
    assert "ports 8888 are not exposed on this host" in log
    # the settings a SkyPilot cluster is given and this host does not apply were dropped without a word
    assert ("resources network_tier best, disk_tier high, disk_size 200, labels {team: ml}: not applied on this host "
            "(only SkyPilot placements set them): the job runs on this host's own network and disk") in log, log
    assert "volumes are not attached on this host (only SkyPilot placements attach them): /mnt/data" in log
    request = settings.data_dir / "runs" / f"{job.id}-a1" / "request.json"
    assert request.stat().st_mode & 0o077 == 0  # the task's secrets and the job's token: this user only
    store.close()


def test_an_attempt_that_ran_past_its_budget_while_the_broker_was_away_is_recorded_at_the_budget_and_said_so(
        make_settings, tmp_path):
    # $36/h is one cent a second; the broker is away for an hour while a $1 job runs: the recorded spend stops
    # at the budget, and the notes say so with the figures of the record (not "-$35.05 left", not "3605%")
    settings = make_settings(config=CONFIG.replace('"0.36"', '"36"'))
    store = open_store(f"sqlite://{tmp_path / 'away.db'}")
    launcher = open_launcher(settings)
    now = [time.time()]  # the hour away passes on both its clocks: the wall clock and the one it bills by
    engine = Engine(settings, store, launcher, clock=lambda: now[0], monotonic=lambda: now[0])
    service = BrokerService(settings, store, launcher, clock=lambda: now[0])
    job = service.submit(ADMIN, {"name": "t", "run": "sleep 30", "resources": {"cpus": 1},
                                 "broker": {"budget_usd": "1"}})[0]
    try:
        wait_for(lambda: engine.tick() or store.get_job(job.id).state is JobState.RUNNING)
        now[0] += 3600
        engine.tick()
        stopping = store.get_job(job.id)
        assert stopping.state is JobState.STOPPING and stopping.spent == stopping.budget == 1_000_000
        notes = {e.event: e for e in store.events(job.id)}
        warning, stop = notes["budget_warning"], notes["budget_stop_requested"]
        assert warning.data["percent"] == 100 and warning.data["spent"] == 1_000_000
        assert warning.reason.startswith("spent $1.00 of $1.00 (100%); it ran on while the broker was not watching")
        beyond = warning.data["beyond_budget"]
        assert 34_000_000 < beyond < 37_000_000 and stop.data["beyond_budget"] == beyond
        assert f"{fmt(beyond)} more at $36.00/h is beyond the budget, said here and not counted in its spend" in stop.reason
        assert stop.reason.startswith("stopping at $1.00 of $1.00: the budget is used up")
        assert "-$" not in warning.reason + stop.reason
    finally:
        final = run_until(engine, store, job.id, {"stopped_budget", "failed", "succeeded"})
        store.close()
    assert final.spent == final.budget


def _expensive_cpu_broker(make_settings, tmp_path, name):
    # $36/h is one cent a second: a $0.10 budget holds 10 seconds. The broker's wall clock stays where it was when
    # the job was launched (it bills by its monotonic clock, the real seconds), and the tests do not tick it while
    # the launcher's limit comes, so its own budget stop (4 s in) never comes first however slowly a loaded machine
    # runs the test: what stops the job is the launcher's limit, counted on the runner's real clock
    settings = make_settings(config=CONFIG.replace('"0.36"', '"36"'))
    store = open_store(f"sqlite://{tmp_path / name}")
    launcher = open_launcher(settings)
    launched_at = [time.time()]
    return (settings, store, launcher, Engine(settings, store, launcher, clock=lambda: launched_at[0]),
            BrokerService(settings, store, launcher, clock=lambda: launched_at[0]))


def test_the_launcher_keeps_the_budget_by_itself_while_no_broker_watches(make_settings, tmp_path):
    # the broker sees the job start and then stops ticking (down): the attempt's own limit stops it, the
    # checkpoint-and-exit grace included, before it costs more than the budget; the broker, back, records a
    # budget stop at what really ran (not a cost capped to the budget)
    settings, store, launcher, engine, service = _expensive_cpu_broker(make_settings, tmp_path, "limit.db")
    job = service.submit(ADMIN, {"name": "t", "run": "trap 'echo saved on notice; exit 0' TERM; sleep 60 & wait",
                                 "resources": {"cpus": 1}, "broker": {"budget_usd": "0.10"}})[0]
    try:
        wait_for(lambda: engine.tick() or store.get_job(job.id).state is JobState.RUNNING)
        (attempt,) = store.attempts(job.id)
        assert attempt.limit_at == attempt.created_at + 10 - settings.stop_grace_seconds - 3
        ended = settings.data_dir / "runs" / attempt.id / "exit.json"
        wait_for(ended.exists, timeout=20)  # nobody ticks the engine meanwhile
        final = run_until(engine, store, job.id, {"stopped_budget", "failed", "succeeded", "queued"})
        assert final.state is JobState.STOPPED_BUDGET
        (attempt,) = store.attempts(job.id)
        ran = billed_seconds(attempt.created_at, attempt.billed_until)  # exact, to where it was billed (the monotonic clock)
        assert ran <= 10 - 3 and attempt.cost == cost_for_seconds(attempt.price_per_hour, ran) <= final.budget
        assert attempt.stop_reason == "budget" and final.spent == attempt.cost
        events = [e.event for e in store.events(job.id)]
        assert "budget_stop_requested" in events and events[-2:] == ["stop_budget", "ended"]
        assert "saved on notice" in service.logs(ADMIN, job.id)["data"]  # the stop came with its notice
    finally:
        store.close()


def test_raising_the_budget_of_a_running_job_moves_the_launchers_own_stop(make_settings, tmp_path):
    settings, store, launcher, engine, service = _expensive_cpu_broker(make_settings, tmp_path, "raise.db")
    # $0.20: 20 s, a first limit 15 s after the launch, which a loaded host's start and raise come well before
    job = service.submit(ADMIN, {"name": "t", "run": "sleep 60", "resources": {"cpus": 1},
                                 "broker": {"budget_usd": "0.20"}})[0]
    try:
        wait_for(lambda: engine.tick() or store.get_job(job.id).state is JobState.RUNNING)
        (attempt,) = store.attempts(job.id)
        limit = settings.data_dir / "runs" / attempt.id / "limit.json"
        first = json.loads(limit.read_text())["stop_at"]
        assert first == pytest.approx(attempt.limit_at, abs=2)  # the same moment, on the runner's clock
        service.raise_budget(ADMIN, job.id, 10_000_000)  # $10: 1,000 seconds
        engine.tick()
        (attempt,) = store.attempts(job.id)
        assert attempt.limit_at == attempt.created_at + 1000 - settings.stop_grace_seconds - 3
        assert json.loads(limit.read_text())["stop_at"] > first + 900  # about 990 s later
        time.sleep(first - time.time() + 1.5)  # past the first limit: the runner reads the new one
        assert store.get_job(job.id).state is JobState.RUNNING
        assert not (limit.parent / "exit.json").exists() and not (limit.parent / "stop.json").exists()
    finally:
        service.cancel(ADMIN, job.id)
        run_until(engine, store, job.id, {"cancelled"})
        store.close()


def test_a_cancel_that_comes_after_the_run_finished_on_its_own_leaves_the_job_succeeded(broker):
    # the broker was not watching (down) when the run exited 0; the user's cancel came after: the work is
    # done and paid for, so the job says succeeded, not "cancelled" with a reason that reads "succeeded"
    service, engine, store, launcher = broker
    job = submit(service, "sleep 1; echo done")
    run_until(engine, store, job.id, {"running"})
    attempt = store.attempts(job.id)[-1]
    wait_for((launcher.runs_dir / attempt.id / "exit.json").exists)  # nobody ticks the engine meanwhile
    service.cancel(ADMIN, job.id)
    assert store.get_job(job.id).state is JobState.CANCELLING
    final = run_until(engine, store, job.id, {"succeeded", "cancelled", "failed"})
    assert final.state is JobState.SUCCEEDED, final.reason
    assert "before the cancel asked of it reached it" in store.events(job.id)[-1].reason
    assert [e.event for e in store.events(job.id)][-2:] == ["cancel", "succeed"]


def test_a_budget_raised_while_no_engine_ran_resumes_the_job_its_runner_stopped_at_the_old_limit(make_settings,
                                                                                                  tmp_path):
    # the API took the raise but no engine ticked to move the runner's limit: the runner stops the job at the
    # old one, and the engine, back, resumes it (the budget allows more) instead of leaving it stopped
    settings, store, launcher, engine, service = _expensive_cpu_broker(make_settings, tmp_path, "stale.db")
    job = service.submit(ADMIN, {"name": "t", "run": "sleep 60", "resources": {"cpus": 1},
                                 "broker": {"budget_usd": "0.10"}})[0]
    try:
        wait_for(lambda: engine.tick() or store.get_job(job.id).state is JobState.RUNNING)
        (first,) = store.attempts(job.id)
        service.raise_budget(ADMIN, job.id, 10_000_000)
        wait_for((settings.data_dir / "runs" / first.id / "exit.json").exists, timeout=20)
        engine.tick()
        events = store.events(job.id)
        assert "stop_budget" not in [e.event for e in events]
        [recover] = [e for e in events if e.event == "recover"]
        assert "budget was raised since" in recover.reason
        assert store.attempts(job.id)[0].state.value == "stopped"
    finally:
        service.cancel(ADMIN, job.id)
        run_until(engine, store, job.id, {"cancelled"})
        store.close()


def test_a_budget_lowered_while_no_engine_ran_reaches_the_runner_at_the_next_engines_first_tick(make_settings,
                                                                                              tmp_path):
    # the API alone (no engine) takes the lower budget: the runner still holds the old limit until an engine runs;
    # a broker started later pushes the new one on its first tick, and the runner keeps it by itself from then
    settings = make_settings(config=CONFIG.replace('"0.36"', '"36"'))  # one cent a second
    store = open_store(f"sqlite://{tmp_path / 'lowered.db'}")
    launcher = open_launcher(settings)
    service = BrokerService(settings, store, launcher)
    job = service.submit(ADMIN, {"name": "t", "run": "sleep 60", "resources": {"cpus": 1},
                                 "broker": {"budget_usd": "0.60"}})[0]  # 60 s: the runner's limit 55 s in
    try:
        run_until(Engine(settings, store, launcher), store, job.id, {"running"})  # that broker then goes away
        (attempt,) = store.attempts(job.id)
        limit = settings.data_dir / "runs" / attempt.id / "limit.json"
        # lowered by a broker whose launcher does not hold the run (an API of the same broker with the run's launcher
        # moves it at once: test_broker_budget_lowered_unwatched.py), which says so
        BrokerService(settings, store).raise_budget(ADMIN, job.id, 150_000)  # $0.15: 15 s, the limit 10 s in
        assert json.loads(limit.read_text())["stop_at"] == pytest.approx(attempt.created_at + 55, abs=1)  # not yet
        assert [e.event for e in store.events(job.id)][-1] == "budget_limit_not_moved"
        later = Engine(settings, store, launcher)
        later.tick()
        assert json.loads(limit.read_text())["stop_at"] == pytest.approx(attempt.created_at + 10, abs=1)
        assert store.attempts(job.id)[0].limit_at == attempt.created_at + 10
        wait_for((limit.parent / "exit.json").exists, timeout=20)  # nobody ticks meanwhile: the runner stops it
        assert json.loads((limit.parent / "stop.json").read_text())["by"] == "runner"
        final = run_until(later, store, job.id, {"stopped_budget", "failed", "succeeded", "queued"})
        assert final.state is JobState.STOPPED_BUDGET and final.spent <= 150_000
    finally:
        if not store.get_job(job.id).state.is_final:
            service.cancel(ADMIN, job.id)
            run_until(Engine(settings, store, launcher), store, job.id, {"cancelled"})
        store.close()


def test_a_budget_raised_while_the_runner_is_already_stopping_at_the_old_limit_resumes_the_job(make_settings,
                                                                                                tmp_path):
    # the runner's limit came while no engine ticked, and the raise reaches the engine during the grace period:
    # the stop under way cannot be called back, so the engine must not record the limit as moved (the stop that
    # follows would read as one at the new budget's limit and leave the job stopped_budget with money left)
    settings = make_settings(config=CONFIG.replace('"0.36"', '"36"').replace("stop_grace_seconds: 2",
                                                                            "stop_grace_seconds: 5"))
    store = open_store(f"sqlite://{tmp_path / 'grace.db'}")
    launcher = open_launcher(settings)
    launched_at = [time.time()]  # the engine's clock stays at the launch: its own budget stop never comes first
    engine = Engine(settings, store, launcher, clock=lambda: launched_at[0])
    service = BrokerService(settings, store, launcher, clock=lambda: launched_at[0])
    # $36/h: 20 s, the runner's limit some 12 s in (the grace and a margin before): bash has set its trap by then
    job = service.submit(ADMIN, {"name": "t", "run": "trap '' TERM; echo armed; sleep 60", "resources": {"cpus": 1},
                                 "broker": {"budget_usd": "0.20"}})[0]
    try:
        wait_for(lambda: engine.tick() or store.get_job(job.id).state is JobState.RUNNING)
        (first,) = store.attempts(job.id)
        run_dir = settings.data_dir / "runs" / first.id
        wait_for((run_dir / "stop.json").exists, timeout=40)  # the runner stops it by itself: 5 s of grace
        assert "armed" in service.logs(ADMIN, job.id)["data"]
        service.raise_budget(ADMIN, job.id, 10_000_000)
        engine.tick()
        assert not (run_dir / "exit.json").exists()  # still within the grace period
        assert store.attempts(job.id)[0].limit_at == first.limit_at  # that stop cannot be moved
        wait_for((run_dir / "exit.json").exists, timeout=20)
        engine.tick()
        events = [e.event for e in store.events(job.id)]
        assert "stop_budget" not in events and "recover" in events
    finally:
        service.cancel(ADMIN, job.id)
        run_until(engine, store, job.id, {"cancelled"})
        store.close()


class _Scripted:
    """A launcher whose attempts are in the phase the test sets: the run's own exit between the engine's look
    and its stop request is a race no real process can be timed into."""

    name = "scripted"
    capabilities = Capabilities(simulated=True)

    def __init__(self):
        self.statuses: dict[str, AttemptStatus] = {}
        self.stopped: list[tuple[str, str]] = []

    def launch(self, request) -> None:
        self.statuses.setdefault(request.attempt_id, AttemptStatus(Phase.RUNNING))

    def status(self, attempt_id: str) -> AttemptStatus:
        return self.statuses.get(attempt_id, AttemptStatus(Phase.GONE))

    def stop(self, attempt_id: str, *, grace_seconds: float = 30.0, reason: str = "") -> None:
        self.stopped.append((attempt_id, reason))

    def logs(self, attempt_id: str, *, offset: int = 0, limit: int = 1 << 20) -> tuple[bytes, int]:
        return b"", offset


def test_a_run_that_exits_0_just_after_its_cancel_was_asked_is_diagnosed_succeeded_not_cancelled(make_settings,
                                                                                                   tmp_path):
    settings = make_settings(config=CONFIG)
    store, launcher = open_store(f"sqlite://{tmp_path / 'late.db'}"), _Scripted()
    service, engine = BrokerService(settings, store, launcher), Engine(settings, store, launcher)
    try:
        job = submit(service, "true")
        run_until(engine, store, job.id, {"running"})
        service.cancel(ADMIN, job.id)
        engine.tick()  # the engine asks the attempt to stop
        (attempt,) = store.attempts(job.id)
        assert launcher.stopped == [(attempt.id, "cancelled")] and attempt.stop_reason == "cancelled"
        launcher.statuses[attempt.id] = AttemptStatus(Phase.SUCCEEDED, exit_code=0, step="run")  # it had finished
        final = run_until(engine, store, job.id, {"succeeded", "cancelled"})
        assert final.state is JobState.SUCCEEDED, final.reason
        assert final.diagnosis["class"] == "succeeded" and final.diagnosis["text"] == "The job succeeded."
    finally:
        store.close()


@pytest.mark.parametrize("phase", [Phase.PREEMPTED, Phase.LOST])
def test_a_cancelled_job_whose_capacity_went_as_it_stopped_does_not_say_it_restarts(make_settings, tmp_path, phase):
    """A cancel during a spot preemption's notice: the job's reason read "Cancelled after step 52 … in slowg; restarts
    from the beginning (52 steps lost)", of a job that restarts no more."""
    settings = make_settings(config=CONFIG)
    store, launcher = open_store(f"sqlite://{tmp_path / 'gone.db'}"), _Scripted()
    service, engine = BrokerService(settings, store, launcher), Engine(settings, store, launcher)
    try:
        job = submit(service, "true")
        run_until(engine, store, job.id, {"running"})
        service.cancel(ADMIN, job.id)
        engine.tick()
        (attempt,) = store.attempts(job.id)
        launcher.statuses[attempt.id] = AttemptStatus(phase, reason="the capacity was taken back")
        final = run_until(engine, store, job.id, {"cancelled", "queued", "failed"})
        assert final.state is JobState.CANCELLED, final.reason
        said = store.attempts(job.id)[0].reason
        assert "restarts from the beginning" not in said and "resumes from" not in said, said
        assert said.lower().count("cancelled") == 1, said  # "Cancelled in …; cancelled" said it twice
    finally:
        store.close()


def test_a_run_that_exits_0_just_after_it_was_stopped_as_silent_is_a_success_not_a_lost_node(make_settings,
                                                                                               tmp_path):
    from dataclasses import replace

    from broker.store import Change

    settings = make_settings(config=CONFIG + "heartbeat_timeout_seconds: 5\n")
    store, launcher = open_store(f"sqlite://{tmp_path / 'quiet.db'}"), _Scripted()
    service, engine = BrokerService(settings, store, launcher), Engine(settings, store, launcher)
    try:
        job = submit(service, "true")
        run_until(engine, store, job.id, {"running"})
        running, (started,) = store.get_job(job.id), store.attempts(job.id)
        # it started long ago, and its last report is long past: the engine takes it for stalled
        store.commit(Change(job=replace(running, progress={"step": 7, "at": time.time() - 100}),
                            expected_version=running.version,
                            attempts=[replace(started, created_at=time.time() - 200, started_at=time.time() - 200)]))
        engine._watching_since -= 200  # and the engine has watched it all that time (one just started waits a timeout)
        engine.tick()
        (attempt,) = store.attempts(job.id)
        assert launcher.stopped == [(attempt.id, "heartbeat")]
        launcher.statuses[attempt.id] = AttemptStatus(Phase.SUCCEEDED, exit_code=0, step="run")  # it had finished
        final = run_until(engine, store, job.id, {"succeeded", "queued", "failed"})
        assert final.state is JobState.SUCCEEDED, final.reason
        assert final.reason.startswith("succeeded"), final.reason  # not "... in cpu; resumes from step 7"
        assert final.diagnosis["class"] == "succeeded"
    finally:
        store.close()
