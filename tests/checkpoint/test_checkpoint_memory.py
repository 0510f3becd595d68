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


S3_UPLOAD = """
import sys, tracemalloc
from checkpoint.storage import TransferOptions, open_storage
MiB = 2**20
storage = open_storage(sys.argv[1], transfer=TransferOptions(part_size=5 * MiB, concurrency=2))
storage.write("warm-up", b"x")  # the client and its connection pool, before the trace
data = [memoryview(bytearray(b"%c" % i) * (8 * MiB)) for i in range(4)]  # a tensor file's host copies, 32 MiB
tracemalloc.start()
storage.write("step-000000000001-1733011200123/00-model.safetensors", data)
print(tracemalloc.get_traced_memory()[1])
tracemalloc.stop()
assert storage.read("step-000000000001-1733011200123/00-model.safetensors") == b"".join(data)
"""


def test_an_s3_multipart_upload_holds_only_small_blocks_of_its_parts_not_copies_of_them(make_uri, subprocess_env):
    """boto3's upload_fileobj read each part into memory before sending it, up to 10 parts at once: a save held
    its file twice (a 192 MiB model saved to moto peaked at +397 MiB above the process, +217 MiB now). Measured in a
    child process, as moto runs in this one and keeps what it receives."""
    import subprocess
    import sys

    uri = make_uri("s3")
    out = subprocess.run([sys.executable, "-c", S3_UPLOAD, uri], env=subprocess_env(uri), capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    peak = int(out.stdout.split()[-1])
    assert peak < 5 * MiB, f"the upload held {peak / MiB:.1f} MiB (less than one 5 MiB part expected) for a 32 MiB file"


def test_a_committed_save_leaves_no_copy_of_the_state_held_until_the_next_save(tmp_path):
    """The upload thread kept its last task — and with it the snapshot, a host copy of every tensor and array — until
    the next save replaced it: a run held a whole extra copy of its state between saves, and two at the next save's
    snapshot (a state whose one copy fits in memory failed at the second save, not the first)."""
    import numpy as np

    from fakes import checkpointer

    from checkpoint.storage import open_storage

    state = {"a": np.ones(32 * MiB // 8)}  # numpy data is traced by tracemalloc (torch's is not)
    tracemalloc.start()
    try:
        with checkpointer(open_storage(str(tmp_path / "run"))) as ckpt:
            before = tracemalloc.get_traced_memory()[0]
            for step in (1, 2):
                ckpt.save(step, state, wait=True)
                held = tracemalloc.get_traced_memory()[0] - before
                assert held < 4 * MiB, f"after save {step} committed, {held / MiB:.0f} MiB are still held"
    finally:
        tracemalloc.stop()
