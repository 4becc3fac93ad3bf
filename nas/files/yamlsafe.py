"""The one YAML reader of the project: plain data only, bounded in size, depth and expansion.

Every YAML file the project reads (search spaces, architecture files, exported
winners, the recipes and budgets inside them) goes through :func:`read_yaml`.
On top of ``yaml.safe_load`` (no tag that builds a Python object) it refuses,
with one line naming the file:

* a file over :data:`MAX_BYTES` (before reading it);
* nesting deeper than :data:`MAX_DEPTH`, counted while the document is
  composed, so a 10**5-deep ``[[[...]]]`` ends with this error instead of a
  ``RecursionError``;
* a document that holds more than :data:`MAX_NODES` values once its aliases
  are expanded ("billion laughs": nine lines that stand for 10**9 values), or
  an alias that contains itself; measured on the node graph without expanding
  it, so the check is as fast as the file is short;
* a non-finite number (``.nan``, ``.inf``, ``1.0e999``) anywhere: no field of
  any file this project reads accepts one.

PyYAML has no such limits of its own; the composer is its Python one (where the
depth is counted) fed by libyaml's parser when present (10 times faster than
PyYAML's Python parser).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

from nas.errors import UserError
from nas.validate import finite_or_none, non_finite_path, not_a_file, utf8_text

#: the largest file read; an exported 4096-layer architecture is about 350 KB
MAX_BYTES = 2 * 2**20
#: nesting deeper than any schema here (a mixture block's options are 6 levels down)
MAX_DEPTH = 64
#: values in the document after alias expansion; a 4096-layer architecture has about 40 000
MAX_NODES = 200_000

try:  # libyaml's parser when PyYAML was built with it
    from yaml._yaml import CParser as _Parser
except ImportError:  # pragma: no cover - a PyYAML without libyaml
    from yaml.parser import Parser as _Parser  # type: ignore[assignment]
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class _PyParser(Reader, Scanner, _Parser):  # type: ignore[misc, valid-type]
        def __init__(self, stream: str) -> None:
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            _Parser.__init__(self)

    _Parser = _PyParser  # type: ignore[misc, assignment]


class YAMLRefused(yaml.MarkedYAMLError):
    """The document breaks one of this module's rules (a bound, a key)."""


class YAMLTooLarge(YAMLRefused):
    """The document passes one of this module's bounds."""


class _BoundedLoader(_Parser, Composer, SafeConstructor, Resolver):  # type: ignore[misc, valid-type]
    """SafeLoader's constructor and resolver, with a composer that counts its depth."""

    def __init__(self, stream: str) -> None:
        _Parser.__init__(self, stream)
        Composer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        self.depth = 0

    # libyaml's parser brings its own (unbounded, C) composer: use PyYAML's Python one instead
    get_single_node = Composer.get_single_node
    compose_document = Composer.compose_document
    check_node = Composer.check_node
    get_node = Composer.get_node

    def compose_node(self, parent: Any, index: Any) -> Any:
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise YAMLTooLarge(None, None, f"is nested more than {MAX_DEPTH} levels deep", mark)
            return Composer.compose_node(self, parent, index)
        finally:
            self.depth -= 1


def expanded_size(root: yaml.Node) -> tuple[int, int]:
    """(values, depth) of the document ``root`` stands for, aliases expanded, without expanding them.

    Each node's totals are computed once (post-order, iteratively: no recursion
    limit); a node reached again while its children are being counted is an
    alias inside itself and is refused.
    """
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    open_: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        kids = _children(node)
        if children_done:
            open_.discard(key)
            size[key] = 1 + sum(size[id(k)] for k in kids)
            depth[key] = 1 + max((depth[id(k)] for k in kids), default=0)
            if size[key] > MAX_NODES:
                raise YAMLTooLarge(
                    None,
                    None,
                    f"holds more than {MAX_NODES:,} values once its aliases are expanded",
                    node.start_mark,
                )
            if depth[key] > MAX_DEPTH:
                raise YAMLTooLarge(
                    None,
                    None,
                    f"is nested more than {MAX_DEPTH} levels deep once its aliases are expanded",
                    node.start_mark,
                )
            continue
        if key in size:
            continue
        if key in open_:
            raise YAMLTooLarge(
                None, None, "has an alias that refers to a value containing it", node.start_mark
            )
        open_.add(key)
        stack.append((node, True))
        stack.extend((k, False) for k in kids if id(k) not in size)
    return size[id(root)], depth[id(root)]


