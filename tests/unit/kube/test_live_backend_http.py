"""http.Get/Post in a cluster answer what Kyverno's live client answers (pkg/cel/libs/http): the decoded JSON body
itself, an error for a status outside 2xx or a body that is not JSON; only the headers given, a JSON body. Against
a real local HTTP server, through the CEL library as a policy calls it."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from vpol.cel.backend import BackendUnavailable
from vpol.kube.live_backend import LiveBackend
from tests.unit.cel.kyverno.conftest import error, value


class Handler(BaseHTTPRequestHandler):
    seen: list[dict[str, Any]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        Handler.seen.append({"method": self.command, "path": self.path, "body": body,
                             "headers": {k.lower(): v for k, v in self.headers.items()}})
        if self.path.startswith("/missing"):
            self.send_response(404)
            self.end_headers()
            return
        text = b"plain words" if self.path.startswith("/text") else json.dumps(
            {"path": self.path, "received": json.loads(body) if body else None, "allowed": True}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        self.wfile.write(text)

    do_GET = do_POST = do_PUT = _answer


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_get_answers_the_decoded_body_itself(server: str) -> None:
    backend = LiveBackend(http_allowlist=(server,))
    assert backend.http_get(f"{server}/a?x=1") == {"path": "/a?x=1", "received": None, "allowed": True}
    # As a policy reads it: a field of the body, not of a {statusCode, body} wrapper.
    assert value(f'http.Get("{server}/b").allowed', backend=backend) is True
    assert value(f'http.Get("{server}/b", {{"X-Who": "vpol"}}).path', backend=backend) == "/b"
    assert Handler.seen[-1]["headers"]["x-who"] == "vpol"


def test_post_sends_json_and_answers_the_body(server: str) -> None:
    backend = LiveBackend(http_allowlist=(server,))
    got = value(f'http.Post("{server}/p", {{"name": "a", "n": 1}}).received', backend=backend)
    assert got == {"name": "a", "n": 1}
    assert Handler.seen[-1]["method"] == "POST" and Handler.seen[-1]["headers"]["content-type"] == "application/json"
    # A type the policy sets is the one sent.
    value(f'http.Post("{server}/p", {{"k": "v"}}, {{"Content-Type": "application/merge-patch+json"}}).path',
          backend=backend)
    assert Handler.seen[-1]["headers"]["content-type"] == "application/merge-patch+json"


def test_a_status_outside_2xx_and_a_body_not_json_are_errors(server: str) -> None:
    backend = LiveBackend(http_allowlist=(server,))
    with pytest.raises(BackendUnavailable, match=r"^HTTP 404 Not Found$"):
        backend.http_get(f"{server}/missing")
    with pytest.raises(BackendUnavailable, match=r"^Unable to decode JSON body"):
        backend.http_get(f"{server}/text")
    # In a policy: Kyverno's wording, after the call.
    assert "request failed: HTTP 404 Not Found" in error(f'http.Get("{server}/missing").allowed', backend=backend)


def test_calls_outside_the_allowlist_are_refused_before_any_request(server: str) -> None:
    before = len(Handler.seen)
    with pytest.raises(BackendUnavailable, match="disabled"):
        LiveBackend().http_get(f"{server}/a")
    with pytest.raises(BackendUnavailable, match="not under an allowed prefix"):
        LiveBackend(http_allowlist=("http://elsewhere/",)).http_get(f"{server}/a")
    assert len(Handler.seen) == before
