"""Parsing YAML/JSON text into documents that remember where each field was.

PyYAML's composer gives every node a start mark; we walk the node tree once
and record the position of each value by its field path, so later problems
(a bad field, a CEL error) can point at a line and column in the file.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml

from vpol.model.problems import InputError, Position, Problem

#: Refuse documents larger than this (bytes) before parsing: a YAML bomb or a
#: stray binary file should be an error, not a memory spike.
MAX_DOCUMENT_BYTES = 8 * 1024 * 1024
#: Refuse a document whose aliases (``*anchor``) expand to more nodes than this: a
#: "billion laughs" file of a few hundred bytes would otherwise expand to gigabytes.
MAX_ALIAS_NODES = 100_000


@dataclass
class Document:
    data: Any
    file: str = ""
    index: int = 0  # position in a multi-document stream
    positions: dict[str, Position] = field(default_factory=dict)

    def position(self, path: str) -> Position | None:
        return self.positions.get(path)


def _join(prefix: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{prefix}[{key}]"
    return f"{prefix}.{key}" if prefix else str(key)


class _Loader(yaml.SafeLoader):
    """SafeLoader without the YAML 1.1 quirks that bite Kubernetes users.

    ``on``/``off``/``yes``/``no`` stay strings (Kubernetes parses YAML 1.2
    style); timestamps stay strings, as in Kubernetes objects.
    """

    def __init__(self, stream: str):
        super().__init__(stream)
        #: Nodes met so far, and how many visits aliases added (see MAX_ALIAS_NODES).
        self.vpol_seen: set[int] = set()
        self.vpol_alias_nodes = 0


_Loader.yaml_implicit_resolvers = {
    k: [(tag, rx) for tag, rx in v if tag not in ("tag:yaml.org,2002:timestamp",)]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_BOOL_RX = __import__("re").compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
for _first in list(_Loader.yaml_implicit_resolvers):
    _Loader.yaml_implicit_resolvers[_first] = [
        (tag, (_BOOL_RX if tag == "tag:yaml.org,2002:bool" else rx))
        for tag, rx in _Loader.yaml_implicit_resolvers[_first]
    ]


class _AliasBomb(Exception):
    pass


def _walk(node: yaml.Node, path: str, out: dict[str, Position], loader: _Loader) -> Any:
    # An alias is the same node object met again: count what aliases expand to.
    if id(node) in loader.vpol_seen:
        loader.vpol_alias_nodes += 1
        if loader.vpol_alias_nodes > MAX_ALIAS_NODES:
            raise _AliasBomb()
    else:
        loader.vpol_seen.add(id(node))
    out[path] = Position(node.start_mark.line + 1, node.start_mark.column + 1)
    if isinstance(node, yaml.MappingNode):
        result: dict[Any, Any] = {}
        loader.flatten_mapping(node)
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                raise yaml.constructor.ConstructorError(
                    None, None, "a mapping key must be a scalar", key_node.start_mark)
            key_s = key if isinstance(key, str) else str(key)
            child = _join(path, key_s)
            result[key_s] = _walk(value_node, child, out, loader)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [_walk(item, _join(path, i), out, loader) for i, item in enumerate(node.value)]
    return loader.construct_object(node, deep=True)


class _FastLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """libyaml's C parser with the same resolvers as ``_Loader`` (for documents that need no positions)."""


_FastLoader.yaml_implicit_resolvers = _Loader.yaml_implicit_resolvers
_STR_TAG = "tag:yaml.org,2002:str"
_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
#: The implicit resolvers to try for a plain scalar, by its first character (wildcards included).
_WILDCARD_RESOLVERS = tuple(_Loader.yaml_implicit_resolvers.get(None, ()))
_RESOLVERS_BY_FIRST = {first: tuple(resolvers) + _WILDCARD_RESOLVERS
                       for first, resolvers in _Loader.yaml_implicit_resolvers.items() if first is not None}


