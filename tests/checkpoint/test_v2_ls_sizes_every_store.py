"""`checkpoint ls` lists a checkpoint whose data file lost bytes as damaged on every store, as restore skips it.

QA: ls said ``committed`` for a checkpoint verify calls corrupt by its size (``00-w.safetensors is 104 bytes,
manifest says 96``); it now compares each checkpoint's listing (names, sizes) with its manifest, hashing nothing.
"""

from __future__ import annotations

import io

import torch

from checkpoint import Checkpointer
from checkpoint.cli import main
from checkpoint.storage import open_storage


def test_ls_shows_a_checkpoint_with_a_shortened_data_file_damaged_on_every_store(store_uri):
    with Checkpointer(store_uri, env={}, handle_sigterm=False, every_steps=1) as ckpt:
        uris = []
        for step in (1, 2):
            ckpt.save(step, {"w": torch.ones(8) * step}, wait=True)
            uris.append(ckpt.last_committed)
    name = uris[1].rsplit("/", 1)[1]
    storage = open_storage(store_uri)
    whole = storage.read(f"{name}/00-w.safetensors")
    storage.write(f"{name}/00-w.safetensors", whole[:-1])

    out = io.StringIO()
    assert main(["ls", store_uri], out=out) == 0
    rows = {int(r.split()[0]): r for r in out.getvalue().splitlines()[1:]}
    said = f"(00-w.safetensors is {len(whole) - 1} bytes, manifest says {len(whole)})"
    assert " damaged " in rows[2] and rows[2].endswith(said), rows[2]
    assert " committed " in rows[1], rows[1]
