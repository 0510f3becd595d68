"""The boundary to torch, numpy and safetensors — the only module that imports them.

Imports are lazy: a tensor can only exist if its library was imported by the caller, so
``is_tensor`` looks in ``sys.modules`` rather than importing torch, and a training script
without torch never pays for it.

Tensors are written in the safetensors format (no pickle): a JSON header and raw bytes.
"""

from __future__ import annotations

import base64
import importlib.metadata
import json
import platform
import sys
import warnings
from typing import Any

from checkpoint.errors import CheckpointWarning


def is_tensor(x: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def is_ndarray(x: Any) -> bool:
    np = sys.modules.get("numpy")
    return np is not None and isinstance(x, np.ndarray)


def is_numpy_scalar(x: Any) -> bool:
    np = sys.modules.get("numpy")
    return np is not None and isinstance(x, np.generic)


def numpy_scalar_value(x: Any) -> Any:
    return x.item()


def unwrap_parallel(x: Any) -> Any:
    """The model inside a ``DistributedDataParallel`` / ``DataParallel`` wrapper, else ``x`` itself.

    Saved through the wrapper, every key gains a ``module.`` prefix, and a resume with another world
    size — one GPU, where a script skips the wrapper — fails to load it (``Unexpected key(s)
    "module.0.weight"``). The model inside is what a checkpoint holds, whatever ran it.
    """
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)):
        return x.module
    return x


def load_state(target: Any, saved: Any) -> None:
    """``target.load_state_dict(saved)``, through a parallel wrapper. A model's state saved through one by an
    earlier version (every key ``module.…``) loads too, into a wrapped model or a bare one."""
    target = unwrap_parallel(target)
    torch = sys.modules.get("torch")
    if (torch is not None and isinstance(target, torch.nn.Module) and isinstance(saved, dict) and saved
            and all(isinstance(k, str) and k.startswith("module.") for k in saved)
            and not all(k.startswith("module.") for k in target.state_dict())):
        saved = {k[len("module."):]: v for k, v in saved.items()}
    target.load_state_dict(saved)


def host_copy(x: Any) -> Any:
    """A private CPU copy of a tensor or array: later training steps cannot change it."""
    if is_tensor(x):
        # Contiguous, so encoding reads this copy as it is: a transposed or sliced tensor cloned with its
        # strides was copied a second time by the encoder, and both copies were held until the upload ended.
        torch = sys.modules["torch"]
        x = x.detach()
        if x.device.type == "cpu":
            return x.clone(memory_format=torch.contiguous_format)
        return x.to("cpu", memory_format=torch.contiguous_format)
    return x.copy()


#: safetensors dtype names, by (numpy kind, itemsize) and by torch dtype name.
_NUMPY_DTYPES = {("b", 1): "BOOL", ("u", 1): "U8", ("i", 1): "I8", ("u", 2): "U16", ("i", 2): "I16",
                 ("u", 4): "U32", ("i", 4): "I32", ("u", 8): "U64", ("i", 8): "I64",
                 ("f", 2): "F16", ("f", 4): "F32", ("f", 8): "F64"}
_TORCH_DTYPES = {"bool": "BOOL", "uint8": "U8", "int8": "I8", "uint16": "U16", "int16": "I16",
                 "uint32": "U32", "int32": "I32", "uint64": "U64", "int64": "I64", "float16": "F16",
                 "bfloat16": "BF16", "float32": "F32", "float64": "F64", "float8_e4m3fn": "F8_E4M3",
                 "float8_e5m2": "F8_E5M2"}


def unsupported(x: Any) -> str | None:
    """Why the safetensors format cannot hold this tensor or array (``dtype …``, ``layout …``), or None."""
    if is_tensor(x):
        if x.layout is not sys.modules["torch"].strided:
            return f"layout {x.layout} (save obj.to_dense(), or its indices and values)"
        return None if str(x.dtype).removeprefix("torch.") in _TORCH_DTYPES else f"dtype {x.dtype}"
    return None if (x.dtype.kind, x.dtype.itemsize) in _NUMPY_DTYPES else f"dtype {x.dtype}"


def supported(x: Any) -> bool:
    """Whether the safetensors format can hold this tensor or array (dense tensors only)."""
    return unsupported(x) is None


def encode_tensors(items: dict[str, Any]) -> list[Any]:
    """Tensors and/or arrays → one safetensors file, as a list of buffers to write in order.

    The buffers are a small header followed by views of the (already private) host copies,
    so encoding copies nothing: the upload reads tensor memory directly. The result is a
    standard safetensors file (and is read back with the safetensors library).
    """
    if not items:
        return []
    header: dict[str, Any] = {}
    views = []
    offset = 0
    for name, x in items.items():
        dtype, shape, view = _raw(x)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + view.nbytes]}
        views.append(view)
        offset += view.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data section starts 8-byte aligned
    return [len(text).to_bytes(8, "little") + text, *views]


def _raw(x: Any) -> tuple[str, list[int], memoryview]:
    if is_tensor(x):
        import torch

        x = x.contiguous()
        dtype = _TORCH_DTYPES[str(x.dtype).removeprefix("torch.")]
        raw = x.reshape(-1).view(torch.uint8).numpy() if x.numel() else b""
        return dtype, list(x.shape), memoryview(raw).cast("B") if len(raw) else memoryview(b"")
    import numpy as np

    # safetensors is little-endian: a big-endian array is converted, not written as if it were little.
    # ascontiguousarray makes a 0-d array 1-d, so the shape is taken from the array given.
    a = np.ascontiguousarray(x, dtype=x.dtype.newbyteorder("<"))
    dtype = _NUMPY_DTYPES[(a.dtype.kind, a.dtype.itemsize)]
    return dtype, list(np.shape(x)), memoryview(a.reshape(-1).view(np.uint8)).cast("B") if a.size else memoryview(b"")


