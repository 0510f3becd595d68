"""A scriptable SkyPilot for the launcher's tests: real plans, scripted clusters.

``plan`` is SkyPilot's own dry run, in process (``sky.execution.launch(dryrun=True)``: the
optimizer, the catalog, the storage checks against moto). What a real launch would change —
the cluster's status, its job, its logs — is set by the test, since it needs VMs.
"""

from __future__ import annotations

import itertools
from typing import Any

from launchers.skypilot import Cluster
from launchers.skypilot_status import Launch


class ScriptedSky:
    def __init__(self, *, real_plan: bool = True):
        self.real_plan = real_plan
        self.launched: list[tuple[str, dict[str, Any]]] = []  # (cluster, task config as SkyPilot dumps it)
        self.planned: list[str] = []
        self.autostop: dict[str, int] = {}
        self.downed: list[str] = []
        self.requests: dict[str, tuple[Launch, str]] = {}
        self.in_flight: set[str] = set()
        self.cluster_status: dict[str, Cluster] = {}
        self.jobs: dict[str, str] = {}
        self.output: dict[str, bytes] = {}
        self._ids = itertools.count(1)

    # SkyClient
    def plan(self, task: Any, cluster: str) -> None:
        self.planned.append(cluster)
        if self.real_plan:
            from sky import execution

            execution.launch(task, cluster_name=cluster, dryrun=True, stream_logs=False, _quiet_optimizer=True)

    def launch(self, task: Any, cluster: str, *, autostop_minutes: int) -> str:
        self.launched.append((cluster, task.to_yaml_config()))
        self.autostop[cluster] = autostop_minutes
        request_id = f"req-{next(self._ids)}"
        self.requests[request_id] = (Launch.IN_FLIGHT, "")
        return request_id

    def launch_state(self, request_id: str) -> tuple[Launch, str]:
        return self.requests.get(request_id, (Launch.NONE, ""))

    def launch_in_flight(self, cluster: str) -> bool:
        return cluster in self.in_flight

    def clusters(self, names: list[str] | None = None) -> list[Cluster]:
        return [c for n, c in sorted(self.cluster_status.items()) if names is None or n in names]

    def job_status(self, cluster: str) -> str | None:
        return self.jobs.get(cluster)

    def down(self, cluster: str) -> None:
        self.downed.append(cluster)
        self.cluster_status.pop(cluster, None)
        self.jobs.pop(cluster, None)

    def logs(self, cluster: str) -> bytes:
        if cluster not in self.cluster_status:
            raise RuntimeError(f"cluster {cluster} does not exist")
        return self.output.get(cluster, b"")

    # scripting
    def provisioned(self, cluster: str, *, status: str = "UP", job: str | None = "RUNNING", spot: bool = False,
                    request_done: bool = True) -> None:
        self.cluster_status[cluster] = Cluster(cluster, status, spot)
        if job is None:
            self.jobs.pop(cluster, None)
        else:
            self.jobs[cluster] = job
        if request_done:
            for rid in self.requests:
                self.requests[rid] = (Launch.DONE, "")
