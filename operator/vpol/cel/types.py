"""Opaque CEL types (Quantity, IP, URL, ...) as runtime protobuf messages.

cel-expr-python has no API for opaque Python-backed types, but it handles
protobuf messages natively: type checking, `type()`, `==` (field-wise) and
passing values through Python functions. Each opaque type is a message
with a few scalar fields holding a canonical form, so that equality of two
values means equality of what they denote.

All messages live in one descriptor pool (``POOL``) that the environments
are built on; schema messages for type checking are added to it as well.
"""

from __future__ import annotations

import threading
from typing import Any

from cel_expr_python import cel
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, struct_pb2

POOL = descriptor_pool.DescriptorPool()
_LOCK = threading.Lock()
_CLASSES: dict[str, Any] = {}

# google.protobuf.Value/Struct/ListValue stand for `dyn` JSON data in schemas.
_struct_file = descriptor_pb2.FileDescriptorProto()
struct_pb2.DESCRIPTOR.CopyToProto(_struct_file)
POOL.Add(_struct_file)

_FIELD_TYPES = {
    "string": descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
    "int64": descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
    "bool": descriptor_pb2.FieldDescriptorProto.TYPE_BOOL,
    "double": descriptor_pb2.FieldDescriptorProto.TYPE_DOUBLE,
    "bytes": descriptor_pb2.FieldDescriptorProto.TYPE_BYTES,
}


def opaque_type(full_name: str, fields: dict[str, str]) -> tuple[cel.Type, Any]:
    """Declare (once) a message type ``full_name`` with scalar ``fields``.

    ``fields`` maps a field name to one of string, int64, bool, double, bytes
    (prefix with ``repeated `` for a list). Returns the CEL type and the
    Python message class. Declaring the same name twice returns the first.
    """
    with _LOCK:
        if full_name in _CLASSES:
            return cel.Type(full_name), _CLASSES[full_name]
        package, _, name = full_name.rpartition(".")
        fdp = descriptor_pb2.FileDescriptorProto(
            name=f"vpol/opaque/{full_name}.proto", package=package, syntax="proto3"
        )
        msg = fdp.message_type.add(name=name)
        for number, (field_name, kind) in enumerate(fields.items(), start=1):
            repeated = kind.startswith("repeated ")
            kind = kind.removeprefix("repeated ")
            msg.field.add(
                name=field_name,
                number=number,
                type=_FIELD_TYPES[kind],
                label=(
                    descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
                    if repeated
                    else descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
                ),
            )
        POOL.Add(fdp)
        cls = message_factory.GetMessageClass(POOL.FindMessageTypeByName(full_name))
        _CLASSES[full_name] = cls
        return cel.Type(full_name), cls


def add_file(fdp: descriptor_pb2.FileDescriptorProto) -> None:
    """Add a generated file (schema messages) to the pool unless it is there."""
    with _LOCK:
        try:
            POOL.FindFileByName(fdp.name)
        except KeyError:
            POOL.Add(fdp)
