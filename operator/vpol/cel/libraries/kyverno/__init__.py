"""Kyverno's CEL libraries: pure ones and the I/O ones served by a backend."""

from __future__ import annotations

from vpol.cel.library import Library

LIBRARIES: list[Library] = []
