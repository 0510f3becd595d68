"""One background thread that runs uploads, one at a time, newest wins.

``submit`` never waits for the network. While an upload runs, a newer submission replaces
any older one still waiting (the older snapshot is dropped, never half-written); the running
one is allowed to finish, so something always commits even when saves come faster than
uploads. The first failure is kept and re-raised by the next ``check``/``wait``.

Event sequence, for two saves racing one slow upload::

    save(100) → runs        save(200) → waits        save(300) → replaces 200
    100 commits → 300 runs → 300 commits             (200 is never written)
"""

from __future__ import annotations

import threading
from collections.abc import Callable

Task = Callable[[], None]


class BackgroundRunner:
    def __init__(self, name: str = "checkpoint-upload"):
        self._cond = threading.Condition()
        self._pending: Task | None = None
        self._running = False
        self._error: BaseException | None = None
        self._closed = False
        self.superseded = 0
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def submit(self, task: Task) -> Task | None:
        """Queue ``task``; replaces a queued (not yet running) one, which is returned (None when none was
        waiting), for the caller to say which was dropped. Does not block."""
        with self._cond:
            if self._closed:
                raise RuntimeError("checkpointer is closed")
            replaced = self._pending
            if replaced is not None:
                self.superseded += 1
            self._pending = task
            self._cond.notify_all()
            return replaced

    def busy(self) -> bool:
        with self._cond:
            return self._running or self._pending is not None

    def wait(self, timeout: float | None = None) -> bool:
        """Block until nothing is queued or running. False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._running and self._pending is None, timeout)

    def take_error(self) -> BaseException | None:
        """The first failure since the last call, cleared."""
        with self._cond:
            error, self._error = self._error, None
            return error

    def close(self, timeout: float | None = None) -> bool:
        finished = self.wait(timeout)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if finished:
            self._thread.join(timeout)
        return finished

    def _loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending is not None or self._closed)
                if self._pending is None:
                    return
                task, self._pending = self._pending, None
                self._running = True
            try:
                task()
            except BaseException as e:  # noqa: BLE001 - surfaced to the caller later
                with self._cond:
                    if self._error is None:
                        self._error = e
            finally:
                # Let go of the task before saying it is done: kept until the next one replaced it, the snapshot it
                # holds (a host copy of every tensor) stayed in memory between saves, and beside the next snapshot.
                task = None
                with self._cond:
                    self._running = False
                    self._cond.notify_all()
