"""Complex tensors and arrays: complex64 is a safetensors dtype (``C64``) and is saved like any tensor; complex128 and
complex32 have none, and the error says how to save them (their real view)."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch

from checkpoint import Checkpointer, CheckpointWarning


def checkpointer(uri: str) -> Checkpointer:
    return Checkpointer(uri, env={}, handle_sigterm=False, every_steps=1)


@pytest.mark.filterwarnings("ignore:Complex modules are a new feature:UserWarning")
def test_complex64_tensors_and_arrays_round_trip_exactly_without_pickle(store_uri):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2).to(torch.complex64)
    saved = {
        "t": torch.randn(4, 3, dtype=torch.complex64),
        "strided": torch.randn(3, 4, dtype=torch.complex64).t(),  # not contiguous
        "scalar": torch.tensor(1 - 2j, dtype=torch.complex64),
        "empty": torch.zeros(0, 2, dtype=torch.complex64),
        "a": (np.arange(6, dtype=np.float32) + 1j * np.arange(6, dtype=np.float32)).astype(np.complex64).reshape(2, 3),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("error", CheckpointWarning)  # nothing pickled
        with checkpointer(store_uri) as ckpt:
            ckpt.save(1, {"model": model, "v": saved}, wait=True)
    fresh = torch.nn.Linear(3, 2).to(torch.complex64)
    with checkpointer(store_uri) as ckpt:
        restored = ckpt.restore(into={"model": fresh})  # no allow_pickle: nothing was pickled
    assert torch.equal(fresh.weight, model.weight) and fresh.weight.dtype == torch.complex64
    for key in ("t", "strided", "scalar", "empty"):
        got = restored["v"][key]
        assert got.dtype == torch.complex64 and got.shape == saved[key].shape and torch.equal(got, saved[key]), key
    assert restored["v"]["a"].dtype == np.complex64 and np.array_equal(restored["v"]["a"], saved["a"])


def test_the_file_is_a_standard_safetensors_file_with_c64(tmp_path):
    from safetensors.torch import load_file

    t = torch.tensor([1 + 2j, -3.5 + 0.25j], dtype=torch.complex64)
    with checkpointer(str(tmp_path / "run")) as ckpt:
        ckpt.save(1, {"t": t}, wait=True)
        directory = ckpt.last_committed
    path = next((tmp_path / "run").glob("step-*/00-t.safetensors"))
    header = json.loads(path.read_bytes()[8:8 + int.from_bytes(path.read_bytes()[:8], "little")])
    assert header["t"]["dtype"] == "C64", (directory, header)
    assert torch.equal(load_file(str(path))["t"], t)


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental:UserWarning")
@pytest.mark.parametrize("dtype", [torch.complex128, torch.complex32])
def test_complex128_is_refused_with_the_way_to_save_it(tmp_path, dtype):
    t = torch.tensor([1 + 2j], dtype=torch.complex64).to(dtype)
    with checkpointer(str(tmp_path / "run")) as ckpt:
        with pytest.raises(TypeError, match=r"v: tensors of dtype torch\.complex\d+ \(.*torch\.view_as_real\(t\).*"
                                            r"torch\.view_as_complex\) cannot be checkpointed"):
            ckpt.save(1, {"v": t}, wait=True)
        real = torch.view_as_real(t)  # the way the message gives works
        ckpt.save(2, {"v": real}, wait=True)
    with checkpointer(str(tmp_path / "run")) as ckpt:
        back = torch.view_as_complex(ckpt.restore()["v"])
    assert back.dtype == dtype and torch.equal(torch.view_as_real(back), real)
