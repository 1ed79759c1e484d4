"""matchConstraints: does a policy apply to a subject at all?

Follows the API server's matching for ValidatingAdmissionPolicy
(k8s.io/apiserver .../policy/matching): resource rules with groups,
versions, resources (incl. ``*``, ``x/*``, ``*/sub``), operations,
resourceNames and scope; exclusions win; namespaceSelector is matched
against the namespace's labels (or a Namespace's own), objectSelector
against the object or the old object.
"""

from __future__ import annotations

from typing import Any

from vpol.engine.request import Subject
from vpol.model.policy import LabelSelector, MatchResources, Rule


def selector_matches(selector: LabelSelector | None, labels: dict[str, Any]) -> bool:
    """metav1.LabelSelector semantics; a missing or empty selector matches everything."""
    if selector is None or selector.empty:
        return True
    for key, value in selector.match_labels:
        if labels.get(key) != value:
            return False
    for req in selector.match_expressions:
        present = req.key in labels
        if req.operator == "In" and not (present and str(labels[req.key]) in req.values):
            return False
        if req.operator == "NotIn" and present and str(labels[req.key]) in req.values:
            return False
        if req.operator == "Exists" and not present:
            return False
        if req.operator == "DoesNotExist" and present:
            return False
    return True


def _resource_matches(patterns: tuple[str, ...], resource: str, subresource: str) -> bool:
    for pattern in patterns:
        res, _, sub = pattern.partition("/")
        if pattern == "*/*":
            return True
        if pattern == "*" and not subresource:
            return True
        if res == "*" and sub == subresource and subresource:
            return True
        if res == resource and (sub == "*" or sub == subresource):
            return True
    return False


def rule_matches(rule: Rule, subject: Subject) -> bool:
    t = subject.type
    if "*" not in rule.operations and subject.operation not in rule.operations:
        return False
    if "*" not in rule.api_groups and t.group not in rule.api_groups:
        return False
    if "*" not in rule.api_versions and t.version not in rule.api_versions:
        return False
    if not _resource_matches(rule.resources, t.resource, t.subresource):
        return False
    if rule.scope == "Cluster" and t.namespaced:
        return False
    if rule.scope == "Namespaced" and not t.namespaced:
        return False
    if rule.resource_names and subject.name not in rule.resource_names:
        return False
    return True


def _namespace_labels(subject: Subject) -> dict[str, Any] | None:
    if subject.type.kind == "Namespace" and subject.type.group == "":
        return subject.labels
    if not subject.type.namespaced:
        return None
    ns = subject.namespace_object
    if ns is None:
        # A namespace nobody described: the label the API server puts on every namespace.
        return {"kubernetes.io/metadata.name": subject.namespace} if subject.namespace else {}
    labels = (ns.get("metadata") or {}).get("labels") if isinstance(ns, dict) else None
    return labels if isinstance(labels, dict) else {}


def selectors_match(match: MatchResources, subject: Subject) -> bool:
    """The namespace and object selectors of ``match`` hold for ``subject``."""
    if match.namespace_selector is not None and not match.namespace_selector.empty:
        labels = _namespace_labels(subject)
        # Cluster-scoped objects (other than Namespaces) always pass the namespace selector.
        if labels is not None and not selector_matches(match.namespace_selector, labels):
            return False
    if match.object_selector is not None and not match.object_selector.empty:
        candidates = [o for o in (subject.object, subject.old_object) if isinstance(o, dict)]
        if not any(
            selector_matches(match.object_selector, ((o.get("metadata") or {}).get("labels") or {}))
            for o in candidates
        ):
            return False
    return True


def rules_match(match: MatchResources, subject: Subject) -> bool:
    """A resource rule of ``match`` selects ``subject`` and no excluded one does. Without ``resourceNames`` in
    its rules, the answer depends only on the subject's type and operation."""
    if not any(rule_matches(rule, subject) for rule in match.resource_rules):
        return False
    return not any(rule_matches(rule, subject) for rule in match.exclude_resource_rules)


def names_resources(match: MatchResources) -> bool:
    """Whether a rule of ``match`` names objects (``resourceNames``): then more than the type decides."""
    return any(rule.resource_names for rule in (*match.resource_rules, *match.exclude_resource_rules))


def constraints_match(match: MatchResources | None, subject: Subject) -> bool:
    """True when ``subject`` is selected by ``match`` (None matches nothing)."""
    if match is None:
        return False
    return selectors_match(match, subject) and rules_match(match, subject)
