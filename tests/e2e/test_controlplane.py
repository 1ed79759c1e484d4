"""Acceptance tests of the e2e cluster itself (issue 3).

They check that the cluster the other e2e tests run against behaves like a
real one in the ways vpol depends on: RBAC, ValidatingAdmissionPolicy
admission and its type-checking status, garbage collection, namespace
deletion, ServiceAccount tokens, CRD serving, and clean start/stop.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any, Callable, TypeVar

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

pytestmark = pytest.mark.e2e

T = TypeVar("T")
# The fixtures (cluster, namespace, sa_client, ...) live in conftest.py; the
# cluster object is a conftest.KubeCluster, typed loosely here so this module
# does not import conftest.
KubeCluster = Any
UniqueName = Callable[..., str]


def wait_for(check: Callable[[], T | None], timeout: float, what: str, interval: float = 0.5) -> T:
    """Poll check() until it returns a truthy value; fail after timeout seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = check()
            if last:
                return last
        except ApiException as exc:
            last = f"HTTP {exc.status}: {exc.reason}"
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")
        time.sleep(interval)


def gone(read: Callable[[], Any]) -> bool:
    try:
        read()
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def configmap(name: str, data: dict[str, str] | None = None, **meta: Any) -> client.V1ConfigMap:
    return client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name, **meta), data=data)


def apply(cluster: KubeCluster, manifest: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-f", "-", input=json.dumps(manifest))


# --------------------------------------------------------------------- basics


def test_kubectl_get_namespaces(cluster: KubeCluster) -> None:
    names = cluster.kubectl("get", "ns", "-o", "name").stdout.split()
    assert "namespace/default" in names
    assert "namespace/kube-system" in names

    versions = json.loads(cluster.kubectl("version", "-o", "json").stdout)
    server = versions["serverVersion"]["gitVersion"]
    if cluster.local:
        # kubectl and the control plane come from the same pinned release
        assert versions["clientVersion"]["gitVersion"] == server == cluster.info["version"]
        assert server.startswith("v1.") and int(server.split(".")[1]) >= 34


def test_api_client_works(cluster: KubeCluster) -> None:
    ns: Any = client.CoreV1Api(cluster.api_client).read_namespace("kube-system")
    assert ns.metadata.labels["kubernetes.io/metadata.name"] == "kube-system"


# ------------------------------------------------------ ValidatingAdmissionPolicy


def vap_manifests(name: str, namespace: str, expression: str, message: str) -> list[dict[str, Any]]:
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"],
            }]},
            "validations": [{"expression": expression, "message": message}],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {
                "matchLabels": {"kubernetes.io/metadata.name": namespace}}},
        },
    }
    return [policy, binding]


@pytest.fixture
def cleanup_vap(cluster: KubeCluster) -> Any:
    names: list[str] = []
    yield names
    api: Any = client.AdmissionregistrationV1Api(cluster.api_client)
    for name in names:
        for delete in (api.delete_validating_admission_policy_binding, api.delete_validating_admission_policy):
            try:
                delete(name)
            except ApiException as exc:
                if exc.status != 404:
                    raise


def test_validating_admission_policy_denies_and_admits(
        cluster: KubeCluster, namespace: str, cleanup_vap: list[str], unique_name: UniqueName) -> None:
    core: Any = client.CoreV1Api(cluster.api_client)
    name = unique_name("e2e-require-owner")
    message = "configmaps in this namespace need data.owner (vpol e2e)"
    cleanup_vap.append(name)
    for manifest in vap_manifests(name, namespace, "has(object.data) && 'owner' in object.data", message):
        apply(cluster, manifest)

    def denied() -> ApiException | None:
        # server-side dry run goes through admission but stores nothing
        try:
            core.create_namespaced_config_map(namespace, configmap("probe", {"x": "y"}), dry_run="All")
        except ApiException as exc:
            if exc.status in (403, 422):
                return exc
            raise
        return None

    wait_for(denied, 30, "the policy to take effect")

    with pytest.raises(ApiException) as info:
        core.create_namespaced_config_map(namespace, configmap("violating", {"team": "x"}))
    assert info.value.status == 422, info.value.body
    body = json.loads(str(info.value.body))
    assert message in body["message"]
    assert name in body["message"]  # "ValidatingAdmissionPolicy '<name>' with binding ... denied request"

    created = core.create_namespaced_config_map(namespace, configmap("compliant", {"owner": "team-a"}))
    assert created.metadata.uid
    assert gone(lambda: core.read_namespaced_config_map("violating", namespace))

    # kubectl shows the same denial
    proc = cluster.kubectl("create", "configmap", "via-kubectl", "-n", namespace, "--from-literal=a=b", check=False)
    assert proc.returncode != 0
    assert message in proc.stderr


