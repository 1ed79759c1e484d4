"""What the API surface looks like: resources, their kinds, scopes and schemas.

``Discovery`` answers the questions the rest of vpol asks about API
resources without talking to a cluster:

- which resource serves a kind (``resource_for_kind``) and which kind a
  resource holds (``resource``);
- which resources a ValidatingPolicy resource rule names (``resolve``, with
  the ``*`` and ``resource/subresource`` forms of admissionregistration
  rules);
- the OpenAPI schema of a kind (``schema``), for schema-aware type checking.

The built-in table and schemas come from the bundle in ``vpol/data/``
(generated from the Kubernetes release by ``python -m vpol.kube.openapi``);
``builtin()`` is the cached instance. CRDs and cluster-specific kinds are
added with ``with_extra`` / ``with_crds`` (from CRD objects offline, or from
what ``vpol.kube.openapi`` fetched from a live cluster).
"""

from __future__ import annotations

import functools
import gzip
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from importlib import resources as importlib_resources
from typing import Any

DISCOVERY_FILE = "discovery.json.gz"
OPENAPI_FILE = "openapi.json.gz"
COMPONENT_PREFIX = "#/components/schemas/"
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"

GVK = tuple[str, str, str]


@dataclass(frozen=True)
class ResourceInfo:
    """One API resource (or, from ``resolve``, one subresource of it)."""

    group: str
    version: str
    resource: str
    kind: str
    namespaced: bool
    #: Names of the resource's subresources (``status``, ``scale``, ...).
    subresources: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ()
    #: Set only on entries ``resolve`` returns for ``resource/subresource``
    #: forms; ``kind`` is then the subresource's kind (e.g. Scale).
    subresource: str = ""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def gvk(self) -> GVK:
        return (self.group, self.version, self.kind)

    @property
    def gvk_string(self) -> str:
        """The kind as Kubernetes prints a GroupVersionKind: ``apps/v1, Kind=Deployment``."""
        return f"{self.group}/{self.version}, Kind={self.kind}"

    @property
    def path(self) -> str:
        """``resource`` or ``resource/subresource``."""
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


@dataclass(frozen=True)
class _SubresourceInfo:
    name: str
    group: str
    version: str
    kind: str
    verbs: tuple[str, ...] = ()


def _read_data(name: str) -> Any:
    with importlib_resources.files("vpol").joinpath("data", name).open("rb") as fh:
        return json.loads(gzip.decompress(fh.read()))


def _split_api_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


