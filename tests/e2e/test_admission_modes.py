"""Admission with --vap-generation=opt-in (Kyverno's behaviour), and what happens when the operator is down."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.e2e.operator_process import OperatorProcess, sa_kubeconfig
from tests.e2e.test_admission import deny_cm, dry_cm, enforcement, webhook_configuration
from tests.e2e.test_operator import POD_RULE, create_cm, expect_denied, kubectl_denied, workloads
from tests.e2e.vpol_fixtures import Policies, policies, vpol_installed, wait_for  # noqa: F401 - fixtures


@pytest.fixture(scope="module")
def operator(vpol_installed: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    tmp = tmp_path_factory.mktemp("operator-opt-in")
    kubeconfig = sa_kubeconfig(vpol_installed, tmp / "kubeconfig")
    proc = OperatorProcess(kubeconfig, tmp / "operator.log", extra=("--vap-generation", "opt-in")).start()
    yield proc
    proc.stop()


HOST_NETWORK = {"expression": "!has(object.spec.hostNetwork) || object.spec.hostNetwork == false",
                "message": "host network is not allowed"}


def test_opt_in_mode_enforces_plain_policies_by_webhook_until_they_opt_in(policies: Policies, cluster: Any,
                                                                           namespace: str) -> None:
    spec: dict[str, Any] = {"matchConstraints": {"resourceRules": [POD_RULE]}, "validations": [HOST_NETWORK]}
    name = policies.create("optin", spec)
    cond = enforcement(policies, name, "Webhook")
    assert "--vap-generation=opt-in" in cond["message"]
    assert policies.vap(f"vpol-{name}") is None
    bad = {o["kind"]: o for o in workloads(namespace, True, "hook")}
    for kind in ("Pod", "Deployment", "CronJob"):
        kubectl_denied(cluster, bad[kind], "host network is not allowed")
    # with the opt-in, the API server enforces it instead
    policies.replace_spec(name, {**spec, "autogen": {"validatingAdmissionPolicy": {"enabled": True}}})
    enforcement(policies, name, "NativeVAP")
    assert policies.vap(f"vpol-{name}") and policies.vap(f"vpol-{name}-autogen-defaults")
    wait_for("the webhook configuration to be removed", lambda: webhook_configuration(policies) is None, 30)
    bad = {o["kind"]: o for o in workloads(namespace, True, "native")}
    for kind in ("Pod", "Deployment", "CronJob"):
        kubectl_denied(cluster, bad[kind], "host network is not allowed")
    for obj in workloads(namespace, False, "good"):
        cluster.kubectl("create", "-f", "-", input=json.dumps(obj))


def _admitted(fn: Any) -> bool:
    try:
        fn()
        return True
    except ApiException as exc:
        assert exc.status in (400, 403, 500), exc
        return False


def test_operator_down_failure_policy_decides_and_protected_namespaces_are_untouched(
        policies: Policies, cluster: Any, namespace: str, operator: OperatorProcess) -> None:
    other = f"{namespace[:50]}-other"
    core = client.CoreV1Api(cluster.api_client)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=other)))
    # Fail matches every namespace (kube-system and vpol's own are excluded by the webhook itself);
    # Ignore only the test's namespace.
    fail = policies.create("down-fail", {**deny_cm("sha256(object.metadata.name) != '' && "
                                                   "!object.metadata.name.startsWith('bad')", "bad name"),
                                         "matchConstraints": {"resourceRules": deny_cm("")["matchConstraints"]
                                                              ["resourceRules"], "namespaceSelector": {
                                             "matchLabels": {"kubernetes.io/metadata.name": other}}}})
    ignore = policies.create("down-ignore", {**deny_cm("sha256(object.metadata.name) != '' && "
                                                       "!object.metadata.name.startsWith('bad')", "bad name"),
                                             "failurePolicy": "Ignore"})
    enforcement(policies, fail, "Webhook")
    enforcement(policies, ignore, "Webhook")
    expect_denied(lambda: dry_cm(cluster, other, "bad-up", {}), "bad name")
    expect_denied(lambda: dry_cm(cluster, namespace, "bad-up", {}), "bad name")
    counter = itertools.count()
    operator.kill()
    try:
        # Fail: the API server cannot reach the webhook, so it denies; Ignore: it admits
        wait_for("Fail to deny while the webhook is down",
                 lambda: not _admitted(lambda: create_cm(cluster, other, f"down-{next(counter)}", {})), 30, 1)
        assert _admitted(lambda: create_cm(cluster, namespace, "bad-down", {}))
        for protected in ("kube-system", "vpol-system"):
            assert _admitted(lambda: create_cm(cluster, protected, f"vpol-e2e-{namespace}", {}))
            core.delete_namespaced_config_map(f"vpol-e2e-{namespace}", protected)
    finally:
        operator.start()
        policies.cleanup()
        policies.created.clear()
        wait_for("the webhook configuration to be removed", lambda: webhook_configuration(policies) is None, 60)
        core.delete_namespace(other)
