"""The brokers serving the API on one data dir: where a job launched on this host can report its progress.

A job reports its steps and checkpoints to ``BROKER_PROGRESS_URL``, the URL of the broker that launched it. Brokers
sharing a data dir (one host; a Redis store) carry on each other's runs when one dies, but a run went on reporting to
the dead one's port ("not yet told to the broker: Connection refused"): the survivors saw no progress, and one with a
heartbeat timeout stopped the healthy run as stalled. And a ``broker worker`` (no HTTP) beside ``broker serve
--no-engine`` gave its jobs ``http://127.0.0.1:8000``, whatever port the API was on.

So each ``broker serve`` records its URL here, in ``<data dir>/brokers/<pid>.json``, while it runs; a launch gives
the job the launching broker's URL first and the others alive as ``BROKER_PROGRESS_URLS``, which the checkpoint
library falls over to when one does not answer (``checkpoint/progress.py``). A broker's file is removed when it
stops; one left by a killed broker is passed over (its process is gone) and removed by the next broker to start.
Only this host's processes are checked, as only this host's brokers share a data dir.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

DIR = "brokers"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    except OSError:
        return False
    return True


def _read(path: Path) -> dict | None:
    try:
        entry = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(entry, dict) or not isinstance(entry.get("url"), str) or not isinstance(entry.get("pid"), int):
        return None
    return entry


def register(data_dir: Path, url: str) -> Path | None:
    """Record that this process serves the API at ``url`` (written whole, readable by the jobs' users), and remove
    the files of brokers no longer running; the file, or ``None`` where the data dir cannot be written (a broker
    still serves: its jobs then know of it alone)."""
    folder = Path(data_dir) / DIR
    path = folder / f"{os.getpid()}.json"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for other in folder.glob("*.json"):
            entry = _read(other)
            if other != path and (entry is None or not _alive(entry["pid"])):
                other.unlink(missing_ok=True)
        tmp = folder / f".{os.getpid()}.tmp"
        tmp.write_text(json.dumps({"url": url, "pid": os.getpid(), "since": time.time()}))
        tmp.chmod(0o644)
        tmp.replace(path)
    except OSError:
        return None
    return path


def unregister(path: Path | None) -> None:
    if path is not None:
        try:
            path.unlink(missing_ok=True)
        except OSError:
            pass


def serving(data_dir: Path) -> list[str]:
    """The URLs of the brokers serving the API on ``data_dir`` now, the longest running first (each once)."""
    entries = []
    for path in (Path(data_dir) / DIR).glob("*.json"):
        entry = _read(path)
        if entry is not None and _alive(entry["pid"]):
            entries.append((entry.get("since") if isinstance(entry.get("since"), (int, float)) else 0.0,
                            entry["pid"], entry["url"].rstrip("/")))
    urls: list[str] = []
    for _, _, url in sorted(entries):
        if url not in urls:
            urls.append(url)
    return urls


def report_urls(own: str | None, data_dir: Path) -> tuple[str | None, list[str]]:
    """Where a job launched now reports: ``own`` (this broker's URL; ``None`` for an engine serving no API, a
    ``broker worker`` given no ``BROKER_PUBLIC_URL``) and then the other brokers serving on the data dir; with no
    ``own``, the first of those. (primary or ``None`` when none is known, the others.)"""
    try:
        others = serving(data_dir)
    except OSError:
        others = []
    own = own.rstrip("/") if own else None
    primary = own or (others[0] if others else None)
    return primary, [u for u in others if u != primary]
