#!/usr/bin/env python3
"""Writes the CRDs of Kyverno's image verification policies from crds/validatingpolicies.yaml.

Two files: imagevalidatingpolicies.yaml and namespacedimagevalidatingpolicies.yaml.

An ImageValidatingPolicy verifies the container images of matching requests: cosign signatures (keys,
certificates, keyless identities), Notary signatures, in-toto and OCI referrer attestations, and pins tags to
digests (docs/internals/image-validating.md holds the facts read from Kyverno 1.19.1). It keeps the frame of a
ValidatingPolicy (matchConstraints, matchConditions, variables, validations, auditAnnotations, failurePolicy,
validationActions, webhookConfiguration, evaluation, autogen), whose schemas are taken from the ValidatingPolicy
CRD so they never drift; the image fields are declared here. Kyverno's served versions: v1, v1beta1 (storage) and
v1alpha1 (deprecated) for the cluster kind, v1 and v1beta1 (storage) for the namespaced twin, with the same spec
and status. tests/unit/crds checks that the files are what this script writes.

Usage: crds/generate-image.py [--check]
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import derived_crd  # beside this script

HERE = Path(__file__).resolve().parent
Schema = dict[str, Any]

IVPOL_TARGET = HERE / "imagevalidatingpolicies.yaml"
IVPOL_HEADER = """\
# ImageValidatingPolicy (policies.kyverno.io): cluster-scoped CEL policies verifying image signatures and attestations.
# Served versions: v1, v1beta1 (storage), v1alpha1 (deprecated). Generated from validatingpolicies.yaml
# by crds/generate-image.py: do not edit by hand.
"""
NIVPOL_TARGET = HERE / "namespacedimagevalidatingpolicies.yaml"
NIVPOL_HEADER = """\
# NamespacedImageValidatingPolicy (policies.kyverno.io): an ImageValidatingPolicy limited to its own namespace.
# Served versions: v1, v1beta1 (storage). Generated from validatingpolicies.yaml by
# crds/generate-image.py: do not edit by hand.
"""


def _string(description: str, **more: Any) -> Schema:
    return {"type": "string", "description": description, **more}


def _string_map(description: str) -> Schema:
    return {"type": "object", "description": description, "additionalProperties": {"type": "string"}}


def _string_or_expression(description: str) -> Schema:
    """Kyverno's StringOrExpression: a literal ``value`` or a CEL ``expression`` giving the string."""
    return {
        "type": "object", "description": description,
        "oneOf": [{"required": ["value"]}, {"required": ["expression"]}],
        "properties": {
            "value": _string("The value itself."),
            "expression": _string("A CEL expression returning the value as a string (evaluated with the "
                                  "policy's variables)."),
        },
    }


def _named(description: str, expression: str) -> Schema:
    return {
        "type": "array", "description": description,
        "items": {"type": "object", "required": ["name", "expression"],
                  "properties": {"name": _string("The name the entry is reached by."),
                                 "expression": _string(expression)}},
    }


