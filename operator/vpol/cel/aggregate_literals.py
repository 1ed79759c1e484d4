"""Homogeneous list and map literals, as cel-go's checker enforces them for the API server and Kyverno.

Both environments enable ``cel.HomogeneousAggregateLiterals()``: after type
checking, every list literal's elements, and every map literal's keys and its
values, must have one type (``[1, 'a']``, ``[object.x, 1]`` (dyn and int) or
``{'a': 1, 'b': 'x'}`` do not compile); literals anywhere inside a ``format``
call are exempt (the strings extension registers it so), and an optional
entry (``[?x]``, ``{?'k': v}``) counts with its value's type. vpol refuses only
mismatches of two concrete types: a ``dyn`` here may be a type cel-go knows
exactly (a variable's, say), so ``[object.x, 1]`` is left to the API server. cel-cpp has no
such validation, so vpol runs it on the checked expression cel-expr-python
serializes (a ``cel.expr.CheckedExpr``: the syntax tree with the type of
every node). Hand-written over the protobuf wire format because no package
on the index carries the ``cel.expr`` protos for Python; only the fields used
here are read, by their numbers in cel-spec's syntax.proto and checked.proto.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from cel_expr_python import cel

#: Functions whose arguments may hold literals of mixed types (cel-go's strings extension exempts format).
EXEMPT_FUNCTIONS = frozenset({"format"})

_Fields = dict[int, list[bytes | int]]


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes) -> _Fields:
    """A message's fields by number: bytes for length-delimited ones, ints for varints."""
    out: _Fields = {}
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        value: bytes | int
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 2:
            length, pos = _varint(buf, pos)
            value, pos = buf[pos:pos + length], pos + length
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        out.setdefault(number, []).append(value)
    return out


def _one(fields: _Fields, number: int) -> bytes:
    values = fields.get(number) or [b""]
    value = values[0]
    return value if isinstance(value, bytes) else b""


def _ints(fields: _Fields, number: int) -> list[int]:
    """A repeated integer field, packed or not (negative int32s come as 10-byte varints)."""
    out: list[int] = []
    for value in fields.get(number) or []:
        if isinstance(value, int):
            out.append(value)
            continue
        pos = 0
        while pos < len(value):
            n, pos = _varint(value, pos)
            out.append(n)
    return [n - (1 << 64) if n >= 1 << 63 else n for n in out]


def _map(fields: _Fields, number: int) -> dict[int, bytes | int]:
    """A map<int64, message or integer> field: key -> the value (its bytes, or the integer)."""
    out: dict[int, bytes | int] = {}
    for entry in fields.get(number) or []:
        if isinstance(entry, bytes):
            f = _fields(entry)
            key = (f.get(1) or [0])[0]
            out[key if isinstance(key, int) else 0] = (f.get(2) or [b""])[0]
    return out


_PRIMITIVES = {1: "bool", 2: "int", 3: "uint", 4: "double", 5: "string", 6: "bytes"}
_WELL_KNOWN = {1: "any", 2: "timestamp", 3: "duration"}


def type_name(raw: bytes) -> str:
    """A checked type (cel.expr.Type) as cel-go names it in messages."""
    f = _fields(raw)
    if 1 in f:
        return "dyn"
    if 2 in f:
        return "null_type"
    if 3 in f:
        return _PRIMITIVES.get(_ints(f, 3)[0], "dyn")
    if 4 in f:
        return f"wrapper({_PRIMITIVES.get(_ints(f, 4)[0], 'dyn')})"
    if 5 in f:
        return _WELL_KNOWN.get(_ints(f, 5)[0], "dyn")
    if 6 in f:
        return f"list({type_name(_one(_fields(_one(f, 6)), 1))})"
    if 7 in f:
        m = _fields(_one(f, 7))
        return f"map({type_name(_one(m, 1))}, {type_name(_one(m, 2))})"
    if 9 in f:
        return _one(f, 9).decode()
    if 10 in f:
        return _one(f, 10).decode()
    if 11 in f:
        return f"type({type_name(_one(f, 11))})"
    if 12 in f:
        return "*error*"
    if 14 in f:
        a = _fields(_one(f, 14))
        params = [type_name(p) for p in a.get(2) or [] if isinstance(p, bytes)]
        return _one(a, 1).decode() + (f"({', '.join(params)})" if params else "")
    return "dyn"


def _optional_value_type(raw: bytes) -> bytes:
    """The value type of an optional type (what an optional literal entry counts as)."""
    f = _fields(raw)
    if 14 in f:
        params = _fields(_one(f, 14)).get(2) or []
        if params and isinstance(params[0], bytes):
            return params[0]
    return raw


@dataclass(frozen=True)
class Mismatch:
    """A literal entry whose type is not the first entry's: where it is (code point offset in the source as
    compiled) and the two types."""

    offset: int
    expected: str
    found: str

    @property
    def message(self) -> str:
        return f"expected type '{self.expected}' but found '{self.found}'"


