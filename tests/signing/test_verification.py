"""ImageValidatingPolicies evaluated against a real registry, on signatures and attestations cosign v3.1.2 made
(tests/signing/tools.py): Sigstore bundles (OCI 1.1 referrers, and the referrers tag schema of a registry without
the API) and the legacy .sig/.att layout, keys that signed and keys that did not, in-toto predicates deciding
through extractPayload, annotations, token authentication, the verification cache, verifyDigest and required, and
a registry that stops. Wherever cosign itself can say whether a signature verifies, vpol is compared with it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from vpol.engine.image_verification import Outcomes, VerificationCache
from vpol.engine.subjects import subject_for
from vpol.oci.registry import Credentials, RegistryClient
from vpol.policies.image_validating.engine import ImageOutcome, ImagePolicyEngine, apply_required
from vpol.policies.image_validating.model import parse_image_validating_policy

from tests.signing.tools import RegistryProcess, Signer

SIGNED = "images.containers.map(i, verifyImageSignatures(i, [attestors.trusted])).all(n, n > 0)"


def policy(public_key: str, host: str, *, validations: list[dict[str, Any]] | None = None,
           attestations: list[dict[str, Any]] | None = None, annotations: dict[str, str] | None = None,
           configurations: dict[str, bool] | None = None, name: str = "signed") -> ImagePolicyEngine:
    cosign: dict[str, Any] = {"key": {"data": public_key}, "ctlog": {"insecureIgnoreTlog": True}}
    if annotations:
        cosign["annotations"] = annotations
    spec: dict[str, Any] = {
        "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                                "resources": ["pods"]}]},
        "matchImageReferences": [{"glob": f"{host}/*"}],
        "attestors": [{"name": "trusted", "cosign": cosign}],
        "attestations": attestations or [],
        "validations": validations or [{"expression": SIGNED, "message": "images must be signed"}],
    }
    if configurations is not None:
        spec["validationConfigurations"] = configurations
    parsed, problems = parse_image_validating_policy({"apiVersion": "policies.kyverno.io/v1",
                                                      "kind": "ImageValidatingPolicy", "metadata": {"name": name},
                                                      "spec": spec})
    assert parsed is not None, problems
    engine = ImagePolicyEngine(parsed)
    assert engine.ok, engine.compiled.problems
    return engine


def pod(*images: str) -> Any:
    return subject_for({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
                        "spec": {"containers": [{"name": f"c{i}", "image": image} for i, image in enumerate(images)]}})


def run(engines: list[ImagePolicyEngine], *images: str, client: RegistryClient | None = None,
        cache: VerificationCache | None = None) -> list[ImageOutcome]:
    verified = Outcomes()
    loaded: dict[str, Any] = {}
    outcomes = [o for e in engines if (o := e.evaluate(pod(*images), registry=client or RegistryClient(),
                                                       outcomes=verified, cache=cache, loaded=loaded)) is not None]
    apply_required(outcomes, verified)
    return outcomes


def result(engine: ImagePolicyEngine, *images: str, **kw: Any) -> tuple[str, str]:
    [outcome] = run([engine], *images, **kw)
    return outcome.result.result, outcome.result.message


@pytest.fixture(scope="module")
def images(registry: RegistryProcess, signer: Signer, keys: dict[str, tuple[Path, str]]) -> dict[str, str]:
    """Images by what was done to them, each as ``host/repo@digest``."""
    out: dict[str, str] = {}
    host = registry.host
    trusted, other = keys["trusted"][0], keys["other"][0]
    for name, bundle in (("bundle", True), ("legacy", False)):
        image = f"{host}/app-{name}@{signer.push_image(host, f'app-{name}')}"
        signer.sign(image, trusted, bundle=bundle, annotations={"team": "payments"})
        signer.attest(image, trusted, {"builder": {"id": "https://ci.example/builder"}}, "slsaprovenance",
                      bundle=bundle)
        signer.attest(image, trusted, {"scanner": "grype", "critical": 0}, "https://example.com/scan/v1",
                      bundle=bundle)
        out[name] = image
    out["unsigned"] = f"{host}/unsigned@{signer.push_image(host, 'unsigned')}"
    out["other-key"] = f"{host}/other@{signer.push_image(host, 'other')}"
    signer.sign(out["other-key"], other)
    return out


@pytest.mark.parametrize("layout", ["bundle", "legacy"])
def test_a_signature_verifies_as_cosign_says(layout: str, images: dict[str, str], registry: RegistryProcess,
                                             signer: Signer, keys: dict[str, tuple[Path, str]]) -> None:
    public = keys["trusted"][1]
    assert signer.verify(images[layout], public)
    assert result(policy(public, registry.host), images[layout]) == ("pass", "success")


@pytest.mark.parametrize("what", ["unsigned", "other-key"])
def test_unsigned_or_another_keys_image_is_refused_naming_image_and_attestor(
        what: str, images: dict[str, str], registry: RegistryProcess, signer: Signer,
        keys: dict[str, tuple[Path, str]]) -> None:
    public = keys["trusted"][1]
    assert not signer.verify(images[what], public)
    outcome, message = result(policy(public, registry.host), images[what])
    assert outcome == "fail"
    assert message.startswith("images must be signed (")
    assert f"image {images[what]}: attestor trusted: " in message
    if what == "unsigned":
        assert "no signatures found" in message


def test_a_tag_without_digest_fails_under_verify_digest(images: dict[str, str], registry: RegistryProcess,
                                                        keys: dict[str, tuple[Path, str]]) -> None:
    tagged = images["bundle"].split("@")[0] + ":v1"
    assert result(policy(keys["trusted"][1], registry.host), tagged) == (
        "fail", f"image {tagged} does not have a digest")
    loose = policy(keys["trusted"][1], registry.host, configurations={"verifyDigest": False})
    assert result(loose, tagged) == ("pass", "success")  # the tag resolves to the signed digest


def test_attestations_are_verified_and_their_predicates_decide(
        images: dict[str, str], registry: RegistryProcess, keys: dict[str, tuple[Path, str]]) -> None:
    public = keys["trusted"][1]
    attestations = [{"name": "provenance", "intoto": {"type": "https://slsa.dev/provenance/v0.2"}},
                    {"name": "scan", "intoto": {"type": "https://example.com/scan/v1"}},
                    {"name": "short", "intoto": {"type": "slsaprovenance"}}]

    def check(expression: str, layout: str = "bundle") -> tuple[str, str]:
        engine = policy(public, registry.host, attestations=attestations, validations=[
            {"expression": f"images.containers.all(i, {expression})", "message": "attestation check failed"}])
        return result(engine, images[layout])

    verified = "verifyAttestationSignatures(i, attestations.{0}, [attestors.trusted]) > 0"
    assert check(verified.format("provenance") + " && extractPayload(i, attestations.provenance).predicate"
                 ".builder.id == 'https://ci.example/builder'") == ("pass", "success")
    assert check(verified.format("scan") + " && extractPayload(i, attestations.scan).predicate.critical == 0") == \
        ("pass", "success")
    assert check(verified.format("scan") + " && extractPayload(i, attestations.scan).predicate.critical > 0")[0] \
        == "fail"
    # The payload is read only once verified, as in Kyverno.
    outcome, message = check("extractPayload(i, attestations.scan).predicate.critical == 0")
    assert outcome == "error" and "cannot be fetch before verifying intoto attestation" in message
    # Kyverno's quirks, reproduced (the differential with its CLI shows them, tests/signing/test_kyverno_cli.py):
    # a cosign short name verifies, but its statement is never found by extractPayload;
    assert check(verified.format("short"))[0] == "pass"
    outcome, message = check(verified.format("short") + " && extractPayload(i, attestations.short) != null")
    assert outcome == "error" and "cannot be fetch before verifying intoto attestation" in message
    # and legacy (.att) attestations need a transparency-log entry offline attestations never have.
    outcome, message = check(verified.format("provenance"), "legacy")
    assert outcome == "fail" and "cosign bundle verification failed" in message


def test_an_attestation_of_another_predicate_type_is_not_found(images: dict[str, str], registry: RegistryProcess,
                                                                keys: dict[str, tuple[Path, str]]) -> None:
    engine = policy(keys["trusted"][1], registry.host,
                    attestations=[{"name": "sbom", "intoto": {"type": "cyclonedx"}}],
                    validations=[{"expression": "images.containers.all(i, verifyAttestationSignatures(i, "
                                                "attestations.sbom, [attestors.trusted]) > 0)", "message": "no SBOM"}])
    outcome, message = result(engine, images["bundle"])
    assert outcome == "fail" and "required predicate type cyclonedx not found" in message


@pytest.mark.parametrize("layout", ["bundle", "legacy"])
def test_annotations_written_with_cosign_a_are_required(layout: str, images: dict[str, str],
                                                        registry: RegistryProcess,
                                                        keys: dict[str, tuple[Path, str]]) -> None:
    """cosign's ``-a`` writes into the signed payload (simple signing ``optional``, in-toto subject annotations),
    where vpol reads them; Kyverno reads the layer's annotations only (docs/kyverno-compatibility.md)."""
    public = keys["trusted"][1]
    assert result(policy(public, registry.host, annotations={"team": "payments"}), images[layout]) == \
        ("pass", "success")
    outcome, message = result(policy(public, registry.host, annotations={"team": "search"}), images[layout])
    assert outcome == "fail" and "matched the required annotations" in message


