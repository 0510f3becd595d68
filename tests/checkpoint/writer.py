"""A training-loop stand-in for subprocess tests: numpy state (fast to start), saves often.

    python writer.py --sleep S [--big-every K]

Resumes from $BROKER_CHECKPOINT_URI, then saves step after step (array filled with the step
number, every K-th one 11 MiB so it goes up as a multipart/composite upload). Prints
``ready``, then ``saved N`` after each save and ``committed N`` whenever a commit lands.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time

import numpy as np

from checkpoint import Checkpointer, TransferOptions

SMALL, BIG = 16 * 1024, 11 * 2**18  # float32 elements: 64 KiB, 11 MiB


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--sleep", type=float, default=0.0)
    p.add_argument("--big-every", type=int, default=3)
    args = p.parse_args()
    ckpt = Checkpointer(every_steps=1, keep_last=2, transfer=TransferOptions(part_size=5 * 2**20, concurrency=3))
    restored = ckpt.restore()
    start = restored.step + 1 if restored else 0
    print("ready", start, flush=True)
    seen = None
    for step in itertools.count(start):
        n = BIG if step % args.big_every == 0 else SMALL
        ckpt.save(step, {"a": np.full(n, step, dtype=np.float32), "meta": {"step": step, "n": n}})
        print("saved", step, flush=True)
        if ckpt.last_committed != seen:
            seen = ckpt.last_committed
            print("committed", seen.rsplit("/", 1)[1], flush=True)
        time.sleep(args.sleep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
