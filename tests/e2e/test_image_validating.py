"""ImageValidatingPolicy and NamespacedImageValidatingPolicy on the real control plane, with a real registry and
signatures cosign made (tests/signing/tools.py), the operator running as its ServiceAccount:

- the kinds are served (every version, short names, printer columns), a valid policy is compiled into its status
  and becomes Ready once vpol's image webhooks serve it (AdmissionEnforced=True, reason Webhook), and a broken one
  is refused at `kubectl apply` with `vpol check`'s messages (or, stored behind the webhook's back, said so in
  status);
- at admission: a Pod whose image the policy's key signed is admitted, one unsigned or signed by another key is
  denied with a message naming the image and the attestor, a tag is pinned to the digest the registry resolves
  (mutateDigest) and then verified, a Deployment is checked by the policy's autogen variant;
- a stopped registry: requests are answered within the webhook timeout by the policy's failurePolicy, an image
  verified before is still admitted from the cache, and a restarted registry is used again;
- background scans: Pods that existed before the policy get its results in their PolicyReports, the same results
  admission gives for the same images (and `vpol apply` too), and a restarted operator writes none of them again."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.operator_process import OperatorProcess, sa_kubeconfig
from tests.e2e.test_generate_delete import Kube, report_results
from tests.e2e.test_policy_validation import served_by, vpol_check
from tests.e2e.vpol_fixtures import vpol_installed, wait_for  # noqa: F401
from tests.signing.tools import RegistryProcess, Signer

GROUP = "policies.kyverno.io"
KEY = ("-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEzJ2Wzd6cGaiU2Ef8b2XIbdmz4Iu2\n"
       "I1rnOOs5l8v2jsjd+5IJYgcsNz+lXLb0rrPaptb0iIdd5iqzHDtyfXeKDw==\n-----END PUBLIC KEY-----\n")


def spec(validation: str = "images.containers.map(i, verifyImageSignatures(i, [attestors.signed])).all(n, n > 0)",
         **more: Any) -> dict[str, Any]:
    return {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                    "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}]},
            "matchImageReferences": [{"glob": "registry.local/*"}],
            "attestors": [{"name": "signed", "cosign": {"key": {"data": KEY}, "ctlog": {"insecureIgnoreTlog": True}}}],
            "validations": [{"expression": validation, "message": "images must be signed"}], **more}


@pytest.fixture(scope="module")
def operator(vpol_installed: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    tmp = tmp_path_factory.mktemp("operator-image")
    proc = OperatorProcess(sa_kubeconfig(vpol_installed, tmp / "kubeconfig"), tmp / "operator.log").start()
    yield proc
    proc.stop()


@pytest.fixture
def kube(operator: OperatorProcess, cluster: Any) -> Iterator[Kube]:
    k = Kube(cluster)
    yield k
    k.cleanup()


@pytest.mark.parametrize("kind,short,versions", [("ImageValidatingPolicy", "ivpol", ("v1", "v1beta1", "v1alpha1")),
                                                 ("NamespacedImageValidatingPolicy", "nivpol", ("v1", "v1beta1"))])
def test_every_version_is_compiled_and_ready_once_the_webhooks_serve_it(
        kind: str, short: str, versions: tuple[str, ...], kube: Kube, cluster: Any, namespace: str,
        unique_name: Callable[..., str]) -> None:
    names = []
    where = namespace if kind.startswith("Namespaced") else ""
    for version in versions:
        metadata = {"name": unique_name("ivpol", version)}
        if where:
            metadata["namespace"] = where
        kube.apply({"apiVersion": f"{GROUP}/{version}", "kind": kind, "metadata": metadata, "spec": spec()})
        names.append(metadata["name"])
    for name in names:
        kube.wait_ready(short, name, where, timeout=90)
        enforced = kube.condition(short, name, "AdmissionEnforced", where)
        assert enforced is not None and enforced["status"] == "True" and enforced["reason"] == "Webhook", enforced
        assert "vpol-validating" in enforced["message"] and "vpol-mutating" in enforced["message"]
        verifiable = kube.condition(short, name, "AttestorsVerifiable", where)
        assert verifiable is not None and verifiable["status"] == "True", verifiable
        scanned = kube.condition(short, name, "BackgroundScanned", where)
        assert scanned is not None and scanned["status"] == "True" and scanned["reason"] == "Active", scanned
        body = kube.get(short, name, where)
        assert body is not None and body["status"]["conditionStatus"]["ready"] is True
    config = json.loads(cluster.kubectl("get", "validatingwebhookconfiguration", "vpol-validating", "-o",
                                        "json").stdout)
    assert {"fail.images.validate.vpol.kyverno.io"} <= {w["name"] for w in config["webhooks"]}
    args = ["get", short, "-o", "json"] + (["-n", namespace] if where else [])
    listed = {i["metadata"]["name"] for i in json.loads(cluster.kubectl(*args).stdout)["items"]}
    assert set(names) <= listed
    columns = cluster.kubectl("get", short, names[0], *(["-n", namespace] if where else [])).stdout.split("\n")[0]
    assert columns.split() == ["NAME", "AGE", "READY"]


def test_a_broken_policy_becomes_not_compiled_when_the_webhook_is_bypassed(
        kube: Kube, cluster: Any, unique_name: Callable[..., str], operator: OperatorProcess) -> None:
    """A policy stored while the validation webhook was away (or before vpol ran) is still judged: Compiled=False
    with the error's field path."""
    name = unique_name("ivpol", "broken")
    doc = {"apiVersion": f"{GROUP}/v1", "kind": "ImageValidatingPolicy", "metadata": {"name": name},
           "spec": spec("images.containers")}
    operator.stop()
    try:
        cluster.kubectl("delete", "validatingwebhookconfiguration", "vpol-policy-validation", "--ignore-not-found")
        kube.apply(doc)
    finally:
        operator.start()
    compiled = wait_for("Compiled=False", lambda: (c := kube.condition("ivpol", name, "Compiled")) and
                        c["status"] == "False" and c, timeout=90)
    assert "spec.validations[0].expression" in compiled["message"]
    assert "must evaluate to bool" in compiled["message"]


