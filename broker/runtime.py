"""Wiring: build the configured launcher. The one place that chooses implementations."""

from __future__ import annotations

import logging

from broker.config import Settings
from launchers.base import Launcher

log = logging.getLogger(__name__)


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

        warn_skypilot_setup(settings)
        return RoutingLauncher(local, SkyPilotLauncher(settings.data_dir / "skypilot", prefix=settings.cluster_prefix))
    raise ValueError(f"unknown launcher {settings.launcher!r} (BROKER_LAUNCHER): use 'local' or 'skypilot'")


def warn_skypilot_setup(settings: Settings) -> list[str]:
    """Log, once at start (``broker serve`` and ``broker worker`` open the launcher once), what in the setting the
    SkyPilot launcher cannot serve — a Kubernetes pool without SkyPilot's Kubernetes support, a cloud with no
    catalog, a cloud SkyPilot's last ``sky check`` left disabled — each a WARNING saying what to do
    (:func:`launchers.skypilot.setup_warnings`), instead of a refusal per job at launch. Returns the sentences."""
    from launchers.skypilot import setup_warnings

    try:
        found = setup_warnings(clouds=settings.clouds,
                               kubernetes_contexts=[p.kubernetes_context for p in settings.pools if p.kubernetes_context])
    except Exception:  # a help at start, never a reason not to start
        log.debug("SkyPilot set-up not checked", exc_info=True)
        return []
    for sentence in found:
        log.warning("SkyPilot launcher: %s", sentence)
    return found


def validate_task(settings: Settings, task: dict) -> None:
    """With SkyPilot as the launcher, SkyPilot itself checks the task; raises ``launchers.skypilot.TaskError``."""
    if settings.launcher != "skypilot":
        return
    from launchers.skypilot import validate_task as sky_validate

    sky_validate(task)
