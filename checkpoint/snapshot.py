"""Turning a training state into checkpoint files, and back.

``capture`` is the only part of a save the training loop waits for: it calls
``state_dict()`` on stateful objects (model, optimizer, scheduler, GradScaler, …), copies
every tensor to private host memory and freezes the rest of the structure. ``Captured.files``
then does the slow part — safetensors encoding — on the background thread.

Files produced (see :mod:`checkpoint.layout`):

* ``state.json`` — the structure, with tensors referenced by name. JSON cannot say "tuple",
  "int dict key" or "bytes", so those are tagged (``{"__tuple__": [...]}`` etc.); floats
  round-trip exactly.
* one safetensors file per top-level key holding its tensors and numpy arrays.
* ``objects.pkl`` — only for leaves nothing else can represent. Restore refuses to unpickle
  it unless ``allow_pickle=True``.
"""

from __future__ import annotations

import base64
import json
import pickle
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from checkpoint import layout, serialization
from checkpoint.blobs import MemoryBlob
from checkpoint.errors import UnsafeCheckpointError

def is_stateful(x: Any) -> bool:
    """Has ``state_dict()`` and ``load_state_dict()`` (torch modules, optimizers, …)."""
    return callable(getattr(x, "state_dict", None)) and callable(getattr(x, "load_state_dict", None))


@dataclass
class Captured:
    """A frozen copy of the state, cheap to take; encoded to bytes later."""

    tree: dict[str, Any]
    tensors: dict[str, dict[str, Any]]  # file name → {tensor name → host copy}
    arrays: dict[str, set[str]]  # file name → names that are numpy arrays
    objects: list[bytes] = field(default_factory=list)
    pickled: list[str] = field(default_factory=list)  # where each object is, and its type, for messages

    @property
    def nbytes(self) -> int:
        return sum(_nbytes(t) for group in self.tensors.values() for t in group.values())

    def files(self) -> dict[str, list[Any]]:
        """Encode to file contents, each a list of buffers (runs on the background thread)."""
        doc = {"format": 1, "tree": self.tree, "arrays": {k: sorted(v) for k, v in self.arrays.items()}}
        out: dict[str, list[Any]] = {layout.STATE: [json.dumps(doc, allow_nan=True).encode()]}
        for filename, group in self.tensors.items():
            out[filename] = serialization.encode_tensors(group)
        if self.objects:
            out[layout.OBJECTS] = [pickle.dumps(self.objects, protocol=pickle.HIGHEST_PROTOCOL)]
        return out


def capture(state: Mapping[str, Any]) -> Captured:
    """Freeze ``state`` (a dict of top-level names → objects) into a :class:`Captured`."""
    if not isinstance(state, Mapping):
        raise TypeError(f"save() takes a dict of name → object, got {type(state).__name__}")
    captured = Captured(tree={}, tensors={}, arrays={})
    for index, (key, value) in enumerate(state.items()):
        if not isinstance(key, str):
            raise TypeError(f"top-level keys must be strings, got {key!r}")
        filename = layout.tensor_file(index, key)
        encoder = _Encoder(captured, filename)
        captured.tree[key] = encoder.encode(value, key)
        if filename in captured.tensors and not captured.tensors[filename]:
            del captured.tensors[filename]
    return captured


class _Encoder:
    def __init__(self, captured: Captured, filename: str):
        self._captured = captured
        self._filename = filename
        # id(tensor) → (name, tensor): one object reachable twice is stored once. The tensor
        # is held so its id cannot be reused by a later temporary during this capture.
        self._seen: dict[int, tuple[str, Any]] = {}
        self._group = captured.tensors.setdefault(filename, {})

    def encode(self, obj: Any, where: str) -> Any:
        if obj is None or isinstance(obj, (bool, int, float, str)):
            return obj
        if serialization.is_tensor(obj):
            why = serialization.unsupported(obj)
            if why is not None:
                raise TypeError(f"{where}: tensors of {why} cannot be checkpointed")
            if obj.device.type == "meta":
                raise TypeError(f"{where}: a tensor on the meta device has no data to checkpoint")
            return {"__tensor__": self._put(obj, where)}
        if serialization.is_ndarray(obj):
            if serialization.supported(obj):
                name = self._put(obj, where)
                self._captured.arrays.setdefault(self._filename, set()).add(name)
                return {"__ndarray__": name}
            return self._pickle(obj, where)
        if serialization.is_numpy_scalar(obj):
            return self.encode(serialization.numpy_scalar_value(obj), where)
        if isinstance(obj, Mapping):
            if all(isinstance(k, str) and not k.startswith("__") for k in obj):
                return {k: self.encode(v, f"{where}.{k}") for k, v in obj.items()}
            return {"__dict__": [[self.encode(k, where), self.encode(v, f"{where}.{k}")] for k, v in obj.items()]}
        if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
            return {"__tuple__": [self.encode(v, f"{where}[{i}]") for i, v in enumerate(obj)]}
        if isinstance(obj, list):
            return [self.encode(v, f"{where}[{i}]") for i, v in enumerate(obj)]
        if isinstance(obj, (bytes, bytearray)):
            return {"__bytes__": base64.b64encode(obj).decode()}
        if is_stateful(obj):  # a DDP-wrapped model is saved as the model inside: see unwrap_parallel
            return self.encode(serialization.unwrap_parallel(obj).state_dict(), where)
        return self._pickle(obj, where)

    def _put(self, obj: Any, where: str) -> str:
        seen = self._seen.get(id(obj))
        if seen is not None:
            return seen[0]
        name, n = where, len(self._group)
        while name in self._group:  # dotted keys can meet ("a.b" and "a": {"b"}); a key may itself read "a.b#2"
            name, n = f"{where}#{n}", n + 1
        self._group[name] = serialization.host_copy(obj)
        self._seen[id(obj)] = (name, obj)
        return name

    def _pickle(self, obj: Any, where: str) -> dict[str, int]:
        # Pickled now, while the training loop waits, so later mutation cannot leak in.
        try:
            data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:  # noqa: BLE001 - pickle raises many kinds; each is "cannot be saved"
            raise TypeError(f"{where}: a {type(obj).__name__} cannot be checkpointed (not a tensor, array, "
                            f"plain value or object with state_dict(), and pickle refuses it: {e})") from None
        self._captured.objects.append(data)
        self._captured.pickled.append(f"{where} (a {type(obj).__name__})")
        return {"__pickle__": len(self._captured.objects) - 1}


