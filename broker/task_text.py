"""A task's text (YAML or JSON) read into plain data the broker can store as JSON, or refused naming where.

A body within ``max_body_bytes`` could still take the broker down once read, so each is refused here with
the field and the reason (:class:`broker.spec.SpecError`), before any of it is parsed as a task:

- **aliases that multiply** (``&a [...]`` used nine times in each of ten levels: a "billion laughs" of a
  few hundred bytes), which PyYAML shares but storing the job as JSON writes out in full — one submit held
  the whole broker, its health check too, while its memory grew; and an alias inside itself (a loop);
- **nesting deeper than** :data:`MAX_DEPTH` (the parsers recurse, as does the store's JSON);
- **more nodes than** :data:`MAX_NODES` (each costs CPU to build, whatever its bytes);
- **values JSON cannot hold**: YAML's ``!!binary``, ``!!set`` and unquoted dates and times (only
  ``broker.deadline`` may be a time, :func:`broker.spec.parse_deadline` reads it), a number that is
  not finite (``.nan``, ``.inf``, ``1e999``, JSON's ``NaN``: stored, it made SQLite's JSON unreadable
  and the team's cost report failed), and a whole number longer than Python reads (4,300 digits);
- **a lone surrogate** (``"\\ud800"`` in JSON) in any string or key: stored, every answer holding it (the
  job list of its team, for one) failed to encode;
- **a key given twice** in one mapping: YAML (1.2) forbids it and PyYAML kept the last, so
  ``budget_usd: 1`` then ``budget_usd: 1000`` silently set the larger cap;
- **a number YAML 1.1 reads as another**: ``010`` is octal (8); quoted, it is the text as written. A base-60
  ``1:30`` (90 to YAML 1.1: ``expected_hours: 1:30`` planned 90 hours) is not refused but read as the text, as YAML
  1.2 reads it (:class:`_Loader`), and each field says what it takes of it;
- **an amount of money with an exponent** (``budget_usd: 1.0e+3``): YAML reads it as the float 1000.0, so it was
  a $1,000 budget, where ``budget_usd: 1e3`` (text to YAML 1.1) and ``--budget 1e3`` are refused as amounts written
  with an exponent (:mod:`pricing.money`); refused the same way, with its line.
"""

from __future__ import annotations

import json
import math
import re
from datetime import date
from typing import Any

import yaml

from broker.spec import SpecError

MAX_DEPTH = 100
"""Levels of mappings and lists a task may nest (SkyPilot's own tasks use a handful)."""
MAX_INT_DIGITS = 4000
"""Digits of a whole number (Python refuses to read one of more than 4,300 as text)."""
_INT_LIMIT = 10**MAX_INT_DIGITS
MAX_NODES = 50_000
"""Keys, values and items a task may hold (SkyPilot's own tasks hold tens to hundreds): for YAML counted on libyaml's
event stream, a fifth of what building the node graph costs, before that graph is built; for JSON, as
:func:`check_plain` walks what ``json.loads`` made, each mapping and list counted before what is in it is walked."""
DEFAULT_MAX_BYTES = 1_000_000  # the broker's max_body_bytes unless its config says otherwise
DEADLINE = ("broker", "deadline")  # the one place a YAML time is a value the broker reads

_YAML_1_1 = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: a megabyte in 0.2 s, not 1.6 s
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_BASE_60 = re.compile(r"^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$")  # PyYAML's (YAML 1.1) int and float


