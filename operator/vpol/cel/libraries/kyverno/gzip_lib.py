"""Kyverno's gzip library: ``gzip.compress(value)`` and ``gzip.decompress(bytes)``.

``gzip.decompress(b)`` is the text a gzip stream holds (``compress/gzip`` in Kyverno; any gzip member, as
Python's ``gzip`` reads it); an invalid stream is an evaluation error. ``gzip.compress(s)`` takes a string (any
other value is an error, as Kyverno's conversion to a native string gives) and returns a gzip stream with a
zero modification time, so the result is deterministic. The compressed bytes are zlib's, not Go's
``compress/flate`` (both are valid deflate streams of the same text; only an expression comparing the
compressed bytes themselves would tell them apart).
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Sequence
from typing import Any

from cel_expr_python import cel

from vpol.cel.declare import ANY_VALUE, BYTES
from vpol.cel.libraries.kyverno.declarations import Fn

LIBRARY = "kyverno.gzip"


def decompress(data: bytes | bytearray) -> str:
    try:
        return gzip.decompress(bytes(data)).decode("utf-8", "replace")
    except (OSError, EOFError, zlib.error) as exc:
        raise ValueError(f"gzip: invalid header: {exc}" if isinstance(exc, gzip.BadGzipFile) else str(exc)) from None


def compress(value: Any) -> bytes:
    if not isinstance(value, str):
        raise ValueError(f"type conversion error from '{type(value).__name__}' to 'string'")
    return gzip.compress(value.encode("utf-8"), mtime=0)


def functions() -> Sequence[Fn]:
    T = cel.Type
    out = [Fn(LIBRARY, "gzip.decompress", "kyverno_gzip_decompress_bytes", T.STRING, (BYTES,), decompress)]
    out += [Fn(LIBRARY, "gzip.compress", f"kyverno_gzip_compress_{kind.kind}", T.BYTES, (kind,), compress)
            for kind in ANY_VALUE]
    return out
