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
from collections import OrderedDict as _OrderedDict
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


def scalar_array(x: Any) -> Any:
    """A numpy scalar as a 0-d array of its dtype, to be saved as one (and read back as the scalar); None for a
    dtype safetensors cannot hold (a string, a date, complex128)."""
    array = sys.modules["numpy"].asarray(x)
    return array if array.shape == () and supported(array) else None


def is_module(x: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.nn.Module)


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


def load_state(target: Any, saved: Any, strict: bool = True) -> None:
    """``target.load_state_dict(saved)``, through a parallel wrapper. A model's state saved through one by an
    earlier version (every key ``module.…``) loads too, into a wrapped model or a bare one. ``strict=False`` is
    passed on to a module's ``load_state_dict`` (missing and unexpected keys are left alone); other objects are
    loaded as they are (an optimizer's ``load_state_dict`` takes no ``strict``)."""
    target = unwrap_parallel(target)
    torch = sys.modules.get("torch")
    if (torch is not None and isinstance(target, torch.nn.Module) and isinstance(saved, dict) and saved
            and all(isinstance(k, str) and k.startswith("module.") for k in saved)
            and not all(k.startswith("module.") for k in target.state_dict())):
        metadata = getattr(saved, "_metadata", None)
        saved = _OrderedDict((k[len("module."):], v) for k, v in saved.items())
        if metadata is not None:  # torch's module versions, by prefix: "module.0" is "0" now, "module" the root
            saved._metadata = _OrderedDict(("" if k == "module" else k.removeprefix("module."), v)
                                           for k, v in metadata.items() if k == "module" or k.startswith("module."))
    if not strict and torch is not None and isinstance(target, torch.nn.Module):
        target.load_state_dict(saved, strict=False)
    else:
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
                 ("f", 2): "F16", ("f", 4): "F32", ("f", 8): "F64", ("c", 8): "C64"}
_TORCH_DTYPES = {"bool": "BOOL", "uint8": "U8", "int8": "I8", "uint16": "U16", "int16": "I16",
                 "uint32": "U32", "int32": "I32", "uint64": "U64", "int64": "I64", "float16": "F16",
                 "bfloat16": "BF16", "float32": "F32", "float64": "F64", "float8_e4m3fn": "F8_E4M3",
                 "float8_e5m2": "F8_E5M2", "complex64": "C64"}
#: safetensors has C64 (complex64) but no complex128 nor complex32: those are saved as their real view.
_COMPLEX_WORKAROUND = ("safetensors has no such type: save torch.view_as_real(t), a float tensor one dimension "
                       "longer, and restore it with torch.view_as_complex")


def unsupported(x: Any) -> str | None:
    """Why the safetensors format cannot hold this tensor or array (``dtype …``, ``layout …``), or None."""
    if is_tensor(x):
        if x.layout is not sys.modules["torch"].strided:
            return f"layout {x.layout} (save obj.to_dense(), or its indices and values)"
        if str(x.dtype).removeprefix("torch.") in _TORCH_DTYPES:
            return None
        return f"dtype {x.dtype} ({_COMPLEX_WORKAROUND})" if x.is_complex() else f"dtype {x.dtype}"
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


_ITEMSIZE = {"BOOL": 1, "U8": 1, "I8": 1, "U16": 2, "I16": 2, "U32": 4, "I32": 4, "U64": 8, "I64": 8,
             "F16": 2, "BF16": 2, "F32": 4, "F64": 8, "F8_E4M3": 1, "F8_E5M2": 1, "C64": 8}
_TORCH_BY_NAME = {v: k for k, v in _TORCH_DTYPES.items()}
_NUMPY_BY_NAME = {v: k for k, v in _NUMPY_DTYPES.items()}


