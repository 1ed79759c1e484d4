"""Running the real operator (`vpol run`) in a subprocess against the emulated API server."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import yaml

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_kubeconfig(path: Path, server: str) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "kmock",
        "clusters": [{"name": "kmock", "cluster": {"server": server}}],
        "users": [{"name": "kmock", "user": {"token": "fault-tests"}}],
        "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "kmock"}}],
    }))
    return path


class Operator:
    """``vpol run`` in a subprocess, with its log in a file.

    Background scanning is disabled (``--scan-interval 0``): the fault tests
    are about the policy reconcile loop and its watches, and kmock 0.8 can
    serve neither ``/api/v1/namespaces`` (its path parser takes "namespaces"
    for a namespace prefix) nor the Lease PUTs the scanner's leader election
    makes. The resync period is long (600 s), so it never hides a lost event.
    """

    def __init__(self, kubeconfig: Path, log: Path, *, workers: int = 2):
        self.kubeconfig = kubeconfig
        self.log_path = log
        self.workers = workers
        self.liveness_port = free_port()
        self.metrics_port = free_port()
        self.proc: asyncio.subprocess.Process | None = None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.returncode

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    async def start(self, timeout: float) -> Operator:
        """Start and wait (at most ``timeout`` s) until the liveness endpoint answers 200."""
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env.pop("KUBECONFIG", None)
        with open(self.log_path, "wb") as out:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "vpol.cli.main", "run", "--kubeconfig", str(self.kubeconfig),
                "--metrics-port", str(self.metrics_port), "--liveness-port", str(self.liveness_port),
                "--workers", str(self.workers), "--resync", "600", "--scan-interval", "0", "--webhook", "off",
                stdout=out, stderr=asyncio.subprocess.STDOUT, env=env, cwd=REPO)
        try:
            async with asyncio.timeout(timeout):
                while True:
                    assert self.alive, f"the operator exited with {self.returncode}:\n{self.log()[-4000:]}"
                    try:
                        if await self.healthz() == 200:
                            return self
                    except (aiohttp.ClientError, OSError, TimeoutError):
                        pass
                    await asyncio.sleep(0.2)
        except TimeoutError:
            raise AssertionError(f"the operator was not live within {timeout}s:\n{self.log()[-4000:]}") from None

    async def healthz(self, timeout: float = 2.0) -> int:
        """HTTP status of the liveness endpoint (raises on connection failures and timeouts)."""
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
            async with session.get(f"http://127.0.0.1:{self.liveness_port}/healthz") as response:
                await response.read()
                return response.status

    async def stop(self) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        self.proc.terminate()
        try:
            await asyncio.wait_for(self.proc.wait(), 10)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()


#: The ``operator`` fixture: ``await operator(workers=2)``.
StartOperator = Callable[..., Awaitable[Operator]]
