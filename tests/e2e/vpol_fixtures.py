"""Shared pieces of the operator end-to-end tests: install, run the operator, manage test policies.

Import the fixtures into a test module with
``from tests.e2e.vpol_fixtures import operator, policies, vpol_installed  # noqa: F401``.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.e2e.conftest import apply_crds, load_crds
from tests.e2e.operator_process import REPO, OperatorProcess, sa_kubeconfig

GROUP, VERSION, PLURAL = "policies.kyverno.io", "v1", "validatingpolicies"


def wait_for(what: str, predicate: Callable[[], Any], timeout: float = 60, interval: float = 0.3) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
        except ApiException as exc:
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


def install_operator_manifests(cluster: Any) -> None:
    """The report CRDs (created only if absent: another tool may own them) and the operator's kustomize manifests."""
    proc = cluster.kubectl("create", "-f", str(REPO / "crds" / "reports"), check=False)
    assert proc.returncode == 0 or "AlreadyExists" in proc.stderr, proc.stderr
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                    "crd/policyreports.wgpolicyk8s.io", "crd/clusterpolicyreports.wgpolicyk8s.io")
    cluster.kubectl("apply", "--server-side", "--field-manager=vpol-e2e", "-k", str(REPO / "manifests" / "operator"))


def install_vpol(cluster: Any) -> None:
    """vpol installed on a cluster of a module's own: its CRDs, the report CRDs and the operator's manifests."""
    apply_crds(cluster, load_crds())
    install_operator_manifests(cluster)


@pytest.fixture(scope="session")
def vpol_installed(cluster: Any, installed_crds: Any) -> Any:
    install_operator_manifests(cluster)
    return cluster


@contextlib.contextmanager
def operator_stopped(operator: OperatorProcess) -> Iterator[None]:
    """The operator is stopped inside (its webhooks unreachable: vpol's policy validation, failurePolicy Ignore,
    then admits what it would refuse), and started again after."""
    operator.stop()
    try:
        yield
    finally:
        operator.start()


@pytest.fixture(scope="module")
def operator(vpol_installed: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    tmp = tmp_path_factory.mktemp("operator")
    kubeconfig = sa_kubeconfig(vpol_installed, tmp / "kubeconfig")
    proc = OperatorProcess(kubeconfig, tmp / "operator.log").start()
    yield proc
    proc.stop()


class Policies:
    def __init__(self, cluster: Any, namespace: str, unique: Callable[..., str], *, kind: str = "ValidatingPolicy",
                 plural: str = PLURAL):
        self.kind = kind
        self.plural = plural
        self.cluster = cluster
        self.api = client.CustomObjectsApi(cluster.api_client)
        self.admission = client.AdmissionregistrationV1Api(cluster.api_client)
        self.namespace = namespace
        self.unique = unique
        self.created: list[str] = []

    def body(self, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        spec = json.loads(json.dumps(spec))
        mc = spec.setdefault("matchConstraints", {})
        mc.setdefault("namespaceSelector", {"matchLabels": {"kubernetes.io/metadata.name": self.namespace}})
        return {"apiVersion": f"{GROUP}/{VERSION}", "kind": self.kind, "metadata": {"name": name}, "spec": spec}

    def create(self, hint: str, spec: dict[str, Any]) -> str:
        name = self.unique("pol", hint)
        self.api.create_cluster_custom_object(GROUP, VERSION, self.plural, self.body(name, spec))
        self.created.append(name)
        return name

    def get(self, name: str) -> dict[str, Any]:
        return self.api.get_cluster_custom_object(GROUP, VERSION, self.plural, name)

    def replace_spec(self, name: str, spec: dict[str, Any]) -> None:
        """Replace the spec (read, then replace with that resourceVersion: again when the operator wrote the status
        in between)."""
        for _attempt in range(10):
            current = self.get(name)
            body = self.body(name, spec)
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            try:
                self.api.replace_cluster_custom_object(GROUP, VERSION, self.plural, name, body)
                return
            except ApiException as exc:
                if exc.status != 409:
                    raise
        raise AssertionError(f"{name} kept changing while its spec was replaced")

    def condition(self, name: str, ctype: str) -> dict[str, Any] | None:
        status = self.get(name).get("status") or {}
        return next((c for c in status.get("conditions") or [] if c.get("type") == ctype), None)

    def wait_condition(self, name: str, ctype: str, value: str, timeout: float = 60) -> dict[str, Any]:
        def check() -> Any:
            c = self.condition(name, ctype)
            obj = self.get(name)
            if c and c["status"] == value and c.get("observedGeneration") == obj["metadata"]["generation"]:
                return c
            return None
        return wait_for(f"{name} {ctype}={value}", check, timeout)

    def vap(self, name: str) -> dict[str, Any] | None:
        try:
            return self.cluster.api_client.sanitize_for_serialization(
                self.admission.read_validating_admission_policy(name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def binding(self, name: str) -> dict[str, Any] | None:
        try:
            return self.cluster.api_client.sanitize_for_serialization(
                self.admission.read_validating_admission_policy_binding(name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def map(self, name: str, binding: bool = False) -> dict[str, Any] | None:
        """A MutatingAdmissionPolicy (or its binding) by name, None when absent."""
        try:
            read = self.admission.read_mutating_admission_policy_binding if binding else \
                self.admission.read_mutating_admission_policy
            return self.cluster.api_client.sanitize_for_serialization(read(name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def cleanup(self) -> None:
        for name in self.created:
            try:
                self.api.delete_cluster_custom_object(GROUP, VERSION, self.plural, name)
            except ApiException:
                pass


@pytest.fixture
def policies(operator: OperatorProcess, cluster: Any, namespace: str, unique_name: Callable[..., str]
             ) -> Iterator[Policies]:
    p = Policies(cluster, namespace, unique_name)
    yield p
    p.cleanup()


@pytest.fixture
def mutating_policies(operator: OperatorProcess, cluster: Any, namespace: str, unique_name: Callable[..., str]
                      ) -> Iterator[Policies]:
    p = Policies(cluster, namespace, unique_name, kind="MutatingPolicy", plural="mutatingpolicies")
    yield p
    p.cleanup()
