"""A store that does not answer is a 503 that says what became of the request, never a 500 promising
that nothing was lost: a real redis-server stopped and started again, and a SQLite file locked by
another process."""

from __future__ import annotations

import sqlite3

import pytest
from fastapi.testclient import TestClient

from broker.api.app import create_app
from broker.store import StoreUnavailable, open_store

from broker_testing import ADMIN, RedisServer

CONFIG = """
pools:
  - {name: cpu, slots: 2, price_per_slot_hour: "0.10"}
"""
TASK = {"name": "t", "run": "echo hi", "broker": {"budget_usd": 5}}
AUTH = {"Authorization": f"Bearer {ADMIN}"}


def test_a_stopped_redis_is_a_503_naming_what_may_have_happened_and_the_store_recovers(make_settings, tmp_path):
    server = RedisServer(tmp_path / "redis").start()
    store = open_store(server.url)
    app = create_app(make_settings(config=CONFIG), store=store, engine=False)
    try:
        with TestClient(app, raise_server_exceptions=False) as client:
            first = client.post("/v1/jobs", json=TASK, headers=AUTH)
            assert first.status_code == 201
            server.stop()
            ready = client.get("/v1/readyz")
            assert ready.status_code == 503 and ready.headers["Retry-After"] == "1"
            # a read changes nothing: it says only to retry ("nothing was changed" read oddly to a GET)
            assert ready.json()["detail"] == "the job store did not answer: retry in a moment"
            # liveness stays 200: replacing brokers (what a failing health check does) cannot bring Redis back
            health = client.get("/v1/healthz")
            assert health.status_code == 200 and health.json()["store"].startswith("unavailable: ")
            assert str(server.port) not in health.text, "an unauthenticated caller learns nothing of the store's address"
            metrics = client.get("/metrics")  # what the process knows of itself still comes, and says why the rest does not
            assert metrics.status_code == 200 and "broker_store_up 0.0" in metrics.text
            assert "broker_http_request_duration_seconds_bucket" in metrics.text and "broker_jobs{" not in metrics.text
            submit = client.post("/v1/jobs", json=TASK, headers={**AUTH, "Idempotency-Key": "k1"})
            assert submit.status_code == 503, submit.text
            assert "may or may not have been stored" in submit.json()["detail"]
            assert "same Idempotency-Key" in submit.json()["detail"]
            cancel = client.post(f"/v1/jobs/{first.json()['id']}/cancel", headers=AUTH)
            assert cancel.status_code == 503 and "check the job" in cancel.json()["detail"]
            server.start()  # same port, same AOF: the first job is still there
            again = client.post("/v1/jobs", json=TASK, headers={**AUTH, "Idempotency-Key": "k1"})
            assert again.status_code in (200, 201), again.text
            ids = {j["id"] for j in client.get("/v1/jobs", headers=AUTH).json()["jobs"]}
            assert ids == {first.json()["id"], again.json()["id"]}
    finally:
        store.close()
        server.stop()


def test_the_redis_store_raises_store_unavailable_not_the_drivers_error(tmp_path):
    server = RedisServer(tmp_path / "redis").start()
    store = open_store(server.url)
    server.stop()
    try:
        with pytest.raises(StoreUnavailable) as read:
            store.get_job("j-x")
        assert read.value.written is None
    finally:
        store.close()


def test_a_sqlite_file_locked_past_the_timeout_is_a_503_saying_nothing_was_stored(make_settings, tmp_path):
    path = tmp_path / "locked.db"
    store = open_store(f"sqlite://{path}")
    store._db.execute("PRAGMA busy_timeout=200")  # the shipped 30 s, shortened for the test
    app = create_app(make_settings(config=CONFIG), store=store, engine=False)
    other = sqlite3.connect(path, isolation_level=None)
    try:
        with TestClient(app, raise_server_exceptions=False) as client:
            other.execute("BEGIN EXCLUSIVE")  # another process holds the write lock
            r = client.post("/v1/jobs", json=TASK, headers=AUTH)
            assert r.status_code == 503, r.text
            assert "nothing was changed" in r.json()["detail"]
            other.execute("ROLLBACK")
            assert client.get("/v1/jobs", headers=AUTH).json()["jobs"] == []  # and indeed nothing was
            assert client.post("/v1/jobs", json=TASK, headers=AUTH).status_code == 201
    finally:
        other.close()
        store.close()


