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
        self.cancelled: list[str] = []  # launch requests aborted
        self.requests: dict[str, tuple[Launch, str]] = {}
        self.request_cluster: dict[str, str] = {}  # a launch request's cluster (dry runs are not requests here)
        self.in_flight: set[str] = set()
        self.cluster_status: dict[str, Cluster] = {}
        self.jobs: dict[str, str] = {}
        self.output: dict[str, bytes] = {}
        self.health_recovers: set[str] = set()  # INIT clusters SkyPilot's re-run health check finds UP again
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
        self.request_cluster[request_id] = cluster
        return request_id

    def launch_state(self, request_id: str) -> tuple[Launch, str]:
        if request_id.startswith("in-flight:") and request_id not in self.requests:
            # a request a test put in flight by its cluster (sent by a broker that died): it stays in flight
            # while the test keeps it there; it has then succeeded, unless cancelled (cancel_launch records it)
            cluster = request_id.removeprefix("in-flight:")
            return (Launch.IN_FLIGHT if cluster in self.in_flight else Launch.DONE), ""
        return self.requests.get(request_id, (Launch.NONE, ""))

    def launch_in_flight(self, cluster: str) -> bool:
        return cluster in self.in_flight or any(
            c == cluster and self.requests[rid][0] is Launch.IN_FLIGHT for rid, c in self.request_cluster.items())

    def earlier_launch(self, cluster: str) -> str | None:
        if cluster in self.in_flight:
            return f"in-flight:{cluster}"
        sent = [rid for rid, c in self.request_cluster.items()
                if c == cluster and self.requests[rid][0] in (Launch.IN_FLIGHT, Launch.DONE)]
        return sent[-1] if sent else None

    def cancel_launch(self, cluster: str, request_id: str | None) -> None:
        ids = [request_id] if request_id else [f"in-flight:{cluster}"] if cluster in self.in_flight else [
            rid for rid, c in self.request_cluster.items() if c == cluster and self.requests[rid][0] is Launch.IN_FLIGHT]
        for rid in ids:
            self.cancelled.append(rid)
            if rid.startswith("in-flight:") or self.requests.get(rid, (None,))[0] is Launch.IN_FLIGHT:
                self.requests[rid] = (Launch.FAILED, "the launch request was cancelled")
        self.in_flight.discard(cluster)

    def forget_requests(self) -> None:
        """What an API server that restarts does: its requests, finished or not, are gone."""
        self.requests.clear()
        self.request_cluster.clear()
        self.in_flight.clear()

    def clusters(self, names: list[str] | None = None) -> list[Cluster]:
        return [c for n, c in sorted(self.cluster_status.items()) if names is None or n in names]

    def job_status(self, cluster: str) -> str | None:
        """As SkyPilot's API server: a cluster INIT has its health check re-run first (UP again, if scripted so);
        a job on a cluster not UP (or AUTOSTOPPING) is not read: ``ClusterNotUpError``."""
        from sky import exceptions

        found = self.cluster_status.get(cluster)
        if found is not None and found.status == "INIT" and cluster in self.health_recovers:
            self.cluster_status[cluster] = Cluster(cluster, "UP", found.spot)
            found = self.cluster_status[cluster]
        if found is not None and found.status not in ("UP", "AUTOSTOPPING"):
            raise exceptions.ClusterNotUpError(f"Getting job status: skipped for cluster {cluster!r} "
                                               f"(status: {found.status}).")
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
        if request_done:  # the launch requests that made it
            for rid, c in self.request_cluster.items():
                if c == cluster and self.requests[rid][0] is Launch.IN_FLIGHT:
                    self.requests[rid] = (Launch.DONE, "")
            if cluster in self.in_flight:
                self.in_flight.discard(cluster)
                self.requests[f"in-flight:{cluster}"] = (Launch.DONE, "")


def run_as_skypilot_runs_setup(setup: str, home, *, timeout: float = 60):
    """Run a task's ``setup`` on this host the way SkyPilot 0.14.1 runs it on each node of a cluster (detached
    setup, the first part of the job): its own script builder (``log_lib.make_task_bash_script``) writes the setup
    to a file run as ``/bin/bash -i <file> 2>&1``, itself inside the job's ``/bin/bash -i`` script, in a new
    session with no terminal (``log_lib.run_with_log``). Returns the ``CompletedProcess``: what SkyPilot's job
    reads as the setup's return code (any but 0 and 137, a cancel: ``FAILED_SETUP``) and the output it logs.
    ``home``: the node's home (its ``~/.bashrc``, ``~/sky_workdir``)."""
    import os
    import subprocess
    from pathlib import Path

    from sky.backends import task_codegen
    from sky.skylet import log_lib

    home = Path(home)
    (home / "sky_workdir").mkdir(parents=True, exist_ok=True)
    setup_file = home / "sky_setup_test"
    setup_file.write_text(log_lib.make_task_bash_script(setup, env_vars={"SKYPILOT_SETUP_NODE_RANK": "0"}))
    unset = " && ".join(f"unset {var}" for var in task_codegen.UNSET_RAY_ENV_VARS)
    job_file = home / "sky_app_test"
    job_file.write_text(log_lib.make_task_bash_script(f"{unset}; /bin/bash -i {setup_file} 2>&1"))
    env = {k: v for k, v in os.environ.items() if k not in ("BASH_ENV", "ENV")}
    env["HOME"] = str(home)
    return subprocess.run(["/bin/bash", "-i", str(job_file)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          stdin=subprocess.DEVNULL, cwd=home, env=env, timeout=timeout, start_new_session=True)