class _Loader(_YAML_1_1):
    """PyYAML's safe loader, but an unquoted base-60 number (``1:30``, ``9:00``, ``1:30:00``) is the text as written,
    as YAML 1.2 reads it. YAML 1.1 reads ``expected_hours: 1:30`` as 90 hours and ``deadline: 9:00`` as 540: refused
    as such, the deadline was not said to be a time alone, and an environment value ``1:30`` had to be quoted. As
    text, each field says what it takes of it (:func:`broker.spec.parse`), and an environment value is what was
    typed. The API's YAML body, ``broker submit``'s task file, Slack's submit and the broker's config file are all
    read here. Only the int and float resolvers change (the base-60 form taken out of PyYAML's own patterns): every
    other number, ``!!timestamp`` and an explicit ``!!int 1:30`` read as before."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, re.compile(f"(?!{_BASE_60.pattern})" + regexp.pattern, regexp.flags) if tag in (_INT, _FLOAT)
             else regexp) for tag, regexp in resolvers]
    for first, resolvers in _YAML_1_1.yaml_implicit_resolvers.items()}

_OCTAL = re.compile(r"^[-+]?0[0-7_]+$")
_MERGE = "tag:yaml.org,2002:merge"
MONEY = frozenset({("broker", "budget_usd"), ("broker", "max_price_per_hour")})
"""Where a task gives an amount of dollars (:func:`broker.spec.parse`)."""


def load_text(text: str, *, max_bytes: int = DEFAULT_MAX_BYTES) -> dict[str, Any]:
    """A task's YAML (or JSON, which is YAML) to a mapping."""
    try:
        data = load_yaml(text, max_bytes=max_bytes)
    except yaml.YAMLError as exc:
        if "maximum nesting depth" in str(exc):  # libyaml's own limit, 1000 levels
            raise SpecError("body", f"nests more than {MAX_DEPTH} levels deep") from None
        raise SpecError("body", yaml_error(exc)) from None
    if not isinstance(data, dict):
        raise SpecError("body", "must be a mapping (a SkyPilot task), not " + type(data).__name__)
    return data


def yaml_error(exc: yaml.YAMLError, *, task: bool = True) -> str:
    """Where a task's YAML is broken and what broke it, for the CLI and the API alike; for the mistake of a
    first task — a `run: echo "loss: 0.1"` whose ': ' YAML reads as a key — how to write it. A text of several
    documents (:func:`_name_documents`) is said to be a SkyPilot task chain, which the broker does not run (``task``;
    else, a file such as the broker's config, that it holds one document too many)."""
    documents = getattr(exc, "documents", None)
    if documents is not None:
        count, second, filled = documents
        if filled <= 1:
            return (f"holds {count} YAML documents, separated by --- (the second starts at line {second}), but only one "
                    "with anything in it: remove the --- that starts an empty one (a file of several tasks is a "
                    "SkyPilot task chain, which the broker does not run)" if task else
                    f"holds {count} YAML documents (a --- at line {second} starts the second), only one with anything "
                    "in it: remove the --- that starts an empty one")
        if not task:
            return (f"holds {count} YAML documents (a --- at line {second} starts the second), where one is read: "
                    "keep one")
        return (f"holds {count} YAML documents, separated by --- (the second starts at line {second}): that is a "
                "SkyPilot task chain (a pipeline, run by `sky jobs launch` one task after another), which the broker "
                "does not run: submit each task on its own, as its own job (a first document of only `name:` is the "
                "chain's name, not a task: with one task after it, the file is read as that task)")
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    problem = getattr(exc, "problem", None)
    said = f"is not valid YAML{where}" + (f": {problem}" if problem else "")
    if (problem or "").startswith("mapping values are not allowed"):  # "here" (PyYAML), "in this context" (libyaml)
        said += " (a value holding ': ' is quoted whole, or written as a block: `run: |` and the command below it)"
    elif "tab character" in (problem or ""):  # a file from an editor that indents with tabs
        said += " (YAML indents with spaces, never tabs: replace the tab with spaces)"
    return said


_TAB_PROBLEM = "found a tab character that cannot start any token"


def _name_tab(exc: yaml.YAMLError, text: str) -> None:
    """A tab where YAML reads a token is said to be a tab: libyaml said "found character that cannot start any token"
    of the tab indenting a line (``resources:`` then ``<TAB>cpus: 1``), naming no character, so that :func:`yaml_error`
    says YAML indents with spaces."""
    mark = getattr(exc, "problem_mark", None)
    if mark is None or getattr(exc, "problem", None) != "found character that cannot start any token":
        return
    lines = re.split(r"\r\n|\r|\n", text)
    line = lines[mark.line] if 0 <= mark.line < len(lines) else ""
    if 0 <= mark.column < len(line) and line[mark.column] == "\t":
        exc.problem = _TAB_PROBLEM


