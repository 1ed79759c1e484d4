"""The message type that types ``variables`` in a policy's expressions.

Each variable becomes a field typed by its expression's result type (scalars,
lists, maps, timestamps and durations keep their type; anything else is
``google.protobuf.Value``, i.e. dyn, as Kubernetes' ``convertCelTypeToDeclType``
does). Declaring only the variables before an expression makes a reference
to a later or unknown variable a type error at its position. The compiler
and the schema type checker share it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Any

from google.protobuf import descriptor_pb2

from vpol.cel import schemas, types

FDP = descriptor_pb2.FieldDescriptorProto

_TypeTree = tuple[Any, ...]

_SCALARS = {
    "BOOL": FDP.TYPE_BOOL,
    "INT": FDP.TYPE_INT64,
    "UINT": FDP.TYPE_UINT64,
    "DOUBLE": FDP.TYPE_DOUBLE,
    "STRING": FDP.TYPE_STRING,
    "BYTES": FDP.TYPE_BYTES,
}
_WELL_KNOWN = {"TIMESTAMP": ".google.protobuf.Timestamp", "DURATION": ".google.protobuf.Duration"}
_MAP_KEYS = {"BOOL", "INT", "UINT", "STRING"}
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_BUILTIN_NAMES = {"LIST", "MAP", "DYN", "NULL_TYPE", "NULL", *_SCALARS, *_WELL_KNOWN}


def parse_type_name(name: str) -> _TypeTree:
    """``LIST<MAP<STRING, INT>>`` -> ("LIST", ("MAP", ("STRING",), ("INT",)))."""
    pos = 0

    def parse() -> _TypeTree:
        nonlocal pos
        start = pos
        while pos < len(name) and name[pos] not in "<>,":
            pos += 1
        head = name[start:pos].strip()
        args: list[_TypeTree] = []
        if pos < len(name) and name[pos] == "<":
            pos += 1
            while True:
                args.append(parse())
                if pos < len(name) and name[pos] == ",":
                    pos += 1
                    continue
                if pos < len(name) and name[pos] == ">":
                    pos += 1
                break
        # Built-in type names in any case (the compiler reports them lower-cased); message names as they are.
        return (head.upper() if head.upper() in _BUILTIN_NAMES or head.isupper() else head, *args)

    return parse()


def _field_shape(tree: _TypeTree, nested: bool = False) -> tuple[str, int, str] | None:
    """(kind, scalar type, message name) of a variable type as a protobuf field, None for dyn."""
    head = tree[0]
    if head in _SCALARS:
        return ("scalar", _SCALARS[head], "")
    if head in _WELL_KNOWN:
        return ("message", 0, _WELL_KNOWN[head])
    if head == "LIST" and len(tree) == 2:
        return ("message", 0, ".google.protobuf.ListValue") if nested else ("list", 0, "")
    if head == "MAP" and len(tree) == 3 and tree[1][0] == "STRING" and nested:
        return ("message", 0, ".google.protobuf.Struct")
    if head == "MAP" and len(tree) == 3 and tree[1][0] in _MAP_KEYS and not nested:
        return ("map", 0, "")
    return None


def _set(field: descriptor_pb2.FieldDescriptorProto, shape: tuple[str, int, str] | None) -> None:
    if shape is None:
        field.type = FDP.TYPE_MESSAGE
        field.type_name = ".google.protobuf.Value"
    elif shape[0] == "scalar":
        field.type = shape[1]  # type: ignore[assignment]
    else:
        field.type = FDP.TYPE_MESSAGE
        field.type_name = shape[2]


def typed_variables_message(declared: Sequence[tuple[str, str]]) -> str:
    """A message typing ``variables``: (name, cel type name) pairs, content-addressed.

    Names that are not identifiers are left out; a repeated name keeps its
    last type (as the API server's variable map does).
    """
    last = {n: t for n, t in declared if _IDENT.match(n)}
    usable = list(last.items())
    digest = hashlib.sha256(repr(usable).encode()).hexdigest()[:20]
    package = "vpol.typecheck"
    name = f"Vars{digest}"
    fdp = descriptor_pb2.FileDescriptorProto(
        name=f"vpol/typecheck/{name}.proto", package=package, syntax="proto2",
        dependency=["google/protobuf/struct.proto", "google/protobuf/timestamp.proto",
                    "google/protobuf/duration.proto"],
    )
    msg = fdp.message_type.add(name=name)
    for number, (var, type_name) in enumerate(usable, start=1):
        tree = parse_type_name(type_name)
        shape = _field_shape(tree)
        field = msg.field.add(name=var, number=number, json_name=var)
        if shape is not None and shape[0] == "list":
            field.label = FDP.LABEL_REPEATED
            _set(field, _field_shape(tree[1], nested=True))
        elif shape is not None and shape[0] == "map":
            key, value = schemas.add_map_entry(msg, field, schemas.map_entry_name(var), f"{package}.{name}")
            _set(key, _field_shape(tree[1]))
            _set(value, _field_shape(tree[2], nested=True))
        else:
            field.label = FDP.LABEL_OPTIONAL
            _set(field, shape)
    types.add_file(fdp)
    return f"{package}.{name}"