def decode_tensors(data: bytes, as_arrays: set[str]) -> dict[str, Any]:
    """safetensors bytes → {name: tensor}; names in ``as_arrays`` come back as numpy arrays.

    A file holding only arrays is read with numpy alone, so numpy-only scripts never import torch.
    """
    if not data:
        return {}
    if set(_header_names(data)) <= as_arrays:
        from safetensors.numpy import load as load_arrays

        return load_arrays(data)
    from safetensors.torch import load

    out = load(data)
    for name in as_arrays & out.keys():
        out[name] = out[name].numpy()
    return out


def _header_names(data: bytes) -> list[str]:
    """Tensor names from a safetensors header (8-byte little-endian length, then JSON)."""
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    return [k for k in header if k != "__metadata__"]


def rng_state() -> dict[str, Any]:
    """The process-global generators: python ``random``, numpy legacy, torch CPU (+ CUDA)."""
    import random

    state: dict[str, Any] = {"python": random.getstate()}
    try:
        import numpy as np
    except ImportError:
        pass
    else:
        kind, keys, pos, has_gauss, cached = np.random.get_state()
        state["numpy"] = {
            "kind": str(kind), "keys": keys.tolist(), "pos": int(pos),
            "has_gauss": int(has_gauss), "cached_gaussian": float(cached),
        }
    try:
        import torch
    except ImportError:
        pass
    else:
        state["torch"] = torch.get_rng_state()
        if torch.cuda.is_available():
            state["cuda"] = list(torch.cuda.get_rng_state_all())
    return state


def rng_state_to_wire(step: int, state: dict[str, Any]) -> bytes:
    """One rank's :func:`rng_state` after ``step`` as JSON, to hand to rank 0 through the process group's store
    (:mod:`checkpoint.ranks`) every step: numbers and base64 bytes, nothing to unpickle, and written for the shape
    :func:`rng_state` gives (a walk over every number took milliseconds a step)."""
    doc: dict[str, Any] = {}
    for key, value in state.items():
        if key == "python":
            version, internal, gauss = value
            doc[key] = [version, list(internal), gauss]
        elif key == "torch":
            doc[key] = _tensor_b64(value)
        elif key == "cuda":
            doc[key] = [_tensor_b64(v) for v in value]
        else:
            doc[key] = value
    return json.dumps({"step": step, "state": doc}, separators=(",", ":")).encode()


def rng_state_from_wire(data: bytes) -> tuple[int, dict[str, Any]]:
    """(step, state) from :func:`rng_state_to_wire`'s bytes, as :func:`rng_state` gives it."""
    doc = json.loads(data)
    state = doc["state"]
    for key, value in state.items():
        if key == "python":
            version, internal, gauss = value
            state[key] = (version, tuple(internal), gauss)
        elif key == "torch":
            state[key] = _b64_tensor(value)
        elif key == "cuda":
            state[key] = [_b64_tensor(v) for v in value]
    return int(doc["step"]), state


def _tensor_b64(x: Any) -> str:
    return base64.b64encode(x.detach().cpu().contiguous().numpy().tobytes()).decode()


def _b64_tensor(text: str) -> Any:
    import torch

    return torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.uint8)


def set_rng_state(state: dict[str, Any]) -> None:
    import random

    random.setstate(state["python"])
    if "numpy" in state:
        import numpy as np

        n = state["numpy"]
        np.random.set_state(
            (n["kind"], np.asarray(n["keys"], dtype=np.uint32), n["pos"], n["has_gauss"],
             n["cached_gaussian"])
        )
    if "torch" in state:
        import torch

        torch.set_rng_state(state["torch"])
        if "cuda" in state and torch.cuda.is_available():
            _set_cuda_rng_states(torch, state["cuda"])


def _set_cuda_rng_states(torch, saved: list) -> None:
    """Each visible GPU's generator from the one saved for the GPU of its index. A run resumed where fewer GPUs are
    visible (another instance type, a smaller ``CUDA_VISIBLE_DEVICES``) restores the first ones and warns:
    ``set_rng_state_all`` took every saved state, and one past the last device failed with an IndexError from
    inside CUDA's lazy initialization, at the first CUDA call after the restore. GPUs beyond those saved keep
    their seeds, with the same warning."""
    visible = torch.cuda.device_count()
    for index, generator_state in enumerate(saved[:visible]):
        torch.cuda.set_rng_state(generator_state, index)
    if len(saved) != visible:
        warnings.warn(CheckpointWarning(
            f"the checkpoint holds the random state of {len(saved)} GPU(s) and {visible} are visible here: "
            f"restored {min(len(saved), visible)}" + (", the others keep their seeds" if visible > len(saved) else "")
            + "; a run that needs each GPU's random stream as saved should resume on as many GPUs"), stacklevel=3)


def framework_versions() -> dict[str, str]:
    """Versions recorded in each manifest (only of libraries this process has loaded)."""
    versions = {"python": platform.python_version()}
    for module, dist in (("torch", "torch"), ("numpy", "numpy"), ("safetensors", "safetensors")):
        if module in sys.modules:
            versions[module] = getattr(sys.modules[module], "__version__", "") or _dist(dist)
    versions["checkpoint"] = _dist("spot-broker")
    return versions


def _dist(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
