"""What a saved state looks like on the way back: types survive, pickle only when asked."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from checkpoint import UnsafeCheckpointError, layout
from checkpoint.snapshot import capture, decode


def roundtrip(state, allow_pickle=False):
    return decode(capture(state).files(), allow_pickle=allow_pickle)


CASES = [
    ("tuples stay tuples", (1, (2.5, "x"))),
    ("int dict keys stay ints (optimizer state)", {0: {"step": 3}, 1: {}}),
    ("keys that look like our tags are escaped", {"__tensor__": "not a tensor"}),
    ("bytes survive", b"\x00\xffraw"),
    ("floats round-trip bit for bit", [0.1, 1 / 3, 1e-308, -0.0]),
    ("None and bools", [None, True, False]),
]


@pytest.mark.parametrize("value", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_plain_values_round_trip(value):
    assert roundtrip({"v": value})["v"] == value


def test_non_finite_floats_round_trip():
    out = roundtrip({"v": [math.inf, -math.inf, math.nan]})["v"]
    assert out[:2] == [math.inf, -math.inf] and math.isnan(out[2])


def test_tensors_and_arrays_keep_dtype_shape_and_bits():
    t = {"bf16": torch.randn(3, 4).to(torch.bfloat16), "i64": torch.arange(5),
         "strided": torch.arange(12.0).reshape(3, 4).t(), "scalar": torch.tensor(2.5)}
    a = {"u8": np.arange(7, dtype=np.uint8), "f32": np.ones((2, 2), dtype=np.float32)}
    out = roundtrip({"t": t, "a": a, "npscalar": np.float64(0.25)})
    for k, v in t.items():
        assert out["t"][k].dtype == v.dtype and torch.equal(out["t"][k], v), k
    for k, v in a.items():
        assert isinstance(out["a"][k], np.ndarray) and out["a"][k].dtype == v.dtype
        np.testing.assert_array_equal(out["a"][k], v)
    assert out["npscalar"] == 0.25


def test_a_tensor_reachable_twice_is_stored_once():
    w = torch.randn(100)
    captured = capture({"m": {"a": w, "b": w}})
    assert len(captured.tensors[layout.tensor_file(0, "m")]) == 1
    out = decode(captured.files())
    assert torch.equal(out["m"]["a"], w) and torch.equal(out["m"]["b"], w)


def test_torch_training_state_is_saved_without_pickle():
    model = torch.nn.Linear(3, 2)
    optim = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(1, 3)).sum().backward()
    optim.step()
    files = capture({"model": model, "optim": optim,
                     "sched": torch.optim.lr_scheduler.StepLR(optim, 3)}).files()
    assert layout.OBJECTS not in files


class Opaque:
    def __init__(self, n):
        self.n = n

    def __eq__(self, other):
        return isinstance(other, Opaque) and other.n == self.n


def test_arbitrary_objects_are_pickled_and_restore_refuses_them_unless_asked():
    files = capture({"odd": Opaque(3)}).files()
    assert layout.OBJECTS in files
    with pytest.raises(UnsafeCheckpointError, match="allow_pickle=True"):
        decode(files)
    assert decode(files, allow_pickle=True)["odd"] == Opaque(3)


def test_objects_are_frozen_at_save_time_not_at_upload_time():
    obj = Opaque(1)
    captured = capture({"odd": obj, "plain": {"lr": 0.1}})
    obj.n = 2
    assert decode(captured.files(), allow_pickle=True)["odd"] == Opaque(1)


def test_a_strided_tensor_is_copied_once_and_uploaded_from_that_copy():
    w = torch.randn(64, 32).t()  # a transposed view: not contiguous
    captured = capture({"m": {"w": w, "half": torch.randn(8, 8)[:, ::2]}})
    buffers = captured.files()["00-m.safetensors"]
    uploaded = {np.frombuffer(b, dtype=np.uint8).ctypes.data for b in buffers[1:]}
    copies = captured.tensors["00-m.safetensors"]
    assert uploaded == {copies["m.w"].data_ptr(), copies["m.half"].data_ptr()}
    restored = decode({k: b"".join(bytes(x) for x in v) for k, v in captured.files().items()})
    torch.testing.assert_close(restored["m"]["w"], w, rtol=0, atol=0)



def test_tensor_names_that_meet_never_replace_one_another():
    """Two keys that meet as 'a.b' ("a.b" and "a": {"b"}): the second was named 'a.b#<count>' without looking
    whether that name was taken, and a key of that very name was silently overwritten (saved [1.], restored [3.])."""
    model = {"a.b#2": np.array([1.0]), "a.b": np.array([2.0]), "a": {"b": np.array([3.0])}}
    back = roundtrip({"m": model})["m"]
    assert back["a.b#2"].tolist() == [1.0] and back["a.b"].tolist() == [2.0] and back["a"]["b"].tolist() == [3.0]
