"""Wiring: build the configured launcher. The one place that chooses implementations."""

from __future__ import annotations

from broker.config import Settings
from launchers.base import Launcher


def open_launcher(settings: Settings) -> Launcher:
    if settings.launcher == "local":
        from launchers.local import LocalLauncher

        return LocalLauncher(settings.data_dir / "runs", zones=settings.zones)
    raise ValueError(f"unknown launcher {settings.launcher!r} (BROKER_LAUNCHER): use 'local'")