def test_required_fails_images_no_policy_verified(images: dict[str, str], registry: RegistryProcess,
                                                  keys: dict[str, tuple[Path, str]]) -> None:
    public = keys["trusted"][1]
    looks = policy(public, registry.host, name="looks",
                   validations=[{"expression": "size(images.containers) > 0"}])
    [alone] = run([looks], images["bundle"])
    assert alone.result.result == "fail"
    assert alone.result.message == (f"image {images['bundle']} is not verified: no policy performed a signature or "
                                    "attestation check on it")
    # Another policy of the same request verified it: both pass.
    assert [o.result.result for o in run([looks, policy(public, registry.host)], images["bundle"])] == \
        ["pass", "pass"]
    # Tried and failed: said so.
    failed = run([looks, policy(public, registry.host)], images["unsigned"])
    assert failed[0].result.message == f"image {images['unsigned']} failed signature or attestation verification"
    relaxed = policy(public, registry.host, name="relaxed", configurations={"required": False},
                     validations=[{"expression": "size(images.containers) > 0"}])
    assert result(relaxed, images["unsigned"])[0] == "pass"


def test_the_cache_makes_a_second_verification_free(images: dict[str, str], registry: RegistryProcess,
                                                    keys: dict[str, tuple[Path, str]]) -> None:
    engine = policy(keys["trusted"][1], registry.host)
    cache = VerificationCache()
    client = RegistryClient()
    assert result(engine, images["bundle"], client=client, cache=cache)[0] == "pass"
    first = sum(client.requests.values())
    assert result(engine, images["bundle"], images["bundle"], client=client, cache=cache)[0] == "pass"
    # A digest names content that never changes: the second request (two replicas) reads nothing.
    assert sum(client.requests.values()) == first
    tagged = images["bundle"].split("@")[0] + ":v1"
    loose = policy(keys["trusted"][1], registry.host, configurations={"verifyDigest": False})
    assert result(loose, tagged, client=client, cache=cache)[0] == "pass"
    # A tag is resolved again each time (one manifest read); what it resolves to was verified already.
    before = sum(client.requests.values())
    assert result(loose, tagged, client=client, cache=cache)[0] == "pass"
    assert client.requests and sum(client.requests.values()) - before == 1
    assert cache.hits >= 1


