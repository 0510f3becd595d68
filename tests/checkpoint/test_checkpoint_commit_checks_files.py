"""The commit lists the checkpoint's own directory before its marker: every file the manifest names must be there,
whole. Files can go after their upload succeeded — an S3-compatible server restarted without its data while the
upload retried, or a second writer under the same base whose retention deleted this save's files in flight — and
a checkpoint committed without them was torn, and restore took it over the previous whole one."""

from __future__ import annotations

import pytest
import torch

from checkpoint import Checkpointer, CheckpointError, layout
from checkpoint.storage import open_storage

from fakes import PassThrough


class OtherClientDeletes(PassThrough):
    """The real store, and beside it a second client of the same base that deletes (or cuts short) one of step 2's
    files once its manifest is written: another writer's retention, or a store that lost it, at the worst moment."""

    def __init__(self, uri: str, victim: str, cut: bool = False):
        super().__init__(open_storage(uri))
        self._other = open_storage(uri)
        self._victim, self._cut = victim, cut

    def write(self, path, data):
        self._inner.write(path, data)
        cid = layout.parse_name(path.split("/", 1)[0])
        if cid is not None and cid.step == 2 and path.endswith("/" + layout.MANIFEST):
            target = layout.path(cid, self._victim)
            if self._cut:
                self._other.write(target, self._other.read(target)[:-1])
            else:
                self._other.delete([target])


def _state(step: int) -> dict:
    return {"model": torch.full((64,), float(step)), "extra": torch.full((8,), float(step)), "step": step}


@pytest.mark.parametrize("kind", ["file", "s3", "gcs"])
def test_a_file_gone_before_the_commit_fails_the_save_and_the_previous_checkpoint_is_restored(kind, make_uri):
    uri = make_uri(kind)
    store = OtherClientDeletes(uri, "state.json")
    ckpt = Checkpointer(storage=store, env={}, handle_sigterm=False, every_steps=1, keep_last=2)
    ckpt.save(1, _state(1), wait=True)
    with pytest.raises(CheckpointError) as raised:
        ckpt.save(2, _state(2), wait=True)
    said = str(raised.value)
    assert "step 2" in said and "not committed" in said and "state.json" in said
    assert "another process" in said and "lost" in said
    ckpt.close()
    entries = {e.id.step: e for e in layout.scan(open_storage(uri).list())}
    assert entries[1].committed and not entries[2].committed
    assert layout.COMMIT not in entries[2].files
    restored = Checkpointer(uri, env={}, handle_sigterm=False).restore()
    assert restored.step == 1 and float(restored["model"][0]) == 1.0


def test_a_file_cut_short_before_the_commit_fails_the_save(make_uri):
    uri = make_uri("s3")
    victim = layout.tensor_file(0, "model")
    store = OtherClientDeletes(uri, victim, cut=True)
    ckpt = Checkpointer(storage=store, env={}, handle_sigterm=False, every_steps=1)
    ckpt.save(1, _state(1), wait=True)
    with pytest.raises(CheckpointError, match=rf"{victim} has \d+ bytes, not \d+"):
        ckpt.save(2, _state(2), wait=True)
    ckpt.close()
    assert [e.id.step for e in layout.scan(open_storage(uri).list()) if e.committed] == [1]


def test_sizes_lists_one_checkpoint_directory(store_uri):
    store = open_storage(store_uri)
    assert store.sizes("step-1") == {}
    store.write("step-1/a", b"abc")
    store.write("step-1/b", b"abcdefg")
    store.write("step-10/a", b"x")  # a sibling whose name starts with the directory's
    store.write("other", b"xy")
    assert store.sizes("step-1") == {"step-1/a": 3, "step-1/b": 7}
