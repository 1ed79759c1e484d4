"""Kubernetes semver library: ``semver()``, ``isSemver()``, ``major/minor/patch`` and comparisons.

Kubernetes parses with github.com/blang/semver/v4 (``Parse``), optionally
after its own normalization (strip a leading ``v``, drop leading zeros, add
missing minor/patch). We reproduce both, with blang's error messages, and
its SemVer 2.0 precedence: numbers compare numerically
(``1.10.0 > 1.9.0``), a pre-release sorts before its release, numeric
pre-release identifiers sort before alphanumeric ones and compare
numerically, and build metadata is ignored (so ``==`` ignores it too: the
message does not keep it).
"""

from __future__ import annotations

import functools
from typing import Any

from vpol.cel import types
from vpol.cel.declare import BOOL, STRING, Fn, T
from vpol.cel.libraries.kubernetes.goquote import go_quote
from vpol.cel.libraries.kubernetes.overloads import KubernetesLibraryError, message

LIBRARY = "kubernetes.Semver"

SEMVER_TYPE, SemverMessage = types.opaque_type(
    "kubernetes.Semver", {"major": "int64", "minor": "int64", "patch": "int64", "prerelease": "string"}
)
_SEMVER = message(SEMVER_TYPE, SemverMessage)

_NUMBERS = frozenset("0123456789")
_ALPHANUM = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-0123456789")
_UINT64_MAX = 2**64 - 1


def _contains_only(text: str, allowed: frozenset[str]) -> bool:
    return all(c in allowed for c in text)


def _leading_zero(text: str) -> bool:
    return len(text) > 1 and text[0] == "0"


def _parse_uint(text: str) -> int:
    """strconv.ParseUint(text, 10, 64) for text made of digits only."""
    if not text:
        raise KubernetesLibraryError(f"strconv.ParseUint: parsing {go_quote(text)}: invalid syntax")
    value = int(text)
    if value > _UINT64_MAX:
        raise KubernetesLibraryError(f"strconv.ParseUint: parsing {go_quote(text)}: value out of range")
    return value


def _number(text: str, what: str) -> int:
    if not _contains_only(text, _NUMBERS):
        raise KubernetesLibraryError(f"Invalid character(s) found in {what.lower()} number {go_quote(text)}")
    if _leading_zero(text):
        raise KubernetesLibraryError(f"{what} number must not contain leading zeroes {go_quote(text)}")
    return _parse_uint(text)


@functools.lru_cache(maxsize=4096)
def parse(text: str) -> tuple[int, int, int, tuple[str, ...]]:
    """blang/semver ``Parse``: (major, minor, patch, pre-release identifiers)."""
    if not text:
        raise KubernetesLibraryError("Version string empty")
    parts = text.split(".", 2)
    if len(parts) != 3:
        raise KubernetesLibraryError("No Major.Minor.Patch elements found")
    major = _number(parts[0], "Major")
    minor = _number(parts[1], "Minor")
    patch_text = parts[2]
    build: list[str] = []
    prerelease: list[str] = []
    if "+" in patch_text:
        patch_text, _, build_text = patch_text.partition("+")
        build = build_text.split(".")
    if "-" in patch_text:
        patch_text, _, pre_text = patch_text.partition("-")
        prerelease = pre_text.split(".")
    patch = _number(patch_text, "Patch")
    for identifier in prerelease:
        if not identifier:
            raise KubernetesLibraryError("Prerelease is empty")
        if _contains_only(identifier, _NUMBERS):
            if _leading_zero(identifier):
                raise KubernetesLibraryError(
                    f"Numeric PreRelease version must not contain leading zeroes {go_quote(identifier)}"
                )
            _parse_uint(identifier)
        elif not _contains_only(identifier, _ALPHANUM):
            raise KubernetesLibraryError(f"Invalid character(s) found in prerelease {go_quote(identifier)}")
    for identifier in build:
        if not identifier:
            raise KubernetesLibraryError("Build meta data is empty")
        if not _contains_only(identifier, _ALPHANUM):
            raise KubernetesLibraryError(f"Invalid character(s) found in build meta data {go_quote(identifier)}")
    return major, minor, patch, tuple(prerelease)