def _cosign() -> Schema:
    identity = {
        "type": "object", "description": "One accepted signer of a keyless signature.",
        "properties": {
            "issuer": _string("The OIDC issuer the certificate must name exactly."),
            "subject": _string("The subject (e-mail, URI) the certificate must name exactly."),
            "issuerRegExp": _string("A regular expression the issuer must match."),
            "subjectRegExp": _string("A regular expression the subject must match."),
            "subjectExpression": _string("Declared by Kyverno's API but not used by its verifier."),
        },
    }
    return {
        "type": "object", "description": "A cosign attestor: exactly one of key, keyless or certificate says who "
                                         "signed.",
        "properties": {
            "key": {"type": "object", "description": "A public key.",
                    "properties": {
                        "data": _string("The PEM-encoded public key."),
                        "kms": _string("A KMS reference (for example gcpkms://...) holding the key."),
                        "hashAlgorithm": _string("The signature's digest: sha224, sha256 (the default), sha384 "
                                                 "or sha512."),
                        "expression": _string("A CEL expression returning the PEM-encoded key."),
                    }},
            "keyless": {"type": "object", "description": "Fulcio-issued certificates bound to OIDC identities.",
                        "required": ["identities"],
                        "properties": {
                            "identities": {"type": "array", "description": "Signers accepted; any may match.",
                                           "items": identity},
                            "roots": _string("PEM certificates of the Fulcio roots (default: the public "
                                             "Sigstore roots, read through TUF)."),
                            "additionalExtensions": _string_map(
                                "Certificate extensions that must have these values."),
                        }},
            "certificate": {"type": "object", "description": "A signing certificate and its chain.",
                            "properties": {
                                "cert": _string_or_expression("The PEM-encoded signing certificate."),
                                "certChain": _string_or_expression("The PEM-encoded chain up to its root."),
                            }},
            "source": {"type": "object", "description": "Where the signatures are stored, when not beside the "
                                                       "image.",
                       "properties": {
                           "repository": _string("The repository holding the signatures."),
                           "tagPrefix": _string("A prefix of the signature tags."),
                           "PullSecrets": {
                               "type": "array", "description": "Secrets to read that repository with.",
                               "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                               "items": {"type": "object", "x-kubernetes-map-type": "atomic",
                                         "properties": {"name": _string("The Secret's name.", default="")}},
                           },
                       }},
            "ctlog": {"type": "object", "description": "Transparency log and certificate transparency settings.",
                      "properties": {
                          "url": _string("The Rekor server (default: the public instance)."),
                          "rekorPubKey": _string("The PEM public key of the Rekor log."),
                          "ctLogPubKey": _string("The PEM public key of the certificate transparency log."),
                          "tsaCertChain": _string("The PEM chain of a timestamp authority."),
                          "insecureIgnoreTlog": {"type": "boolean",
                                                 "description": "Do not require a transparency log entry."},
                          "insecureIgnoreSCT": {"type": "boolean",
                                                "description": "Do not require a signed certificate timestamp."},
                      }},
            "tuf": {"type": "object", "description": "Where Sigstore's trust material is read from.",
                    "properties": {
                        "root": {"type": "object", "description": "The TUF root to start from.",
                                 "properties": {"path": _string("A file holding the root."),
                                                "data": _string("The root, base64-encoded.")}},
                        "mirror": _string("The TUF repository's URL."),
                    }},
            "annotations": _string_map("Annotations every signature's payload must carry with these values."),
            "trustedRoot": _string_or_expression("A Sigstore TrustedRoot document (JSON); it takes precedence "
                                                 "over tuf."),
        },
    }


def _attestor() -> Schema:
    return {
        "type": "object", "description": "Who must have signed: a cosign or a Notary identity.",
        "required": ["name"],
        "oneOf": [{"required": ["cosign"]}, {"required": ["notary"]}],
        "properties": {
            "name": _string("The attestor's name, reached in CEL as attestors.<name>."),
            "cosign": _cosign(),
            "notary": {"type": "object", "description": "A Notary attestor.",
                       "properties": {
                           "certs": _string_or_expression("PEM certificates of the signing roots."),
                           "tsaCerts": _string_or_expression("PEM certificates of the timestamp authorities."),
                       }},
        },
    }


def _attestation() -> Schema:
    def typed(description: str) -> Schema:
        return {"type": "object", "description": description, "required": ["type"],
                "properties": {"type": _string("The predicate type (in-toto) or artifact type (referrer).")}}
    return {
        "type": "object", "description": "A signed statement about the image that validations can verify and read.",
        "required": ["name"],
        "properties": {
            "name": _string("The attestation's name, reached in CEL as attestations.<name>."),
            "intoto": typed("An in-toto attestation (cosign attest), identified by its predicate type."),
            "referrer": typed("An OCI 1.1 referrer artifact (for example a Notary-signed SBOM), identified by its "
                              "artifact type."),
        },
    }


def _validation_configurations() -> Schema:
    def switch(description: str) -> Schema:
        return {"type": "boolean", "default": True, "description": description}
    return {
        "type": "object", "default": {},
        "description": "What is required of the images besides the validations.",
        "properties": {
            "mutateDigest": switch("Pin image tags to the digests the registry resolves, at admission. Defaults "
                                   "to true."),
            "verifyDigest": switch("Fail images that are not referenced by digest. Defaults to true."),
            "required": switch("Fail images that no policy of the request verified (a signature or attestation "
                               "check that passed). Defaults to true."),
        },
    }


def _credentials() -> Schema:
    return {
        "type": "object", "description": "How the registries are read.",
        "properties": {
            "allowInsecureRegistry": {"type": "boolean",
                                      "description": "Allow plain HTTP and unverified TLS to registries."},
            "providers": {"type": "array", "description": "Cloud credential helpers to use.",
                          "items": {"type": "string", "enum": ["default", "amazon", "azure", "google", "github"]}},
            "secrets": {"type": "array", "description": "Image pull Secrets (docker config JSON), in the operator's "
                                                        "namespace.",
                        "items": {"type": "string"}},
        },
    }


