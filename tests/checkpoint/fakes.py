"""Storage fakes we own: wrap a real (memory://) store and hold or fail its writes."""

from __future__ import annotations

import threading

from checkpoint.storage import FsspecStorage


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
