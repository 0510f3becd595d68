"""The boundary to torch, numpy and safetensors — the only module that imports them.

Imports are lazy: a tensor can only exist if its library was imported by the caller, so
``is_tensor`` looks in ``sys.modules`` rather than importing torch, and a training script
without torch never pays for it.

Tensors are written in the safetensors format (no pickle): a JSON header and raw bytes.
"""

from __future__ import annotations

import importlib.metadata
import json
import platform
import sys
from typing import Any


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


def host_copy(x: Any) -> Any:
    """A private CPU copy of a tensor or array: later training steps cannot change it."""
    if is_tensor(x):
        x = x.detach()
        if x.device.type == "cpu":
            return x.clone()
        return x.to("cpu")
    return x.copy()


def can_store_array(x: Any) -> bool:
    """Whether safetensors can hold this array (numeric dtypes only, no objects/strings)."""
    return x.dtype.kind in "biuf"


def encode_tensors(items: dict[str, Any]) -> bytes:
    """Tensors and/or arrays → safetensors bytes. Arrays travel as tensors when torch is there."""
    if not items:
        return b""
    torch = sys.modules.get("torch")
    if torch is None:
        from safetensors.numpy import save

        return save({k: _contiguous_array(v) for k, v in items.items()})
    from safetensors.torch import save

    tensors = {}
    for k, v in items.items():
        t = v if isinstance(v, torch.Tensor) else torch.from_numpy(_contiguous_array(v))
        tensors[k] = t.contiguous()
    return save(tensors)


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


def _contiguous_array(x: Any) -> Any:
    import numpy as np

    return np.ascontiguousarray(x)


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
            "kind": str(kind), "keys": [int(k) for k in keys], "pos": int(pos),
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
            torch.cuda.set_rng_state_all(state["cuda"])


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
