"""Route each attempt to the launcher for its placement: local pools and simulated zones on this
host, everything else through SkyPilot. Itself a :class:`~launchers.base.Launcher`.
"""

from __future__ import annotations

from launchers.base import AttemptStatus, Capabilities, Keep, LaunchRequest, after_run_seconds, sweep_attempt_files
from launchers.local import LocalLauncher


class RoutingLauncher:
    name = "router"

    def __init__(self, local: LocalLauncher, cloud):
        self.local = local
        self.cloud = cloud
        #: this host's attempts (pools, simulated zones) and the cloud's are two views: tasks that share
        #: one SkyPilot API server see each other's cloud attempts but not each other's local ones
        self.domains = tuple(d for d in (local.domain, getattr(cloud, "domain", "") or "") if d)
        self.capabilities = Capabilities(simulated=local.capabilities.simulated, preemption_notice=True,
                                         follow_logs=True)

    @staticmethod
    def _is_local(placement) -> bool:
        return placement.get("cloud") == "local" or bool(placement.get("simulated"))

    def _for_request(self, request: LaunchRequest):
        return self.local if self._is_local(request.placement) else self.cloud

    def after_run_seconds(self, placement) -> int:
        """What the launcher this placement goes to bills after the run: nothing on this host, a
        SkyPilot cluster's idle minutes before autodown and its teardown in the cloud."""
        return after_run_seconds(self.local if self._is_local(placement) else self.cloud, placement)

    def domain_for(self, placement) -> str:
        """The view an attempt with this placement is launched in: this host's, or the cloud's."""
        return self.local.domain if self._is_local(placement) else (getattr(self.cloud, "domain", "") or "")

    def _owner(self, attempt_id: str):
        """The local launcher knows its attempts by their run folder; the rest are SkyPilot's."""
        return self.local if self.local.owns(attempt_id) else self.cloud

    def launch(self, request: LaunchRequest) -> None:
        self._for_request(request).launch(request)

    def status(self, attempt_id: str) -> AttemptStatus:
        return self._owner(attempt_id).status(attempt_id)

    def stop(self, attempt_id: str, *, grace_seconds: float, reason: str = "stopped") -> None:
        self._owner(attempt_id).stop(attempt_id, grace_seconds=grace_seconds, reason=reason)

    def set_stop_in(self, attempt_id: str, seconds: float) -> bool:
        """Move the attempt's own limit if its launcher can (a SkyPilot cluster's is fixed: False)."""
        setter = getattr(self._owner(attempt_id), "set_stop_in", None)
        return bool(setter(attempt_id, seconds)) if setter is not None else False

    def logs(self, attempt_id: str, *, offset: int = 0, limit: int = 1 << 20) -> tuple[bytes, int]:
        return self._owner(attempt_id).logs(attempt_id, offset=offset, limit=limit)

    def availability(self) -> dict[str, bool]:
        return self.local.availability()

    def live_attempts(self) -> list[str]:
        """The attempts that may still run on this host: the local launcher's (a cloud's clusters go by the sweep)."""
        return self.local.live_attempts()

    def sweep(self, known_attempt_ids) -> list[str]:
        return self.cloud.sweep(known_attempt_ids)

    def sweep_attempt_files(self, keep: Keep, *, limit: int) -> list[str]:
        """This host's run folders, then the cloud launcher's state files, each of up to ``limit`` attempts."""
        return sweep_attempt_files(self.local, keep, limit=limit) + sweep_attempt_files(self.cloud, keep, limit=limit)

    # fault injection reaches the simulated zones only
    def preempt(self, attempt_id: str, **kw) -> bool:
        return self.local.preempt(attempt_id, **kw)

    def kill(self, attempt_id: str) -> None:
        self.local.kill(attempt_id)

    def set_zone_available(self, zone: str, available: bool | None) -> None:
        self.local.set_zone_available(zone, available)