def check_keys(root: yaml.Node) -> None:
    """Refuse a mapping key that is not a string, and a key written twice in one mapping.

    PyYAML keeps the last of two equal keys without a word (YAML says keys are unique), and
    ``1:`` or ``yes:`` make keys no field has, which code sorting or joining names trips on.
    Each node is visited once, so a shared (aliased) mapping costs nothing more.
    """
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            names: set[str] = set()
            for key, _ in node.value:
                if key.tag == "tag:yaml.org,2002:merge":  # ``<<: *base``: keys written next to it override
                    continue
                if key.tag != "tag:yaml.org,2002:str":
                    kind = key.tag.rsplit(":", 1)[-1]
                    raise YAMLRefused(
                        None,
                        None,
                        f"has the key {key.value!r}, which YAML reads as {kind}, not a name (quote it)",
                        key.start_mark,
                    )
                if key.value in names:
                    raise YAMLRefused(
                        None, None, f"has the key {key.value!r} twice in one mapping", key.start_mark
                    )
                names.add(key.value)
        stack.extend(_children(node))


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def load_yaml(text: str, source: str = "<yaml>", what: str = "file") -> Any:
    """The plain data in YAML ``text`` (see the module docstring); errors name ``source``."""
    loader = _BoundedLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        expanded_size(node)
        check_keys(node)
        data = loader.construct_document(node)
    except yaml.YAMLError as err:
        raise _user_error(err, source, what) from None
    finally:
        loader.dispose()
    where = non_finite_path(data)
    if where is not None:
        raise UserError(f"{source}: {where}: a non-finite number (.nan or .inf) is not a valid value")
    return data


def _a(noun: str) -> str:
    """``noun`` with its indefinite article: "an architecture file", "a space"."""
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def read_yaml(path: str | os.PathLike[str], what: str = "file") -> Any:
    """The plain data in the YAML file ``path``; user errors are one line naming the file."""
    p = Path(path)
    problem = not_a_file(p)  # a directory says so, not "is not a file"
    if problem:
        raise UserError(f"{p}: {what} not found" if problem == "missing" else f"{p}: {problem}")
    try:
        if p.stat().st_size > MAX_BYTES:
            raise UserError(
                f"{p}: {_a(what)} of {p.stat().st_size:,} bytes is over the limit of {MAX_BYTES:,} bytes"
            )
        data = p.read_bytes()
    except OSError as err:
        raise UserError(f"{p}: cannot read {what}: {err.strerror or err}") from None
    text, problem = utf8_text(data)  # UTF-16, or the first byte that is not UTF-8 by line and column
    if text is None:
        raise UserError(f"{p}: cannot read {what}: {problem}; {_a(what)} is UTF-8 YAML")
    return load_yaml(text, str(p), what)


def _user_error(err: yaml.YAMLError, source: str, what: str) -> UserError:
    mark = getattr(err, "problem_mark", None)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    if isinstance(err, YAMLRefused):
        return UserError(f"{source}{where}: this {what} {problem}")
    if isinstance(err, yaml.constructor.ConstructorError) and "tag:yaml.org,2002:python/" in problem:
        tag = problem[problem.index("tag:yaml.org,2002:") + len("tag:yaml.org,2002:") :].rstrip("'")
        return UserError(
            f"{source}{where}: the tag !!{tag} is not allowed (a {what} holds plain data, no Python objects)"
        )
    if "nesting depth" in problem:  # libyaml's own limit, reached before ours on some builds
        return UserError(f"{source}{where}: this {what} is nested more than {MAX_DEPTH} levels deep")
    return UserError(f"{source}: malformed YAML{where}: {problem}")


def dump_yaml(data: Any) -> str:
    """YAML text of plain data, non-finite floats written as null (``read_yaml`` refuses them)."""
    return yaml.safe_dump(finite_or_none(data), sort_keys=False, default_flow_style=None, width=100)
