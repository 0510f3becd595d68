"""Preemption notices: SIGTERM means "save at the next step boundary, then leave".

Event sequence on a spot VM (grace 120 s on AWS, 30 s on GCP)::

    t=0    SIGTERM          → notice recorded; deadline = t + grace
    t=0.4  due(step) → True → save(step) snapshots, uploads, commits, exits (code 143)
    -- or --
    t=grace                 → deadline: exit at once, whatever is in flight
    -- or --
    second SIGTERM          → exit at once

Nothing here saves anything: the notice only flips a flag that ``Checkpointer.due`` reads,
so a loop that calls just ``due()`` and ``save()`` gets the whole behaviour.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable

log = logging.getLogger("checkpoint")

#: 128 + SIGTERM: the conventional "terminated" status, so nothing mistakes a preempted run
#: for a finished one.
EXIT_CODE = 143
DEFAULT_GRACE_S = 30.0


#: Installed notices, oldest first: each one's previous handler is the one before it. Closing one that is
#: not the newest hands its previous handler to the next, so the newest keeps hearing SIGTERM.
_chain: list[PreemptionNotice] = []


def _hard_exit(code: int) -> None:
    sys.stderr.flush()
    os._exit(code)


class PreemptionNotice:
    """Records the first SIGTERM and enforces the grace deadline.

    Signals are watched by a thread of our own, through :func:`signal.set_wakeup_fd`: the
    interpreter writes each signal's number to that descriptor from whichever thread the kernel
    delivered it to. Waiting for the Python-level handler instead would miss notices, because that
    handler only runs when the *main* thread next executes bytecode — and a main thread asleep in
    a long step is not woken when the signal lands on another thread (an upload thread, say).

    Args:
        grace_s: seconds from the notice to a forced exit.
        exit_code: status for both the clean and the forced exit.
        force_exit: how to leave when the deadline passes or a second signal comes
            (``os._exit``; tests pass a recorder).
    """

    def __init__(
        self,
        grace_s: float = DEFAULT_GRACE_S,
        exit_code: int = EXIT_CODE,
        force_exit: Callable[[int], None] = _hard_exit,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.grace_s = grace_s
        self.exit_code = exit_code
        self._force_exit = force_exit
        self._clock = clock
        self.noticed_at: float | None = None
        self._signalled = False
        self._source = "signal"
        self._lock = threading.RLock()
        self._timer: threading.Timer | None = None
        self._watchdog: threading.Thread | None = None
        self._stop_watchdog = False
        self._sockets: tuple[socket.socket, socket.socket] | None = None
        self._previous = None
        self._previous_wakeup = -1
        self._installed = False

    @property
    def requested(self) -> bool:
        return self.noticed_at is not None

    def seconds_left(self) -> float | None:
        if self.noticed_at is None:
            return None
        return max(0.0, self.noticed_at + self.grace_s - self._clock())

    def install(self) -> bool:
        """Handle SIGTERM from now on. Only possible on the main thread; False elsewhere."""
        if self._installed or threading.current_thread() is not threading.main_thread():
            return self._installed
        reader, writer = socket.socketpair()
        reader.setblocking(False)
        writer.setblocking(False)
        self._sockets = (reader, writer)
        self._previous_wakeup = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        self._previous = signal.signal(signal.SIGTERM, self._on_signal)
        self._stop_watchdog = False
        self._watchdog = threading.Thread(target=self._watch, args=(reader,), name="checkpoint-preemption",
                                          daemon=True)
        self._watchdog.start()
        self._installed = True
        _chain.append(self)
        return True

    def uninstall(self) -> None:
        if self._installed and threading.current_thread() is threading.main_thread():
            above = _chain[_chain.index(self) + 1:]
            if above:  # a newer notice handles SIGTERM now: it inherits what we would have put back
                above[0]._previous, above[0]._previous_wakeup = self._previous, self._previous_wakeup
            else:
                signal.signal(signal.SIGTERM, self._previous or signal.SIG_DFL)
                signal.set_wakeup_fd(self._previous_wakeup)
            _chain.remove(self)
            self._installed = False
        self._stop_watchdog = True
        if self._watchdog is not None and self._watchdog is not threading.current_thread():
            self._watchdog.join(1.0)
        self._watchdog = None
        if self._sockets is not None:
            for sock in self._sockets:
                sock.close()
            self._sockets = None
        if self._timer is not None:
            self._timer.cancel()

    def notify(self, source: str = "signal", *, grace_s: float | None = None) -> None:
        """A preemption notice arrived: ``source`` is ``"signal"`` (SIGTERM), ``"cloud"`` (the
        metadata endpoint, :mod:`checkpoint.cloud_notice`) or ``"broker"`` (the runner's notice
        file, :mod:`checkpoint.notice_file`).

        A second *signal* forces the exit at once. The SIGTERM that follows a notice from the
        cloud or the broker (the OS shutting the VM down, the runner's last warning) is the first
        signal: the save under way goes on until the grace deadline set by the first notice.
        ``grace_s``: what the notice itself leaves (the broker's runner says); it shortens, never
        lengthens, this process's grace period.
        """
        with self._lock:  # the signal watchdog and the notice pollers may call at once
            if self.noticed_at is not None:
                if source != "signal":
                    return
                if not self._signalled:
                    self._signalled = True
                    log.warning("SIGTERM after the %s's notice: still saving, exit within %.0f s", self._source,
                                self.seconds_left() or 0.0)
                    return
                log.warning("second preemption notice: exiting now")
                self._force_exit(self.exit_code)
                return
            self._signalled = source == "signal"
            self._source = source
            if grace_s is not None:
                self.grace_s = min(self.grace_s, grace_s)
            self.noticed_at = self._clock()
            log.warning("preemption notice: saving at the next step, exiting within %.0f s", self.grace_s)
            if self._watchdog is None:  # no watchdog thread (never installed): a timer enforces the deadline
                self._timer = threading.Timer(self.grace_s, self._deadline)
                self._timer.daemon = True
                self._timer.start()

    def _on_signal(self, signum, frame) -> None:  # noqa: ARG002 - signal handler signature
        """Nothing to do here: the watchdog saw the signal on the wakeup descriptor already."""

    def _watch(self, reader: socket.socket, poll_s: float = 0.05) -> None:
        while not self._stop_watchdog:
            ready, _, _ = select.select([reader], [], [], poll_s)
            if ready:
                try:
                    data = reader.recv(64)
                except (BlockingIOError, OSError):
                    data = b""
                for signum in data:
                    if signum == signal.SIGTERM:
                        self.notify()
                    elif self._previous_wakeup >= 0:  # someone else's signal: pass it on
                        try:
                            os.write(self._previous_wakeup, bytes([signum]))
                        except OSError:
                            pass
            if self.noticed_at is not None and self._clock() - self.noticed_at >= self.grace_s:
                self._deadline()
                return

    def _deadline(self) -> None:
        log.error("preemption grace period (%.0f s) is over: exiting without a final checkpoint", self.grace_s)
        self._force_exit(self.exit_code)
