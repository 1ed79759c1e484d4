"""parseServiceAccount, md5/sha1/sha256 and math.round.

Expectations: Kyverno's tests (pkg/cel/libs/user, math), the published
MD5/SHA test vectors (RFC 1321, FIPS 180) and Go's math.Round (halves away
from zero).
"""

from __future__ import annotations

import math

import pytest

from tests.unit.cel.kyverno.conftest import value


@pytest.mark.parametrize(
    ("username", "namespace", "name"),
    [
        ("system:serviceaccount:foo:bar", "foo", "bar"),
        ("system:serviceaccount:foo:bar:baz", "foo", "bar:baz"),
        ("something-else:123", "", ""),
        ("system:serviceaccount:foo", "", ""),
        ("", "", ""),
    ],
)
@pytest.mark.parametrize("function", ["parseServiceAccount", "user.parseServiceAccount"])
def test_parse_service_account(function: str, username: str, namespace: str, name: str) -> None:
    got = value(f'[{function}("{username}").Namespace, {function}("{username}").Name]')
    assert got == [namespace, name]


def test_parse_service_account_documented_use() -> None:
    request = {"userInfo": {"username": "system:serviceaccount:dev:team-builder"}}
    assert value(
        'parseServiceAccount(variables.u).Name.startsWith("team-") && parseServiceAccount(variables.u).Namespace in ["dev", "prod"]',
        variables={"u": request["userInfo"]["username"]},
    ) is True


@pytest.mark.parametrize(
    ("expr", "digest"),
    [
        ('md5("")', "d41d8cd98f00b204e9800998ecf8427e"),
        ('md5("abc")', "900150983cd24fb0d6963f7d28e17f72"),
        ('sha1("abc")', "a9993e364706816aba3e25717850c26c9cd0d89d"),
        ('sha256("abc")', "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
        ('hash.md5("abc")', "900150983cd24fb0d6963f7d28e17f72"),
        ('hash.sha1("abc")', "a9993e364706816aba3e25717850c26c9cd0d89d"),
        ('hash.sha256("")', "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
    ],
)
def test_hashes(expr: str, digest: str) -> None:
    assert value(expr) == digest


def test_hash_of_a_longer_string() -> None:
    assert value('md5("The quick brown fox jumps over the lazy dog")') == "9e107d9d372bb6826bd81d3542a419d6"
    assert value('sha1("The quick brown fox jumps over the lazy dog")') == "2fd4e1c67a2d28fced849ee1bb76e7391b93eb12"


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("math.round(10.125, 2)", 10.13),  # Kyverno's test
        ("math.round(10.125, 0)", 10.0),  # Kyverno's test
        ("math.round(12345.6789, -2)", 12300.0),  # Kyverno's test
        ("math.round(2.5, 0)", 3.0),  # half away from zero, not to even
        ("math.round(-2.5, 0)", -3.0),
        ("math.round(0.5, 0)", 1.0),
        ("math.round(1.4999, 0)", 1.0),
        ("math.round(-1.005, 1)", -1.0),
        ("math.round(3.14159, 3)", 3.142),
    ],
)
def test_math_round(expr: str, expected: float) -> None:
    got = value(expr)
    assert isinstance(got, float)
    assert got == expected


def test_math_round_non_finite() -> None:
    assert math.isnan(value("math.round(double('NaN'), 2)"))
    assert value("math.round(double('Infinity'), 2)") == math.inf
