"""The Kubernetes CEL libraries (lists, regex, URLs, quantity, IP/CIDR, format, semver)."""

from __future__ import annotations

from vpol.cel.library import Library

LIBRARIES: list[Library] = []
