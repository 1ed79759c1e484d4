"""Kyverno's admission controller, run out of cluster against a local control plane: the peer that vpol's
webhook is measured against (bench/admission.py --peer kyverno; tests/e2e/test_kyverno_peer.py).

Not part of vpol: a benchmark fixture. What it does, in order (bench/results/admission.md, issue 25, says the same):

1. the binary: ``bench/kyverno/build`` (cmd/kyverno of github.com/kyverno/kyverno, built once and cached);
2. Kyverno's CRDs from its module (``config/crds/{kyverno,policies.kyverno.io,policyreport,reports}``), each
   created only when the cluster does not serve it yet: the kinds vpol also defines (ValidatingPolicy,
   MutatingPolicy, PolicyException, their Namespaced variants, PolicyReports) keep vpol's CRDs, whose schemas
   are Kyverno's (the status included), so both read the same objects;
3. the namespace ``kyverno`` with the ConfigMaps the process reads: ``kyverno`` (its configuration; only
   ``webhooks`` is set, to the namespaceSelector the caller gives, which Kyverno ANDs into every webhook it
   registers) and ``kyverno-metrics`` (empty);
4. its ServiceAccount ``kyverno/kyverno-admission-controller`` (a token in the kubeconfig it is given, as vpol's
   operator runs here), allowed everything except writing the status of ``policies.kyverno.io`` objects: both
   Kyverno and vpol write the status of the same ValidatingPolicies (Kyverno replaces the whole status, vpol then
   writes its own back, and each write makes the other reconcile again: a loop that kept both busy). The status
   is vpol's in this benchmark; Kyverno's writes are refused and admission is unaffected;
5. the process, with the environment and flags of
   :meth:`KyvernoPeer.command`. It makes its own CA and serving certificate (Secrets in ``kyverno``, the IP of
   ``--serverIP`` in the certificate), registers its webhook configurations by URL
   (``https://127.0.0.1:PORT/...``) and serves them on loopback. Only the admission controller runs: the
   background, reports and cleanup controllers are other binaries, not started; generating
   ValidatingAdmissionPolicies from policies is off (vpol generates the native ones in this benchmark).

:class:`KyvernoReportsPeer` is Kyverno's reports controller (``cmd/reports-controller``, built the same way), which
runs Kyverno's background scans and writes its PolicyReports: the peer of vpol's scanner (bench/scan.py's
``kyverno`` phase). Installed the same way under its own ServiceAccount, with the Helm chart's settings for its
scans (2 background scan workers, a scan an hour, PolicyApplied and PolicySkipped events omitted).

:class:`KyvernoBackgroundPeer` is Kyverno's background controller (``cmd/background-controller``), which processes
the UpdateRequests the admission controller queues for GeneratingPolicies (and mutateExisting) and writes the
downstreams: with a :class:`KyvernoPeer`, the peer of vpol's generation (bench/generate.py --peer kyverno).
Installed the same way under its own ServiceAccount, ``kyverno-background-controller`` (the name the admission
controller is told with ``--backgroundServiceAccountName``), with the Helm chart's settings (10 workers, the
chart's resync period and omitted events).
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "bench" / "kyverno" / "build"
MODULE = "github.com/kyverno/kyverno"
VERSION = os.environ.get("VPOL_KYVERNO_VERSION", "v1.19.1")
NAMESPACE = "kyverno"
CA_SECRET = "kyverno-svc.kyverno.svc.kyverno-tls-ca"
TLS_SECRET = "kyverno-svc.kyverno.svc.kyverno-tls-pair"
#: Kyverno's webhook configuration for resources (ValidatingPolicies included) and its webhook names.
RESOURCE_CONFIGURATION = "kyverno-resource-validating-webhook-cfg"
VPOL_WEBHOOK = "vpol.validate.kyverno.svc"
SERVICE_ACCOUNT = "kyverno-admission-controller"
POLICY_GROUP = "policies.kyverno.io"
CRD_FOLDERS = ("kyverno", "policies.kyverno.io", "policyreport", "reports")


def build(command: str = "kyverno") -> Path:
    """The cached binary of ``command`` (kyverno: the admission controller; reports-controller), built now if
    needed: minutes on a cold Go cache."""
    proc = subprocess.run([str(BUILD_SCRIPT), command], capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"{BUILD_SCRIPT} failed:\n{proc.stderr[-3000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def module_dir() -> Path:
    """Kyverno's module in the Go module cache (downloaded by the build)."""
    out = subprocess.run(["go", "mod", "download", "-json", f"{MODULE}@{VERSION}"], capture_output=True,
                         text=True, check=True, timeout=600).stdout
    return Path(json.loads(out)["Dir"])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def only_namespaces(names: Sequence[str]) -> dict[str, Any]:
    """A namespaceSelector matching exactly these namespaces (by the label the API server sets)."""
    return {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": sorted(names)}]}


class KyvernoPeer:
    """Kyverno's admission controller for one cluster (``kube``: tests.e2e.conftest.KubeCluster)."""

    #: The ServiceAccount it runs as (the Helm chart's name), and its Deployment's name.
    service_account = SERVICE_ACCOUNT
    #: Its command in Kyverno's module (``cmd/<name>``), as bench/kyverno/build takes it.
    command_name = "kyverno"

    def __init__(self, kube: Any, workdir: Path, *, binary: Path | None = None,
                 webhook_namespace_selector: Mapping[str, Any] | None = None, log_name: str = "kyverno.log",
                 extra_args: Sequence[str] = ()):
        self.kube = kube
        #: More flags for the process (e.g. bench/generate.py raises Kyverno's client rate limits).
        self.extra_args = list(extra_args)
        self.workdir = workdir
        self.binary = binary
        self.selector = dict(webhook_namespace_selector) if webhook_namespace_selector else None
        self.log_path = workdir / log_name
        self.port = free_port()
        self.metrics_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: Any = None
        #: Its ServiceAccount's kubeconfig (written by install()).
        self.kubeconfig: Path | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    # -- install

    def install(self) -> None:
        """Kyverno's CRDs that the cluster lacks, its namespace and ConfigMaps."""
        crds = []
        for folder in CRD_FOLDERS:
            for path in sorted((module_dir() / "config" / "crds" / folder).glob("*.yaml")):
                for doc in yaml.safe_load_all(path.read_text()):
                    if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                        crds.append(doc)
        for crd in crds:
            proc = self.kube.kubectl("create", "-f", "-", input=json.dumps(crd), check=False)
            if proc.returncode != 0 and "AlreadyExists" not in proc.stderr:
                raise RuntimeError(f"creating CRD {crd['metadata']['name']}: {proc.stderr}")
        self.kube.kubectl("wait", "--for=condition=Established", "--timeout=120s",
                          *(f"crd/{crd['metadata']['name']}" for crd in crds), timeout=180)
        config: dict[str, str] = {}
        if self.selector is not None:
            config["webhooks"] = json.dumps({"namespaceSelector": self.selector})
        docs = [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kyverno", "namespace": NAMESPACE},
             "data": config},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kyverno-metrics", "namespace": NAMESPACE},
             "data": {}},
        ]
        docs += self._rbac()
        for doc in docs:
            self.kube.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=vpol-bench-kyverno",
                              "-f", "-", input=json.dumps(doc))
        self.kubeconfig = self._sa_kubeconfig()

    def _rbac(self) -> list[dict[str, Any]]:
        """Its ServiceAccount, allowed every verb on every resource the cluster serves except the status of
        policies.kyverno.io kinds (from discovery: RBAC cannot subtract)."""
        groups = {v.rsplit("/", 1)[0] if "/" in v else ""
                  for v in self.kube.kubectl("api-versions").stdout.split()}
        policies = [name.split(".", 1)[0] for name in
                    self.kube.kubectl("api-resources", f"--api-group={POLICY_GROUP}", "-o", "name").stdout.split()]
        rules = [{"apiGroups": sorted(groups - {POLICY_GROUP}), "resources": ["*"], "verbs": ["*"]},
                 {"apiGroups": [POLICY_GROUP], "resources": sorted(policies), "verbs": ["*"]},
                 {"nonResourceURLs": ["*"], "verbs": ["*"]}]
        name = f"vpol-bench-kyverno-{self.service_account}"
        return [
            {"apiVersion": "v1", "kind": "ServiceAccount",
             "metadata": {"name": self.service_account, "namespace": NAMESPACE}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name},
             "rules": rules},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
             "subjects": [{"kind": "ServiceAccount", "name": self.service_account, "namespace": NAMESPACE}]},
        ]

    def _sa_kubeconfig(self) -> Path:
        """A kubeconfig for its ServiceAccount (a token minted by the API server, the admin's CA)."""
        token = self.kube.sa_token(NAMESPACE, self.service_account, duration="4h")
        cfg = self.kube.configuration
        cluster: dict[str, Any] = {"server": cfg.host}
        if cfg.ssl_ca_cert:
            cluster["certificate-authority-data"] = base64.b64encode(Path(cfg.ssl_ca_cert).read_bytes()).decode()
        else:
            cluster["insecure-skip-tls-verify"] = True
        path = self.workdir / f"{self.service_account}-kubeconfig"
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "kyverno",
            "clusters": [{"name": "c", "cluster": cluster}],
            "users": [{"name": "kyverno", "user": {"token": token}}],
            "contexts": [{"name": "kyverno", "context": {"cluster": "c", "user": "kyverno"}}],
        }))
        return path

    # -- the process

    def command(self) -> list[str]:
        assert self.binary is not None and self.kubeconfig is not None, "install() first"
        return [
            str(self.binary),
            f"--kubeconfig={self.kubeconfig}",
            # The API server calls the webhook by URL on loopback (no Service, no endpoints out of cluster).
            f"--serverIP=127.0.0.1:{self.port}",
            "--webhookServerHost=127.0.0.1",
            f"--webhookServerPort={self.port}",
            f"--caSecretName={CA_SECRET}",
            f"--tlsSecretName={TLS_SECRET}",
            "--backgroundServiceAccountName=system:serviceaccount:kyverno:kyverno-background-controller",
            "--reportsServiceAccountName=system:serviceaccount:kyverno:kyverno-reports-controller",
            # vpol generates the native VAPs of this benchmark; Kyverno's own generator would add a second set.
            "--generateValidatingAdmissionPolicy=false",
            # Free ports of our own (its defaults, 8000 and 8080, are taken on a shared machine).
            "--metricsHost=127.0.0.1",
            f"--metricsPort={self.metrics_port}",
            "--controllerRuntimeMetricsAddress=0",
            "--disableLogColor",
        ]

    def environment(self) -> dict[str, str]:
        """What the Helm chart's Deployment gives the admission controller (namespace, names, ConfigMaps)."""
        env = dict(os.environ)
        env.pop("KUBECONFIG", None)
        env.update({
            "KYVERNO_NAMESPACE": NAMESPACE,
            "KYVERNO_SERVICEACCOUNT_NAME": self.service_account,
            "KYVERNO_DEPLOYMENT": self.service_account,
            "KYVERNO_POD_NAME": f"{self.service_account}-bench",
            "KYVERNO_SVC": "kyverno-svc",
            "INIT_CONFIG": "kyverno",
            "METRICS_CONFIG": "kyverno-metrics",
        })
        return env

    def launch(self) -> None:
        """Start the process (not waiting for anything)."""
        if self.binary is None:
            self.binary = build(self.command_name)
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([*self.command(), *self.extra_args], stdout=self._log, stderr=subprocess.STDOUT,
                                     env=self.environment(), cwd=self.workdir, start_new_session=True)

    def relaunch(self) -> None:
        """Start the process again after it exited, leaving what it registered in place (as its Deployment restarts
        it: Kyverno's controllers exit when they lose their leader lease)."""
        if self.proc is not None:
            self.proc.wait(10)
        if self._log is not None:
            self._log.close()
            self._log = None
        self.launch()

    def start(self, timeout: float = 300) -> "KyvernoPeer":
        """Start it and wait until it has registered its resource webhook configuration with a CA bundle and
        completes TLS handshakes on its port."""
        self.launch()
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kyverno exited with {self.proc.returncode}:\n{self.log()}")
            if self._serving() and self._registered():
                return self
            time.sleep(1)
        raise RuntimeError(f"kyverno did not register its webhooks within {timeout:.0f}s:\n{self.log()}")

    def _serving(self) -> bool:
        """Whether it completes a TLS handshake (it listens before it has loaded its serving certificate)."""
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=2) as sock:
                with ctx.wrap_socket(sock):
                    return True
        except OSError:  # ssl.SSLError included
            return False

    def _registered(self) -> bool:
        proc = self.kube.kubectl("get", "validatingwebhookconfiguration", RESOURCE_CONFIGURATION, "-o", "json",
                                 check=False)
        if proc.returncode != 0:
            return False
        webhooks = json.loads(proc.stdout).get("webhooks") or []
        return all((w.get("clientConfig") or {}).get("caBundle") for w in webhooks)

    def webhooks(self) -> list[dict[str, Any]]:
        """The webhooks of its resource configuration now."""
        proc = self.kube.kubectl("get", "validatingwebhookconfiguration", RESOURCE_CONFIGURATION, "-o", "json",
                                 check=False)
        return list(json.loads(proc.stdout).get("webhooks") or []) if proc.returncode == 0 else []

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        """Stop the process and remove the webhook configurations it registered (nothing would answer them)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        if self._log is not None:
            self._log.close()
            self._log = None
        for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
            proc = self.kube.kubectl("get", kind, "-o", "name", check=False)
            names = [n for n in proc.stdout.split() if n.split("/", 1)[-1].startswith("kyverno-")]
            if names:
                self.kube.kubectl("delete", "--ignore-not-found", "--wait=false", *names, check=False)


class KyvernoReportsPeer(KyvernoPeer):
    """Kyverno's reports controller for one cluster: its background scans and PolicyReports."""

    service_account = "kyverno-reports-controller"
    command_name = "reports-controller"

    def __init__(self, kube: Any, workdir: Path, *, binary: Path | None = None,
                 log_name: str = "kyverno-reports.log"):
        super().__init__(kube, workdir, binary=binary, log_name=log_name)

    def command(self) -> list[str]:
        assert self.binary is not None and self.kubeconfig is not None, "install() first"
        return [
            str(self.binary),
            f"--kubeconfig={self.kubeconfig}",
            # The Helm chart's values for the reports controller (features.backgroundScan, features.omitEvents).
            "--backgroundScan=true",
            "--backgroundScanWorkers=2",
            "--backgroundScanInterval=1h",
            "--skipResourceFilters=true",
            "--omitEvents=PolicyApplied,PolicySkipped",
            "--metricsHost=127.0.0.1",
            f"--metricsPort={self.metrics_port}",
            "--disableLogColor",
        ]

    def start(self, timeout: float = 300) -> "KyvernoReportsPeer":
        """Start it; it serves nothing, so there is nothing to wait for (a benchmark times it from here)."""
        self.launch()
        return self


