"""Least privilege, shown: every permission the chart grants (with default values and every variant) is one a
feature of the operator uses, named here rule by rule with the code that needs it; nothing else is granted.

A grant the table does not name fails the test (a new rule must say which feature needs it); so does a table
entry no rendering grants (the table stays true). Secrets: only in the release namespace, only the webhook's own
serving Secret by name (creating it is the one grant RBAC cannot limit by name), and only read access to a
Secret vpol does not manage (webhook.certSecret, cert-manager's). The kinds policies scan, mutate, generate and
delete are the user's choice (rbac.scannedKinds, rbac.mutatedKinds, rbac.generatedKinds, rbac.deletedKinds):
their rules may only read; only patch; only read and write; only read and delete. The last two reach the operator
through aggregated ClusterRoles (vpol-generate, vpol-delete), which the user extends with labelled ClusterRoles.
"""

from __future__ import annotations

from typing import Any

from tests.helm.chart import CHANGED, VARIANTS, Doc, template

CORE, ADMISSION, POLICIES = "", "admissionregistration.k8s.io", "policies.kyverno.io"
POLICY_KINDS = ("validatingpolicies", "namespacedvalidatingpolicies", "mutatingpolicies",
                "namespacedmutatingpolicies")
GENERATED = ("validatingadmissionpolicies", "validatingadmissionpolicybindings", "mutatingadmissionpolicies",
             "mutatingadmissionpolicybindings")
WEBHOOKS = ("validatingwebhookconfigurations", "mutatingwebhookconfigurations")
LIFECYCLE_KINDS = ("generatingpolicies", "namespacedgeneratingpolicies", "deletingpolicies",
                   "namespaceddeletingpolicies", "imagevalidatingpolicies", "namespacedimagevalidatingpolicies")

