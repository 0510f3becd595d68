"""DistributedDataParallel under torchrun: one writer per base URI, whatever the ranks call.

Real processes: ``torchrun --nproc_per_node=2`` on CPU (gloo), each rank running the loop of
docs/checkpoint.md as it stands — ``due()`` and ``save()`` on every rank.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from checkpoint import layout
from checkpoint.storage import open_storage

REPO = Path(__file__).resolve().parents[2]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]

EVERY_RANK_SAVES = """\
import os, time
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from checkpoint import Checkpointer, GlobalRNG

dist.init_process_group("gloo")
torch.manual_seed(0)
model = DDP(torch.nn.Linear(8, 1))
optim = torch.optim.SGD(model.parameters(), lr=0.05)
state = {"model": model, "optim": optim, "rng": GlobalRNG()}
ckpt = Checkpointer(every_steps=5, keep_last=10)
restored = ckpt.restore(default=None, into=state)
step = restored.step if restored else 0
print(f"rank {dist.get_rank()} start {step}", flush=True)
while step < int(os.environ["TOTAL"]):
    loss = model(torch.randn(16, 8)).square().mean()
    optim.zero_grad(); loss.backward(); optim.step()
    step += 1
    if ckpt.due(step):        # on every rank, as the docs' loop reads
        ckpt.save(step, state)
ckpt.close()
dist.destroy_process_group()
"""


def torchrun(script: Path, base: Path, total: int) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO), "BROKER_CHECKPOINT_URI": str(base), "TOTAL": str(total),
           "OMP_NUM_THREADS": "1"}
    for name in ("BROKER_NOTICE_FILE", "BROKER_RESUME_FROM", "BROKER_PROGRESS_URL"):
        env.pop(name, None)
    done = subprocess.run([*TORCHRUN, str(script)], env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout + done.stderr


@pytest.mark.timeout(600)  # two runs of three interpreters importing torch, on a loaded 2-core host
def test_when_every_rank_calls_save_only_rank_0_writes_and_every_checkpoint_verifies(tmp_path):
    # two writers of the same step write the same directory (the name has the step and the ms, and DDP
    # keeps ranks in step): the manifest of one and the commit marker of the other corrupt it
    script = tmp_path / "ddp.py"
    script.write_text(EVERY_RANK_SAVES)
    base = tmp_path / "ckpt"
    torchrun(script, base, 20)
    entries = layout.scan(open_storage(str(base)).list())
    # one checkpoint per step that was saved: a save still waiting while the one before uploads is replaced by the
    # next (checkpoint/background.py), so on a loaded host 15 may give way to 20; the last one is always written
    steps = [e.id.step for e in entries]
    assert steps[-1] == 20 and set(steps) <= {5, 10, 15, 20} and len(set(steps)) == len(steps), \
        [e.name for e in entries]
    verify = subprocess.run([sys.executable, "-m", "checkpoint.cli", "verify", str(base)], capture_output=True,
                            text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=180)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    out = torchrun(script, base, 25)  # and every rank resumes from rank 0's checkpoint
    assert "rank 0 start 20" in out and "rank 1 start 20" in out, out[-2000:]
    after = [e.id.step for e in layout.scan(open_storage(str(base)).list())]
    assert after[:len(steps)] == steps and after[-1] == 25 and set(after) <= {*steps, 25}, after
