"""Kubernetes IP and CIDR libraries: ``ip()``, ``isIP()``, ``cidr()``, ``isCIDR()`` and their methods.

Semantics of k8s.io/apiserver/pkg/cel/library/ip.go and cidr.go, which use
Go's ``net/netip``: no IPv4 octet with a leading zero, no IPv6 zone
(``fe80::1%eth0``), no IPv4-mapped IPv6 address (``::ffff:1.2.3.4``);
``string()`` and ``ip.isCanonical()`` use the RFC 5952 form (Python's
``ipaddress`` agrees with ``netip`` on what it accepts and on that form).
The address properties (``isLoopback``, ``isGlobalUnicast``...) follow
``netip.Addr``'s definitions, which differ from ``ipaddress``' (for Go,
private addresses are global unicast).

A CIDR keeps the address as written: ``cidr('192.168.0.1/24').ip()`` is
``192.168.0.1`` and differs from ``cidr('192.168.0.0/24')``; ``masked()``
gives the network. Values are messages with the canonical address text, so
CEL ``==`` is netip's equality.
"""

from __future__ import annotations

import functools
import ipaddress
from typing import Any

from vpol.cel import types
from vpol.cel.declare import STRING, Fn, T
from vpol.cel.libraries.kubernetes.goquote import go_quote
from vpol.cel.libraries.kubernetes.overloads import KubernetesLibraryError, message

IP_LIBRARY = "kubernetes.net.ip"
CIDR_LIBRARY = "kubernetes.net.cidr"

IP_TYPE, IPMessage = types.opaque_type("net.IP", {"address": "string"})
CIDR_TYPE, CIDRMessage = types.opaque_type("net.CIDR", {"address": "string", "prefix_length": "int64"})
_IP = message(IP_TYPE, IPMessage)
_CIDR = message(CIDR_TYPE, CIDRMessage)

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


@functools.lru_cache(maxsize=4096)
def _parse_addr(raw: str) -> Address:
    """netip.ParseAddr plus Kubernetes' extra rules, with Kubernetes' messages."""
    try:
        addr = ipaddress.ip_address(raw)
    except ValueError as exc:
        raise KubernetesLibraryError(
            f"IP Address {go_quote(raw)} parse error during conversion from string: "
            f"ParseAddr({go_quote(raw)}): {exc}"
        ) from None
    if isinstance(addr, ipaddress.IPv6Address) and addr.scope_id is not None:
        raise KubernetesLibraryError(f"IP address {go_quote(raw)} with zone value is not allowed")
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        raise KubernetesLibraryError(f"IPv4-mapped IPv6 address {go_quote(raw)} is not allowed")
    return addr


def _addr(msg: Any) -> Address:
    return _canonical_addr(msg.address)


@functools.lru_cache(maxsize=4096)
def _canonical_addr(text: str) -> Address:
    return ipaddress.ip_address(text)


def _ip_message(addr: Address) -> Any:
    return IPMessage(address=str(addr))


def ip(text: str) -> Any:
    return _ip_message(_parse_addr(text))


def is_ip(text: str) -> bool:
    try:
        _parse_addr(text)
    except KubernetesLibraryError:
        return False
    return True


def is_canonical(text: str) -> bool:
    return str(_parse_addr(text)) == text


def family(msg: Any) -> int:
    return _addr(msg).version


def is_unspecified(msg: Any) -> bool:
    return int(_addr(msg)) == 0


def is_loopback(msg: Any) -> bool:
    addr = _addr(msg)
    if addr.version == 4:
        return int(addr) >> 24 == 127
    return int(addr) == 1


def _is_multicast(addr: Address) -> bool:
    if addr.version == 4:
        return int(addr) >> 28 == 0xE
    return int(addr) >> 120 == 0xFF


def is_link_local_multicast(msg: Any) -> bool:
    addr = _addr(msg)
    if addr.version == 4:
        return int(addr) >> 8 == 0xE00000  # 224.0.0.0/24
    return (int(addr) >> 112) & 0xFF0F == 0xFF02


def _is_link_local_unicast(addr: Address) -> bool:
    if addr.version == 4:
        return int(addr) >> 16 == 0xA9FE  # 169.254.0.0/16
    return (int(addr) >> 112) & 0xFFC0 == 0xFE80


def is_link_local_unicast(msg: Any) -> bool:
    return _is_link_local_unicast(_addr(msg))


def is_global_unicast(msg: Any) -> bool:
    addr = _addr(msg)
    value = int(addr)
    if addr.version == 4 and value in (0, 0xFFFFFFFF):
        return False
    if value == 0:
        return False
    return not (
        (addr.version == 4 and value >> 24 == 127)
        or (addr.version == 6 and value == 1)
        or _is_multicast(addr)
        or _is_link_local_unicast(addr)
    )


def ip_string(msg: Any) -> str:
    return str(msg.address)


def _prefix_error(raw: str, detail: str) -> KubernetesLibraryError:
    return KubernetesLibraryError(
        "network address parse error during conversion from string: "
        "network address parse error during conversion from string: "
        f"netip.ParsePrefix({go_quote(raw)}): {detail}"
    )