#: (role, apiGroup, resource, verbs, resourceNames or None): the feature that needs it, and where.
FEATURES: list[tuple[str, str, tuple[str, ...], tuple[str, ...], tuple[str, ...] | None, str]] = [
    ("ClusterRole/vpol-operator", POLICIES, POLICY_KINDS, ("get", "list", "watch"), None,
     "reconciling policies: Kopf's watches, Objects.get_policy/list_policies, the scanner's and webhook's watches"),
    ("ClusterRole/vpol-operator", POLICIES, tuple(f"{k}/status" for k in POLICY_KINDS), ("patch",), None,
     "status conditions: Objects.patch_policy_status (vpol.controller.reconcile)"),
    ("ClusterRole/vpol-operator", POLICIES, LIFECYCLE_KINDS, ("get", "list", "watch"), None,
     "GeneratingPolicies, DeletingPolicies, ImageValidatingPolicies: their watches, "
     "Objects.get_policy/list_policies of their plurals"),
    ("ClusterRole/vpol-operator", POLICIES, tuple(f"{k}/status" for k in LIFECYCLE_KINDS), ("patch",), None,
     "their status (conditions, a DeletingPolicy's lastExecutionTime): Objects.patch_policy_status"),
    ("ClusterRole/vpol-operator", POLICIES, ("policyexceptions",), ("get", "list", "watch"), None,
     "PolicyExceptions: Objects.list_exceptions, the webhook's watch (AdmissionPolicies)"),
    ("ClusterRole/vpol-operator", "kyverno.io", ("globalcontextentries",), ("get", "list", "watch"), None,
     "GlobalContextEntries: vpol.controller.global_context watches them"),
    ("ClusterRole/vpol-operator", "kyverno.io", ("globalcontextentries/status",), ("patch",), None,
     "GlobalContextEntry status: vpol.kube.global_context.patch_status"),
    ("ClusterRole/vpol-operator", ADMISSION, GENERATED, ("get", "list", "watch", "create", "patch", "delete"), None,
     "native VAPs/MAPs and the enforcement probe: server-side apply (patch, and create for a new object), the "
     "watches of generated objects, Objects.list_generated/get_vap/delete"),
    ("ClusterRole/vpol-operator", ADMISSION, WEBHOOKS, ("get", "list", "watch", "create", "patch", "delete"), None,
     "vpol's webhook configurations: the configurators apply, read and delete them; Kopf watches them"),
    ("ClusterRole/vpol-operator", CORE, ("namespaces",), ("get", "list", "watch"), None,
     "namespaceObject and namespace selectors: the webhook's and the scanner's namespace watches"),
    ("ClusterRole/vpol-operator", "rbac.authorization.k8s.io", ("clusterroles",), ("get",), ("vpol-operator",),
     "--owner-clusterrole: the webhook configurations' owner (Objects.cluster_role_reference)"),
    ("ClusterRole/vpol-operator", "apiextensions.k8s.io", ("customresourcedefinitions",), ("get", "list", "watch"),
     None, "the schemas of custom resources (type checking) and the dependency check of vpol's CRDs"),
    ("ClusterRole/vpol-operator", CORE, ("events",), ("create", "patch"), None,
     "PolicyViolation Events (vpol.controller.events) and Kopf's own"),
    ("ClusterRole/vpol-operator", "events.k8s.io", ("events",), ("create", "patch"), None,
     "Events through the events.k8s.io API (Kopf's posting)"),
    ("ClusterRole/vpol-operator", "kopf.dev", ("clusterkopfpeerings",), ("get", "list", "watch", "patch", "create"),
     None, "Kopf peering between replicas (--peering)"),
    ("ClusterRole/vpol-operator", "wgpolicyk8s.io", ("policyreports", "clusterpolicyreports"),
     ("get", "list", "watch", "create", "update", "patch", "delete"), None,
     "background scan reports: vpol.kube.reports creates, replaces (PUT), applies, lists and deletes them"),
    ("ClusterRole/vpol-operator", "apiregistration.k8s.io", ("apiservices",), ("get",), ("v1alpha2.wgpolicyk8s.io",),
     "whether another API server serves the reports (Kyverno's reports-server): vpol.kube.reports reads them back "
     "namespace by namespace then"),
    ("ClusterRole/vpol-operator", "authorization.k8s.io", ("selfsubjectaccessreviews",), ("create",), None,
     "RBACPermissionsGranted: vpol.kube.access.AccessChecker"),
    ("Role/vpol-scanner-lease", "coordination.k8s.io", ("leases",), ("get", "create", "update"), None,
     "the scanner Lease (vpol.kube.lease): one replica scans and writes the webhook configurations"),
    ("Role/vpol-webhook-tls", CORE, ("secrets",), ("create",), None,
     "the webhook's own serving certificate, created when missing (vpol.kube.webhook_tls)"),
    ("Role/vpol-webhook-tls", CORE, ("secrets",), ("get", "update"), ("vpol-webhook-tls",),
     "the webhook's own serving certificate, read and renewed (vpol.kube.webhook_tls)"),
    ("Role/vpol-webhook-tls", CORE, ("secrets",), ("get",), ("corp-webhook-tls",),
     "webhook.certSecret: the serving certificate vpol only reads (the variant's name)"),
    ("Role/vpol-webhook-tls", CORE, ("secrets",), ("get",), ("vpol-webhook-cert",),
     "cert-manager's serving certificate, only read"),
    ("Role/vpol-registry-secrets", CORE, ("secrets",), ("get",), ("ghcr-pull", "private-registry"),
     "rbac.registrySecrets: the image pull Secrets ImageValidatingPolicies name, only read "
     "(vpol.controller.registry_credentials)"),
    ("Role/vpol-enforcement-probe", CORE, ("configmaps",), ("create",), None,
     "enforcement probes: dry-run creates of probe ConfigMaps (vpol.controller.enforcement_proof)"),
]
#: Non-resource URLs: discovery and OpenAPI (vpol.kube.openapi), the version.
URLS = {"/api", "/api/*", "/apis", "/apis/*", "/openapi/v3", "/openapi/v3/*", "/version"}
#: Roles whose resources are the user's choice, and the only verbs they may grant: reading (scans), patching
#: (mutateExisting), writing downstreams (generation: reading, creating, replacing, applying, deleting them, and
#: watching synchronized ones), deleting (DeletingPolicies list what they match and delete it).
USER_KINDS = {"ClusterRole/vpol-scanned-kinds": {"get", "list", "watch"}, "ClusterRole/vpol-mutated-kinds": {"patch"},
              "ClusterRole/vpol-generated-kinds": {"get", "list", "watch", "create", "update", "patch", "delete"},
              "ClusterRole/vpol-deleted-kinds": {"get", "list", "watch", "delete"}}
#: Aggregated ClusterRoles (no rules of their own: the API server fills them from the ClusterRoles carrying the
#: label) and the label; the user-kinds role that carries it by default, if any.
AGGREGATED = {"vpol-global-context": ("vpol.kyverno.io/aggregate-to-global-context", None),
              "vpol-generate": ("vpol.kyverno.io/aggregate-to-generate", "vpol-generated-kinds"),
              "vpol-delete": ("vpol.kyverno.io/aggregate-to-delete", "vpol-deleted-kinds")}


def grants(docs: list[Doc]) -> set[tuple[str, str, str, str, str | None]]:
    """Every (role, apiGroup, resource, verb, resourceName) the rendered Roles and ClusterRoles grant."""
    out: set[tuple[str, str, str, str, str | None]] = set()
    for doc in docs:
        if doc["kind"] not in ("Role", "ClusterRole"):
            continue
        role = f"{doc['kind']}/{doc['metadata']['name']}"
        for rule in doc.get("rules") or []:
            if "nonResourceURLs" in rule:
                assert role == "ClusterRole/vpol-operator" and set(rule["nonResourceURLs"]) <= URLS and \
                    rule["verbs"] == ["get"], (role, rule)
                continue
            names: list[Any] = rule.get("resourceNames") or [None]
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        out.update((role, group, resource, verb, name) for name in names)
    return out


