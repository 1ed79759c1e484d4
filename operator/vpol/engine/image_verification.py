"""Verifying images for one evaluation of an ImageValidatingPolicy: what the imageverify functions do
(vpol.cel.libraries.kyverno.imageverify_lib), as Kyverno 1.19.1 does it (docs/internals/image-validating.md).

- ``verifyImageSignatures(image, attestors)``: 0 for an image the policy's matchImageReferences do not select;
  else the image's data is loaded (its digest resolved: a failure is the CEL error ``failed to get imagedata:
  ...``) and each attestor checked; the count of those that verified. An attestor's failure is no CEL error: its
  reason is kept (:attr:`Verification.failures`) for the result's message.
- ``verifyAttestationSignatures(image, attestation, attestors)``: the same for the named attestation (an unknown
  name is the error ``attestation not found in policy: <name>``); a verified in-toto statement is kept for
  ``extractPayload``.
- ``extractPayload(image, attestation)``: a verified in-toto statement (else ``failed to get payload: intoto
  attestation payload cannot be fetch before verifying intoto attestation``, Kyverno's words), or a referrer's
  content.
- ``getImageData(image)``: the image's data (reference parts, digest, manifest, config).

Every (image, verified) outcome is recorded for ``validationConfigurations.required``, which is decided across the
policies of a request (:class:`Outcomes`). Successful checks are kept in a :class:`VerificationCache` shared by
evaluations, keyed by what decides them (the policy's uid and generation, the function, the attestation, the
attestors as evaluated, the image digest), so the replicas of a Deployment cost one registry round trip.

What vpol does not verify yet is an attestor failure naming the reason, never a pass: keyless identities,
certificates, KMS keys, Notary signatures, referrer attestations, and any cosign check that needs the transparency
log (an attestor without ``ctlog.insecureIgnoreTlog``: Rekor and Sigstore's TUF root are out of reach).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vpol.cel.libraries.kyverno import imageref
from vpol.cel.libraries.kyverno.declarations import KyvernoFunctionError
from vpol.engine import cosign, notary
from vpol.engine.registry_access import NotFound, Registry, RegistryError
from vpol.model.attestation import Attestation

#: Kyverno's image-verification cache: 1 hour, 1,000 entries (successes only).
CACHE_TTL_SECONDS = 3600.0
CACHE_ENTRIES = 1000
IMAGE_CONFIG_TYPES = ("application/vnd.oci.image.config.v1+json", "application/vnd.docker.container.image.v1+json")


class VerificationCache:
    """Successful verifications, by key, for :data:`CACHE_TTL_SECONDS` (thread-safe; hits and misses counted)."""

    def __init__(self, ttl: float = CACHE_TTL_SECONDS, entries: int = CACHE_ENTRIES,
                 clock: Callable[[], float] = time.monotonic, on_lookup: Callable[[bool], None] | None = None):
        self.ttl, self.entries, self.clock = ttl, entries, clock
        #: Told whether each lookup was a hit (the operator's metrics).
        self.on_lookup = on_lookup
        self._items: OrderedDict[str, tuple[float, Any]] = OrderedDict()
        self._lock = threading.Lock()
        #: Computations under way (compute), by key.
        self._running: dict[str, threading.Event] = {}
        self.hits = self.misses = 0

    def get(self, key: str) -> Any | None:
        with self._lock:
            found = self._items.get(key)
            hit = found is not None and found[0] > self.clock()
            if hit:
                self._items.move_to_end(key)
                self.hits += 1
            else:
                self._items.pop(key, None)
                self.misses += 1
        if self.on_lookup is not None:
            self.on_lookup(hit)
        return found[1] if hit and found is not None else None

    def put(self, key: str, value: Any) -> None:
        with self._lock:
            self._items[key] = (self.clock() + self.ttl, value)
            self._items.move_to_end(key)
            while len(self._items) > self.entries:
                self._items.popitem(last=False)

    def compute(self, key: str, work: Callable[[], Any], wait: float = 30.0) -> Any:
        """The cached value of ``key``, else ``work()``'s (kept when it returns): computed once when requests
        ask for it at the same moment (the replicas of a Deployment are admitted side by side), the others waiting
        up to ``wait`` seconds for that answer; when it fails, each tries for itself."""
        found = self.get(key)
        if found is not None:
            return found
        with self._lock:
            running = self._running.get(key)
            leading = running is None
            if leading:
                running = self._running[key] = threading.Event()
        assert running is not None
        if not leading:
            running.wait(max(0.0, wait))
            found = self.get(key)
            return found if found is not None else work()
        try:
            value = work()
            if value is not None:
                self.put(key, value)
            return value
        finally:
            with self._lock:
                self._running.pop(key, None)
            running.set()


@dataclass
class Outcomes:
    """Per image of one request: whether some verify function verified it (True), or tried and failed (False)."""

    verified: dict[str, bool] = field(default_factory=dict)

    def record(self, image: str, ok: bool) -> None:
        self.verified[image] = self.verified.get(image, False) or ok


@dataclass
class ImageInfo:
    """An image as loaded: its parsed reference and what its reference resolves to."""

    image: str
    ref: imageref.Reference
    digest: str
    media_type: str
    manifest: dict[str, Any]
    config: dict[str, Any] | None = None

    def with_config(self, registry: Registry, deadline: float | None) -> ImageInfo:
        """The image with its config read (once: what ``getImageData`` shows besides the manifest)."""
        if self.config is None:
            descriptor = self.manifest.get("config")
            media = str(descriptor.get("mediaType") or "") if isinstance(descriptor, Mapping) else ""
            if media in IMAGE_CONFIG_TYPES and isinstance(descriptor, Mapping) and \
                    isinstance(descriptor.get("digest"), str):
                try:
                    self.config = json.loads(registry.blob(self.ref.registry, self.ref.repository,
                                                           str(descriptor["digest"]), deadline))
                except ValueError:
                    self.config = {}
        return self

    def data(self) -> dict[str, Any]:
        """``getImageData``'s answer. Kyverno hands CEL its Go ImageData struct as a native object, whose fields
        have their Go names (``Digest``, ``Manifest.Config.Digest.Hex``, ``ConfigData.OS``): the same names
        here, the reference's fields also under ``ImageReference`` (an embedded struct), the index as the JSON
        it is (a Go ``any``)."""
        reference = {"Image": self.image, "ResolvedImage": f"{self.ref.context_name}@{self.digest}",
                     "Registry": self.ref.registry, "Repository": self.ref.repository,
                     "Identifier": self.ref.identifier, "Tag": self.ref.tag, "Digest": self.digest}
        out: dict[str, Any] = {**reference, "ImageReference": dict(reference)}
        if "manifests" in self.manifest:
            out["ImageIndex"] = self.manifest
        else:
            out["Manifest"] = go_fields(self.manifest)
            if self.config:
                out["ConfigData"] = go_fields(self.config)
        return out


#: JSON keys of OCI manifests and image configs whose Go field (go-containerregistry's v1 types) is not the key
#: capitalized.
_GO_NAMES = {"os": "OS", "rootfs": "RootFS", "diff_ids": "DiffIDs", "os.version": "OSVersion",
             "os.features": "OSFeatures", "urls": "URLs", "docker_version": "DockerVersion",
             "created_by": "CreatedBy", "empty_layer": "EmptyLayer"}


def go_fields(value: Any, key: str = "") -> Any:
    """A manifest or config as go-containerregistry decodes it, by Go field names: keys capitalized (or
    :data:`_GO_NAMES`), digests as their Hash struct (``Algorithm``, ``Hex``); maps of free keys (annotations,
    labels) kept as they are."""
    if isinstance(value, Mapping):
        if key in ("Annotations", "Labels", "ExposedPorts", "Volumes"):
            return dict(value)
        out = {}
        for k, v in value.items():
            name = _GO_NAMES.get(k, k[:1].upper() + k[1:])
            out[name] = go_fields(v, name)
        return out
    if isinstance(value, list):
        return [go_fields(v, key) for v in value]
    if key in ("Digest", "DiffIDs") and isinstance(value, str) and ":" in value:
        algorithm, _, hexdigest = value.partition(":")
        return {"Algorithm": algorithm, "Hex": hexdigest}
    return value


def _key(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


class Verification:
    """The imageverify functions for one evaluation of one policy (vpol.cel.libraries.kyverno.imageverify_lib's
    Verifier)."""

    def __init__(self, *, registry: Registry, matches: Callable[[str], bool],
                 attestations: Mapping[str, Attestation], policy_key: tuple[str, int] = ("", 0),
                 outcomes: Outcomes | None = None, cache: VerificationCache | None = None,
                 deadline: float | None = None, images: dict[str, ImageInfo] | None = None):
        self.registry = registry
        self.matches = matches
        self.attestations = attestations
        self.policy_key = policy_key
        self.outcomes = outcomes if outcomes is not None else Outcomes()
        self.cache = cache
        self.deadline = deadline
        #: Loaded images, by reference as written (shared by the policies of one request).
        self.images: dict[str, ImageInfo] = images if images is not None else {}
        #: (image, attestor name, attestation or "") -> why it did not verify.
        self.failures: dict[tuple[str, str, str], str] = {}
        #: Verified in-toto statements, by (image, predicate type).
        self._payloads: dict[tuple[str, str], dict[str, Any]] = {}
        #: Verified referrer artifacts (Notary-signed), by (image, artifact type): their digests.
        self._referrers: dict[tuple[str, str], str] = {}

    # -- imageverify_lib.Verifier --------------------------------------------------------------------------

    def verify_signatures(self, image: str, attestors: Sequence[Any]) -> int:
        if not self.matches(image):
            return 0
        info = self.load(image)
        count = sum(1 for a in attestors if self._attestor(info, _as_attestor(a), None))
        if attestors:
            self.outcomes.record(image, count > 0)
        return count

    def verify_attestations(self, image: str, attestation: str, attestors: Sequence[Any]) -> int:
        wanted = self._attestation(attestation)
        if not self.matches(image):
            return 0
        info = self.load(image)
        for a in attestors:
            if "notary" in _as_attestor(a) and not wanted.referrer_type:
                raise KyvernoFunctionError("notary verifier only supports oci 1.1 referrers as attestations")
        count = sum(1 for a in attestors if self._attestor(info, _as_attestor(a), wanted))
        if attestors:
            self.outcomes.record(image, count > 0)
        return count

    def extract_payload(self, image: str, attestation: str) -> Any:
        wanted = self._attestation(attestation)
        if wanted.intoto_type:
            # Looked up by the type as written, stored by the statement's predicate type (Kyverno's ImageData does
            # the same: with a cosign short name such as "slsaprovenance" the payload is never found).
            statement = self._payloads.get((image, wanted.intoto_type))
            if statement is None:
                raise KyvernoFunctionError("failed to get payload: intoto attestation payload cannot be fetch before "
                                           "verifying intoto attestation")
            return statement
        info = self.load(image)
        return self._referrer_content(info, wanted.referrer_type)

    def image_data(self, image: str) -> Any:
        info = self.load(image)
        try:
            return info.with_config(self.registry, self.deadline).data()
        except RegistryError as exc:
            raise KyvernoFunctionError(f"failed to get imagedata: {exc}") from None

    # -- loading ----------------------------------------------------------------------------------------------

    def load(self, image: str) -> ImageInfo:
        """The image's data, loaded once per evaluation (a failure is a CEL error)."""
        found = self.images.get(image)
        if found is not None:
            return found
        # What a digest reference names never changes: loaded once per cache lifetime.
        key = f"image:{image}" if "@sha256:" in image else ""
        try:
            if self.cache is not None and key:
                info: ImageInfo = self.cache.compute(key, lambda: load_image(self.registry, image, self.deadline),
                                                     self._wait())
            else:
                info = load_image(self.registry, image, self.deadline)
        except (RegistryError, imageref.BadReference) as exc:
            raise KyvernoFunctionError(f"failed to get imagedata: {exc}") from None
        self.images[image] = info
        return info

    def _wait(self) -> float:
        """How long to wait for the same work another request is doing (until this one's deadline)."""
        return 30.0 if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def _attestation(self, name: str) -> Attestation:
        found = self.attestations.get(name)
        if found is None:
            raise KyvernoFunctionError(f"attestation not found in policy: {name}")
        return found

    # -- one attestor -----------------------------------------------------------------------------------------

    def _attestor(self, info: ImageInfo, attestor: Mapping[str, Any], attestation: Attestation | None) -> bool:
        name = str(attestor.get("name") or "")
        key = _key(self.policy_key, "attestation" if attestation else "signature",
                   attestation.name if attestation else "", attestor, info.digest)
        try:
            check = lambda: self._check(info, attestor, attestation)  # noqa: E731
            found = self.cache.compute(key, check, self._wait()) if self.cache is not None else check()
        except (cosign.SignatureError, RegistryError, KyvernoFunctionError) as exc:
            self.failures[(info.image, name, attestation.name if attestation else "")] = str(exc)
            return False
        if attestation is not None and attestation.referrer_type and found.get("referrer"):
            self._referrers[(info.image, attestation.referrer_type)] = str(found["referrer"])
        elif attestation is not None and attestation.intoto_type and found:
            self._payloads[(info.image, str(found.get("predicateType") or ""))] = found
        return True

    def _check(self, info: ImageInfo, attestor: Mapping[str, Any], attestation: Attestation | None) -> dict[str, Any]:
        """What verified (an attestation's statement, ``{"referrer": digest}`` for a Notary-signed referrer, {} for
        a signature); raises saying why nothing did."""
        if isinstance(attestor.get("notary"), Mapping):
            return self._check_notary(info, attestor["notary"], attestation)
        spec = attestor.get("cosign")
        if not isinstance(spec, Mapping):
            raise cosign.SignatureError("cosign verifier only supports cosign attestor")
        if attestation is not None and not attestation.intoto_type:
            raise cosign.SignatureError("cosgin verifier only supports intoto referrers as attestations")
        key = _public_key(spec)
        ctlog: Mapping[str, Any] = spec["ctlog"] if isinstance(spec.get("ctlog"), Mapping) else {}
        if not ctlog.get("insecureIgnoreTlog"):
            raise cosign.SignatureError(
                "verifying against the transparency log needs Rekor and Sigstore's TUF root, which vpol does not "
                "reach: set ctlog.insecureIgnoreTlog for signatures made without the log")
        source: Mapping[str, Any] = spec["source"] if isinstance(spec.get("source"), Mapping) else {}
        registry, repository = info.ref.registry, info.ref.repository
        if source.get("repository"):
            target = imageref.parse(f"{source['repository']}:latest")
            registry, repository = target.registry, target.repository
        prefix = str(source.get("tagPrefix") or "")
        wanted = {str(k): str(v) for k, v in (spec.get("annotations") or {}).items()}
        bundles = self._bundles(registry, repository, info.digest)
        checked: list[cosign.Checked] = []
        errors: list[str] = []
        if bundles:
            for bundle in bundles:
                try:
                    checked.append(cosign.verify_bundle(bundle, key, info.digest))
                except cosign.SignatureError as exc:
                    errors.append(str(exc))
        else:
            suffix = ".att" if attestation is not None else ".sig"
            tag = f"{prefix}{info.digest.replace(':', '-')}{suffix}"
            try:
                manifest = self.registry.manifest(registry, repository, tag, self.deadline).json()
            except NotFound:
                raise cosign.SignatureError(f"no signatures found (no Sigstore bundle referrer and no {tag} tag in "
                                            f"{registry}/{repository})") from None
            if attestation is not None:
                # Kyverno 1.19.1 accepts legacy (.att) attestations only with a verified transparency-log bundle
                # (its check of cosign's bundleVerified has no exception for ctlog.insecureIgnoreTlog, unlike
                # signatures'), which offline attestations never have.
                raise cosign.SignatureError("cosign bundle verification failed (a legacy .att attestation needs a "
                                            "transparency-log entry)")
            for layer in manifest.get("layers") or []:
                if not isinstance(layer, Mapping) or not isinstance(layer.get("digest"), str):
                    continue
                annotations = {str(k): str(v) for k, v in (layer.get("annotations") or {}).items()}
                try:
                    body = self.registry.blob(registry, repository, layer["digest"], self.deadline)
                    if layer.get("mediaType") == cosign.SIMPLE_SIGNING:
                        checked.append(cosign.verify_simple_signing(body, annotations, key, info.digest))
                except cosign.SignatureError as exc:
                    errors.append(str(exc))
        if not checked:
            raise cosign.SignatureError("no matching signatures: " + ("; ".join(dict.fromkeys(errors)) or "none"))
        if attestation is not None:
            uri = cosign.predicate_uri(attestation.intoto_type)
            of_type = [c for c in checked if c.predicate_type == uri]
            if not of_type:
                found_types = sorted({c.predicate_type for c in checked})
                raise cosign.SignatureError(f"required predicate type {attestation.intoto_type} not found, found "
                                            f"{found_types}")
            checked = of_type
        if wanted:
            matching = [c for c in checked if c.has_annotations(wanted)]
            if not matching:
                raise cosign.SignatureError(f"no {'attestation' if attestation else 'signature'} matched the "
                                            f"required annotations {wanted}")
            checked = matching
        return (checked[0].statement or {}) if attestation is not None else {}

    def _bundles(self, registry: str, repository: str, digest: str) -> list[bytes]:
        """The Sigstore bundles among the image's referrers (cosign v3's signatures and attestations)."""
        out: list[bytes] = []
        for descriptor in self.registry.referrers(registry, repository, digest, self.deadline):
            annotations = descriptor.get("annotations") or {}
            artifact = str(descriptor.get("artifactType") or "")
            if not (artifact.startswith(cosign.BUNDLE_MEDIA_TYPE_PREFIX) or "dev.sigstore.bundle.content" in
                    annotations or artifact in ("", "application/vnd.oci.empty.v1+json")):
                continue
            manifest = self.registry.manifest(registry, repository, descriptor["digest"], self.deadline).json()
            layers = [layer for layer in manifest.get("layers") or [] if isinstance(layer, Mapping)
                      and str(layer.get("mediaType", "")).startswith(cosign.BUNDLE_MEDIA_TYPE_PREFIX)]
            if layers:
                out.append(self.registry.blob(registry, repository, str(layers[0]["digest"]), self.deadline))
        return out

    def _check_notary(self, info: ImageInfo, spec: Mapping[str, Any], attestation: Attestation | None
                      ) -> dict[str, Any]:
        """Notary signatures of the image, or (``attestation``) of its referrers of the attestation's type."""
        certs: Mapping[str, Any] = spec["certs"] if isinstance(spec.get("certs"), Mapping) else {}
        store = notary.load_trust_store(str(certs.get("value") or ""))
        if attestation is None:
            self._notary_signed(info, info.digest, store)
            return {}
        errors: list[str] = []
        for digest, _manifest in self._referrers_of(info, attestation.referrer_type):
            try:
                self._notary_signed(info, digest, store)
                return {"referrer": digest}
            except (cosign.SignatureError, RegistryError) as exc:
                errors.append(f"{digest}: {exc}")
        if not errors:
            raise cosign.SignatureError(f"attestation verification failed, no attestations found for type: "
                                        f"{attestation.referrer_type}")
        raise cosign.SignatureError("; ".join(errors))

    def _notary_signed(self, info: ImageInfo, digest: str, store: Sequence[Any]) -> None:
        """A Notary signature of ``digest`` (in the image's repository) verifies against ``store``."""
        errors: list[str] = []
        for _signature, manifest in self._referrers_of(info, notary.SIGNATURE_ARTIFACT, digest)[:10]:
            layers = [layer for layer in manifest.get("layers") or [] if isinstance(layer, Mapping)]
            if not layers:
                continue
            if layers[0].get("mediaType") != notary.JWS:
                errors.append(f"unsupported signature envelope {layers[0].get('mediaType')!r}")
                continue
            body = self.registry.blob(info.ref.registry, info.ref.repository, str(layers[0]["digest"]), self.deadline)
            try:
                notary.verify_jws(body, store, digest)
                return
            except cosign.SignatureError as exc:
                errors.append(str(exc))
        if not errors:
            raise cosign.SignatureError(f"no signature is associated with {info.ref.context_name}@{digest}")
        raise cosign.SignatureError("; ".join(dict.fromkeys(errors)))

    def _referrers_of(self, info: ImageInfo, artifact_type: str, digest: str = ""
                      ) -> list[tuple[str, dict[str, Any]]]:
        """(digest, manifest) of the referrers of ``digest`` (the image's by default) of ``artifact_type``, told
        from their manifests (a registry's referrers answer may report the config's type as artifactType)."""
        out = []
        for descriptor in self.registry.referrers(info.ref.registry, info.ref.repository, digest or info.digest,
                                                  self.deadline):
            manifest = self.registry.manifest(info.ref.registry, info.ref.repository, descriptor["digest"],
                                              self.deadline).json()
            kind = manifest.get("artifactType") or (manifest.get("config") or {}).get("mediaType")
            if kind == artifact_type:
                out.append((str(descriptor["digest"]), manifest))
        return out

    def _referrer_content(self, info: ImageInfo, artifact_type: str) -> Any:
        verified = self._referrers.get((info.image, artifact_type))
        for digest, manifest in self._referrers_of(info, artifact_type):
            if verified and digest != verified:
                continue
            layers = manifest.get("layers") or []
            if layers:
                body = self.registry.blob(info.ref.registry, info.ref.repository, layers[0]["digest"], self.deadline)
                try:
                    return json.loads(body)
                except ValueError:
                    raise KyvernoFunctionError(f"failed to get payload: artifact of type {artifact_type} is not "
                                               "JSON") from None
        raise KyvernoFunctionError(f"failed to get payload: artifact of type {artifact_type} not found")


