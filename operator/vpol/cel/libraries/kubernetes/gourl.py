"""URL parsing with the rules of Go's ``net/url`` (Go 1.26), as Kubernetes uses it.

Hand-written because Python's ``urllib.parse`` follows different rules:
it never fails (Go rejects ``https://a:b:c/``, bad escapes, control
characters, relative references in ``ParseRequestURI``), splits hosts and
ports differently and re-encodes paths differently. Kubernetes' URL
library and the ``uri`` format are defined by ``url.ParseRequestURI``,
``url.Parse``, ``EscapedPath``, ``Hostname``, ``Port``, ``Query`` and
``String``; this module reproduces exactly those, working on UTF-8 bytes
like Go does.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from vpol.cel.libraries.kubernetes.goquote import go_quote

_ALNUM = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
_HEX = frozenset(b"0123456789abcdefABCDEF")

PATH, PATH_SEGMENT, HOST, ZONE, USER_PASSWORD, QUERY_COMPONENT, FRAGMENT = range(7)


class URLError(ValueError):
    """A URL Go's parser rejects; the text is Go's ``url.Error`` text."""


def _should_escape(c: int, mode: int) -> bool:
    if c in _ALNUM:
        return False
    if mode in (HOST, ZONE) and c in b"!$&'()*+,;=:[]<>\"":
        return False
    if c in b"-_.~":
        return False
    if c in b"$&+,/:;=?@":
        if mode == PATH:
            return c == ord("?")
        if mode == PATH_SEGMENT:
            return c in b"/;,?"
        if mode == USER_PASSWORD:
            return c in b"@/?:"
        if mode == QUERY_COMPONENT:
            return True
        if mode == FRAGMENT:
            return False
    if mode == FRAGMENT and c in b"!()*":
        return False
    return True


_ESCAPE_TABLE = {mode: [_should_escape(c, mode) for c in range(256)] for mode in range(7)}


def _unhex(c: int) -> int:
    if 48 <= c <= 57:
        return c - 48
    if 97 <= c <= 102:
        return c - 87
    return c - 55


def _escape_error(s: bytes) -> str:
    return "invalid URL escape " + go_quote(s.decode("utf-8", "replace"))


def unescape(s: bytes, mode: int) -> bytes:
    """Go's ``unescape``; raises ValueError with Go's message."""
    n = 0
    has_plus = False
    i = 0
    length = len(s)
    table = _ESCAPE_TABLE[HOST] if mode in (HOST, ZONE) else None
    while i < length:
        c = s[i]
        if c == 0x25:  # '%'
            n += 1
            if i + 2 >= length or s[i + 1] not in _HEX or s[i + 2] not in _HEX:
                bad = s[i:]
                raise ValueError(_escape_error(bad[:3]))
            if mode == HOST and _unhex(s[i + 1]) < 8 and s[i : i + 3] != b"%25":
                raise ValueError(_escape_error(s[i : i + 3]))
            if mode == ZONE:
                v = _unhex(s[i + 1]) << 4 | _unhex(s[i + 2])
                if s[i : i + 3] != b"%25" and v != 0x20 and _ESCAPE_TABLE[HOST][v]:
                    raise ValueError(_escape_error(s[i : i + 3]))
            i += 3
        elif c == 0x2B:  # '+'
            has_plus = mode == QUERY_COMPONENT
            i += 1
        else:
            if table is not None and c < 0x80 and _ESCAPE_TABLE[mode][c]:
                raise ValueError("invalid character " + go_quote(chr(c)) + " in host name")
            i += 1
    if n == 0 and not has_plus:
        return s
    out = bytearray()
    i = 0
    while i < length:
        c = s[i]
        if c == 0x25:
            out.append(_unhex(s[i + 1]) << 4 | _unhex(s[i + 2]))
            i += 3
            continue
        if c == 0x2B:
            out.append(0x20 if mode == QUERY_COMPONENT else 0x2B)
        else:
            out.append(c)
        i += 1
    return bytes(out)


def escape(s: bytes, mode: int) -> bytes:
    table = _ESCAPE_TABLE[mode]
    out = bytearray()
    for c in s:
        if c == 0x20 and mode == QUERY_COMPONENT:
            out.append(0x2B)
        elif table[c]:
            out += b"%" + b"0123456789ABCDEF"[c >> 4 : (c >> 4) + 1] + b"0123456789ABCDEF"[c & 15 : (c & 15) + 1]
        else:
            out.append(c)
    return bytes(out)


@dataclass(frozen=True)
class URL:
    """The fields of Go's ``url.URL`` that Kubernetes reads (as UTF-8 bytes)."""

    scheme: bytes = b""
    opaque: bytes = b""
    user: bytes | None = None  # escaped userinfo as String() writes it
    host: bytes = b""
    path: bytes = b""
    raw_path: bytes = b""
    raw_query: bytes = b""
    fragment: bytes = b""
    raw_fragment: bytes = b""
    force_query: bool = False
    omit_host: bool = False

    def escaped_path(self) -> bytes:
        if self.raw_path and _valid_encoded(self.raw_path, PATH):
            try:
                if unescape(self.raw_path, PATH) == self.path:
                    return self.raw_path
            except ValueError:
                pass
        if self.path == b"*":
            return b"*"
        return escape(self.path, PATH)

    def escaped_fragment(self) -> bytes:
        if self.raw_fragment and _valid_encoded(self.raw_fragment, FRAGMENT):
            try:
                if unescape(self.raw_fragment, FRAGMENT) == self.fragment:
                    return self.raw_fragment
            except ValueError:
                pass
        return escape(self.fragment, FRAGMENT)

    def hostname(self) -> bytes:
        return _split_host_port(self.host)[0]

    def port(self) -> bytes:
        return _split_host_port(self.host)[1]

    def query(self) -> dict[bytes, list[bytes]]:
        """``url.Query()``: malformed pairs are silently dropped."""
        values: dict[bytes, list[bytes]] = {}
        query = self.raw_query
        if query.count(b"&") + 1 > 10000:
            return values
        while query:
            key, _, query = query.partition(b"&")
            if b";" in key or not key:
                continue
            key, _, value = key.partition(b"=")
            try:
                key = unescape(key, QUERY_COMPONENT)
                value = unescape(value, QUERY_COMPONENT)
            except ValueError:
                continue
            values.setdefault(key, []).append(value)
        return values

    def string(self) -> bytes:
        """``URL.String()``."""
        buf = bytearray()
        if self.scheme:
            buf += self.scheme + b":"
        if self.opaque:
            buf += self.opaque
        else:
            if self.scheme or self.host or self.user is not None:
                if not (self.omit_host and not self.host and self.user is None):
                    if self.host or self.path or self.user is not None:
                        buf += b"//"
                    if self.user is not None:
                        buf += self.user + b"@"
                    if self.host:
                        buf += escape(self.host, HOST)
            path = self.escaped_path()
            if path and path[:1] != b"/" and self.host:
                buf += b"/"
            if not buf and b":" in path.partition(b"/")[0]:
                buf += b"./"
            buf += path
        if self.force_query or self.raw_query:
            buf += b"?" + self.raw_query
        if self.fragment:
            buf += b"#" + self.escaped_fragment()
        return bytes(buf)


