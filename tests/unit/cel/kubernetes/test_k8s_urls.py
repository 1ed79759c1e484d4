"""Kubernetes URL library: url, isURL and the URL accessors (Go net/url rules)."""

from __future__ import annotations

import pytest

from tests.unit.cel.kubernetes.conftest import error, value


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # godoc examples of urls.go
        ("https://user:pass@example.com:80/path?query=val#fragment", True),
        ("/absolute-path", True),
        ("https://a:b:c/", False),
        ("../relative-path", False),
        # a host without a scheme is not an absolute URI nor an absolute path
        ("example.com", False),
        ("", False),
        ("*", True),
        ("mailto:joe@example.com", True),
        ("http://x/%zz", False),
        ("http://[::1", False),
        ("http://x:port/", False),
        ("http://a b/", False),
        ("http://x/\t", False),
        ("postgres://h1:1,h2:2/db", True),  # extra colons only for http(s)
        ("http://x:80:90/", False),
        (":foo", False),
        ("//host/path", True),
        ("http://[fe80::1%25en0]:8080/", True),
        ("http://[1.2.3.4]/", False),
    ],
)
def test_is_url(text: str, expected: bool) -> None:
    assert value("isURL(object)", object=text) is expected


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("url('/path').getScheme()", ""),
        ("url('https://example.com/').getScheme()", "https"),
        ("url('HTTP://EXAMPLE.COM/A').getScheme()", "http"),
        ("url('https://example.com:80/').getHost()", "example.com:80"),
        ("url('https://example.com/').getHost()", "example.com"),
        ("url('https://[::1]:80/').getHost()", "[::1]:80"),
        ("url('https://[::1]/').getHost()", "[::1]"),
        ("url('/path').getHost()", ""),
        ("url('https://example.com:80/').getHostname()", "example.com"),
        ("url('https://127.0.0.1:80/').getHostname()", "127.0.0.1"),
        ("url('https://[::1]:80/').getHostname()", "::1"),
        ("url('/path').getHostname()", ""),
        ("url('https://example.com:80/').getPort()", "80"),
        ("url('https://example.com/').getPort()", ""),
        ("url('/path').getPort()", ""),
        ("url('https://example.com/path').getEscapedPath()", "/path"),
        ("url('https://example.com/path with spaces/').getEscapedPath()", "/path%20with%20spaces/"),
        ("url('https://example.com').getEscapedPath()", ""),
        ("url('http://x/%41%2f').getEscapedPath()", "/%41%2f"),
        ("url('http://x/é').getEscapedPath()", "/%C3%A9"),
        ("url('http://ex%c3%a9mple.com/').getHost()", "exémple.com"),
        ("url('http://x/#frag').getEscapedPath()", "/"),
        ("url('mailto:joe@example.com').getHost()", ""),
    ],
)
def test_accessors(expr: str, expected: str) -> None:
    assert value(expr) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("https://example.com/path?k1=a&k2=b&k2=c", {"k1": ["a"], "k2": ["b", "c"]}),
        ("https://example.com/path?key with spaces=value with spaces", {"key with spaces": ["value with spaces"]}),
        ("https://example.com/path?", {}),
        ("https://example.com/path", {}),
        # malformed pairs are dropped, as Go's URL.Query() does
        ("http://x/?a=1&b&c=&=d&e=%zz&f=%41;g=1", {"a": ["1"], "b": [""], "c": [""], "": ["d"]}),
        ("http://x/?a+b=c+d&a%20b=e", {"a b": ["c d", "e"]}),
        ("http://x/p?q#f", {"q": [""]}),
    ],
)
def test_get_query(text: str, expected: dict[str, list[str]]) -> None:
    assert value("url(object).getQuery()", object=text) == expected


def test_equality_is_on_the_normalized_url() -> None:
    assert value("url('https://example.com/a') == url('HTTPS://example.com/a')") is True
    assert value("url('https://example.com/a') == url('https://example.com/b')") is False
    assert value("url('http://x/%41') == url('http://x/A')") is False
    assert value("url('http://x/?') == url('http://x/')") is False
    assert value("type(url('/a')) == kubernetes.URL") is True


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("https://a:b:c/", 'parse "https://a:b:c/": invalid port ":b:c" after host'),
        ("../relative-path", 'parse "../relative-path": invalid URI for request'),
        ("example.com", 'parse "example.com": invalid URI for request'),
        ("http://x/%zz", 'parse "http://x/%zz": invalid URL escape "%zz"'),
        ("", 'parse "": empty url'),
        # a host may %-encode only non-ASCII bytes
        ("http://ex%41mple.com/", 'parse "http://ex%41mple.com/": invalid URL escape "%41"'),
        ("http://x/\t", 'parse "http://x/\\t": net/url: invalid control character in URL'),
    ],
)
def test_url_errors(text: str, message: str) -> None:
    assert error("url(object)", object=text) == f"URL parse error during conversion from string: {message}"
