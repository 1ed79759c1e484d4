"""Kyverno's I/O libraries in every kind and path, on the real control plane, served by real parts: a ConfigMap
(``resource.Get``/``resource.List``), a GlobalContextEntry over it (``globalContext.Get``), a local HTTP server the
operator's ``--http-allow`` names (``http.Get``/``http.Post``) and a local registry holding an image
(``image.GetMetadata``).

Every policy asks all six libraries and checks each answer (the ConfigMap's value, the entry's projection, the
server's JSON, the image's digest), so a library that errors or answers wrongly shows as a denied request, a missing
annotation or generated object, a surviving target or a report result other than pass, with the call in the
message (mutation of existing objects too). Each policy also has a PolicyException made before it (objects named ``exempt-...``): exempt objects are
admitted, left unmutated, generate nothing, are not deleted, and are reported ``skip``. Paths: ValidatingPolicy at admission and in a scan, MutatingPolicy at admission, GeneratingPolicy,
DeletingPolicy, ImageValidatingPolicy at admission and in a scan; namespaced variants of the validating kinds."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.operator_process import OperatorProcess, sa_kubeconfig
from tests.e2e.test_generate_delete import Kube, report_results
from tests.e2e.test_image_validating import KEY
from tests.e2e.vpol_fixtures import vpol_installed, wait_for  # noqa: F401
from tests.signing.tools import RegistryProcess, Signer

GROUP = "policies.kyverno.io"
SCAN_INTERVAL = 8
CM_RULE = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"]}
POD_RULE = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}


class Answers(BaseHTTPRequestHandler):
    """GET answers ``{"allowed": true}``; POST echoes the JSON body under ``received``."""

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, data: Any) -> None:
        body = json.dumps(data).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._send({"allowed": True})

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        self._send({"received": json.loads(self.rfile.read(length) or b"null")})


@dataclass
class World:
    namespace: str
    entry: str
    url: str
    image: str
    digest: str
    operator: OperatorProcess

    def checks(self, namespaced: bool = False) -> str:
        """A CEL list of one bool per library call, each true only for the answer the real part gives. Namespaced
        policies may not call globalContext.* or http.* (Kyverno refuses them): theirs has the other four."""
        calls = ["resource.Get('v1', 'configmaps', '%(ns)s', 'settings').data.allowed == 'yes'",
                 "resource.List('v1', 'configmaps', '%(ns)s').items.exists(c, c.metadata.name == 'settings')",
                 "image.GetMetadata('%(image)s').digest == '%(digest)s'"]
        if not namespaced:
            calls += ["'settings' in globalContext.Get('%(entry)s', 'names')",
                      "http.Get('%(url)s/answer').allowed == true",
                      "http.Post('%(url)s/echo', {'name': 'vpol'}).received.name == 'vpol'"]
        return "[" + ", ".join(calls) % {"ns": self.namespace, "entry": self.entry, "url": self.url,
                                           "image": self.image, "digest": self.digest} + "]"

    def all_served(self, namespaced: bool = False) -> str:
        return f"{self.checks(namespaced)}.all(ok, ok)"


@pytest.fixture(scope="module")
def world(vpol_installed: Any, cluster: Any, tmp_path_factory: pytest.TempPathFactory,
          unique_name: Callable[..., str]) -> Iterator[World]:
    kube = Kube(cluster)
    namespace = unique_name("libs")
    kube.namespace(namespace, {"vpol-e2e": "true"})
    kube.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": namespace},
                "data": {"allowed": "yes"}})
    entry = unique_name("libs-entry")
    kube.apply({"apiVersion": "kyverno.io/v2", "kind": "GlobalContextEntry", "metadata": {"name": entry},
                "spec": {"kubernetesResource": {"version": "v1", "resource": "configmaps", "namespace": namespace},
                         "projections": [{"name": "names", "jmesPath": "[].metadata.name"}]}})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Answers)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    registry = RegistryProcess().start()
    signer = Signer(Path(tmp_path_factory.mktemp("libs-crane")))
    digest = signer.push_image(registry.host, "libs/app", "v1")
    # The role a cluster admin adds for DeletingPolicies on ConfigMaps (aggregated into vpol's).
    kube.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": f"{namespace}-delete-configmaps",
                             "labels": {"vpol.kyverno.io/aggregate-to-delete": "true"}},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"],
                           "verbs": ["get", "list", "watch", "delete"]}]})
    tmp = tmp_path_factory.mktemp("operator-libs")
    proc = OperatorProcess(sa_kubeconfig(vpol_installed, tmp / "kubeconfig"), tmp / "operator.log",
                           # No resync within the module: what an exception's event does not deliver stays undelivered.
                           extra=("--scan-interval", str(SCAN_INTERVAL), "--http-allow", url + "/",
                                  "--resync", "3600")).start()
    try:
        yield World(namespace, entry, url, f"{registry.host}/libs/app:v1", digest, proc)
    finally:
        proc.stop()
        kube.cleanup()
        registry.stop()
        httpd.shutdown()


@pytest.fixture
def kube(world: World, cluster: Any) -> Iterator[Kube]:
    k = Kube(cluster)
    yield k
    k.cleanup()


def configmap(name: str, namespace: str, labels: dict[str, str], **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace,
                                                                  "labels": labels}, "data": data}


def pod(name: str, namespace: str, labels: dict[str, str], image: str, **annotations: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations},
            "spec": {"containers": [{"name": "app", "image": image}]}}


def policy(kind: str, name: str, namespace: str, spec: dict[str, Any]) -> dict[str, Any]:
    metadata = {"name": name, **({"namespace": namespace} if kind.startswith("Namespaced") else {})}
    return {"apiVersion": f"{GROUP}/v1", "kind": kind, "metadata": metadata, "spec": spec}


def exception(kube: Kube, namespace: str, kind: str, policy_name: str) -> None:
    """A PolicyException for one policy, made before it: objects named ``exempt-...`` are exempt."""
    kube.apply({"apiVersion": f"{GROUP}/v1", "kind": "PolicyException",
                "metadata": {"name": f"{policy_name}-exempt", "namespace": namespace},
                "spec": {"policyRefs": [{"name": policy_name, "kind": kind}],
                         "matchConditions": [{"name": "exempt",
                                              "expression": "object.metadata.name.startsWith('exempt-')"}]}})


def short(kind: str) -> str:
    return kind.lower()


def create(kube: Kube, cluster: Any, obj: dict[str, Any]) -> tuple[bool, str]:
    """Create ``obj`` as a user would; (admitted, what kubectl said)."""
    proc = cluster.kubectl("create", "-f", "-", input=json.dumps(obj), check=False)
    if proc.returncode == 0:
        kube.created.append((obj["kind"], obj["metadata"]["name"], obj["metadata"].get("namespace", "")))
    return proc.returncode == 0, proc.stderr + proc.stdout


def scan_result(cluster: Any, kind: str, name: str, namespace: str, policy_key: str) -> dict[str, Any] | None:
    """The result about one object of the policy ``policy_key`` (Kyverno's: ``namespace/name`` for a namespaced
    policy)."""
    return next((r for r in report_results(cluster, kind, name, namespace) if r.get("policy") == policy_key), None)


def key(kind: str, name: str, namespace: str) -> str:
    return f"{namespace}/{name}" if kind.startswith("Namespaced") else name


@pytest.mark.parametrize("kind", ["ValidatingPolicy", "NamespacedValidatingPolicy"])
def test_validating_policies_at_admission_and_in_a_scan(kind: str, world: World, kube: Kube, cluster: Any,
                                                        unique_name: Callable[..., str]) -> None:
    run = unique_name("vpol-libs")
    labels = {"libs-run": run}
    kube.apply(configmap("before", world.namespace, labels), configmap("exempt-before", world.namespace, labels,
                                                                          deny="yes"))
    name = run
    exception(kube, world.namespace, kind, name)
    kube.apply(policy(kind, name, world.namespace, {
        "validationActions": ["Deny", "Audit"],
        "matchConstraints": {"resourceRules": [CM_RULE], "objectSelector": {"matchLabels": labels}},
        "validations": [{"expression": (f"!('deny' in object.?data.orValue({{}})) && "
                                        f"{world.all_served(kind.startswith('Namespaced'))}"),
                         "message": "denied, or a library answered wrongly"}]}))
    kube.wait_ready(short(kind), name, world.namespace if kind.startswith("Namespaced") else "", timeout=90)
    admitted, said = create(kube, cluster, configmap("admitted", world.namespace, labels))
    assert admitted, said
    # The policy is enforced: what it says no to is denied (by the same expression that called the libraries).
    denied, said = create(kube, cluster, configmap("denied", world.namespace, labels, deny="yes"))
    assert not denied and "denied, or a library answered wrongly" in said, said
    admitted, said = create(kube, cluster, configmap("exempt-denied", world.namespace, labels, deny="yes"))
    assert admitted, f"the exception made before the policy did not exempt: {said}"
    # The scan evaluates the object that existed before the policy with the same libraries and exception.
    found = wait_for("the scan's result", lambda: scan_result(cluster, "configmap", "before", world.namespace,
                                                                 key(kind, name, world.namespace)),
                     timeout=90)
    assert found["result"] == "pass", found
    exempt = wait_for("the exempt object's result",
                      lambda: scan_result(cluster, "configmap", "exempt-before", world.namespace,
                                          key(kind, name, world.namespace)), timeout=60)
    assert exempt["result"] == "skip" and "policy exception" in exempt["message"], exempt


def test_a_mutating_policy_at_admission(world: World, kube: Kube, cluster: Any,
                                        unique_name: Callable[..., str]) -> None:
    run = unique_name("mpol-libs")
    labels = {"libs-run": run}
    exception(kube, world.namespace, "MutatingPolicy", run)
    kube.apply(policy("MutatingPolicy", run, "", {
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": [CM_RULE], "objectSelector": {"matchLabels": labels}},
        "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": (
            "Object{metadata: Object.metadata{annotations: {'libraries': " + world.checks() +
            ".map(ok, string(ok)).join(',')}}}")}}]}))
    kube.wait_ready("mutatingpolicy", run, timeout=90)
    admitted, said = create(kube, cluster, configmap("mutated", world.namespace, labels))
    assert admitted, said
    obj = kube.get("configmap", "mutated", world.namespace) or {}
    assert (obj["metadata"].get("annotations") or {}).get("libraries") == ",".join(["true"] * 6), obj["metadata"]
    admitted, said = create(kube, cluster, configmap("exempt-mutated", world.namespace, labels))
    assert admitted, said
    exempt = kube.get("configmap", "exempt-mutated", world.namespace) or {}
    assert "libraries" not in (exempt["metadata"].get("annotations") or {}), exempt["metadata"]


def test_a_mutating_policy_on_existing_objects(world: World, kube: Kube, cluster: Any,
                                               unique_name: Callable[..., str]) -> None:
    run = unique_name("mpol-existing-libs")
    labels = {"libs-run": run}
    kube.apply(configmap("existing", world.namespace, labels), configmap("exempt-existing", world.namespace, labels))
    exception(kube, world.namespace, "MutatingPolicy", run)
    kube.apply(policy("MutatingPolicy", run, "", {
        "evaluation": {"mutateExisting": {"enabled": True}},
        "matchConstraints": {"resourceRules": [CM_RULE], "objectSelector": {"matchLabels": labels}},
        "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": (
            "Object{metadata: Object.metadata{annotations: {'libraries': " + world.checks() +
            ".map(ok, string(ok)).join(',')}}}")}}]}))
    kube.wait_ready("mutatingpolicy", run, timeout=90)
    mutated = wait_for("the existing ConfigMap mutated", lambda: ((kube.get("configmap", "existing", world.namespace)
                                                                    or {})["metadata"].get("annotations") or {}
                                                                   ).get("libraries"), timeout=60)
    assert mutated == ",".join(["true"] * 6), mutated
    exempt = kube.get("configmap", "exempt-existing", world.namespace) or {}
    assert "libraries" not in (exempt["metadata"].get("annotations") or {}), exempt["metadata"]


def test_a_generating_policy(world: World, kube: Kube, cluster: Any, unique_name: Callable[..., str]) -> None:
    run = unique_name("gpol-libs")
    labels = {"libs-run": run}
    exception(kube, world.namespace, "GeneratingPolicy", run)
    kube.apply(policy("GeneratingPolicy", run, "", {
        "matchConstraints": {"resourceRules": [CM_RULE], "objectSelector": {"matchLabels": labels}},
        "evaluation": {"synchronize": {"enabled": False}},
        "generate": [{"expression": (
            "generator.Apply(object.metadata.namespace, [{'apiVersion': 'v1', 'kind': 'ConfigMap', "
            "'metadata': {'name': object.metadata.name + '-generated'}, "
            "'data': {'libraries': " + world.checks() + ".map(ok, string(ok)).join(',')}}])")}]}))
    kube.wait_ready("generatingpolicy", run, timeout=90)
    # The exempt trigger first: once the other one's object is generated, the exempt one's would be too.
    kube.apply(configmap("exempt-trigger", world.namespace, labels))
    kube.apply(configmap("trigger", world.namespace, labels))
    generated = wait_for("the generated ConfigMap", lambda: kube.get("configmap", "trigger-generated",
                                                                     world.namespace), timeout=60)
    kube.created.append(("configmap", "trigger-generated", world.namespace))
    assert generated["data"]["libraries"] == ",".join(["true"] * 6), generated["data"]
    exempt = wait_for("the exempt trigger's result",
                      lambda: scan_result(cluster, "configmap", "exempt-trigger", world.namespace, run), timeout=60)
    assert exempt["result"] == "skip" and "policy exception" in exempt["message"], exempt
    assert kube.get("configmap", "exempt-trigger-generated", world.namespace) is None


def test_a_deleting_policy(world: World, kube: Kube, cluster: Any, unique_name: Callable[..., str]) -> None:
    run = unique_name("dpol-libs")
    labels = {"libs-run": run}
    kube.apply(configmap("expired", world.namespace, labels), configmap("kept", world.namespace, labels, keep="yes"),
               configmap("exempt-expired", world.namespace, labels))
    exception(kube, world.namespace, "DeletingPolicy", run)
    kube.apply(policy("DeletingPolicy", run, "", {
        "schedule": "*/1 * * * *",
        "matchConstraints": {"resourceRules": [{**CM_RULE, "operations": ["*"]}],
                             "objectSelector": {"matchLabels": labels}},
        "conditions": [{"name": "libraries", "expression": world.all_served()},
                       {"name": "not-kept", "expression": "!('keep' in object.?data.orValue({}))"}]}))
    kube.wait_ready("deletingpolicy", run, timeout=90)
    wait_for("the expired ConfigMap deleted", lambda: kube.get("configmap", "expired", world.namespace) is None,
             timeout=150)
    assert kube.get("configmap", "kept", world.namespace) is not None
    assert kube.get("configmap", "exempt-expired", world.namespace) is not None, "the exception did not keep it"


@pytest.mark.parametrize("kind", ["ImageValidatingPolicy", "NamespacedImageValidatingPolicy"])
def test_image_validating_policies_at_admission_and_in_a_scan(kind: str, world: World, kube: Kube, cluster: Any,
                                                              unique_name: Callable[..., str]) -> None:
    run = unique_name("ivpol-libs")
    labels = {"libs-run": run}
    kube.apply(pod("before", world.namespace, labels, world.image))
    exception(kube, world.namespace, kind, run)
    kube.apply(policy(kind, run, world.namespace, {
        "validationActions": ["Deny", "Audit"],
        "matchConstraints": {"resourceRules": [POD_RULE], "objectSelector": {"matchLabels": labels}},
        "matchImageReferences": [{"glob": world.image.split("/")[0] + "/*"}],
        "validationConfigurations": {"mutateDigest": False, "verifyDigest": False, "required": False},
        # The kind requires an attestor; this one is never asked (the validations verify no signature).
        "attestors": [{"name": "unused", "cosign": {"key": {"data": KEY}, "ctlog": {"insecureIgnoreTlog": True}}}],
        "validations": [{"expression": (f"!('deny' in object.metadata.?annotations.orValue({{}})) && "
                                        f"{world.all_served(kind.startswith('Namespaced'))}"),
                         "message": "denied, or a library answered wrongly"}]}))
    kube.wait_ready(short(kind), run, world.namespace if kind.startswith("Namespaced") else "", timeout=90)
    admitted, said = create(kube, cluster, pod("admitted", world.namespace, labels, world.image))
    assert admitted, said
    denied, said = create(kube, cluster, pod("denied", world.namespace, labels, world.image, deny="yes"))
    assert not denied and "denied, or a library answered wrongly" in said, said
    admitted, said = create(kube, cluster, pod("exempt-denied", world.namespace, labels, world.image, deny="yes"))
    assert admitted, f"the exception made before the policy did not exempt: {said}"
    found = wait_for("the scan's result", lambda: scan_result(cluster, "pod", "before", world.namespace,
                                                                 key(kind, run, world.namespace)),
                     timeout=90)
    assert found["result"] == "pass", found


def test_an_exception_made_after_the_policies_reaches_each_of_them(world: World, kube: Kube, cluster: Any,
                                                                 unique_name: Callable[..., str]) -> None:
    """One PolicyException naming a GeneratingPolicy, a NamespacedValidatingPolicy the API server enforces natively
    and an ImageValidatingPolicy, made once they are Ready: each exempts from then on (generation hears of it from
    the exception's event, the native policy is regenerated with it, the image webhook reads it)."""
    run = unique_name("after")
    labels = {"libs-run": run}
    native, generating, image = f"{run}-native", f"{run}-gen", f"{run}-image"
    kube.apply(
        policy("NamespacedValidatingPolicy", native, world.namespace, {
            "validationActions": ["Deny"],
            "matchConstraints": {"resourceRules": [CM_RULE], "objectSelector": {"matchLabels": labels}},
            "validations": [{"expression": "!('deny' in object.?data.orValue({}))", "message": "denied"}]}),
        policy("GeneratingPolicy", generating, "", {
            "matchConstraints": {"resourceRules": [CM_RULE], "objectSelector": {"matchLabels": labels}},
            "evaluation": {"synchronize": {"enabled": False}},
            "generate": [{"expression": (
                "generator.Apply(object.metadata.namespace, [{'apiVersion': 'v1', 'kind': 'ConfigMap', "
                "'metadata': {'name': object.metadata.name + '-generated'}, 'data': {}}])")}]}),
        policy("ImageValidatingPolicy", image, "", {
            "validationActions": ["Deny"],
            "matchConstraints": {"resourceRules": [POD_RULE], "objectSelector": {"matchLabels": labels}},
            "matchImageReferences": [{"glob": world.image.split("/")[0] + "/*"}],
            "validationConfigurations": {"mutateDigest": False, "verifyDigest": False, "required": False},
            "attestors": [{"name": "unused", "cosign": {"key": {"data": KEY}, "ctlog": {"insecureIgnoreTlog": True}}}],
            "validations": [{"expression": "!('deny' in object.metadata.?annotations.orValue({}))",
                             "message": "denied"}]}))
    kube.wait_ready("namespacedvalidatingpolicy", native, world.namespace, timeout=90)
    kube.wait_ready("generatingpolicy", generating, timeout=90)
    kube.wait_ready("imagevalidatingpolicy", image, timeout=90)
    denied, said = create(kube, cluster, configmap("exempt-early", world.namespace, labels, deny="yes"))
    assert not denied, "admitted before any exception"
    kube.apply({"apiVersion": f"{GROUP}/v1", "kind": "PolicyException",
                "metadata": {"name": f"{run}-exempt", "namespace": world.namespace},
                "spec": {"policyRefs": [{"name": native, "kind": "NamespacedValidatingPolicy"},
                                        {"name": generating, "kind": "GeneratingPolicy"},
                                        {"name": image, "kind": "ImageValidatingPolicy"}],
                         "matchConditions": [{"name": "exempt",
                                              "expression": "object.metadata.name.startsWith('exempt-')"}]}})
    # The native policy: regenerated with the exception (the API server then admits what it exempts).
    wait_for("the exempt ConfigMap admitted", lambda: create(kube, cluster, configmap(
        "exempt-late", world.namespace, labels, deny="yes"))[0], timeout=45)
    wait_for("the exempt Pod admitted", lambda: create(kube, cluster, pod(
        "exempt-pod", world.namespace, labels, world.image, deny="yes"))[0], timeout=45)
    # Generation: the exempt trigger first; once the other's object is generated, the exempt one's would be too.
    kube.apply(configmap("exempt-trigger", world.namespace, labels))
    kube.apply(configmap("trigger", world.namespace, labels))
    wait_for("the generated ConfigMap", lambda: kube.get("configmap", "trigger-generated", world.namespace),
             timeout=60)
    kube.created.append(("configmap", "trigger-generated", world.namespace))
    assert kube.get("configmap", "exempt-trigger-generated", world.namespace) is None, \
        "the exception made after the GeneratingPolicy did not reach generation"
