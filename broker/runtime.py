"""Wiring: build the configured launcher. The one place that chooses implementations."""

from __future__ import annotations

import logging
from pathlib import Path
from urllib.parse import urlsplit

from broker.config import Settings
from launchers.base import Launcher

log = logging.getLogger(__name__)


def open_launcher(settings: Settings) -> Launcher:
    """``local``: pools and simulated zones on this host. ``skypilot``: clouds and Kubernetes through
    SkyPilot, with the local pools and simulated zones still served on this host."""
    from launchers.local import LocalLauncher

    private_folders(settings)
    local = LocalLauncher(settings.data_dir / "runs", zones=settings.zones)
    if settings.launcher == "local":
        return local
    if settings.launcher == "skypilot":
        from launchers.router import RoutingLauncher
        from launchers.skypilot import SkyPilotLauncher

        warn_skypilot_setup(settings)
        return RoutingLauncher(local, SkyPilotLauncher(settings.data_dir / "skypilot", prefix=settings.cluster_prefix))
    raise ValueError(f"unknown launcher {settings.launcher!r} (BROKER_LAUNCHER): use 'local' or 'skypilot'")


def private_folders(settings: Settings) -> None:
    """The data dir and a ``file://`` checkpoint root on this host, made the broker's user's alone (0700) where the
    broker makes them: the checkpoint library made the root as a job's first save did, 0755, so any user of the host
    could read every job's checkpoints. The root the broker made before (``<data dir>/checkpoints``, where it is by
    default) is closed to others too, unless a pool runs jobs as other users (``run_as``), whose launches open the
    way to each job's own folder through it (``launchers/run_as.py``). A root elsewhere that exists is the
    operator's, left as it is."""
    from launchers.local import private_dir

    settings.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    parts = urlsplit(settings.checkpoint_root)
    if parts.scheme != "file" or not parts.path:
        return
    root = Path(parts.path)
    try:
        if root == settings.data_dir / "checkpoints" and not any(p.run_as for p in settings.pools):
            private_dir(root)
        elif not root.exists():
            root.parent.mkdir(parents=True, exist_ok=True)  # the host's folders above it: as mkdir -p makes them
            root.mkdir(mode=0o700, exist_ok=True)
    except OSError as exc:  # the job that saves there says so, as before; never a reason not to start
        log.warning("checkpoint_root %s: could not be made: %s", root, exc)


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