class Discovery:
    """Resources, kinds and schemas of one API surface (immutable; ``with_*`` returns a new one)."""

    def __init__(
        self,
        resources: Iterable[ResourceInfo] = (),
        *,
        subresource_kinds: Mapping[tuple[str, str, str, str], _SubresourceInfo] | None = None,
        components: Mapping[str, Mapping[str, Any]] | None = None,
        kind_components: Mapping[GVK, str] | None = None,
        schemas: Mapping[GVK, Mapping[str, Any]] | None = None,
        group_versions: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self._resources: tuple[ResourceInfo, ...] = tuple(resources)
        self._subresources = dict(subresource_kinds or {})
        self._components: Mapping[str, Mapping[str, Any]] = components or {}
        self._kind_components = dict(kind_components or {})
        self._schemas = dict(schemas or {})
        # One document per kind, kept: callers (vpol.cel.schemas) cache by identity.
        self._documents: dict[GVK, Mapping[str, Any]] = {}
        self._group_versions = {g: tuple(v) for g, v in (group_versions or {}).items()}
        for info in self._resources:
            versions = self._group_versions.setdefault(info.group, ())
            if info.version not in versions:
                self._group_versions[info.group] = (*versions, info.version)
        by_gvr: dict[tuple[str, str, str], ResourceInfo] = {}
        by_gvk: dict[GVK, ResourceInfo] = {}
        for info in self._resources:
            by_gvr[(info.group, info.version, info.resource)] = info
            by_gvk.setdefault(info.gvk, info)
        self._by_gvr = by_gvr
        self._by_gvk = by_gvk

    # -- lookups

    @property
    def resources(self) -> tuple[ResourceInfo, ...]:
        return self._resources

    def resource(self, group: str, version: str, resource: str) -> ResourceInfo | None:
        """The resource ``group/version/resource`` (``resource`` may be ``res/sub``)."""
        name, _, sub = resource.partition("/")
        info = self._by_gvr.get((group, version, name))
        if info is None or not sub:
            return info
        return self._subresource(info, sub)

    def resource_for_kind(self, api_version: str, kind: str) -> ResourceInfo | None:
        """The (main) resource whose objects are ``kind`` in ``api_version``."""
        group, version = _split_api_version(api_version)
        return self._by_gvk.get((group, version, kind))

    def group_versions(self, group: str) -> tuple[str, ...]:
        """Versions served for ``group``, preferred first."""
        return self._group_versions.get(group, ())

    def _subresource(self, info: ResourceInfo, sub: str) -> ResourceInfo | None:
        if sub not in info.subresources:
            return None
        known = self._subresources.get((info.group, info.version, info.resource, sub))
        kind = known.kind if known and known.kind else info.kind
        verbs = known.verbs if known else ()
        return replace(info, kind=kind, verbs=verbs, subresource=sub)

    def resolve(
        self, api_groups: Iterable[str], api_versions: Iterable[str], resources: Iterable[str]
    ) -> list[ResourceInfo]:
        """The resources an admission rule names, honouring its wildcards.

        ``*`` in groups or versions matches all of them. Resource forms:
        ``pods``; ``*`` (every resource, no subresources); ``pods/log``;
        ``pods/*`` (every subresource of pods); ``*/scale`` (the scale
        subresource of every resource); ``*/*`` (every resource and every
        subresource). Unknown names resolve to nothing.
        """
        groups = set(api_groups)
        versions = set(api_versions)
        wanted = list(resources)
        out: list[ResourceInfo] = []
        seen: set[tuple[str, str, str, str]] = set()

        def add(item: ResourceInfo | None) -> None:
            if item is None:
                return
            key = (item.group, item.version, item.resource, item.subresource)
            if key not in seen:
                seen.add(key)
                out.append(item)

        for info in self._resources:
            if "*" not in groups and info.group not in groups:
                continue
            if "*" not in versions and info.version not in versions:
                continue
            for spec in wanted:
                name, slash, sub = spec.partition("/")
                if name != "*" and name != info.resource:
                    continue
                if not slash:
                    add(info)
                    continue
                if name == "*" and sub == "*":
                    add(info)
                if sub == "*":
                    for each in info.subresources:
                        add(self._subresource(info, each))
                else:
                    add(self._subresource(info, sub))
        return out

    # -- schemas

    def schema(self, group: str, version: str, kind: str) -> Mapping[str, Any] | None:
        """The OpenAPI v3 schema of ``kind``: a document whose ``$ref`` names the root.

        The result can be handed to ``vpol.cel.schemas.message_type`` as is;
        ``None`` when the kind's schema is unknown.
        """
        gvk = (group, version, kind)
        extra = self._schemas.get(gvk)
        if extra is not None:
            return extra
        name = self._kind_components.get(gvk)
        if name is None:
            return None
        document = self._documents.get(gvk)
        if document is None:
            document = {"$ref": COMPONENT_PREFIX + name, "components": {"schemas": self._components}}
            self._documents[gvk] = document
        return document

    def component(self, name: str) -> Mapping[str, Any] | None:
        return self._components.get(name)

    # -- extension

    def with_extra(
        self,
        resources: Iterable[ResourceInfo],
        schemas: Mapping[GVK, Mapping[str, Any]] | None = None,
    ) -> Discovery:
        """A new Discovery with ``resources`` added (replacing same group/version/resource)."""
        extra = list(resources)
        replaced = {(r.group, r.version, r.resource) for r in extra}
        kept = [r for r in self._resources if (r.group, r.version, r.resource) not in replaced]
        return Discovery(
            [*kept, *extra],
            subresource_kinds=self._subresources,
            components=self._components,
            kind_components=self._kind_components,
            schemas={**self._schemas, **(schemas or {})},
            group_versions=self._group_versions,
        )

    def with_crds(self, crds: Iterable[Mapping[str, Any]]) -> Discovery:
        """A new Discovery that also knows the served versions of these CRD objects."""
        infos: list[ResourceInfo] = []
        schemas: dict[GVK, Mapping[str, Any]] = {}
        for crd in crds:
            infos.extend(resources_from_crd(crd))
            schemas.update(schemas_from_crd(crd, self))
        return self.with_extra(infos, schemas)


# --- CRDs -------------------------------------------------------------------


def resources_from_crd(crd: Mapping[str, Any]) -> list[ResourceInfo]:
    """One ResourceInfo per served version of a CustomResourceDefinition object."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group = spec.get("group", "")
    namespaced = spec.get("scope", "Namespaced") == "Namespaced"
    out: list[ResourceInfo] = []
    for version in spec.get("versions") or ():
        if not version.get("served", True):
            continue
        subs = version.get("subresources") or {}
        out.append(
            ResourceInfo(
                group=group,
                version=version.get("name", ""),
                resource=names.get("plural", ""),
                kind=names.get("kind", ""),
                namespaced=namespaced,
                subresources=tuple(sorted(k for k in ("status", "scale") if k in subs)),
                verbs=("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"),
            )
        )
    return out


def schemas_from_crd(crd: Mapping[str, Any], base: Discovery | None = None) -> dict[GVK, Mapping[str, Any]]:
    """The OpenAPI schema of each served version, shaped as the API server publishes it.

    The API server's ``/openapi/v3`` replaces ``metadata`` with a reference
    to ObjectMeta; we do the same with the ObjectMeta schema of ``base``
    (the built-in bundle by default), so ``object.metadata.labels`` types as
    it does against a live cluster.
    """
    base = base if base is not None else builtin()
    spec = crd.get("spec") or {}
    group = spec.get("group", "")
    kind = (spec.get("names") or {}).get("kind", "")
    out: dict[GVK, Mapping[str, Any]] = {}
    for version in spec.get("versions") or ():
        if not version.get("served", True):
            continue
        schema = ((version.get("schema") or {}).get("openAPIV3Schema")) or {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": True,
        }
        root = dict(schema)
        props = dict(root.get("properties") or {})
        components: dict[str, Mapping[str, Any]] = {}
        if base.component(OBJECT_META) is not None:
            props["metadata"] = {"$ref": COMPONENT_PREFIX + OBJECT_META}
            components = _closure(base, OBJECT_META)
        props.setdefault("apiVersion", {"type": "string"})
        props.setdefault("kind", {"type": "string"})
        root["properties"] = props
        root.setdefault("type", "object")
        out[(group, version.get("name", ""), kind)] = {**root, "components": {"schemas": components}}
    return out


def _closure(base: Discovery, name: str) -> dict[str, Mapping[str, Any]]:
    out: dict[str, Mapping[str, Any]] = {}
    pending = [name]
    while pending:
        current = pending.pop()
        if current in out:
            continue
        schema = base.component(current)
        if schema is None:
            continue
        out[current] = schema
        pending.extend(r[len(COMPONENT_PREFIX):] for r in _refs(schema) if r.startswith(COMPONENT_PREFIX))
    return out


def _refs(node: Any) -> list[str]:
    found: list[str] = []
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            for key, value in item.items():
                if key == "$ref" and isinstance(value, str):
                    found.append(value)
                else:
                    stack.append(value)
        elif isinstance(item, list):
            stack.extend(item)
    return found


# --- the bundle ---------------------------------------------------------------


def from_bundle(discovery_data: Mapping[str, Any], openapi_data: Mapping[str, Any]) -> Discovery:
    """A Discovery from the two bundle documents (see ``vpol.kube.openapi`` for their shape)."""
    infos: list[ResourceInfo] = []
    subs: dict[tuple[str, str, str, str], _SubresourceInfo] = {}
    for item in discovery_data.get("resources", ()):
        sub_names = []
        for sub in item.get("subresources", ()):
            sub_names.append(sub["name"])
            subs[(item["group"], item["version"], item["resource"], sub["name"])] = _SubresourceInfo(
                name=sub["name"],
                group=sub.get("group", item["group"]),
                version=sub.get("version", item["version"]),
                kind=sub.get("kind", ""),
                verbs=tuple(sub.get("verbs", ())),
            )
        infos.append(
            ResourceInfo(
                group=item["group"],
                version=item["version"],
                resource=item["resource"],
                kind=item["kind"],
                namespaced=bool(item["namespaced"]),
                subresources=tuple(sub_names),
                verbs=tuple(item.get("verbs", ())),
            )
        )
    kind_components: dict[GVK, str] = {}
    for api_version, kinds in (openapi_data.get("kinds") or {}).items():
        group, version = _split_api_version(api_version)
        for kind, name in kinds.items():
            kind_components[(group, version, kind)] = name
    return Discovery(
        infos,
        subresource_kinds=subs,
        components=openapi_data.get("components") or {},
        kind_components=kind_components,
        group_versions=discovery_data.get("groupVersions") or {},
    )


@functools.cache
def builtin() -> Discovery:
    """The built-in Kubernetes API (from the bundled data; read once)."""
    return from_bundle(_read_data(DISCOVERY_FILE), _read_data(OPENAPI_FILE))


@functools.cache
def bundle_source() -> str:
    """Where the bundled data came from (e.g. ``kubernetes v1.37.2``)."""
    return str(_read_data(DISCOVERY_FILE).get("source", ""))


__all__ = [
    "Discovery",
    "ResourceInfo",
    "builtin",
    "bundle_source",
    "from_bundle",
    "resources_from_crd",
    "schemas_from_crd",
]
