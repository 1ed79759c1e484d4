"""Kubernetes quantity library: parsing, comparisons, arithmetic, conversions."""

from __future__ import annotations

import math

import pytest

from tests.unit.cel.kubernetes.conftest import compile_error, error, value

FORMAT_WRONG = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # godoc examples of quantity.go and cases of quantity_test.go
        ("1.3G", True),
        ("1.3Gi", True),
        ("1,3G", False),
        ("10000k", True),
        ("200K", False),
        ("Three", False),
        # The godoc says false, but ParseQuantity reads "Mi" as 0 Mi: the
        # Kubernetes 1.37 API server answers true, and so do we.
        ("Mi", True),
        ("20", True),
        ("20M", True),
        ("20Mi", True),
        ("20Mo", False),
        ("10Mm", False),
        # resource.ParseQuantity corner cases
        ("1e3", True),
        ("1E3", True),
        ("1e-3", True),
        ("1e+3", True),
        ("1e", False),
        ("1E", True),  # exa
        ("1i", False),
        ("1K", False),
        (".5", True),
        ("5.", True),
        ("1.G", True),
        ("-", True),
        ("+", True),
        (".", True),
        ("", False),
        (" 1", False),
        ("1 ", False),
        ("1.2.3", False),
        ("--1", False),
        ("+.Ei", False),
        ("1e99999999999999999999", False),
    ],
)
def test_is_quantity(text: str, expected: bool) -> None:
    assert value("isQuantity(object)", object=text) is expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("10Mo", FORMAT_WRONG),
        ("10Mm", "unable to parse quantity's suffix"),
        ("200K", "unable to parse quantity's suffix"),
        ("Three", FORMAT_WRONG),
        ("", FORMAT_WRONG),
        ("1e", "unable to parse quantity's suffix"),
        ("+.Ei", "unable to parse numeric part of quantity"),
        (".e-10", "unable to parse numeric part of quantity"),
    ],
)
def test_parse_errors(text: str, message: str) -> None:
    assert error("quantity(object)", object=text) == message


@pytest.mark.parametrize(
    "expr",
    [
        "quantity('1Gi') == quantity('1024Mi')",
        "quantity('200M') == quantity('200M')",
        "quantity('200M') == quantity('0.2G') && quantity('0.2G') == quantity('200M')",
        "quantity('2M') == quantity('0.002G') && quantity('2000k') == quantity('2M')",
        "quantity('1') == quantity('1000m')",
        "quantity('1') == quantity('1.0')",
        "quantity('0') == quantity('-0')",
        "quantity('1n') == quantity('0.000000001')",
        "quantity('1.5Gi') == quantity('1536Mi')",
        "quantity('1e3') == quantity('1k')",
        "quantity('0.1').add(quantity('0.2')) == quantity('0.3')",
        # values finer than 1n round up, away from zero
        "quantity('0.1m') == quantity('0.1m')",
        "quantity('0.0000000001') == quantity('1n')",
        "quantity('-0.5n') == quantity('-1n')",
        "quantity('0.1234567891') == quantity('0.123456790')",
        # binary quantities are capped at 2^63-1
        "quantity('9Ei') == quantity('8Ei')",
        "quantity('9Ei') == quantity('9223372036854775807')",
        "quantity('-8Ei') == quantity('-9223372036854775807')",
        # Go truncates a 64-bit exponent to 32 bits
        "quantity('1e4294967297') == quantity('10')",
        "type(quantity('1')) == kubernetes.Quantity",
    ],
)
def test_equality_is_semantic(expr: str) -> None:
    assert value(expr) is True


