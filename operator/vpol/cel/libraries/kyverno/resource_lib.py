"""Kyverno's resource library: the ``resource`` variable, served by the backend.

Members (each also in camel case: ``get``, ``list``, ``post``, ``toGVR``):

* ``resource.Get(apiVersion, resource, namespace, name)`` -> the object (a
  map), or null when it does not exist (Kyverno's answer to NotFound);
  ``namespace`` is ``""`` for cluster-scoped resources. Variants take a
  ``GroupVersionResource`` from ``ToGVR`` instead of ``apiVersion, resource``,
  and/or a trailing list of subresources (asked of the backend as
  ``resource/sub``).
* ``resource.List(apiVersion, resource, namespace)`` -> ``{"items": [...]}``
  (``""`` lists every namespace); an extra ``map(string, string)`` keeps only
  the items whose labels contain those pairs. GVR variants as for ``Get``.
* ``resource.Post(apiVersion, resource, namespace, body)`` and
  ``resource.Post(apiVersion, resource, body)`` -> the created object.
* ``resource.ToGVR(apiVersion, kind)`` -> an opaque GroupVersionResource.

Failures are CEL errors worded like Kyverno's: ``failed to get resource``,
``failed to list resource``, ``failed to create resource``, ``failed to map
kind to resource``, preceded by the call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cel_expr_python import cel

from vpol.cel import backend, types
from vpol.cel.declare import STRING, STRING_LIST, STRING_MAP, STRING_STRING_MAP, message
from vpol.cel.libraries.kyverno.backend_call import call, describe
from vpol.cel.libraries.kyverno.declarations import Fn

LIBRARY = "kyverno.resource"

RESOURCE_TYPE, ResourceContext = types.opaque_type("vpol.kyverno.ResourceContext", {})
GVR_TYPE, GroupVersionResource = types.opaque_type(
    "vpol.kyverno.GroupVersionResource", {"group": "string", "version": "string", "resource": "string"}
)
_CTX = message(RESOURCE_TYPE, ResourceContext)
_GVR = message(GVR_TYPE, GroupVersionResource)


def _api_version(gvr: Any) -> str:
    return f"{gvr.group}/{gvr.version}" if gvr.group else str(gvr.version)


def _object(result: Any) -> dict[str, Any]:
    if not isinstance(result, Mapping):
        raise TypeError(f"the backend returned {type(result).__name__}, not an object")
    return dict(result)


def get(name: str, api_version: str, resource: str, namespace: str, obj_name: str, subresources: Sequence[str] = ()) -> dict[str, Any] | None:
    path = "/".join([resource, *subresources])
    args: list[Any] = [api_version, resource, namespace, obj_name] + ([list(subresources)] if subresources else [])

    def request(b: backend.Backend) -> dict[str, Any] | None:
        try:
            return b.get_resource(api_version, path, namespace, obj_name)
        except backend.ObjectNotFound:
            return None

    found = call(describe(f"resource.{name}", *args), "failed to get resource", request)
    return None if found is None else _object(found)


def _matches(item: Any, labels: Mapping[str, str]) -> bool:
    have = ((item.get("metadata") or {}).get("labels") or {}) if isinstance(item, Mapping) else {}
    return all(have.get(k) == v for k, v in labels.items())


def list_(name: str, api_version: str, resource: str, namespace: str, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    args: list[Any] = [api_version, resource, namespace] + ([dict(labels)] if labels is not None else [])
    result = _object(
        call(
            describe(f"resource.{name}", *args),
            "failed to list resource",
            lambda b: b.list_resources(api_version, resource, namespace),
        )
    )
    if labels:
        result["items"] = [item for item in result.get("items") or [] if _matches(item, labels)]
    return result


def post(name: str, api_version: str, resource: str, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
    return _object(
        call(
            describe(f"resource.{name}", api_version, resource, namespace, dict(body)),
            "failed to create resource",
            lambda b: b.post_resource(api_version, resource, namespace, dict(body)),
        )
    )


def to_gvr(name: str, api_version: str, kind: str) -> Any:
    found = call(
        describe(f"resource.{name}", api_version, kind),
        "failed to map kind to resource",
        lambda b: b.to_gvr(api_version, kind),
    )
    return GroupVersionResource(group=found.get("group", ""), version=found.get("version", ""), resource=found.get("resource", ""))


def variables() -> dict[str, tuple[cel.Type, Any]]:
    return {"resource": (RESOURCE_TYPE, ResourceContext())}


def _functions(names: tuple[str, str, str, str], style: str) -> list[Fn]:
    T = cel.Type
    obj = T.Map(T.STRING, T.DYN)
    # Kyverno declares Get as map(string, any) but answers null for a missing object; cel-expr-python checks
    # a function's value against its declared type, so Get is declared dyn here.
    maybe_obj = T.DYN

    def fn(function: str, sig: str, result: cel.Type, params: tuple[Any, ...], impl: Any) -> Fn:
        return Fn(LIBRARY, function, f"kyverno_resource_{function.lower()}_{sig}_{style}", result, (_CTX, *params), impl, member=True)

    get_name, list_name, post_name, gvr_name = names
    return [
        fn(get_name, "string_string_string_string", maybe_obj, (STRING, STRING, STRING, STRING),
           lambda _c, av, r, ns, n: get(get_name, av, r, ns, n)),
        fn(get_name, "string_string_string_string_list", maybe_obj, (STRING, STRING, STRING, STRING, STRING_LIST),
           lambda _c, av, r, ns, n, sub: get(get_name, av, r, ns, n, sub)),
        fn(get_name, "gvr_string_string", maybe_obj, (_GVR, STRING, STRING),
           lambda _c, g, ns, n: get(get_name, _api_version(g), g.resource, ns, n)),
        fn(get_name, "gvr_string_string_list", maybe_obj, (_GVR, STRING, STRING, STRING_LIST),
           lambda _c, g, ns, n, sub: get(get_name, _api_version(g), g.resource, ns, n, sub)),
        fn(list_name, "string_string_string", obj, (STRING, STRING, STRING),
           lambda _c, av, r, ns: list_(list_name, av, r, ns)),
        fn(list_name, "string_string_string_map", obj, (STRING, STRING, STRING, STRING_STRING_MAP),
           lambda _c, av, r, ns, labels: list_(list_name, av, r, ns, labels)),
        fn(list_name, "gvr_string", obj, (_GVR, STRING),
           lambda _c, g, ns: list_(list_name, _api_version(g), g.resource, ns)),
        fn(list_name, "gvr_string_map", obj, (_GVR, STRING, STRING_STRING_MAP),
           lambda _c, g, ns, labels: list_(list_name, _api_version(g), g.resource, ns, labels)),
        fn(post_name, "string_string_string_map", obj, (STRING, STRING, STRING, STRING_MAP),
           lambda _c, av, r, ns, body: post(post_name, av, r, ns, body)),
        fn(post_name, "string_string_map", obj, (STRING, STRING, STRING_MAP),
           lambda _c, av, r, body: post(post_name, av, r, "", body)),
        fn(gvr_name, "string_string", GVR_TYPE, (STRING, STRING),
           lambda _c, av, kind: to_gvr(gvr_name, av, kind)),
    ]


def functions() -> Sequence[Fn]:
    return [*_functions(("Get", "List", "Post", "ToGVR"), "pascal"), *_functions(("get", "list", "post", "toGVR"), "camel")]
