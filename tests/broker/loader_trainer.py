"""A PyTorch training loop fed by a ``DataLoader`` with worker processes, for recovery tests.

    python loader_trainer.py TOTAL_STEPS STEP_SECONDS SAVE_EVERY

Like ``trainer.py`` ("start K", "step N", progress, saves every SAVE_EVERY steps and on the
notice), but each batch comes from two DataLoader worker processes, which die of a SIGTERM
sent to the job's process group.
"""

import sys
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

from checkpoint import Checkpointer, GlobalRNG
from checkpoint.progress import report

total, pause, every = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
torch.manual_seed(0)
data = TensorDataset(torch.randn(512, 8), torch.randn(512, 1))
model = torch.nn.Linear(8, 1)
optim = torch.optim.SGD(model.parameters(), lr=0.05)
state = {"model": model, "optim": optim, "rng": GlobalRNG()}
ckpt = Checkpointer(every_steps=every)
restored = ckpt.restore(default=None, into=state)
step = restored.step if restored else 0
print(f"start {step}", flush=True)
loader = DataLoader(data, batch_size=16, shuffle=True, num_workers=2, persistent_workers=True)
while step < total:
    for x, y in loader:
        time.sleep(pause)
        loss = torch.nn.functional.mse_loss(model(x), y)
        optim.zero_grad()
        loss.backward()
        optim.step()
        step += 1
        print(f"step {step}", flush=True)
        report(step, total, {"loss": float(loss)})
        if ckpt.due(step):
            ckpt.save(step, state)
        if step == total:
            break
ckpt.close()
print("done", flush=True)