def _concrete(name: str) -> bool:
    """A type with no dyn, error or type parameter in it."""
    return not any(part in name for part in ("dyn", "*error*", "_var", "%")) and name != "any"


def _children(expr: _Fields) -> Iterator[bytes]:
    """The sub-expressions of an expression (any kind)."""
    if 5 in expr:  # select: operand
        yield _one(_fields(_one(expr, 5)), 1)
    if 6 in expr:  # call: target, args
        call = _fields(_one(expr, 6))
        if 1 in call:
            yield _one(call, 1)
        yield from (a for a in call.get(3) or [] if isinstance(a, bytes))
    if 7 in expr:  # list: elements
        yield from (e for e in _fields(_one(expr, 7)).get(1) or [] if isinstance(e, bytes))
    if 8 in expr:  # struct or map: entries' keys and values
        for entry in _fields(_one(expr, 8)).get(2) or []:
            if isinstance(entry, bytes):
                e = _fields(entry)
                if 3 in e:
                    yield _one(e, 3)
                if 4 in e:
                    yield _one(e, 4)
    if 9 in expr:  # comprehension: range, init, condition, step, result
        comp = _fields(_one(expr, 9))
        yield from (_one(comp, n) for n in (2, 4, 5, 6, 7) if n in comp)


@dataclass(frozen=True)
class CheckedTree:
    """A checked expression as cel-expr-python serializes it (``cel.expr.CheckedExpr``): the root node, the
    checked type of every node and the source offset (code points) of every node, by node id."""

    root: bytes
    types: dict[int, bytes]
    positions: dict[int, int]

    @staticmethod
    def node_id(node: _Fields) -> int:
        value = (node.get(2) or [0])[0]
        return value if isinstance(value, int) else 0

    def type_of(self, node: _Fields) -> bytes:
        """The node's checked type (cel.expr.Type bytes; empty when unknown)."""
        return self.types.get(self.node_id(node), b"")

    def offset(self, node: _Fields, default: int = 0) -> int:
        return self.positions.get(self.node_id(node), default)

    def nodes(self) -> Iterator[_Fields]:
        """Every node of the tree, each once."""
        stack = [self.root]
        while stack:
            expr = _fields(stack.pop())
            stack.extend(_children(expr))
            yield expr


def checked_tree(expression: cel.Expression) -> CheckedTree:
    wrapped = _fields(expression.serialize())  # google.protobuf.Any: 1 type URL, 2 value
    checked = _fields(_one(wrapped, 2))
    return CheckedTree(
        root=_one(checked, 4),
        types={k: v for k, v in _map(checked, 3).items() if isinstance(v, bytes)},  # type_map: node id -> Type
        positions={k: v for k, v in _map(_fields(_one(checked, 5)), 4).items()  # source_info.positions
                   if isinstance(v, int)})


def mismatches(tree: CheckedTree) -> list[Mismatch]:
    """The literal entries of a checked expression whose types differ from their literal's first entry."""
    found: list[Mismatch] = []

    def check(kind: str, entries: list[tuple[_Fields, bool]]) -> None:
        first: bytes | None = None
        for node, optional in entries:
            raw = tree.type_of(node)
            raw = _optional_value_type(raw) if optional else raw
            if first is None:
                first = raw
            elif raw != first:
                expected, got = type_name(first), type_name(raw)
                if not (_concrete(expected) and _concrete(got)):
                    # cel-go refuses dyn next to int too, but where vpol's types are coarser than cel-go's (a
                    # variable cel-go types exactly is dyn here) that would refuse what Kyverno accepts: only
                    # two concrete types are a certain mismatch.
                    return
                found.append(Mismatch(tree.offset(node), expected, got))
                if kind == "list":
                    return  # cel-go reports a list's first mismatch only

    stack: list[tuple[bytes, bool]] = [(tree.root, False)]
    while stack:
        raw, exempt = stack.pop()
        expr = _fields(raw)
        if 6 in expr and _one(_fields(_one(expr, 6)), 2).decode() in EXEMPT_FUNCTIONS:
            exempt = True
        if not exempt and 7 in expr:
            lst = _fields(_one(expr, 7))
            optional = set(_ints(lst, 2))
            check("list", [(_fields(e), i in optional) for i, e in enumerate(
                e for e in lst.get(1) or [] if isinstance(e, bytes))])
        if not exempt and 8 in expr:
            struct = _fields(_one(expr, 8))
            if not _one(struct, 1):  # a map literal (a message literal has a type name)
                entries = [_fields(e) for e in struct.get(2) or [] if isinstance(e, bytes)]
                check("keys", [(_fields(_one(e, 3)), False) for e in entries])
                check("values", [(_fields(_one(e, 4)), bool((e.get(5) or [0])[0])) for e in entries])
        stack.extend((child, exempt) for child in _children(expr))
    return sorted(found, key=lambda m: m.offset)