@pytest.mark.parametrize(
    "expr",
    [
        "quantity('200M') == quantity('0.3G')",
        "quantity('1G') == quantity('1Gi')",
        "quantity('1n') == quantity('1u')",
    ],
)
def test_inequality(expr: str) -> None:
    assert value(expr) is False


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("quantity('200M').compareTo(quantity('0.2G'))", 0),
        ("quantity('50M').compareTo(quantity('50Mi'))", -1),
        ("quantity('50Mi').compareTo(quantity('50M'))", 1),
        ("quantity('150Mi').isGreaterThan(quantity('100Mi'))", True),
        ("quantity('50Mi').isGreaterThan(quantity('100Mi'))", False),
        ("quantity('50M').isLessThan(quantity('100M'))", True),
        ("quantity('100M').isLessThan(quantity('50M'))", False),
        ("quantity('50M').isLessThan(quantity('50Mi'))", True),
        ("quantity('-1').compareTo(quantity('1'))", -1),
        ("quantity('-1e100').compareTo(quantity('1e-100'))", -1),
        ("quantity('1e100').compareTo(quantity('1e99'))", 1),
        ("quantity('12345678901234567890123').compareTo(quantity('12345678901234567890122'))", 1),
        ("quantity('0.0000000001Ki').compareTo(quantity('1'))", -1),
    ],
)
def test_comparisons(expr: str, expected: object) -> None:
    assert value(expr) == expected


@pytest.mark.parametrize(
    "expr",
    [
        # godoc and quantity_test.go examples
        "quantity('50k').add(quantity('20k')) == quantity('70k')",
        "quantity('50k').add(20) == quantity('50020')",
        "quantity('50k').sub(quantity('20k')) == quantity('30k')",
        "quantity('50k').sub(20000) == quantity('30k')",
        "quantity('50k').add(20).sub(quantity('100k')).sub(-50000) == quantity('20')",
        "quantity('50k').add(quantity('20')) == quantity('50.02k')",
        "quantity('50k').sub(quantity('20')) == quantity('49.98k')",
        "quantity('50k').sub(20) == quantity('49980')",
        "!quantity('50k').add(20).isLessThan(quantity('50020'))",
        "quantity('50k').add(20).sub(quantity('100k')).asInteger() == -49980",
        "quantity('50k').add(20).sub(quantity('100k')).sub(-50000).asInteger() == 20",
        "quantity('50k').sub(20000).asApproximateFloat() == 30000.0",
        "quantity('1').add(9223372036854775807).compareTo(quantity('9223372036854775808')) == 0",
        "quantity('1.5Gi').add(quantity('512Mi')) == quantity('2Gi')",
        "quantity('100m').add(quantity('1')).sub(quantity('1100m')) == quantity('0')",
    ],
)
def test_arithmetic(expr: str) -> None:
    assert value(expr) is True


def test_arithmetic_is_bounded() -> None:
    assert "digits" in error("quantity('1e999999').add(quantity('1'))")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1", 1),
        ("-1", -1),
        ("0", 0),
        ("-0", 0),
        ("1n", 1),
        ("-1Ki", -1),
    ],
)
def test_sign(text: str, expected: int) -> None:
    assert value("sign(quantity(object))", object=text) == expected


def test_sign_is_a_global_function_as_in_kubernetes() -> None:
    # Kubernetes declares sign(Quantity) as a global overload only.
    assert "'sign'" in compile_error("quantity('1').sign()")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("50k", 50000),
        ("50000000G", 50000000000000000),
        ("1Gi", 1073741824),
        ("-5", -5),
        ("0", 0),
        ("9223372036854775807", 9223372036854775807),
    ],
)
def test_as_integer(text: str, expected: int) -> None:
    assert value("quantity(object).isInteger()", object=text) is True
    assert value("quantity(object).asInteger()", object=text) == expected


@pytest.mark.parametrize("text", ["9999999999999999999999999999999999999G", "0.5", "1500m", "1n", "9223372036854775808"])
def test_as_integer_errors(text: str) -> None:
    assert value("quantity(object).isInteger()", object=text) is False
    assert error("quantity(object).asInteger()", object=text) == "cannot convert value to integer"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("50.703k", 50703.0),
        ("50k", 50000.0),
        ("0.5", 0.5),
        ("-1.5", -1.5),
        ("123456789012345678", 1.2345678901234568e17),
        ("0.123456789", 0.12345678900000001),  # Kubernetes: 123456789 * 1e-9
        ("9999999999999999999999999999999999999G", 1e46),
        ("1e400", math.inf),
        ("-1e400", -math.inf),
        ("1.5Gi", 1610612736.0),
    ],
)
def test_as_approximate_float(text: str, expected: float) -> None:
    assert value("quantity(object).asApproximateFloat()", object=text) == expected