def test_a_registry_without_the_referrers_api_is_read_through_the_tag_schema(
        tmp_path: Path, keys: dict[str, tuple[Path, str]]) -> None:
    plain = RegistryProcess(referrers=False).start()
    try:
        signer = Signer(tmp_path)
        key, _public = keys["trusted"]
        image = f"{plain.host}/app@{signer.push_image(plain.host, 'app')}"
        signer.sign(image, key)
        assert result(policy(keys["trusted"][1], plain.host), image) == ("pass", "success")
    finally:
        plain.stop()


def test_token_authentication_with_pull_credentials(tmp_path: Path, keys: dict[str, tuple[Path, str]]) -> None:
    private = RegistryProcess(user="puller", password="s3cret").start()
    try:
        signer = Signer(tmp_path)
        signer.login(private.host, "puller", "s3cret")
        image = f"{private.host}/app@{signer.push_image(private.host, 'app')}"
        signer.sign(image, keys["trusted"][0])
        engine = policy(keys["trusted"][1], private.host)
        outcome, message = result(engine, image)
        assert outcome == "error" and "unauthorized" in message.lower()
        import json

        client = RegistryClient(Credentials([json.loads(signer.docker_config.read_text())]))
        assert result(engine, image, client=client) == ("pass", "success")
        assert client.requests.get("token", 0) >= 1
    finally:
        private.stop()


def test_a_stopped_registry_is_an_error_within_the_deadline(tmp_path: Path,
                                                            keys: dict[str, tuple[Path, str]]) -> None:
    gone = RegistryProcess().start()
    signer = Signer(tmp_path)
    image = f"{gone.host}/app@{signer.push_image(gone.host, 'app')}"
    gone.stop()
    started = time.monotonic()
    outcome, message = result(policy(keys["trusted"][1], gone.host), image, client=RegistryClient(timeout=2))
    assert outcome == "error" and "failed to get imagedata" in message and "connection refused" in message
    assert time.monotonic() - started < 5


