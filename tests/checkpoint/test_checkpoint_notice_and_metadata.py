"""Gaps an audit found: a preemption notice heard by a checkpointer that was then closed (a reader of pretrained
weights) was lost to the run's checkpointer made after it; and a module's ``state_dict()._metadata`` (torch's
per-module versions, which ``load_state_dict`` hands to each module) was not saved.

Real parts: subprocesses that get a real SIGTERM, local files, torch on CPU.
"""

from __future__ import annotations

import subprocess
import textwrap
import time
from collections import OrderedDict

import pytest
import torch

from conftest import PYTHON

from checkpoint import Checkpointer, snapshot


def _restored_step(uri: str) -> int | None:
    with Checkpointer(uri, env={}, handle_sigterm=False) as ckpt:
        restored = ckpt.restore()
    return None if restored is None else restored.step


# -- 1. a notice heard by a checkpointer closed before the run's was made ------------------------------------------


def test_a_notice_heard_by_a_checkpointer_closed_since_reaches_one_made_after_it(tmp_path, subprocess_env):
    """A reader of pretrained weights takes the SIGTERM and is closed once they loaded; the run's checkpointer is
    made after that. Before, the notice went with the closed reader: the loop trained on (here to its end), and on a
    VM the kill came with no checkpoint of the notice."""
    script = textwrap.dedent("""
        import os, signal, sys, time
        import numpy as np
        from checkpoint import Checkpointer
        with Checkpointer(sys.argv[1], handle_sigterm=False) as pre:
            pre.save(1, {"w": np.ones(4)}, wait=True)
        with Checkpointer(sys.argv[1], grace_s=20) as reader:   # pretrained weights, closed once loaded
            reader.restore()
            os.kill(os.getpid(), signal.SIGTERM)                 # the notice, while they load
            time.sleep(0.5)
        ckpt = Checkpointer(every_steps=10**6, grace_s=30)
        ckpt.restore()
        for step in range(1, 300):
            time.sleep(0.01)
            if ckpt.due(step):
                ckpt.save(step, {"w": np.full(4, step)})
        ckpt.close()
        print("the loop ended without the notice's save", flush=True)
    """)
    uri = str(tmp_path / "run")
    done = subprocess.run([PYTHON, "-c", script, str(tmp_path / "pretrained")], env=subprocess_env(uri),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 143, (done.stdout, done.stderr[-2000:])
    assert "the loop ended" not in done.stdout
    assert _restored_step(uri) == 1, done.stderr[-2000:]  # saved at its first step
    assert "a preemption notice came before this checkpointer was made" in done.stderr, done.stderr[-2000:]


def test_the_grace_deadline_of_a_notice_heard_by_a_closed_checkpointer_still_counts_from_when_it_came(
        tmp_path, subprocess_env):
    """The run's checkpointer is made after the grace period of the notice has passed: it exits at once, as the
    deadline says, rather than training on."""
    script = textwrap.dedent("""
        import os, signal, sys, time
        from checkpoint import Checkpointer
        with Checkpointer(sys.argv[1], grace_s=1) as reader:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.3)
        time.sleep(1.5)                                           # past the notice's grace period
        ckpt = Checkpointer(every_steps=10**6, grace_s=1)
        time.sleep(5)
        print("still running after the deadline", flush=True)
    """)
    uri = str(tmp_path / "run")
    done = subprocess.run([PYTHON, "-c", script, str(tmp_path / "pretrained")], env=subprocess_env(uri),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 143, (done.stdout, done.stderr[-2000:])
    assert "still running" not in done.stdout
    assert "grace period (1 s) is over" in done.stderr, done.stderr[-2000:]


def test_without_a_notice_a_checkpointer_made_after_a_closed_one_trains_on(tmp_path, subprocess_env):
    """Guard (kept behaviour): a closed reader that heard nothing gives the run's checkpointer no notice."""
    script = textwrap.dedent("""
        import sys, time
        import numpy as np
        from checkpoint import Checkpointer
        with Checkpointer(sys.argv[1], grace_s=20) as reader:
            reader.restore()
        with Checkpointer(every_steps=10**6, grace_s=30) as ckpt:
            for step in range(1, 20):
                if ckpt.due(step):
                    ckpt.save(step, {"w": np.full(4, step)})
            ckpt.save(19, {"w": np.full(4, 19)})
        print("done", flush=True)
    """)
    uri = str(tmp_path / "run")
    done = subprocess.run([PYTHON, "-c", script, str(tmp_path / "pretrained")], env=subprocess_env(uri),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "done" in done.stdout, done.stderr[-2000:]
    assert _restored_step(uri) == 19


# -- 2. a module's state_dict()._metadata --------------------------------------------------------------------------


class Affine(torch.nn.Module):
    """A module of the script's own that changed how it stores its weight: version 1 kept it transposed, and
    ``_load_from_state_dict`` converts a state of version 1 (or of no version: the oldest) as torch's own modules
    do (BatchNorm's version 2 added ``num_batches_tracked``)."""

    _version = 2

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(2, 3))
        self.norm = torch.nn.BatchNorm1d(3)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, *args, **kwargs):
        if local_metadata.get("version", 1) < 2 and prefix + "weight" in state_dict:
            state_dict[prefix + "weight"] = state_dict[prefix + "weight"].t()
        super()._load_from_state_dict(state_dict, prefix, local_metadata, *args, **kwargs)


def _model() -> torch.nn.Module:
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), Affine())
    with torch.no_grad():
        model[1].weight.copy_(torch.arange(6.0).reshape(2, 3))
    return model


