"""Kubernetes' JSON patch library: ``jsonpatch.escapeKey(s)``.

Escapes a key for use as one JSON pointer token (RFC 6901): ``~`` becomes
``~0`` and ``/`` becomes ``~1``, in that order, as
k8s.io/apiserver/pkg/cel/library/jsonpatch.go does.
"""

from __future__ import annotations

from cel_expr_python import cel

from vpol.cel.declare import STRING, Fn

LIBRARY = "kubernetes.jsonpatch"


def escape_key(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def functions() -> list[Fn]:
    return [Fn(LIBRARY, "jsonpatch.escapeKey", "string_jsonpatch_escapeKey_string", (STRING,), cel.Type.STRING,
               escape_key)]
