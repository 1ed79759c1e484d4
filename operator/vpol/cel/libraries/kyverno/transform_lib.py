"""Kyverno's transform library: ``listObjToMap(keys, values, keyField, valueField)``.

Also available as ``transform.listObjToMap``. The two lists must have the
same length; for each index ``i`` the result maps ``keys[i][keyField]`` (which
must be a string) to ``values[i][valueField]`` (``null`` when absent). Later
duplicates win.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cel_expr_python import cel

from vpol.cel.declare import LIST, STRING
from vpol.cel.libraries.kyverno.declarations import Fn

LIBRARY = "kyverno.transform"


def list_obj_to_map(keys: list[Any], values: list[Any], key_field: str, value_field: str) -> dict[str, Any]:
    if len(keys) != len(values):
        raise ValueError(f"listObjToMap must take lists of equal length. list1: {len(keys)}, list2: {len(values)}")
    out: dict[str, Any] = {}
    for key_obj, value_obj in zip(keys, values):
        if not isinstance(key_obj, dict):
            raise ValueError("object cannot be handled as a map string to any in the key object list")
        key = key_obj.get(key_field)
        if not isinstance(key, str):
            raise ValueError("the passed key name cannot be handled as a string in the key object list")
        if not isinstance(value_obj, dict):
            raise ValueError("object cannot be handled as a map string to any in the value object list")
        out[key] = value_obj.get(value_field)
    return out


def functions() -> Sequence[Fn]:
    T = cel.Type
    result = T.Map(T.DYN, T.DYN)
    params = (LIST, LIST, STRING, STRING)
    return [
        Fn(LIBRARY, "listObjToMap", "kyverno_list_obj_to_map", result, params, list_obj_to_map),
        Fn(LIBRARY, "transform.listObjToMap", "kyverno_transform_list_obj_to_map", result, params, list_obj_to_map),
    ]
