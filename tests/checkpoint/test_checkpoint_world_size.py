"""A checkpoint saved by a DistributedDataParallel run resumes with another world size — one process
whose script leaves the model bare — and the other way round."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from checkpoint import Checkpointer


@pytest.fixture
def group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def net(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


def ckpt(uri: str) -> Checkpointer:
    return Checkpointer(uri, env={}, handle_sigterm=False, every_steps=1)


@pytest.mark.parametrize("saved_by, resumed_by", [("ddp", "bare"), ("bare", "ddp"), ("ddp", "ddp")],
                         ids=lambda w: {"ddp": "DistributedDataParallel", "bare": "a bare model"}[w])
def test_a_model_restores_whatever_wrapper_saved_it(saved_by, resumed_by, group, tmp_path):
    uri = str(tmp_path / "run")
    trained = net(0)
    with ckpt(uri) as c:
        model = DDP(trained) if saved_by == "ddp" else trained
        c.save(7, {"model": model, "optim": torch.optim.SGD(model.parameters(), lr=0.1)}, wait=True)
    fresh = net(1)
    target = DDP(fresh) if resumed_by == "ddp" else fresh
    with ckpt(uri) as c:
        restored = c.restore(into={"model": target})
    assert restored.step == 7 and all(not k.startswith("module.") for k in restored["model"])
    for a, b in zip(trained.state_dict().values(), fresh.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_a_checkpoint_saved_through_the_wrapper_by_an_earlier_version_still_loads(group, tmp_path):
    uri = str(tmp_path / "run")
    trained = net(0)
    with ckpt(uri) as c:  # what save() wrote before: the wrapper's keys
        c.save(3, {"model": {f"module.{k}": v for k, v in trained.state_dict().items()}}, wait=True)
    for target in (net(1), DDP(net(1))):
        with ckpt(uri) as c:
            c.restore(into={"model": target})
        torch.testing.assert_close(target.state_dict()[next(k for k in target.state_dict() if k.endswith("0.weight"))],
                                   trained.state_dict()["0.weight"], rtol=0, atol=0)
