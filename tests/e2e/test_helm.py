"""vpol's Helm chart against a real API server: helm install / upgrade / uninstall with the operator image
running for real, and every rendering accepted by a server-side dry run and the restricted Pod Security level.

Here the control plane has no node (pods stay Pending; tests/e2e/test_helm_node.py installs the chart on one and
runs it in its Pods), so the operator runs as the installed Deployment
says, in Docker (tests/e2e/test_image.py's approach): its container from the pod spec Helm installed, the
image, args and environment, user, read-only root, dropped capabilities, the /tmp emptyDir, resource limits,
host network, and the ServiceAccount's token mounted where in-cluster configuration reads it. A kubelet's
readiness probe is played by reading the probe's path and port. The API server reaches the webhook by URL
(`webhook.url`): a Service would need endpoints.

The chart is installed into a control plane of its own (vpol's kustomize objects, which the session cluster
holds, would clash with the release).
"""

from __future__ import annotations

import json
import os
import re
import ssl
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests.e2e.conftest import KubeCluster
from tests.e2e.operator_process import free_port
from tests.e2e.test_admission import dry_cm
from tests.e2e.test_deployment import MONITORING_CRDS, check_restricted, stand_in_crds
from tests.e2e.test_image import docker, image  # noqa: F401 - fixture
from tests.e2e.test_operator import CM_RULE, expect_denied
from tests.e2e.vpol_fixtures import wait_for
from tests.helm.chart import CHANGED, CHART, NAMESPACE, REPO, VARIANTS, Doc, find, helm, template

RELEASE = "vpol"
CERT_MANAGER_CRDS = stand_in_crds("cert-manager.io", (("Certificate", "certificates"), ("Issuer", "issuers")))
WEBHOOK_CONFIGURATIONS = ("validatingwebhookconfigurations", "mutatingwebhookconfigurations")


def helm_on(cluster: KubeCluster, *args: str, check: bool = True) -> Any:
    return helm(*args, check=check, env={**os.environ, "KUBECONFIG": cluster.kubeconfig}, timeout=600)


def installed(cluster: KubeCluster) -> list[Doc]:
    """The objects of the release as Helm installed them."""
    out = helm_on(cluster, "get", "manifest", RELEASE, "-n", NAMESPACE).stdout
    return [d for d in yaml.safe_load_all(out) if d]


# --------------------------------------------------------------------- the Deployment's pod, in Docker


#: Container fields the translation below understands; anything else in the chart's pod fails the test.
CONTAINER_FIELDS = {"name", "image", "imagePullPolicy", "args", "env", "ports", "livenessProbe", "readinessProbe",
                    "resources", "securityContext", "volumeMounts"}
POD_FIELDS = {"serviceAccountName", "automountServiceAccountToken", "securityContext", "containers", "volumes"}


def _mebibytes(quantity: str) -> int:
    m = re.fullmatch(r"(\d+)(Mi|Gi)", quantity)
    assert m, quantity
    return int(m.group(1)) * (1024 if m.group(2) == "Gi" else 1)