def _as_attestor(value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise KyvernoFunctionError(f"an attestor must be one of the policy's attestors, not {type(value).__name__}")
    return value


def _public_key(spec: Mapping[str, Any]) -> cosign.KeySource:
    keyless = spec.get("keyless")
    if isinstance(keyless, Mapping):
        ctlog: Mapping[str, Any] = spec["ctlog"] if isinstance(spec.get("ctlog"), Mapping) else {}
        if not ctlog.get("insecureIgnoreSCT"):
            raise cosign.SignatureError("keyless verification of the certificate's SCT needs the certificate "
                                        "transparency log's key and Sigstore's TUF root, which vpol does not reach: "
                                        "set ctlog.insecureIgnoreSCT with the policy's own roots")
        identities = [cosign.KeylessIdentity(str(i.get("issuer") or ""), str(i.get("subject") or ""),
                                             str(i.get("issuerRegExp") or ""), str(i.get("subjectRegExp") or ""))
                      for i in keyless.get("identities") or [] if isinstance(i, Mapping)]
        roots = str(keyless.get("roots") or "")
        return lambda material: cosign.keyless_key(material, roots, identities)
    certificate = spec.get("certificate")
    if isinstance(certificate, Mapping):
        cert: Mapping[str, Any] = certificate["cert"] if isinstance(certificate.get("cert"), Mapping) else {}
        chain: Mapping[str, Any] = certificate["certChain"] if isinstance(certificate.get("certChain"), Mapping) else {}
        if not cert.get("value"):
            raise cosign.SignatureError("the certificate attestor has no certificate")
        return cosign.certificate_key(str(cert["value"]), str(chain.get("value") or ""))
    key = spec.get("key") if isinstance(spec.get("key"), Mapping) else None
    if key is None:
        raise cosign.SignatureError("cosign verifier needs to have one key, keyless or certificate fields set")
    if key.get("kms"):
        raise cosign.SignatureError(f"KMS keys ({key['kms']}) are not supported by vpol")
    if not key.get("data"):
        raise cosign.SignatureError("the key has no data")
    return cosign.PublicKey.from_pem(str(key["data"]), str(key.get("hashAlgorithm") or ""))


def load_image(registry: Registry, image: str, deadline: float | None = None) -> ImageInfo:
    """The image's manifest as its reference resolves now (its config is read when asked for)."""
    ref = imageref.parse(image)
    fetched = registry.manifest(ref.registry, ref.repository, ref.digest or ref.tag, deadline)
    return ImageInfo(image, ref, fetched.digest, fetched.media_type, fetched.json())
