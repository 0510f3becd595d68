"""`checkpoint ls` and `checkpoint verify` on every store."""

from __future__ import annotations

import io

import torch

from checkpoint import Checkpointer
from checkpoint.cli import main
from checkpoint.storage import open_storage


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


def test_ls_and_verify_name_the_corrupt_checkpoint_and_fail(store_uri):
    code, out = run("ls", store_uri)
    assert code == 0 and "no checkpoints" in out
    with Checkpointer(store_uri, env={}, handle_sigterm=False, every_steps=1) as ckpt:
        uris = []
        for step in (1, 2):
            ckpt.save(step, {"w": torch.ones(8) * step}, wait=True)
            uris.append(ckpt.last_committed)

    code, out = run("ls", store_uri)
    assert code == 0 and all(u in out for u in uris) and out.count("committed") == 2

    code, out = run("verify", store_uri)
    assert code == 0 and "2 of 2 verified" in out

    name = uris[1].rsplit("/", 1)[1]
    storage = open_storage(store_uri)
    storage.write(f"{name}/00-w.safetensors", storage.read(f"{name}/00-w.safetensors")[:-1])
    code, out = run("verify", store_uri)
    assert code == 1 and f"CORRUPT  {uris[1]}" in out and "1 of 2 verified" in out

    code, out = run("verify", uris[0])  # one checkpoint by its own URI
    assert code == 0 and out.startswith(f"OK       {uris[0]}")


def test_ls_piped_into_a_reader_that_stops_early_exits_quietly(tmp_path, capsys):
    """`checkpoint ls URI | head -2` said "error: [Errno 32] Broken pipe" and exited 2, as though the store had
    failed; now it stops as Unix tools do: nothing on stderr, status 141 (128 + SIGPIPE)."""
    base = (tmp_path / "ck").as_uri()
    with Checkpointer(base, env={}, handle_sigterm=False, every_steps=1) as ckpt:
        for step in (1, 2, 3):
            ckpt.save(step, {"w": torch.ones(2) * step}, wait=True)

    class GoneReader(io.StringIO):
        def write(self, text):  # the reader read its lines and left
            if self.tell() > 0:
                raise BrokenPipeError(32, "Broken pipe")
            return super().write(text)

    out = GoneReader()
    assert main(["ls", base], out=out) == 141
    assert out.getvalue().startswith("      STEP") and capsys.readouterr().err == ""