def _name_documents(exc: yaml.YAMLError, text: str) -> None:
    """A text of several YAML documents (``---`` between them: a SkyPilot task chain) is said to be one, with how many
    (``exc.documents``: the count and the line the second starts on, for :func:`yaml_error`): it was "not valid YAML
    at line 2, column 1: but found another document", as if the YAML were broken. Counted on the event stream (the
    nodes were counted on it before: :func:`_count_nodes`), up to a syntax error in a later document if there is one."""
    if getattr(exc, "problem", None) != "but found another document":
        return
    count, second, empty, starting = 0, None, 0, False
    loader = _Loader(text)
    try:
        while loader.check_event():
            event = loader.get_event()
            if starting and isinstance(event, yaml.ScalarEvent) and event.value == "" and not event.style:
                empty += 1  # a document of nothing: a --- with nothing after it
            starting = isinstance(event, yaml.DocumentStartEvent)
            if starting:
                count += 1
                if count == 2:
                    second = event.start_mark.line + 1
    except yaml.YAMLError:
        pass
    finally:
        loader.dispose()
    if count > 1 and second is not None:
        exc.documents = (count, second, count - empty)


def load_yaml(text: str, *, max_bytes: int, task: bool = True) -> Any:
    """YAML (or JSON, which is YAML) to plain data; what aliases expand to is held to ``max_bytes``. With ``task``
    (a task's text, not the broker's config file), a SkyPilot chain of one task — a first document of only ``name:``,
    then the task (:func:`_one_task_chain`) — is read as that task, as ``sky launch`` reads it."""
    _count_nodes(text)
    loader = _Loader(text)
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:
            raise SpecError("body", f"nests more than {MAX_DEPTH} levels deep") from None
        except yaml.YAMLError as exc:
            _name_tab(exc, text)
            _name_documents(exc, text)
            if task and getattr(exc, "documents", (0, 0, 0))[::2] == (2, 2):
                found = _one_task_chain(text, max_bytes)
                if found is not None:
                    return found[0]
            raise
        if node is None:
            return None
        data = _built(loader, node, max_bytes)
    finally:
        loader.dispose()
    check_plain(data)
    return data


def _built(loader: yaml.BaseLoader, node: yaml.Node, max_bytes: int) -> Any:
    """One document's node, checked (:class:`_Nodes`) and built into data."""
    _Nodes(max_bytes).check(node)
    try:
        return loader.construct_document(node)
    except (ValueError, KeyError, AttributeError, TypeError, OverflowError):
        # a scalar its tag's constructor cannot read: `!!timestamp 2020-13-45` (ValueError), `!!bool yes-ish`
        # (KeyError) and `!!timestamp soon` (AttributeError) were "cannot be read as a number" naming the body,
        # or a 500; found again here, named with its field and line
        raise _unreadable(node) from None


def _one_task_chain(text: str, max_bytes: int) -> tuple[Any] | None:
    """A text of two documents, the first of only ``name:`` (``name: pipeline``, ``---``, then a task), as SkyPilot
    reads it (``sky.utils.dag_utils.load_chain_dag_from_yaml``): a chain of one task, the first document its name.
    The task, in a 1-tuple: its own ``name``, else the header's; None for any other two documents (a chain of two
    tasks, which :func:`yaml_error` refuses). Each document is checked as a lone one is (:func:`_built`,
    :func:`check_plain`)."""
    loader = _Loader(text)
    try:
        # (check_node first: it reads past the stream's start)
        header = loader.get_node() if loader.check_node() else None
        node = loader.get_node() if loader.check_node() else None
        if not (isinstance(header, yaml.MappingNode) and len(header.value) == 1
                and isinstance(header.value[0][0], yaml.ScalarNode) and header.value[0][0].value == "name"):
            return None
        name = _built(loader, header, max_bytes)
        task = _built(loader, node, max_bytes)
    finally:
        loader.dispose()
    check_plain(name)
    check_plain(task)
    if isinstance(task, dict) and "name" not in task and name.get("name") is not None:
        task = {"name": name["name"], **task}
    return (task,)


