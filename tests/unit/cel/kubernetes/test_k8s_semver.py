"""Kubernetes semver library (blang/semver parsing, SemVer 2.0 precedence)."""

from __future__ import annotations

import pytest

from tests.unit.cel.kubernetes.conftest import error, value


@pytest.mark.parametrize(
    ("text", "strict", "normalized"),
    [
        # godoc examples of semverlib.go
        ("1.0.0", True, True),
        ("0.1.0-alpha.1", True, True),
        ("200K", False, False),
        ("Three", False, False),
        ("Mi", False, False),
        ("hello", False, False),
        ("v1.0", False, True),
        ("1.0", False, True),
        ("01.01.01", False, True),
        # more
        ("1.2.3-beta+build.5", True, True),
        ("1.2.3-", False, False),
        ("1.2.3+", False, False),
        ("1.2.3-01", False, False),
        ("1.2.3-0a", True, True),
        ("1.2.3-a_b", False, False),
        ("1.2", False, True),
        ("1", False, True),
        ("v1", False, True),
        ("1.2-beta", False, False),
        ("", False, False),
        ("1.2.3.4", False, False),
        (" 1.2.3", False, False),
        ("18446744073709551615.0.0", True, True),
        ("18446744073709551616.0.0", False, False),
        ("vv1.0.0", False, False),
    ],
)
def test_is_semver(text: str, strict: bool, normalized: bool) -> None:
    assert value("isSemver(object)", object=text) is strict
    assert value("isSemver(object, false)", object=text) is strict
    assert value("isSemver(object, true)", object=text) is normalized


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("semver('1.2.3').major()", 1),
        ("semver('1.2.3').minor()", 2),
        ("semver('1.2.3').patch()", 3),
        ("semver('v1.0.0', true) == semver('1.0.0')", True),
        ("semver('1.0', true) == semver('1.0.0')", True),
        ("semver('01.01.01', true) == semver('1.1.1')", True),
        ("semver('v01.002', true).minor()", 2),
        # build metadata has no precedence: equal versions
        ("semver('1.0.0+a') == semver('1.0.0+b')", True),
        ("semver('1.0.0-a') == semver('1.0.0-b')", False),
        # Go's int64(uint64) for the accessors
        ("semver('18446744073709551615.0.0').major()", -1),
        ("type(semver('1.0.0')) == kubernetes.Semver", True),
    ],
)
def test_semver(expr: str, expected: object) -> None:
    assert value(expr) == expected


# SemVer 2.0 section 11: each version is lower than the next one.
ORDERED = [
    "1.0.0-alpha",
    "1.0.0-alpha.1",
    "1.0.0-alpha.beta",
    "1.0.0-beta",
    "1.0.0-beta.2",
    "1.0.0-beta.11",
    "1.0.0-rc.1",
    "1.0.0",
    "1.9.0",
    "1.10.0",
    "2.0.0",
    "9223372036854775807.0.0",
    "9223372036854775808.0.0",
    "18446744073709551615.0.0",
]


@pytest.mark.parametrize(("lower", "higher"), list(zip(ORDERED, ORDERED[1:])))
def test_precedence(lower: str, higher: str) -> None:
    assert value(f"semver('{lower}').isLessThan(semver('{higher}'))") is True
    assert value(f"semver('{higher}').isGreaterThan(semver('{lower}'))") is True
    assert value(f"semver('{lower}').isGreaterThan(semver('{higher}'))") is False
    assert value(f"semver('{lower}').compareTo(semver('{higher}'))") == -1
    assert value(f"semver('{higher}').compareTo(semver('{lower}'))") == 1


def test_godoc_comparisons() -> None:
    assert value("semver('1.2.3').compareTo(semver('1.2.3'))") == 0
    assert value("semver('1.2.3').compareTo(semver('2.0.0'))") == -1
    assert value("semver('1.2.3').compareTo(semver('0.1.2'))") == 1
    # numeric, not lexical (the example)
    assert value("semver('1.10.0').isGreaterThan(semver('1.9.0'))") is True
    assert value("semver('1.0.0-1').isLessThan(semver('1.0.0-a'))") is True
    assert value("semver('1.0.0-Z').isLessThan(semver('1.0.0-a'))") is True


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("semver('')", "Version string empty"),
        ("semver('1.0')", "No Major.Minor.Patch elements found"),
        ("semver('200K')", "No Major.Minor.Patch elements found"),
        ("semver('a.0.0')", 'Invalid character(s) found in major number "a"'),
        ("semver('01.0.0')", 'Major number must not contain leading zeroes "01"'),
        ("semver('1.02.3')", 'Minor number must not contain leading zeroes "02"'),
        ("semver('1.2.03')", 'Patch number must not contain leading zeroes "03"'),
        ("semver('1.2.x')", 'Invalid character(s) found in patch number "x"'),
        ("semver('1..3')", 'strconv.ParseUint: parsing "": invalid syntax'),
        ("semver('1.2.3-')", "Prerelease is empty"),
        ("semver('1.2.3-01')", 'Numeric PreRelease version must not contain leading zeroes "01"'),
        ("semver('1.2.3-a_b')", 'Invalid character(s) found in prerelease "a_b"'),
        ("semver('1.2.3+')", "Build meta data is empty"),
        ("semver('1.2.3+a_b')", 'Invalid character(s) found in build meta data "a_b"'),
        ("semver('18446744073709551616.0.0')", 'strconv.ParseUint: parsing "18446744073709551616": value out of range'),
        ("semver('1.2-beta', true)", "short version cannot contain PreRelease/Build meta data"),
    ],
)
def test_errors(expr: str, message: str) -> None:
    assert error(expr) == message


def test_comparing_a_semver_with_a_quantity_is_rejected() -> None:
    # isLessThan is shared with Quantity; each receiver accepts only its own kind
    assert error("dyn(semver('1.0.0')).isLessThan(dyn(quantity('1')))") == "no such overload"
