"""The benchmark peer starts and answers: Kyverno's admission controller, run out of cluster as
bench/admission.py --peer kyverno runs it (bench/kyverno/peer.py), denies a request through the API server.

Not timed (the benchmark measures; this keeps it from rotting): the binary is built from Kyverno's module
(bench/kyverno/build, cached), the process started against a control plane of this module's own (Kyverno
would otherwise enforce every other test's ValidatingPolicies), with vpol's CRDs installed first as in the
benchmark. One ValidatingPolicy selects two namespaces; Kyverno's webhooks are limited to one of them by its
ConfigMap (what the benchmark relies on to keep Kyverno out of vpol's namespaces), and its writes of the policies'
status are refused (the benchmark leaves the status to vpol).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from bench.kyverno.peer import BUILD_SCRIPT, VPOL_WEBHOOK, KyvernoPeer, only_namespaces
from tests.e2e.conftest import KubeCluster, go_built, load_crds
from tests.e2e.test_operator import expect_denied
from tests.e2e.vpol_fixtures import wait_for

KYVERNO_NS = "peer-kyverno"
OTHER_NS = "peer-other"
POLICY = {
    "apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy",
    "metadata": {"name": "no-privileged"},
    "spec": {
        "validationActions": ["Deny"],
        # Kyverno's own VAP generation is off in the peer; vpol does not run here.
        "autogen": {"validatingAdmissionPolicy": {"enabled": False}},
        "matchConstraints": {
            "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                               "resources": ["pods"]}],
            "namespaceSelector": only_namespaces([KYVERNO_NS, OTHER_NS]),
        },
        "validations": [{
            "expression": "object.spec.containers.all(c, !c.?securityContext.?privileged.orValue(false))",
            "message": "privileged containers are not allowed"}],
    },
}


def pod(namespace: str, privileged: bool) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(generate_name="peer-", namespace=namespace),
        spec=client.V1PodSpec(containers=[client.V1Container(
            name="app", image="registry.local/app:1",
            security_context=client.V1SecurityContext(privileged=privileged))]))


def test_kyverno_admission_controller_denies_through_the_api_server(own_cluster: KubeCluster,
                                                                     tmp_path: Path) -> None:
    binary = Path(go_built(BUILD_SCRIPT, "Kyverno's admission controller (the benchmark peer)"))
    for crd in load_crds():  # vpol's CRDs first, as in the benchmark: Kyverno adds only those missing
        own_cluster.kubectl("apply", "--server-side", "--field-manager=vpol-e2e", "-f", "-", input=json.dumps(crd))
    core = client.CoreV1Api(own_cluster.api_client)
    for ns in (KYVERNO_NS, OTHER_NS):
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    peer = KyvernoPeer(own_cluster, tmp_path, binary=binary, webhook_namespace_selector=only_namespaces([KYVERNO_NS]))
    peer.install()
    peer.start()
    try:
        # Kyverno's CRDs were added next to vpol's, which were kept.
        crds = own_cluster.kubectl("get", "crd", "-o", "json", "--show-managed-fields")
        by_name = {c["metadata"]["name"]: c for c in json.loads(crds.stdout)["items"]}
        assert "updaterequests.kyverno.io" in by_name and "ephemeralreports.reports.kyverno.io" in by_name
        assert (by_name["validatingpolicies.policies.kyverno.io"]["metadata"]["managedFields"][0]["manager"]
                == "vpol-e2e")
        own_cluster.kubectl("apply", "--server-side", "--field-manager=vpol-e2e", "-f", "-", input=json.dumps(POLICY))

        body = expect_denied(lambda: core.create_namespaced_pod(KYVERNO_NS, pod(KYVERNO_NS, True), dry_run="All"),
                             "privileged containers are not allowed", timeout=120)
        # Kyverno's webhook answered (not the API server or another admission plugin), with Kyverno's message.
        assert json.loads(body)["message"] == (f'admission webhook "{VPOL_WEBHOOK}-fail" denied the request: '
                                               "Policy no-privileged failed: privileged containers are not allowed")
        # A compliant Pod is admitted through the same webhook.
        assert core.create_namespaced_pod(KYVERNO_NS, pod(KYVERNO_NS, False), dry_run="All").metadata.name
        # The ConfigMap's namespaceSelector is ANDed into the policy's: the other namespace is not sent to Kyverno.
        webhook = next(w for w in peer.webhooks() if w["name"].startswith(VPOL_WEBHOOK))
        assert webhook["clientConfig"]["url"].startswith(f"https://127.0.0.1:{peer.port}/vpol")
        assert only_namespaces([KYVERNO_NS])["matchExpressions"][0] in webhook["namespaceSelector"]["matchExpressions"]
        assert core.create_namespaced_pod(OTHER_NS, pod(OTHER_NS, True), dry_run="All").metadata.name
        # Its status writes are refused (RBAC): in the benchmark the policies' status is vpol's, and a Kyverno
        # replacing it made both controllers rewrite it in a loop.
        wait_for("Kyverno's status write refused",
                 lambda: 'cannot update resource \\"validatingpolicies/status\\"' in peer.log(400)
                 and "obj=ValidatingPolicy/no-privileged" in peer.log(400), timeout=90)
        assert "status" not in json.loads(own_cluster.kubectl("get", "vpol", "no-privileged", "-o", "json").stdout)
    finally:
        peer.stop()
    wait_for("Kyverno's webhook configurations removed", lambda: not peer.webhooks(), timeout=30)
    try:
        assert core.create_namespaced_pod(KYVERNO_NS, pod(KYVERNO_NS, True), dry_run="All").metadata.name
    except ApiException as exc:  # pragma: no cover - the message says what still answered
        raise AssertionError(f"a webhook still answers after the peer stopped: {exc.body}") from exc
