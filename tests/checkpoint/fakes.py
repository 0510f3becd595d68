"""Storage fakes we own — wrap a real (memory://) store and hold or fail its writes — and the small
helpers the tests that use them share."""

from __future__ import annotations

import threading
import uuid

from checkpoint import Checkpointer, layout
from checkpoint.storage import FsspecStorage, open_storage


def memory_store(prefix: str = "ckpt-tests"):
    """A fresh memory:// store of its own."""
    return open_storage(f"memory://{prefix}/{uuid.uuid4().hex}")


def checkpointer(storage, **kw) -> Checkpointer:
    """A checkpointer on ``storage`` that reads no environment and leaves SIGTERM alone; every step is due."""
    kw.setdefault("every_steps", 1)
    return Checkpointer(storage=storage, env={}, handle_sigterm=False, **kw)


def committed_steps(storage) -> list[int]:
    return [e.id.step for e in layout.scan(storage.list()) if e.committed]


class PassThrough:
    """A real store's reads, listings, deletions and URIs, as they are: a wrapper that changes what happens around
    its writes subclasses it and gives ``write``."""

    def __init__(self, inner):
        self._inner = inner
        self.base_uri = inner.base_uri

    def read(self, path):
        return self._inner.read(path)

    def list(self):
        return self._inner.list()

    def sizes(self, directory):
        return self._inner.sizes(directory)

    def delete(self, paths):
        self._inner.delete(paths)

    def uri(self, path=""):
        return self._inner.uri(path)


class GatedStorage:
    """Writes wait until ``open()``; counts them. Everything else goes straight through."""

    def __init__(self, inner: FsspecStorage):
        self._inner = inner
        self.base_uri = inner.base_uri
        self.gate = threading.Event()
        self.writes_started = threading.Semaphore(0)

    def open(self) -> None:
        self.gate.set()

    def write(self, path: str, data: bytes) -> None:
        self.writes_started.release()
        assert self.gate.wait(10), "test never opened the gate"
        self._inner.write(path, data)

    def read(self, path: str) -> bytes:
        return self._inner.read(path)

    def list(self) -> list[str]:
        return self._inner.list()

    def sizes(self, directory: str) -> dict[str, int]:
        return self._inner.sizes(directory)

    def delete(self, paths: list[str]) -> None:
        self._inner.delete(paths)

    def uri(self, path: str = "") -> str:
        return self._inner.uri(path)


class FailingStorage(GatedStorage):
    """Every write raises, as a store that is down would after its retries."""

    def __init__(self, inner: FsspecStorage):
        super().__init__(inner)
        self.gate.set()

    def write(self, path: str, data: bytes) -> None:
        raise OSError(503, "store unavailable")