def test_every_writer_in_a_group_commit_that_cannot_begin_hears_so(tmp_path):
    """Writers queued behind a leader whose transaction could not even begin get the error too, never a
    silent None for a job."""
    import threading

    from broker.lifecycle import JobState
    from broker.models import Job
    from broker.store import Change

    def make_job(job_id: str) -> Job:
        return Job(id=job_id, name="train", team="vision", state=JobState.QUEUED, spec={"run": "echo"},
                   budget=5_000_000, priority=0, submitted_at=100.0, updated_at=100.0)

    path = tmp_path / "locked.db"
    store = open_store(f"sqlite://{path}")
    store._db.execute("PRAGMA busy_timeout=300")
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    outcomes: list[object] = []

    def write(i: int) -> None:
        try:
            outcomes.append(store.commit(Change(job=make_job(f"j-lock{i}"), expected_version=None)))
        except StoreUnavailable as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    other.execute("ROLLBACK")
    other.close()
    assert len(outcomes) == 4 and all(isinstance(o, StoreUnavailable) and o.written is False for o in outcomes), outcomes
    store.close()


def test_the_client_retries_a_submit_whose_answer_was_lost_without_making_a_second_job(make_settings, tmp_path,
                                                                                      monkeypatch):
    """The store is down for the first tries (503, outcome unknown); the client retries with the key it
    sent the first time, and the broker ends up with exactly one job."""
    import broker.client as client_mod
    from broker.client import BrokerClient

    server = RedisServer(tmp_path / "redis").start()
    store = open_store(server.url)
    app = create_app(make_settings(config=CONFIG), store=store, engine=False)
    monkeypatch.setattr(client_mod, "SUBMIT_RETRY_DELAYS", (0.0, 0.0, 0.0))
    sent: list[str] = []
    try:
        with TestClient(app, raise_server_exceptions=False) as http:
            client = BrokerClient("http://testserver", ADMIN)
            http.headers["Authorization"] = f"Bearer {ADMIN}"
            client._http = http
            real = http.request

            def request(method, url, **kw):
                sent.append(kw.get("headers", {}).get("Idempotency-Key"))
                if len(sent) == 3:
                    server.start()  # back for the third try
                return real(method, url, **kw)

            http.request = request
            server.stop()
            job = client.submit({"run": "echo hi", "broker": {"budget_usd": 5}})
            assert len(sent) == 3 and len(set(sent)) == 1 and sent[0]
            assert [j["id"] for j in client.jobs()] == [job["id"]]
    finally:
        store.close()
        server.stop()