def _valid_encoded(s: bytes, mode: int) -> bool:
    table = _ESCAPE_TABLE[mode]
    for c in s:
        if c in b"!$&'()*+,;=:@[]%":
            continue
        if table[c]:
            return False
    return True


def _valid_optional_port(port: bytes) -> bool:
    if not port:
        return True
    if port[:1] != b":":
        return False
    return all(48 <= b <= 57 for b in port[1:])


def _split_host_port(host_port: bytes) -> tuple[bytes, bytes]:
    host, port = host_port, b""
    colon = host.rfind(b":")
    if colon != -1 and _valid_optional_port(host[colon:]):
        host, port = host[:colon], host[colon + 1 :]
    if host.startswith(b"[") and host.endswith(b"]"):
        host = host[1:-1]
    return host, port


def _get_scheme(raw: bytes) -> tuple[bytes, bytes]:
    for i, c in enumerate(raw):
        if 97 <= c <= 122 or 65 <= c <= 90:
            continue
        if 48 <= c <= 57 or c in b"+-.":
            if i == 0:
                return b"", raw
            continue
        if c == 0x3A:  # ':'
            if i == 0:
                raise ValueError("missing protocol scheme")
            return raw[:i], raw[i + 1 :]
        return b"", raw
    return b"", raw


def _parse_host(scheme: bytes, host: bytes) -> bytes:
    open_bracket = host.rfind(b"[")
    if open_bracket > 0:
        raise ValueError("invalid IP-literal")
    if open_bracket == 0:
        close_bracket = host.rfind(b"]")
        if close_bracket < 0:
            raise ValueError("missing ']' in host")
        colon_port = host[close_bracket + 1 :]
        if not _valid_optional_port(colon_port):
            raise ValueError(f"invalid port {go_quote(colon_port.decode('utf-8', 'replace'))} after host")
        unescaped_colon_port = unescape(colon_port, HOST)
        hostname = host[1:close_bracket]
        zone = hostname.find(b"%25")
        if zone >= 0:
            unescaped = unescape(hostname[:zone], HOST) + unescape(hostname[zone:], ZONE)
        else:
            unescaped = unescape(hostname, HOST)
        _check_ip_literal(unescaped)
        return b"[" + unescaped + b"]" + unescaped_colon_port
    first = host.find(b":")
    if first != -1:
        last = host.rfind(b":")
        # Go 1.26 (urlstrictcolons): extra colons only outside http(s).
        if last != first and scheme not in (b"http", b"https"):
            first = last
        colon_port = host[first:]
        if not _valid_optional_port(colon_port):
            raise ValueError(f"invalid port {go_quote(colon_port.decode('utf-8', 'replace'))} after host")
    return unescape(host, HOST)


