"""Each rank of a torch.distributed run resumes its own random streams, not rank 0's.

Real processes: two ranks of a gloo group on CPU (``init_process_group`` from the variables torchrun sets, its TCP
store on loopback), a DistributedDataParallel model with dropout, the loop of docs/checkpoint.md. Before, only rank
0's state was saved and every rank restored it: after a resume both ranks drew the same dropout masks and numbers.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from testports import free_port

from checkpoint import Checkpointer, CheckpointWarning, GlobalRNG

REPO = Path(__file__).resolve().parents[2]

#: argv: base URI, total steps, seed[, a checkpoint base holding one random state]. Seeds each rank's generators
#: differently, restores, trains to the total (a save every 3 steps), and prints as one JSON line the step it
#: started at and each step's draws after the restore (and what it drew after restoring the one-state checkpoint).
RANK = """\
import json, os, random, sys, warnings
import numpy as np, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from checkpoint import Checkpointer, CheckpointWarning, GlobalRNG

warnings.simplefilter("error", CheckpointWarning)  # nothing to warn about: same world size, one state or per rank
base, total, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
dist.init_process_group("gloo")
rank = dist.get_rank()
out = {"rank": rank}
if len(sys.argv) > 4:
    with Checkpointer(sys.argv[4], every_steps=1, handle_sigterm=False) as other:
        assert other.restore(into={"rng": GlobalRNG()}).step == 4
    out["one state"] = [float(np.random.rand()), random.random(), float(torch.rand(1))]
random.seed(seed + rank); np.random.seed(seed + rank); torch.manual_seed(seed + rank)
model = DDP(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 1)))
optim = torch.optim.SGD(model.parameters(), lr=0.01)
state = {"model": model, "optim": optim, "rng": GlobalRNG()}
ckpt = Checkpointer(base, every_steps=3, keep_last=10)
restored = ckpt.restore(default=None, into=state)
step = out["start"] = restored.step if restored else 0
draws = out["draws"] = {}
while step < total:
    x = torch.randn(4, 8)  # the batch, and the dropout mask: torch's generator
    loss = model(x).square().mean()
    optim.zero_grad(); loss.backward(); optim.step()
    step += 1
    draws[step] = [float(loss), float(np.random.rand()), random.random()]
    if ckpt.due(step):
        ckpt.save(step, state)
ckpt.close()
print("OUT", json.dumps(out), flush=True)
dist.destroy_process_group()
"""


def run_ranks(script: Path, *args: str) -> dict[int, dict]:
    """Both ranks of one run, started as torchrun starts them; what each printed."""
    port = free_port()
    procs = []
    for rank in (0, 1):
        env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
        env |= {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank)}
        procs.append(subprocess.Popen(["nice", "-n", "10", sys.executable, str(script), *args],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    out = {}
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr[-3000:]
        result = json.loads(next(line for line in stdout.splitlines() if line.startswith("OUT "))[4:])
        out[result["rank"]] = result
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A run straight through 5 steps (a save at 3); then, from a copy of its step-3 checkpoint, the run resumed as
    after an interruption — from other seeds, so only the restore can make the draws agree. The resumed ranks first
    restore a checkpoint holding one random state, as a single process (or any save before) writes it."""
    tmp = tmp_path_factory.mktemp("rank-rng")
    script = tmp / "rank.py"
    script.write_text(RANK)
    one_state = str(tmp / "one-state")
    random.seed(7), np.random.seed(7), torch.manual_seed(7)
    with Checkpointer(one_state, env={}, handle_sigterm=False, every_steps=1) as ckpt:
        ckpt.save(4, {"rng": GlobalRNG()}, wait=True)
    expected = [float(np.random.rand()), random.random(), float(torch.rand(1))]
    straight = run_ranks(script, str(tmp / "straight"), "5", "10")
    step_3 = next((tmp / "straight").glob("step-000000000003-*"))
    shutil.copytree(step_3, tmp / "resumed" / step_3.name)
    resumed = run_ranks(script, str(tmp / "resumed"), "5", "99", one_state)
    return tmp, straight, resumed, expected


@pytest.mark.timeout(600)  # two runs of two interpreters importing torch, on a loaded 2-core host
def test_after_a_resume_each_rank_draws_what_it_would_have_drawn_without_the_interruption(runs):
    _, straight, resumed, _ = runs
    for rank in (0, 1):
        assert resumed[rank]["start"] == 3
        assert resumed[rank]["draws"] == {k: v for k, v in straight[rank]["draws"].items() if int(k) > 3}, rank
    # and the ranks' streams differ: the old restore gave rank 1 rank 0's state, and the same draws
    four = resumed[0]["draws"]["4"], resumed[1]["draws"]["4"]
    assert all(a != b for a, b in zip(*four)), four


def test_a_checkpoint_with_one_random_state_restores_it_on_every_rank_without_a_warning(runs):
    # the ranks made any CheckpointWarning an error: a run resumed from a checkpoint written before goes on as then
    _, _, resumed, expected = runs
    assert resumed[0]["one state"] == resumed[1]["one state"] == expected


def test_a_resume_with_fewer_ranks_restores_those_that_exist_and_warns(runs):
    # the two-rank checkpoint at step 3, resumed by one process (no group: rank 0 of 1)
    tmp, straight, _, _ = runs
    with Checkpointer(str(tmp / "straight"), env={}, handle_sigterm=False, every_steps=1) as ckpt, \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        restored = ckpt.restore(into={"rng": GlobalRNG()})
        draws = [float(np.random.rand()), random.random()]
    assert restored.step == 3
    said = [str(w.message) for w in caught if issubclass(w.category, CheckpointWarning)]
    assert said == ["the checkpoint holds the random state of 2 rank(s) and this run has 1: rank 0 restored its own; "
                    "a run that needs each rank's random stream as saved should resume with as many ranks"], said
    assert restored["rng"]["world_size"] == 2 and set(restored["rng"]["ranks"]) == {1}
    assert draws == straight[0]["draws"]["4"][1:]  # rank 0's numpy and python draws of step 4, as they were
