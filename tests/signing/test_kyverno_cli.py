"""vpol side by side with Kyverno's own CLI (`kyverno apply`, built from its module by bench/kyverno/build) on
ImageValidatingPolicies, against the same registry and the same signatures and attestations cosign made: every
(policy, resource) result must be the same, and vpol's message Kyverno's (vpol may add, after it, why each
attestor did not verify: docs/kyverno-compatibility.md)."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from vpol.cli.main import main

from tests.e2e.conftest import go_built
from tests.signing.tools import RegistryProcess, Signer

REPO = Path(__file__).resolve().parents[2]
SIGNED = "images.containers.map(i, verifyImageSignatures(i, [attestors.trusted])).all(n, n > 0)"


def kyverno() -> str:
    return go_built(REPO / "bench" / "kyverno" / "build", "Kyverno's CLI", timeout=3000, args=["cli/kubectl-kyverno"])


def ivpol(name: str, public: str, host: str, *, validations: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "policies.kyverno.io/v1", "kind": "ImageValidatingPolicy", "metadata": {"name": name},
            "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                             "operations": ["CREATE"], "resources": ["pods"]}]},
                     "matchImageReferences": [{"glob": f"{host}/*"}],
                     "attestors": [{"name": "trusted", "cosign": {"key": {"data": public},
                                                                  "ctlog": {"insecureIgnoreTlog": True}}}],
                     "validations": validations, **spec}}


def pod(name: str, *images: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": f"c{i}", "image": image} for i, image in enumerate(images)]}}


@pytest.fixture(scope="module")
def case(registry: RegistryProcess, signer: Signer, keys: dict[str, tuple[Path, str]]) -> dict[str, Any]:
    host = registry.host
    trusted, other = keys["trusted"][0], keys["other"][0]
    images: dict[str, str] = {}
    for name, bundle in (("bundle", True), ("legacy", False)):
        image = f"{host}/kc-{name}@{signer.push_image(host, f'kc-{name}')}"
        signer.sign(image, trusted, bundle=bundle)
        signer.attest(image, trusted, {"builder": {"id": "ci"}}, "slsaprovenance", bundle=bundle)
        images[name] = image
    images["unsigned"] = f"{host}/kc-unsigned@{signer.push_image(host, 'kc-unsigned')}"
    images["stranger"] = f"{host}/kc-stranger@{signer.push_image(host, 'kc-stranger')}"
    signer.sign(images["stranger"], other)
    images["tag"] = images["bundle"].split("@")[0] + ":v1"
    public = keys["trusted"][1]
    # Notary: a signed image, one with a signed SBOM referrer, one with an unsigned SBOM.
    cert = signer.notation_key("kc-notary")
    for name in ("n-signed", "n-sbom", "n-loose"):
        images[name] = f"{host}/kc-{name}@{signer.push_image(host, f'kc-{name}')}"
    signer.notation_sign(images["n-signed"], "kc-notary")
    for name in ("n-sbom", "n-loose"):
        repository, digest = images[name].split("/", 1)[1].split("@")
        sbom = signer.push_referrer(host, repository, digest, "application/vnd.cyclonedx+json",
                                    {"bomFormat": "CycloneDX", "specVersion": "1.5"})
        if name == "n-sbom":
            signer.notation_sign(f"{host}/{repository}@{sbom}", "kc-notary")
    notary = [{"name": "notary", "notary": {"certs": {"value": cert}}}]
    policies = [
        ivpol("signed", public, host, validations=[{"expression": SIGNED, "message": "images must be signed"}]),
        ivpol("provenance", public, host,
              attestations=[{"name": "slsa", "intoto": {"type": "slsaprovenance"}}],
              validations=[{"expression": "images.containers.all(i, verifyAttestationSignatures(i, attestations.slsa,"
                                          " [attestors.trusted]) > 0)", "message": "no provenance"},
                           {"expression": "images.containers.all(i, extractPayload(i, attestations.slsa).predicate"
                                          ".builder.id == 'ci')",
                            "messageExpression": "'built by ' + string(size(images.containers)) + ' others'"}]),
        ivpol("looks-only", public, host, validations=[{"expression": "size(images.containers) >= 0"}]),
        ivpol("tags-allowed", public, host, validationConfigurations={"verifyDigest": False, "required": False},
              validations=[{"expression": SIGNED, "message": "tags too must be signed"}]),
        ivpol("by-expression", public, host,
              matchImageReferences=[{"expression": f"ref.startsWith('{host}/kc-b')"}],
              validations=[{"expression": SIGNED, "message": "selected images must be signed"}]),
        ivpol("data", public, host, validations=[
            {"expression": SIGNED, "message": "images must be signed"},
            {"expression": "images.containers.all(i, getImageData(i).Digest == i.split('@')[1] && "
                           "getImageData(i).ImageReference.Registry == '" + host + "' && "
                           "getImageData(i).Manifest.SchemaVersion == 2 && "
                           "getImageData(i).Manifest.Layers[0].Digest.Algorithm == 'sha256')",
             "message": "unexpected image data"}]),
        ivpol("two-attestors", public, host,
              attestors=[{"name": "trusted", "cosign": {"key": {"data": public}, "ctlog": {"insecureIgnoreTlog": True}}},
                         {"name": "stranger", "cosign": {"key": {"data": keys["other"][1]},
                                                         "ctlog": {"insecureIgnoreTlog": True}}}],
              validations=[{"expression": "images.containers.all(i, verifyImageSignatures(i, [attestors.trusted, "
                                          "attestors.stranger]) == 2)", "messageExpression": "'need both, got ' + "
                            "images.containers.map(i, string(verifyImageSignatures(i, [attestors.trusted, "
                            "attestors.stranger]))).join(',')"}]),
        ivpol("conditions", public, host,
              matchConditions=[{"name": "labelled", "expression": "has(object.metadata.labels) && "
                                "'check' in object.metadata.labels"}],
              validations=[{"expression": SIGNED, "message": "labelled Pods must be signed"}]),
        ivpol("extracted", public, host,
              images=[{"name": "first", "expression": "[object.spec.containers[0].image]"}],
              validations=[{"expression": "images.first.all(i, verifyImageSignatures(i, [attestors.trusted]) > 0)",
                            "message": "the first image must be signed"}],
              auditAnnotations=[{"key": "count", "valueExpression": "string(size(images.first))"}]),
        ivpol("notary-signed", public, host, attestors=notary,
              validations=[{"expression": "images.containers.all(i, verifyImageSignatures(i, [attestors.notary]) "
                                          "> 0)", "message": "not signed with Notary"}]),
        ivpol("notary-sbom", public, host, attestors=notary,
              attestations=[{"name": "sbom", "referrer": {"type": "application/vnd.cyclonedx+json"}}],
              validations=[{"expression": "images.containers.all(i, verifyAttestationSignatures(i, "
                                          "attestations.sbom, [attestors.notary]) > 0)", "message": "no signed SBOM"},
                           {"expression": "images.containers.all(i, extractPayload(i, attestations.sbom).bomFormat "
                                          "== 'CycloneDX')", "message": "not CycloneDX"}]),
    ]
    labelled = pod("labelled", images["unsigned"])
    labelled["metadata"]["labels"] = {"check": "yes"}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "default"},
                  "spec": {"selector": {"matchLabels": {"app": "web"}},
                           "template": {"metadata": {"labels": {"app": "web"}},
                                        # One image: with several failing `required`, which one Kyverno names
                                        # depends on Go's map order (vpol names the first in extractor order).
                                        "spec": {"containers": [{"name": "c", "image": images["unsigned"]}]}}}}
    cronjob = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly", "namespace": "default"},
               "spec": {"schedule": "@daily", "jobTemplate": {"spec": {"template": {"spec": {
                   "restartPolicy": "Never", "containers": [{"name": "c", "image": images["legacy"]}]}}}}}}
    resources = [pod("bundle", images["bundle"]), pod("legacy", images["legacy"]), pod("unsigned", images["unsigned"]),
                 pod("stranger", images["stranger"]), pod("tag", images["tag"]),
                 pod("mixed", images["bundle"], images["unsigned"]), pod("elsewhere", "registry.example/x:1"),
                 labelled, deployment, cronjob, pod("n-signed", images["n-signed"]), pod("n-sbom", images["n-sbom"]),
                 pod("n-loose", images["n-loose"])]
    return {"policies": policies, "resources": resources}


def kyverno_results(tmp: Path, policies: list[dict[str, Any]], resources: list[dict[str, Any]]
                    ) -> dict[tuple[str, str], tuple[str, str]]:
    (tmp / "policies.yaml").write_text(yaml.safe_dump_all(policies))
    (tmp / "resources.yaml").write_text(yaml.safe_dump_all(resources))
    proc = subprocess.run([kyverno(), "apply", str(tmp / "policies.yaml"), "--resource", str(tmp / "resources.yaml"),
                           "--policy-report", "--output-format", "json"], capture_output=True, text=True,
                          timeout=300)
    report = json.loads(proc.stdout[proc.stdout.index("{"):])
    return {(r["policy"], r["resources"][0]["name"]): (r["result"], r.get("message", ""))
            for r in report.get("results") or []}


def vpol_results(tmp: Path) -> dict[tuple[str, str], tuple[str, str]]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["apply", "--policy", str(tmp / "policies.yaml"), "--resource", str(tmp / "resources.yaml"), "-o", "json",
              "--no-progress"])
    return {(row["policy"], row["name"]): (row["result"], row["message"]) for row in json.loads(out.getvalue())}


def test_the_same_results_as_kyvernos_cli(case: dict[str, Any], tmp_path: Path) -> None:
    theirs = kyverno_results(tmp_path, case["policies"], case["resources"])
    ours = vpol_results(tmp_path)
    assert len(theirs) >= len(case["policies"]) * (len(case["resources"]) - 1)  # nearly every pair decided
    assert set(ours) == set(theirs), (sorted(set(ours) - set(theirs)), sorted(set(theirs) - set(ours)))
    differences = []
    for key, (result, message) in sorted(theirs.items()):
        mine, my_message = ours[key]
        same_message = my_message == message or my_message.startswith(message + " (")
        if mine != result or not same_message:
            differences.append(f"{key}: kyverno {result} {message!r}, vpol {mine} {my_message!r}")
    assert not differences, "\n".join(differences)
    # The cases are not all passes: each outcome kind is exercised.
    assert {r for r, _m in theirs.values()} >= {"pass", "fail"}