def _resolve(self: _FastLoader, kind: Any, value: str, implicit: tuple[bool, bool]) -> str:
    """PyYAML's ``resolve`` for the C parser, which calls it for every scalar of the stream (400,000 for 10,000
    Pods): the same tags, without building a list of resolvers per call (hand-written for that cost alone)."""
    if kind is yaml.ScalarNode and implicit[0] and not self.yaml_path_resolvers:
        for tag, regexp in _RESOLVERS_BY_FIRST.get(value[:1], _WILDCARD_RESOLVERS):
            if regexp.match(value):
                return tag
        return _STR_TAG
    return str(yaml.resolver.BaseResolver.resolve(self, kind, value, implicit))


_FastLoader.resolve = _resolve  # type: ignore[method-assign]


def _expanded_size(node: yaml.Node, memo: dict[int, int]) -> int:
    """How many nodes ``node`` expands to with every alias followed (memoized: linear in the node graph)."""
    known = memo.get(id(node))
    if known is not None:
        return known
    memo[id(node)] = 1  # a cycle counts once (the constructor refuses recursive structures anyway)
    size = 1
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            size += _expanded_size(key, memo) + _expanded_size(value, memo)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            size += _expanded_size(item, memo)
    memo[id(node)] = size
    return size


#: The other scalar tags the resolvers give a plain scalar, with the loader's constructors for them.
_SCALAR_CONSTRUCTORS = {tag: _FastLoader.yaml_constructors[tag] for tag in (
    "tag:yaml.org,2002:null", "tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float")}


class _NotPlain(Exception):
    """A document with more than maps, lists and plain scalars: built by PyYAML's own constructor."""


def _plain_value(node: yaml.Node, loader: _FastLoader) -> Any:
    """The value of an alias-free node of maps, lists and scalars, built directly.

    Hand-written because PyYAML's constructor is generic (a generator per collection, a cache of every node
    it built, merge keys, recursive structures): on a stream of 10,000 Pods it takes twice as long as this
    walk, which builds the same values (the same scalar constructors) for what it accepts and refuses
    everything else (explicit tags, merge keys, non-scalar keys) to that constructor."""
    cls = type(node)
    if cls is yaml.ScalarNode:
        if node.tag == _STR_TAG:
            return node.value
        scalar = _SCALAR_CONSTRUCTORS.get(node.tag)
        if scalar is None:
            raise _NotPlain()
        return scalar(loader, node)
    if cls is yaml.MappingNode:
        if node.tag != _MAP_TAG:
            raise _NotPlain()
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if type(key_node) is not yaml.ScalarNode:
                raise _NotPlain()
            out[_plain_value(key_node, loader)] = _plain_value(value_node, loader)
        return out
    if cls is yaml.SequenceNode and node.tag == _SEQ_TAG:
        return [_plain_value(item, loader) for item in node.value]
    raise _NotPlain()


def _construct(loader: _FastLoader, node: yaml.Node, aliases: bool) -> Any:
    if not aliases:
        try:
            return _plain_value(node, loader)
        except (_NotPlain, RecursionError):
            pass
    return loader.construct_document(node)


def iter_documents(text: str, file: str = "") -> Iterator[Document]:
    """Documents of a YAML stream one at a time, with only the positions of each document and of its
    ``items[i]`` (what messages about resources point at): libyaml's C parser, memory bounded by the
    largest document. Same errors as :func:`parse_documents`."""
    if len(text.encode("utf-8", "replace")) > MAX_DOCUMENT_BYTES:
        raise InputError(Problem(f"file is larger than {MAX_DOCUMENT_BYTES / 1024**2:g} MiB (the input limit; "
                                 "raise it with --max-input-mib)", file=file))
    loader = _FastLoader(text)
    aliases = "*" in text  # no `*`, no alias: nothing can expand
    try:
        index = 0
        while True:
            try:
                if not loader.check_node():
                    break
                node = loader.get_node()
                if node is None:
                    continue
                if aliases and _expanded_size(node, {}) > MAX_ALIAS_NODES and _has_alias_growth(node):
                    raise _AliasBomb()
                data = _construct(loader, node, aliases)
            except yaml.YAMLError:
                # Let the positional parser say exactly what and where (it is slower, but only runs on errors).
                parse_documents(text, file)
                raise
            positions = {"": Position(node.start_mark.line + 1, node.start_mark.column + 1)}
            if isinstance(node, yaml.MappingNode):
                for key_node, value_node in node.value:
                    if getattr(key_node, "value", None) == "items" and isinstance(value_node, yaml.SequenceNode):
                        for i, item in enumerate(value_node.value):
                            positions[f"items[{i}]"] = Position(item.start_mark.line + 1, item.start_mark.column + 1)
            if data is not None:
                yield Document(data=data, file=file, index=index, positions=positions)
            index += 1
    except _AliasBomb:
        raise InputError(Problem(f"invalid YAML: aliases expand to more than {MAX_ALIAS_NODES} nodes "
                                 "(a YAML bomb?)", file=file)) from None
    except yaml.YAMLError as exc:
        raise InputError(Problem(f"invalid YAML: {exc}", file=file)) from None
    finally:
        loader.dispose()