def test_validating_admission_policy_type_checking_status(
        cluster: KubeCluster, namespace: str, cleanup_vap: list[str], unique_name: UniqueName) -> None:
    api: Any = client.AdmissionregistrationV1Api(cluster.api_client)
    name = unique_name("e2e-ill-typed")
    cleanup_vap.append(name)
    # data values are strings: comparing one with an int does not type-check
    policy = vap_manifests(name, namespace, "object.data.size > 5", "never")[0]
    policy["spec"]["validations"] = [
        {"expression": "has(object.data)", "message": "fine"},
        {"expression": "object.data.size > 5", "message": "ill-typed"},
    ]
    apply(cluster, policy)

    def warnings() -> list[Any] | None:
        status = api.read_validating_admission_policy(name).status
        if status is None or status.type_checking is None:
            return None
        return status.type_checking.expression_warnings or None

    found = wait_for(warnings, 60, "status.typeChecking.expressionWarnings")
    assert [w.field_ref for w in found] == ["spec.validations[1].expression"]
    assert "no matching overload" in found[0].warning, found[0].warning


# ------------------------------------------------------------- controllers


def test_garbage_collector_deletes_dependents(cluster: KubeCluster, namespace: str) -> None:
    core: Any = client.CoreV1Api(cluster.api_client)

    def owned_pair(prefix: str) -> tuple[str, str]:
        owner = core.create_namespaced_config_map(namespace, configmap(f"{prefix}-owner"))
        ref = client.V1OwnerReference(api_version="v1", kind="ConfigMap", name=owner.metadata.name,
                                      uid=owner.metadata.uid, block_owner_deletion=True)
        core.create_namespaced_config_map(namespace, configmap(f"{prefix}-dependent", owner_references=[ref]))
        return owner.metadata.name, f"{prefix}-dependent"

    # background propagation (the default)
    owner, dependent = owned_pair("bg")
    core.delete_namespaced_config_map(owner, namespace)
    wait_for(lambda: gone(lambda: core.read_namespaced_config_map(dependent, namespace)), 60,
             "the garbage collector to delete the dependent (background)")

    # foreground propagation: the owner waits for its dependents
    owner, dependent = owned_pair("fg")
    core.delete_namespaced_config_map(owner, namespace, propagation_policy="Foreground")
    wait_for(lambda: gone(lambda: core.read_namespaced_config_map(dependent, namespace)), 60,
             "the garbage collector to delete the dependent (foreground)")
    wait_for(lambda: gone(lambda: core.read_namespaced_config_map(owner, namespace)), 60,
             "the owner to go after its dependents (foreground)")

    # orphan propagation keeps the dependent and drops its ownerReference
    owner, dependent = owned_pair("orphan")
    core.delete_namespaced_config_map(owner, namespace, propagation_policy="Orphan")
    wait_for(lambda: not core.read_namespaced_config_map(dependent, namespace).metadata.owner_references,
             60, "the dependent to be orphaned")


def test_namespace_deletion_removes_contents(cluster: KubeCluster, unique_name: UniqueName) -> None:
    core: Any = client.CoreV1Api(cluster.api_client)
    rbac: Any = client.RbacAuthorizationV1Api(cluster.api_client)
    name = unique_name("e2e-nsdel")
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    try:
        # controllers populate a new namespace like on a real cluster
        wait_for(lambda: core.read_namespaced_service_account("default", name), 30,
                 "the serviceaccount controller to create the default ServiceAccount")
        wait_for(lambda: core.read_namespaced_config_map("kube-root-ca.crt", name), 30,
                 "the root CA publisher to create kube-root-ca.crt")

        core.create_namespaced_config_map(name, configmap("cm", {"a": "b"}))
        core.create_namespaced_secret(name, client.V1Secret(metadata=client.V1ObjectMeta(name="s"),
                                                            string_data={"k": "v"}))
        core.create_namespaced_service_account(name, client.V1ServiceAccount(
            metadata=client.V1ObjectMeta(name="sa")))
        rbac.create_namespaced_role(name, client.V1Role(metadata=client.V1ObjectMeta(name="r"), rules=[]))

        core.delete_namespace(name)
        assert core.read_namespace(name).status.phase == "Terminating"
        wait_for(lambda: gone(lambda: core.read_namespace(name)), 90, f"namespace {name} to be deleted")
        assert gone(lambda: core.read_namespaced_config_map("cm", name))
        assert gone(lambda: core.read_namespaced_secret("s", name))
    finally:
        try:
            core.delete_namespace(name)
        except ApiException as exc:
            if exc.status != 404:
                raise


# ------------------------------------------------------------------- RBAC