def test_a_worker_outlives_a_redis_outage_saying_it_once_and_when_it_ends_and_runs_jobs_after_it(tmp_path):
    """``broker worker`` (BROKER_ENGINE=off) kept no loop guard: the first tick without Redis ended it. The outage is
    said when it starts and when it ends, not once a tick."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from broker_testing import REPO, wait_for

    server = RedisServer(tmp_path / "redis").start()
    cfg = tmp_path / "worker.yaml"
    cfg.write_text(CONFIG + "tick_seconds: 0.1\n")
    env = {**os.environ, "BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_ADMIN_TOKEN": ADMIN,
           "BROKER_STORE_URL": server.url}
    log = tmp_path / "worker.log"
    worker = subprocess.Popen([sys.executable, "-m", "broker.cli", "worker", "--config", str(cfg)], env=env, cwd=REPO,
                              stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    try:
        # the outage starts once the worker ticks (its start-up, imports and all, may take seconds on a loaded
        # host) and lasts until it has skipped ticks: the worker must live through them
        probe = open_store(server.url)
        wait_for(lambda: probe.beats(), timeout=60, interval=0.1)
        probe.close()
        server.stop()
        wait_for(lambda: log.read_text().count("engine tick skipped: the job store did not answer") >= 1,
                 timeout=30, interval=0.1)
        time.sleep(1.5)  # ticks skipped after the first: said once, not once a tick
        assert worker.poll() is None, log.read_text()[-2000:]
        assert log.read_text().count("engine tick skipped") == 1, log.read_text()[-2000:]
        server.start()
        store = open_store(server.url)
        from broker.config import load_settings

        settings = load_settings(env, config_path=cfg)
        app = create_app(settings, store=store, engine=False)
        with TestClient(app) as client:
            job = client.post("/v1/jobs", json=TASK, headers=AUTH).json()
            wait_for(lambda: client.get(f"/v1/jobs/{job['id']}", headers=AUTH).json()["state"] == "succeeded",
                     timeout=30, interval=0.1)
        text = log.read_text()
        assert "engine tick skipped: the job store did not answer" in text
        assert "engine ticks resumed: the job store answers again" in text
        assert "Traceback" not in text
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(15)
        server.stop()
    assert worker.returncode == 0


def test_a_redis_lost_in_the_middle_of_a_tick_skips_the_tick_in_one_line_not_a_traceback_per_job(
        tmp_path, make_settings, caplog):
    """Redis stopped between one job's step and the next's: each later step raised StoreUnavailable inside the
    engine's per-job guard, logged as 'engine step failed' with a traceback for every job, every tick of the
    outage (and went on asking the store for each). The tick ends there, said in one line, and resumes after."""
    import logging

    from broker.auth import Principal
    from broker.engine.reconcile import Engine
    from broker.service import BrokerService
    from launchers.local import LocalLauncher

    from broker_testing import wait_for

    server = RedisServer(tmp_path / "redis").start()
    settings = make_settings(server.url, config=CONFIG + "tick_seconds: 0.05\nstop_grace_seconds: 1\n")
    store = open_store(server.url)
    cut = []

    class RedisDiesMidTick(LocalLauncher):
        def status(self, attempt_id):
            if cut == [True]:
                cut.append("done")
                server.stop()  # the store goes away while this tick walks the running jobs
            return super().status(attempt_id)

    launcher = RedisDiesMidTick(settings.data_dir / "runs")
    engine = Engine(settings, store, launcher)
    service = BrokerService(settings, store, launcher)
    admin = Principal("admin", None, admin=True)
    # both must read running at once: long enough that the first has not ended while the second's runner starts
    ids = [service.submit(admin, {**TASK, "name": f"t{i}", "run": "sleep 6"})[0].id for i in range(2)]
    try:
        wait_for(lambda: engine.tick() or all(store.get_job(i).state.value == "running" for i in ids))
        cut.append(True)
        with caplog.at_level(logging.INFO, logger="broker.engine"):
            engine.tick_safely()
        assert cut[-1] == "done"
        assert [r for r in caplog.records if r.exc_info] == []
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == \
            [r.getMessage() for r in caplog.records if "engine tick skipped" in r.getMessage()] != []
        server.start()
        wait_for(lambda: engine.tick() or all(store.get_job(i).state.value == "succeeded" for i in ids), timeout=30)
        assert [store.get_job(i).attempts for i in ids] == [1, 1]
    finally:
        for run in launcher.runs_dir.glob("j*"):
            launcher.kill(run.name)
        store.close()
        server.stop()


def test_a_redis_that_stops_answering_is_told_apart_within_the_probes_limit_and_liveness_stays_200(make_settings,
                                                                                                    tmp_path):
    """A paused redis-server (SIGSTOP: it takes connections and answers nothing, like a store behind a network that
    drops packets) held each health probe for the client's socket timeout, retried: half a minute, past any load
    balancer's check timeout, which then replaces every broker. The probes answer within their limit, liveness 200
    and readiness 503, and a look still in flight is shared rather than one thread held per probe."""
    import os
    import signal
    import threading
    import time

    from broker.api.probe import PROBE_SECONDS

    server = RedisServer(tmp_path / "redis").start()
    store = open_store(server.url)
    app = create_app(make_settings(config=CONFIG), store=store, engine=False)
    try:
        with TestClient(app, raise_server_exceptions=False) as client:
            assert client.get("/v1/readyz").status_code == 200
            os.kill(server.proc.pid, signal.SIGSTOP)
            try:
                before = threading.active_count()
                for _ in range(3):
                    t0 = time.monotonic()
                    health = client.get("/v1/healthz")
                    took = time.monotonic() - t0
                    assert health.status_code == 200 and health.json()["store"].startswith("unavailable: "), health.text
                    assert took < PROBE_SECONDS + 3, f"the liveness probe took {took:.1f} s"
                t0 = time.monotonic()
                ready = client.get("/v1/readyz")
                assert ready.status_code == 503 and time.monotonic() - t0 < PROBE_SECONDS + 3, ready.text
                assert threading.active_count() <= before + 1, "one stuck look at most, shared by the probes"
            finally:
                os.kill(server.proc.pid, signal.SIGCONT)
            deadline = time.monotonic() + 60
            while client.get("/v1/readyz").status_code != 200:  # the stuck read ends; the next look is fresh
                assert time.monotonic() < deadline, "readiness never came back after the store did"
                time.sleep(0.2)
            assert client.get("/v1/healthz").json()["store"] == "ok"
    finally:
        store.close()
        server.stop()


def test_a_redis_full_to_its_maxmemory_is_a_503_saying_nothing_was_stored_not_a_500(make_settings, tmp_path):
    """A Redis at its ``maxmemory`` (``noeviction``: it refuses every write, which is what a store of jobs must
    do) or a replica after a failover (``READONLY``) refuses the commit script's first write: nothing is stored.
    That came back as a bare ``StoreError``, a 500 and a traceback per job per tick, where a full SQLite disk
    is a 503; it is a 503 saying nothing was changed, and the store goes on once it has room."""
    import redis

    from broker.lifecycle import JobState
    from broker.models import Job
    from broker.store import Change

    server = RedisServer(tmp_path / "redis").start()
    store = open_store(server.url)
    admin = redis.Redis.from_url(server.url)
    app = create_app(make_settings(config=CONFIG), store=store, engine=False)
    try:
        with TestClient(app, raise_server_exceptions=False) as client:
            first = client.post("/v1/jobs", json=TASK, headers=AUTH)
            assert first.status_code == 201
            admin.config_set("maxmemory", admin.info("memory")["used_memory"])  # full
            r = client.post("/v1/jobs", json=TASK, headers={**AUTH, "Idempotency-Key": "k-full"})
            assert r.status_code == 503, r.text
            assert "nothing was changed" in r.json()["detail"]
            cancel = client.post(f"/v1/jobs/{first.json()['id']}/cancel", headers=AUTH)
            assert cancel.status_code == 503 and "nothing was changed" in cancel.json()["detail"], cancel.text
            with pytest.raises(StoreUnavailable) as beat:  # the engine's first write each tick: one line, not a crash
                store.beat("local:test", 1.0)
            assert beat.value.written is None
            job = Job(id="j-full", name="t", team="vision", state=JobState.QUEUED, spec={}, budget=1, priority=0,
                      submitted_at=1.0, updated_at=1.0)
            with pytest.raises(StoreUnavailable) as commit:
                store.commit(Change(job=job, expected_version=None))
            assert commit.value.written is False and store.get_job("j-full") is None
            admin.config_set("maxmemory", 0)
            again = client.post("/v1/jobs", json=TASK, headers={**AUTH, "Idempotency-Key": "k-full"})
            assert again.status_code == 201, again.text
            assert client.post(f"/v1/jobs/{first.json()['id']}/cancel", headers=AUTH).status_code == 200
    finally:
        admin.close()
        store.close()
        server.stop()


FILL_THE_DISK = r'''
import json, resource, signal, sys
from dataclasses import replace
from broker.lifecycle import JobState
from broker.models import Job
from broker.store import Change, StoreUnavailable, open_store

store = open_store(sys.argv[1])
job = store.commit(Change(job=Job(id="j-1", name="t", team="vision", state=JobState.QUEUED, spec={}, budget=1,
                                  priority=0, submitted_at=1.0, updated_at=1.0), expected_version=None))
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails (EFBIG), as on a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, resource.RLIM_INFINITY))
out = {"outcome": "never full"}
try:
    for i in range(50):
        job = store.commit(Change(job=replace(job, spec={"run": "x" * 20_000, "i": i}), expected_version=job.version))
except StoreUnavailable as exc:
    out = {"outcome": "unavailable", "written": exc.written}
except Exception as exc:
    out = {"outcome": f"{type(exc).__name__}: {exc}"}
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
after = store.commit(Change(job=replace(job, budget=7), expected_version=job.version))
print(json.dumps({**out, "stored_after": after.version == job.version + 1}))
'''


def test_a_sqlite_disk_that_fills_as_a_batch_commits_is_store_unavailable_not_the_drivers_error(tmp_path):
    """A full disk (or an I/O error) as the transaction commits makes SQLite roll it back by itself; the store's
    own ROLLBACK then failed ('no transaction is active') and that error, a plain ``OperationalError``, hid the
    disk's: a 500 and a traceback per job per tick. It is ``StoreUnavailable`` (a 503), and the store goes on."""
    import json
    import subprocess
    import sys

    from broker_testing import REPO

    done = subprocess.run([sys.executable, "-c", FILL_THE_DISK, f"sqlite://{tmp_path / 'full.db'}"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == {"outcome": "unavailable", "written": None, "stored_after": True}


def test_a_scrape_of_a_stalled_redis_says_the_store_is_down_within_the_probes_bound(make_settings, tmp_path):
    """A Redis that stops answering without refusing (SIGSTOP: paused, or behind dropped packets) held /metrics for
    the client's 10 s socket timeout — Prometheus's own scrape timeout, so the target went down and
    broker_store_up was never 0. The scrape looks at the store within the health probes' bound first."""
    import os
    import signal
    import time

    from broker.api.probe import PROBE_SECONDS

    server = RedisServer(tmp_path / "redis").start()
    store = open_store(server.url)
    app = create_app(make_settings(config=CONFIG), store=store, engine=False)
    try:
        with TestClient(app, raise_server_exceptions=False) as client:
            assert client.post("/v1/jobs", json=TASK, headers=AUTH).status_code == 201
            assert "broker_store_up 1.0" in client.get("/metrics").text
            os.kill(server.proc.pid, signal.SIGSTOP)
            try:
                started = time.monotonic()
                metrics = client.get("/metrics")
                took = time.monotonic() - started
            finally:
                os.kill(server.proc.pid, signal.SIGCONT)
            assert metrics.status_code == 200 and "broker_store_up 0.0" in metrics.text, metrics.text[-500:]
            assert took < PROBE_SECONDS + 3, took
            assert "broker_http_request_duration_seconds_bucket" in metrics.text
            time.sleep(0.5)
            assert "broker_store_up 1.0" in client.get("/metrics").text  # answering again: read again
    finally:
        store.close()
        server.stop()
