"""A body that does not arrive within the webhook's read time is answered 408 and counted as a timeout; one that
arrives is read and answered (the read is bounded by a timeout scope, not a task per request)."""

from __future__ import annotations

import asyncio
import datetime
import socket
import ssl

from prometheus_client import REGISTRY

from vpol.controller.admission.server import CertificateFiles, ServerOptions, WebhookServer
from vpol.desired.certificates import new_serving_certificate
from vpol.model.discovery import builtin

from tests.unit.controller.webhook_requests import REVIEW, Policies


def _timeouts() -> float:
    return REGISTRY.get_sample_value("vpol_admission_rejected_requests_total", {"reason": "timeout"}) or 0.0


def test_a_body_that_does_not_arrive_in_time_is_answered_408_and_one_that_does_is_read() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    bundle = new_serving_certificate([], ["127.0.0.1"], now=datetime.datetime.now(datetime.timezone.utc))
    server = WebhookServer(Policies(), None, builtin, CertificateFiles(lambda: bundle),  # type: ignore[arg-type]
                           options=ServerOptions(host="127.0.0.1", port=port, inline=None, read_seconds=0.3))
    before = _timeouts()

    async def post(body: bytes, length: int) -> str:
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
        writer.write(b"POST /validate/fail HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\nConnection: close\r\n\r\n" % length + body)
        await writer.drain()
        # The status line and headers (the server may keep the connection open for the rest of the body).
        head = (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)).decode()
        writer.close()
        return head

    async def scenario() -> tuple[str, str]:
        await server.start()
        for _ in range(50):
            if server.listening:
                break
            await asyncio.sleep(0.1)
        try:
            slow = await post(REVIEW[:20], len(REVIEW))  # the rest never comes
            whole = await post(REVIEW, len(REVIEW))
        finally:
            await server.stop()
        return slow, whole

    slow, whole = asyncio.run(scenario())
    assert slow.startswith("HTTP/1.1 408"), slow
    assert _timeouts() == before + 1
    # Read whole: past the boundary, and answered (allowed: no policy answers this webhook).
    assert whole.startswith("HTTP/1.1 200"), whole
