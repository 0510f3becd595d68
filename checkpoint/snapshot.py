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

numpy scalars (``np.float32(1.5)``, ``np.int64(7)``) and ``OrderedDict`` come back as what was saved, as
``torch.save`` gives them back: a scalar is stored as a 0-d array, its name listed under ``scalars`` in
``state.json``, and each ``OrderedDict``'s place in the tree (a path of keys and list indices) under ``ordered``.
An earlier version of this library ignores both lists, and reads a 0-d array of the same dtype and value, and a
``dict`` in the same order — never something else (a tag inside the tree would have come back to it as a dict).
Before, a scalar came back as a Python number (``np.float32(0.1)`` as the float64 ``0.10000000149011612``, and
arithmetic on it in float64 from then on) and an ``OrderedDict`` as a ``dict``.

A module's ``state_dict()`` carries torch's ``_metadata`` (each submodule's ``_version``, by its prefix), which
``load_state_dict`` hands to each module's ``_load_from_state_dict``: a module that changed how it stores its state
(BatchNorm's version 2 added ``num_batches_tracked``; a model of the script's own that migrates older layouts)
converts a checkpoint of an older version by it. It is kept under ``metadata`` in ``state.json`` (the
``OrderedDict``'s place in the tree, and the metadata), and comes back as the restored ``OrderedDict``'s
``_metadata``, so ``load_state_dict`` sees the versions that were saved. Before, it was lost: every module took the
checkpoint for one of no version, and one that migrates by it converted the state it had just saved. An earlier
version of this library ignores the list.

A ``collections.Counter``, and a ``defaultdict`` whose factory is a builtin type (``list``, ``int``, ``dict``,
``set``, ``float``, ``str``), come back as what they were: their places in the tree and what they were are listed
under ``kinds`` (``[path, "Counter"]``, ``[path, "defaultdict", "list"]``), which an earlier version ignores (a
dict). Any other mapping that is not a ``dict`` or an ``OrderedDict`` (a ``defaultdict`` of a lambda, a dict
subclass) is saved as a dict, and is listed in ``Captured.flattened`` for the save to warn about.
"""

from __future__ import annotations

import base64
import json
import pickle
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from checkpoint import layout, serialization
from checkpoint.blobs import MemoryBlob
from checkpoint.errors import UnsafeCheckpointError

_PLAIN = (bool, int, float, str)


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
    scalars: dict[str, set[str]] = field(default_factory=dict)  # file name → names that are numpy scalars
    ordered: list[dict[str, Any]] = field(default_factory=list)  # the nodes of ``tree`` that were OrderedDicts
    # the nodes of ``tree`` whose OrderedDict had torch's ``_metadata`` (a module's state_dict), and it, encoded
    metadata: list[tuple[dict[str, Any], Any]] = field(default_factory=list)
    # the nodes of ``tree`` that were a Counter or a defaultdict of a builtin factory, and how to make them again
    kinds: list[tuple[dict[str, Any], list[str]]] = field(default_factory=list)
    flattened: list[str] = field(default_factory=list)  # mappings that come back as a dict: where, and their type

    @property
    def nbytes(self) -> int:
        return sum(_nbytes(t) for group in self.tensors.values() for t in group.values())

    def files(self) -> dict[str, list[Any]]:
        """Encode to file contents, each a list of buffers (runs on the background thread)."""
        doc: dict[str, Any] = {"format": 1, "tree": self.tree,
                               "arrays": {k: sorted(v) for k, v in self.arrays.items()}}
        if self.scalars:
            doc["scalars"] = {k: sorted(v) for k, v in self.scalars.items()}
        if self.ordered:
            doc["ordered"] = _paths(self.tree, {id(node) for node in self.ordered})
        if self.metadata:
            where = _where(self.tree, {id(node) for node, _ in self.metadata})
            doc["metadata"] = [[where[id(node)], meta] for node, meta in self.metadata if id(node) in where]
        if self.kinds:
            where = _where(self.tree, {id(node) for node, _ in self.kinds})
            doc["kinds"] = [[where[id(node)], *kind] for node, kind in self.kinds if id(node) in where]
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
        if obj is None or type(obj) in _PLAIN:
            return obj
        if serialization.is_numpy_scalar(obj):  # before the check below: np.float64 is a float
            array = serialization.scalar_array(obj)
            if array is None:  # a type safetensors cannot hold (a string, a date): its Python value, as before
                return self.encode(serialization.numpy_scalar_value(obj), where)
            name = self._put(array, where)
            self._captured.arrays.setdefault(self._filename, set()).add(name)
            self._captured.scalars.setdefault(self._filename, set()).add(name)
            return {"__ndarray__": name}
        if isinstance(obj, (bool, int, float, str)):
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
        if isinstance(obj, Mapping):
            if all(isinstance(k, str) and not k.startswith("__") for k in obj):
                node = {k: self.encode(v, f"{where}.{k}") for k, v in obj.items()}
            else:
                node = {"__dict__": [[self.encode(_plain_key(k), where), self.encode(v, f"{where}.{k}")]
                                     for k, v in obj.items()]}
            if isinstance(obj, OrderedDict):
                self._captured.ordered.append(node)
                meta = getattr(obj, "_metadata", None)  # torch's, on a module's state_dict (load_state_dict reads it)
                if isinstance(meta, Mapping):
                    self._captured.metadata.append((node, self._plain(meta, f"{where}._metadata")))
            kind = _kind_of(obj)
            if kind is not None:
                self._captured.kinds.append((node, kind))
            elif type(obj) not in (dict, OrderedDict):  # a dict subclass, a mapping proxy: said at the save
                factory = getattr(obj, "default_factory", None) if isinstance(obj, defaultdict) else None
                why = (f"a defaultdict({getattr(factory, '__qualname__', type(factory).__name__)})"
                       if isinstance(obj, defaultdict) else f"a {type(obj).__name__}")
                self._captured.flattened.append(f"{where} ({why})")
            return node
        if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
            return {"__tuple__": [self.encode(v, f"{where}[{i}]") for i, v in enumerate(obj)]}
        if isinstance(obj, list):
            return [self.encode(v, f"{where}[{i}]") for i, v in enumerate(obj)]
        if isinstance(obj, (bytes, bytearray)):
            return {"__bytes__": base64.b64encode(obj).decode()}
        if isinstance(obj, type) and is_stateful(obj):  # GlobalRNG for GlobalRNG(): "state_dict() missing 'self'"
            raise TypeError(f"{where}: {obj.__qualname__} is a class, not an object of it, and cannot be checkpointed: "
                            f"give an instance of it ({obj.__qualname__}(...), not {obj.__qualname__})")
        if is_stateful(obj):  # a DDP-wrapped model is saved as the model inside: see unwrap_parallel
            return self.encode(serialization.unwrap_parallel(obj).state_dict(), where)
        return self._pickle(obj, where)

    def _plain(self, obj: Any, where: str) -> Any:
        """``obj`` (a state dict's ``_metadata``: prefixes → ``{"version": 2}``) as JSON, copied now; a value JSON
        cannot hold (torch puts none there) is refused as :meth:`encode` refuses what it cannot save."""
        if obj is None or type(obj) in _PLAIN:
            return obj
        if isinstance(obj, Mapping) and all(isinstance(k, str) for k in obj):
            return {k: self._plain(v, f"{where}[{k!r}]") for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [self._plain(v, f"{where}[{i}]") for i, v in enumerate(obj)]
        if serialization.is_numpy_scalar(obj):
            return serialization.numpy_scalar_value(obj)
        if isinstance(obj, (bool, int, float, str)):
            return obj
        raise TypeError(f"{where}: a {type(obj).__name__} in a state dict's _metadata cannot be checkpointed "
                        f"(numbers, strings, lists and dicts of them can)")

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
            raise TypeError(f"{where}: {_a(type(obj).__name__)} cannot be checkpointed (not a tensor, array, "
                            f"plain value or object with state_dict(), and pickle refuses it: {e})") from None
        self._captured.objects.append(data)
        self._captured.pickled.append(f"{where} ({_a(type(obj).__name__)})")
        return {"__pickle__": len(self._captured.objects) - 1}


def _a(name: str) -> str:
    """``name`` with its article: "a Cfg", "an object" (was "a object")."""
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


#: defaultdict factories kept by name (any other factory, a lambda above all, may not even pickle)
_FACTORIES = {"list": list, "int": int, "dict": dict, "set": set, "float": float, "str": str}


def _kind_of(obj: Any) -> list[str] | None:
    """How ``state.json``'s ``kinds`` says what a mapping was, when it is not a plain dict but can be made again:
    ``["Counter"]``, ``["defaultdict", "list"]`` (a builtin factory); None otherwise."""
    if type(obj) is Counter:
        return ["Counter"]
    if type(obj) is defaultdict:
        factory = obj.default_factory
        name = getattr(factory, "__name__", None)
        if factory is None or _FACTORIES.get(name) is factory:
            return ["defaultdict", "None" if factory is None else name]
    return None


def _make_kind(kind: Any) -> Any:
    """The constructor ``kinds`` names (:func:`_kind_of`) — dict items in, the mapping out — or None."""
    if kind == ["Counter"]:
        return lambda items: Counter(dict(items))
    if isinstance(kind, list) and len(kind) == 2 and kind[0] == "defaultdict":
        factory = None if kind[1] == "None" else _FACTORIES.get(kind[1])
        if factory is not None or kind[1] == "None":
            return lambda items: defaultdict(factory, items)
    return None


def _kinds(tree: Any, entries: Any) -> dict[int, Any]:
    """The constructors ``state.json``'s ``kinds`` names, by the id of the node each is for. An entry that leads
    nowhere or names no kind known here is passed over: the node comes back as a dict."""
    found = {}
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, list) and len(entry) >= 2:
            node, make = _node(tree, entry[0]), _make_kind(entry[1:])
            if node is not None and make is not None:
                found[id(node)] = make
    return found


def _plain_key(key: Any) -> Any:
    """A dict key with its numpy scalars as Python values, as before they were kept (a key is looked up by value:
    ``np.int64(3)`` and ``3`` find the same entry), and stored in ``state.json`` rather than as an array."""
    if serialization.is_numpy_scalar(key):
        return serialization.numpy_scalar_value(key)
    if isinstance(key, tuple) and not hasattr(key, "_fields"):
        return tuple(_plain_key(k) for k in key)
    return key


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
    scalars = {k: set(v) for k, v in doc.get("scalars", {}).items()}
    ordered = _nodes(doc["tree"], doc.get("ordered", []))
    metadata = _metadata(doc["tree"], doc.get("metadata", []))
    kinds = _kinds(doc["tree"], doc.get("kinds", []))
    out = {}
    for index, (key, value) in enumerate(doc["tree"].items()):
        filename = layout.tensor_file(index, key)
        blob = blobs.get(filename)
        file = (serialization.TensorFile(blob, arrays.get(filename, set()), scalars.get(filename, set()))
                if blob is not None and blob.size else None)
        out[key] = _decode(value, file, objects, ordered, metadata, kinds)
    return out


def _paths(tree: Any, wanted: set[int]) -> list[list[Any]]:
    """Where in ``tree`` (the encoded structure) the nodes whose ids are ``wanted`` are: each a list of dict keys
    and list indices from the top."""
    return list(_where(tree, wanted).values())


def _where(tree: Any, wanted: set[int]) -> dict[int, list[Any]]:
    """:func:`_paths`, by the id of the node each leads to."""
    found: dict[int, list[Any]] = {}

    def walk(node: Any, path: list[Any]) -> None:
        if id(node) in wanted:
            found[id(node)] = path
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, [*path, k])
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, [*path, i])

    walk(tree, [])
    return found


def _nodes(tree: Any, paths: Any) -> set[int]:
    """The ids of the nodes of ``tree`` (as read from ``state.json``) that ``paths`` (:func:`_paths`) lead to. A
    path that leads nowhere is passed over: the worst it costs is a ``dict`` where an ``OrderedDict`` was saved."""
    return {id(node) for node in (_node(tree, path) for path in (paths if isinstance(paths, list) else []))
            if node is not None}


def _node(tree: Any, path: Any) -> dict[str, Any] | None:
    """The dict node of ``tree`` that ``path`` leads to, or None."""
    node = tree
    try:
        for step in path:
            node = node[step]
    except (KeyError, IndexError, TypeError):
        return None
    return node if isinstance(node, dict) else None


def _metadata(tree: Any, entries: Any) -> dict[int, Any]:
    """The ``_metadata`` saved for nodes of ``tree`` (``state.json``'s ``metadata``: [path, metadata] pairs), by the
    id of the node. An entry that leads nowhere, or is not a dict, is passed over: the module then loads as one of
    no version, as before it was kept."""
    found = {}
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], dict):
            node = _node(tree, entry[0])
            if node is not None:
                found[id(node)] = entry[1]
    return found


def _with_metadata(node: Any, meta: Any) -> Any:
    """``node`` (an ``OrderedDict``) with ``_metadata`` as torch sets it on a state dict (an ``OrderedDict`` of
    prefix → dict), a copy of ``meta``; other nodes as they are."""
    if meta is not None and isinstance(node, OrderedDict):
        node._metadata = OrderedDict((k, dict(v) if isinstance(v, dict) else v) for k, v in meta.items())
    return node


def materialize(tree: Any, loaded: Mapping[int, Any] | None = None) -> Any:
    """``tree`` with every :class:`~checkpoint.serialization.Pending` read (a tensor or array in memory of its own).
    ``loaded``: pendings already copied into a live tensor (by ``id``), which stands for them (read no second time).
    A ``Counter`` and a ``defaultdict`` stay what they are, as an ``OrderedDict`` does."""
    loaded = loaded or {}
    if isinstance(tree, serialization.Pending):
        return loaded[id(tree)] if id(tree) in loaded else tree.read()
    if isinstance(tree, OrderedDict):
        return _with_metadata(OrderedDict((k, materialize(v, loaded)) for k, v in tree.items()),
                              getattr(tree, "_metadata", None))
    if isinstance(tree, defaultdict):
        return defaultdict(tree.default_factory, ((k, materialize(v, loaded)) for k, v in tree.items()))
    if isinstance(tree, Counter):
        return Counter({k: materialize(v, loaded) for k, v in tree.items()})
    if isinstance(tree, dict):
        return {k: materialize(v, loaded) for k, v in tree.items()}
    if isinstance(tree, list):
        return [materialize(v, loaded) for v in tree]
    if isinstance(tree, tuple):
        return tuple(materialize(v, loaded) for v in tree)
    return tree


def _decode(obj: Any, file: Any, objects: list[Any] | None, ordered: set[int] = frozenset(),
            metadata: dict[int, Any] | None = None, kinds: dict[int, Any] | None = None) -> Any:
    metadata = metadata or {}
    kinds = kinds or {}
    if isinstance(obj, list):
        return [_decode(v, file, objects, ordered, metadata, kinds) for v in obj]
    if not isinstance(obj, dict):
        return obj
    kind = kinds.get(id(obj)) or (OrderedDict if id(obj) in ordered else dict)
    if len(obj) == 1:
        (tag, value), = obj.items()
        if tag in ("__tensor__", "__ndarray__"):
            if file is None:
                raise KeyError(f"tensor {value!r} is not in the file")
            return file.pending(value)
        if tag == "__tuple__":
            return tuple(_decode(v, file, objects, ordered, metadata, kinds) for v in value)
        if tag == "__dict__":
            return _with_metadata(kind((_decode(k, file, objects, ordered, metadata, kinds),
                                        _decode(v, file, objects, ordered, metadata, kinds)) for k, v in value),
                                  metadata.get(id(obj)))
        if tag == "__bytes__":
            return base64.b64decode(value)
        if tag == "__pickle__":
            assert objects is not None
            return objects[value]
    return _with_metadata(kind((k, _decode(v, file, objects, ordered, metadata, kinds)) for k, v in obj.items()),
                          metadata.get(id(obj)))


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

