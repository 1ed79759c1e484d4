"""ImageValidatingPolicy and NamespacedImageValidatingPolicy in the pure core: parsing (defaults, refusals and
warnings with their field paths), compiling with Kyverno's environment for the kind (images, attestors,
attestations and the imageverify functions there and nowhere else; no exceptions, no x509), result types, the
matchImageReferences expression environment (``ref`` alone), and what `vpol check`, `vpol apply` and apply-time
validation say of the kinds (docs/internals/image-validating.md)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from vpol.cli.main import main
from vpol.model.documents import parse_documents
from vpol.policies.image_validating.compile import compile_image_validating_policy
from vpol.policies.image_validating.model import (
    IMAGE_VALIDATING_KIND,
    NAMESPACED_IMAGE_VALIDATING_KIND,
    parse_image_validating_policy,
)
from vpol.policies.policy_validation import is_validated_document, validate_document
from vpol.policies.validating.compile import compile_policy
from vpol.policies.validating.model import parse_policy

KEY = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----\n"
SPEC: dict[str, Any] = {
    "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                            "resources": ["pods"]}]},
    "matchImageReferences": [{"glob": "registry.local/*"}],
    "attestors": [{"name": "signed", "cosign": {"key": {"data": KEY}, "ctlog": {"insecureIgnoreTlog": True}}}],
    "attestations": [{"name": "provenance", "intoto": {"type": "https://slsa.dev/provenance/v1"}}],
    "validations": [{"expression": "images.containers.map(i, verifyImageSignatures(i, [attestors.signed]))"
                                   ".all(n, n > 0)",
                     "message": "not signed"}],
}


def document(spec: dict[str, Any], *, kind: str = IMAGE_VALIDATING_KIND, namespace: str | None = None,
             api_version: str = "policies.kyverno.io/v1") -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "images"}
    if namespace:
        metadata["namespace"] = namespace
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata, "spec": spec}


def with_(**changes: Any) -> dict[str, Any]:
    spec = copy.deepcopy(SPEC)
    spec.update(changes)
    return spec


def problems_of(spec: dict[str, Any], **kw: Any) -> list[tuple[str, str, str]]:
    """(severity, path, message) of every parse and compile problem."""
    policy, problems = parse_image_validating_policy(document(spec, **kw))
    found = list(problems)
    if policy is not None:
        found += compile_image_validating_policy(policy).problems
    return [(p.severity, p.path, p.message) for p in found]


def errors_of(spec: dict[str, Any], **kw: Any) -> list[tuple[str, str]]:
    return [(path, message) for severity, path, message in problems_of(spec, **kw) if severity == "error"]


# --- parsing ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("api_version", ["policies.kyverno.io/v1", "policies.kyverno.io/v1beta1",
                                         "policies.kyverno.io/v1alpha1"])
def test_defaults_and_versions(api_version: str) -> None:
    policy, problems = parse_image_validating_policy(document(SPEC, api_version=api_version))
    assert policy is not None and not [p for p in problems if p.severity == "error"]
    s = policy.spec
    assert (s.validation_configurations.mutate_digest, s.validation_configurations.verify_digest,
            s.validation_configurations.required) == (True, True, True)
    assert s.failure_policy == "Fail" and s.validation_actions == ("Deny",)
    assert s.evaluation.admission_enabled and s.evaluation.background_enabled
    [attestor] = s.attestors
    assert attestor.cosign is not None and attestor.cosign.key_data == KEY and attestor.cosign.insecure_ignore_tlog
    assert [(a.name, a.intoto_type) for a in s.attestations] == [("provenance", "https://slsa.dev/provenance/v1")]


def test_the_namespaced_kind_is_served_at_v1_and_v1beta1_only() -> None:
    ok, _ = parse_image_validating_policy(document(SPEC, kind=NAMESPACED_IMAGE_VALIDATING_KIND, namespace="team"))
    assert ok is not None and ok.key == "team/images"
    bad, problems = parse_image_validating_policy(document(SPEC, kind=NAMESPACED_IMAGE_VALIDATING_KIND,
                                                           namespace="team",
                                                           api_version="policies.kyverno.io/v1alpha1"))
    assert bad is None and problems


def test_configurations_read_as_written() -> None:
    policy, _ = parse_image_validating_policy(document(with_(validationConfigurations={
        "mutateDigest": False, "verifyDigest": False, "required": False})))
    assert policy is not None
    vc = policy.spec.validation_configurations
    assert (vc.mutate_digest, vc.verify_digest, vc.required) == (False, False, False)


@pytest.mark.parametrize(("change", "path", "message"), [
    ({"attestors": None}, "spec.attestors", "required field is missing"),
    ({"attestors": [{"name": "a"}]}, "spec.attestors[0]", "exactly one of cosign or notary must be set"),
    ({"attestors": [{"name": "a", "cosign": {"key": {"data": KEY}}, "notary": {}}]}, "spec.attestors[0]",
     "exactly one of cosign or notary must be set"),
    ({"matchImageReferences": [{}]}, "spec.matchImageReferences[0]", "either glob or expression must be set"),
    ({"matchImageReferences": [{"glob": "registry.local/[a"}]}, "spec.matchImageReferences[0].glob",
     "invalid glob 'registry.local/[a': unclosed character class ["),
    ({"attestors": [{"name": "n", "notary": {"certs": {"value": "x", "expression": "'y'"}}}]},
     "spec.attestors[0].notary.certs", "exactly one of value or expression must be set"),
    ({"credentials": {"providers": ["docker"]}}, "spec.credentials.providers[0]",
     'unsupported value "docker": must be one of default, amazon, azure, google, github'),
    ({"attestors": [{"name": "a", "cosign": {"key": {"data": KEY, "hashAlgorithm": "md5"}}}]},
     "spec.attestors[0].cosign.key.hashAlgorithm",
     'unsupported value "md5": must be one of , sha224, sha256, sha384, sha512'),
    ({"attestors": [{"name": "a", "cosign": {"keyless": {"roots": "x"}}}]}, "spec.attestors[0].cosign.keyless.identities",
     "required field is missing"),
])
def test_refusals_name_the_field(change: dict[str, Any], path: str, message: str) -> None:
    spec = with_(**change)
    if change.get("attestors", 0) is None:
        del spec["attestors"]
    assert (path, message) in errors_of(spec)


@pytest.mark.parametrize(("attestor", "fragment"), [
    ({"name": "a", "cosign": {"ctlog": {"insecureIgnoreTlog": True}}}, "with none every verification"),
    ({"name": "a", "cosign": {"key": {"data": KEY}, "keyless": {"identities": [{"subject": "s"}]}}},
     "with key and keyless every verification"),
])
def test_an_attestor_that_can_never_verify_is_warned_about(attestor: dict[str, Any], fragment: str) -> None:
    found = problems_of(with_(attestors=[attestor]))
    assert any(sev == "warning" and path == "spec.attestors[0].cosign" and fragment in msg
               for sev, path, msg in found), found
    assert not [f for f in found if f[0] == "error"]


def test_duplicate_attestor_names_warn_that_only_the_last_counts() -> None:
    twice = SPEC["attestors"] * 2
    found = problems_of(with_(attestors=twice))
    assert ("warning", "spec.attestors[1].name",
            'duplicate name "signed" (first at spec.attestors[0]): only the last one is used') in found


def test_validation_reasons_are_free_text_as_in_kyverno() -> None:
    spec = with_(validations=[{**SPEC["validations"][0], "reason": "NotSigned"}])
    assert errors_of(spec) == []
    vp = {"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy", "metadata": {"name": "p"},
          "spec": {"matchConstraints": SPEC["matchConstraints"],
                   "validations": [{"expression": "true", "reason": "NotSigned"}]}}
    assert parse_policy(vp)[0] is None  # a ValidatingPolicy's reason stays one of the API server's


# --- compiling -------------------------------------------------------------------------------------------------

def test_a_complete_policy_compiles() -> None:
    spec = with_(
        matchImageReferences=[{"glob": "registry.local/*"}, {"expression": "ref.startsWith('ghcr.io/')"}],
        images=[{"name": "all", "expression": "object.spec.containers.map(c, c.image)"}],
        variables=[{"name": "prefix", "expression": "'registry.local/'"}],
        attestors=[*SPEC["attestors"], {"name": "notary", "notary": {"certs": {"expression": "variables.prefix"}}}],
        validations=[
            {"expression": "images.all.all(i, verifyAttestationSignatures(i, attestations.provenance, "
                           "[attestors.signed]) > 0)"},
            {"expression": "images.all.all(i, extractPayload(i, attestations.provenance).predicate.builder.id "
                           "== 'ci')", "messageExpression": "'built elsewhere: ' + images.all[0]"},
            {"expression": "images.all.all(i, getImageData(i).digest.startsWith('sha256:'))"},
        ],
        auditAnnotations=[{"key": "images", "valueExpression": "string(size(images.all))"}],
    )
    policy, _ = parse_image_validating_policy(document(spec))
    assert policy is not None
    compiled = compile_image_validating_policy(policy)
    assert compiled.ok, compiled.problems
    assert compiled.image_references[0] == "registry.local/*"
    assert [name for name, _ in compiled.extractors] == ["all"]
    assert [(i, sub) for i, sub, _ in compiled.attestors] == [(1, "notary.certs.expression")]
    assert len(compiled.validations) == 3 and len(compiled.audit_annotations) == 1


@pytest.mark.parametrize(("change", "path", "fragment"), [
    ({"validations": [{"expression": "images.containers"}]}, "spec.validations[0].expression",
     "expression must evaluate to bool, not list(string)"),
    ({"images": [{"name": "x", "expression": "object.metadata.name == 'a'"}]}, "spec.images[0].expression",
     "expression must evaluate to a list of image references, not bool"),
    ({"images": [{"name": "x", "expression": "[1, 2]"}]}, "spec.images[0].expression",
     "expression must evaluate to a list of image references, not list(int)"),
    ({"matchImageReferences": [{"expression": "ref.size()"}]}, "spec.matchImageReferences[0].expression",
     "expression must evaluate to bool, not int"),
    # The references' environment has only ref, as Kyverno's.
    ({"matchImageReferences": [{"expression": "object.metadata.name == ref"}]},
     "spec.matchImageReferences[0].expression", "undeclared reference to 'object"),
    ({"validations": [{"expression": "exceptions.size() == 0"}]}, "spec.validations[0].expression",
     "undeclared reference to 'exceptions'"),
    ({"validations": [{"expression": "x509.decode('x') != null"}]}, "spec.validations[0].expression",
     "undeclared reference to 'x509'"),
    ({"validations": [{"expression": "verifyImageSignatures('a', 'signed') > 0"}]},
     "spec.validations[0].expression", "found no matching overload for 'verifyImageSignatures'"),
    ({"attestors": [{"name": "a", "cosign": {"key": {"expression": "variables.missing"}}}]},
     "spec.attestors[0].cosign.key.expression", "undeclared variable 'missing'"),
])
def test_compile_errors_name_the_field(change: dict[str, Any], path: str, fragment: str) -> None:
    found = errors_of(with_(**change))
    assert any(p == path and fragment in m for p, m in found), found


def test_a_non_string_attestor_expression_is_a_warning() -> None:
    found = problems_of(with_(attestors=[{"name": "a", "cosign": {"key": {"expression": "1 + 1"}}}]))
    assert ("warning", "spec.attestors[0].cosign.key.expression",
            "expression must evaluate to string, not int: every verification with this attestor fails") in found


def test_match_conditions_cannot_read_variables() -> None:
    found = errors_of(with_(variables=[{"name": "v", "expression": "true"}],
                            matchConditions=[{"name": "c", "expression": "variables.v"}]))
    assert any(p == "spec.matchConditions[0].expression" and "an ImageValidatingPolicy's matchConditions cannot "
               "read variables" in m for p, m in found), found


def test_the_image_functions_exist_only_for_this_kind() -> None:
    vp = {"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy", "metadata": {"name": "p"},
          "spec": {"matchConstraints": SPEC["matchConstraints"],
                   "validations": [{"expression": "verifyImageSignatures('a', []) > 0"},
                                   {"expression": "size(images) > 0"}]}}
    policy, _ = parse_policy(vp)
    assert policy is not None
    messages = [p.message for p in compile_policy(policy).problems]
    assert any("undeclared reference to 'verifyImageSignatures'" in m for m in messages), messages
    assert any("undeclared reference to 'images'" in m for m in messages), messages


def test_a_namespaced_policy_may_not_use_global_context_or_http() -> None:
    spec = with_(validations=[{"expression": "globalContext.Get('x', '') != null"}])
    found = errors_of(spec, kind=NAMESPACED_IMAGE_VALIDATING_KIND, namespace="team")
    assert ("spec.validations[0].expression", "globalContext.* is not allowed in namespaced policies") in found
    assert not errors_of(spec)


def test_json_mode_has_no_request_or_variables() -> None:
    spec = with_(evaluation={"mode": "JSON"}, images=[{"name": "x", "expression": "[object.image]"}],
                 validations=[{"expression": "request.operation == 'CREATE'"}])
    assert any("undeclared reference to 'request" in m for _p, m in errors_of(spec))


# --- apply-time validation and the CLI -------------------------------------------------------------------------

def test_apply_time_validation_covers_the_kinds() -> None:
    good, bad = document(SPEC), document(with_(validations=[{"expression": "1"}]))
    assert is_validated_document(good)
    assert validate_document(good).errors == []
    [error] = validate_document(bad).errors
    assert error.path == "spec.validations[0].expression" and "must evaluate to bool, not int" in error.message


def test_vpol_check_locates_problems_in_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "ivpol.yaml"
    bad = document(with_(validations=[{"expression": "images.containers.size() > 'x'"}]))
    path.write_text(yaml.safe_dump(bad, sort_keys=False))
    assert main(["check", str(path)]) == 1
    out = capsys.readouterr().out
    [doc] = parse_documents(path.read_text(), str(path))
    line = doc.position("spec.validations[0].expression")
    assert line is not None
    assert f"{path}:{line.line}:" in out and "spec.validations[0].expression at 1:" in out
    assert "1 policy checked: 0 valid, 1 invalid" in out
    path.write_text(yaml.safe_dump(document(SPEC), sort_keys=False))
    assert main(["check", str(path)]) == 0


def test_vpol_test_runs_image_policy_tests(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Kyverno's test format for the kind: a tag-only image fails verifyDigest before any registry is read; a Pod
    with no image matchImageReferences selects passes; a wrong expectation disagrees; a resource the policy does not
    apply to has no result, so even ``skip`` disagrees (Kyverno's CLI: "Not found", where the other kinds give
    skip)."""
    (tmp_path / "ivpol.yaml").write_text(yaml.safe_dump(document(SPEC)))
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all([
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
         "spec": {"containers": [{"name": "c", "image": image}]}}
        for name, image in (("tagged", "registry.local/app:v1"), ("other", "docker.io/library/nginx:1"))]
        + [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "default"}}]))
    (tmp_path / "kyverno-test.yaml").write_text(yaml.safe_dump({
        "apiVersion": "cli.kyverno.io/v1alpha1", "kind": "Test", "metadata": {"name": "images"},
        "policies": ["ivpol.yaml"], "resources": ["pods.yaml"],
        "results": [{"policy": "images", "resources": ["tagged"], "kind": "Pod", "result": "fail",
                     "isImageValidatingPolicy": True},
                    {"policy": "images", "resources": ["other"], "kind": "Pod", "result": "pass",
                     "isImageValidatingPolicy": True}]}))
    assert main(["test", str(tmp_path)]) == 0, capsys.readouterr().out
    assert "2 agreed, 0 disagreed" in capsys.readouterr().out
    expectations = yaml.safe_load((tmp_path / "kyverno-test.yaml").read_text())
    expectations["results"][0]["result"] = "pass"
    (tmp_path / "kyverno-test.yaml").write_text(yaml.safe_dump(expectations))
    assert main(["test", str(tmp_path)]) == 1
    assert "1 agreed, 1 disagreed" in capsys.readouterr().out
    expectations["results"][0] = {"policy": "images", "resources": ["settings"], "kind": "ConfigMap",
                                   "result": "skip", "isImageValidatingPolicy": True}
    (tmp_path / "kyverno-test.yaml").write_text(yaml.safe_dump(expectations))
    assert main(["test", "-v", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "1 agreed, 1 disagreed" in out and "no result: the policy does not apply" in out, out


@pytest.mark.parametrize(("cosign", "reason"), [
    ({"key": {"data": KEY}}, "needs Rekor and Sigstore's TUF root"),
    ({"key": {"kms": "gcpkms://projects/p/keys/k"}, "ctlog": {"insecureIgnoreTlog": True}}, "KMS keys"),
    ({"keyless": {"identities": [{"subject": "s", "issuer": "i"}]}}, "keyless verification"),
])
def test_attestors_vpol_cannot_verify_are_said_beforehand(cosign: dict[str, Any], reason: str) -> None:
    found = problems_of(with_(attestors=[{"name": "a", "cosign": cosign}]))
    assert any(sev == "warning" and path == "spec.attestors[0]" and "every verification with this attestor fails"
               in msg and reason in msg for sev, path, msg in found), found
    assert not problems_of(SPEC)  # the key attestor with insecureIgnoreTlog: verifiable, no warning
