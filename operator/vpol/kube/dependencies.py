"""What the operator needs from the cluster at start-up, checked and said once, in sentences.

The CustomResourceDefinitions it serves and writes (its policy kinds, the
PolicyException and GlobalContextEntry kinds, the wgpolicyk8s.io report kinds) and the permissions
its ServiceAccount must have. A missing piece never stops the operator: the
rest keeps working, the problem is logged once when it appears (and once when
it is fixed), shown in ``/healthz`` (probe ``dependencies``) and in the metric
``vpol_dependency_problem{dependency}``; it is checked again periodically, so
installing a CRD later is picked up without a restart (every 10 s while something
is missing, every minute otherwise). Kopf itself only says
"Unresolved resources cannot be served" for a missing CRD it watches.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubernetes import client
from kubernetes.client.rest import ApiException

from vpol.kube.access import AccessChecker
from vpol.kube.objects import STORAGE_VERSION
from vpol.kube.openapi import HTTPStatusError, get_json
from vpol.policies.registry import KINDS

CRDS_HINT = "kubectl apply --server-side -k crds/"
REPORTS_HINT = "kubectl create -f crds/reports/"
RBAC_HINT = "kubectl apply --server-side -k manifests/operator"


@dataclass(frozen=True)
class Dependency:
    name: str  # stable identifier (metric label)
    group: str
    version: str
    resource: str
    #: What the operator does with it, and how to fix its absence.
    purpose: str
    hint: str
    #: A verb the operator's identity must be allowed (besides the resource existing).
    verb: str = "list"


DEPENDENCIES: tuple[Dependency, ...] = (
    # Every policy kind's CRDs, both variants (vpol.policies.registry).
    *(Dependency(f"crd/{plural}", kind.group, STORAGE_VERSION, plural,
                 f"{name.removesuffix('y')}ies cannot be served", CRDS_HINT)
      for kind in KINDS for plural, name in zip(kind.plurals, kind.kinds)),
    Dependency("crd/policyexceptions", "policies.kyverno.io", "v1alpha1", "policyexceptions",
               "PolicyExceptions are ignored", CRDS_HINT),
    Dependency("crd/globalcontextentries", "kyverno.io", "v2", "globalcontextentries",
               "GlobalContextEntries are not loaded (policies reading globalContext get null)", CRDS_HINT),
    Dependency("crd/policyreports", "wgpolicyk8s.io", "v1alpha2", "policyreports",
               "background scan results cannot be written", REPORTS_HINT, verb="create"),
    Dependency("crd/clusterpolicyreports", "wgpolicyk8s.io", "v1alpha2", "clusterpolicyreports",
               "background scan results of cluster-scoped objects cannot be written", REPORTS_HINT, verb="create"),
    Dependency("rbac/validatingadmissionpolicies", "admissionregistration.k8s.io", "v1",
               "validatingadmissionpolicies", "native ValidatingAdmissionPolicies cannot be generated", RBAC_HINT,
               verb="patch"),
)


def problems(api: client.ApiClient, dependencies: tuple[Dependency, ...] = DEPENDENCIES) -> dict[str, str]:
    """Dependency name -> a sentence saying what is missing, what it breaks and how to fix it."""
    out: dict[str, str] = {}
    served: dict[tuple[str, str], set[str] | None] = {}
    access = AccessChecker(api)
    for dep in dependencies:
        key = (dep.group, dep.version)
        if key not in served:
            served[key] = _served(api, dep.group, dep.version)
        resources = served[key]
        if resources is None or dep.resource not in resources:
            out[dep.name] = (f"the cluster does not serve {dep.group}/{dep.version} {dep.resource}: "
                             f"{dep.purpose}; install it with `{dep.hint}`")
            continue
        try:
            allowed = access.allowed(dep.group, dep.version, dep.resource, dep.verb)
        except ApiException:
            continue  # cannot ask: say nothing rather than guess
        if not allowed:
            out[dep.name] = (f"the operator may not {dep.verb} {dep.group}/{dep.version} {dep.resource}: "
                             f"{dep.purpose}; grant it with `{RBAC_HINT}`")
    return out


def _served(api: client.ApiClient, group: str, version: str) -> set[str] | None:
    """Resource names the API server serves in group/version (None when it does not serve the version)."""
    try:
        data = get_json(api, f"/apis/{group}/{version}")
    except (ApiException, HTTPStatusError) as exc:
        if exc.status == 404:
            return None
        raise
    return {str(r.get("name")) for r in (data or {}).get("resources") or [] if isinstance(r, dict)}
