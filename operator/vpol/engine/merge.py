"""Merging an apply configuration into an object, as a MutatingAdmissionPolicy does.

The API server (k8s.io/apiserver .../policy/mutating/patch/smd.go) converts
the object and the apply configuration to typed values with the kind's
schema, refuses configurations that set atomic values, and merges them with
structured-merge-diff's ``TypedValue.Merge`` (no field ownership involved).
This module does the same on plain JSON data, from the OpenAPI schema's list
and map annotations:

- structs and maps: keys of both merged, the configuration's values win;
  ``x-kubernetes-map-type: atomic`` maps and structs are replaced whole;
- lists: ``x-kubernetes-list-type`` ``map`` (merged by the list-map keys),
  ``set`` (merged by value) or ``atomic`` (replaced); without a list type, a
  ``x-kubernetes-patch-strategy: merge`` list with a merge key is a map list,
  one without a key a set, anything else atomic (kube-openapi's schemaconv);
  the order of merged items is structured-merge-diff's (see ``_merge_list``);
- objects without properties and ``x-kubernetes-preserve-unknown-fields``
  (and everything under them) are deduced from the data: maps merge, lists
  are atomic;
- a configuration that sets an atomic list, map or struct is refused
  ("may not mutate atomic arrays, maps or structs"), as are unknown fields,
  wrong scalar types, nulls and duplicate list-map keys.

Without a schema (a kind vpol has no schema for offline) the whole object is
deduced. Hand-written: no Python implementation of structured-merge-diff
exists, and the semantics (including item order) must be the API server's.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vpol.cel.schemas import deref, list_type

_DEDUCED: Mapping[str, Any] = {"x-kubernetes-preserve-unknown-fields": True}


class MergeError(Exception):
    """The apply configuration cannot be applied; the message says why and where."""


@dataclass(frozen=True)
class _Node:
    """One schema node, resolved: what kind of value it types and how it merges."""

    kind: str  # "struct" | "map" | "list" | "scalar" | "deduced"
    schema: Mapping[str, Any]
    atomic: bool = False
    list_type: str = "atomic"  # for lists: "atomic" | "set" | "map"
    keys: tuple[str, ...] = ()


class _Schema:
    def __init__(self, document: Mapping[str, Any] | None) -> None:
        self.document = document

    def node(self, schema: Mapping[str, Any] | None) -> _Node:
        if schema is None or self.document is None:
            return _Node("deduced", _DEDUCED)
        schema = deref(self.document, schema)
        if not schema:
            # An empty schema is what trimming leaves of a scalar union (Quantity: oneOf string/number).
            return _Node("scalar", schema)
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            return _Node("deduced", _DEDUCED)
        typ = schema.get("type")
        if schema.get("x-kubernetes-int-or-string") or typ in ("string", "integer", "number", "boolean"):
            return _Node("scalar", schema)
        if typ == "array":
            kind, keys = list_type(schema)
            return _Node("list", schema, atomic=kind == "atomic", list_type=kind, keys=keys)
        atomic = schema.get("x-kubernetes-map-type") == "atomic"
        if schema.get("properties"):
            return _Node("struct", schema, atomic=atomic)
        if isinstance(schema.get("additionalProperties"), Mapping):
            return _Node("map", schema, atomic=atomic)
        if typ == "object" or typ is None and not schema:
            return _Node("deduced", _DEDUCED)
        return _Node("scalar", schema)  # untyped unions (Quantity): any scalar

    def field(self, node: _Node, key: str) -> _Node | None:
        """The node of ``key`` inside a struct/map/deduced node (None: not declared)."""
        if node.kind == "deduced":
            return node
        if node.kind == "struct":
            sub = (node.schema.get("properties") or {}).get(key)
            if sub is None:
                additional = node.schema.get("additionalProperties")
                return self.node(additional) if isinstance(additional, Mapping) else None
            return self.node(sub)
        additional = node.schema.get("additionalProperties")
        return self.node(additional if isinstance(additional, Mapping) else None)

    def item(self, node: _Node) -> _Node:
        if node.kind == "deduced":
            return node
        items = node.schema.get("items")
        return self.node(items if isinstance(items, Mapping) else None)


def _kind_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "map"
    return type(value).__name__


def _key_element(keys: tuple[str, ...], item: Any, where: str) -> tuple[Any, ...]:
    """A list-map item's identity (its key fields' values), as structured-merge-diff's path element."""
    if not isinstance(item, dict):
        raise MergeError(f"{where}: expected map, got {_kind_of(item)}")
    return tuple((k, _hashable(item.get(k))) for k in keys)


