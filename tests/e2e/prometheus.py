"""A real Prometheus server for end-to-end tests (Debian's ``prometheus`` package).

:class:`PrometheusServer` runs ``prometheus`` on 127.0.0.1 with a free port,
its own temporary storage, short scrape and rule-evaluation intervals, the
scrape jobs and rule files a test gives it, and queries it through its HTTP
API. :func:`tool` finds ``prometheus``/``promtool`` (``$VPOL_PROMETHEUS`` /
``$VPOL_PROMTOOL``, else PATH, else /usr/bin); when they are missing a test
is skipped, or fails under ``CI=true``/``VPOL_REQUIRE_E2E`` (CI installs the
package: ``apt-get install prometheus``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import pytest
import yaml

from tests.e2e.operator_process import free_port, log_tail

INSTALL_HINT = "install Debian's prometheus package (apt-get install prometheus)"


def tools_required() -> bool:
    """True when a missing Prometheus must fail the run (CI) instead of skipping it."""
    return (os.environ.get("CI", "").lower() == "true"
            or os.environ.get("VPOL_REQUIRE_E2E", "").lower() not in ("", "0", "false", "no"))


def missing(reason: str) -> NoReturn:
    if tools_required():
        pytest.fail(f"{reason} (required under CI=true / VPOL_REQUIRE_E2E)", pytrace=False)
    pytest.skip(reason)


def find_tool(name: str) -> str | None:
    """Path of `prometheus` or `promtool`, or None."""
    explicit = os.environ.get(f"VPOL_{name.upper()}")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    found = shutil.which(name)
    if found:
        return found
    fallback = Path("/usr/bin") / name
    return str(fallback) if os.access(fallback, os.X_OK) else None


def tool(name: str) -> str:
    """Path of `prometheus` or `promtool`; skips (or fails in CI) when absent."""
    path = find_tool(name)
    if path is None:
        missing(f"{name} is not installed: {INSTALL_HINT}")
    return path


def promtool(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool("promtool"), *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


class PrometheusError(RuntimeError):
    """An API call that Prometheus answered with an error (e.g. a bad query)."""


@dataclass
class ScrapeJob:
    """One static scrape job: targets are host:port, labels are added to each target."""

    name: str
    targets: list[str]
    labels: dict[str, str] = field(default_factory=dict)
    relabel_configs: list[dict[str, Any]] = field(default_factory=list)
    metrics_path: str = "/metrics"

    def config(self) -> dict[str, Any]:
        cfg: dict[str, Any] = {"job_name": self.name, "metrics_path": self.metrics_path,
                               "static_configs": [{"targets": self.targets, "labels": self.labels}]}
        if self.relabel_configs:
            cfg["relabel_configs"] = self.relabel_configs
        return cfg


class PrometheusServer:
    """`prometheus` in a subprocess with its own port, config, storage and log file."""

    def __init__(self, workdir: Path, jobs: Sequence[ScrapeJob], rule_files: Sequence[Path] = (), *,
                 scrape_interval: str = "1s", evaluation_interval: str = "1s") -> None:
        self.workdir = workdir
        self.jobs = list(jobs)
        self.rule_files = [Path(p).resolve() for p in rule_files]
        self.scrape_interval = scrape_interval
        self.evaluation_interval = evaluation_interval
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.config_path = workdir / "prometheus.yml"
        self.log_path = workdir / "prometheus.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def config(self) -> dict[str, Any]:
        return {
            "global": {"scrape_interval": self.scrape_interval, "scrape_timeout": self.scrape_interval,
                       "evaluation_interval": self.evaluation_interval},
            "rule_files": [str(p) for p in self.rule_files],
            "scrape_configs": [job.config() for job in self.jobs],
        }

    def start(self, timeout: float = 60) -> "PrometheusServer":
        binary = tool("prometheus")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(yaml.safe_dump(self.config(), sort_keys=False))
        # A free port can be taken between probing and binding: try a few.
        for _attempt in range(3):
            self.port = free_port()
            cmd = [binary, f"--config.file={self.config_path}",
                   f"--storage.tsdb.path={self.workdir / 'data'}",
                   f"--web.listen-address=127.0.0.1:{self.port}",
                   "--storage.tsdb.retention.time=1d", "--log.level=info"]
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                             cwd=self.workdir)
            if self._wait_ready(timeout):
                return self
            if "address already in use" not in self.log():
                break
        self.stop()
        raise RuntimeError(f"prometheus did not become ready within {timeout}s:\n{self.log()}")

    def _wait_ready(self, timeout: float) -> bool:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return True
            except OSError:
                pass
            time.sleep(0.2)
        return False

    def log(self) -> str:
        return log_tail(self.log_path, 6000)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def __enter__(self) -> "PrometheusServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ HTTP API

    def api(self, path: str, params: Mapping[str, str | Sequence[str]] | None = None) -> Any:
        """GET /api/v1/<path>; returns `data`, raises PrometheusError on an error answer."""
        query = urllib.parse.urlencode(params or {}, doseq=True)
        url = f"{self.url}/api/v1/{path}" + (f"?{query}" if query else "")
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                body = json.loads(r.read())
        except urllib.error.HTTPError as exc:  # 400/422 carry the error in the body
            try:
                body = json.loads(exc.read())
            except ValueError:
                raise PrometheusError(f"{url}: HTTP {exc.code}") from exc
        if body.get("status") != "success":
            raise PrometheusError(f"{body.get('errorType')}: {body.get('error')} ({url})")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant query; the samples of a vector, or one pseudo-sample for a scalar."""
        data = self.api("query", {"query": expr})
        if data["resultType"] in ("vector", "matrix"):
            return list(data["result"])
        return [{"metric": {}, "value": data["result"]}]

    def wait_for(self, what: str, expr: str, predicate: Callable[[list[dict[str, Any]]], bool] = bool,
                 timeout: float = 60, interval: float = 0.5) -> list[dict[str, Any]]:
        """Poll `expr` until predicate(result) holds; AssertionError with the last answer after `timeout`."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            try:
                last = self.query(expr)
                if predicate(last):
                    return last
            except (PrometheusError, OSError) as exc:
                last = exc
            time.sleep(interval)
        raise AssertionError(f"timed out after {timeout}s waiting for {what} ({expr}); last answer: {last!r}")

    def targets(self) -> list[dict[str, Any]]:
        return list(self.api("targets", {"state": "active"})["activeTargets"])

    def rule_groups(self) -> list[dict[str, Any]]:
        return list(self.api("rules")["groups"])

    def alerts(self) -> list[dict[str, Any]]:
        return list(self.api("alerts")["alerts"])

    def label_values(self, label: str, match: str) -> list[str]:
        return list(self.api(f"label/{label}/values", {"match[]": [match]}))
