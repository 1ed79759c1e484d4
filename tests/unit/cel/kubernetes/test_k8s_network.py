"""Kubernetes IP and CIDR libraries (net/netip semantics plus Kubernetes' rules)."""

from __future__ import annotations

import pytest

from tests.unit.cel.kubernetes.conftest import error, value


@pytest.mark.parametrize(
    ("text", "valid", "canonical"),
    [
        ("192.168.0.1", True, True),
        ("0.0.0.0", True, True),
        ("::", True, True),
        ("::1", True, True),
        ("2001:db8::1", True, True),
        ("2001:0db8::1", True, False),
        ("FE80::ABCD", True, False),
        ("1:2:3:4:5:6:7::", True, False),  # canonical is 1:2:3:4:5:6:7:0
        ("2001:db8:0:0:1:0:0:1", True, False),  # canonical is 2001:db8::1:0:0:1
        ("1:0:2:3:4:5:6:7", True, True),  # a single zero group is not compressed
        ("::1.2.3.4", True, False),
        # rejected by netip or by Kubernetes
        ("01.2.3.4", False, None),
        ("1.2.3", False, None),
        ("256.0.0.1", False, None),
        ("::ffff:1.2.3.4", False, None),
        ("fe80::1%eth0", False, None),
        ("[::1]", False, None),
        ("::1/128", False, None),
        (" 1.2.3.4", False, None),
        ("", False, None),
    ],
)
def test_is_ip_and_is_canonical(text: str, valid: bool, canonical: bool | None) -> None:
    assert value("isIP(object)", object=text) is valid
    if valid:
        assert value("ip.isCanonical(object)", object=text) is canonical
    else:
        error("ip.isCanonical(object)", object=text)


def test_ip_errors_follow_kubernetes() -> None:
    assert error("ip('fe80::1%eth0')") == 'IP address "fe80::1%eth0" with zone value is not allowed'
    assert error("ip('::ffff:1.2.3.4')") == 'IPv4-mapped IPv6 address "::ffff:1.2.3.4" is not allowed'
    assert error("ip('1.2.3')").startswith(
        'IP Address "1.2.3" parse error during conversion from string: ParseAddr("1.2.3"): '
    )


@pytest.mark.parametrize(
    ("text", "canonical"),
    [("2001:0db8::1", "2001:db8::1"), ("FE80::ABCD", "fe80::abcd"), ("0:0:0:0:0:0:0:0", "::"),
     ("a:b:c:d:e:f:0:0", "a:b:c:d:e:f::"), ("::1.2.3.4", "::102:304"), ("10.0.0.1", "10.0.0.1")],
)
def test_string_of_ip_is_canonical(text: str, canonical: str) -> None:
    assert value("string(ip(object))", object=text) == canonical


@pytest.mark.parametrize(
    ("text", "family", "unspecified", "loopback", "ll_multicast", "ll_unicast", "global_unicast"),
    [
        ("192.168.0.1", 4, False, False, False, False, True),  # private is global unicast in Go
        ("10.0.0.1", 4, False, False, False, False, True),
        ("127.0.0.1", 4, False, True, False, False, False),
        ("127.255.255.254", 4, False, True, False, False, False),
        ("0.0.0.0", 4, True, False, False, False, False),
        ("255.255.255.255", 4, False, False, False, False, False),
        ("169.254.1.1", 4, False, False, False, True, False),
        ("224.0.0.1", 4, False, False, True, False, False),
        ("224.0.1.1", 4, False, False, False, False, False),
        ("::", 6, True, False, False, False, False),
        ("::1", 6, False, True, False, False, False),
        ("fe80::1", 6, False, False, False, True, False),
        ("febf::1", 6, False, False, False, True, False),
        ("fec0::1", 6, False, False, False, False, True),
        ("ff02::1", 6, False, False, True, False, False),
        ("ff12::1", 6, False, False, True, False, False),
        ("ff05::2", 6, False, False, False, False, False),
        ("2001:db8::1", 6, False, False, False, False, True),
        ("fc00::1", 6, False, False, False, False, True),
    ],
)
def test_ip_properties(
    text: str, family: int, unspecified: bool, loopback: bool, ll_multicast: bool, ll_unicast: bool,
    global_unicast: bool,
) -> None:
    assert value("ip(object).family()", object=text) == family
    assert value("ip(object).isUnspecified()", object=text) is unspecified
    assert value("ip(object).isLoopback()", object=text) is loopback
    assert value("ip(object).isLinkLocalMulticast()", object=text) is ll_multicast
    assert value("ip(object).isLinkLocalUnicast()", object=text) is ll_unicast
    assert value("ip(object).isGlobalUnicast()", object=text) is global_unicast


def test_ip_equality() -> None:
    assert value("ip('::1') == ip('0:0::1')") is True
    assert value("ip('10.0.0.1') == ip('10.0.0.2')") is False
    assert value("type(ip('1.2.3.4')) == net.IP") is True