@functools.lru_cache(maxsize=4096)
def _parse_prefix(raw: str) -> tuple[Address, int]:
    """netip.ParsePrefix plus Kubernetes' extra rule, with Kubernetes' messages."""
    slash = raw.rfind("/")
    if slash < 0:
        raise _prefix_error(raw, "no '/'")
    text, bits_text = raw[:slash], raw[slash + 1 :]
    try:
        addr = ipaddress.ip_address(text)
    except ValueError as exc:
        raise _prefix_error(raw, f"ParseAddr({go_quote(text)}): {exc}") from None
    if isinstance(addr, ipaddress.IPv6Address) and addr.scope_id is not None:
        raise _prefix_error(raw, "IPv6 zones cannot be present in a prefix")
    if (len(bits_text) > 1 and not "1" <= bits_text[0] <= "9") or not (
        bits_text.isascii() and bits_text.isdigit()
    ):
        raise _prefix_error(raw, f"bad bits after slash: {go_quote(bits_text)}")
    bits = int(bits_text)
    if bits > addr.max_prefixlen:
        raise _prefix_error(raw, "prefix length out of range")
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        raise KubernetesLibraryError(
            "network address parse error during conversion from string: "
            f"IPv4-mapped IPv6 address {go_quote(raw)} is not allowed"
        )
    return addr, bits


def _cidr_message(addr: Address, bits: int) -> Any:
    return CIDRMessage(address=str(addr), prefix_length=bits)


def _network(addr: Address, bits: int) -> int:
    width = addr.max_prefixlen
    return int(addr) >> (width - bits) << (width - bits) if bits else 0


def cidr(text: str) -> Any:
    return _cidr_message(*_parse_prefix(text))


def is_cidr(text: str) -> bool:
    try:
        _parse_prefix(text)
    except KubernetesLibraryError:
        return False
    return True


def _contains_addr(net: Any, addr: Address) -> bool:
    base = _addr(net)
    if base.version != addr.version:
        return False
    bits = int(net.prefix_length)
    return _network(base, bits) == _network(addr, bits)


def contains_ip(net: Any, other: Any) -> bool:
    if isinstance(other, str):
        # Kubernetes reports a bad string as a missing overload, not a parse error.
        try:
            addr = _parse_addr(other)
        except KubernetesLibraryError:
            raise KubernetesLibraryError("no such overload") from None
        return _contains_addr(net, addr)
    return _contains_addr(net, _addr(other))


def contains_cidr(net: Any, other: Any) -> bool:
    if isinstance(other, str):
        other_addr, other_bits = _parse_prefix(other)
    else:
        other_addr, other_bits = _addr(other), int(other.prefix_length)
    base = _addr(net)
    bits = int(net.prefix_length)
    if base.version != other_addr.version:
        return False
    shortest = min(bits, other_bits)
    return _network(base, shortest) == _network(other_addr, shortest) and bits <= other_bits


def cidr_ip(net: Any) -> Any:
    return IPMessage(address=net.address)


def prefix_length(net: Any) -> int:
    return int(net.prefix_length)


def masked(net: Any) -> Any:
    base = _addr(net)
    bits = int(net.prefix_length)
    return _cidr_message(type(base)(_network(base, bits)), bits)


def cidr_string(net: Any) -> str:
    return f"{net.address}/{int(net.prefix_length)}"


def functions() -> list[Fn]:
    ipm, cidrm = _IP, _CIDR
    ip_lib, cidr_lib = IP_LIBRARY, CIDR_LIBRARY
    return [
        Fn(ip_lib, "ip", "string_to_ip", (STRING,), IP_TYPE, ip),
        Fn(ip_lib, "family", "ip_family", (ipm,), T.INT, family, member=True),
        Fn(ip_lib, "ip.isCanonical", "ip_is_canonical", (STRING,), T.BOOL, is_canonical),
        Fn(ip_lib, "isUnspecified", "ip_is_unspecified", (ipm,), T.BOOL, is_unspecified, member=True),
        Fn(ip_lib, "isLoopback", "ip_is_loopback", (ipm,), T.BOOL, is_loopback, member=True),
        Fn(ip_lib, "isLinkLocalMulticast", "ip_is_link_local_multicast", (ipm,), T.BOOL, is_link_local_multicast,
           member=True),
        Fn(ip_lib, "isLinkLocalUnicast", "ip_is_link_local_unicast", (ipm,), T.BOOL, is_link_local_unicast,
           member=True),
        Fn(ip_lib, "isGlobalUnicast", "ip_is_global_unicast", (ipm,), T.BOOL, is_global_unicast, member=True),
        Fn(ip_lib, "isIP", "is_ip", (STRING,), T.BOOL, is_ip),
        # string(IP) and string(CIDR) share the "message" kind: one carries
        # the dispatcher. Evaluated with a type-checked AST, only string(IP)
        # type-checks (see the package docstring).
        Fn(ip_lib, "string", "ip_to_string", (ipm,), T.STRING, ip_string, carrier=True),
        Fn(cidr_lib, "string", "cidr_to_string", (cidrm,), T.STRING, cidr_string),
        Fn(cidr_lib, "cidr", "string_to_cidr", (STRING,), CIDR_TYPE, cidr),
        Fn(cidr_lib, "containsIP", "cidr_contains_ip_string", (cidrm, STRING), T.BOOL, contains_ip, member=True),
        Fn(cidr_lib, "containsIP", "cidr_contains_ip_ip", (cidrm, ipm), T.BOOL, contains_ip, member=True),
        Fn(cidr_lib, "containsCIDR", "cidr_contains_cidr_string", (cidrm, STRING), T.BOOL, contains_cidr,
           member=True),
        Fn(cidr_lib, "containsCIDR", "cidr_contains_cidr", (cidrm, cidrm), T.BOOL, contains_cidr, member=True),
        Fn(cidr_lib, "ip", "cidr_ip", (cidrm,), IP_TYPE, cidr_ip, member=True),
        Fn(cidr_lib, "prefixLength", "cidr_prefix_length", (cidrm,), T.INT, prefix_length, member=True),
        Fn(cidr_lib, "masked", "cidr_masked", (cidrm,), CIDR_TYPE, masked, member=True),
        Fn(cidr_lib, "isCIDR", "is_cidr", (STRING,), T.BOOL, is_cidr),
    ]