def _has_alias_growth(node: yaml.Node) -> bool:
    """True when aliases make ``node`` expand beyond its own node count (a large plain document is fine)."""
    seen: set[int] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            return True
        seen.add(id(n))
        if isinstance(n, yaml.MappingNode):
            for k, v in n.value:
                stack.extend((k, v))
        elif isinstance(n, yaml.SequenceNode):
            stack.extend(n.value)
    return False


def _value_start(node: yaml.ScalarNode) -> Position:
    mark = node.start_mark
    if node.style in ("'", '"'):
        return Position(mark.line + 1, mark.column + 2)
    if node.style in ("|", ">"):
        # The content begins on the next line.
        return Position(mark.line + 2, 1, inline=False)
    return Position(mark.line + 1, mark.column + 1)


def parse_documents(text: str, file: str = "") -> list[Document]:
    """Parse a YAML (or JSON) stream. Raises InputError naming file, line and column."""
    if len(text.encode("utf-8", "replace")) > MAX_DOCUMENT_BYTES:
        raise InputError(Problem(f"file is larger than {MAX_DOCUMENT_BYTES / 1024**2:g} MiB (the input limit; "
                                 "raise it with --max-input-mib)", file=file))
    docs: list[Document] = []
    try:
        loader = _Loader(text)
    except yaml.reader.ReaderError as exc:
        raise InputError(Problem(f"invalid YAML: {_reader_reason(exc)}", file=file,
                                 position=_offset_position(text, exc.position))) from None
    try:
        index = 0
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            positions: dict[str, Position] = {}
            data = _walk(node, "", positions, loader)
            # Scalars: point at where the text itself starts.
            _fix_scalar_positions(node, "", positions)
            if data is not None:
                docs.append(Document(data=data, file=file, index=index, positions=positions))
            index += 1
    except _AliasBomb:
        raise InputError(Problem(f"invalid YAML: aliases expand to more than {MAX_ALIAS_NODES} nodes "
                                 "(a YAML bomb?)", file=file)) from None
    except yaml.reader.ReaderError as exc:
        raise InputError(Problem(f"invalid YAML: {_reader_reason(exc)}", file=file,
                                 position=_offset_position(text, exc.position))) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        pos = Position(mark.line + 1, mark.column + 1) if mark else None
        reason = " ".join(x for x in (exc.context, exc.problem) if x) or "invalid YAML"
        raise InputError(Problem(f"invalid YAML: {reason}", file=file, position=pos)) from None
    except yaml.YAMLError as exc:
        raise InputError(Problem(f"invalid YAML: {exc}", file=file)) from None
    except RecursionError:
        raise InputError(Problem("invalid YAML: nesting too deep", file=file)) from None
    finally:
        loader.dispose()
    return docs


def _reader_reason(exc: yaml.reader.ReaderError) -> str:
    return f"character #x{exc.character:04x} is not allowed in YAML (a control character or binary data)"


def _offset_position(text: str, offset: int) -> Position:
    before = text[:offset]
    line = before.count("\n") + 1
    return Position(line, offset - (before.rfind("\n") + 1) + 1)


def _fix_scalar_positions(node: yaml.Node, path: str, out: dict[str, Position]) -> None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else ""
            _fix_scalar_positions(value_node, _join(path, key), out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _fix_scalar_positions(item, _join(path, i), out)
    elif isinstance(node, yaml.ScalarNode):
        out[path] = _value_start(node)
