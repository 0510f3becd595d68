"""Broker tasks with ``launcher: skypilot`` (a RoutingLauncher: local pools on each task's own host, clouds
through one shared SkyPilot API server): each task sees every cloud attempt, as docs/deploy.md says, so
any task watches, finishes and serves the logs of a cloud attempt another task launched."""

from __future__ import annotations

import time

from broker.auth import Principal
from broker.engine.reconcile import Engine
from broker.lifecycle import AttemptState, JobState
from broker.models import Attempt, Job
from broker.service import BrokerService
from broker.store import Change, open_store
from launchers.base import AttemptStatus, Capabilities, Phase
from launchers.local import LocalLauncher
from launchers.router import RoutingLauncher

CLOUD = {"tier": "ondemand", "cloud": "aws", "region": "us-east-1", "zone": "us-east-1a", "location": "us-east-1a",
         "instance_type": "g5.xlarge", "price_per_hour": 1_000_000, "num_nodes": 1}


class SharedServer:
    """One SkyPilot API server's clusters, seen alike by every task's launcher."""

    def __init__(self):
        self.statuses: dict[str, AttemptStatus] = {}
        self.output: dict[str, bytes] = {}


class CloudView:
    name = "skypilot"
    capabilities = Capabilities()

    def __init__(self, server: SharedServer):
        self.server = server
        self.domain = "skypilot:http://api.internal:46580"

    def launch(self, request) -> None:
        self.server.statuses.setdefault(request.attempt_id, AttemptStatus(Phase.RUNNING, started_at=time.time()))

    def status(self, attempt_id: str) -> AttemptStatus:
        return self.server.statuses.get(attempt_id, AttemptStatus(Phase.GONE))

    def stop(self, attempt_id: str, *, grace_seconds: float = 30.0, reason: str = "") -> None:
        pass

    def logs(self, attempt_id: str, *, offset: int = 0, limit: int = 1 << 20) -> tuple[bytes, int]:
        data = self.server.output.get(attempt_id, b"")
        return data[offset:offset + limit], min(len(data), offset + limit)

    def sweep(self, known) -> list[str]:
        return []


def test_a_cloud_attempt_is_watched_by_every_task_that_shares_the_api_server(tmp_path, make_settings):
    settings = make_settings(f"sqlite://{tmp_path / 'broker.db'}")
    store = open_store(settings.store_url)
    server = SharedServer()
    tasks = {name: RoutingLauncher(LocalLauncher(tmp_path / name / "runs"), CloudView(server)) for name in "ab"}
    now = time.time()
    job = Job(id="j-cloud", name="j", team="default", state=JobState.RUNNING, spec={"name": "j", "run": "true"},
              budget=5_000_000, priority=0, submitted_at=now - 60, updated_at=now - 60, attempts=1,
              placement=dict(CLOUD), running_since=now - 50)

    launched_in = tasks["a"].domain_for(CLOUD)
    attempt = Attempt(id="j-cloud-a1", job_id="j-cloud", n=1, state=AttemptState.RUNNING, launcher="router",
                      placement=dict(CLOUD), price_per_hour=1_000_000, created_at=now - 55, started_at=now - 50,
                      launched_in=launched_in)
    store.commit(Change(job=job, expected_version=None, attempts=(attempt,)))
    server.output["j-cloud-a1"] = b"step 10\n"
    try:
        # task B, which did not launch it, reads its logs through the shared server
        out = BrokerService(settings, store, tasks["b"]).logs(Principal("admin", None, admin=True), "j-cloud")
        assert out["data"] == "step 10\n"
        # task A is gone (replaced); the attempt ends: task B sees it end and finishes the job
        server.statuses["j-cloud-a1"] = AttemptStatus(Phase.SUCCEEDED, exit_code=0, started_at=now - 50,
                                                      ended_at=time.time())
        Engine(settings, store, tasks["b"]).tick()
        assert store.get_job("j-cloud").state is JobState.SUCCEEDED
    finally:
        store.close()


def test_a_local_pool_attempt_stays_with_its_own_host(tmp_path):
    server = SharedServer()
    a = RoutingLauncher(LocalLauncher(tmp_path / "a" / "runs"), CloudView(server))
    b = RoutingLauncher(LocalLauncher(tmp_path / "b" / "runs"), CloudView(server))
    assert a.domain_for({"cloud": "local"}) == a.local.domain != b.domain_for({"cloud": "local"})
    assert a.domain_for(CLOUD) == b.domain_for(CLOUD) == "skypilot:http://api.internal:46580"
    assert set(a.domains) == {a.local.domain, "skypilot:http://api.internal:46580"}