class TensorFile:
    """One verified safetensors file, read a tensor at a time from its blob (:mod:`checkpoint.blobs`).

    Only the header is read here, and checked: every tensor's dtype, shape and byte range must fit the file
    (a ``ValueError`` otherwise: verified bytes that do not decode). Names in ``as_arrays`` come back as numpy
    arrays; a file of arrays only is read with numpy alone, so numpy-only scripts never import torch. Names in
    ``as_scalars`` (0-d arrays among them) come back as numpy scalars (``np.float32(1.5)``), as they were saved.
    """

    def __init__(self, blob: Any, as_arrays: set[str], as_scalars: set[str] = frozenset()):
        self._blob = blob
        self._arrays = as_arrays
        self._scalars = as_scalars
        if blob.size < 8:
            raise ValueError(f"a safetensors file of {blob.size} bytes has no header")
        n = int.from_bytes(blob.read(0, 8), "little")
        if n > blob.size - 8:
            raise ValueError(f"safetensors header of {n} bytes in a file of {blob.size}")
        try:
            header = json.loads(blob.read(8, n))
        except (ValueError, UnicodeDecodeError) as e:
            raise ValueError(f"safetensors header unreadable: {e}") from e
        self._base = 8 + n
        self.entries: dict[str, tuple[str, tuple[int, ...], int, int]] = {}
        for name, e in header.items():
            if name == "__metadata__":
                continue
            try:
                dtype, shape, (start, end) = e["dtype"], tuple(int(d) for d in e["shape"]), e["data_offsets"]
                count = 1
                for d in shape:
                    count *= d
                if (dtype not in _ITEMSIZE or min(shape, default=0) < 0 or not 0 <= start <= end
                        or end - start != count * _ITEMSIZE[dtype] or self._base + end > blob.size):
                    raise ValueError
                if (name in as_arrays and dtype not in _NUMPY_BY_NAME) or (name in as_scalars and shape):
                    raise ValueError
            except (KeyError, TypeError, ValueError):
                raise ValueError(f"safetensors header entry {name!r} is not a tensor this file can hold: {e!r}") \
                    from None
            self.entries[name] = (dtype, shape, start, end)

    def pending(self, name: str) -> Pending:
        if name not in self.entries:
            raise KeyError(f"tensor {name!r} is not in the file")
        return Pending(self, name)

    def read(self, name: str) -> Any:
        """The tensor (or array) ``name``, in memory of its own, read straight into it from the blob."""
        dtype, shape, start, end = self.entries[name]
        if name in self._arrays:
            import numpy as np

            kind, size = _NUMPY_BY_NAME[dtype]
            out = np.empty(shape, dtype=np.dtype(f"<{kind}{size}") if kind != "b" else np.bool_)
            flat = out.reshape(-1).view(np.uint8)
        else:
            import torch

            out = torch.empty(shape, dtype=getattr(torch, _TORCH_BY_NAME[dtype]))
            flat = out.reshape(-1).view(torch.uint8).numpy()
        if end > start:
            self._blob.readinto(self._base + start, memoryview(flat))
        return out[()] if name in self._scalars and name in self._arrays else out


class Pending:
    """A saved tensor or array not read yet: ``read()`` reads it, each time into new memory."""

    __slots__ = ("file", "name")

    def __init__(self, file: TensorFile, name: str):
        self.file = file
        self.name = name

    def read(self) -> Any:
        return self.file.read(self.name)

    def dtype_name(self) -> str | None:
        """The saved dtype as torch names it (``float32``, ``bfloat16``), or None for a type torch lacks."""
        return _TORCH_BY_NAME.get(self.file.entries[self.name][0])

    def shape(self) -> tuple[int, ...]:
        """The saved shape, from the file's header (nothing is read)."""
        return self.file.entries[self.name][1]

    def is_array(self) -> bool:
        """Saved as a numpy array (read back as one), not a tensor."""
        return self.name in self.file._arrays

    def is_scalar(self) -> bool:
        """Saved as a numpy scalar (``np.int64(7)``, read back as one): a plain value, not an array."""
        return self.name in self.file._scalars and self.name in self.file._arrays

    def lazy(self) -> Any:
        """A stand-in for the tensor, for ``load_state_dict`` (:class:`LazyTensor`); an array is read now."""
        return self.read() if self.name in self.file._arrays else LazyTensor(self)


def dtype_name(x: Any) -> str:
    """A live tensor's or array's dtype as torch names it (``float32``), to compare with :meth:`Pending.dtype_name`."""
    return str(x.dtype).removeprefix("torch.")


def writable(x: Any) -> bool:
    """Whether a live numpy array can be written in place (a view of a read-only buffer cannot)."""
    return bool(x.flags.writeable)


