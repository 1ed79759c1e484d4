"""Kyverno's hash library: ``md5(s)``, ``sha1(s)``, ``sha256(s)`` and their ``hash.`` prefixed forms.

Each returns the lowercase hexadecimal digest of the UTF-8 bytes of ``s``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

from cel_expr_python import cel

from vpol.cel.declare import STRING
from vpol.cel.libraries.kyverno.declarations import Fn

LIBRARY = "kyverno.hash"


def _hexdigest(algorithm: str) -> Callable[[str], str]:
    def digest(s: str) -> str:
        return hashlib.new(algorithm, s.encode("utf-8")).hexdigest()

    return digest


def functions() -> Sequence[Fn]:
    out = []
    for algorithm in ("md5", "sha1", "sha256"):
        impl = _hexdigest(algorithm)
        out.append(Fn(LIBRARY, algorithm, f"kyverno_{algorithm}_string", cel.Type.STRING, (STRING,), impl))
        out.append(Fn(LIBRARY, f"hash.{algorithm}", f"kyverno_hash_{algorithm}_string", cel.Type.STRING, (STRING,), impl))
    return out
