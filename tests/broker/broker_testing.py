"""Helpers the broker's tests share (imported by name; conftest.py keeps only fixtures)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from testports import free_port

from launchers.base import AttemptStatus, Capabilities, Phase

REPO = Path(__file__).resolve().parents[2]
ADMIN = "admin-token-for-tests"
TEAM_TOKENS = {"vision": "vision-token", "nlp": "nlp-token"}
DAY = 86400.0
WORKDIR_GRACE = DAY  # workdir_grace_seconds' default
WORKDIR_RETENTION = 30 * DAY  # workdir_retention_seconds' default
POOL_AND_SPOT = """
pools:
  - {name: local, slots: 1, price_per_slot_hour: "0.36"}
zones:
  - {name: sim-a, tier: spot, instance_type: g5.xlarge, grace_seconds: 2}
tick_seconds: 0.2
stop_grace_seconds: 2
"""
"""A broker config of one pool slot and one simulated spot zone, fast ticks (the CLI tests' broker)."""
ONE_CHEAP_SLOT = """
pools:
  - {name: cpu, slots: 1, price_per_slot_hour: "0.36"}
stop_grace_seconds: 1
tick_seconds: 0.05
"""
"""A broker config of one pool slot at $0.36/h, a 1 s grace and fast ticks: the crash-window and diagnosis tests'
broker, where money does not matter."""
CENT_A_SECOND = """
pools:
  - {name: cpu, slots: 1, price_per_slot_hour: "36"}
stop_grace_seconds: 2
tick_seconds: 0.05
"""
"""A broker config of one pool slot at $36/h, one cent a second (a budget stop comes seconds in), a 2 s grace and
fast ticks: the budget-stop, clock-step and step-words tests' broker."""


class RedisServer:
    """A redis-server of the test's own: AOF with fsync on every write, on a free loopback port."""

    def __init__(self, workdir: Path):
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (make test installs it)")
        self.workdir = workdir
        self.port = free_port()
        self.binary = binary
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.workdir),
             "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--daemonize", "no",
             "--logfile", str(self.workdir / "redis.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"redis-server did not start; see {self.workdir / 'redis.log'}")

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


def wait_for(predicate, timeout: float = 20.0, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("condition not met in time")


def run_until(engine, store, job_id, states, timeout: float = 20.0):
    """Tick ``engine`` until the job is in one of ``states`` (their values); the job then."""
    def done():
        engine.tick()
        job = store.get_job(job_id)
        return job if job.state.value in states else None

    return wait_for(done, timeout=timeout)


def attempt_running(engine, store, job_id, n: int, timeout: float = 30.0):
    """Tick ``engine`` until the job runs its attempt ``n``; the job then."""
    from broker.lifecycle import JobState

    return wait_for(lambda: engine.tick() or ((j := store.get_job(job_id)).state is JobState.RUNNING
                                              and j.attempts == n and j), timeout=timeout)


def attempt_ended(engine, store, job_id, n: int, timeout: float = 30.0):
    """Tick ``engine`` until the job's attempt ``n`` has ended; the job then."""
    def ended():
        engine.tick()
        attempts = store.attempts(job_id)
        return len(attempts) >= n and attempts[n - 1].state.is_final and store.get_job(job_id)
    return wait_for(ended, timeout=timeout)


def kill_runner_alone(service, engine, store, launcher, principal, marks: Path):
    """Submit a job that writes its start and end into ``marks`` (each line with its attempt), SIGKILL attempt 1's
    runner alone once the job runs (the job runs in a session of its own, so it is not killed with it), and tick
    until the job ends: (the final job, the lines of ``marks`` 8.5 s later, when attempt 1's job, had it lived,
    would have written its end). The attempts' processes are killed on the way out."""
    import os
    import signal

    job = service.submit(principal, {"name": "t", "run": f"echo start $BROKER_ATTEMPT >> {marks}; sleep 8; "
                                                         f"echo end $BROKER_ATTEMPT >> {marks}",
                                     "resources": {"cpus": 1}, "broker": {"budget_usd": 1}})[0]
    try:
        wait_for(lambda: engine.tick() or (marks.exists() and marks.read_text()
                                           and store.get_job(job.id).state.value == "running"))
        os.kill(int((launcher.runs_dir / f"{job.id}-a1" / "runner.pid").read_text()), signal.SIGKILL)
        final = wait_for(lambda: engine.tick() or (j := store.get_job(job.id)).state.is_final and j, timeout=30)
        time.sleep(8.5)  # the 8 s give the engine time to call attempt 1 lost and kill its job on a loaded host
        return final, marks.read_text().splitlines()
    finally:
        for run in launcher.runs_dir.glob("j*"):
            launcher.kill(run.name)


@contextmanager
def local_broker(make_settings, tmp_path, config: str):
    """The service and engine of a broker in this process, on SQLite under ``tmp_path`` and the launcher its
    ``config`` opens (the local one: real runner processes): yields (service, engine, store, launcher)."""
    from broker.engine.reconcile import Engine
    from broker.runtime import open_launcher
    from broker.service import BrokerService
    from broker.store import open_store

    settings = make_settings(config=config)
    store = open_store(f"sqlite://{tmp_path / 'e.db'}")
    launcher = open_launcher(settings)
    try:
        yield BrokerService(settings, store, launcher), Engine(settings, store, launcher), store, launcher
    finally:
        store.close()


def cli_runner(url: str, *, token: str | None = ADMIN):
    """``broker ...`` as a user types it, against the broker at ``url`` with ``token`` (None: no token at all):
    ``run(*args, check=True, cwd=REPO, extra_env=None)`` gives the finished process, and with ``check`` raises its
    stderr when it exited non-zero. ``run.url`` is ``url``."""
    import os
    import sys

    env = {**os.environ, "BROKER_URL": url, "COLUMNS": "200"}
    env.pop("BROKER_TOKEN", None)
    if token is not None:
        env["BROKER_TOKEN"] = token

    def run(*args, check=True, cwd=REPO, extra_env=None):
        r = subprocess.run([sys.executable, "-m", "broker.cli", *args], env={**env, **(extra_env or {})}, cwd=cwd,
                           capture_output=True, text=True, timeout=60)
        if check and r.returncode != 0:
            raise AssertionError(r.stderr)
        return r

    run.url = url
    return run


def start_broker(tmp_path, store_url=None, port=None, *, engine="on", config: str | None = None, env_extra=None):
    """A real ``broker serve`` subprocess; returns (process, base URL)."""
    import os
    import subprocess
    import sys

    import httpx

    port = port or free_port()
    env = {**os.environ, "BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_ADMIN_TOKEN": ADMIN,
           "BROKER_ENGINE": engine, **(env_extra or {})}
    if store_url:
        env["BROKER_STORE_URL"] = store_url
    args = [sys.executable, "-m", "broker.cli", "serve", "--port", str(port)]
    if config is not None:
        cfg = tmp_path / f"config-{port}.yaml"
        cfg.write_text(config)
        args += ["--config", str(cfg)]
    log = tmp_path / f"broker-{port}.log"
    proc = subprocess.Popen(args, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=open(log, "ab"))
    url = f"http://127.0.0.1:{port}"

    def up():
        try:
            return httpx.get(f"{url}/v1/healthz", timeout=0.5).status_code == 200
        except httpx.HTTPError:
            if proc.poll() is not None:
                pytest.fail(log.read_text())
            return False

    wait_for(up, timeout=30)
    return proc, url


def stop_broker(proc, url: str, *, wait_runs: bool = True, timeout: float = 20.0) -> None:
    """Stop a ``start_broker`` process and leave no local run behind: its jobs not ended are cancelled, and (with
    ``wait_runs``, for a broker whose engine runs) their runs gone, before the broker gets SIGTERM."""
    import signal

    import httpx

    if proc.poll() is not None:
        return
    headers = {"Authorization": f"Bearer {ADMIN}"}
    with httpx.Client(base_url=url, headers=headers, timeout=10) as client:
        for job in client.get("/v1/jobs").json()["jobs"]:
            if job["state"] in ("queued", "placed", "launching", "running"):
                client.post(f"/v1/jobs/{job['id']}/cancel")
        if wait_runs:
            wait_for(lambda: all(j["state"] != "cancelling" for j in client.get("/v1/jobs").json()["jobs"]),
                     timeout=30)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout)


def set_fields(store, job, **fields):
    """``job`` as stored, with ``fields`` changed and committed (the state the engine would have left); the job as
    stored after."""
    from dataclasses import replace

    from broker.store import Change

    now = store.get_job(job.id)
    store.commit(Change(job=replace(now, **fields), expected_version=now.version))
    return store.get_job(job.id)


def stored_job(store, job_id: str, name: str = "train", *, team: str = "vision", t: float = 100.0, state=None):
    """A job as a submit stores it (its submit event too), at ``t``, then moved to ``state`` (queued by default):
    what a listing's tests read."""
    from dataclasses import replace

    from broker.lifecycle import JobEvent, JobState
    from broker.models import Event, Job
    from broker.store import Change

    job = Job(id=job_id, name=name, team=team, state=JobState.QUEUED, spec={"run": "echo"}, budget=5_000_000,
              priority=0, submitted_at=t, updated_at=t)
    ev = Event(job_id=job_id, time=t, event=JobEvent.SUBMIT.value, from_state=None, to_state="queued", reason="r",
               actor="test")
    job = store.commit(Change(job=job, expected_version=None, events=[ev]))
    if state is not None and state is not JobState.QUEUED:
        job = store.commit(Change(job=replace(job, state=state, updated_at=t), expected_version=job.version))
    return job


class ViewLauncher:
    """A launcher that sees only what it launched itself (another host's processes are 'gone'): one broker's view,
    for tests of one engine taking over another's attempts."""

    name = "view"
    capabilities = Capabilities(simulated=True)

    def __init__(self, domain: str):
        self.domain = domain
        self.launched: list[str] = []

    def launch(self, request) -> None:
        if request.attempt_id not in self.launched:
            self.launched.append(request.attempt_id)

    def status(self, attempt_id: str) -> AttemptStatus:
        if attempt_id in self.launched:
            return AttemptStatus(Phase.RUNNING, started_at=time.time())
        return AttemptStatus(Phase.GONE)

    def stop(self, attempt_id: str, *, grace_seconds: float = 30.0, reason: str = "") -> None:
        pass

    def logs(self, attempt_id: str, *, offset: int = 0, limit: int = 1 << 20) -> tuple[bytes, int]:
        return b"", offset