class KyvernoBackgroundPeer(KyvernoPeer):
    """Kyverno's background controller for one cluster: the UpdateRequests of GeneratingPolicies (queued by the
    admission controller, :class:`KyvernoPeer`, which must run too) and the downstreams they make."""

    service_account = "kyverno-background-controller"
    command_name = "background-controller"
    #: Its leader election Lease (in NAMESPACE): it starts its controllers only once it leads.
    lease = "kyverno-background-controller"

    def __init__(self, kube: Any, workdir: Path, *, binary: Path | None = None,
                 webhook_namespace_selector: Mapping[str, Any] | None = None,
                 log_name: str = "kyverno-background.log", extra_args: Sequence[str] = ()):
        # The selector only keeps install() from writing the shared ``kyverno`` ConfigMap without the admission
        # controller's (both read the same one).
        super().__init__(kube, workdir, binary=binary, webhook_namespace_selector=webhook_namespace_selector,
                         log_name=log_name, extra_args=extra_args)

    def command(self) -> list[str]:
        assert self.binary is not None and self.kubeconfig is not None, "install() first"
        return [
            str(self.binary),
            f"--kubeconfig={self.kubeconfig}",
            # The Helm chart's values for the background controller (its default workers, resync period and
            # features.omitEvents).
            "--genWorkers=10",
            "--resyncPeriod=15m",
            "--omitEvents=PolicyApplied,PolicySkipped",
            "--metricsHost=127.0.0.1",
            f"--metricsPort={self.metrics_port}",
            "--controllerRuntimeMetricsAddress=0",
            "--disableLogColor",
        ]

    def start(self, timeout: float = 300) -> "KyvernoBackgroundPeer":
        """Start it (not waiting: see wait_leading)."""
        self.launch()
        return self

    def wait_leading(self, timeout: float = 120) -> bool:
        """Whether it holds its leader Lease within ``timeout`` seconds (its controllers start then)."""
        pod = self.environment()["KYVERNO_POD_NAME"]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running():
                raise RuntimeError(f"{self.command_name} exited with {self.proc and self.proc.returncode}:\n"
                                   f"{self.log()}")
            proc = self.kube.kubectl("get", "lease", self.lease, "-n", NAMESPACE, "-o",
                                     "jsonpath={.spec.holderIdentity}", check=False)
            if proc.returncode == 0 and proc.stdout.strip() == pod:
                return True
            time.sleep(0.5)
        return False