def _hashable(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    return (type(value).__name__ if isinstance(value, bool) else "v", value)


def _describe_key(pe: tuple[Any, ...]) -> str:
    parts = []
    for k, v in pe:
        raw = v[1] if isinstance(v, tuple) and len(v) == 2 and v[0] in ("v", "bool") else v
        parts.append(f'{k}="{raw}"' if isinstance(raw, str) else f"{k}={raw}")
    return "[" + ",".join(parts) + "]"


def _null_paths(value: Any, where: str, out: set[str]) -> None:
    """Add the places (as _Merger.validate names them) where ``value`` holds a null."""
    if value is None:
        out.add(where)
    elif isinstance(value, dict):
        for k, v in value.items():
            _null_paths(v, f"{where}.{k}", out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _null_paths(v, f"{where}[{i}]", out)


def _copied_nulls(patch: Any, obj: Any, where: str = "", out: set[str] | None = None) -> set[str]:
    """The nulls of ``patch`` inside a map or list it carries over from ``obj`` unchanged, at the same place.

    Kyverno's engine hands such a value to the patcher as the object's own data, where a null is an absent
    field; a null the expression produced (a literal, or a field read on its own) is a value of no type there,
    which the patcher refuses, as the API server does."""
    out = set() if out is None else out
    if isinstance(patch, (dict, list)) and patch == obj:
        _null_paths(patch, where, out)
    elif isinstance(patch, dict) and isinstance(obj, dict):
        for k, v in patch.items():
            if k in obj:
                _copied_nulls(v, obj[k], f"{where}.{k}", out)
    elif isinstance(patch, list) and isinstance(obj, list):
        for i, (v, o) in enumerate(zip(patch, obj)):
            _copied_nulls(v, o, f"{where}[{i}]", out)
    return out


class _Merger:
    def __init__(self, schema: _Schema, *, live: bool = False, object_nulls: frozenset[str] = frozenset()) -> None:
        self.schema = schema
        #: Validating the live object: duplicates are tolerated and atomic values are no concern.
        self.live = live
        #: Nulls the configuration carries inside a value copied whole from the object (_copied_nulls):
        #: absent fields, as in Kyverno's engine; any other null is refused.
        self.object_nulls = object_nulls
        self.errors: list[str] = []
        self.atomics: list[str] = []

    # -- the configuration's own checks (ObjectToTyped + validatePatch)

    def validate(self, node: _Node, value: Any, where: str, inside_deduced: bool = False) -> None:
        if value is None and (self.live or where in self.object_nulls):
            return  # a null in the live object (or copied from it) is an absent field
        if value is None:
            self.errors.append(f"{where or '.'}: expected {self._expected(node)}, got null")
            return
        if node.kind == "scalar":
            self._scalar(node, value, where)
            return
        if node.kind == "deduced":
            if isinstance(value, dict):
                for k, v in value.items():
                    self.validate(node, v, f"{where}.{k}", True)
            elif isinstance(value, list):
                for i, v in enumerate(value):
                    self.validate(node, v, f"{where}[{i}]", True)
            return
        if node.kind in ("struct", "map"):
            if not isinstance(value, dict):
                self.errors.append(f"{where or '.'}: expected map, got {_kind_of(value)}")
                return
            if node.atomic and not inside_deduced:
                self.atomics.append(where or ".")
            for k, v in value.items():
                sub = self.schema.field(node, k)
                if sub is None:
                    self.errors.append(f"{where}.{k}: field not declared in schema")
                    continue
                # Atomic checks follow declared struct fields only, not map values (smd.go findAtomics).
                self.validate(sub, v, f"{where}.{k}", inside_deduced or node.kind == "map")
            return
        if node.kind == "list":
            if not isinstance(value, list):
                self.errors.append(f"{where or '.'}: expected list, got {_kind_of(value)}")
                return
            if node.atomic and not inside_deduced:
                self.atomics.append(where)
            item = self.schema.item(node)
            seen: set[Any] = set()
            for i, v in enumerate(value):
                if node.list_type == "map":
                    try:
                        pe = _key_element(node.keys, v, f"{where}[{i}]")
                    except MergeError as exc:
                        self.errors.append(str(exc))
                        continue
                    if pe in seen and not self.live:
                        self.errors.append(f"{where}: duplicate entries for key {_describe_key(pe)}")
                        continue
                    seen.add(pe)
                    self.validate(item, v, f"{where}[{i}]", inside_deduced)
                else:
                    if node.list_type == "set":
                        h = _hashable(v)
                        if h in seen and not self.live:
                            self.errors.append(f"{where}: duplicate entries for key [={v}]")
                            continue
                        seen.add(h)
                    self.validate(item, v, f"{where}[{i}]", inside_deduced)

    @staticmethod
    def _expected(node: _Node) -> str:
        if node.kind in ("struct", "map"):
            return "map"
        if node.kind == "list":
            return "list"
        typ = node.schema.get("type")
        return {"integer": "numeric (int or float)", "number": "numeric (int or float)", "boolean": "boolean",
                "string": "string"}.get(str(typ), "scalar")

    def _scalar(self, node: _Node, value: Any, where: str) -> None:
        typ = node.schema.get("type")
        if node.schema.get("x-kubernetes-int-or-string") or node.schema.get("format") == "int-or-string":
            # structured-merge-diff types IntOrString as an untyped atomic value: any value, replaced whole (an
            # object carrying a list there still converts, as Kyverno's engine shows); other untyped unions
            # (Quantity) only take scalars.
            ok = True
        elif typ == "string":
            ok = isinstance(value, str)
        elif typ in ("integer", "number"):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        elif typ == "boolean":
            ok = isinstance(value, bool)
        else:
            ok = not isinstance(value, (dict, list))
        if not ok:
            self.errors.append(f"{where}: expected {self._expected(node)}, got {_kind_of(value)}")

    # -- TypedValue.Merge

    def merge(self, node: _Node, lhs: Any, rhs: Any) -> Any:
        if rhs is None:
            return copy.deepcopy(lhs)
        if lhs is None:
            return copy.deepcopy(rhs)
        if node.kind == "deduced":  # maps merge, lists and scalars are replaced
            if isinstance(rhs, dict) and isinstance(lhs, dict) and (lhs or rhs):
                return self._merge_map(node, lhs, rhs)
            return copy.deepcopy(rhs)
        if node.kind in ("struct", "map") and isinstance(lhs, dict) and isinstance(rhs, dict):
            if node.atomic or (not lhs and not rhs):
                return copy.deepcopy(rhs)
            return self._merge_map(node, lhs, rhs)
        if node.kind == "list" and isinstance(lhs, list) and isinstance(rhs, list):
            if node.atomic or (not lhs and not rhs):
                return copy.deepcopy(rhs)
            return self._merge_list(node, lhs, rhs)
        return copy.deepcopy(rhs)

    def _merge_map(self, node: _Node, lhs: dict[str, Any], rhs: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in [*lhs, *(k for k in rhs if k not in lhs)]:
            sub = self.schema.field(node, key) or _Node("deduced", _DEDUCED)
            out[key] = self.merge(sub, lhs.get(key), rhs.get(key)) if key in rhs else copy.deepcopy(lhs[key])
        return out

    def _identity(self, node: _Node, item: Any) -> Any:
        if node.list_type == "map":
            return _key_element(node.keys, item, "")
        return _hashable(item)

    def _merge_list(self, node: _Node, lhs: list[Any], rhs: list[Any]) -> list[Any]:
        """structured-merge-diff's visitListItems, step for step (the order of the result is its order)."""
        item_node = self.schema.item(node)
        rhs_pes = [self._identity(node, v) for v in rhs]
        observed_rhs = dict(zip(rhs_pes, rhs))
        lhs_pes: list[Any] = []
        observed_lhs: dict[Any, Any] = {}
        for v in lhs:
            try:
                pe = self._identity(node, v)
            except MergeError:
                continue  # an item without its keys cannot be addressed; structured-merge-diff drops it too
            # Duplicates in the live object are tolerated; they are not merged with the new value.
            observed_lhs[pe] = None if pe in observed_lhs else v
            lhs_pes.append(pe)
        lhs_items = [v for v in lhs if self._safe_identity(node, v) is not None]
        shared = [pe for pe in rhs_pes if pe in observed_lhs]
        next_shared = shared.pop(0) if shared else None
        merged_rhs: set[Any] = set()
        out: list[Any] = []
        li = ri = 0
        while li < len(lhs_pes) or ri < len(rhs_pes):
            if li < len(lhs_pes) and ri < len(rhs_pes):
                pe = lhs_pes[li]
                if pe == rhs_pes[ri]:
                    merged_rhs.add(pe)
                    out.append(self.merge(item_node, observed_lhs.get(pe), observed_rhs[pe]))
                    li += 1
                    ri += 1
                    next_shared = shared.pop(0) if shared else None
                    continue
                if pe in observed_rhs and next_shared is not None and next_shared != pe:
                    li += 1
                    continue
            if li < len(lhs_pes):
                pe = lhs_pes[li]
                if pe not in observed_rhs:
                    out.append(copy.deepcopy(lhs_items[li]))
                    li += 1
                    continue
                if pe in merged_rhs:
                    li += 1
            if ri < len(rhs_pes):
                pe = rhs_pes[ri]
                merged_rhs.add(pe)
                out.append(self.merge(item_node, observed_lhs.get(pe), observed_rhs[pe]))
                ri += 1
                if next_shared is not None and next_shared == pe:
                    next_shared = shared.pop(0) if shared else None
        return out

    def _safe_identity(self, node: _Node, item: Any) -> Any:
        try:
            return self._identity(node, item)
        except MergeError:
            return None


def apply_configuration(original: dict[str, Any], configuration: Any,
                        schema: Mapping[str, Any] | None, *, replace_atomic: bool = False) -> dict[str, Any]:
    """``original`` with ``configuration`` merged in (a new object; the inputs are not changed).

    ``schema`` is the kind's OpenAPI document (``Discovery.schema``), or None
    to merge as an untyped object. Raises MergeError as the API server refuses.
    ``replace_atomic``: atomic values set by the configuration replace the object's whole, as server-side apply
    does (Kyverno's ``useServerSideApply``), instead of being refused as a MutatingAdmissionPolicy refuses them.
    """
    if not isinstance(configuration, dict):
        raise MergeError(f"apply configuration must be an object, not {_kind_of(configuration)}")
    types = _Schema(schema)
    root = types.node(schema) if schema is not None else _Node("deduced", _DEDUCED)
    # apiVersion and kind are the object's own (the API server sets the request's kind on the patch).
    body = {k: v for k, v in configuration.items() if k not in ("apiVersion", "kind")}
    merger = _Merger(types, object_nulls=frozenset(_copied_nulls(body, original)))
    merger.validate(root, body, "")
    if merger.errors:
        raise MergeError("failed to convert patch object to typed object: " + "; ".join(merger.errors))
    # The object itself must fit its schema too (the API server converts both; only offline input can fail).
    live = _Merger(types, live=True)
    live.validate(root, {k: v for k, v in original.items() if k not in ("apiVersion", "kind")}, "")
    if live.errors:
        raise MergeError("failed to convert original object to typed object: " + "; ".join(live.errors))
    if merger.atomics and not replace_atomic:
        raise MergeError("invalid ApplyConfiguration: may not mutate atomic arrays, maps or structs: "
                         + ", ".join(merger.atomics))
    merged = merger.merge(root, original, body)
    return merged if isinstance(merged, dict) else dict(original)
