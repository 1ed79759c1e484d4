"""Overloads that share runtime argument kinds but not result types still return their own results."""

from __future__ import annotations

from cel_expr_python import cel

from vpol.cel.backend import using
from vpol.cel.environment import environment
from vpol.cel.offline_backend import OfflineBackend

DATA = {"object": {}, "oldObject": None, "request": {}, "namespaceObject": None, "variables": {}, "exceptions": {}}


def test_http_post_with_string_body_and_non_object_response():
    backend = OfflineBackend(http_responses=[{"method": "POST", "url": "https://x.test/", "response": "plain text"}])
    env = environment()
    from vpol.cel.environment import library_variables

    data = {**DATA, **{n: v for n, (_t, v) in library_variables().items()}}
    with using(backend):
        value = env.compile("http.Post('https://x.test/', 'body', {'h': 'v'})").eval(data=data)
    assert value.type() != cel.Type.ERROR, value.value()
    assert value.plain_value() == "plain text"
