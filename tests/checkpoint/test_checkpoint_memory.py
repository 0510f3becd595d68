"""What an upload holds in memory beyond the snapshot it uploads."""

from __future__ import annotations

import threading
import time
import tracemalloc

from checkpoint.storage import FsspecStorage, TransferOptions

MiB = 2**20


class SlowGCS:
    """The part of a gcsfs filesystem a composite upload uses; each part takes a moment to go up,
    and nothing is kept (so what is traced is what the uploader holds)."""

    protocol = ("gs", "gcs")

    def __init__(self):
        self.parts: dict[str, int] = {}
        self.merged: dict[str, list[str]] = {}
        self._lock = threading.Lock()

    def pipe_file(self, path: str, data: bytes) -> None:
        time.sleep(0.002)
        with self._lock:
            self.parts[path] = len(data)

    def merge(self, path: str, paths: list[str]) -> None:
        self.merged[path] = list(paths)

    def rm(self, paths: list[str]) -> None:
        pass


def test_a_composite_upload_holds_only_the_parts_in_flight_not_a_second_copy_of_the_file():
    fs = SlowGCS()
    storage = FsspecStorage(fs, "bkt/run", "gs://bkt/run", TransferOptions(part_size=MiB, concurrency=2))
    data = [memoryview(bytearray(32 * MiB))]  # a tensor's host copy: uploaded from, never copied whole
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        storage.write("step-000000000001-1733011200123/00-model.safetensors", data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert sum(fs.parts.values()) == 32 * MiB and len(fs.merged["bkt/run/step-000000000001-1733011200123/00-model.safetensors"]) == 32
    assert peak < 6 * MiB, f"the upload held {peak / MiB:.0f} MiB for a 32 MiB file in 1 MiB parts, 2 at a time"
