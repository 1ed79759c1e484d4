"""Schema types for the literals of mutation expressions (``Object.spec.containers{...}``).

The API server types a MutatingAdmissionPolicy's ``Object`` literals by the
matched kind's schema: ``Object`` is the kind, ``Object.spec`` the type of its
``spec``, ``Object.spec.containers`` the type of one element of
``spec.containers`` (k8s.io/apiserver's DeclType names are schema paths), and
``JSONPatch`` has ``op``, ``path``, ``from`` and ``value``.

Protobuf, which types structured values for cel-expr-python, cannot declare a
message ``Object.spec`` next to a field ``spec`` of ``Object`` (one scope).
CEL resolves a type name against every prefix of the environment's
*container*, most qualified first, so each path length gets its own level:
with the container ``vpolac.h<digest>.l0.….l15``, ``Object`` is declared at
the full container, ``Object.spec`` one level up
(``vpolac.h<digest>.l0.….l14.Object.spec``, where ``…l14.Object`` is a
package, not a message), ``Object.spec.containers`` two levels up, and so on.
The expression is checked exactly as written, so positions are the user's.

Only the paths an expression names get messages. Scalar fields carry their
schema types (the API server's structured-merge conversion rejects a string
where the schema wants a number, on every object of the kind); object-valued
fields are ``dyn``, as the API server's ``Object`` field types are, so a
nested literal and a plain map literal are both accepted there.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from google.protobuf import descriptor_pb2

from vpol.cel import schemas, types
from vpol.cel.compat.syntax import literals
from vpol.cel.schemas import unescape

FDP = descriptor_pb2.FieldDescriptorProto

#: Longest literal type name supported (``Object`` + 15 path segments).
MAX_DEPTH = 16
JSON_PATCH_TYPE = "vpolac.JSONPatch"

_LOCK = threading.Lock()
_BUILT: dict[str, str] = {}


def _json_patch_file() -> None:
    fdp = descriptor_pb2.FileDescriptorProto(name="vpol/objects/jsonpatch.proto", package="vpolac", syntax="proto2",
                                             dependency=["google/protobuf/struct.proto"])
    msg = fdp.message_type.add(name="JSONPatch")
    for number, name in enumerate(("op", "path", "from"), start=1):
        msg.field.add(name=name, number=number, json_name=name, type=FDP.TYPE_STRING, label=FDP.LABEL_OPTIONAL)
    msg.field.add(name="value", number=4, json_name="value", type=FDP.TYPE_MESSAGE, label=FDP.LABEL_OPTIONAL,
                  type_name=".google.protobuf.Value")
    types.add_file(fdp)


_json_patch_file()


def _container_parts(digest: str) -> list[str]:
    return ["vpolac", f"h{digest}"] + [f"l{i}" for i in range(MAX_DEPTH)]


def _package(parts: list[str], path: tuple[str, ...]) -> str:
    """The package holding the message for ``path`` (``path[-1]`` is the message name)."""
    return ".".join(parts[: len(parts) - len(path) + 1] + list(path[:-1]))


class _Schema:
    """Navigation of one kind's schema by CEL field names."""

    def __init__(self, document: Mapping[str, Any]) -> None:
        self.document = document

    def resolve_ref(self, ref: str) -> Mapping[str, Any]:
        return schemas.resolve_ref(self.document, ref)

    def resolve(self, node: Mapping[str, Any]) -> Mapping[str, Any]:
        return schemas.deref(self.document, node)

    def _meta(self, node: Mapping[str, Any]) -> Mapping[str, Any]:
        return schemas.with_type_and_object_meta(node, _RefResolver(self))  # type: ignore[arg-type]

    def root(self) -> Mapping[str, Any]:
        return self._meta(self.resolve(self.document))

    def properties(self, node: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
        """CEL field name -> schema of the property (reserved words under both spellings)."""
        out: dict[str, Mapping[str, Any]] = {}
        node = self.resolve(node)
        if node.get("x-kubernetes-embedded-resource"):
            node = self._meta(node)
        for prop, sub in (node.get("properties") or {}).items():
            escaped = schemas.escape(prop)
            if escaped is None or not isinstance(sub, Mapping):
                continue
            out[escaped] = sub
            if prop in schemas.CEL_RESERVED:
                out[prop] = sub
        return out

    def object_node(self, node: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """The object schema a literal of this property builds (a list's element), if it is one."""
        node = self.resolve(node)
        if node.get("type") == "array" and isinstance(node.get("items"), Mapping):
            node = self.resolve(node["items"])
        if node.get("x-kubernetes-preserve-unknown-fields") or node.get("x-kubernetes-int-or-string"):
            return None
        if node.get("type") == "object" and (node.get("properties") or node.get("x-kubernetes-embedded-resource")):
            return node
        return None

    def at(self, path: tuple[str, ...]) -> Mapping[str, Any] | None:
        node: Mapping[str, Any] | None = self.root()
        for segment in path[1:]:
            if node is None:
                return None
            sub = self.properties(node).get(segment)
            node = self.object_node(sub) if sub is not None else None
        return node


class _RefResolver:
    """What ``schemas.with_type_and_object_meta`` needs of a builder: ``resolve(ref)``."""

    def __init__(self, schema: _Schema) -> None:
        self.resolve = schema.resolve_ref


def _scalar_field(field: descriptor_pb2.FieldDescriptorProto, node: Mapping[str, Any]) -> None:
    """Type ``field`` for a non-object schema ``node`` (scalars, Quantity-like unions, maps)."""
    if node.get("x-kubernetes-int-or-string") or node.get("x-kubernetes-preserve-unknown-fields"):
        field.type, field.type_name = FDP.TYPE_MESSAGE, ".google.protobuf.Value"
        return
    typ = node.get("type")
    fmt = node.get("format")
    if typ == "string":
        if fmt in ("date-time", "date"):
            field.type, field.type_name = FDP.TYPE_MESSAGE, ".google.protobuf.Timestamp"
        elif fmt == "duration":
            field.type, field.type_name = FDP.TYPE_MESSAGE, ".google.protobuf.Duration"
        elif fmt == "byte":
            field.type = FDP.TYPE_BYTES
        else:
            field.type = FDP.TYPE_STRING
    elif typ == "integer":
        field.type = FDP.TYPE_INT64
    elif typ == "number":
        field.type = FDP.TYPE_DOUBLE
    elif typ == "boolean":
        field.type = FDP.TYPE_BOOL
    elif typ == "object":
        field.type, field.type_name = FDP.TYPE_MESSAGE, ".google.protobuf.Struct"
    else:
        field.type, field.type_name = FDP.TYPE_MESSAGE, ".google.protobuf.Value"


def _digest(document: Mapping[str, Any], paths: frozenset[tuple[str, ...]]) -> str:
    blob = json.dumps([schemas.fingerprint(document), sorted(paths)], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def untyped_literal_paths(document: Mapping[str, Any], paths: Iterable[tuple[str, ...]]) -> frozenset[tuple[str, ...]]:
    """The ``Object...`` literal paths (split at dots) that name a field of ``document`` whose value is not an
    object of the schema: a map such as ``Object.metadata.labels``, or an int-or-string or preserve-unknown-fields
    value. Kyverno's MutatingPolicy compiler and the API server resolve ``Object.*`` names when the expression
    runs, so literals of these build maps in both (``Object.metadata.labels{app: 'x'}``). A path the schema does
    not have at all is not one of them."""
    schema = _Schema(document)
    out: set[tuple[str, ...]] = set()
    for path in paths:
        if len(path) < 2 or path[0] != "Object" or len(path) > MAX_DEPTH or schema.at(path) is not None:
            continue
        parent = schema.at(path[:-1])
        if parent is not None and path[-1] in schema.properties(parent):
            out.add(path)
    return frozenset(out)


def construction_container(document: Mapping[str, Any], paths: Iterable[tuple[str, ...]]) -> str:
    """The CEL container under which ``Object...`` literals of ``paths`` type-check against ``document``.

    ``paths`` are the literal type names an expression uses, split at dots
    (``("Object", "spec")``); names that do not start with ``Object`` are
    ignored, names the schema does not have are left undeclared (the checker
    then reports them where they are written).
    """
    wanted = frozenset(p for p in paths if p and p[0] == "Object" and len(p) <= MAX_DEPTH)
    digest = _digest(document, wanted)
    parts = _container_parts(digest)
    container = ".".join(parts)
    with _LOCK:
        if digest in _BUILT:
            return _BUILT[digest]
        schema = _Schema(document)
        files: dict[str, descriptor_pb2.FileDescriptorProto] = {}

        def message(path: tuple[str, ...]) -> descriptor_pb2.DescriptorProto:
            package = _package(parts, path)
            fdp = files.get(package)
            if fdp is None:
                fdp = descriptor_pb2.FileDescriptorProto(
                    name=f"vpol/objects/{package}.proto", package=package, syntax="proto2",
                    dependency=["google/protobuf/struct.proto", "google/protobuf/timestamp.proto",
                                "google/protobuf/duration.proto"])
                files[package] = fdp
            return fdp.message_type.add(name=path[-1])

        for path in sorted(wanted | {("Object",)}):
            node = schema.at(path)
            if node is None:
                continue  # not in the schema: left undeclared, reported where it is written
            msg = message(path)
            for number, (name, sub) in enumerate(sorted(schema.properties(node).items()), start=1):
                field = msg.field.add(name=name, number=number, json_name=name, label=FDP.LABEL_OPTIONAL)
                resolved = schema.resolve(sub)
                if schema.object_node(sub) is not None:
                    # Objects (and lists of them) are dyn, as in the API server: a nested literal of
                    # the right path or a plain map literal both convert to the same object.
                    field.type, field.type_name = FDP.TYPE_MESSAGE, ".google.protobuf.Value"
                elif resolved.get("type") == "array":
                    items = resolved.get("items")
                    item = schema.resolve(items) if isinstance(items, Mapping) else {}
                    if item.get("type") in ("array", "object") or not item:
                        field.type, field.type_name = FDP.TYPE_MESSAGE, ".google.protobuf.Value"
                    else:
                        _scalar_field(field, item)
                        field.label = FDP.LABEL_REPEATED
                elif resolved.get("type") == "object" and isinstance(resolved.get("additionalProperties"), Mapping):
                    value_node = schema.resolve(resolved["additionalProperties"])
                    entry_name = schemas.map_entry_name(name)
                    key, value = schemas.add_map_entry(msg, field, entry_name, _package(parts, path) + "." + path[-1])
                    key.type = FDP.TYPE_STRING
                    if value_node.get("type") in ("array", "object"):
                        value.type, value.type_name = FDP.TYPE_MESSAGE, ".google.protobuf.Value"
                    else:
                        _scalar_field(value, value_node)
                else:
                    _scalar_field(field, resolved)
        for fdp in files.values():  # messages refer only to well-known types: any order
            types.add_file(fdp)
        _BUILT[digest] = container
    return container


def atomic_assignments(document: Mapping[str, Any], src: str) -> list[tuple[int, str]]:
    """Fields of ``Object...`` literals in ``src`` that set an atomic list, map or struct of the kind.

    The API server refuses such apply configurations on every object ("may not
    mutate atomic arrays, maps or structs"); each is returned as (offset of the
    field name in ``src``, field path such as ``.spec.tolerations``).
    """
    schema = _Schema(document)
    out: list[tuple[int, str]] = []
    for lit in literals(src):
        if lit.name[0] != "Object":
            continue
        node = schema.at(lit.name)
        if node is None:
            continue
        props = schema.properties(node)
        for token, _optional in lit.fields:
            sub = props.get(token.text)
            if sub is None:
                continue
            resolved = schema.resolve(sub)
            atomic = (resolved.get("type") == "array" and schemas.list_type(resolved)[0] == "atomic") or (
                resolved.get("type") == "object" and resolved.get("x-kubernetes-map-type") == "atomic")
            if atomic:
                out.append((token.start, "." + ".".join((*lit.name[1:], unescape(token.text)))))
    return out
