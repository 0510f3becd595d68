"""An offline reading of a Terraform module: what it defines and what it refers to.

No terraform binary or provider schema is available in the test environment, so
this parses each ``.tf`` file with python-hcl2 and checks references by hand:

* every ``var.x`` is declared, and every declared variable is used outside its
  own ``variable`` block;
* every ``local.x`` is defined and every local is used;
* every ``module.x``, ``data.T.N`` and ``T.N`` points at a block of the module;
* ``T.N[...]`` is indexed exactly when ``T.N`` has ``for_each`` or ``count``;
* ``T.N.attr`` names an attribute listed for ``T`` in ``KNOWN_ATTRIBUTES``.

python-hcl2 8.x keeps HCL source text for expressions: block labels and string
literals keep their quotes (``'"aws_s3_bucket"'``), expressions are wrapped in
``${...}``. References are found in the code parts of those texts only, after
blanking string literals, so ``"ecs-tasks.amazonaws.com"`` is never mistaken
for a reference while ``"${aws_s3_bucket.b.arn}/*"`` is read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator

import hcl2

from known_attributes import KNOWN_ATTRIBUTES

_META_KEYS = {"__is_block__", "__comments__", "__inline_comments__"}
_NAME = r"[A-Za-z_][\w-]*"
_INDEX = r"(?P<index>\[[^\]]*\])?"
_ATTR = r"(?:\.(?P<attr>[A-Za-z_]\w*))?"


class ParseError(Exception):
    """A ``.tf`` text python-hcl2 could not parse."""


@dataclass(frozen=True)
class Ref:
    """One reference found in an expression.

    kind is ``var``, ``local``, ``module``, ``data`` or ``resource``; ``type``
    is empty for the first three. ``where`` is ``file: block address``.
    """

    kind: str
    type: str
    name: str
    attr: str | None
    indexed: bool
    where: str


@dataclass
class Module:
    """The blocks of one module directory, keyed the way Terraform addresses them."""

    path: Path
    variables: dict[str, dict] = field(default_factory=dict)
    locals: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, dict] = field(default_factory=dict)
    resources: dict[tuple[str, str], dict] = field(default_factory=dict)
    data: dict[tuple[str, str], dict] = field(default_factory=dict)
    modules: dict[str, dict] = field(default_factory=dict)
    providers: dict[str, dict] = field(default_factory=dict)
    required_providers: dict[str, Any] = field(default_factory=dict)
    terraform: list[dict] = field(default_factory=list)
    refs: list[Ref] = field(default_factory=list)


def unquote(text: str) -> str:
    """``'"x"'`` -> ``'x'``: python-hcl2 keeps the quotes of labels and literals."""
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1]
    return text


def parse_text(text: str, name: str = "<text>") -> dict:
    """Parse one file's text; raise ParseError naming the file on a syntax error."""
    try:
        return hcl2.loads(text)
    except Exception as error:  # lark raises several unrelated exception types
        raise ParseError(f"{name}: {error}") from error


def load_module(directory: Path) -> Module:
    """Read every ``.tf`` file of directory (not sub-directories) into a Module."""
    module = Module(path=directory)
    for path in sorted(directory.glob("*.tf")):
        add_file(module, parse_text(path.read_text(), str(path)), path.name)
    return module


@lru_cache(maxsize=None)
def cached_module(directory: Path) -> Module:
    """load_module, once per directory per test session (the tests only read it)."""
    return load_module(directory)


def module_from_texts(texts: dict[str, str]) -> Module:
    """A Module from ``{file name: text}``, for tests of the checker itself."""
    module = Module(path=Path("<memory>"))
    for name, text in texts.items():
        add_file(module, parse_text(text, name), name)
    return module


def add_file(module: Module, tree: dict, file: str) -> None:
    """Record the blocks of one parsed file and the references in them."""
    for block in tree.get("variable", []):
        for name, body in _labelled(block):
            module.variables[name] = body
            _collect(module, body, f"{file}: variable.{name}")
    for block in tree.get("locals", []):
        for name, value in block.items():
            if name not in _META_KEYS:
                module.locals[name] = value
                _collect(module, value, f"{file}: local.{name}")
    for block in tree.get("output", []):
        for name, body in _labelled(block):
            module.outputs[name] = body
            _collect(module, body, f"{file}: output.{name}")
    for block in tree.get("module", []):
        for name, body in _labelled(block):
            module.modules[name] = body
            _collect(module, body, f"{file}: module.{name}")
    for kind, table in (("resource", module.resources), ("data", module.data)):
        for block in tree.get(kind, []):
            for type_, inner in _labelled(block):
                for name, body in _labelled(inner):
                    table[(type_, name)] = body
                    prefix = "data." if kind == "data" else ""
                    _collect(module, body, f"{file}: {prefix}{type_}.{name}")
    for block in tree.get("provider", []):
        for name, body in _labelled(block):
            module.providers[name] = body
            _collect(module, body, f"{file}: provider.{name}")
    for block in tree.get("terraform", []):
        module.terraform.append(block)
        for required in block.get("required_providers", []):
            for name, spec in required.items():
                if name not in _META_KEYS:
                    module.required_providers[name] = spec


def _labelled(block: dict) -> Iterator[tuple[str, Any]]:
    for label, body in block.items():
        if label not in _META_KEYS:
            yield unquote(label), body