@pytest.mark.parametrize(
    ("text", "valid"),
    [
        # godoc examples of cidr.go
        ("192.168.0.0/16", True),
        ("::1/128", True),
        ("192.168.0.0/33", False),
        ("::1/129", False),
        # bits after the prefix are kept, not rejected (the godoc says error;
        # the API server accepts it)
        ("192.168.0.1/16", True),
        ("0.0.0.0/0", True),
        ("10.0.0.0/08", False),
        ("10.0.0.0/00", False),
        ("192.168.0.0/", False),
        ("192.168.0.0", False),
        ("192.168.0.0/-1", False),
        ("192.168.0.0/+8", False),
        ("::ffff:1.2.3.4/120", False),
        ("fe80::1%eth0/64", False),
        ("1.2.3/8", False),
    ],
)
def test_is_cidr(text: str, valid: bool) -> None:
    assert value("isCIDR(object)", object=text) is valid


def test_cidr_errors_follow_kubernetes() -> None:
    prefix = "network address parse error during conversion from string: "
    assert error("cidr('192.168.0.0/33')") == (
        prefix + prefix + 'netip.ParsePrefix("192.168.0.0/33"): prefix length out of range'
    )
    assert error("cidr('10.0.0.0/08')") == prefix + prefix + 'netip.ParsePrefix("10.0.0.0/08"): bad bits after slash: "08"'
    assert error("cidr('10.0.0.0')") == prefix + prefix + "netip.ParsePrefix(\"10.0.0.0\"): no '/'"
    assert error("cidr('::ffff:1.2.3.4/120')") == prefix + 'IPv4-mapped IPv6 address "::ffff:1.2.3.4/120" is not allowed'


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        # godoc examples of cidr.go
        ("cidr('192.168.0.0/24').containsIP(ip('192.168.0.1'))", True),
        ("cidr('192.168.0.0/24').containsIP(ip('192.168.1.1'))", False),
        ("cidr('192.168.0.0/24').containsIP('192.168.0.1')", True),
        ("cidr('192.168.0.0/24').containsIP('192.168.1.1')", False),
        ("cidr('192.168.0.0/16').containsCIDR(cidr('192.168.10.0/24'))", True),
        ("cidr('192.168.1.0/24').containsCIDR(cidr('192.168.2.0/24'))", False),
        ("cidr('192.168.0.0/16').containsCIDR('192.168.10.0/24')", True),
        ("cidr('192.168.1.0/24').containsCIDR('192.168.2.0/24')", False),
        ("cidr('192.168.0.1/24').ip() == ip('192.168.0.1')", True),
        ("cidr('192.168.0.1/24').ip().family()", 4),
        ("cidr('::1/128').ip() == ip('::1')", True),
        ("cidr('::1/128').ip().family()", 6),
        ("cidr('192.168.0.0/24').masked() == cidr('192.168.0.0/24')", True),
        ("cidr('192.168.0.1/24').masked() == cidr('192.168.0.0/24')", True),
        ("cidr('192.168.0.0/24') == cidr('192.168.0.0/24').masked()", True),
        ("cidr('192.168.0.1/24') == cidr('192.168.0.1/24').masked()", False),
        ("cidr('192.168.0.0/16').prefixLength()", 16),
        ("cidr('::1/128').prefixLength()", 128),
        # more
        ("cidr('0.0.0.0/0').containsIP('1.2.3.4')", True),
        ("cidr('::/0').containsIP('1.2.3.4')", False),
        ("cidr('192.168.0.1/24').containsIP('192.168.0.200')", True),
        ("cidr('192.168.0.0/24').containsCIDR('192.168.0.0/16')", False),
        ("cidr('192.168.0.0/16').containsCIDR('192.168.0.0/16')", True),
        ("cidr('10.0.0.0/8').containsCIDR('::/0')", False),
        ("cidr('2001:db8::/32') == cidr('2001:0db8:0::/32')", True),
        ("cidr('10.0.0.5/8').masked().ip() == ip('10.0.0.0')", True),
        ("type(cidr('1.2.3.4/32')) == net.CIDR", True),
    ],
)
def test_cidr(expr: str, expected: object) -> None:
    assert value(expr) == expected


def test_contains_with_bad_strings() -> None:
    # Kubernetes reports a bad IP string as a missing overload, a bad CIDR string as its parse error
    assert error("cidr('10.0.0.0/8').containsIP('bogus')") == "no such overload"
    assert error("cidr('10.0.0.0/8').containsCIDR('10.1.0.0/33')").endswith("prefix length out of range")


def test_string_of_cidr() -> None:
    # string(cidr) type-checks only in the check-only environment (see the
    # library docstring); evaluated from an unchecked AST it works.
    assert value("string(cidr('10.0.0.1/8'))", check=False) == "10.0.0.1/8"
    assert value("string(cidr('2001:0DB8::/32').masked())", check=False) == "2001:db8::/32"
    assert value("string(cidr('10.0.0.1/8').ip())") == "10.0.0.1"
