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


KEY_SCAN_LIMIT = 10_000
"""The most jobs not ended that :func:`key_warnings` reads at start (newest first): a bounded scan, said when cut."""


def key_warnings(settings: Settings, store, *, limit: int = KEY_SCAN_LIMIT) -> list[str]:
    """What the start says of the secrets keys, from the jobs not ended (one read of at most ``limit``, by state):

    * jobs holding secrets sealed with a key this broker does not have (``BROKER_SECRETS_OLD_KEYS`` forgotten at a
      rotation): each would fail only when it reached the front of the queue, with nothing said at start;
    * a data dir key file that ``BROKER_SECRETS_KEY`` replaced (:func:`broker.sealing.key_file_left`): it stays a
      valid key — its secrets open, its job tokens pass — until it is deleted, which is said, with how many jobs not
      ended still need it.

    The sentences name key ids and counts, never a key. A store that cannot be read, or a key that is no key (the
    start refuses it elsewhere), gives none."""
    from broker.lifecycle import JobState
    from broker.sealing import OLD_SETTING, SETTING, KeyInvalid, key_file_left, key_id, sealed_key_ids, sealer_for
    from broker.store import StoreError

    try:
        sealer = sealer_for(settings)
        left = key_file_left(settings)
        jobs = store.list_jobs(states=[s.value for s in JobState if not s.is_final], limit=limit)
    except (KeyInvalid, StoreError):  # said elsewhere (a key refused at start, a store down): never stops a start
        return []
    held = {key_id(k) for k in (sealer.key, *sealer.old)} if sealer else set()
    jobs_of: dict[str, int] = {}  # key id → how many of the jobs hold a secret it sealed
    for job in jobs:
        for kid in sealed_key_ids(job.spec):
            jobs_of[kid] = jobs_of.get(kid, 0) + 1
    among = f" (of the {len(jobs)} newest jobs not ended, all that were read)" if len(jobs) >= limit else ""
    said = []
    missing = sorted(kid for kid in jobs_of if kid not in held)
    if missing:
        n = len({job.id for job in jobs if sealed_key_ids(job.spec) & set(missing)})
        said.append(f"{_jobs_hold(n)} secrets sealed with a key this broker does not have (key id "
                    f"{', '.join(missing)}){among}: {'it fails' if n == 1 else 'each fails'} when it is launched; list "
                    f"{'that key' if len(missing) == 1 else 'those keys'} in {OLD_SETTING} (or set {SETTING} to it) "
                    "and restart")
    if left is not None:
        path, kid = left
        n = jobs_of.get(kid, 0)
        need = (f"{_jobs_hold(n)} secrets sealed with it{among}: keep the file until "
                f"{'it has' if n == 1 else 'they have'} launched and ended (and no failed one is to be resumed), then "
                "delete it" if n else
                "no job not ended holds secrets sealed with it: delete the file to retire the key, once no job "
                "launched before the key was set still runs")
        said.append(f"the key file {path} holds a key other than {SETTING} (key id {kid}): this broker still opens "
                    "the secrets it sealed and takes the job tokens made from it until the file is deleted (leaving it "
                    f"out of {OLD_SETTING} does not retire it); {need}")
    return said


def _jobs_hold(n: int) -> str:
    return f"{n} job{'' if n == 1 else 's'} not ended hold{'s' if n == 1 else ''}"
