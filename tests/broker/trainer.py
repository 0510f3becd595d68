"""A tiny training loop for recovery tests: stdlib + the checkpoint library, no torch.

    python trainer.py TOTAL_STEPS STEP_SECONDS SAVE_EVERY

Prints "start K" (the step it resumed from) and "step N" each step, reports progress,
and saves {"step": N} every SAVE_EVERY steps and on the preemption notice.
"""

import sys
import time

from checkpoint import Checkpointer
from checkpoint.progress import report

total, pause, every = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
ckpt = Checkpointer(every_steps=every)
state = ckpt.restore(default=None)
start = int(state["step"]) if state else 0
print(f"start {start}", flush=True)
for step in range(start + 1, total + 1):
    time.sleep(pause)
    print(f"step {step}", flush=True)
    report(step, total, {"loss": 1.0 / step})
    if ckpt.due(step):
        ckpt.save(step, {"step": step})
ckpt.close()
print("done", flush=True)
