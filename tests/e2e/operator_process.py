"""Running the real operator (`vpol run`, as the image's entrypoint does) for end-to-end tests.

The operator runs as the ServiceAccount from manifests/ with a token minted
by the API server, so every test also proves the RBAC in manifests/ is
enough (and the RBACPermissionsGranted condition reflects it).
"""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def sa_kubeconfig(cluster: Any, path: Path, namespace: str = "vpol-system", name: str = "vpol") -> Path:
    token = cluster.sa_token(namespace, name, duration="2h")
    cfg = cluster.configuration
    cluster_entry: dict[str, Any] = {"server": cfg.host}
    if cfg.ssl_ca_cert:
        cluster_entry["certificate-authority-data"] = base64.b64encode(Path(cfg.ssl_ca_cert).read_bytes()).decode()
    else:
        cluster_entry["insecure-skip-tls-verify"] = True
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "sa",
        "clusters": [{"name": "c", "cluster": cluster_entry}],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "c", "user": "sa"}}],
    }))
    return path



def log_tail(path: Path, chars: int) -> str:
    """The last ``chars`` characters of a process's log ("" when it cannot be read)."""
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""

class OperatorProcess:
    """`vpol run` in a subprocess with its own ports and log file."""

    def __init__(self, kubeconfig: Path, log: Path, *, peering: str = "", priority: int = 0,
                 extra: tuple[str, ...] = ()):
        self.kubeconfig = kubeconfig
        self.log_path = log
        self.metrics_port = free_port()
        self.liveness_port = free_port()
        # The API server calls the webhook by URL: the test control plane has no Service endpoints.
        self.webhook_port = free_port()
        self.peering = peering
        self.priority = priority
        self.extra = extra
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60) -> "OperatorProcess":
        cmd = [sys.executable, "-m", "vpol.cli.main", "run", "--kubeconfig", str(self.kubeconfig),
               "--metrics-port", str(self.metrics_port), "--liveness-port", str(self.liveness_port),
               "--resync", "30", "--webhook-port", str(self.webhook_port),
               "--webhook-url", f"https://127.0.0.1:{self.webhook_port}", *self.extra]
        if self.peering:
            cmd += ["--peering", self.peering, "--priority", str(self.priority)]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env.pop("KUBECONFIG", None)
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"operator exited with {self.proc.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.liveness_port}/healthz", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"operator not live within {timeout}s:\n{self.log()}")

    def metrics(self, names: Sequence[str] = ()) -> str:
        """The operator's /metrics; only the samples ``names`` when given (prometheus_client's ``name[]``
        filter: the operator renders only those, so frequent polling costs it little)."""
        query = "?" + urllib.parse.urlencode([("name[]", n) for n in names]) if names else ""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics{query}", timeout=5) as r:
            return r.read().decode()

    def metric_value(self, name: str, labels: Mapping[str, str]) -> float:
        """The sum of the operator's samples of ``name`` carrying ``labels`` (0 when there is none)."""
        from prometheus_client.parser import text_string_to_metric_families

        total = 0.0
        for family in text_string_to_metric_families(self.metrics([name])):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    total += sample.value
        return total

    def log(self) -> str:
        return log_tail(self.log_path, 6000)

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc:
            end(self.proc)
        if getattr(self, "_log", None):
            self._log.close()


def end(proc: subprocess.Popen) -> None:  # type: ignore[type-arg]
    """Stop a process the tests started: SIGTERM, 15 s to exit, then SIGKILL."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
