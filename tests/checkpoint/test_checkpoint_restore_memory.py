"""What a restore holds in memory beyond the model it loads into, and that a checkpoint which does not verify
leaves the live objects alone."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest
import torch

from fakes import checkpointer, committed_steps

from checkpoint import CheckpointError, CheckpointWarning, layout
from checkpoint.storage import open_storage

MiB = 2**20

# A child process saves a model of MIB MiB (Linear(1024, 1024) layers, 4 MiB of weights each) at step 1, or builds a
# fresh one and restores into it, printing the peak RSS the restore added: the kernel's high-water mark (VmHWM), reset
# just before (``5`` to /proc/self/clear_refs), less the RSS then (ru_maxrss kept the peak of importing torch).
CHILD = """
import sys, torch

def rss(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field + ":"))

from checkpoint import Checkpointer
mode, uri, mib = sys.argv[1], sys.argv[2], int(sys.argv[3])
torch.manual_seed(0 if mode == "save" else 1)
model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024, bias=False) for _ in range(mib // 4)])
ckpt = Checkpointer(uri, every_steps=1, handle_sigterm=False, env={})
if mode == "save":
    ckpt.save(1, {"model": model}, wait=True)
else:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = rss("VmRSS")
    restored = ckpt.restore(into={"model": model})
    after = rss("VmHWM")
    assert restored.step == 1
    print(after - before, model[0].weight.sum().item())
ckpt.close()
"""


@pytest.mark.parametrize("kind, mib", [("file", 512), ("s3", 192)])
def test_restoring_into_a_model_holds_far_less_than_a_second_copy_of_it(kind, mib, make_uri, subprocess_env):
    """A restore read every file whole, then decoded all of its tensors, then copied them into the model: its peak
    was about twice the checkpoint above the model (a 60 GB model needed 120 GB more to resume). Now the files are
    verified on disk (a remote one streamed to a temporary file) and each tensor is read as it is copied in."""
    uri = make_uri(kind)
    env = subprocess_env(uri)
    for mode in ("save", "restore"):
        out = subprocess.run([sys.executable, "-c", CHILD, mode, uri, str(mib)], env=env, capture_output=True,
                             text=True, timeout=240)
        assert out.returncode == 0, out.stderr[-3000:]
    extra, first = out.stdout.split()
    saved = subprocess.run([sys.executable, "-c", "import torch; torch.manual_seed(0); "
                            "print(torch.nn.Linear(1024, 1024, bias=False).weight.sum().item())"],
                           capture_output=True, text=True, timeout=60).stdout.split()[0]
    assert first == saved  # the model holds what was saved
    assert int(extra) < mib * MiB // 3, \
        f"restoring {mib} MiB into a model raised the peak by {int(extra) / MiB:.0f} MiB"


def small(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 64))


def damage_last_tensor(storage, step: int) -> None:
    """Flip the last byte of the newest checkpoint's model file: its first tensors still read as they were saved."""
    entry = next(e for e in layout.scan(storage.list()) if e.id.step == step)
    path = layout.path(entry.id, next(f for f in entry.files if f.endswith(".safetensors")))
    data = bytearray(storage.read(path))
    data[-1] ^= 0xFF
    storage.write(path, bytes(data))


@pytest.mark.parametrize("kind", ["file", "s3", "memory"])
def test_a_damaged_newest_checkpoint_loads_the_previous_one_whole_not_a_mix(kind, make_uri):
    uri = make_uri(kind)
    storage = open_storage(uri)
    with checkpointer(storage) as ckpt:
        ckpt.save(1, {"model": small(1)}, wait=True)
        ckpt.save(2, {"model": small(2)}, wait=True)
    damage_last_tensor(storage, 2)
    target = small(3)
    with checkpointer(storage) as ckpt, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        restored = ckpt.restore(into={"model": target})
    assert restored.step == 1
    assert any("sha256 mismatch" in str(w.message) for w in caught if issubclass(w.category, CheckpointWarning))
    for name, tensor in small(1).state_dict().items():
        assert torch.equal(target.state_dict()[name], tensor), name
        assert torch.equal(restored["model"][name], tensor), name


@pytest.mark.parametrize("kind", ["file", "s3"])
def test_when_no_checkpoint_verifies_the_live_objects_are_left_as_they_were(kind, make_uri):
    uri = make_uri(kind)
    storage = open_storage(uri)
    with checkpointer(storage) as ckpt:
        ckpt.save(1, {"model": small(1)}, wait=True)
    damage_last_tensor(storage, 1)
    target = small(3)
    optim = torch.optim.SGD(target.parameters(), lr=0.1, momentum=0.9)
    before = {k: v.clone() for k, v in target.state_dict().items()}
    with checkpointer(storage) as ckpt, warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        with pytest.raises(CheckpointError, match="every checkpoint under .* is damaged"):
            ckpt.restore("fresh", into={"model": target, "optim": optim})
    for name, tensor in before.items():
        assert torch.equal(target.state_dict()[name], tensor), name
    assert optim.state_dict()["state"] == {}
    assert committed_steps(storage) == [1]


def test_a_shape_mismatch_still_raises_naming_the_parameter(tmp_path):
    storage = open_storage(str(tmp_path / "run"))
    with checkpointer(storage) as ckpt:
        ckpt.save(1, {"model": torch.nn.Linear(8, 4)}, wait=True)
    with checkpointer(storage) as ckpt, pytest.raises(CheckpointError, match=r"'model' does not match what was saved: "
                                                                              r"'weight' saved \(4, 8\), live \(5, 8\)"):
        ckpt.restore(into={"model": torch.nn.Linear(8, 5)})


def test_a_disk_too_small_for_the_download_warns_and_restores_from_memory(make_uri, monkeypatch, tmp_path):
    """A remote checkpoint is downloaded to ``spool_dir`` to be verified; with less room there than the checkpoint,
    the restore says so and reads it into memory (as before) rather than fail the resume."""
    import shutil

    import checkpoint.restore as restoring

    uri = make_uri("s3")
    storage = open_storage(uri)
    with checkpointer(storage) as ckpt:
        ckpt.save(1, {"model": small(1)}, wait=True)
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(restoring.shutil, "disk_usage",
                        lambda p: usage._replace(free=0) if str(p) == str(tmp_path) else usage)
    target = small(3)
    with checkpointer(open_storage(uri), spool_dir=tmp_path) as ckpt, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert ckpt.restore(into={"model": target}).step == 1
    texts = [str(w.message) for w in caught if issubclass(w.category, CheckpointWarning)]
    assert len(texts) == 1 and f"{tmp_path} has 0 MiB free: reading it into memory instead" in texts[0], texts
    assert torch.equal(target[0].weight, small(1)[0].weight)
