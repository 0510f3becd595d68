"""Only rank 0 of a torch.distributed group writes checkpoints. On rank 1 the notice said "saving at the next step",
a save it never makes; it says what it does instead. A child process stands for rank 1 of 2 (``ranks.group``
answering so: one process cannot hold a real group of two), with a short grace period."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import os, signal, time
    import numpy as np
    import checkpoint.ranks as ranks
    ranks.group = lambda: (1, 2)
    from checkpoint import Checkpointer
    with Checkpointer(every_steps=10**6, grace_s=2) as ckpt:
        for step in range(1, 10**6):
            time.sleep(0.01)
            if step == 20:
                os.kill(os.getpid(), signal.SIGTERM)
            if ckpt.due(step):
                ckpt.save(step, {"w": np.full(4, step)})
""")


def test_a_notice_on_a_rank_that_does_not_write_says_rank_0_writes(tmp_path, subprocess_env):
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60,
                          env=subprocess_env(str(tmp_path / "run"), RANK="1", WORLD_SIZE="2"))
    assert done.returncode == 143, done.stderr[-2000:]
    assert ("[rank 1] preemption notice: rank 0 writes the checkpoint, if the notice reached it too; this rank goes "
            "on until rank 0 exits or the grace period ends, within 2 s") in done.stderr, done.stderr[-2000:]
    assert "saving at the next step" not in done.stderr