INVALID = [
    ("ImageValidatingPolicy", spec(validation="images.containers.size()")),
    ("ImageValidatingPolicy", spec(matchImageReferences=[{"expression": "object.metadata.name == ref"}])),
    ("ImageValidatingPolicy", spec(attestors=[{"name": "roots", "notary": {"certs": {"expression": "variables.nope"}}}])),
    ("NamespacedImageValidatingPolicy", spec(validation="http.Get('https://example.com') != null")),
]


@pytest.mark.parametrize("kind,body", INVALID, ids=[f"{k}-{i}" for i, (k, _b) in enumerate(INVALID)])
def test_invalid_policies_are_refused_with_vpol_checks_messages(
        kind: str, body: dict[str, Any], operator: OperatorProcess, cluster: Any, namespace: str,
        unique_name: Callable[..., str], tmp_path: Path) -> None:
    wait_for("the policy validation webhook serving this operator", lambda: served_by(cluster, operator), 90)
    metadata = {"name": unique_name("bad", kind.lower())}
    if kind.startswith("Namespaced"):
        metadata["namespace"] = namespace
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": f"{GROUP}/v1", "kind": kind, "metadata": metadata, "spec": body}))
    expected = vpol_check(path)
    assert any(line.startswith("error: ") for line in expected), expected
    proc = cluster.kubectl("apply", "-f", str(path), check=False)
    assert proc.returncode != 0, f"{kind} admitted:\n{proc.stdout}"
    for line in expected:
        assert line in proc.stderr, (line, proc.stderr)


# --- admission with a real registry and cosign's signatures ---------------------------------------------------