def _count_nodes(text: str) -> None:
    """Refuse a text of more than :data:`MAX_NODES` nodes before its graph is built: a megabyte of ``1,1,1,…``
    is 450,000 of them, and building them, checking them and then the data took 4–5 s of the broker's CPU for each
    such body any team could send. Broken YAML is left to the composer, which says where."""
    loader = _Loader(text)
    try:
        count = 0
        while loader.check_event():
            event = loader.get_event()
            if isinstance(event, (yaml.ScalarEvent, yaml.AliasEvent, yaml.CollectionStartEvent)):
                count += 1
                if count > MAX_NODES:
                    raise _too_many(f" (line {event.start_mark.line + 1})")
    except yaml.YAMLError:
        return
    finally:
        loader.dispose()


def load_json(text: str | bytes, *, finite: bool = True) -> Any:
    """JSON to plain data, refused as :func:`load_yaml` refuses (a ``json.JSONDecodeError`` passes through).
    ``finite=False`` lets ``NaN`` and ``Infinity`` through, for a caller that decides what they mean."""
    try:
        data = json.loads(text, parse_int=_json_int, parse_float=_json_float, object_pairs_hook=_json_object)
    except RecursionError:
        raise SpecError("body", f"nests more than {MAX_DEPTH} levels deep") from None
    check_plain(data, finite=finite, most=MAX_NODES)
    return data


def _too_many(where: str) -> SpecError:
    return SpecError("body", f"holds more than {MAX_NODES:,} keys, values and items{where}: a task holds tens to "
                             "hundreds; put bulk data in a file the job reads (file_mounts, workdir)")


def check_plain(data: Any, path: tuple = (), *, finite: bool = True, most: int | None = None) -> None:
    """Refuse what JSON cannot store (or stores as something else), naming its field; with ``most``, a body of more
    keys, values and items than that. JSON is held to :data:`MAX_NODES` here, as YAML is on its event stream: a
    megabyte of ``[1,1,1,…]`` parses in a tenth of a second, and walking its 450,000 values here took 0.7 s of the
    broker's CPU before the 422 on its first unknown key, for each such body any team could send."""
    stack = [(data, path)]
    count = 1
    while stack:
        value, where = stack.pop()
        if isinstance(value, (dict, list)):  # counted before they are stacked: a mapping's keys are nodes, as in YAML
            count += len(value) * (2 if isinstance(value, dict) else 1)
            if most is not None and count > most:
                raise _too_many("")
        if len(where) > MAX_DEPTH:
            raise SpecError(_field(where[:1]), f"nests more than {MAX_DEPTH} levels deep")
        if isinstance(value, _Duplicated):
            raise SpecError(_field((*where, value.key)), "is given twice in the same mapping: give it once")
        if isinstance(value, _LongNumber):
            raise SpecError(_field(where), f"is a number of {len(value.text.lstrip('-'))} digits, more than "
                                           f"{MAX_INT_DIGITS}")
        if isinstance(value, str) and not _utf8(value):
            raise SpecError(_field(where), _SURROGATE)
        if isinstance(value, dict):
            for key in value:
                if isinstance(key, str) and not _utf8(key):
                    raise SpecError(_field((*where, key)), _SURROGATE)
            stack.extend((v, (*where, k)) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, (*where, i)) for i, v in enumerate(value))
        elif isinstance(value, int) and not isinstance(value, bool) and abs(value) >= _INT_LIMIT:
            # YAML's hex (0x...) and binary (0b...) are read whatever their length, and then cannot be written out
            raise SpecError(_field(where), f"is a number of more than {MAX_INT_DIGITS} digits")
        elif isinstance(value, float) and finite and not math.isfinite(value):
            # a number typed too large (JSON's 1e400) reads as inf: "is inf" named a value nobody typed
            typed = getattr(value, "typed", None)
            raise SpecError(_field(where), _too_large(typed, where) if typed else f"is {value}, not a finite number")
        elif isinstance(value, date) and where != DEADLINE:  # datetime is a date too
            raise SpecError(_field(where), f"is a date or time ({value.isoformat()}), which YAML reads from an "
                                           f"unquoted one: quote it to give the text")
        elif value is not None and not isinstance(value, (str, int, float, bool, date)):
            kind = {bytes: "binary data (!!binary)", set: "a set (!!set)"}.get(type(value), f"a {type(value).__name__}")
            raise SpecError(_field(where), f"is {kind}, which a task cannot hold: give a string, number, list or "
                                           "mapping")