def certificate_policy(cert: str, chain: str, host: str) -> ImagePolicyEngine:
    parsed, problems = parse_image_validating_policy({
        "apiVersion": "policies.kyverno.io/v1", "kind": "ImageValidatingPolicy", "metadata": {"name": "certified"},
        "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                         "operations": ["CREATE"], "resources": ["pods"]}]},
                 "matchImageReferences": [{"glob": f"{host}/*"}],
                 "attestors": [{"name": "trusted", "cosign": {
                     "certificate": {"cert": {"value": cert}, "certChain": {"value": chain}},
                     "ctlog": {"insecureIgnoreTlog": True, "insecureIgnoreSCT": True}}}],
                 "validations": [{"expression": SIGNED, "message": "images must be signed"}]}})
    assert parsed is not None, problems
    return ImagePolicyEngine(parsed)


@pytest.mark.parametrize("bundle", [True, False], ids=["bundle", "legacy"])
def test_a_certificate_attestor_checks_the_chain_and_the_signature(
        bundle: bool, registry: RegistryProcess, signer: Signer, keys: dict[str, tuple[Path, str]]) -> None:
    from tests.signing.tools import certificate_chain

    key, public = keys["trusted"]
    cert, chain = certificate_chain(public)
    host = registry.host
    image = f"{host}/certified@{signer.push_image(host, 'certified')}"
    signer.sign(image, key, bundle=bundle, certificate=(cert, chain))
    assert result(certificate_policy(cert, chain, host), image) == ("pass", "success")
    # The same key's certificate under another root: refused.
    _other_cert, other_chain = certificate_chain(public)
    outcome, message = result(certificate_policy(cert, other_chain, host), image)
    assert outcome == "fail" and "is not issued by" in message
    # An expired certificate: refused.
    old_cert, old_chain = certificate_chain(public, expired=True)
    outcome, message = result(certificate_policy(old_cert, old_chain, host), image)
    assert outcome == "fail" and "is not valid now" in message
    # Another key's certificate, its chain fine: the signature does not verify.
    stranger_cert, stranger_chain = certificate_chain(keys["other"][1])
    assert result(certificate_policy(stranger_cert, stranger_chain, host), image)[0] == "fail"


# --- Notary ----------------------------------------------------------------------------------------------------

CYCLONEDX = "application/vnd.cyclonedx+json"


def notary_policy(cert: str, host: str, validations: list[dict[str, Any]]) -> ImagePolicyEngine:
    parsed, problems = parse_image_validating_policy({
        "apiVersion": "policies.kyverno.io/v1", "kind": "ImageValidatingPolicy", "metadata": {"name": "notary"},
        "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                         "operations": ["CREATE"], "resources": ["pods"]}]},
                 "matchImageReferences": [{"glob": f"{host}/*"}],
                 "attestors": [{"name": "notary", "notary": {"certs": {"value": cert}}}],
                 "attestations": [{"name": "sbom", "referrer": {"type": CYCLONEDX}}],
                 "validations": validations}})
    assert parsed is not None, problems
    return ImagePolicyEngine(parsed)


def test_notary_signatures_and_signed_referrers(registry: RegistryProcess, signer: Signer) -> None:
    host = registry.host
    cert = signer.notation_key("vpol-notary")
    stranger = signer.notation_key("vpol-stranger")
    signed = f"{host}/notary-signed@{signer.push_image(host, 'notary-signed')}"
    signer.notation_sign(signed, "vpol-notary")
    unsigned = f"{host}/notary-unsigned@{signer.push_image(host, 'notary-unsigned')}"
    by_stranger = f"{host}/notary-stranger@{signer.push_image(host, 'notary-stranger')}"
    signer.notation_sign(by_stranger, "vpol-stranger")
    signature = [{"expression": "images.containers.all(i, verifyImageSignatures(i, [attestors.notary]) > 0)",
                  "message": "not signed"}]
    assert result(notary_policy(cert, host, signature), signed) == ("pass", "success")
    outcome, message = result(notary_policy(cert, host, signature), unsigned)
    assert outcome == "fail" and "no signature is associated with" in message
    outcome, message = result(notary_policy(cert, host, signature), by_stranger)
    assert outcome == "fail" and "not produced by a trusted signer" in message
    assert result(notary_policy(stranger, host, signature), by_stranger) == ("pass", "success")

    # An SBOM attached to the image and signed: verified as a referrer attestation, then read.
    sbom_checks = [{"expression": "images.containers.all(i, verifyAttestationSignatures(i, attestations.sbom, "
                                  "[attestors.notary]) > 0)", "message": "no signed SBOM"},
                   {"expression": "images.containers.all(i, extractPayload(i, attestations.sbom).bomFormat == "
                                  "'CycloneDX')", "message": "not CycloneDX"}]
    repository = signed.split("@")[0].split("/", 1)[1]
    sbom = signer.push_referrer(host, repository, signed.split("@")[1], CYCLONEDX,
                                {"bomFormat": "CycloneDX", "specVersion": "1.5", "components": []})
    outcome, message = result(notary_policy(cert, host, sbom_checks), signed)
    assert outcome == "fail" and "no signed SBOM" in message  # attached, not yet signed
    signer.notation_sign(f"{host}/{repository}@{sbom}", "vpol-notary")
    assert result(notary_policy(cert, host, sbom_checks), signed) == ("pass", "success")