def test_a_models_state_comes_back_with_the_metadata_torch_gave_it(tmp_path):
    model = _model()
    with Checkpointer(str(tmp_path), env={}, handle_sigterm=False) as ckpt:
        ckpt.save(1, {"model": model, "nested": {"sd": model.state_dict()}}, wait=True)
        restored = ckpt.restore()
    expected = model.state_dict()._metadata
    assert expected["1"] == {"version": 2} and expected["1.norm"] == {"version": 2}
    assert restored["model"]._metadata == expected
    assert restored["nested"]["sd"]._metadata == expected
    assert isinstance(restored["model"]._metadata, OrderedDict)


def test_load_state_dict_of_a_restored_state_sees_the_saved_versions(tmp_path):
    """Before, the metadata was lost: the module took the state for one of no version and converted (transposed)
    the weight it had just saved, and load_state_dict failed on its shape."""
    with Checkpointer(str(tmp_path), env={}, handle_sigterm=False) as ckpt:
        ckpt.save(1, {"model": _model()}, wait=True)
        restored = ckpt.restore()
    fresh = torch.nn.Sequential(torch.nn.Linear(3, 3), Affine())
    fresh.load_state_dict(restored["model"])
    assert torch.equal(fresh[1].weight, torch.arange(6.0).reshape(2, 3))


def test_a_restore_into_a_model_hands_load_state_dict_the_saved_versions(tmp_path):
    with Checkpointer(str(tmp_path), env={}, handle_sigterm=False) as ckpt:
        ckpt.save(1, {"model": _model()}, wait=True)
        fresh = torch.nn.Sequential(torch.nn.Linear(3, 3), Affine())
        ckpt.restore(into={"model": fresh})
    assert torch.equal(fresh[1].weight, torch.arange(6.0).reshape(2, 3))


def test_a_state_saved_through_ddp_keys_loads_into_the_bare_model_with_its_versions(tmp_path):
    """``{"model": ddp.state_dict()}`` (keys and metadata prefixed ``module.``) restored into the bare model."""
    model = _model()
    prefixed = OrderedDict((f"module.{k}", v) for k, v in model.state_dict().items())
    prefixed._metadata = OrderedDict((f"module.{k}" if k else "module", v)
                                     for k, v in model.state_dict()._metadata.items())
    with Checkpointer(str(tmp_path), env={}, handle_sigterm=False) as ckpt:
        ckpt.save(1, {"model": prefixed}, wait=True)
        fresh = torch.nn.Sequential(torch.nn.Linear(3, 3), Affine())
        ckpt.restore(into={"model": fresh})
    assert torch.equal(fresh[1].weight, torch.arange(6.0).reshape(2, 3))


def test_a_checkpoint_without_metadata_loads_as_before():
    """Guard (kept behaviour): a checkpoint an earlier version wrote (no ``metadata`` in state.json) decodes as it
    did: an OrderedDict with no ``_metadata``."""
    files = snapshot.capture({"model": torch.nn.Linear(2, 2)}).files()
    import json

    doc = json.loads(b"".join(files["state.json"]))
    assert "metadata" in doc
    del doc["metadata"]
    files["state.json"] = [json.dumps(doc).encode()]
    state = snapshot.decode(files)
    assert isinstance(state["model"], OrderedDict) and not hasattr(state["model"], "_metadata")
    torch.nn.Linear(2, 2).load_state_dict(state["model"])


def test_metadata_that_json_cannot_hold_is_refused_naming_where():
    sd = torch.nn.Linear(2, 2).state_dict()
    sd._metadata[""] = {"version": 1, "hook": object()}
    with pytest.raises(TypeError, match=r"model\._metadata\[''\]\['hook'\]: a object"):
        snapshot.capture({"model": sd})