class Pod:
    """The Deployment's pod template run with Docker, as a kubelet would run it (what Docker can express)."""

    def __init__(self, cluster: KubeCluster, deployment: Doc, workdir: Path):
        self.cluster = cluster
        template = deployment["spec"]["template"]
        self.spec = template["spec"]
        [self.container] = self.spec["containers"]
        assert set(self.spec) <= POD_FIELDS, set(self.spec) - POD_FIELDS
        assert set(self.container) <= CONTAINER_FIELDS, set(self.container) - CONTAINER_FIELDS
        self.namespace = deployment["metadata"]["namespace"]
        self.workdir = workdir
        self.name = f"vpol-helm-{os.getpid()}-{free_port()}"

    def _service_account(self) -> Path:
        """/var/run/secrets/kubernetes.io/serviceaccount as the kubelet projects it."""
        sa_dir = self.workdir / f"serviceaccount-{self.name}"
        sa_dir.mkdir(parents=True)
        token = self.cluster.sa_token(self.namespace, self.spec["serviceAccountName"], duration="2h")
        (sa_dir / "token").write_text(token)
        (sa_dir / "namespace").write_text(self.namespace)
        (sa_dir / "ca.crt").write_bytes(Path(self.cluster.configuration.ssl_ca_cert).read_bytes())
        for f in sa_dir.iterdir():
            f.chmod(0o644)
        return sa_dir

    def docker_args(self) -> list[str]:
        c, spec = self.container, self.spec
        host = re.match(r"https://([^:/]+):(\d+)", self.cluster.configuration.host)
        assert host, self.cluster.configuration.host
        args = ["run", "-d", "--name", self.name, "--network", "host",
                "-e", f"KUBERNETES_SERVICE_HOST={host.group(1)}", "-e", f"KUBERNETES_SERVICE_PORT={host.group(2)}"]
        for env in c.get("env") or []:
            if "value" in env:
                args += ["-e", f"{env['name']}={env['value']}"]
            else:
                assert env["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}, env
                args += ["-e", f"{env['name']}={self.namespace}"]
        pod_sc, sc = spec.get("securityContext") or {}, c.get("securityContext") or {}
        args += ["--user", f"{sc.get('runAsUser', pod_sc['runAsUser'])}:{sc.get('runAsGroup', pod_sc['runAsGroup'])}"]
        if sc.get("readOnlyRootFilesystem"):
            args.append("--read-only")
        for cap in (sc.get("capabilities") or {}).get("drop") or []:
            args += ["--cap-drop", cap]
        if sc.get("allowPrivilegeEscalation") is False:
            args += ["--security-opt", "no-new-privileges"]
        limits = (c.get("resources") or {}).get("limits") or {}
        if "memory" in limits:
            args += ["--memory", f"{_mebibytes(limits['memory'])}m"]
        if "cpu" in limits:
            cpu = str(limits["cpu"])
            args += ["--cpus", str(int(cpu[:-1]) / 1000) if cpu.endswith("m") else cpu]
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        for mount in c.get("volumeMounts") or []:
            empty = volumes[mount["name"]]["emptyDir"]
            args += ["--tmpfs", f"{mount['mountPath']}:rw,size={_mebibytes(empty['sizeLimit'])}m"]
        if spec.get("automountServiceAccountToken", True):
            args += ["-v", f"{self._service_account()}:/var/run/secrets/kubernetes.io/serviceaccount:ro"]
        return [*args, c["image"], *c["args"]]

    def start(self) -> "Pod":
        docker(*self.docker_args())
        return self

    def probe(self, which: str) -> bool:
        """The kubelet's HTTP probe: a 2xx from the probe's path on its (named) port, over its scheme (HTTPS
        without verifying the certificate, as the kubelet does)."""
        get = self.container[which]["httpGet"]
        ports = {p["name"]: p["containerPort"] for p in self.container["ports"]}
        port = ports.get(get["port"], get["port"])
        scheme = str(get.get("scheme", "HTTP")).lower()
        unverified = ssl._create_unverified_context() if scheme == "https" else None  # noqa: S323 - as the kubelet
        try:
            with urllib.request.urlopen(f"{scheme}://127.0.0.1:{port}{get['path']}", timeout=3,
                                        context=unverified) as r:
                return 200 <= r.status < 300
        except OSError:
            return False

    def logs(self) -> str:
        proc = docker("logs", self.name, check=False)
        return str(proc.stdout + proc.stderr)

    def stop(self) -> None:
        docker("rm", "-f", self.name, check=False)


# --------------------------------------------------------------------------------------- policies


def policy(name: str, namespace: str, key: str, expression_prefix: str = "") -> Doc:
    return {"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy", "metadata": {"name": name},
            "spec": {"validationActions": ["Deny"],
                     "matchConstraints": {"resourceRules": [CM_RULE], "namespaceSelector": {
                         "matchLabels": {"kubernetes.io/metadata.name": namespace}}},
                     "validations": [{"expression": f"{expression_prefix}!(has(object.data) && '{key}' in object.data)",
                                      "message": f"{key} is not allowed"}]}}


def policy_status(cluster: KubeCluster, name: str) -> Doc:
    return dict(client.CustomObjectsApi(cluster.api_client).get_cluster_custom_object(
        "policies.kyverno.io", "v1", "validatingpolicies", name).get("status") or {})


def ready_with(cluster: KubeCluster, name: str, enforcement: str) -> bool:
    status = policy_status(cluster, name)
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or [])
    return ready and status.get("enforcement") == enforcement


def webhook_configurations(cluster: KubeCluster) -> list[str]:
    out = []
    for kind in WEBHOOK_CONFIGURATIONS:
        items = json.loads(cluster.kubectl("get", kind, "-o", "json").stdout)["items"]
        out += [f"{kind}/{i['metadata']['name']}" for i in items]
    return out


# ------------------------------------------------------------------------------ install and upgrade


