"""The typed ImageValidatingPolicy model (Kyverno's ``policies.kyverno.io`` ImageValidatingPolicy and
NamespacedImageValidatingPolicy) and its parsing (docs/internals/image-validating.md).

An ImageValidatingPolicy keeps a ValidatingPolicy's frame (matchConstraints, matchConditions, variables,
validations, auditAnnotations, validationActions, failurePolicy, evaluation, autogen, webhookConfiguration) and adds
what to verify: which images (``matchImageReferences``, ``images`` extractors), who must have signed them
(``attestors``: cosign keys, certificates, keyless identities; Notary certificates), which signed statements to
read (``attestations``: in-toto or OCI referrers), how registries are read (``credentials``) and what is required
besides the validations (``validationConfigurations``: pin tags to digests, refuse tag-only images, refuse images
no policy verified; all true unless set false).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vpol.model.attestation import COSIGN_PREDICATE_TYPES, Attestation
from vpol.model.documents import Document
from vpol.model.image_glob import GlobError, compile_glob
from vpol.model.parse import CEL_IDENT, Reader, policy_spec, parse_kind
from vpol.model.policy import GROUP, VERSIONS, PolicyObject, PolicySpec, validation_expressions
from vpol.model.problems import Problem

IMAGE_VALIDATING_KIND = "ImageValidatingPolicy"
NAMESPACED_IMAGE_VALIDATING_KIND = "NamespacedImageValidatingPolicy"
IMAGE_VALIDATING_KINDS = (IMAGE_VALIDATING_KIND, NAMESPACED_IMAGE_VALIDATING_KIND)
#: Served as the other policy kinds: v1, v1beta1 (storage) and v1alpha1 (deprecated); the namespaced kind v1, v1beta1.
IMAGE_VALIDATING_VERSIONS = VERSIONS
HASH_ALGORITHMS = ("sha224", "sha256", "sha384", "sha512")
CREDENTIAL_PROVIDERS = ("default", "amazon", "azure", "google", "github")


@dataclass(frozen=True)
class ImageReference:
    """One ``matchImageReferences[]`` entry: a ``glob`` over the image reference, or a CEL ``expression`` over
    ``ref`` (Kyverno prefers the glob when both are set)."""

    glob: str = ""
    expression: str = ""


@dataclass(frozen=True)
class StringOrExpression:
    """A literal ``value`` or a CEL ``expression`` giving it."""

    value: str = ""
    expression: str = ""


@dataclass(frozen=True)
class Identity:
    """A keyless signer: the certificate's OIDC issuer and subject, exactly or by regular expression."""

    issuer: str = ""
    subject: str = ""
    issuer_regexp: str = ""
    subject_regexp: str = ""


@dataclass(frozen=True)
class CosignAttestor:
    key_data: str = ""
    key_kms: str = ""
    key_expression: str = ""
    key_hash_algorithm: str = ""
    has_key: bool = False
    keyless_identities: tuple[Identity, ...] = ()
    keyless_roots: str = ""
    keyless_extensions: Mapping[str, str] = field(default_factory=dict)
    has_keyless: bool = False
    certificate: StringOrExpression | None = None
    certificate_chain: StringOrExpression | None = None
    has_certificate: bool = False
    #: Where the signatures are, when not beside the image.
    source_repository: str = ""
    source_tag_prefix: str = ""
    source_pull_secrets: tuple[str, ...] = ()
    ctlog_url: str = ""
    rekor_public_key: str = ""
    ctlog_public_key: str = ""
    tsa_cert_chain: str = ""
    insecure_ignore_tlog: bool = False
    insecure_ignore_sct: bool = False
    tuf_root_path: str = ""
    tuf_root_data: str = ""
    tuf_mirror: str = ""
    annotations: Mapping[str, str] = field(default_factory=dict)
    trusted_root: StringOrExpression | None = None


@dataclass(frozen=True)
class NotaryAttestor:
    certs: StringOrExpression | None = None
    tsa_certs: StringOrExpression | None = None


@dataclass(frozen=True)
class Attestor:
    name: str
    cosign: CosignAttestor | None = None
    notary: NotaryAttestor | None = None
    #: The attestor as written (what CEL's ``attestors.<name>`` holds).
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class Credentials:
    allow_insecure_registry: bool = False
    providers: tuple[str, ...] = ()
    secrets: tuple[str, ...] = ()