def normalize(text: str) -> str:
    """Kubernetes' ``normalizeAndParse`` rewriting, before ``Parse``."""
    text = text.removeprefix("v")
    parts = text.split(".", 2)
    for i, part in enumerate(parts):
        if len(part) > 1:
            part = part.lstrip("0")
            if not part or part[0] not in _NUMBERS:
                part = "0" + part
            parts[i] = part
    if len(parts) < 3:
        if "+" in parts[-1] or "-" in parts[-1]:
            raise KubernetesLibraryError("short version cannot contain PreRelease/Build meta data")
        parts += ["0"] * (3 - len(parts))
    return ".".join(parts)


def _int64(value: int) -> int:
    """Go's int64(uint64) conversion."""
    return value - 2**64 if value > 2**63 - 1 else value


def _to_message(version: tuple[int, int, int, tuple[str, ...]]) -> Any:
    major, minor, patch, prerelease = version
    return SemverMessage(major=_int64(major), minor=_int64(minor), patch=_int64(patch), prerelease=".".join(prerelease))


def semver(text: str, normalized: bool = False) -> Any:
    return _to_message(parse(normalize(text) if normalized else text))


def is_semver(text: str, normalized: bool = False) -> bool:
    try:
        parse(normalize(text) if normalized else text)
    except KubernetesLibraryError:
        return False
    return True


def _key(msg: Any) -> tuple[int, int, int]:
    return msg.major % 2**64, msg.minor % 2**64, msg.patch % 2**64


def _compare_identifiers(a: str, b: str) -> int:
    a_num, b_num = a.isdigit(), b.isdigit()
    if a_num and b_num:
        x, y = int(a), int(b)
        return (x > y) - (x < y)
    if a_num != b_num:
        return -1 if a_num else 1
    return (a > b) - (a < b)


def compare(a: Any, b: Any) -> int:
    ka, kb = _key(a), _key(b)
    if ka != kb:
        return 1 if ka > kb else -1
    pa = a.prerelease.split(".") if a.prerelease else []
    pb = b.prerelease.split(".") if b.prerelease else []
    if not pa or not pb:
        return (not pa) - (not pb)
    for x, y in zip(pa, pb):
        result = _compare_identifiers(x, y)
        if result:
            return result
    return (len(pa) > len(pb)) - (len(pa) < len(pb))


def functions() -> list[Fn]:
    s = _SEMVER
    return [
        Fn(LIBRARY, "semver", "string_to_semver", (STRING,), SEMVER_TYPE, semver),
        Fn(LIBRARY, "semver", "string_bool_to_semver", (STRING, BOOL), SEMVER_TYPE, semver),
        Fn(LIBRARY, "isSemver", "is_semver_string", (STRING,), T.BOOL, is_semver),
        Fn(LIBRARY, "isSemver", "is_semver_string_bool", (STRING, BOOL), T.BOOL, is_semver),
        Fn(LIBRARY, "isGreaterThan", "semver_is_greater_than", (s, s), T.BOOL, lambda a, b: compare(a, b) == 1,
           member=True),
        Fn(LIBRARY, "isLessThan", "semver_is_less_than", (s, s), T.BOOL, lambda a, b: compare(a, b) == -1,
           member=True),
        Fn(LIBRARY, "compareTo", "semver_compare_to", (s, s), T.INT, compare, member=True),
        Fn(LIBRARY, "major", "semver_major", (s,), T.INT, lambda v: v.major, member=True),
        Fn(LIBRARY, "minor", "semver_minor", (s,), T.INT, lambda v: v.minor, member=True),
        Fn(LIBRARY, "patch", "semver_patch", (s,), T.INT, lambda v: v.patch, member=True),
    ]