def test_install_upgrade_uninstall_with_the_operator_running(own_cluster: KubeCluster, image: str,  # noqa: F811
                                                             tmp_path: Path) -> None:
    cluster = own_cluster
    repository, _, tag = image.rpartition(":")
    ports = {"metrics": free_port(), "health": free_port(), "webhook": free_port()}
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"}, "replicas": 1,
        "ports": ports, "webhook": {"url": f"https://127.0.0.1:{ports['webhook']}"},
        "operator": {"scanInterval": 30, "resync": 30}}))
    common = [str(CHART), "-n", NAMESPACE, "-f", str(values)]

    assert cluster.kubectl("get", "crd", "-o", "name").stdout.strip() == ""
    helm_on(cluster, "install", RELEASE, *common, "--create-namespace")
    crds = cluster.kubectl("get", "crd", "-o", "name").stdout.split()
    assert {"customresourcedefinition.apiextensions.k8s.io/validatingpolicies.policies.kyverno.io",
            "customresourcedefinition.apiextensions.k8s.io/policyreports.wgpolicyk8s.io",
            "customresourcedefinition.apiextensions.k8s.io/clusterkopfpeerings.kopf.dev"} <= set(crds)
    deployment = find(installed(cluster), "Deployment", "vpol")
    assert deployment is not None
    live = client.AppsV1Api(cluster.api_client).read_namespaced_deployment("vpol", NAMESPACE)
    assert live.spec.template.spec.containers[0].args == deployment["spec"]["template"]["spec"]["containers"][0]["args"]

    namespace = "helm-e2e"
    cluster.kubectl("create", "namespace", namespace)
    pod = Pod(cluster, deployment, tmp_path).start()
    try:
        wait_for("the operator to pass its readiness probe", lambda: pod.probe("readinessProbe"), 120, 1)
        assert pod.probe("livenessProbe")

        cluster.kubectl("apply", "-f", "-", input=json.dumps(policy("helm-native", namespace, "native-forbidden")))
        cluster.kubectl("apply", "-f", "-", input=json.dumps(
            policy("helm-webhook", namespace, "webhook-forbidden", "sha256(object.metadata.name) != '' && ")))
        wait_for("the native policy to be Ready and enforced by a VAP",
                 lambda: ready_with(cluster, "helm-native", "NativeVAP"), 120, 1)
        wait_for("the webhook policy to be Ready and enforced by vpol's webhook",
                 lambda: ready_with(cluster, "helm-webhook", "Webhook"), 120, 1)
        expect_denied(lambda: dry_cm(cluster, namespace, "a", {"native-forbidden": "1"}),
                      "native-forbidden is not allowed")
        expect_denied(lambda: dry_cm(cluster, namespace, "b", {"webhook-forbidden": "1"}),
                      "webhook-forbidden is not allowed")
        dry_cm(cluster, namespace, "c", {"fine": "1"})
        owned = client.AdmissionregistrationV1Api(cluster.api_client).read_validating_webhook_configuration(
            "vpol-validating")
        role = client.RbacAuthorizationV1Api(cluster.api_client).read_cluster_role("vpol-operator")
        assert [(o.kind, o.name, o.uid) for o in owned.metadata.owner_references] == \
            [("ClusterRole", "vpol-operator", role.metadata.uid)]

        # A wrong value is refused at upgrade (values.schema.json), and the release stays as it was.
        refused = helm_on(cluster, "upgrade", RELEASE, *common, "--set", "replicas=0", check=False)
        assert refused.returncode != 0 and "/replicas" in refused.stderr, refused.stderr
        assert json.loads(helm_on(cluster, "history", RELEASE, "-n", NAMESPACE, "-o", "json").stdout)[-1][
            "revision"] == 1

        # Upgrade: Kyverno's opt-in VAP generation. The new Deployment's container replaces the old one
        # (the rollout); the native policy moves to vpol's webhook and stays enforced.
        # (docs/install.md's upgrade: vpol's CRDs first, over those Helm created)
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-k", str(REPO / "crds"))
        helm_on(cluster, "upgrade", RELEASE, *common, "--set", "operator.vapGeneration=opt-in")
        upgraded = find(installed(cluster), "Deployment", "vpol")
        assert upgraded is not None
        assert "--vap-generation=opt-in" in upgraded["spec"]["template"]["spec"]["containers"][0]["args"]
        live = client.AppsV1Api(cluster.api_client).read_namespaced_deployment("vpol", NAMESPACE)
        assert "--vap-generation=opt-in" in live.spec.template.spec.containers[0].args
        assert json.loads(helm_on(cluster, "history", RELEASE, "-n", NAMESPACE, "-o", "json").stdout)[-1][
            "revision"] == 2
        pod.stop()
        pod = Pod(cluster, upgraded, tmp_path).start()
        wait_for("the upgraded operator to be ready", lambda: pod.probe("readinessProbe"), 120, 1)
        wait_for("the native policy to be enforced by the webhook now",
                 lambda: ready_with(cluster, "helm-native", "Webhook"), 120, 1)
        wait_for("its VAP to be removed", lambda: "vpol-helm-native" not in cluster.kubectl(
            "get", "validatingadmissionpolicies", "-o", "name").stdout, 60, 1)
        expect_denied(lambda: dry_cm(cluster, namespace, "d", {"native-forbidden": "1"}),
                      "native-forbidden is not allowed")
        assert webhook_configurations(cluster) == ["validatingwebhookconfigurations/vpol-policy-validation",
                                                   "validatingwebhookconfigurations/vpol-validating"]

        # Uninstall while the operator still runs (the worst case: a pod being terminated keeps
        # reconciling): its webhook configuration goes with the ClusterRole that owns it, and is not
        # written again.
        helm_on(cluster, "uninstall", RELEASE, "-n", NAMESPACE)
        wait_for("no webhook configuration left", lambda: webhook_configurations(cluster) == [], 60, 1)
        time.sleep(12)  # two periods of the configuration writer
        assert webhook_configurations(cluster) == [], pod.logs()[-3000:]
        for kind, name in (("clusterrole", "vpol-operator"), ("clusterrole", "vpol-scanned-kinds"),
                           ("clusterkopfpeering", "vpol")):
            assert cluster.kubectl("get", kind, name, check=False).returncode != 0, (kind, name)
        assert cluster.kubectl("get", "deployment,service,serviceaccount", "-n", NAMESPACE,
                               "-l", "app.kubernetes.io/instance=vpol", "-o", "name").stdout.strip() == ""
        # Requests the webhook matched are admitted again (nothing calls a server that is gone)...
        dry_cm(cluster, namespace, "e", {"webhook-forbidden": "1"})
    finally:
        pod.stop()
    # ...and the CRDs, the policies and their status stay (Helm never deletes a chart's CRDs).
    assert policy_status(cluster, "helm-webhook")


