"""A writer that SIGKILLs itself at one chosen point of its third save, for test_checkpoint_phases.

    python kill_at.py PHASE

Saves steps 1, 2, 3 (keep_last=1, so the third save's retention deletes step 2) into
$BROKER_CHECKPOINT_URI; while saving step 3 it kills itself with SIGKILL at PHASE:

* ``before-data``: before the first data file is written;
* ``before-manifest``: the data files are written, the manifest is not;
* ``before-commit``: the manifest is written, the commit marker is not;
* ``after-commit``: the commit marker is written, retention has not run;
* ``mid-retention``: retention deleted step 2's commit marker, not yet its files.

With PHASE ``none`` it resumes instead and saves one more step (printing ``restored N``).
"""

from __future__ import annotations

import os
import signal
import sys

import numpy as np

from checkpoint import Checkpointer, layout
from checkpoint.storage import open_storage


class KillAt:
    """The real store, but this process dies of SIGKILL at one point of the step-3 save."""

    def __init__(self, inner, phase: str):
        self._inner, self._phase = inner, phase
        self._third_committed = False  # deletes before that are the retention of saves 1 and 2
        self.base_uri = inner.base_uri

    def _die_if(self, phase: str) -> None:
        if phase == self._phase:
            os.kill(os.getpid(), signal.SIGKILL)

    def write(self, path: str, data) -> None:
        cid = layout.parse_name(path.split("/", 1)[0])
        if cid is not None and cid.step == 3:
            name = path.split("/", 1)[1]
            if name == layout.MANIFEST:
                self._die_if("before-manifest")
            elif name == layout.COMMIT:
                self._die_if("before-commit")
            else:
                self._die_if("before-data")
        self._inner.write(path, data)
        if cid is not None and cid.step == 3 and path.endswith("/" + layout.COMMIT):
            self._third_committed = True

    def delete(self, paths: list[str]) -> None:
        if self._third_committed:
            self._die_if("after-commit")
        self._inner.delete(paths)
        if self._third_committed and any(p.endswith("/" + layout.COMMIT) for p in paths):
            self._die_if("mid-retention")

    def read(self, path: str) -> bytes:
        return self._inner.read(path)

    def list(self) -> list[str]:
        return self._inner.list()

    def uri(self, path: str = "") -> str:
        return self._inner.uri(path)


def main() -> int:
    phase = sys.argv[1]
    storage = KillAt(open_storage(os.environ["BROKER_CHECKPOINT_URI"]), phase)
    with Checkpointer(storage=storage, every_steps=1, keep_last=1, handle_sigterm=False) as ckpt:
        restored = ckpt.restore()
        start = restored.step + 1 if restored else 1
        print("restored", restored.step if restored else None, flush=True)
        steps = range(start, start + 1) if phase == "none" else range(1, 4)
        for step in steps:
            ckpt.save(step, {"a": np.full(4096, step, dtype=np.float32), "step": step}, wait=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