def allowed() -> set[tuple[str, str, str, str, str | None]]:
    out: set[tuple[str, str, str, str, str | None]] = set()
    for role, group, resources, verbs, names, _why in FEATURES:
        for resource in resources:
            out.update((role, group, resource, verb, name) for verb in verbs for name in (names or (None,)))
    return out


def render_all() -> dict[str, list[Doc]]:
    """The chart with its defaults, every value changed, each variant, and cert-manager."""
    return {"defaults": template(), "changed": template([CHANGED]),
            **{name: template([path]) for name, path in VARIANTS.items()},
            "cert-manager": template(sets=["webhook.certManager.enabled=true"])}


def test_every_grant_is_a_features_and_secrets_are_narrow() -> None:
    renderings = render_all()
    table = allowed()
    seen: set[tuple[str, str, str, str, str | None]] = set()
    for name, docs in renderings.items():
        for grant in grants(docs):
            role, group, resource, verb, _name = grant
            if role in USER_KINDS:
                assert verb in USER_KINDS[role] and resource != "secrets", (name, grant)
                continue
            assert grant in table, f"{name}: {grant} is granted but no feature uses it (add it to FEATURES, or drop it)"
            seen.add(grant)
            if resource == "secrets":
                assert role.startswith("Role/") and (verb == "create" or _name is not None), (name, grant)
        roles = {f"{d['kind']}/{d['metadata']['name']}": d for d in docs if d["kind"] in ("Role", "ClusterRole")}
        for role, doc in roles.items():
            if role.startswith("Role/"):
                assert doc["metadata"]["namespace"] == "vpol-system", role
    assert not table - seen, f"FEATURES lists what nothing grants: {sorted(table - seen)}"
    # Each variant grants the Secret access it needs and no more.
    def secrets(docs: list[Doc]) -> set[tuple[str, str | None]]:
        return {(verb, n) for _r, _g, res, verb, n in grants(docs) if res == "secrets"}
    assert secrets(renderings["defaults"]) == {("create", None), ("get", "vpol-webhook-tls"),
                                               ("update", "vpol-webhook-tls")}
    assert secrets(renderings["cert-secret"]) == {("get", "corp-webhook-tls")}
    assert secrets(renderings["cert-manager"]) == {("get", "vpol-webhook-cert")}
    assert secrets(renderings["webhook-off"]) == set()


def test_every_role_reaches_the_operator_and_only_through_its_binding_or_aggregation() -> None:
    """Each Role and ClusterRole is bound to vpol's ServiceAccount, or (vpol-generated-kinds, vpol-deleted-kinds)
    carries the label of an aggregated ClusterRole that is; aggregated roles have no rules of their own (what the
    API server aggregates is the user's choice: USER_KINDS and labelled ClusterRoles); nothing is bound twice."""
    subject = [{"kind": "ServiceAccount", "name": "vpol", "namespace": "vpol-system"}]
    for name, docs in render_all().items():
        roles = {f"{d['kind']}/{d['metadata']['name']}": d for d in docs if d["kind"] in ("Role", "ClusterRole")}
        bound: list[str] = []
        for binding in (d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
            assert binding["subjects"] == subject, (name, binding["metadata"]["name"])
            bound.append(f"{binding['roleRef']['kind']}/{binding['roleRef']['name']}")
        assert len(bound) == len(set(bound)) and set(bound) <= set(roles), (name, bound)
        for aggregated, (label, member) in AGGREGATED.items():
            doc = roles[f"ClusterRole/{aggregated}"]
            assert doc["aggregationRule"] == {"clusterRoleSelectors": [{"matchLabels": {label: "true"}}]}, aggregated
            assert not doc.get("rules") and f"ClusterRole/{aggregated}" in bound, (name, aggregated)
            if member is not None:
                assert roles[f"ClusterRole/{member}"]["metadata"]["labels"][label] == "true", (name, member)
        members = {f"ClusterRole/{m}" for _l, m in AGGREGATED.values() if m is not None}
        for role, doc in roles.items():
            labels = doc["metadata"].get("labels") or {}
            aggregated_into = [a for a, (label, _m) in AGGREGATED.items() if labels.get(label) == "true"]
            if role in members:
                assert len(aggregated_into) == 1 and role not in bound, (name, role)
            else:
                assert not aggregated_into and role in bound, (name, role)
                assert ("aggregationRule" in doc) == (doc["metadata"]["name"] in AGGREGATED), (name, role)


def test_deleting_policies_delete_nothing_by_default() -> None:
    """Least privilege: a DeletingPolicy deletes only what the cluster admin grants (rbac.deletedKinds, or a
    ClusterRole labelled vpol.kyverno.io/aggregate-to-delete); generation writes no Secrets by default."""
    docs = template()
    assert {g for g in grants(docs) if g[0] == "ClusterRole/vpol-deleted-kinds"} == set()
    assert not any(res == "secrets" for role, _g, res, _v, _n in grants(docs) if role.startswith("ClusterRole/"))