@dataclass(frozen=True)
class ValidationConfigurations:
    mutate_digest: bool = True
    verify_digest: bool = True
    required: bool = True


@dataclass(frozen=True)
class ImageValidatingSpec(PolicySpec):
    match_image_references: tuple[ImageReference, ...] = ()
    #: ``images[]``: (name, expression) of the user's image extractors.
    images: tuple[tuple[str, str], ...] = ()
    attestors: tuple[Attestor, ...] = ()
    attestations: tuple[Attestation, ...] = ()
    credentials: Credentials = Credentials()
    validation_configurations: ValidationConfigurations = ValidationConfigurations()


@dataclass(frozen=True)
class ImageValidatingPolicy(PolicyObject):
    name: str
    spec: ImageValidatingSpec
    kind: str = IMAGE_VALIDATING_KIND

    @property
    def json_mode(self) -> bool:
        return self.spec.evaluation.mode == "JSON"

    def attestor_expressions(self) -> list[tuple[str, str, str]]:
        """The attestors' CEL fields as (field path, source, role "attestor")."""
        out: list[tuple[str, str, str]] = []
        for i, attestor in enumerate(self.spec.attestors):
            here = f"spec.attestors[{i}]"
            if attestor.cosign is not None:
                c = attestor.cosign
                parts = [("key.expression", c.key_expression),
                         ("certificate.cert.expression", c.certificate.expression if c.certificate else ""),
                         ("certificate.certChain.expression",
                          c.certificate_chain.expression if c.certificate_chain else ""),
                         ("trustedRoot.expression", c.trusted_root.expression if c.trusted_root else "")]
            else:
                n = attestor.notary or NotaryAttestor()
                parts = [("certs.expression", n.certs.expression if n.certs else ""),
                         ("tsaCerts.expression", n.tsa_certs.expression if n.tsa_certs else "")]
            kind = "cosign" if attestor.cosign is not None else "notary"
            out.extend((f"{here}.{kind}.{sub}", src, "attestor") for sub, src in parts if src)
        return out

    def expressions(self) -> list[tuple[str, str, str]]:
        """Every CEL expression as (field path, source, role), in Kyverno's compile order."""
        s = self.spec
        out: list[tuple[str, str, str]] = []
        for i, mc in enumerate(s.match_conditions):
            out.append((f"spec.matchConditions[{i}].expression", mc.expression, "matchCondition"))
        for i, ref in enumerate(s.match_image_references):
            if ref.expression and not ref.glob:
                out.append((f"spec.matchImageReferences[{i}].expression", ref.expression, "imageReference"))
        for i, (_name, expression) in enumerate(s.images):
            out.append((f"spec.images[{i}].expression", expression, "imageExtractor"))
        for i, var in enumerate(s.variables):
            out.append((f"spec.variables[{i}].expression", var.expression, "variable"))
        out.extend(self.attestor_expressions())
        return [*out, *validation_expressions(s)]


def unverifiable(attestor: Attestor) -> str:
    """Why vpol cannot verify anything with ``attestor`` ("" when it can): what it needs that vpol lacks. Each
    verification with it then fails naming this reason; `vpol check`, apply-time validation and the status say
    it beforehand."""
    c = attestor.cosign
    if c is None:
        return ""
    if c.has_keyless and not (c.keyless_roots and c.insecure_ignore_tlog and c.insecure_ignore_sct):
        return ("keyless verification against Sigstore's public infrastructure (TUF root, Rekor, the certificate "
                "transparency log) is out of vpol's reach: give keyless.roots and set ctlog.insecureIgnoreTlog and "
                "ctlog.insecureIgnoreSCT")
    if c.has_key and c.key_kms:
        return "KMS keys are not supported by vpol"
    if (c.has_key or c.has_certificate) and not c.insecure_ignore_tlog:
        return ("verifying against the transparency log needs Rekor and Sigstore's TUF root, which vpol does not "
                "reach: set ctlog.insecureIgnoreTlog for signatures made without the log")
    return ""


