"""Wiring: build the configured launcher. The one place that chooses implementations."""

from __future__ import annotations

from broker.config import Settings
from launchers.base import Launcher


def open_launcher(settings: Settings) -> Launcher:
    """``local``: pools and simulated zones on this host. ``skypilot``: clouds and Kubernetes through
    SkyPilot, with the local pools and simulated zones still served on this host."""
    from launchers.local import LocalLauncher

    local = LocalLauncher(settings.data_dir / "runs", zones=settings.zones)
    if settings.launcher == "local":
        return local
    if settings.launcher == "skypilot":
        from launchers.router import RoutingLauncher
        from launchers.skypilot import SkyPilotLauncher

        return RoutingLauncher(local, SkyPilotLauncher(settings.data_dir / "skypilot", prefix=settings.cluster_prefix))
    raise ValueError(f"unknown launcher {settings.launcher!r} (BROKER_LAUNCHER): use 'local' or 'skypilot'")


def validate_task(settings: Settings, task: dict) -> None:
    """With SkyPilot as the launcher, SkyPilot itself checks the task; raises ``launchers.skypilot.TaskError``."""
    if settings.launcher != "skypilot":
        return
    from launchers.skypilot import validate_task as sky_validate

    sky_validate(task)
