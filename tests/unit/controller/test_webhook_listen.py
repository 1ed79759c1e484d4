"""The webhook keeps trying to listen while its port is held by another process, and says so; it serves once the
port is free (the task that serves once ended on the first refusal, leaving an operator with no webhook and nothing
in its log)."""

from __future__ import annotations

import asyncio
import datetime
import logging
import socket
import ssl

import pytest

from vpol.controller.admission.server import CertificateFiles, ServerOptions, WebhookServer
from vpol.desired.certificates import new_serving_certificate
from vpol.model.discovery import builtin


class Policies:
    from vpol.controller.admission.policies import Snapshot

    snapshot = Snapshot()
    synced = True

    def listen(self, fn: object) -> None:
        pass


def test_a_held_port_is_tried_again_until_it_is_free(caplog: pytest.LogCaptureFixture) -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    bundle = new_serving_certificate(["localhost"], ["127.0.0.1"], now=datetime.datetime.now(datetime.timezone.utc))
    server = WebhookServer(Policies(), None, builtin, CertificateFiles(lambda: bundle),  # type: ignore[arg-type]
                           options=ServerOptions(host="127.0.0.1", port=port, inline=None))

    async def scenario() -> bool:
        await server.start()
        await asyncio.sleep(2.5)
        refused = not server.listening
        holder.close()
        for _ in range(50):
            if server.listening:
                break
            await asyncio.sleep(0.1)
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        status = (await reader.readline()).decode()
        writer.close()
        await server.stop()
        return refused and status.startswith("HTTP/1.1 200")

    with caplog.at_level(logging.WARNING):
        assert asyncio.run(scenario())
    assert any("cannot listen on 127.0.0.1" in r.getMessage() for r in caplog.records)