def test_service_account_token_is_subject_to_rbac(
        cluster: KubeCluster, namespace: str, sa_client: Callable[..., Any]) -> None:
    rbac: Any = client.RbacAuthorizationV1Api(cluster.api_client)
    sa_name = "e2e-reader"
    rbac.create_namespaced_role(namespace, client.V1Role(
        metadata=client.V1ObjectMeta(name="configmap-reader"),
        rules=[client.V1PolicyRule(api_groups=[""], resources=["configmaps"], verbs=["get", "list"])]))
    rbac.create_namespaced_role_binding(namespace, client.V1RoleBinding(
        metadata=client.V1ObjectMeta(name="configmap-reader"),
        role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name="configmap-reader"),
        subjects=[client.RbacV1Subject(kind="ServiceAccount", name=sa_name, namespace=namespace)]))

    as_sa = sa_client(namespace, sa_name)

    review: Any = client.AuthenticationV1Api(as_sa).create_self_subject_review(
        client.V1SelfSubjectReview(metadata=client.V1ObjectMeta()))
    assert review.status.user_info.username == f"system:serviceaccount:{namespace}:{sa_name}"
    assert "system:serviceaccounts" in review.status.user_info.groups

    core: Any = client.CoreV1Api(as_sa)
    wait_for(lambda: core.list_namespaced_config_map(namespace), 15, "the Role to grant list configmaps")

    forbidden_calls: dict[str, Callable[[], Any]] = {
        "list secrets": lambda: core.list_namespaced_secret(namespace),
        "create configmap": lambda: core.create_namespaced_config_map(namespace, configmap("nope")),
        "list configmaps in kube-system": lambda: core.list_namespaced_config_map("kube-system"),
        "list namespaces": lambda: core.list_namespace(),
    }
    for what, call in forbidden_calls.items():
        with pytest.raises(ApiException) as info:
            call()
        assert info.value.status == 403, f"{what}: {info.value.status} {info.value.body}"

    # an invalid token is rejected outright
    bad = cluster.sa_api_client(namespace, sa_name)
    bad.configuration.api_key = {"authorization": "Bearer not-a-token"}
    try:
        with pytest.raises(ApiException) as info:
            client.CoreV1Api(bad).list_namespaced_config_map(namespace)
        assert info.value.status == 401
    finally:
        bad.close()


# ------------------------------------------------------------------- CRDs


def test_crds_install_and_serve_every_version(cluster: KubeCluster, installed_crds: list[dict[str, Any]]) -> None:
    for crd in installed_crds:
        spec = crd["spec"]
        group, plural = spec["group"], spec["names"]["plural"]
        status = json.loads(cluster.kubectl("get", "crd", crd["metadata"]["name"], "-o", "json").stdout)["status"]
        conditions = {c["type"]: c["status"] for c in status["conditions"]}
        assert conditions.get("Established") == "True", conditions
        assert conditions.get("NamesAccepted") == "True", conditions
        served = [v["name"] for v in spec["versions"] if v.get("served", True)]
        assert served, f"{crd['metadata']['name']} serves no version"
        for version in served:
            discovery = json.loads(cluster.kubectl("get", "--raw", f"/apis/{group}/{version}").stdout)
            assert plural in [r["name"] for r in discovery["resources"]], (group, version, discovery)
            listed = json.loads(cluster.kubectl(
                "get", f"{plural}.{version}.{group}", "--all-namespaces", "-o", "json").stdout)
            assert listed["apiVersion"] in ("v1", f"{group}/{version}")
        storage = [v["name"] for v in spec["versions"] if v.get("storage")]
        assert status["storedVersions"] == storage


# ------------------------------------------------------------ start / stop


def listening_ports() -> set[int]:
    ports: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A":  # TCP_LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def live_group_members(pgid: int) -> list[int]:
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                raw = Path(f"/proc/{entry}/stat").read_text()
            except (FileNotFoundError, ProcessLookupError):
                continue
            fields = raw[raw.rindex(")") + 2:].split()
            if fields[0] != "Z" and int(fields[2]) == pgid:
                members.append(int(entry))
    return members


@pytest.mark.slow
def test_second_cluster_starts_alongside_and_stops_cleanly(
        cluster: KubeCluster, local_clusters: Any, tmp_path: Path, unique_name: UniqueName) -> None:
    state = tmp_path / "second"
    started = time.monotonic()
    second = local_clusters.start(state)
    startup = time.monotonic() - started
    info = second.info
    pid = info["pid"]
    ports = set(info["ports"].values())
    try:
        assert second.exports["KUBECONFIG"] == str(state / "kubeconfig")
        assert Path(second.exports["PATH"], "kubectl").exists()
        assert "namespace/default" in second.kubectl("get", "ns", "-o", "name").stdout.split()
        # both clusters are up at once, with separate ports and state
        assert "namespace/default" in cluster.kubectl("get", "ns", "-o", "name").stdout.split()
        if cluster.local:
            assert cluster.state_dir != state
            assert not set(cluster.info["ports"].values()) & set(info["ports"].values())
            assert cluster.info["server"] != info["server"]
        # distinct clusters: an object made in one is absent from the other
        name = unique_name("e2e-only-in-second")
        second.kubectl("create", "namespace", name)
        assert cluster.kubectl("get", "namespace", name, check=False).returncode != 0

        assert ports <= listening_ports()
        assert set(info["child_pids"].values()) <= set(live_group_members(pid))
    finally:
        second.close()
        local_clusters.stop(state)

    assert live_group_members(pid) == [], "processes left after stop"
    assert not ports & listening_ports(), "ports still listening after stop"
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
    assert not (state / "ready.json").exists()
    local_clusters.stop(state)  # stopping again is harmless
    print(f"second cluster ready in {startup:.1f}s")
