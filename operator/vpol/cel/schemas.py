"""OpenAPI v3 schemas as protobuf message types, so CEL can type-check against them.

The API server type-checks ValidatingAdmissionPolicy expressions with
``object``/``oldObject`` typed by the matched kinds' schemas
(k8s.io/apiserver/pkg/cel/common/schemas.go, ``SchemaDeclType``).
cel-expr-python types structured values through protobuf descriptors, so a
schema becomes a set of generated messages in ``vpol.cel.types.POOL``:

================================================  ==============================================
schema                                            CEL type (protobuf representation)
================================================  ==============================================
object with ``properties``                        message (one field per escaped property name)
object with ``additionalProperties: {schema}``    ``map(string, T)`` (map field)
object with neither, ``additionalProperties: true``  ``map(string, dyn)`` (google.protobuf.Struct)
array with ``items``                              ``list(T)`` (repeated field)
string, format ``date-time`` / ``date``           ``timestamp`` (google.protobuf.Timestamp)
string, format ``duration``                       ``duration`` (google.protobuf.Duration)
string, format ``byte``                           ``bytes``
string (any other format)                         ``string``
integer (any format) / number / boolean           ``int`` / ``double`` / ``bool``
``x-kubernetes-int-or-string``, format
``int-or-string``, ``x-kubernetes-preserve-unknown-fields``,
no type (``oneOf``/``anyOf`` unions such as Quantity)  ``dyn`` (google.protobuf.Value)
================================================  ==============================================

Protobuf cannot nest containers, so a list of lists becomes ``list(list(dyn))``
(repeated ListValue), a map of lists ``map(string, list(dyn))``, a list of maps
``list(map(string, dyn))`` and a map of maps ``map(string, map(string, dyn))``
(Struct): still containers of the right shape, with ``dyn`` elements.

Where this deliberately differs from the API server: Kubernetes drops
properties it cannot type (untyped unions such as Quantity and IntOrString in
the built-in schemas, arrays without items), which makes any access to them an
"undefined field" error; it exposes no fields of objects without properties
(RawExtension, FieldsV1) and only the declared properties of objects with
``x-kubernetes-preserve-unknown-fields``. We type those as ``dyn`` (or
``map(string, dyn)``) instead, so that warnings only point at real mistakes:
at run time those values are plain JSON and the expressions work.

Property names are escaped as Kubernetes does (``apiservercel.Escape``);
names that cannot be escaped are left out, as in Kubernetes. A property whose
name is a CEL reserved word is reachable under both ``__word__`` and
``word`` (Kubernetes >= 1.31 resolves the plain keyword too).

The root of a resource always exposes ``apiVersion``, ``kind`` and
``metadata.name``/``metadata.generateName`` (``WithTypeAndObjectMeta``).

``$ref`` (also wrapped in a one-element ``allOf``) is resolved as a JSON
pointer against the document passed in, so a schema may be a bare schema or
``{"$ref": "#/components/schemas/X", "components": {"schemas": {...}}}``.
Each referenced component becomes one message, which is how recursive
schemas (JSONSchemaProps) terminate.

Generated files are content-addressed (``vpol.schema.h<hash>``) and added to
the pool once; asking again for the same schema returns the same type name.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from google.protobuf import descriptor_pb2, duration_pb2, timestamp_pb2

from vpol.cel import types

FDP = descriptor_pb2.FieldDescriptorProto

#: Bumped whenever the mapping above changes, so cached names change too.
_ALGORITHM = "1"

#: CEL reserved words (the list apiservercel.Escape uses).
CEL_RESERVED: frozenset[str] = frozenset({
    "true", "false", "null", "in", "as", "break", "const", "continue", "else",
    "for", "function", "if", "import", "let", "loop", "package", "namespace",
    "return", "var", "void", "while",
})

_SIMPLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ESCAPABLE = re.compile(r"^[A-Za-z_./-][A-Za-z0-9_./-]*$")
# Leftmost-first alternation, like the Go regexp Kubernetes uses: "___" is
# "__" followed by "_".
_ESCAPE_TOKENS = re.compile(r"__|[./-]")
_ESCAPES = {"__": "__underscores__", ".": "__dot__", "-": "__dash__", "/": "__slash__"}

_VALUE = ".google.protobuf.Value"
_STRUCT = ".google.protobuf.Struct"
_LIST_VALUE = ".google.protobuf.ListValue"
_TIMESTAMP = ".google.protobuf.Timestamp"
_DURATION = ".google.protobuf.Duration"


def escape(name: str) -> str | None:
    """A property name as a CEL identifier, or None when Kubernetes cannot expose it."""
    if not name or name[0].isdigit():
        return None
    if name in CEL_RESERVED:
        return f"__{name}__"
    if not _ESCAPABLE.match(name):
        return None
    if _SIMPLE_NAME.match(name) and "__" not in name:
        return name
    return _ESCAPE_TOKENS.sub(lambda m: _ESCAPES[m.group(0)], name)


_UNESCAPES = {"__underscores__": "__", "__dot__": ".", "__dash__": "-", "__slash__": "/"}
_UNESCAPE_RX = re.compile("|".join(re.escape(k) for k in _UNESCAPES))


def unescape(name: str) -> str:
    """A CEL field name back to the property it stands for (``x__dash__y`` -> ``x-y``): :func:`escape` undone."""
    if name.startswith("__") and name.endswith("__") and name[2:-2] in CEL_RESERVED:
        return name[2:-2]
    return _UNESCAPE_RX.sub(lambda m: _UNESCAPES[m.group(0)], name)


def _add_well_known_files() -> None:
    for module in (timestamp_pb2, duration_pb2):
        fdp = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(fdp)
        types.add_file(fdp)


_add_well_known_files()


# --- field shapes -----------------------------------------------------------


@dataclass(frozen=True)
class _Shape:
    """What a schema node becomes: a scalar, a message, a list or a map."""

    kind: str  # "scalar" | "message" | "list" | "map"
    scalar: int = 0  # FieldDescriptorProto type for scalars
    message: str = ""  # fully qualified (leading dot) for messages
    element: _Shape | None = None  # for list / map


_DYN = _Shape("message", message=_VALUE)
_ANY_MAP = _Shape("message", message=_STRUCT)
_STRING = _Shape("scalar", scalar=FDP.TYPE_STRING)


def _as_element(shape: _Shape) -> _Shape:
    """The shape a container element can have in protobuf (no nested containers)."""
    if shape.kind == "list":
        return _Shape("message", message=_LIST_VALUE)
    if shape.kind == "map":
        return _ANY_MAP
    return shape


class _Builder:
    """Builds one generated file for one schema root."""

    def __init__(self, document: Mapping[str, Any], package: str) -> None:
        self.document = document
        self.package = package
        self.file = descriptor_pb2.FileDescriptorProto(
            name=f"vpol/schema/{package}.proto",
            package=package,
            syntax="proto2",  # proto3 rejects fields whose JSON names collide (fooBar / foo_bar)
            dependency=[
                "google/protobuf/struct.proto",
                "google/protobuf/timestamp.proto",
                "google/protobuf/duration.proto",
            ],
        )
        self.by_ref: dict[str, str] = {}
        self.expanding: set[str] = set()
        self.taken: set[str] = set()

    # -- names

    def _new_message(self, hint: str) -> tuple[descriptor_pb2.DescriptorProto, str]:
        base = re.sub(r"[^A-Za-z0-9_]", "_", hint) or "M"
        if base[0].isdigit():
            base = "M" + base
        name, n = base, 1
        while name in self.taken:
            n += 1
            name = f"{base}{n}"
        self.taken.add(name)
        return self.file.message_type.add(name=name), f".{self.package}.{name}"

    # -- schema navigation

    def resolve(self, ref: str) -> Mapping[str, Any]:
        return resolve_ref(self.document, ref)

    # -- conversion

    def shape(self, node: Mapping[str, Any], hint: str) -> _Shape:
        ref = ref_of(node)
        if ref is not None:
            if ref in self.by_ref:
                return _Shape("message", message=self.by_ref[ref])
            if ref in self.expanding:  # a non-object schema that contains itself
                return _DYN
            target = self.resolve(ref)
            if _is_plain_object(target):
                return self.component_message(ref, target)
            self.expanding.add(ref)
            try:
                return self.shape(target, ref.rsplit("/", 1)[-1].rsplit(".", 1)[-1])
            finally:
                self.expanding.discard(ref)
        if node.get("x-kubernetes-int-or-string") or node.get("format") == "int-or-string":
            return _DYN
        if node.get("x-kubernetes-preserve-unknown-fields"):
            return _DYN
        typ = node.get("type")
        if isinstance(typ, list):  # OpenAPI 3.1 style; take the first non-null
            typ = next((t for t in typ if t != "null"), None)
        if typ == "object":
            additional = node.get("additionalProperties")
            if isinstance(additional, Mapping):
                return _Shape("map", element=_as_element(self.shape(additional, hint + "Value")))
            embedded = bool(node.get("x-kubernetes-embedded-resource"))
            if node.get("properties") or embedded:
                msg, full = self._new_message(hint)
                self.fill(msg, with_type_and_object_meta(node, self) if embedded else node)
                return _Shape("message", message=full)
            return _ANY_MAP
        if typ == "array":
            items = node.get("items")
            if not isinstance(items, Mapping):
                return _Shape("list", element=_DYN)
            return _Shape("list", element=_as_element(self.shape(items, hint + "Item")))
        if typ == "string":
            fmt = node.get("format")
            if fmt in ("date-time", "date"):
                return _Shape("message", message=_TIMESTAMP)
            if fmt == "duration":
                return _Shape("message", message=_DURATION)
            if fmt == "byte":
                return _Shape("scalar", scalar=FDP.TYPE_BYTES)
            return _STRING
        if typ == "integer":
            return _Shape("scalar", scalar=FDP.TYPE_INT64)
        if typ == "number":
            return _Shape("scalar", scalar=FDP.TYPE_DOUBLE)
        if typ == "boolean":
            return _Shape("scalar", scalar=FDP.TYPE_BOOL)
        return _DYN

    def component_message(self, ref: str, target: Mapping[str, Any]) -> _Shape:
        msg, full = self._new_message(ref.rsplit("/", 1)[-1].rsplit(".", 1)[-1])
        self.by_ref[ref] = full  # before filling: recursive references end here
        self.fill(msg, target)
        return _Shape("message", message=full)

    def fill(self, msg: descriptor_pb2.DescriptorProto, node: Mapping[str, Any]) -> None:
        number = 0
        properties = node.get("properties") or {}
        for prop in sorted(properties):
            escaped = escape(prop)
            if escaped is None:
                continue
            sub = properties[prop]
            if not isinstance(sub, Mapping):
                continue
            shape = self.shape(sub, f"{msg.name}_{escaped}")
            names = [escaped] + ([prop] if prop in CEL_RESERVED else [])
            for name in names:
                number += 1
                self._add_field(msg, name, number, shape)

    def _add_field(self, msg: descriptor_pb2.DescriptorProto, name: str, number: int, shape: _Shape) -> None:
        # An explicit json_name keeps the descriptor pool from comparing the
        # default camel-case JSON names of e.g. ``fooBar`` and ``foo_bar``.
        field = msg.field.add(name=name, number=number, json_name=name)
        if shape.kind == "list":
            assert shape.element is not None
            field.label = FDP.LABEL_REPEATED
            _set_type(field, shape.element)
        elif shape.kind == "map":
            assert shape.element is not None
            # The entry must carry the name protoc gives it, or the C++
            # descriptor pool (the one CEL uses) rejects the file.
            entry_name = map_entry_name(name)
            if any(nested.name == entry_name for nested in msg.nested_type):
                field.label = FDP.LABEL_OPTIONAL  # two map fields would share one entry name
                _set_type(field, _ANY_MAP)
                return
            key, value = add_map_entry(msg, field, entry_name, f"{self.package}.{msg.name}")
            key.type = FDP.TYPE_STRING
            _set_type(value, shape.element)
        else:
            field.label = FDP.LABEL_OPTIONAL
            _set_type(field, shape)

    def root(self, node: Mapping[str, Any], resource_root: bool) -> str:
        ref = ref_of(node)
        target = self.resolve(ref) if ref is not None else node
        if resource_root:
            completed = with_type_and_object_meta(target, self)
            if completed is not target:
                msg, full = self._new_message("Root")
                self.fill(msg, completed)
                return full[1:]
        shape = self.shape(node, "Root")
        if shape.kind == "message":
            return shape.message[1:]
        # A map or list at the root (never a Kubernetes object): leave it dyn.
        return _VALUE[1:]


def _set_type(field: descriptor_pb2.FieldDescriptorProto, shape: _Shape) -> None:
    if shape.kind == "scalar":
        field.type = shape.scalar  # type: ignore[assignment]
    else:
        field.type = FDP.TYPE_MESSAGE
        field.type_name = shape.message


def add_map_entry(msg: descriptor_pb2.DescriptorProto, field: descriptor_pb2.FieldDescriptorProto,
                  entry_name: str, scope: str) -> tuple[descriptor_pb2.FieldDescriptorProto,
                                                         descriptor_pb2.FieldDescriptorProto]:
    """Make ``field`` of ``msg`` (full name ``scope``) a map: adds the nested entry message
    ``entry_name`` and returns its key and value fields, for the caller to type."""
    entry = msg.nested_type.add(name=entry_name)
    entry.options.map_entry = True
    key = entry.field.add(name="key", number=1, label=FDP.LABEL_OPTIONAL)
    value = entry.field.add(name="value", number=2, label=FDP.LABEL_OPTIONAL)
    field.label = FDP.LABEL_REPEATED
    field.type = FDP.TYPE_MESSAGE
    field.type_name = f".{scope}.{entry_name}"
    return key, value


def map_entry_name(field_name: str) -> str:
    """The nested entry message name protoc derives for a map field (``MapEntryName``)."""
    out = []
    upper_next = True
    for ch in field_name:
        if ch == "_":
            upper_next = True
        elif upper_next:
            out.append(ch.upper() if "a" <= ch <= "z" else ch)
            upper_next = False
        else:
            out.append(ch)
    return "".join(out) + "Entry"


def resolve_ref(document: Mapping[str, Any], ref: str) -> Mapping[str, Any]:
    """The schema a local reference (``#/components/schemas/X``) points to in ``document``."""
    node: Any = document
    if not ref.startswith("#"):
        raise ValueError(f"only local references are supported: {ref}")
    for part in ref[1:].split("/")[1:]:
        node = node[part.replace("~1", "/").replace("~0", "~")]
    if not isinstance(node, Mapping):
        raise ValueError(f"reference {ref} does not point to a schema")
    return node


def deref(document: Mapping[str, Any], node: Mapping[str, Any]) -> Mapping[str, Any]:
    """``node`` with references followed until a schema that is not one."""
    for _ in range(64):
        ref = ref_of(node)
        if ref is None:
            break
        node = resolve_ref(document, ref)
    return node


def list_type(node: Mapping[str, Any]) -> tuple[str, tuple[str, ...]]:
    """How an array schema merges: ("atomic" | "set" | "map", list-map keys), as kube-openapi's schemaconv
    reads it (``x-kubernetes-list-type`` first, else a patch strategy ``merge`` with or without a merge
    key, else atomic)."""
    kind = node.get("x-kubernetes-list-type")
    keys = tuple(node.get("x-kubernetes-list-map-keys") or ())
    if kind in ("atomic", "set", "map"):
        return str(kind), keys
    strategy = str(node.get("x-kubernetes-patch-strategy") or "").split(",")
    merge_key = node.get("x-kubernetes-patch-merge-key")
    if "merge" in strategy and "retainKeys" not in strategy:
        return ("map", (str(merge_key),)) if merge_key else ("set", ())
    return "atomic", ()


def ref_of(node: Mapping[str, Any]) -> str | None:
    """The reference a schema stands for (``$ref``, or one wrapped in ``allOf``)."""
    ref = node.get("$ref")
    if isinstance(ref, str):
        return ref
    for sub in node.get("allOf") or ():
        if isinstance(sub, Mapping):
            inner = ref_of(sub)
            if inner is not None:
                return inner
    return None


def _is_plain_object(node: Mapping[str, Any]) -> bool:
    """An object schema with properties (and no map values): one shared message per component."""
    if ref_of(node) is not None:
        return False
    if node.get("x-kubernetes-preserve-unknown-fields") or node.get("x-kubernetes-int-or-string"):
        return False
    return node.get("type") == "object" and bool(node.get("properties")) and not isinstance(
        node.get("additionalProperties"), Mapping
    )


def _is_type(node: Any, typ: str, builder: _Builder | None) -> bool:
    if not isinstance(node, Mapping):
        return False
    ref = ref_of(node)
    if ref is not None and builder is not None:
        node = builder.resolve(ref)
    return node.get("type") == typ


def with_type_and_object_meta(node: Mapping[str, Any], builder: _Builder | None = None) -> Mapping[str, Any]:
    """``node`` if it declares apiVersion, kind and metadata.name/generateName, else a completed copy.

    Mirrors Kubernetes' ``WithTypeAndObjectMeta``: when anything is missing,
    ``metadata`` is replaced by an object with just ``name`` and ``generateName``.
    """
    props = node.get("properties") or {}
    meta = props.get("metadata")
    meta_props: Mapping[str, Any] = {}
    if isinstance(meta, Mapping):
        ref = ref_of(meta)
        resolved = builder.resolve(ref) if (ref is not None and builder is not None) else meta
        meta_props = resolved.get("properties") or {}
    if (
        _is_type(props.get("kind"), "string", builder)
        and _is_type(props.get("apiVersion"), "string", builder)
        and _is_type(meta, "object", builder)
        and _is_type(meta_props.get("name"), "string", builder)
        and _is_type(meta_props.get("generateName"), "string", builder)
    ):
        return node
    string = {"type": "string"}
    completed = dict(node)
    completed["type"] = "object"
    completed["properties"] = {
        **props,
        "kind": string,
        "apiVersion": string,
        "metadata": {"type": "object", "properties": {"name": string, "generateName": string}},
    }
    return completed


# --- content addressing -----------------------------------------------------


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, Mapping):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def fingerprint(schema: Mapping[str, Any], resource_root: bool = True) -> str:
    """A hash of the schema and every component it reaches."""
    resolver = _Builder(schema, "x")
    root = {k: v for k, v in schema.items() if k != "components"}
    seen: dict[str, Any] = {}
    pending = list(_refs(root))
    while pending:
        ref = pending.pop()
        if ref in seen:
            continue
        target = resolver.resolve(ref)
        seen[ref] = target
        pending.extend(_refs(target))
    blob = json.dumps([_ALGORITHM, resource_root, root, sorted(seen.items())], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


_LOCK = threading.Lock()
_BY_HASH: dict[str, str] = {}
#: id(schema) -> (schema, resource_root, name): skips hashing for a dict seen before.
_BY_ID: dict[int, tuple[Mapping[str, Any], bool, str]] = {}
_MAX_BY_ID = 4096


def message_type(schema: Mapping[str, Any], *, resource_root: bool = True) -> str:
    """The full name of the message typing ``schema`` (built and added to the pool once)."""
    cached = _BY_ID.get(id(schema))
    if cached is not None and cached[0] is schema and cached[1] == resource_root:
        return cached[2]
    digest = fingerprint(schema, resource_root)
    with _LOCK:
        name = _BY_HASH.get(digest)
        if name is None:
            builder = _Builder(schema, f"vpol.schema.h{digest}")
            name = builder.root(schema, resource_root)
            types.add_file(builder.file)
            _BY_HASH[digest] = name
        if len(_BY_ID) >= _MAX_BY_ID:
            _BY_ID.clear()
        _BY_ID[id(schema)] = (schema, resource_root, name)
    return name
