"""A stopping webhook drains: for ServerOptions.drain_seconds it still answers on the connections the API server
holds (and on new ones), each answer saying `Connection: close`, /readyz says it is stopping; then it closes.

Without the drain a stopping server closed kept-alive connections at once, and a request the API server was
writing on one of them at that moment failed with EOF (seen once in about ten runs of tests/e2e/test_helm_node.py's
leader deletion under load)."""

from __future__ import annotations

import asyncio
import datetime
import json
import ssl

from vpol.controller.admission.server import DRAINING, READY_PATH, CertificateFiles, ServerOptions, WebhookServer
from vpol.desired.certificates import new_serving_certificate
from vpol.model.discovery import builtin

from .test_webhook_listen import Policies


async def _exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    path: str) -> tuple[int, dict[str, str], bytes]:
    """One kept-alive HTTP/1.1 GET: (status, headers in lower case, body); EOF raises IncompleteReadError."""
    writer.write(f"GET {path} HTTP/1.1\r\nHost: vpol-webhook.vpol-system.svc\r\n\r\n".encode())
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return int(lines[0].split()[1]), headers, body


def _server(drain_seconds: float) -> WebhookServer:
    bundle = new_serving_certificate(["localhost"], ["127.0.0.1"], now=datetime.datetime.now(datetime.timezone.utc))
    return WebhookServer(Policies(), None, builtin, CertificateFiles(lambda: bundle),  # type: ignore[arg-type]
                         options=ServerOptions(host="127.0.0.1", port=0, inline=None, drain_seconds=drain_seconds))


async def _listening(server: WebhookServer) -> int:
    """Start ``server``; the port it listens on."""
    await server.start()
    for _ in range(100):
        if server.listening:
            break
        await asyncio.sleep(0.05)
    assert server._listener is not None  # noqa: SLF001
    return int(server._listener.sockets[0].getsockname()[1])  # type: ignore[attr-defined]  # noqa: SLF001


CONTEXT = ssl.create_default_context()
CONTEXT.check_hostname, CONTEXT.verify_mode = False, ssl.CERT_NONE


def test_a_stopping_server_answers_on_held_connections_with_connection_close_then_closes() -> None:
    server = _server(drain_seconds=1.5)

    async def scenario() -> None:
        port = await _listening(server)
        held = await asyncio.open_connection("127.0.0.1", port, ssl=CONTEXT)
        status, headers, _ = await _exchange(*held, "/healthz")
        assert status == 200 and headers.get("connection", "").lower() != "close"  # kept alive before the stop

        stopping = asyncio.create_task(server.stop())
        await asyncio.sleep(0.3)
        assert not stopping.done() and server.draining
        # A request on a connection held from before the stop is still answered, and that answer closes it.
        status, headers, _ = await _exchange(*held, "/healthz")
        assert status == 200 and headers["connection"].lower() == "close"
        assert await held[0].read() == b""  # the server closed it after the answer
        held[1].close()
        # A connection made while draining is served the same way; the replica is no longer ready.
        late = await asyncio.open_connection("127.0.0.1", port, ssl=CONTEXT)
        status, headers, body = await _exchange(*late, READY_PATH)
        assert status == 503 and headers["connection"].lower() == "close"
        assert json.loads(body) == {"ready": False, "reason": DRAINING}
        late[1].close()

        await asyncio.wait_for(stopping, 10)
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=CONTEXT)
        except OSError:
            return
        writer.close()
        raise AssertionError("the stopped server still accepts connections")

    asyncio.run(scenario())


def test_without_a_drain_the_server_closes_held_connections_at_once() -> None:
    """drain_seconds 0 (the operator behind --webhook-url: no other replica to hand requests to): stop() closes
    the connections it holds without answering on them again."""
    server = _server(drain_seconds=0.0)

    async def scenario() -> None:
        port = await _listening(server)
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=CONTEXT)
        assert (await _exchange(reader, writer, "/healthz"))[0] == 200
        await server.stop()
        assert not server.draining
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()

    asyncio.run(scenario())


#: How long the API server keeps an idle connection to a webhook (Go's http.DefaultTransport IdleConnTimeout, kept
#: by client-go's transport cache; read in k8s.io/client-go and k8s.io/apimachinery v0.37.2).
API_SERVER_IDLE_SECONDS = 90


def test_a_serving_webhook_keeps_idle_connections_longer_than_the_api_server_does() -> None:
    """The API server closes an idle connection first: were it the webhook, a request the API server began writing
    as the webhook closed the connection would fail with EOF (30 s before: a rare failure on a quiet cluster)."""
    server = _server(drain_seconds=0.0)

    async def scenario() -> float:
        await server.start()
        try:
            assert server._runner is not None and server._runner.server is not None  # noqa: SLF001
            return float(server._runner.server._kwargs["keepalive_timeout"])  # noqa: SLF001
        finally:
            await server.stop()

    assert asyncio.run(scenario()) > API_SERVER_IDLE_SECONDS