def _too_large(typed: str, where: tuple, line: str = "") -> str:
    """Why a number typed too large for a float (``1e400``, 400 digits before a point) is refused: named as typed
    (``line``: where YAML has one), where Python read it as ``inf``; an amount of dollars says how much it may be."""
    shown = typed if len(typed) <= 40 else f"{typed[:20]}... ({len(typed)} characters)"
    if where and where[-1] in ("budget_usd", "max_price_per_hour"):
        from pricing.money import MAX_DOLLARS
        return f"is {shown}{line}, too large: give at most ${MAX_DOLLARS:,}"
    return f"is {shown}{line}, too large to be a number (it reads as infinity)"


def _field(path: tuple) -> str:
    """``("resources", "any_of", 0, "cpus")`` → ``resources.any_of[0].cpus``, as :class:`SpecError` names fields (a
    lone surrogate in a key written as ``\\ud800``: the answer naming it must itself be UTF-8)."""
    out = ""
    for part in path:
        text = str(part).encode("utf-8", "backslashreplace").decode("utf-8")
        out += f"[{text}]" if isinstance(part, int) and not isinstance(part, bool) else f"{'.' if out else ''}{text}"
    return out or "body"


_SURROGATE = ("holds a lone surrogate (such as \\ud800 in JSON), which is not a Unicode character and cannot be "
              "written as UTF-8")


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class _Nodes:
    """One walk of the YAML node graph, before anything is built from it: each node is sized once (an alias
    is the node it names, so its size is counted again where it is used, without being walked again)."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.sizes: dict[int, int] = {}
        self.aliased = False

    def check(self, root: yaml.Node) -> None:
        size = self._size(root, (), set())
        if self.aliased and size > self.max_bytes:
            raise SpecError("body", f"expands through its aliases (*name) to more than {self.max_bytes} bytes, this "
                                    f"broker's max_body_bytes: write the repeated parts out, or repeat less")

    def _size(self, node: yaml.Node, path: tuple, open_: set[int]) -> int:
        if path in MONEY and isinstance(node, yaml.ScalarNode) and node.tag == _FLOAT:  # an alias too: before the cache
            _plain_amount(node, path)
        key = (id(node), path[:1] == ("config",))  # an anchor under config, used outside it, is checked there too
        if key in self.sizes:
            self.aliased = True
            return self.sizes[key]
        if id(node) in open_:
            raise SpecError(_field(path), "is an alias (*name) of a mapping or list it is inside of: a loop")
        if len(path) > MAX_DEPTH:
            raise SpecError(_field(path[:1]), f"nests more than {MAX_DEPTH} levels deep")
        if isinstance(node, yaml.ScalarNode):
            if node.tag == _INT and sum(c.isdigit() for c in node.value) > MAX_INT_DIGITS:
                raise SpecError(_field(path), f"is a number of more than {MAX_INT_DIGITS} digits")
            if node.tag in (_INT, _FLOAT):
                _not_misread(node.value, path, octal=path[:1] != ("config",))
            if node.tag == _FLOAT and _overflows(node.value):  # `1.0e+400` was "is inf, not a finite number"
                raise SpecError(_field(path), _too_large(node.value, path, f" (line {node.start_mark.line + 1})"))
            size = len(node.value) + 1
        else:
            open_.add(id(node))
            size = 2
            if isinstance(node, yaml.MappingNode):
                seen: set[str] = set()
                for key, value in node.value:
                    name = key.value if isinstance(key, yaml.ScalarNode) else "?"
                    if key.tag != _MERGE and isinstance(key, yaml.ScalarNode):
                        if name in seen:
                            raise SpecError(_field((*path, name)), f"is given twice in the same mapping (line "
                                                                   f"{key.start_mark.line + 1}): give it once")
                        seen.add(name)
                    if path in (("envs",), ("secrets",)) and isinstance(value, yaml.ScalarNode) \
                            and value.tag in (_INT, _FLOAT, _BOOL):  # a value, not its name
                        _env_not_misread(value.value, value.tag, (*path, name))
                    size += self._size(key, (*path, name), open_) + self._size(value, (*path, name), open_)
                    if size > self.max_bytes * 4:  # far past any limit: stop before walking the rest
                        break
            else:
                for i, item in enumerate(node.value):
                    size += self._size(item, (*path, i), open_)
                    if size > self.max_bytes * 4:
                        break
            open_.discard(id(node))
        self.sizes[key] = size
        return size


_BASE_60_MEANT = {
    ("broker", "deadline"): "write a length with its units (1h30m, 90m) or a time with its zone "
                            "(2026-12-01T18:00Z)",
    ("broker", "expected_hours"): "write the hours as a decimal number (1.5 for an hour and a half)",
}
"""Fields where a ``!!int 1:30`` is refused with what to write instead (quoting it, the advice for text, is refused
there as well)."""


_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_BOOL = "tag:yaml.org,2002:bool"


def _unreadable(root: yaml.Node) -> SpecError:
    """The refusal of the first scalar under ``root`` that YAML's constructor for its tag cannot read (a walk made
    only once a document has failed to load, so a task that loads pays nothing for it)."""
    constructor = yaml.constructor.SafeConstructor()
    stack: list[tuple[yaml.Node, tuple]] = [(root, ())]
    seen: set[int] = set()
    while stack:
        node, path = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for key, value in reversed(node.value):
                name = key.value if isinstance(key, yaml.ScalarNode) else "?"
                stack += [(value, (*path, name)), (key, (*path, name))]
        elif isinstance(node, yaml.SequenceNode):
            stack += [(item, (*path, i)) for i, item in reversed(list(enumerate(node.value)))]
        elif isinstance(node, yaml.ScalarNode):
            try:
                constructor.construct_object(node)
            except Exception as exc:  # whatever the constructor raised: said as what the tag needs
                return _unreadable_scalar(node, path, exc)
    return SpecError("body", "holds a value that cannot be read as a number")


_NOT_SHOWN = "its value is not shown, being a secret"


def _unreadable_scalar(node: yaml.ScalarNode, path: tuple, exc: Exception) -> SpecError:
    line = node.start_mark.line + 1
    if path[:1] == ("secrets",):  # the error goes back to the submitter's terminal, CI log or Slack channel
        tag = node.tag.removeprefix("tag:yaml.org,2002:")
        return SpecError(_field(path), f"cannot be read as !!{tag} (line {line}; {_NOT_SHOWN}): quote it, without "
                                       "the tag, to give the text")
    value = node.value if len(node.value) <= 80 else node.value[:80] + "..."
    tag = node.tag.removeprefix("tag:yaml.org,2002:")
    if node.tag == _TIMESTAMP:
        why = f" ({exc})" if isinstance(exc, ValueError) else ""  # "month must be in 1..12"
        return SpecError(_field(path), f"is {value!r} (line {line}), which YAML reads as a date but is not one{why}: "
                                       "write a real date and time with its zone (2026-12-01T18:00Z), or quote it "
                                       "to give the text")
    if node.tag == _BOOL:
        return SpecError(_field(path), f"is !!bool {value!r} (line {line}), which is not true or false")
    if node.tag in (_INT, _FLOAT):
        return SpecError(_field(path), f"is {value!r} (line {line}), which cannot be read as a number "
                                       f"(!!{tag})")
    return SpecError(_field(path), f"is {value!r} (line {line}), which cannot be read as !!{tag}")


def _not_misread(text: str, path: tuple, *, octal: bool = True) -> None:
    """Refuse an unquoted number that YAML 1.1 (PyYAML's, and SkyPilot's) reads as another one: ``010`` is octal 8,
    and a base-60 ``1:30`` tagged ``!!int`` or ``!!float`` is 90 (untagged, :class:`_Loader` reads it as the text).
    Said with what was read, and how to write what was meant. ``octal=False``: the task's ``config`` (SkyPilot's
    settings, a Kubernetes ``pod_config``), where a leading zero is a file mode written as Kubernetes reads it
    (``defaultMode: 0755``), octal as meant."""
    if path[:1] == ("secrets",) and (_BASE_60.match(text) or (
            octal and _OCTAL.match(text) and int(text.replace("_", "").lstrip("+-"), 8)
            != int(text.replace("_", "").lstrip("+-"), 10))):
        raise SpecError(_field(path), f"is a number YAML reads as another one, base-60 or octal ({_NOT_SHOWN}): "
                                      "quote it to give the text as written")
    if _BASE_60.match(text):  # an explicit `!!int 1:30` (unquoted, :class:`_Loader` reads it as text)
        read = yaml.load(text, Loader=_YAML_1_1)
        meant = _BASE_60_MEANT.get(path)
        if meant is not None:  # quoted, these are refused too ("must be ..."): say what they take
            raise SpecError(_field(path), f"is {text}, which YAML reads as the base-60 number {read!r}: {meant}")
        raise SpecError(_field(path), f"is {text}, which YAML reads as the base-60 number {read!r}: quote it "
                                      f"('{text}') to give the text, or write the number meant (1.5 for one and a "
                                      "half)")
    if octal and _OCTAL.match(text):
        sign, digits = ("-" if text.startswith("-") else ""), text.replace("_", "").lstrip("+-")
        if int(digits, 8) != int(digits, 10):
            raise SpecError(_field(path), f"is {text}, which YAML reads as the octal number {sign}{int(digits, 8)}: "
                                          f"quote it ('{text}') to give the text as written, or write the number "
                                          f"meant without a leading zero ({sign}{int(digits)} for ten-based, "
                                          f"{sign}{int(digits, 8)} for the octal reading)")


_HEX_OR_BINARY = re.compile(r"^[-+]?0[xXbB][0-9a-fA-F_]+$")


def _number(text: str) -> Any:
    """The number YAML 1.1 reads from ``text`` (neither base-60 nor octal: checked before), or the text itself where
    it reads no finite one: ``.nan`` and ``.inf`` are refused as not finite, in their own words."""
    try:
        read = yaml.load(text, Loader=_Loader)
    except yaml.YAMLError:
        return text
    return read if isinstance(read, int) or (isinstance(read, float) and math.isfinite(read)) else text


def _env_not_misread(text: str, tag: str, path: tuple) -> None:
    """Refuse an unquoted environment value (``envs``, ``secrets``) that YAML 1.1 reads as another: ``0x1F`` is the
    number 31 and ``0b101`` is 5, so the job's variable held "31" or "5"; ``yes``, ``no``, ``on`` and ``off`` are
    booleans, so it held "True" or "False" — a token or a flag silently not what was written (SkyPilot reads its
    tasks the same way). So is any other number whose text the variable would not keep: ``3.10`` is the float 3.1
    (a Python version, ``PYTHON_VERSION: 3.10``, became 3.1), ``1.50`` 1.5, ``.5`` 0.5 and ``1_000`` 1000. A float
    written with an exponent (``1.0e-4``, a learning rate) is left as YAML reads it, 0.0001, as ``true`` and ``false``
    are: the number is what is meant there. A secret's value is not echoed. (Octal and
    base-60 numbers are :func:`_not_misread`'s, with their own words.)"""
    hex_or_binary = tag == _INT and _HEX_OR_BINARY.match(text) and len(text) <= 66  # (longer: refused for its digits)
    word = tag == _BOOL and text.lower() in ("yes", "no", "on", "off")  # (an explicit `!!bool maybe`: its own error)
    # an exponent says a number is meant (a learning rate's 1.0e-4, read as 0.0001): its spelling is not what is lost
    # (a number of more digits than a whole number may hold is refused for them, as the node is sized)
    number = tag in (_INT, _FLOAT) and not _HEX_OR_BINARY.match(text) and not _BASE_60.match(text) \
        and not _OCTAL.match(text) and "e" not in text.lower() and sum(c.isdigit() for c in text) <= MAX_INT_DIGITS \
        and not _overflows(text) and str(_number(text)) != text
    if not (hex_or_binary or word or number):
        return
    read = str(yaml.load(text, Loader=_Loader))
    if path[0] == "secrets":
        raise SpecError(_field(path), f"is a value YAML reads as another one ({_NOT_SHOWN}): quote it to give the text "
                                      "as written")
    what = "boolean" if tag == _BOOL else "number"
    raise SpecError(_field(path), f"is {text}, which YAML reads as the {what} {read}: the variable would hold "
                                  f"'{read}'; quote it ('{text}') to give the text as written")