def decode(files: Mapping[str, Any], allow_pickle: bool = False) -> dict[str, Any]:
    """Files of one checkpoint (bytes, or lists of buffers) → the saved dict (stateful objects come back as state
    dicts), every tensor read. See :func:`decode_pending`."""
    return materialize(decode_pending({n: MemoryBlob(_joined(d)) for n, d in files.items()}, allow_pickle))


def decode_pending(blobs: Mapping[str, Any], allow_pickle: bool = False) -> dict[str, Any]:
    """Verified files of one checkpoint (:mod:`checkpoint.blobs`) → the saved dict, each tensor and array a
    :class:`~checkpoint.serialization.Pending` not read yet (:func:`materialize` reads them). Everything but the
    tensor data is read and checked here, so a checkpoint that does not decode is known before any is loaded.

    Raises:
        UnsafeCheckpointError: the checkpoint holds pickled objects and ``allow_pickle`` is False.
        ValueError: the files do not decode (should not happen once verified).
    """
    try:
        doc = json.loads(_whole(blobs[layout.STATE]))
    except (KeyError, ValueError) as e:
        raise ValueError(f"{layout.STATE} unreadable: {e}") from e
    objects: list[Any] | None = None
    if layout.OBJECTS in blobs:
        if not allow_pickle:
            where = ", ".join(_pickled_paths(doc.get("tree", {})))
            raise UnsafeCheckpointError(
                f"checkpoint holds pickled Python objects (at {where or 'unknown places'}); pass "
                "allow_pickle=True only if you trust whoever wrote it"
            )
        objects = [pickle.loads(b) for b in pickle.loads(_whole(blobs[layout.OBJECTS]))]
    arrays = {k: set(v) for k, v in doc.get("arrays", {}).items()}
    out = {}
    for index, (key, value) in enumerate(doc["tree"].items()):
        filename = layout.tensor_file(index, key)
        blob = blobs.get(filename)
        file = serialization.TensorFile(blob, arrays.get(filename, set())) if blob is not None and blob.size else None
        out[key] = _decode(value, file, objects)
    return out


def materialize(tree: Any) -> Any:
    """``tree`` with every :class:`~checkpoint.serialization.Pending` read (a tensor or array in memory of its own)."""
    if isinstance(tree, serialization.Pending):
        return tree.read()
    if isinstance(tree, dict):
        return {k: materialize(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [materialize(v) for v in tree]
    if isinstance(tree, tuple):
        return tuple(materialize(v) for v in tree)
    return tree


def _decode(obj: Any, file: Any, objects: list[Any] | None) -> Any:
    if isinstance(obj, list):
        return [_decode(v, file, objects) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if len(obj) == 1:
        (tag, value), = obj.items()
        if tag in ("__tensor__", "__ndarray__"):
            if file is None:
                raise KeyError(f"tensor {value!r} is not in the file")
            return file.pending(value)
        if tag == "__tuple__":
            return tuple(_decode(v, file, objects) for v in value)
        if tag == "__dict__":
            return {_decode(k, file, objects): _decode(v, file, objects) for k, v in value}
        if tag == "__bytes__":
            return base64.b64decode(value)
        if tag == "__pickle__":
            assert objects is not None
            return objects[value]
    return {k: _decode(v, file, objects) for k, v in obj.items()}


def _whole(blob: Any) -> bytes:
    return blob.read(0, blob.size)


def _pickled_paths(tree: Any, where: str = "") -> list[str]:
    """Where in a saved tree its pickled objects are (``extra.args``, ``history[2]``), as ``save`` names them."""
    if isinstance(tree, list):
        return [p for i, v in enumerate(tree) for p in _pickled_paths(v, f"{where}[{i}]")]
    if not isinstance(tree, dict):
        return []
    if len(tree) == 1:
        (tag, value), = tree.items()
        if tag == "__pickle__":
            return [where]
        if tag == "__tuple__":
            return _pickled_paths(value, where)
        if tag == "__dict__":
            return [p for k, v in value for p in _pickled_paths(v, f"{where}.{k}")]
        if tag in ("__tensor__", "__ndarray__", "__bytes__"):
            return []
    return [p for k, v in tree.items() for p in _pickled_paths(v, f"{where}.{k}" if where else k)]


def _joined(data: Any) -> bytes:
    return data if isinstance(data, (bytes, bytearray)) else b"".join(data)


def _nbytes(t: Any) -> int:
    if serialization.is_tensor(t):
        return t.numel() * t.element_size()
    return int(t.nbytes)

