"""Kyverno's yaml library: the ``yaml`` variable with ``parse(s)``.

Kyverno decodes with ``sigs.k8s.io/yaml`` (go-yaml v2, YAML 1.1 scalars, then
a JSON round trip), so here:

* only the first document counts; an empty string is ``null``;
* ``y``/``yes``/``on``/``true`` (and capitalised forms) are true, ``n``/``no``/
  ``off``/``false`` false, ``~``/``null`` null;
* every number is a double (``yaml.parse('a: 1').a == 1.0``); ``0x1F``,
  ``0o17``, ``017``, ``0b101`` and ``1_000`` are numbers, ``1:30`` is a string;
* timestamps stay strings (``2024-01-02`` is not converted to a date);
* map keys become strings (``1: a`` has the key ``"1"``, ``true: a`` ``"true"``).

PyYAML's safe loader differs on several of these points (dates, sexagesimal
numbers, ``y``/``n``), so a loader with Go's resolution rules is set up below.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Sequence
from typing import Any

import yaml
from cel_expr_python import cel

from vpol.cel import types
from vpol.cel.declare import STRING, message
from vpol.cel.libraries.kyverno.declarations import Fn

LIBRARY = "kyverno.yaml"

YAML_TYPE, Yaml = types.opaque_type("vpol.kyverno.Yaml", {})
_YAML = message(YAML_TYPE, Yaml)

_TRUE = ("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON")
_FALSE = ("n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF")
_BOOL_RE = re.compile("^(?:" + "|".join(_TRUE + _FALSE) + ")$")
_NULL_RE = re.compile(r"^(?:~|null|Null|NULL|)$")
_INT_RE = re.compile(r"^[-+]?(?:0b[01_]+|0o[0-7_]+|0x[0-9a-fA-F_]+|[0-9][0-9_]*)$")
# go-yaml's yamlStyleFloat (checked after removing underscores) plus the special values.
_FLOAT_RE = re.compile(r"^(?:[-+]?(?:\.[0-9_]+|[0-9][0-9_]*(?:\.[0-9_]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$")


class _GoYamlLoader(yaml.SafeLoader):
    """SafeLoader with go-yaml v2's implicit scalar resolution."""

    yaml_implicit_resolvers: dict[Any, Any] = {}


_GoYamlLoader.add_implicit_resolver("tag:yaml.org,2002:bool", _BOOL_RE, list("yYnNtTfFoO"))
_GoYamlLoader.add_implicit_resolver("tag:yaml.org,2002:null", _NULL_RE, ["~", "n", "N", ""])
_GoYamlLoader.add_implicit_resolver("tag:yaml.org,2002:int", _INT_RE, list("-+0123456789"))
_GoYamlLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_RE, list("-+0123456789."))
_GoYamlLoader.add_implicit_resolver("tag:yaml.org,2002:merge", re.compile(r"^<<$"), ["<"])


def _construct_bool(loader: yaml.SafeLoader, node: yaml.Node) -> bool:
    return str(loader.construct_scalar(node)) in _TRUE  # type: ignore[arg-type]


def _construct_int(loader: yaml.SafeLoader, node: yaml.Node) -> int | float:
    text = str(loader.construct_scalar(node)).replace("_", "")  # type: ignore[arg-type]
    sign = -1 if text.startswith("-") else 1
    digits = text.lstrip("+-")
    try:
        if digits.startswith(("0x", "0o", "0b")):
            return sign * int(digits, 0)
        if len(digits) > 1 and digits.startswith("0"):
            return sign * int(digits, 8)
        return sign * int(digits)
    except ValueError:
        # "08" is no octal number; go-yaml then reads it as a float.
        return float(text)


_GoYamlLoader.add_constructor("tag:yaml.org,2002:bool", _construct_bool)
_GoYamlLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)
# Explicit !!timestamp tags still produce text, as go-yaml does for `any`.
_GoYamlLoader.add_constructor("tag:yaml.org,2002:timestamp", yaml.SafeLoader.construct_yaml_str)  # type: ignore[type-var]


def _key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, int):
        return str(key)
    if isinstance(key, float):
        if math.isnan(key):
            return ".nan"
        if math.isinf(key):
            return ".inf" if key > 0 else "-.inf"
        return repr(key)
    raise ValueError(f"unsupported map key of type {type(key).__name__}: {key!r}")


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {_key(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float):
        number = float(value)
        if math.isnan(number) or math.isinf(number):
            raise ValueError(f"error converting YAML to JSON: json: unsupported value: {value}")
        return number
    if isinstance(value, bytes):
        # !!binary: JSON has no bytes; Go would carry the base64 text.
        return base64.b64encode(value).decode("ascii")
    raise ValueError(f"error converting YAML to JSON: unsupported value of type {type(value).__name__}")


def parse(text: str) -> Any:
    """Decode like Kyverno's ``yaml.parse``: first document, JSON-compatible values."""
    try:
        documents = yaml.load_all(text, Loader=_GoYamlLoader)  # noqa: S506 - a SafeLoader subclass
        first = next(iter(documents), None)
    except yaml.YAMLError as exc:
        raise ValueError(f"error converting YAML to JSON: {exc}") from None
    return _jsonable(first)


def variables() -> dict[str, tuple[cel.Type, Any]]:
    return {"yaml": (YAML_TYPE, Yaml())}


def functions() -> Sequence[Fn]:
    return [Fn(LIBRARY, "parse", "kyverno_yaml_parse_string", cel.Type.DYN, (_YAML, STRING), lambda _y, s: parse(s), member=True)]