_SPEC_FIELDS = ("matchConstraints", "matchConditions", "variables", "validations", "auditAnnotations",
                "validationActions", "failurePolicy", "evaluation", "autogen", "webhookConfiguration",
                "matchImageReferences", "images", "attestors", "attestations", "credentials",
                "validationConfigurations")


def _string_or_expression(r: Reader, data: dict[str, Any], key: str, here: str) -> StringOrExpression | None:
    if data.get(key) is None:
        return None
    path = f"{here}.{key}"
    d = r.obj(data.get(key), path, ("value", "expression"))
    value, expression = r.str_(d, "value", path), r.expression(d, "expression", path, required=False)
    if bool(value) == bool(expression):
        r.problem(path, "exactly one of value or expression must be set")
    return StringOrExpression(value, expression)


def _string_map(r: Reader, data: dict[str, Any], key: str, here: str) -> dict[str, str]:
    d = r.obj(data.get(key), f"{here}.{key}")
    out: dict[str, str] = {}
    for k, v in d.items():
        if not isinstance(v, str):
            r.problem(f"{here}.{key}.{k}", "must be a string")
            continue
        out[str(k)] = v
    return out


def _cosign(r: Reader, data: Any, here: str) -> CosignAttestor:
    d = r.obj(data, here, ("key", "keyless", "certificate", "source", "ctlog", "tuf", "annotations", "trustedRoot"))
    key = r.obj(d.get("key"), f"{here}.key", ("data", "kms", "hashAlgorithm", "expression"))
    keyless = r.obj(d.get("keyless"), f"{here}.keyless", ("identities", "roots", "additionalExtensions"))
    cert = r.obj(d.get("certificate"), f"{here}.certificate", ("cert", "certChain"))
    source = r.obj(d.get("source"), f"{here}.source", ("repository", "tagPrefix", "PullSecrets"))
    ctlog = r.obj(d.get("ctlog"), f"{here}.ctlog", ("url", "rekorPubKey", "ctLogPubKey", "tsaCertChain",
                                                    "insecureIgnoreTlog", "insecureIgnoreSCT"))
    tuf = r.obj(d.get("tuf"), f"{here}.tuf", ("root", "mirror"))
    tuf_root = r.obj(tuf.get("root"), f"{here}.tuf.root", ("path", "data"))
    has = {name: d.get(name) is not None for name in ("key", "keyless", "certificate")}
    if sum(has.values()) != 1:
        # Kyverno admits such an attestor, and every verification with it then fails ("cosign verifier needs
        # to have one key, keyless or certificate fields set"): a policy using it can never pass.
        r.problem(here, "a cosign attestor needs exactly one of key, keyless or certificate; with "
                        f"{'none' if not any(has.values()) else ' and '.join(k for k, v in has.items() if v)} "
                        "every verification with it fails", "warning")
    if has["key"] and sum(bool(key.get(k)) for k in ("data", "kms", "expression")) != 1:
        r.problem(f"{here}.key", "a key needs exactly one of data, kms or expression", "warning")

    def identity(item: dict[str, Any], at: str) -> Identity | None:
        r.obj(item, at, ("issuer", "subject", "issuerRegExp", "subjectRegExp", "subjectExpression"))
        return Identity(r.str_(item, "issuer", at), r.str_(item, "subject", at), r.str_(item, "issuerRegExp", at),
                        r.str_(item, "subjectRegExp", at))

    if has["keyless"] and not keyless.get("identities"):
        r.problem(f"{here}.keyless.identities", "required field is missing")
    pull_secrets = tuple(str(item.get("name", "")) for item in r.list_(source, "PullSecrets", f"{here}.source")
                         if isinstance(item, dict))
    return CosignAttestor(
        key_data=r.str_(key, "data", f"{here}.key"), key_kms=r.str_(key, "kms", f"{here}.key"),
        key_expression=r.expression(key, "expression", f"{here}.key", required=False),
        key_hash_algorithm=r.str_(key, "hashAlgorithm", f"{here}.key", choices=("", *HASH_ALGORITHMS)),
        has_key=has["key"],
        keyless_identities=r.objects(keyless, "identities", f"{here}.keyless", identity),
        keyless_roots=r.str_(keyless, "roots", f"{here}.keyless"),
        keyless_extensions=_string_map(r, keyless, "additionalExtensions", f"{here}.keyless"),
        has_keyless=has["keyless"],
        certificate=_string_or_expression(r, cert, "cert", f"{here}.certificate"),
        certificate_chain=_string_or_expression(r, cert, "certChain", f"{here}.certificate"),
        has_certificate=has["certificate"],
        source_repository=r.str_(source, "repository", f"{here}.source"),
        source_tag_prefix=r.str_(source, "tagPrefix", f"{here}.source"), source_pull_secrets=pull_secrets,
        ctlog_url=r.str_(ctlog, "url", f"{here}.ctlog"), rekor_public_key=r.str_(ctlog, "rekorPubKey", f"{here}.ctlog"),
        ctlog_public_key=r.str_(ctlog, "ctLogPubKey", f"{here}.ctlog"),
        tsa_cert_chain=r.str_(ctlog, "tsaCertChain", f"{here}.ctlog"),
        insecure_ignore_tlog=r.bool_(ctlog, "insecureIgnoreTlog", f"{here}.ctlog", False),
        insecure_ignore_sct=r.bool_(ctlog, "insecureIgnoreSCT", f"{here}.ctlog", False),
        tuf_root_path=r.str_(tuf_root, "path", f"{here}.tuf.root"),
        tuf_root_data=r.str_(tuf_root, "data", f"{here}.tuf.root"), tuf_mirror=r.str_(tuf, "mirror", f"{here}.tuf"),
        annotations=_string_map(r, d, "annotations", here),
        trusted_root=_string_or_expression(r, d, "trustedRoot", here),
    )


