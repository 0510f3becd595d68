"""`checkpoint ls` given a checkpoint's own URI, or a base that does not exist, and reading many manifests."""

from __future__ import annotations

import io
import threading

import torch

from checkpoint import Checkpointer, cli, layout
from checkpoint.cli import main
from checkpoint.storage import open_storage


def test_ls_of_a_checkpoints_own_uri_names_the_base_to_list(tmp_path, capsys):
    """It printed "no checkpoints under …/step-…" and exited 0, as for an empty run."""
    base = str(tmp_path / "run")
    with Checkpointer(base, env={}, handle_sigterm=False, every_steps=1) as ckpt:
        ckpt.save(320, {"w": torch.ones(4)}, wait=True)
        uri = ckpt.last_committed
    out = io.StringIO()
    assert main(["ls", uri], out=out) == 2
    said = capsys.readouterr().err
    assert out.getvalue() == ""
    assert f"{uri} is a checkpoint, not a checkpoint base" in said and f"checkpoint ls {base}" in said


def test_ls_of_a_base_that_does_not_exist_says_so(tmp_path):
    out = io.StringIO()
    assert main(["ls", str(tmp_path / "no-such-run")], out=out) == 0
    assert out.getvalue().strip() == f"no checkpoints under {tmp_path / 'no-such-run'} (it does not exist)"
    (tmp_path / "empty").mkdir()
    out = io.StringIO()
    assert main(["ls", str(tmp_path / "empty")], out=out) == 0
    assert out.getvalue().strip() == f"no checkpoints under {tmp_path / 'empty'}"


class ReadsTogether:
    """A store whose manifest reads wait in pairs, each for another in flight: read one after another, the first
    waits 3 s for a partner and the barrier breaks (the reads then go on, and ``overlapped`` is False)."""

    def __init__(self, inner):
        self._inner, self.base_uri = inner, inner.base_uri
        self._both = threading.Barrier(2, timeout=3)

    def read(self, path):
        if path.endswith("/" + layout.MANIFEST):
            try:
                self._both.wait()
            except threading.BrokenBarrierError:
                pass
        return self._inner.read(path)

    def list(self):
        return self._inner.list()

    def uri(self, path=""):
        return self._inner.uri(path)

    overlapped = property(lambda self: not self._both.broken)


def test_ls_reads_the_manifests_together_and_prints_them_in_order(tmp_path):
    base = str(tmp_path / "run")
    with Checkpointer(base, env={}, handle_sigterm=False, every_steps=1, keep_last=None) as ckpt:
        for step in range(1, 7):
            ckpt.save(step, {"w": torch.ones(4)}, wait=True)
    store = ReadsTogether(open_storage(base))
    out = io.StringIO()
    assert cli._ls(store, out) == 0
    rows = out.getvalue().splitlines()[1:]
    assert [int(r.split()[0]) for r in rows] == [6, 5, 4, 3, 2, 1]
    assert all("committed" in r and "B" in r for r in rows)
    assert store.overlapped
