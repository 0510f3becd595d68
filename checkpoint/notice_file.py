"""The broker's own preemption notice on a host it runs jobs on: a file that appears.

A SIGTERM sent to a job's whole process group (what a VM's shutdown does, and what the local
launcher did for every notice) also reaches the helper processes a training script starts — a
``torch.utils.data.DataLoader(num_workers>0)`` worker dies of it at once, and the script's next
batch raises ``DataLoader worker … is killed by signal: Terminated`` before the step can end and
the notice's checkpoint be saved. So, like a cloud announcing a reclaim in its instance metadata
before the OS shuts down, the broker's runner announces a stop in a file first:

* ``BROKER_NOTICE_FILE`` (set by the local launcher for every attempt) names the file. The
  runner writes it (atomically, JSON ``{"reason", "grace_seconds", "at"}``) when it is told to
  stop the attempt. On Kubernetes the SkyPilot launcher sets it too, and a SkyPilot preemption
  hook run from the pod's ``preStop`` writes it the same way (``launchers.skypilot_task.notice_hook``).
* A process whose :class:`~checkpoint.Checkpointer` watches that file registers itself as a
  *listener*: an empty file named after its pid in ``<BROKER_NOTICE_FILE>.listeners/``, removed
  on ``close()``. While a live listener is registered the runner holds the group's SIGTERM back
  until shortly before the grace period ends (as a VM's shutdown follows the cloud's notice); a
  script with no listener gets the SIGTERM at once, as before.

:class:`NoticeFileWatcher` polls the file from a daemon thread (a ``stat`` every 0.1 s) and calls
``notify(seconds_left)`` once when it appears — what the notice leaves of its grace period, so the
checkpointer's own deadline (``BROKER_PREEMPTION_GRACE_S``, 30 s by default) never outlasts the
runner's. The protocol is only these two paths, so the runner
(``launchers/local_runner.py``) does not import this library, nor this library the runner.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path

log = logging.getLogger("checkpoint")

STOP_REASONS = {"budget": "the job is at its budget", "preempted": "its capacity is being taken back (preemption)",
                "cancelled": "the job was cancelled", "migrating": "the job moves to meet its deadline"}
"""The notice's ``reason``, as the job's log says it; another is said as it is."""

NOT_PREEMPTIONS = frozenset({"budget", "cancelled", "migrating"})
"""The broker's reasons that are its own decision, not capacity taken back: the log says the job stopped, not that
it was preempted (:func:`stop_words`). Another reason (``preempted``, a pod being deleted) is a preemption."""


def stop_words(reason: str | None) -> str | None:
    """``reason`` in words when it is one of :data:`NOT_PREEMPTIONS`, else None (a preemption, or no reason)."""
    return STOP_REASONS[reason] if reason in NOT_PREEMPTIONS else None

ENV = "BROKER_NOTICE_FILE"
DEFAULT_POLL_S = 0.1

#: Watchers of this process registered under each listener file (the file is named after the pid, so several
#: checkpointers of one process share it): the last one to stop removes it. Before, the first to stop did, and
#: the runner, finding no listener, sent the group's SIGTERM at once while another checkpointer still saved.
_registrations: dict[Path, int] = {}
_registrations_lock = threading.Lock()


def listeners_dir(notice_file: str | os.PathLike) -> Path:
    """Where the processes watching ``notice_file`` register (one empty file per pid)."""
    return Path(f"{os.fspath(notice_file)}.listeners")


class NoticeFileWatcher:
    """Registers this process as a listener and calls ``notify`` once when the file appears."""

    def __init__(self, path: str | os.PathLike, notify, *, poll_s: float = DEFAULT_POLL_S):
        self.path = Path(path)
        self.poll_s = poll_s
        self._notify = notify
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._registered: Path | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str], notify) -> NoticeFileWatcher | None:
        path = (env.get(ENV) or "").strip()
        return cls(path, notify) if path else None

    def start(self) -> NoticeFileWatcher:
        try:
            directory = listeners_dir(self.path)
            directory.mkdir(exist_ok=True)
            mine = directory / str(os.getpid())
            with _registrations_lock:
                mine.touch()
                _registrations[mine] = _registrations.get(mine, 0) + 1
            self._registered = mine
        except OSError as exc:  # the runner then signals at once, as it does for any script
            log.warning("cannot register for the broker's notice in %s (%s): SIGTERM will be the notice",
                        self.path.parent, exc)
        self._thread = threading.Thread(target=self._run, name="checkpoint-broker-notice", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._registered is not None and self._registered.name == str(os.getpid()):
            with _registrations_lock:
                left = _registrations.get(self._registered, 1) - 1
                if left > 0:
                    _registrations[self._registered] = left
                else:
                    _registrations.pop(self._registered, None)
                    try:
                        self._registered.unlink()
                    except OSError:
                        pass
            self._registered = None
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(1.0)
        self._thread = None

    def seconds_left(self) -> float | None:
        """What the notice gives until the runner's SIGKILL (``grace_seconds`` from ``at``), if it says."""
        try:
            notice = json.loads(self.path.read_text())
            return float(notice["grace_seconds"]) - max(0.0, time.time() - float(notice["at"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def reason(self) -> str | None:
        """Why the broker stops the attempt, as the notice says (``budget``, ``preempted``, ``cancelled``...)."""
        try:
            said = json.loads(self.path.read_text()).get("reason")
        except (OSError, ValueError, AttributeError):
            return None
        return said if isinstance(said, str) and said else None

    def _written_whole(self, wait_s: float = 0.5) -> None:
        """Wait, up to ``wait_s``, for a notice seen half-written to be JSON: the runner writes it whole, but a
        notice written in place (a user's own tooling, a test) read as it was written had no reason, and a stop at
        the budget was taken for a preemption."""
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                json.loads(self.path.read_text())
                return
            except ValueError:
                time.sleep(0.02)
            except OSError:
                return

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.path.exists():
                self._written_whole()
                # the reason first: a stop at the budget, said only as a "preemption notice", read as a preemption
                why = self.reason()
                log.warning("the broker announces a stop%s (%s)", f": {STOP_REASONS.get(why, why)}" if why else "",
                            self.path)
                self._notify(self.seconds_left())
                return
            self._stop.wait(self.poll_s)