def _unique_name(r: Reader, item: dict[str, Any], here: str, seen: dict[str, str], what: str) -> str:
    name = r.str_(item, "name", here, required=True)
    if name and not CEL_IDENT.match(name):
        # Reached in CEL as attestors.<name> / attestations.<name>; any string works through attestors["x-y"].
        r.problem(f"{here}.name", f'"{name}" is not a CEL identifier: reach it as {what}["{name}"]', "warning")
    if name in seen:
        # Kyverno keeps the last of two with one name (a map keyed by name): the first is never used.
        r.problem(f"{here}.name", f'duplicate name "{name}" (first at {seen[name]}): only the last one is used',
                  "warning")
    seen.setdefault(name, here)
    return name


def _attestor(r: Reader, item: dict[str, Any], here: str, seen: dict[str, str]) -> Attestor | None:
    r.obj(item, here, ("name", "cosign", "notary"))
    name = _unique_name(r, item, here, seen, "attestors")
    if (item.get("cosign") is None) == (item.get("notary") is None):
        r.problem(here, "exactly one of cosign or notary must be set")
        return None
    if item.get("cosign") is not None:
        attestor = Attestor(name, cosign=_cosign(r, item["cosign"], f"{here}.cosign"), raw=item)
    else:
        notary = r.obj(item["notary"], f"{here}.notary", ("certs", "tsaCerts"))
        attestor = Attestor(name, notary=NotaryAttestor(_string_or_expression(r, notary, "certs", f"{here}.notary"),
                                                        _string_or_expression(r, notary, "tsaCerts",
                                                                              f"{here}.notary")), raw=item)
    why = unverifiable(attestor)
    if why:
        r.problem(here, f"every verification with this attestor fails: {why}", "warning")
    return attestor


def _attestation(r: Reader, item: dict[str, Any], here: str, seen: dict[str, str]) -> Attestation | None:
    r.obj(item, here, ("name", "intoto", "referrer"))
    name = _unique_name(r, item, here, seen, "attestations")
    intoto = r.obj(item.get("intoto"), f"{here}.intoto", ("type",))
    referrer = r.obj(item.get("referrer"), f"{here}.referrer", ("type",))
    for key, d in (("intoto", intoto), ("referrer", referrer)):
        if item.get(key) is not None:
            r.str_(d, "type", f"{here}.{key}", required=True)
    short = str(intoto.get("type") or "")
    if short in COSIGN_PREDICATE_TYPES:
        # Kyverno verifies the attestation by the expanded type but keeps its statement under the statement's own
        # (full) type, and extractPayload looks it up by the type as written: never found.
        r.problem(f"{here}.intoto.type", f'"{short}" is a cosign short name: verifyAttestationSignatures accepts it, '
                                          "but extractPayload never finds its statement (as in Kyverno); write "
                                          f"{COSIGN_PREDICATE_TYPES[short]}", "warning")
    if item.get("intoto") is None and item.get("referrer") is None:
        # Kyverno admits it; verifying or reading it then fails.
        r.problem(here, "one of intoto or referrer is needed: this attestation can never be verified", "warning")
    return Attestation(name, intoto_type=str(intoto.get("type") or ""), referrer_type=str(referrer.get("type") or ""))