def test_replicas_admitted_side_by_side_verify_once(images: dict[str, str], registry: RegistryProcess,
                                                    signer: Signer, keys: dict[str, tuple[Path, str]]) -> None:
    """A Deployment's replicas arrive at once: the first request verifies, the others wait for its answer."""
    from concurrent.futures import ThreadPoolExecutor

    host = registry.host
    image = f"{host}/replicated@{signer.push_image(host, 'replicated')}"
    signer.sign(image, keys["trusted"][0])
    engine = policy(keys["trusted"][1], host)
    cache, client = VerificationCache(), RegistryClient()
    with ThreadPoolExecutor(max_workers=10) as pool:
        outcomes = list(pool.map(lambda _i: result(engine, image, client=client, cache=cache), range(10)))
    assert outcomes == [("pass", "success")] * 10
    # One verification of a bundle: the image's manifest, its referrers, the bundle's manifest and blob.
    assert client.requests == {"manifest": 2, "referrer": 1, "blob": 1}


def keyless_policy(roots: str, host: str, identities: list[dict[str, str]]) -> ImagePolicyEngine:
    parsed, problems = parse_image_validating_policy({
        "apiVersion": "policies.kyverno.io/v1", "kind": "ImageValidatingPolicy", "metadata": {"name": "keyless"},
        "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                         "operations": ["CREATE"], "resources": ["pods"]}]},
                 "matchImageReferences": [{"glob": f"{host}/*"}],
                 "attestors": [{"name": "trusted", "cosign": {
                     "keyless": {"identities": identities, "roots": roots},
                     "ctlog": {"insecureIgnoreTlog": True, "insecureIgnoreSCT": True}}}],
                 "validations": [{"expression": SIGNED, "message": "images must be signed"}]}})
    assert parsed is not None and not [p for p in problems if p.severity == "error"], problems
    return ImagePolicyEngine(parsed)


@pytest.mark.parametrize("bundle", [True, False], ids=["bundle", "legacy"])
def test_keyless_with_the_policys_roots_and_identities(
        bundle: bool, registry: RegistryProcess, signer: Signer, keys: dict[str, tuple[Path, str]]) -> None:
    """A signing certificate as a private Fulcio-like CA issues it (the subject in the SAN, the OIDC issuer in
    Fulcio's extension), carried by the signature: verified with the policy's roots, offline."""
    from tests.signing.tools import certificate_chain

    key, public = keys["trusted"]
    cert, chain = certificate_chain(public, email="dev@vpol.test", oidc_issuer="https://issuer.vpol.test")
    host = registry.host
    image = f"{host}/keyless@{signer.push_image(host, 'keyless')}"
    signer.sign(image, key, bundle=bundle, certificate=(cert, chain))
    exact = [{"subject": "dev@vpol.test", "issuer": "https://issuer.vpol.test"}]
    assert result(keyless_policy(chain, host, exact), image) == ("pass", "success")
    regexp = [{"subjectRegExp": r".*@vpol\.test$", "issuerRegExp": r"^https://issuer\."}]
    assert result(keyless_policy(chain, host, regexp), image) == ("pass", "success")
    outcome, message = result(keyless_policy(chain, host, [{"subject": "ops@vpol.test",
                                                            "issuer": "https://issuer.vpol.test"}]), image)
    assert outcome == "fail" and "none of the expected identities matched" in message
    _other, other_chain = certificate_chain(public)
    outcome, message = result(keyless_policy(other_chain, host, exact), image)
    assert outcome == "fail" and "not trusted" in message
