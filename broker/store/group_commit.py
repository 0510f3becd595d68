"""Group commit, shared by the SQLite and Redis stores.

A writer that arrives while another commit is in flight queues its item; the next writer to
take the lock (the leader) writes every queued item in one batch — one transaction and fsync
in SQLite, one pipelined round trip in Redis — and each writer returns only when the batch that
holds its own item has been written, with its own result or error.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any


class Slot:
    """One writer's item waiting for the batch that writes it; ``write`` fills ``result`` or ``error``."""

    __slots__ = ("item", "done", "result", "error")

    def __init__(self, item: Any, result: Any = None):
        self.item = item
        self.done = False
        self.result = result
        self.error: BaseException | None = None


class GroupCommit:
    """``submit(slot)`` → that slot's result, written in a batch by ``write(batch)``.

    ``write`` must set each slot's ``result`` or ``error`` and mark it ``done`` (also when it
    raises). ``lock`` is held while a batch is written; the SQLite store also holds it for reads
    (one connection).
    """

    def __init__(self, write: Callable[[Sequence[Slot]], None]):
        self.lock = threading.Lock()
        self._write = write
        self._pending_lock = threading.Lock()
        self._pending: list[Slot] = []

    def submit(self, slot: Slot) -> Any:
        with self._pending_lock:
            self._pending.append(slot)
        with self.lock:  # one leader at a time; a follower finds its item already written
            if not slot.done:
                with self._pending_lock:
                    batch, self._pending = self._pending, []
                try:
                    self._write(batch)
                except BaseException as exc:  # a write that failed before it could answer every slot
                    for other in batch:
                        if not other.done:
                            other.result, other.error, other.done = None, exc, True
                    raise
        if slot.error is not None:
            raise slot.error
        return slot.result
