"""One background thread that runs uploads, one at a time, newest wins — but never drops a key.

``submit`` never waits for the network. While an upload runs, a newer submission replaces
an older one still waiting when it holds every key the older one holds (the older snapshot is
dropped, never half-written: nothing in it is lost that the newer one lacks); the running one
is allowed to finish, so something always commits even when saves come faster than uploads.
A waiting snapshot with a key no newer one holds (an EMA saved every other step) is kept and
uploaded, in order. The first failure is kept and re-raised by the next ``check``/``wait``.

Event sequence, for saves racing one slow upload::

    save(100, {model, ema}) → runs     save(200, {model, ema}) → waits     save(300, {model, ema}) → replaces 200
    100 commits → 300 runs → 300 commits                                    (200 is never written)

    save(100, {model, ema}) → runs     save(200, {model, ema}) → waits     save(300, {model}) → waits too
    100 commits → 200 runs → 200 commits → 300 runs → 300 commits          (200 holds the newest ema)
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Set

Task = Callable[[], None]

MAX_WAITING = 4
"""The most snapshots that wait for the upload running (each held in memory): past it the oldest is dropped even
when it holds a key no newer one holds (:meth:`BackgroundRunner.submit`)."""


class BackgroundRunner:
    def __init__(self, name: str = "checkpoint-upload"):
        self._cond = threading.Condition()
        self._pending: list[tuple[Task, Set[str] | None]] = []  # waiting, oldest first, each with its keys
        self._running = False
        self._error: BaseException | None = None
        self._closed = False
        self.superseded = 0
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def submit(self, task: Task, keys: Set[str] | None = None) -> list[tuple[Task, frozenset[str]]]:
        """Queue ``task``, whose snapshot holds ``keys`` (None: unknown, as though it held every key). Returns the
        waiting (not yet running) tasks it replaces, each with the keys of its snapshot that no snapshot queued after
        it holds (empty: nothing of it is lost), for the caller to say which were dropped. A waiting task is dropped
        when a snapshot queued after it (this one, or one kept before it) holds each of its keys; and past
        :data:`MAX_WAITING` waiting snapshots the oldest goes even so, its lost keys named — a script whose every
        save has a key of its own (``f"metrics_{step}"``) kept each snapshot in memory while uploads lagged. Does
        not block."""
        with self._cond:
            if self._closed:
                raise RuntimeError("checkpointer is closed")
            queue = [*self._pending, (task, keys)]
            kept: list[tuple[Task, Set[str] | None]] = []
            dropped: list[tuple[Task, frozenset[str]]] = []
            newer: set[str] = set()
            everything = False  # a newer task of unknown keys covers any
            for queued, held in reversed(queue):
                covered = everything or (held is not None and held <= newer)
                if queued is not task and (covered or len(kept) >= MAX_WAITING):
                    lost = frozenset() if covered else frozenset(held - newer) if held is not None else frozenset()
                    dropped.append((queued, lost))
                    continue
                kept.append((queued, held))
                if held is None:
                    everything = True
                else:
                    newer |= held
            self._pending = kept[::-1]
            self.superseded += len(dropped)
            self._cond.notify_all()
            return dropped[::-1]

    def busy(self) -> bool:
        with self._cond:
            return self._running or bool(self._pending)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until nothing is queued or running. False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._running and not self._pending, timeout)

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
                self._cond.wait_for(lambda: bool(self._pending) or self._closed)
                if not self._pending:
                    return
                task = self._pending.pop(0)[0]
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
