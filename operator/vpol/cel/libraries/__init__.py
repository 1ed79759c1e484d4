"""CEL function libraries: ``kubernetes`` (what the API server has) and ``kyverno``."""

from __future__ import annotations

from vpol.cel.library import Library
from vpol.cel.libraries import kubernetes, kyverno


def all_libraries() -> list[Library]:
    return [*kubernetes.LIBRARIES, *kyverno.LIBRARIES]


def kubernetes_libraries() -> list[Library]:
    return list(kubernetes.LIBRARIES)
