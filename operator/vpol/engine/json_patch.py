"""JSON patches as a MutatingAdmissionPolicy applies them.

The API server applies ``JSONPatch`` mutations with evanphx/json-patch v4
(k8s.io/apiserver .../policy/mutating/patch/json_patch.go), whose behaviour
differs from RFC 6902 in ways users rely on:

- ``replace`` of a missing object member adds it;
- negative array indices count from the end (``add`` at ``-1`` appends);
- ``add`` at index ``len`` appends, ``-`` appends;
- a failed ``test`` is not an error: the whole patch list of that mutation
  is dropped and the object stays as it was (``PatchTestFailed``);
- ``test`` of a missing member whose parent exists compares with null.

Hand-written for that reason: the ``jsonpatch`` package implements RFC 6902
strictly (a ``replace`` of a missing member is an error there, negative
indices are refused) and cannot be configured to do otherwise.
"""

from __future__ import annotations

import copy
from typing import Any


class PatchError(Exception):
    """A patch operation cannot be applied (the mutation fails)."""


class PatchTestFailed(Exception):
    """A ``test`` operation did not hold: the mutation is skipped, not failed."""


def _tokens(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f'invalid path "{path}": must start with "/"')
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


def _index(token: str, length: int, *, adding: bool) -> int:
    try:
        index = int(token)
    except ValueError:
        raise PatchError(f"Unable to access invalid index: {token}: invalid index") from None
    if index < 0:
        index += length + 1 if adding else length
    limit = length if adding else length - 1
    if index < 0 or index > limit:
        raise PatchError(f"Unable to access invalid index: {token}: invalid index")
    return index


def _container(doc: Any, tokens: list[str], op: str, path: str) -> Any:
    """The object or array holding the last token of ``tokens``."""
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token != "-":
            try:
                node = node[_index(token, len(node), adding=False)]
            except PatchError:
                node = None
        else:
            node = None
        if not isinstance(node, (dict, list)):
            raise PatchError(f'{op} operation does not apply: doc is missing path: "{path}": missing value')
    return node


def _get(doc: Any, path: str, op: str) -> Any:
    tokens = _tokens(path)
    if not tokens:
        return doc
    parent = _container(doc, tokens, op, path)
    key = tokens[-1]
    if isinstance(parent, dict):
        if key not in parent:
            raise PatchError(f'{op} operation does not apply: doc is missing from path: "{path}": missing value')
        return parent[key]
    return parent[_index(key, len(parent), adding=False)]


def _add(doc: Any, path: str, value: Any, op: str = "add") -> Any:
    tokens = _tokens(path)
    if not tokens:
        raise PatchError(f'{op} operation does not apply: doc is missing path: "{path}": missing value')
    parent = _container(doc, tokens, op, path)
    key = tokens[-1]
    if isinstance(parent, dict):
        parent[key] = value
    elif key == "-":
        parent.append(value)
    else:
        parent.insert(_index(key, len(parent), adding=True), value)
    return doc


def _remove(doc: Any, path: str) -> tuple[Any, Any]:
    tokens = _tokens(path)
    if not tokens:
        raise PatchError(f'remove operation does not apply: doc is missing path: "{path}": missing value')
    parent = _container(doc, tokens, "remove", path)
    key = tokens[-1]
    if isinstance(parent, dict):
        if key not in parent:
            raise PatchError(f"Unable to remove nonexistent key: {key}: missing value")
        return doc, parent.pop(key)
    return doc, parent.pop(_index(key, len(parent), adding=False))


def _replace(doc: Any, path: str, value: Any) -> Any:
    tokens = _tokens(path)
    if not tokens:
        if not isinstance(value, (dict, list)):
            raise PatchError("replace operation does not apply: doc must be an object or array")
        return value
    parent = _container(doc, tokens, "replace", path)
    key = tokens[-1]
    if isinstance(parent, dict):
        parent[key] = value  # a missing member is added (json-patch v4)
    else:
        if key == "-":
            raise PatchError(f"replace operation does not apply: doc is missing key: {path}: missing value")
        parent[_index(key, len(parent), adding=False)] = value
    return doc


def _test(doc: Any, path: str, value: Any) -> None:
    tokens = _tokens(path)
    if not tokens:
        actual = doc
    else:
        parent = _container(doc, tokens, "test", path)
        key = tokens[-1]
        if isinstance(parent, dict):
            actual = parent.get(key)
        else:
            try:
                actual = parent[_index(key, len(parent), adding=False)]
            except PatchError:
                raise PatchTestFailed(f"testing value {path} failed") from None
    if not _equal(actual, value):
        raise PatchTestFailed(f"testing value {path} failed")


def _equal(a: Any, b: Any) -> bool:
    """JSON equality (1 == 1.0, but true != 1)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return bool(a == b) and type(a) in (int, float, str, type(None)) and type(b) in (int, float, str, type(None))


def apply_patch(document: Any, operations: list[Any]) -> Any:
    """``document`` with ``operations`` applied (a new value; the input is not changed).

    Raises PatchError when an operation cannot apply, PatchTestFailed when a
    ``test`` does not hold.
    """
    doc = copy.deepcopy(document)
    for number, op in enumerate(operations):
        if not isinstance(op, dict):
            raise PatchError(f"operation {number}: must be a JSONPatch object, not {type(op).__name__}")
        kind = op.get("op")
        path = op.get("path")
        if not isinstance(path, str):
            raise PatchError(f"operation {number} ({kind}): path must be a string")
        value = copy.deepcopy(op.get("value"))
        if kind == "add":
            doc = _add(doc, path, value)
        elif kind == "remove":
            doc, _ = _remove(doc, path)
        elif kind == "replace":
            doc = _replace(doc, path, value)
        elif kind == "move":
            source = op.get("from")
            if not isinstance(source, str):
                raise PatchError(f"operation {number} (move): from must be a string")
            _get(doc, source, "move")
            doc, moved = _remove(doc, source)
            doc = _add(doc, path, moved, "move")
        elif kind == "copy":
            source = op.get("from")
            if not isinstance(source, str):
                raise PatchError(f"operation {number} (copy): from must be a string")
            doc = _add(doc, path, copy.deepcopy(_get(doc, source, "copy")), "copy")
        elif kind == "test":
            _test(doc, path, value)
        else:
            raise PatchError(f"Unexpected kind: {kind}")
    return doc