def _image_reference(r: Reader, item: dict[str, Any], here: str) -> ImageReference | None:
    r.obj(item, here, ("glob", "expression"))
    glob = r.str_(item, "glob", here)
    expression = r.expression(item, "expression", here, required=False)
    if not glob and not expression:
        r.problem(here, "either glob or expression must be set")
        return None
    if glob:
        try:
            compile_glob(glob)
        except GlobError as exc:
            r.problem(f"{here}.glob", f"invalid glob {glob!r}: {exc}")
            return None
        if expression:
            r.problem(here, "both glob and expression are set: the glob is used", "warning")
        return ImageReference(glob=glob)
    return ImageReference(expression=expression)


def _extractor(r: Reader, item: dict[str, Any], here: str) -> tuple[str, str] | None:
    """One ``images[]`` extractor (any name: a later one of the same name replaces it, as in Kyverno)."""
    r.obj(item, here, ("name", "expression"))
    name, expression = r.str_(item, "name", here, required=True), r.expression(item, "expression", here)
    return (name, expression) if name and expression else None


def _image_spec(r: Reader, data: Any) -> ImageValidatingSpec:
    frame = policy_spec(r, data, _SPEC_FIELDS, any_reason=True)
    d = r.obj(data, "spec")
    vc = r.obj(d.get("validationConfigurations"), "spec.validationConfigurations",
               ("mutateDigest", "verifyDigest", "required"))
    creds = r.obj(d.get("credentials"), "spec.credentials", ("allowInsecureRegistry", "providers", "secrets"))
    if d.get("attestors") is None:
        r.problem("spec.attestors", "required field is missing")
    attestor_names: dict[str, str] = {}
    attestation_names: dict[str, str] = {}
    extractors = r.objects(d, "images", "spec", lambda i, h: _extractor(r, i, h))
    return ImageValidatingSpec(
        **{name: getattr(frame, name) for name in PolicySpec.__dataclass_fields__},
        match_image_references=r.objects(d, "matchImageReferences", "spec", lambda i, h: _image_reference(r, i, h)),
        images=extractors,
        attestors=r.objects(d, "attestors", "spec", lambda i, h: _attestor(r, i, h, attestor_names)),
        attestations=r.objects(d, "attestations", "spec", lambda i, h: _attestation(r, i, h, attestation_names)),
        credentials=Credentials(
            allow_insecure_registry=r.bool_(creds, "allowInsecureRegistry", "spec.credentials", False),
            providers=r.strings(creds, "providers", "spec.credentials", choices=CREDENTIAL_PROVIDERS),
            secrets=r.strings(creds, "secrets", "spec.credentials")),
        validation_configurations=ValidationConfigurations(
            mutate_digest=r.bool_(vc, "mutateDigest", "spec.validationConfigurations", True),
            verify_digest=r.bool_(vc, "verifyDigest", "spec.validationConfigurations", True),
            required=r.bool_(vc, "required", "spec.validationConfigurations", True)),
    )


def is_image_validating_policy_document(data: Any) -> bool:
    return isinstance(data, dict) and str(data.get("apiVersion", "")).startswith(f"{GROUP}/") and \
        data.get("kind") in IMAGE_VALIDATING_KINDS


def parse_image_validating_policy(data: Any, doc: Document | None = None
                                  ) -> tuple[ImageValidatingPolicy | None, list[Problem]]:
    """Parse one ImageValidatingPolicy or NamespacedImageValidatingPolicy document: the policy (None when invalid)
    and every problem."""
    return parse_kind(data, doc, IMAGE_VALIDATING_KINDS, IMAGE_VALIDATING_VERSIONS, _image_spec,
                      ImageValidatingPolicy)
