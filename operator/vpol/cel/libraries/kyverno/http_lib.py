"""Kyverno's http library: the ``http`` variable, served by the backend.

Members (each also in camel case: ``get``, ``post``, ``put``, ``client``):

* ``http.Get(url)``, ``http.Get(url, headers)`` -> the decoded response (dyn).
* ``http.Post(url, body)``, ``http.Post(url, body, headers)``; ``http.Put``
  alike. ``body`` is any JSON value; ``headers`` a ``map(string, string)``.
* ``http.Client(caBundle)`` -> a client trusting the PEM bundle (``""``: the
  default client); the bundle must hold at least one certificate
  (``failed to parse PEM CA bundle for APICall``). The bundle is not passed
  to the backend, whose interface does not take one.

Failures are CEL errors ``<call>: request failed: <reason>``. ``Put`` needs a
backend with ``http_put(url, body, headers)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cel_expr_python import cel
from cryptography import x509

from vpol.cel import types
from vpol.cel.declare import JSON_VALUE, STRING, STRING_STRING_MAP, message
from vpol.cel.libraries.kyverno.backend_call import call, describe
from vpol.cel.libraries.kyverno.declarations import Fn

LIBRARY = "kyverno.http"

HTTP_TYPE, HttpContext = types.opaque_type("vpol.kyverno.HttpContext", {"ca_bundle": "string"})
_CTX = message(HTTP_TYPE, HttpContext)


def get(name: str, url: str, headers: Mapping[str, str] | None = None) -> Any:
    args: list[Any] = [url] + ([dict(headers)] if headers is not None else [])
    return call(describe(f"http.{name}", *args), "request failed", lambda b: b.http_get(url, dict(headers or {})))


def post(name: str, url: str, body: Any, headers: Mapping[str, str] | None = None) -> Any:
    args: list[Any] = [url, body] + ([dict(headers)] if headers is not None else [])
    return call(describe(f"http.{name}", *args), "request failed", lambda b: b.http_post(url, body, dict(headers or {})))


def put(name: str, url: str, body: Any, headers: Mapping[str, str] | None = None) -> Any:
    args: list[Any] = [url, body] + ([dict(headers)] if headers is not None else [])

    def request(b: Any) -> Any:
        http_put = getattr(b, "http_put", None)
        if http_put is None:
            raise RuntimeError(f"http.Put is not available ({b.name} backend)")
        return http_put(url, body, dict(headers or {}))

    return call(describe(f"http.{name}", *args), "request failed", request)


def client(name: str, ca_bundle: str) -> Any:
    if ca_bundle:
        try:
            x509.load_pem_x509_certificates(ca_bundle.encode("utf-8"))
        except ValueError:
            raise ValueError(f"http.{name}(...): request failed: failed to parse PEM CA bundle for APICall") from None
    return HttpContext(ca_bundle=ca_bundle)


def variables() -> dict[str, tuple[cel.Type, Any]]:
    return {"http": (HTTP_TYPE, HttpContext())}


def _functions(names: tuple[str, str, str, str], style: str) -> list[Fn]:
    T = cel.Type
    get_name, post_name, put_name, client_name = names

    def fn(function: str, sig: str, result: cel.Type, params: tuple[Any, ...], impl: Any) -> Fn:
        return Fn(LIBRARY, function, f"kyverno_http_{function.lower()}_{sig}_{style}", result, (_CTX, *params), impl, member=True)

    out = [
        fn(get_name, "string", T.DYN, (STRING,), lambda _c, url: get(get_name, url)),
        fn(get_name, "string_map", T.DYN, (STRING, STRING_STRING_MAP), lambda _c, url, h: get(get_name, url, h)),
        fn(client_name, "string", HTTP_TYPE, (STRING,), lambda _c, ca: client(client_name, ca)),
    ]
    for body in JSON_VALUE:
        out += [
            fn(post_name, f"string_{body.kind}", T.DYN, (STRING, body), lambda _c, url, b: post(post_name, url, b)),
            fn(post_name, f"string_{body.kind}_map", T.DYN, (STRING, body, STRING_STRING_MAP),
               lambda _c, url, b, h: post(post_name, url, b, h)),
            fn(put_name, f"string_{body.kind}", T.DYN, (STRING, body), lambda _c, url, b: put(put_name, url, b)),
            fn(put_name, f"string_{body.kind}_map", T.DYN, (STRING, body, STRING_STRING_MAP),
               lambda _c, url, b, h: put(put_name, url, b, h)),
        ]
    return out


def functions() -> Sequence[Fn]:
    return [*_functions(("Get", "Post", "Put", "Client"), "pascal"), *_functions(("get", "post", "put", "client"), "camel")]