def _plain_amount(node: yaml.ScalarNode, path: tuple) -> None:
    """Refuse an amount of dollars YAML reads as a float from an exponent (``1.0e+3``, ``2.5E-1``): as text it is
    refused (:func:`pricing.money.to_micros`), and so it is here, in the same words, with its line."""
    if "e" not in node.value.lower():  # .nan and .inf: not finite, refused by check_plain
        return
    from pricing.money import MoneyError, to_micros

    try:
        to_micros(node.value)
    except MoneyError as exc:
        said = str(exc)
        if said.startswith(repr(node.value)):  # "'1.0e+3' is not ...": the line after the value
            said = said[len(repr(node.value)):]
        else:  # "must be at most ...": the value first
            said = f" {said}"
        raise SpecError(_field(path), f"{node.value!r} (line {node.start_mark.line + 1}){said}") from None


class _Duplicated(dict):
    """A JSON object that gave ``key`` twice: :func:`check_plain` refuses it with its place."""

    def __init__(self, key: str):
        super().__init__()
        self.key = key


class _LongNumber:
    """A JSON whole number too long to read: :func:`check_plain` refuses it with its place."""

    def __init__(self, text: str):
        self.text = text


def _json_object(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            return _Duplicated(key)
        out[key] = value
    return out


class TypedFloat(float):
    """A JSON number written with an exponent (``1e3``): a float that remembers how it was typed, so that an amount
    of dollars refuses it as it refuses the text ``"1e3"`` (:func:`pricing.money.typed_to_micros` reads ``typed``).
    Before, ``{"budget_usd": 1e3}`` was a $1,000 budget, where the same task read from a file by ``broker submit``,
    or as YAML, was refused."""

    typed: str

    def __new__(cls, text: str) -> TypedFloat:
        number = super().__new__(cls, text)
        number.typed = text
        return number


def _overflows(text: str) -> bool:
    """Whether a YAML float's text is a number too large for a float (``1.0e+400``), not ``.inf`` or ``.nan``."""
    plain = text.replace("_", "").lower()
    if "inf" in plain or "nan" in plain:
        return False
    try:
        return not math.isfinite(float(plain))
    except ValueError:  # base 60 and the like: refused or read elsewhere
        return False


def _json_float(text: str) -> float:
    # a number too large for a float (1e400, or 400 digits and a point) keeps its text too, to be refused as typed
    return TypedFloat(text) if "e" in text.lower() or not math.isfinite(float(text)) else float(text)


def _json_int(text: str) -> int | _LongNumber:
    return _LongNumber(text) if len(text.lstrip("-")) > MAX_INT_DIGITS else int(text)
