"""What an upload holds in memory beyond the snapshot it uploads."""

from __future__ import annotations

import tracemalloc

import pytest

MiB = 2**20


GCS_UPLOAD = """
import sys, tracemalloc
from checkpoint.storage import TransferOptions, open_storage
MiB = 2**20
size, part = int(sys.argv[2]) * MiB, int(sys.argv[3]) * MiB
storage = open_storage(sys.argv[1], transfer=TransferOptions(part_size=part, concurrency=2))
storage.write("warm-up", b"x")  # the session and its connection, before the trace
data = [memoryview(bytearray(b"%c" % i) * (size // 4)) for i in range(4)]  # a tensor file's host copies
tracemalloc.start()
storage.write("step-000000000001-1733011200123/00-model.safetensors", data)
print(tracemalloc.get_traced_memory()[1])
tracemalloc.stop()
assert storage.read("step-000000000001-1733011200123/00-model.safetensors") == b"".join(data)
"""


@pytest.mark.parametrize("size_mib, part_mib", [(24, 32), (32, 4)],
                         ids=["a 24 MiB file under two 32 MiB parts goes up in one request, read in place",
                              "a 32 MiB file in 4 MiB parts, 2 in flight, holds no copy of its parts"])
def test_a_gcs_upload_holds_only_small_blocks_of_the_file_not_copies_of_it(make_uri, subprocess_env, size_mib,
                                                                          part_mib):
    """gcsfs's pipe_file takes an object as one bytes: the library joined the file (a copy) for it, gcsfs built the
    request as head + data + tail (two more, one at a time) and aiohttp's transport kept what the socket had not taken
    (another) — a 48 MiB tensor saved to the emulator took +240 MiB above the process, +51 MiB to local files; each
    part of a composite upload the same. Measured in a child process, as the emulator runs in this one and keeps what
    it receives."""
    import subprocess
    import sys

    uri = make_uri("gcs")
    out = subprocess.run([sys.executable, "-c", GCS_UPLOAD, uri, str(size_mib), str(part_mib)],
                         env=subprocess_env(uri), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    peak = int(out.stdout.split()[-1])
    assert peak < 4 * MiB, (f"the upload held {peak / MiB:.1f} MiB for a {size_mib} MiB file "
                            f"({part_mib} MiB parts, 2 at a time)")


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
