"""The webhook's bookkeeping of an answered request (metrics, events) runs once the answer has gone: the API server
does not wait for it."""

from __future__ import annotations

import asyncio
import datetime
import socket
import ssl
import threading
import time
from typing import Any

import pytest

from vpol.controller import metrics
from vpol.controller.admission.server import CertificateFiles, ServerOptions, WebhookServer
from vpol.desired.certificates import new_serving_certificate
from vpol.model.discovery import builtin

from tests.unit.controller.webhook_requests import REVIEW, Policies

#: How long the bookkeeping takes here (blocking the event loop, as a slow recorder would).
SLOW = 1.0


def _post(port: int, arrived: dict[str, Any]) -> None:
    """In a thread of its own (the server's loop is blocked by the bookkeeping): one request, the time its
    answer's status line and headers arrived."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as conn:
        conn.sendall(b"POST /validate/fail HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(REVIEW) + REVIEW)
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = conn.recv(4096)
            if not chunk:
                break
            head += chunk
        arrived["at"] = time.monotonic()
        arrived["head"] = head.decode(errors="replace")


def test_the_answer_reaches_the_api_server_before_the_bookkeeping_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    bundle = new_serving_certificate([], ["127.0.0.1"], now=datetime.datetime.now(datetime.timezone.utc))
    server = WebhookServer(Policies(), None, builtin, CertificateFiles(lambda: bundle),  # type: ignore[arg-type]
                           options=ServerOptions(host="127.0.0.1", port=port, inline=None))
    recorded: list[tuple[str, float]] = []

    def slow_latency(webhook: str, seconds: float) -> None:
        recorded.append((webhook, time.monotonic()))
        time.sleep(SLOW)

    monkeypatch.setattr(metrics, "admission_latency", slow_latency)
    arrived: dict[str, Any] = {}

    async def scenario() -> None:
        await server.start()
        for _ in range(100):
            if server.answering_version() >= 0:  # listening, its policies loaded
                break
            await asyncio.sleep(0.1)
        try:
            client = threading.Thread(target=_post, args=(port, arrived))
            client.start()
            while client.is_alive():
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)  # the bookkeeping's turn, if it has not run yet
        finally:
            await server.stop()

    asyncio.run(scenario())
    assert arrived["head"].startswith("HTTP/1.1 200"), arrived
    assert [webhook for webhook, _at in recorded] == ["fail"]  # recorded, with the request's webhook
    # The answer arrived before the bookkeeping ended (it would arrive SLOW seconds after it started otherwise).
    assert arrived["at"] < recorded[0][1] + SLOW / 2
