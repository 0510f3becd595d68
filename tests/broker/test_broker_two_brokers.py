"""Several broker processes on one Redis: every job runs, and every attempt runs exactly once."""

import os
import signal
import time
import subprocess
import sys

import httpx
import pytest
import redis

from broker_testing import ADMIN, REPO, start_broker, wait_for

CONFIG = """
pools:
  - {name: local, slots: 4, price_per_slot_hour: "0.10"}
tick_seconds: 0.05
"""


def test_two_engines_sharing_redis_launch_each_attempt_once(tmp_path, redis_server):
    url = redis_server.url.rsplit("/", 1)[0] + "/14"
    redis.Redis.from_url(url).flushdb()
    api, base = start_broker(tmp_path, url, engine="off", config=CONFIG)
    cfg = tmp_path / "worker.yaml"
    cfg.write_text(CONFIG)
    env = {**os.environ, "BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_ADMIN_TOKEN": ADMIN,
           "BROKER_STORE_URL": url}
    workers = [subprocess.Popen([sys.executable, "-m", "broker.cli", "worker", "--config", str(cfg)], env=env,
                                cwd=REPO, stdout=subprocess.DEVNULL, stderr=open(tmp_path / f"worker{i}.log", "w"))
               for i in range(2)]
    marks = tmp_path / "marks"
    marks.mkdir()
    try:
        client = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {ADMIN}"})
        ids = [client.post("/v1/jobs", json={"name": f"j{i}", "run": f"echo $BROKER_ATTEMPT >> {marks}/{i}; sleep 0.3",
                                             "broker": {"budget_usd": 1}}).json()["id"] for i in range(12)]

        def all_done():
            return all(client.get(f"/v1/jobs/{i}").json()["state"] == "succeeded" for i in ids)

        wait_for(all_done, timeout=90, interval=0.3)
        for n in range(12):
            assert (marks / str(n)).read_text() == "1\n", f"job {n} ran {(marks / str(n)).read_text()!r}"
        for job_id in ids:
            launches = [e for e in client.get(f"/v1/jobs/{job_id}/events").json()["events"] if e["event"] == "launch"]
            assert len(launches) == 1
    finally:
        for w in workers:
            w.send_signal(signal.SIGTERM)
        for w in workers:
            w.wait(15)
        api.send_signal(signal.SIGTERM)
        api.wait(15)
    assert all(w.returncode == 0 for w in workers)


def test_brokers_that_each_see_only_their_own_launches_never_run_an_attempt_twice(tmp_path, redis_server,
                                                                                  make_settings):
    """Two brokers on one Redis whose launchers do not share state (two hosts, or two SkyPilot states):
    each engine watches only the attempts launched in its own launcher's view. Before, broker B asked its
    own launcher about A's running attempt, heard "gone", called it lost and launched it again beside
    the first. An engine silent past ``owner_timeout_seconds`` (its host gone) hands its attempts over:
    lost, and resumed by the others."""
    from broker.auth import Principal
    from broker.engine.reconcile import Engine
    from broker.service import BrokerService, Invalid
    from broker.store import open_store
    from launchers.local import LocalLauncher

    url = redis_server.url.rsplit("/", 1)[0] + "/13"
    redis.Redis.from_url(url).flushdb()
    settings = make_settings(url, config="pools:\n  - {name: local, slots: 2, price_per_slot_hour: \"0.10\"}\n"
                                         "tick_seconds: 0.05\nowner_timeout_seconds: 5\n")
    store = open_store(url)
    hosts = {name: LocalLauncher(tmp_path / name / "runs") for name in ("a", "b")}
    assert hosts["a"].domain != hosts["b"].domain
    engines = {name: Engine(settings, store, launcher) for name, launcher in hosts.items()}
    services = {name: BrokerService(settings, store, launcher) for name, launcher in hosts.items()}
    admin = Principal("admin", None, admin=True)
    marks = tmp_path / "marks"
    marks.mkdir()

    def submit(name, seconds):
        task = {"name": name, "run": f"echo $BROKER_ATTEMPT >> {marks}/{name}; sleep {seconds}",
                "broker": {"budget_usd": 1}}
        return services["a"].submit(admin, task)[0].id

    def tick(*names):
        for name in names:
            engines[name].tick()
        return True

    try:
        first = submit("first", 3)
        wait_for(lambda: tick("a") and store.get_job(first).state.value == "running", timeout=20)
        for _ in range(40):  # B ticks too while A's attempt runs: it must leave it alone
            tick("a", "b")
            time.sleep(0.05)
        assert store.get_job(first).attempts == 1
        wait_for(lambda: tick("a", "b") and store.get_job(first).state.value == "succeeded", timeout=20)
        assert (marks / "first").read_text() == "1\n"
        assert [a.launched_in for a in store.attempts(first)] == [hosts["a"].domain]

        second = submit("second", 30)
        wait_for(lambda: tick("a") and store.get_job(second).state.value == "running", timeout=20)
        with pytest.raises(Invalid) as refused:  # B cannot read what A's launcher keeps
            services["b"].logs(admin, second)
        assert refused.value.status == 409 and "another broker process" in refused.value.reason
        # "running" is the runner's word that it started the command, which may not have reached its echo yet on a
        # loaded host: kill attempt 1 only once it has written its mark, so the file's lines count the runs
        mark = marks / "second"
        wait_for(lambda: mark.exists() and mark.read_text() == "1\n", timeout=20)
        hosts["a"].kill(f"{second}-a1")  # host A goes down with its broker: A ticks no more
        for _ in range(10):  # still within the timeout: B waits for A
            tick("b")
            time.sleep(0.05)
        assert store.get_job(second).attempts == 1
        job = wait_for(lambda: tick("b") and (j := store.get_job(second)).attempts == 2 and j, timeout=20)
        lost = store.attempts(second)[0]
        assert lost.state.value == "lost" and "silent" in lost.reason and hosts["a"].domain in lost.reason
        assert not job.blocked_zones  # a silent broker is not the zone's doing
        wait_for(lambda: tick("b") and store.get_job(second).state.value == "running", timeout=20)
        assert store.attempts(second)[1].launched_in == hosts["b"].domain
        # wait for attempt 2's mark (the same race), then keep ticking a moment to see no third run join it
        wait_for(lambda: tick("b") and mark.read_text().count("\n") >= 2, timeout=20)
        for _ in range(10):
            tick("b")
            time.sleep(0.05)
        assert mark.read_text() == "1\n2\n"
        services["b"].cancel(admin, second)
        wait_for(lambda: tick("b") and store.get_job(second).state.value == "cancelled", timeout=20)
    finally:
        for launcher in hosts.values():
            for run in launcher.runs_dir.glob("j*"):
                launcher.kill(run.name)
        store.close()


