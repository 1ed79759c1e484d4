"""Admission requests in, admission decisions out (pure).

The webhook's door into the same engine ``vpol apply`` and the scanner use:
:func:`subject_for_request` turns an ``admission.k8s.io/v1`` AdmissionRequest
into a :class:`~vpol.engine.request.Subject`; the engine evaluates it;
:func:`decide` turns the policies' results into one decision the way the API
server does for ValidatingAdmissionPolicies (``validationActions`` per policy):

- a failing validation (``fail``, or ``warn`` from ``policies.kyverno.io/scored:
  "false"``, which only changes reports) is a *violation*;
- an evaluation ``error`` is a violation too when the policy's failurePolicy is
  ``Fail`` and is ignored when it is ``Ignore``;
- each violation goes through the policy's validationActions: ``Deny`` denies
  (message ``Policy <key> failed: <message>``, all denials joined), ``Warn``
  adds a warning, ``Audit`` adds an audit annotation;
- ``pass`` and ``skip`` allow. Audit annotations of the policy
  (``auditAnnotations``) are returned whatever the outcome.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import jsonpatch  # type: ignore[import-untyped]

from vpol.engine.evaluate import ERROR, FAIL, PASS, SKIP, WARN, Result
from vpol.engine.request import ResourceType, Subject
from vpol.model.policy import ACTION_AUDIT, ACTION_DENY, ACTION_WARN, PolicySpec

ALLOW, DENY, WARNED, AUDIT, ERRORED = "allow", "deny", "warn", "audit", "error"


def subject_for_request(request: Mapping[str, Any], *, namespaced: bool | None = None,
                        namespace_object: dict[str, Any] | None = None) -> Subject:
    """The subject an AdmissionRequest is about.

    ``namespaced``: whether the resource is namespaced (from discovery); when
    unknown, a request with a namespace is taken as namespaced.
    """
    kind = request.get("kind") or {}
    resource = request.get("resource") or {}
    ns = str(request.get("namespace") or "")
    rtype = ResourceType(
        group=str(kind.get("group") or ""),
        version=str(kind.get("version") or ""),
        resource=str(resource.get("resource") or ""),
        kind=str(kind.get("kind") or ""),
        namespaced=bool(ns) if namespaced is None else namespaced,
        subresource=str(request.get("subResource") or ""),
    )
    obj = request.get("object")
    old = request.get("oldObject")
    return Subject(
        type=rtype,
        object=obj if isinstance(obj, dict) else None,
        old_object=old if isinstance(old, dict) else None,
        operation=str(request.get("operation") or ""),
        namespace_object=namespace_object if rtype.namespaced else None,
        user_info=dict(request.get("userInfo") or {}),
        dry_run=bool(request.get("dryRun")),
        request_name=str(request.get("name") or ""),
        request_namespace=ns,
    )


@dataclass
class Decision:
    allowed: bool = True
    #: The denial message (empty when allowed).
    message: str = ""
    warnings: list[str] = field(default_factory=list)
    audit_annotations: dict[str, str] = field(default_factory=dict)
    #: (policy key, allow|deny|warn|audit|error) per evaluated policy, for metrics.
    outcomes: list[tuple[str, str]] = field(default_factory=list)
    #: (policy key, fail|warn|error, message) of every policy whose result was not a pass, for events.
    violations: list[tuple[str, str, str]] = field(default_factory=list)


def _annotation_key(policy_key: str, key: str) -> str:
    # Webhook audit annotation keys must be valid label names once the API server
    # prefixes them with the webhook's name: no '/' of our own.
    return f"{policy_key.replace('/', '.')}.{key}"[:63].strip(".-_")


class DecidingPolicy(Protocol):
    """What :func:`decide` reads of a policy with validations (a ValidatingPolicy, an ImageValidatingPolicy): its key,
    failurePolicy and validationActions."""

    @property
    def key(self) -> str: ...
    @property
    def spec(self) -> PolicySpec: ...


def decide(results: Sequence[Result], policies: Mapping[str, DecidingPolicy]) -> Decision:
    """One decision from the results of the policies (keyed by policy key) that matched."""
    decision = Decision()
    denials: list[str] = []
    for result in results:
        policy = policies.get(result.policy)
        if policy is None:
            continue
        if (result.result == PASS or result.result == SKIP) and not result.properties:
            decision.outcomes.append((policy.key, ALLOW))  # what the steps below give it, without them
            continue
        for key, value in sorted(result.properties.items()):
            decision.audit_annotations[_annotation_key(policy.key, key)] = value
        if result.result in (FAIL, WARN, ERROR):
            decision.violations.append((policy.key, result.result, result.message))
        violated = result.result in (FAIL, WARN) or (result.result == ERROR and
                                                      policy.spec.failure_policy == "Fail")
        if not violated:
            decision.outcomes.append((policy.key, ERRORED if result.result == ERROR else ALLOW))
            continue
        text = f"Policy {policy.key} failed: {result.message}" if result.result != ERROR else \
            f"Policy {policy.key} error: {result.message}"
        actions = policy.spec.validation_actions
        outcome = ERRORED if result.result == ERROR else ALLOW
        if ACTION_DENY in actions:
            denials.append(text)
            outcome = ERRORED if result.result == ERROR else DENY
        if ACTION_WARN in actions:
            decision.warnings.append(text)
            outcome = outcome if outcome != ALLOW else WARNED
        if ACTION_AUDIT in actions:
            decision.audit_annotations[_annotation_key(policy.key, "validation_failure")] = result.message
            outcome = outcome if outcome != ALLOW else AUDIT
        decision.outcomes.append((policy.key, outcome))
    if denials:
        decision.allowed = False
        decision.message = "; ".join(denials)
    return decision


def review_response(uid: str, decision: Decision) -> dict[str, Any]:
    """The AdmissionReview (v1) answering request ``uid``."""
    response: dict[str, Any] = {"uid": uid, "allowed": decision.allowed}
    if not decision.allowed:
        response["status"] = {"code": 403, "reason": "Forbidden", "message": decision.message}
    if decision.warnings:
        response["warnings"] = list(decision.warnings)
    if decision.audit_annotations:
        response["auditAnnotations"] = dict(decision.audit_annotations)
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


def failure_response(uid: str, message: str, failure_policy: str) -> dict[str, Any]:
    """The answer when evaluation itself failed (deadline, worker gone): the failurePolicy decides."""
    if failure_policy == "Ignore":
        return review_response(uid, Decision(allowed=True, warnings=[]))
    return review_response(uid, Decision(allowed=False, message=f"vpol could not evaluate the request: {message}"))


def mutation_response(uid: str, original: Mapping[str, Any] | None, mutated: Mapping[str, Any] | None,
                      results: Sequence[Result], failure_policies: Mapping[str, str]) -> dict[str, Any]:
    """The answer of the mutating webhook: the object as the MutatingPolicies made it, as a JSON patch.

    A policy that errored follows its failurePolicy, as a MutatingAdmissionPolicy does: ``Fail`` denies the
    request, ``Ignore`` drops that policy's changes (the engine already left the object as it was).
    """
    failed = [r for r in results if r.result == "error" and failure_policies.get(r.policy, "Fail") == "Fail"]
    if failed:
        message = "; ".join(f"policy {r.policy}: {r.message}" for r in failed)
        return review_response(uid, Decision(allowed=False, message=f"mutation failed: {message}"))
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    if original is not None and mutated is not None and mutated != original:
        patch = jsonpatch.make_patch(dict(original), dict(mutated)).patch
        if patch:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
