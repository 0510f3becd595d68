"""Train a small MLP on generated data, checkpointing so a preempted run resumes exactly.

    python examples/train_mlp.py --total-steps 300 --step-sleep 0.1 --save-every 50

The data is a synthetic 4-class problem labelled by a fixed random "teacher" network, made
from ``--seed`` on the spot: nothing is downloaded. Under the broker, the checkpoint
location comes from ``BROKER_CHECKPOINT_URI`` (``BROKER_RESUME_FROM`` picks a specific
checkpoint) and progress goes to ``BROKER_PROGRESS_URL``. On SIGTERM the script saves at
the next step, waits for the upload and exits with status 143.

Everything that decides the next step is checkpointed — weights, optimizer, LR schedule,
GradScaler, the global RNGs (dropout and augmentation noise draw from them) and the data
position — so on CPU a run killed at any step and resumed ends bit-identical to one that
never stopped.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from torch import nn

from checkpoint import Checkpointer, GlobalRNG
from checkpoint.progress import report

FEATURES, CLASSES = 16, 4


def make_dataset(seed: int, n: int = 4096) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, FEATURES, generator=g)
    teacher = torch.randn(FEATURES, 32, generator=g), torch.randn(32, CLASSES, generator=g)
    y = (torch.tanh(x @ teacher[0]) @ teacher[1]).argmax(dim=1)
    return x, y


class Batches:
    """Shuffled mini-batches, reshuffled every epoch; its position is checkpointable."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, batch_size: int, seed: int):
        self.x, self.y, self.batch_size, self.seed = x, y, batch_size, seed
        self.epoch, self.pos = 0, 0

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.pos + self.batch_size > len(self.x):
            self.epoch, self.pos = self.epoch + 1, 0
        order = torch.randperm(len(self.x), generator=torch.Generator().manual_seed(self.seed * 1000 + self.epoch))
        idx = order[self.pos:self.pos + self.batch_size]
        self.pos += self.batch_size
        return self.x[idx], self.y[idx]

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "pos": self.pos}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.pos = int(state["epoch"]), int(state["pos"])


def build(hidden: int, lr: float, total_steps: int):
    model = nn.Sequential(
        nn.Linear(FEATURES, hidden), nn.ReLU(), nn.Dropout(0.1),
        nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, CLASSES),
    )
    optim = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(optim, T_max=max(1, total_steps))
    scaler = torch.amp.GradScaler("cuda", enabled=torch.cuda.is_available())
    return model, optim, sched, scaler


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--total-steps", type=int, default=300)
    p.add_argument("--step-sleep", type=float, default=0.1, help="seconds to sleep per step (demo pacing)")
    p.add_argument("--save-every", type=int, default=50, help="checkpoint every N steps")
    p.add_argument("--save-every-seconds", type=float, default=None, help="also checkpoint every T seconds")
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--keep-last", type=int, default=3)
    p.add_argument("--checkpoint-uri", default=os.environ.get("BROKER_CHECKPOINT_URI") or ".demo/checkpoints/train_mlp")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=3e-3)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # same reduction order in every run → bit-identical resumes
    x, y = make_dataset(args.seed)
    batches = Batches(x, y, args.batch_size, args.seed)
    model, optim, sched, scaler = build(args.hidden, args.lr, args.total_steps)
    state = {"model": model, "optim": optim, "sched": sched, "scaler": scaler, "rng": GlobalRNG(), "data": batches}

    ckpt = Checkpointer(args.checkpoint_uri, every_steps=args.save_every,
                        every_seconds=args.save_every_seconds, keep_last=args.keep_last)
    restored = ckpt.restore(default=None, into=state)
    start = restored.step if restored else 0
    print(f"{'resumed from ' + restored.uri if restored else 'fresh start'} at step {start}/{args.total_steps}",
          flush=True)
    del restored  # loaded into state already; kept, it would hold a second copy of the state for the whole run

    loss_fn = nn.CrossEntropyLoss()
    for step in range(start, args.total_steps):
        model.train()
        xb, yb = batches.next()
        xb = xb + 0.05 * torch.randn_like(xb)  # augmentation noise from the global RNG
        with torch.autocast("cuda", enabled=scaler.is_enabled()):
            loss = loss_fn(model(xb), yb)
        optim.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optim)
        scaler.update()
        sched.step()

        done = step + 1
        if done % args.log_every == 0 or done == args.total_steps:
            print(f"step {done}/{args.total_steps} loss {loss.item():.4f}", flush=True)
            report(done, args.total_steps, {"loss": loss.item()})
        if ckpt.due(done) or done == args.total_steps:
            ckpt.save(done, state)
        if args.step_sleep:
            time.sleep(args.step_sleep)

    ckpt.close()
    print(f"finished: {args.total_steps} steps, last checkpoint {ckpt.last_committed}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
