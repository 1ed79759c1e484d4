"""Building evaluation subjects from plain Kubernetes objects.

The resource type of an object comes from API discovery (the bundled
built-in table, plus CRDs the caller knows about). For kinds nobody
declared, we fall back to Kubernetes' own guess for a resource name (lower
case, plural) and take the object's namespace as the scope, and say so.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from vpol.cel.offline_backend import guess_plural
from vpol.engine.request import ResourceType, Subject

Resolver = Callable[[str, str], ResourceType | None]


def resource_type(obj: Mapping[str, Any], resolve: Resolver | None = None) -> ResourceType:
    api_version = str(obj.get("apiVersion", ""))
    kind = str(obj.get("kind", ""))
    group, _, version = api_version.rpartition("/")
    found = resolve(api_version, kind) if resolve else None
    if found is not None:
        return found
    md = obj.get("metadata")
    namespace = md.get("namespace") if isinstance(md, dict) else None
    return ResourceType(group=group, version=version, resource=guess_plural(kind), kind=kind,
                        namespaced=bool(namespace))


def namespace_object(name: str, known: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The Namespace object for ``name``: the one given, else a minimal one.

    The API server labels every namespace with ``kubernetes.io/metadata.name``;
    the synthetic one carries that label too, so selectors behave as in a cluster.
    """
    if name in known:
        ns = dict(known[name])
        md = dict(ns.get("metadata") or {})
        labels = dict(md.get("labels") or {})
        labels.setdefault("kubernetes.io/metadata.name", name)
        md["labels"] = labels
        ns["metadata"] = md
        return ns
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}}}


def subject_for(obj: dict[str, Any], *, operation: str = "CREATE", resolve: Resolver | None = None,
                namespaces: Mapping[str, Mapping[str, Any]] | None = None,
                old_object: dict[str, Any] | None = None, user_info: dict[str, Any] | None = None,
                default_namespace: str = "default") -> Subject:
    """A subject for ``obj`` as the API server would see it under ``operation``.

    DELETE requests carry the object as ``oldObject`` and a null ``object``.
    Namespaced objects without a namespace land in ``default_namespace``,
    as ``kubectl apply`` would put them.
    """
    rtype = resource_type(obj, resolve)
    if rtype.namespaced and not (obj.get("metadata") or {}).get("namespace"):
        obj = {**obj, "metadata": {**(obj.get("metadata") or {}), "namespace": default_namespace}}
    ns_name = (obj.get("metadata") or {}).get("namespace", "") if rtype.namespaced else ""
    # A namespace nobody described (offline, without a values file naming it) is null to CEL, as in Kyverno's
    # CLI; matching still sees the label the API server puts on every namespace (vpol.engine.match).
    ns_obj = namespace_object(ns_name, namespaces) if ns_name and namespaces and ns_name in namespaces else None
    if operation == "DELETE":
        return Subject(type=rtype, object=None, old_object=obj, operation=operation, namespace_object=ns_obj,
                       user_info=user_info or {})
    return Subject(type=rtype, object=obj, old_object=old_object, operation=operation, namespace_object=ns_obj,
                   user_info=user_info or {})


def json_subject(payload: Any) -> Subject:
    """A subject for a JSON payload (JSON mode)."""
    return Subject(type=ResourceType("", "", "", ""), object=payload, json_payload=True)