# ---------------------------------------------------------------------------- dry run, Pod Security


def renderings() -> dict[str, list[Doc]]:
    out = {"defaults": template(), "changed": template([CHANGED])}
    for name, path in VARIANTS.items():
        out[name] = template([CHANGED, path])
    return out


@pytest.fixture(scope="module")
def prepared(own_cluster: KubeCluster) -> KubeCluster:
    """What the rendered objects refer to: the CRDs (the chart's, Helm's --include-crds, and stand-ins for the
    Prometheus Operator's and cert-manager's), the namespaces, the changed values' PriorityClass."""
    crds = [d for d in yaml.safe_load_all(helm("template", RELEASE, str(CHART), "--include-crds").stdout)
            if d and d["kind"] == "CustomResourceDefinition"]
    for crd in crds + MONITORING_CRDS + CERT_MANAGER_CRDS:
        own_cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps(crd))
        own_cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{crd['metadata']['name']}")
    for ns in (NAMESPACE, "monitoring"):
        own_cluster.kubectl("create", "namespace", ns, check=False)
    own_cluster.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "vpol-critical"},
        "value": 1000000}))
    return own_cluster


@pytest.mark.parametrize("name", ["defaults", "changed", *VARIANTS])
def test_every_rendering_passes_a_server_side_dry_run(prepared: KubeCluster, name: str) -> None:
    docs = renderings()[name]
    for doc in docs:
        proc = prepared.kubectl("apply", "--server-side", "--dry-run=server", "--field-manager=vpol-e2e",
                                "-f", "-", input=json.dumps(doc), check=False)
        assert proc.returncode == 0, f"{name}: {doc['kind']}/{doc['metadata']['name']}: {proc.stderr}"


@pytest.mark.parametrize("name", ["defaults", "changed"])
def test_the_pod_passes_the_restricted_pod_security_level(prepared: KubeCluster, name: str) -> None:
    namespace = f"helm-pss-{name}"
    prepared.kubectl("create", "namespace", namespace, check=False)
    deployment = find(renderings()[name], "Deployment", "vpol")
    assert deployment is not None
    check_restricted(prepared, namespace, deployment["spec"]["template"])