def _check_ip_literal(literal: bytes) -> None:
    """An IP literal in brackets must be an IPv6 address (netip.ParseAddr rules)."""
    text = literal.decode("utf-8", "replace")
    address, sep, zone = text.partition("%")
    if sep and not zone:
        raise ValueError(f"invalid host: ParseAddr({go_quote(text)}): zone must be a non-empty string")
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        raise ValueError(f"invalid host: ParseAddr({go_quote(text)}): unable to parse IP") from None
    if parsed.version == 4:
        if sep:
            raise ValueError(f"invalid host: ParseAddr({go_quote(text)}): unexpected character")
        raise ValueError("invalid IP-literal")


def _valid_userinfo(s: bytes) -> bool:
    try:
        text = s.decode("utf-8")
    except UnicodeDecodeError:
        return False
    for ch in text:
        if ch.isascii() and (ch.isalnum() or ch in "-._:~!$&'()*+,;=%@"):
            continue
        return False
    return True


def _parse_authority(scheme: bytes, authority: bytes) -> tuple[bytes | None, bytes]:
    at = authority.rfind(b"@")
    host = _parse_host(scheme, authority if at < 0 else authority[at + 1 :])
    if at < 0:
        return None, host
    userinfo = authority[:at]
    if not _valid_userinfo(userinfo):
        raise ValueError("net/url: invalid userinfo")
    if b":" not in userinfo:
        user = escape(unescape(userinfo, USER_PASSWORD), USER_PASSWORD)
    else:
        name, _, password = userinfo.partition(b":")
        user = (
            escape(unescape(name, USER_PASSWORD), USER_PASSWORD)
            + b":"
            + escape(unescape(password, USER_PASSWORD), USER_PASSWORD)
        )
    return user, host


def _parse(raw: bytes, via_request: bool) -> URL:
    if any(b < 0x20 or b == 0x7F for b in raw):
        raise ValueError("net/url: invalid control character in URL")
    if not raw and via_request:
        raise ValueError("empty url")
    if raw == b"*":
        return URL(path=b"*")
    scheme, rest = _get_scheme(raw)
    scheme = scheme.lower()
    force_query = False
    raw_query = b""
    if rest.endswith(b"?") and rest.count(b"?") == 1:
        force_query = True
        rest = rest[:-1]
    else:
        rest, _, raw_query = rest.partition(b"?")
    if not rest.startswith(b"/"):
        if scheme:
            return URL(scheme=scheme, opaque=rest, raw_query=raw_query, force_query=force_query)
        if via_request:
            raise ValueError("invalid URI for request")
        if b":" in rest.partition(b"/")[0]:
            raise ValueError("first path segment in URL cannot contain colon")
    user: bytes | None = None
    host = b""
    omit_host = False
    if (scheme or (not via_request and not rest.startswith(b"///"))) and rest.startswith(b"//"):
        authority, rest = rest[2:], b""
        slash = authority.find(b"/")
        if slash >= 0:
            authority, rest = authority[:slash], authority[slash:]
        user, host = _parse_authority(scheme, authority)
    elif scheme and rest.startswith(b"/"):
        omit_host = True
    path = unescape(rest, PATH)
    raw_path = b"" if escape(path, PATH) == rest else rest
    return URL(
        scheme=scheme,
        user=user,
        host=host,
        path=path,
        raw_path=raw_path,
        raw_query=raw_query,
        force_query=force_query,
        omit_host=omit_host,
    )


def _error(raw: bytes, message: str) -> URLError:
    return URLError(f"parse {go_quote(raw.decode('utf-8', 'replace'))}: {message}")


def parse_request_uri(text: str) -> URL:
    """``url.ParseRequestURI``: an absolute URI or an absolute path, no fragment."""
    raw = text.encode("utf-8")
    try:
        return _parse(raw, True)
    except ValueError as exc:
        raise _error(raw, str(exc)) from None


def parse(text: str) -> URL:
    """``url.Parse``: any URI reference, ``#fragment`` split off first."""
    raw = text.encode("utf-8")
    head, sep, frag = raw.partition(b"#")
    try:
        url = _parse(head, False)
    except ValueError as exc:
        raise _error(head, str(exc)) from None
    if not sep or not frag:
        return url
    try:
        fragment = unescape(frag, FRAGMENT)
    except ValueError as exc:
        raise _error(raw, str(exc)) from None
    raw_fragment = b"" if escape(fragment, FRAGMENT) == frag else frag
    return URL(
        scheme=url.scheme,
        opaque=url.opaque,
        user=url.user,
        host=url.host,
        path=url.path,
        raw_path=url.raw_path,
        raw_query=url.raw_query,
        fragment=fragment,
        raw_fragment=raw_fragment,
        force_query=url.force_query,
        omit_host=url.omit_host,
    )