@pytest.fixture(scope="module")
def registry() -> Iterator[RegistryProcess]:
    proc = RegistryProcess().start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def signed(registry: RegistryProcess, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A key pair, another one, and images: signed by the first (by digest and by tag), by the other, unsigned."""
    signer = Signer(tmp_path_factory.mktemp("cosign"))
    key, public = signer.key_pair("trusted")
    other, _other_public = signer.key_pair("other")
    host = registry.host
    out: dict[str, Any] = {"public": public, "signer": signer, "host": host, "key": key}
    for name in ("good", "tagged", "unsigned", "stranger", "later"):
        out[name] = f"{host}/{name}@{signer.push_image(host, name, tag='v1')}"
    for name in ("good", "tagged", "later"):
        signer.sign(out[name], key)
    signer.sign(out["stranger"], other)
    out["tag"] = f"{host}/tagged:v1"
    return out


def image_policy(name: str, public: str, host: str, failure_policy: str = "Fail") -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/v1", "kind": "ImageValidatingPolicy", "metadata": {"name": name},
            "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                             "operations": ["CREATE", "UPDATE"],
                                                             "resources": ["pods"]}]},
                     "failurePolicy": failure_policy,
                     "webhookConfiguration": {"timeoutSeconds": 6},
                     "matchImageReferences": [{"glob": f"{host}/*"}],
                     "attestors": [{"name": "trusted", "cosign": {"key": {"data": public},
                                                                  "ctlog": {"insecureIgnoreTlog": True}}}],
                     "validations": [{"expression": "images.containers.map(i, verifyImageSignatures(i, "
                                                    "[attestors.trusted])).all(n, n > 0)",
                                      "message": "images must be signed"}]}}


def pod_doc(name: str, namespace: str, image: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"containers": [{"name": "app", "image": image}]}}


def create(cluster: Any, doc: dict[str, Any]) -> Any:
    return cluster.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(doc), check=False)


def test_signed_images_are_admitted_others_denied_and_tags_pinned(
        kube: Kube, cluster: Any, namespace: str, unique_name: Callable[..., str], signed: dict[str, Any]) -> None:
    name = unique_name("ivpol", "admit")
    kube.apply(image_policy(name, signed["public"], signed["host"]))
    kube.wait_ready("ivpol", name, timeout=90)

    proc = create(cluster, pod_doc("good", namespace, signed["good"]))
    assert proc.returncode == 0, proc.stderr
    for what in ("unsigned", "stranger"):
        proc = create(cluster, pod_doc(what, namespace, signed[what]))
        assert proc.returncode != 0, f"{what} admitted"
        assert f"Policy {name} failed: images must be signed (image {signed[what]}: attestor trusted: " in \
            proc.stderr, proc.stderr
    # A tag: pinned to the digest the registry resolves, then verified.
    proc = create(cluster, pod_doc("tagged", namespace, signed["tag"]))
    assert proc.returncode == 0, proc.stderr
    image = json.loads(proc.stdout)["spec"]["containers"][0]["image"]
    assert image == f"{signed['tag']}@{signed['tagged'].split('@')[1]}"
    # A Deployment: the autogen variant checks its pod template (verifyDigest: the tag is not pinned there).
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": namespace},
                  "spec": {"selector": {"matchLabels": {"app": "web"}},
                           "template": {"metadata": {"labels": {"app": "web"}},
                                        "spec": {"containers": [{"name": "app", "image": signed["unsigned"]}]}}}}
    proc = create(cluster, deployment)
    assert proc.returncode != 0 and f"Policy {name} failed" in proc.stderr, proc.stderr
    deployment["spec"]["template"]["spec"]["containers"][0]["image"] = signed["good"]
    proc = create(cluster, deployment)
    assert proc.returncode == 0, proc.stderr


def test_a_stopped_registry_is_answered_by_the_failure_policy_within_the_timeout(
        kube: Kube, cluster: Any, namespace: str, unique_name: Callable[..., str], signed: dict[str, Any]) -> None:
    own = RegistryProcess().start()  # its own: the module's registry keeps its images for the other tests
    try:
        signer: Signer = signed["signer"]
        images = {what: f"{own.host}/{what}@{signer.push_image(own.host, what)}" for what in ("before", "later")}
        for image in images.values():
            signer.sign(image, signed["key"])
        name = unique_name("ivpol", "outage")
        kube.apply(image_policy(name, signed["public"], own.host))
        kube.wait_ready("ivpol", name, timeout=90)
        assert create(cluster, pod_doc("before", namespace, images["before"])).returncode == 0  # verified: cached
        own.stop()
        started = time.monotonic()
        proc = create(cluster, pod_doc("during", namespace, images["later"]))
        elapsed = time.monotonic() - started
        assert proc.returncode != 0 and f"Policy {name} error: " in proc.stderr, proc.stderr
        assert "connection refused" in proc.stderr
        assert elapsed < 6, elapsed
        # What was verified before the outage is still admitted (the cache), without the registry.
        assert create(cluster, pod_doc("cached", namespace, images["before"])).returncode == 0
        # The restarted registry (in memory: its images are pushed and signed again) is used again.
        own.start()
        again = f"{own.host}/again@{signer.push_image(own.host, 'again')}"
        signer.sign(again, signed["key"])
        proc = create(cluster, pod_doc("after", namespace, again))
        assert proc.returncode == 0, proc.stderr
    finally:
        own.stop()


def test_background_reports_agree_with_admission_and_the_cli_and_survive_a_restart(
        kube: Kube, cluster: Any, namespace: str, unique_name: Callable[..., str], signed: dict[str, Any],
        tmp_path: Path, operator: OperatorProcess) -> None:
    from vpol.cli.main import main

    pods = {what: pod_doc(f"old-{what}", namespace, signed[what]) for what in ("good", "unsigned", "stranger")}
    for doc in pods.values():
        assert create(cluster, doc).returncode == 0  # no policy yet: admitted
    name = unique_name("ivpol", "scan")
    policy = image_policy(name, signed["public"], signed["host"])
    policy["spec"]["validationActions"] = ["Audit"]
    kube.apply(policy)
    kube.wait_ready("ivpol", name, timeout=90)

    def scanned() -> dict[str, dict[str, Any]] | None:
        found = {}
        for what, doc in pods.items():
            mine = [r for r in report_results(cluster, "pod", doc["metadata"]["name"], namespace)
                    if r.get("policy") == name]
            if not mine:
                return None
            found[what] = mine[0]
        return found

    results = wait_for("background results for the three Pods", scanned, timeout=120)
    assert results["good"]["result"] == "pass"
    for what in ("unsigned", "stranger"):
        assert results[what]["result"] == "fail"
        assert results[what]["message"].startswith(f"images must be signed (image {signed[what]}: attestor trusted: ")
    # vpol apply on the same objects: the same results.
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(policy))
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all(list(pods.values())))
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["apply", "--policy", str(tmp_path / "policy.yaml"), "--resource", str(tmp_path / "pods.yaml"),
              "-o", "json", "--no-progress"])
    rows = {row["name"]: row for row in json.loads(out.getvalue())}
    for what, doc in pods.items():
        row = rows[doc["metadata"]["name"]]
        assert (row["result"], row["message"]) == (results[what]["result"], results[what]["message"]), what

    # A restarted operator finds the reports as it left them: its first scan waits for the image policy as for
    # the others (its results are in the same reports) and writes none of them again.
    def report_versions() -> dict[str, str]:
        items = json.loads(cluster.kubectl("get", "policyreport", "-n", namespace, "-o", "json").stdout)["items"]
        return {i["metadata"]["name"]: i["metadata"]["resourceVersion"] for i in items}

    before = report_versions()
    assert len(before) == len(pods)
    operator.stop()
    operator.start()
    wait_for("the restarted operator's first full scan",
             lambda: operator.metric_value("vpol_scan_last_success_timestamp_seconds", {}) > 0, timeout=90)
    wait_for("the image policy's background scan after the restart",
             lambda: operator.metric_value("vpol_policy_results_total", {"policy": name}) >= len(pods), timeout=60)
    time.sleep(3)
    assert operator.metric_value("vpol_report_writes_total", {}) == 0, operator.log()
    assert report_versions() == before


def test_a_runaway_policy_is_bounded_in_scans_and_at_admission(
        kube: Kube, cluster: Any, namespace: str, unique_name: Callable[..., str], signed: dict[str, Any],
        operator: OperatorProcess) -> None:
    """The kind evaluates in the bounded evaluation worker, as every other: a validation that would take gigabytes
    (no image selected, so no registry is read) is that object's `error` in the scan and an error answered by the
    failurePolicy at admission; the operator is not touched and the worker is replaced."""
    pod = pod_doc("old-hog", namespace, signed["good"])
    assert create(cluster, pod).returncode == 0
    name = unique_name("ivpol", "hog")
    policy = image_policy(name, signed["public"], "nothing.invalid", failure_policy="Ignore")
    policy["spec"]["validationActions"] = ["Audit"]
    policy["spec"]["validations"] = [{"expression": "lists.range(9000).map(x, lists.range(9000)).size() > 0",
                                      "message": "never"}]
    kube.apply(policy)
    kube.wait_ready("ivpol", name, timeout=90)

    def result() -> dict[str, Any] | None:
        return next((r for r in report_results(cluster, "pod", "old-hog", namespace) if r.get("policy") == name),
                    None)

    found = wait_for("the runaway policy's scan result", result, timeout=120)
    assert found["result"] == "error" and "memory" in found["message"], found
    # At admission (failurePolicy Ignore): the error is ignored and the Pod admitted, by a worker of the image
    # webhooks, not the serving process.
    proc = create(cluster, pod_doc("new-hog", namespace, signed["good"]))
    assert proc.returncode == 0, proc.stderr
    assert operator.proc is not None and operator.proc.poll() is None, operator.log()
    assert operator.metric_value("vpol_admission_decisions_total", {"policy": name, "decision": "error"}) >= 1


def test_a_private_registry_is_read_with_the_pull_secret_the_policy_names(
        kube: Kube, cluster: Any, namespace: str, unique_name: Callable[..., str], signed: dict[str, Any]) -> None:
    """credentials.secrets: an image pull Secret in the operator's namespace, readable by name only (the chart's
    rbac.registrySecrets; granted here as a cluster admin would)."""
    import base64

    private = RegistryProcess(user="puller", password="s3cret").start()
    secret_name = unique_name("pull")
    try:
        signer: Signer = signed["signer"]
        signer.login(private.host, "puller", "s3cret")
        image = f"{private.host}/app@{signer.push_image(private.host, 'app')}"
        signer.sign(image, signed["key"])
        config = json.dumps({"auths": {private.host: {"auth": base64.b64encode(b"puller:s3cret").decode()}}})
        kube.apply({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
                    "metadata": {"name": secret_name, "namespace": "vpol-system"},
                    "data": {".dockerconfigjson": base64.b64encode(config.encode()).decode()}})
        kube.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                    "metadata": {"name": secret_name, "namespace": "vpol-system"},
                    "rules": [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": [secret_name],
                               "verbs": ["get"]}]},
                   {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                    "metadata": {"name": secret_name, "namespace": "vpol-system"},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": secret_name},
                    "subjects": [{"kind": "ServiceAccount", "name": "vpol", "namespace": "vpol-system"}]})
        anonymous = image_policy(unique_name("ivpol", "anon"), signed["public"], private.host)
        kube.apply(anonymous)
        kube.wait_ready("ivpol", anonymous["metadata"]["name"], timeout=90)
        proc = create(cluster, pod_doc("anonymous", namespace, image))
        assert proc.returncode != 0 and "unauthorized" in proc.stderr.lower(), proc.stderr
        kube.delete("ivpol", anonymous["metadata"]["name"])
        with_secret = image_policy(unique_name("ivpol", "creds"), signed["public"], private.host)
        with_secret["spec"]["credentials"] = {"secrets": [secret_name]}
        kube.apply(with_secret)
        kube.wait_ready("ivpol", with_secret["metadata"]["name"], timeout=90)
        # Admitted once the deleted anonymous policy is out of every replica's webhook too.
        attempts = iter(range(1000))
        wait_for("a Pod admitted with the pull Secret", lambda: create(cluster, pod_doc(
            f"with-secret-{next(attempts)}", namespace, image)).returncode == 0 or None, timeout=60)
    finally:
        private.stop()
