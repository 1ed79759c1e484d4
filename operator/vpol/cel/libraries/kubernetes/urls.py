"""Kubernetes URL library: ``url()``, ``isURL()`` and the ``URL`` accessors.

As in k8s.io/apiserver/pkg/cel/library/urls.go: a string is a URL when
Go's ``url.ParseRequestURI`` accepts it (an absolute URI, or an absolute
path starting with ``/``; ``example.com`` alone is not a URL), and the
components come from ``url.Parse`` (which handles a ``#fragment``). Two
URLs are equal when Go's ``URL.String()`` of both are equal, so the
message keeps that string plus the components the accessors return.
"""

from __future__ import annotations

import functools

from vpol.cel import types
from vpol.cel.declare import STRING, Fn, T
from vpol.cel.libraries.kubernetes import gourl
from vpol.cel.libraries.kubernetes.overloads import KubernetesLibraryError, message

LIBRARY = "kubernetes.urls"

URL_TYPE, URLMessage = types.opaque_type(
    "kubernetes.URL",
    {"canonical": "bytes", "scheme": "bytes", "host": "bytes", "escaped_path": "bytes", "raw_query": "bytes"},
)
_URL = message(URL_TYPE, URLMessage)


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


@functools.lru_cache(maxsize=4096)
def _fields(text: str) -> tuple[bytes, bytes, bytes, bytes, bytes]:
    try:
        gourl.parse_request_uri(text)
        parsed = gourl.parse(text)
    except gourl.URLError as exc:
        raise KubernetesLibraryError(f"URL parse error during conversion from string: {exc}") from None
    return parsed.string(), parsed.scheme, parsed.host, parsed.escaped_path(), parsed.raw_query


def to_url(text: str) -> object:
    canonical, scheme, host, escaped_path, raw_query = _fields(text)
    return URLMessage(
        canonical=canonical, scheme=scheme, host=host, escaped_path=escaped_path, raw_query=raw_query
    )


@functools.lru_cache(maxsize=4096)
def is_url(text: str) -> bool:
    try:
        gourl.parse_request_uri(text)
    except gourl.URLError:
        return False
    return True


def get_scheme(url: object) -> str:
    return _text(url.scheme)  # type: ignore[attr-defined]


def get_host(url: object) -> str:
    return _text(url.host)  # type: ignore[attr-defined]


def get_hostname(url: object) -> str:
    return _text(gourl.URL(host=url.host).hostname())  # type: ignore[attr-defined]


def get_port(url: object) -> str:
    return _text(gourl.URL(host=url.host).port())  # type: ignore[attr-defined]


def get_escaped_path(url: object) -> str:
    return _text(url.escaped_path)  # type: ignore[attr-defined]


def get_query(url: object) -> dict[str, list[str]]:
    values = gourl.URL(raw_query=url.raw_query).query()  # type: ignore[attr-defined]
    out: dict[str, list[str]] = {}
    for key, items in values.items():
        out.setdefault(_text(key), []).extend(_text(v) for v in items)
    return out


def functions() -> list[Fn]:
    def getter(name: str, overload: str, impl: object, result: object = T.STRING) -> Fn:
        return Fn(LIBRARY, name, overload, (_URL,), result, impl, member=True)  # type: ignore[arg-type]

    return [
        Fn(LIBRARY, "url", "string_to_url", (STRING,), URL_TYPE, to_url),
        Fn(LIBRARY, "isURL", "is_url_string", (STRING,), T.BOOL, is_url),
        getter("getScheme", "url_get_scheme", get_scheme),
        getter("getHost", "url_get_host", get_host),
        getter("getHostname", "url_get_hostname", get_hostname),
        getter("getPort", "url_get_port", get_port),
        getter("getEscapedPath", "url_get_escaped_path", get_escaped_path),
        getter("getQuery", "url_get_query", get_query, T.Map(T.STRING, T.List(T.STRING))),
    ]