def _ivpol_spec(vp_spec: Schema) -> Schema:
    props = vp_spec["properties"]
    out: Schema = {key: copy.deepcopy(props[key])
                   for key in ("failurePolicy", "validationActions", "auditAnnotations", "webhookConfiguration",
                               "evaluation")}
    out["matchConstraints"] = derived_crd.match_constraints(
        props, "Which requests (and, in background scans, which existing objects) the policy checks; a request "
               "must satisfy every part.")
    out["matchConditions"] = derived_crd.conditions(
        props, "CEL conditions a matched request must meet. All must be true; any false skips the policy.",
        "CEL expression returning bool, with object, oldObject, request and namespaceObject available.")
    out["variables"] = derived_crd.variables(
        props, "Named CEL expressions reachable as variables.<name> from later variables, validations, attestor "
               "expressions and auditAnnotations.")
    out["validations"] = derived_crd.shared(
        props, "validations", "The checks, in order; the first that returns false decides the message.")
    out["validations"]["items"]["properties"]["expression"]["description"] = (
        "CEL expression returning bool: true passes. Besides object, request, variables and the libraries: images "
        "(extractor name to image list), attestors, attestations, verifyImageSignatures(image, [attestors]), "
        "verifyAttestationSignatures(image, attestation, [attestors]), extractPayload(image, attestation) and "
        "getImageData(image).")
    out["matchImageReferences"] = {
        "type": "array",
        "description": "Which images the policy verifies: any entry may match; none given: every image.",
        "items": {"type": "object", "oneOf": [{"required": ["glob"]}, {"required": ["expression"]}],
                  "properties": {"glob": _string("A glob over the image reference (for example "
                                                 "ghcr.io/org/*)."),
                                 "expression": _string("A CEL expression over ref (the image reference) "
                                                       "returning bool.")}},
    }
    out["images"] = _named(
        "Named image lists extracted from the object, reachable as images.<name> (Pods and pod controllers also "
        "get containers, initContainers and ephemeralContainers).",
        "A CEL expression returning a list of image references.")
    out["attestors"] = {"type": "array", "description": "The identities signatures are checked against.",
                        "items": _attestor()}
    out["attestations"] = {"type": "array", "description": "Attestations the validations can verify and read.",
                           "items": _attestation()}
    out["credentials"] = _credentials()
    out["validationConfigurations"] = _validation_configurations()
    out["autogen"] = {"type": "object", "description": "Rules derived for pod controllers.",
                      "properties": {"podControllers": copy.deepcopy(props["autogen"]["properties"]
                                                                     ["podControllers"])}}
    return {
        "type": "object",
        "description": "Which requests and images the policy checks, who must have signed them, and the checks.",
        "required": ["attestors", "validations"],
        "properties": dict(sorted(out.items())),
    }


def _ivpol_status(vp_status: Schema) -> Schema:
    config = {"type": "object", "required": ["targets", "spec"],
              "properties": {
                  "targets": {"type": "array", "description": "The kinds the variant applies to.",
                              "items": {"type": "object", "required": ["version", "resource", "kind"],
                                        "properties": {"group": {"type": "string"}, "version": {"type": "string"},
                                                       "resource": {"type": "string"},
                                                       "kind": {"type": "string"}}}},
                  "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                           "description": "The variant's spec."}}}
    return {"type": "object", "description": "The policy's state, written by the operator.",
            "properties": {
                "conditionStatus": derived_crd.condition_status(vp_status),
                "conditions": derived_crd.conditions_copy(vp_status),
                "autogen": {"type": "object", "description": "The variants derived for pod controllers.",
                            "properties": {"configs": {"type": "object", "additionalProperties": config}}},
            }}


def derive_ivpol(source: Schema) -> Schema:
    return derived_crd.derive(
        source, kind="ImageValidatingPolicy", short="ivpol", namespaced=False, spec=_ivpol_spec,
        status=_ivpol_status, columns=[derived_crd.AGE, derived_crd.READY],
        description="An ImageValidatingPolicy verifies the signatures and attestations of the container images "
                    "in the requests it matches, and pins their tags to digests.")


def derive_nivpol(source: Schema) -> Schema:
    return derived_crd.derive(
        source, kind="NamespacedImageValidatingPolicy", short="nivpol", namespaced=True, spec=_ivpol_spec,
        status=_ivpol_status, columns=[derived_crd.AGE, derived_crd.READY],
        description="A NamespacedImageValidatingPolicy verifies the images of its own namespace's requests. Same "
                    "spec as an ImageValidatingPolicy.")


if __name__ == "__main__":
    sys.exit(derived_crd.main(derive_ivpol, IVPOL_TARGET, IVPOL_HEADER, __file__, more=(
        (derive_nivpol, NIVPOL_TARGET, NIVPOL_HEADER),
    )))