def _collect(module: Module, value: Any, where: str) -> None:
    """Store the references in value; the resource prefixes come later (see refs_of)."""
    for text in _strings(value):
        module.refs.extend(refs_in(code_of(text), where))


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            if key in _META_KEYS:
                continue
            if "${" in key:
                yield key
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def code_of(text: str) -> str:
    """The code parts of an HCL value's text, with string literals blanked.

    Handles templates (``"a${b}c"``), nested strings inside interpolations
    (``"${f("x")}"``), escapes and ``$${`` literals.
    """
    if text.startswith("${") and text.endswith("}"):
        text = text[2:-1]
    out: list[str] = []
    stack: list[list] = [["code", 0]]
    i = 0
    while i < len(text):
        char, top = text[i], stack[-1]
        if top[0] == "str":
            if char == "\\":
                i += 2
            elif text.startswith("$${", i) or text.startswith("%%{", i):
                i += 3
            elif text.startswith("${", i) or text.startswith("%{", i):
                stack.append(["code", 0])
                out.append(" ")
                i += 2
            elif char == '"':
                stack.pop()
                out.append(" ")
                i += 1
            else:
                i += 1
            continue
        if char == '"':
            stack.append(["str"])
            out.append(" ")
        elif char == "{":
            top[1] += 1
            out.append(char)
        elif char == "}" and top[1] == 0 and len(stack) > 1:
            stack.pop()
            out.append(" ")
        else:
            if char == "}":
                top[1] -= 1
            out.append(char)
        i += 1
    return "".join(out)


_VAR = re.compile(rf"(?<![\w.])(?P<kind>var|local)\.(?P<name>{_NAME})")
_MODULE = re.compile(rf"(?<![\w.])module\.(?P<name>{_NAME}){_INDEX}{_ATTR}")
_DATA = re.compile(rf"(?<![\w.])data\.(?P<type>[a-z][a-z0-9_]*)\.(?P<name>{_NAME}){_INDEX}{_ATTR}")
_RESOURCE = re.compile(rf"(?<![\w.])(?P<type>[a-z][a-z0-9]*_[a-z0-9_]+)\.(?P<name>{_NAME}){_INDEX}{_ATTR}")


def refs_in(code: str, where: str) -> list[Ref]:
    """Every reference in a piece of code (string literals already blanked).

    Resource references are candidates here: ``T.N`` for any ``T`` that looks
    like a resource type. refs_of() keeps those whose type starts with a
    provider the module requires.
    """
    refs = [Ref(m["kind"], "", m["name"], None, False, where) for m in _VAR.finditer(code)]
    refs += [Ref("module", "", m["name"], m["attr"], bool(m["index"]), where) for m in _MODULE.finditer(code)]
    refs += [Ref("data", m["type"], m["name"], m["attr"], bool(m["index"]), where) for m in _DATA.finditer(code)]
    refs += [
        Ref("resource", m["type"], m["name"], m["attr"], bool(m["index"]), where)
        for m in _RESOURCE.finditer(code)
    ]
    return refs


def refs_of(module: Module) -> list[Ref]:
    """The module's references, resource candidates kept only for its providers."""
    prefixes = tuple(f"{provider}_" for provider in module.required_providers)
    return [ref for ref in module.refs if ref.kind != "resource" or ref.type.startswith(prefixes)]


def problems(module: Module, known: dict[str, set[str]] = KNOWN_ATTRIBUTES) -> list[str]:
    """Every broken reference in module, as sentences; empty when all is well."""
    found: list[str] = []
    refs = refs_of(module)
    used_vars = {r.name for r in refs if r.kind == "var" and not r.where.split(": ")[1].startswith("variable.")}
    used_locals = {r.name for r in refs if r.kind == "local"}
    for ref in refs:
        if ref.kind == "var" and ref.name not in module.variables:
            found.append(f"{ref.where}: var.{ref.name} is not declared")
        elif ref.kind == "local" and ref.name not in module.locals:
            found.append(f"{ref.where}: local.{ref.name} is not defined")
        elif ref.kind == "module" and ref.name not in module.modules:
            found.append(f"{ref.where}: module.{ref.name} is not defined")
        elif ref.kind in ("data", "resource"):
            found.extend(_resource_problems(module, ref, known))
    found += [f"variable.{name} is declared but never used" for name in module.variables if name not in used_vars]
    found += [f"local.{name} is defined but never used" for name in module.locals if name not in used_locals]
    return found


def _resource_problems(module: Module, ref: Ref, known: dict[str, set[str]]) -> list[str]:
    table = module.data if ref.kind == "data" else module.resources
    address = f"{'data.' if ref.kind == 'data' else ''}{ref.type}.{ref.name}"
    body = table.get((ref.type, ref.name))
    if body is None:
        return [f"{ref.where}: {address} is not defined"]
    found = []
    repeated = "for_each" in body or "count" in body
    if ref.attr is not None and repeated and not ref.indexed:
        found.append(f"{ref.where}: {address} has for_each or count, so .{ref.attr} needs an index")
    if ref.indexed and not repeated:
        found.append(f"{ref.where}: {address} has no for_each or count, so it cannot be indexed")
    if ref.attr is not None:
        attributes = known.get(ref.type)
        if attributes is None:
            found.append(f"{ref.where}: no known attributes for {ref.type}; add them to known_attributes.py")
        elif ref.attr not in attributes:
            found.append(f"{ref.where}: {ref.type} has no attribute {ref.attr!r} (known: {sorted(attributes)})")
    return found