def test_two_engines_deciding_a_moment_apart_never_hand_one_gpu_to_two_jobs(tmp_path, redis_server, make_settings):
    """Engine B reads the store (the GPU just freed, "first" waiting) and decides to place "first" there; before
    it writes, an urgent job is submitted and engine A places it on that GPU. "first" was not written by A (its
    wait reason was unchanged), so its version let B's placement through: both jobs ran on GPU 0. B's placement
    now conflicts (a placement was committed since its snapshot) and "first" waits for the GPU."""
    from broker.auth import Principal
    from broker.engine.reconcile import Engine
    from broker.lifecycle import JobState
    from broker.service import BrokerService
    from broker.store.redis import RedisStore
    from launchers.local import LocalLauncher

    settings = make_settings(redis_server.url, config="pools:\n  - {name: gpus, slots: 1, accelerator: A100, "
                                                      "price_per_slot_hour: \"1.00\"}\nstop_grace_seconds: 1\n")
    store = RedisStore(redis_server.url, prefix=f"gpu-race-{time.monotonic_ns()}")
    launcher = LocalLauncher(settings.data_dir / "runs")  # one host: both engines see its processes
    service = BrokerService(settings, store, launcher)
    admin = Principal("admin", None, admin=True)
    marks = tmp_path / "marks"
    marks.mkdir()

    def submit(name, run="sleep 30", priority=0):  # killed on the way out
        return service.submit(admin, {"name": name, "run": f"echo $CUDA_VISIBLE_DEVICES >> {marks}/{name}; {run}",
                                      "resources": {"accelerators": "A100:1"},
                                      "broker": {"budget_usd": 1, "priority": priority}})[0].id

    a = Engine(settings, store, launcher)
    urgent = []

    class DecidesThenWrites(Engine):
        def _apply_schedule(self, decision, now):
            if not urgent:  # between B's snapshot and B's write
                urgent.append(submit("urgent", priority=10))
                a.tick()
            super()._apply_schedule(decision, now)

    b = DecidesThenWrites(settings, store, launcher)
    go = marks / "go"  # the holder keeps the GPU until the test lets it go (a short sleep may end unseen)
    holder = submit("holder", run=f"while [ ! -e {go} ]; do sleep 0.05; done")
    first = submit("first")
    try:
        urgent.append(None)  # B does not interfere yet
        wait_for(lambda: a.tick() or store.get_job(holder).state is JobState.RUNNING)
        a.tick()
        assert store.get_job(first).state is JobState.QUEUED
        go.touch()
        wait_for((launcher.runs_dir / f"{holder}-a1" / "exit.json").exists)  # the GPU is free; nobody ticked
        urgent.clear()
        b.tick()  # B: the holder ended, GPU 0 is free, "first" goes there... after A put "urgent" there
        for _ in range(10):
            a.tick()
            b.tick()
            time.sleep(0.05)
        on_gpu = [name for name, job_id in (("first", first), ("urgent", urgent[0]))
                  if store.get_job(job_id).state in (JobState.LAUNCHING, JobState.RUNNING)]
        assert on_gpu == ["urgent"]
        assert store.get_job(first).state is JobState.QUEUED and not (marks / "first").exists()
    finally:
        for run in launcher.runs_dir.glob("j*"):
            launcher.kill(run.name)
        store.close()