def copy_into(live: Any, saved: Pending) -> None:
    """Copy the saved tensor into the live tensor ``live`` in place, without autograd (a parameter that requires
    grad, or a state dict's tensor sharing its memory), read straight into it where dtype, shape and device allow
    (:meth:`LazyTensor.read_into`); the shapes were checked by the caller. A live numpy array is written with
    ``np.copyto``, cast to its dtype as torch's ``copy_`` casts (the caller warns of a cast); torch is not
    imported for it."""
    if is_ndarray(live):
        sys.modules["numpy"].copyto(live, saved.read(), casting="unsafe")
        return
    import torch

    with torch.no_grad():
        if not LazyTensor(saved).read_into(live):
            live.copy_(saved.read())


class LazyTensor:
    """Stands for one saved tensor in a state dict handed to a module's ``load_state_dict``: shape and dtype are
    known from the header, and the data is read from the verified file only when torch uses it (``param.copy_``),
    into memory that is let go once that call returns. A module's load then holds one tensor of the checkpoint at
    a time, not a second copy of the whole model."""

    __slots__ = ("_pending", "shape", "dtype")

    def __init__(self, pending: Pending):
        import torch

        dtype, shape, _, _ = pending.file.entries[pending.name]
        self._pending = pending
        self.shape = torch.Size(shape)
        self.dtype = getattr(torch, _TORCH_BY_NAME[dtype])

    device = property(lambda self: sys.modules["torch"].device("cpu"))
    is_meta = False

    def read(self) -> Any:
        return self._pending.read()

    def size(self, dim: int | None = None) -> Any:
        return self.shape if dim is None else self.shape[dim]

    def dim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return self.shape.numel()

    def __getitem__(self, index: Any) -> Any:
        return self.read()[index]

    def __getattr__(self, name: str) -> Any:  # anything else a load does with it: the real tensor's
        return getattr(self.read(), name)

    def __repr__(self) -> str:
        return f"LazyTensor({self._pending.name!r}, shape={tuple(self.shape)}, dtype={self.dtype})"

    def read_into(self, out: Any) -> bool:
        """Read the data straight into ``out`` (``param.copy_(self)`` without reading it into memory of its own
        first) when ``out`` is a contiguous CPU tensor of this dtype and shape; False otherwise."""
        if not (out.device.type == "cpu" and out.dtype == self.dtype and out.shape == self.shape
                and out.is_contiguous() and out.layout is sys.modules["torch"].strided):
            return False
        dtype, shape, start, end = self._pending.file.entries[self._pending.name]
        if end > start:
            flat = out.detach().reshape(-1).view(sys.modules["torch"].uint8).numpy()
            self._pending.file._blob.readinto(self._pending.file._base + start, memoryview(flat))
        return True

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        torch = sys.modules["torch"]
        if (func is torch.Tensor.copy_ and len(args) == 2 and not kwargs and isinstance(args[1], LazyTensor)
                and not isinstance(args[0], LazyTensor) and args[1].read_into(args[0])):
            return args[0]

        def real(x: Any) -> Any:
            if isinstance(x, LazyTensor):
                return x.read()
            if isinstance(x, (list, tuple)):
                return type(x)(real(v) for v in x)
            return x

        return func(*real(args), **{k: real(v) for k, v in (kwargs or {}).items()})


def rng_state() -> dict[str, Any]:
    """The process-global generators: python ``random``, and numpy's legacy one and torch's CPU (+ CUDA) ones when
    the script has imported numpy / torch (``sys.modules``). Importing them here loaded torch, seconds and hundreds
    of MiB, into a script that never uses it, at each save."""
    import random

    state: dict[str, Any] = {"python": random.getstate()}
    np = sys.modules.get("numpy")  # a generator the script never imported has nothing to save (nor is imported)
    if np is not None:
        kind, keys, pos, has_gauss, cached = np.random.get_state()
        state["numpy"] = {
            "kind": str(kind), "keys": keys.tolist(), "pos": int(pos),
            "has_gauss": int(has_gauss), "cached_gaussian": float(cached),
        }
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "get_rng_state"):  # (not a torch whose import is under way)
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
    """Set the generators ``state`` holds (:func:`rng_state`). numpy's is set even when the script has not imported
    numpy yet (it is imported here: the run that saved it used numpy, and a script that imports it after the restore
    must draw what it would have drawn); without numpy installed it is skipped, as nothing can draw from it. torch's
    state is a tensor, so torch is loaded already (decoding the checkpoint read it)."""
    import random

    random.setstate(state["python"])
    np = _numpy() if "numpy" in state else None
    if np is not None:
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


def _numpy() -> Any:
    try:
        import numpy
    except ImportError:
        return None
    return numpy


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
