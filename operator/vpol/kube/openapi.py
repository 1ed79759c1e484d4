"""API discovery and OpenAPI v3 schemas: from upstream spec files or a live cluster.

Two sources feed ``vpol.model.discovery.Discovery``:

- the bundle in ``vpol/data/`` (built-in kinds of one Kubernetes release),
  regenerated from upstream spec files with::

      python -m vpol.kube.openapi --from-dir ~/go/pkg/mod/k8s.io/kubernetes@v1.37.2/api

  ``DIR`` is searched recursively for OpenAPI v3 documents
  (``*_openapi.json``, the ``/openapi/v3/...`` documents) and discovery
  documents (an aggregated ``APIGroupDiscoveryList`` such as
  ``aggregated_v2.json`` and/or ``APIResourceList`` files such as
  ``api__v1.json``). ``--from-cluster`` reads the same from the cluster of
  the current kubeconfig instead.

- a live cluster (``fetch_discovery`` / ``fetch_openapi`` /
  ``cluster_discovery``), for CRDs and cluster-specific kinds: ``/api`` and
  ``/apis`` (aggregated discovery, falling back to per-version lists) and
  ``/openapi/v3``.

Schemas are trimmed to what type checking and apply merging need: descriptions,
defaults, enums and validations are dropped (list/map types are kept); ``allOf: [$ref]``
wrappers become plain ``$ref``. The bundle is two gzip'd JSON files:

- ``discovery.json.gz``: ``{"source", "groupVersions": {group: [versions,
  preferred first]}, "resources": [{"group", "version", "resource", "kind",
  "namespaced", "verbs", "subresources": [{"name", "group", "version",
  "kind", "verbs"}]}]}``
- ``openapi.json.gz``: ``{"source", "components": {name: schema}, "kinds":
  {apiVersion: {kind: component name}}}``

This is the only module that does I/O for discovery data.
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from vpol.model.discovery import COMPONENT_PREFIX, Discovery, ResourceInfo, builtin, from_bundle

log = logging.getLogger(__name__)

DATA_DIR = Path(__file__).resolve().parent.parent / "data"

#: Schema keywords type checking uses; everything else is dropped.
_KEEP = frozenset({
    "type", "format", "properties", "items", "additionalProperties", "$ref", "allOf",
    "x-kubernetes-int-or-string", "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource",
    # How objects merge under server-side apply (vpol.engine.merge): list and map types.
    "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type",
    "x-kubernetes-patch-strategy", "x-kubernetes-patch-merge-key",
})
_MERGE_KEYWORDS = frozenset({
    "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type",
    "x-kubernetes-patch-strategy", "x-kubernetes-patch-merge-key",
})
#: String formats that change the CEL type (see vpol.cel.schemas).
_TYPED_FORMATS = frozenset({"date-time", "date", "duration", "byte", "int-or-string"})

AGGREGATED_ACCEPT = (
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,"
    "application/json"
)


# --- trimming -------------------------------------------------------------------


def trim_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` reduced to the keywords that determine CEL types."""
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key not in _KEEP:
            continue
        if key == "properties" and isinstance(value, Mapping):
            value = {name: trim_schema(sub) for name, sub in value.items() if isinstance(sub, Mapping)}
        elif key in ("items", "additionalProperties") and isinstance(value, Mapping):
            value = trim_schema(value)
        elif key == "allOf" and isinstance(value, list):
            value = [trim_schema(sub) for sub in value if isinstance(sub, Mapping)]
        elif key == "format" and value not in _TYPED_FORMATS:
            continue
        elif key.startswith("x-kubernetes-") and value is not True and key not in _MERGE_KEYWORDS:
            continue
        out[key] = value
    all_of = out.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and set(all_of[0]) == {"$ref"}:
        out.pop("allOf")
        out["$ref"] = all_of[0]["$ref"]
    return out


def _gvks(schema: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    out = []
    for item in schema.get("x-kubernetes-group-version-kind") or ():
        if isinstance(item, Mapping):
            out.append((item.get("group", ""), item.get("version", ""), item.get("kind", "")))
    return out


# --- discovery documents ----------------------------------------------------------


def parse_discovery(documents: Iterable[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
    """Resources and group versions from aggregated (v2/v2beta1) or per-version discovery documents."""
    resources: dict[tuple[str, str, str], dict[str, Any]] = {}
    group_versions: dict[str, list[str]] = {}

    def note_version(group: str, version: str) -> None:
        versions = group_versions.setdefault(group, [])
        if version not in versions:
            versions.append(version)

    for doc in documents:
        kind = doc.get("kind")
        if kind == "APIGroupDiscoveryList":
            for group_doc in doc.get("items") or ():
                group = (group_doc.get("metadata") or {}).get("name", "")
                for version_doc in group_doc.get("versions") or ():
                    version = version_doc.get("version", "")
                    note_version(group, version)
                    for res in version_doc.get("resources") or ():
                        response = res.get("responseKind") or {}
                        subs = []
                        for sub in res.get("subresources") or ():
                            sub_kind = sub.get("responseKind") or {}
                            subs.append({
                                "name": sub.get("subresource", ""),
                                "group": sub_kind.get("group") or group,
                                "version": sub_kind.get("version") or version,
                                "kind": sub_kind.get("kind", ""),
                                "verbs": sorted(sub.get("verbs") or ()),
                            })
                        resources[(group, version, res["resource"])] = {
                            "group": group,
                            "version": version,
                            "resource": res["resource"],
                            "kind": response.get("kind", ""),
                            "namespaced": res.get("scope") == "Namespaced",
                            "verbs": sorted(res.get("verbs") or ()),
                            "subresources": sorted(subs, key=lambda s: s["name"]),
                        }
        elif kind == "APIResourceList":
            group, _, version = (doc.get("groupVersion") or "").rpartition("/")
            note_version(group, version)
            mains = [r for r in doc.get("resources") or () if "/" not in r.get("name", "")]
            subs_of: dict[str, list[dict[str, Any]]] = {}
            for res in doc.get("resources") or ():
                name = res.get("name", "")
                if "/" in name:
                    parent, _, sub = name.partition("/")
                    subs_of.setdefault(parent, []).append({
                        "name": sub,
                        "group": res.get("group") or group,
                        "version": res.get("version") or version,
                        "kind": res.get("kind", ""),
                        "verbs": sorted(res.get("verbs") or ()),
                    })
            for res in mains:
                key = (group, version, res["name"])
                if key in resources:  # the aggregated document wins
                    continue
                resources[key] = {
                    "group": group,
                    "version": version,
                    "resource": res["name"],
                    "kind": res.get("kind", ""),
                    "namespaced": bool(res.get("namespaced")),
                    "verbs": sorted(res.get("verbs") or ()),
                    "subresources": sorted(subs_of.get(res["name"], []), key=lambda s: s["name"]),
                }
    ordered = sorted(resources.values(), key=lambda r: (r["group"], r["version"], r["resource"]))
    return ordered, group_versions


# --- bundle ---------------------------------------------------------------------


def build_bundle(
    openapi_documents: Iterable[Mapping[str, Any]],
    discovery_documents: Iterable[Mapping[str, Any]],
    source: str,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The two bundle documents from upstream OpenAPI v3 and discovery documents."""
    resources, group_versions = parse_discovery(discovery_documents)
    wanted = {(r["group"], r["version"], r["kind"]) for r in resources}
    for r in resources:
        for sub in r["subresources"]:
            if sub["kind"]:
                wanted.add((sub["group"], sub["version"], sub["kind"]))
    components: dict[str, dict[str, Any]] = {}
    kinds: dict[str, dict[str, str]] = {}
    for doc in openapi_documents:
        schemas = (doc.get("components") or {}).get("schemas") or {}
        for name, schema in schemas.items():
            for gvk in _gvks(schema):
                if gvk in wanted:
                    api_version = f"{gvk[0]}/{gvk[1]}" if gvk[0] else gvk[1]
                    kinds.setdefault(api_version, {})[gvk[2]] = name
            if name not in components:
                components[name] = trim_schema(schema)
    # Keep only what the kinds reach.
    reachable: set[str] = set()
    pending = [name for by_kind in kinds.values() for name in by_kind.values()]
    while pending:
        name = pending.pop()
        if name in reachable or name not in components:
            continue
        reachable.add(name)
        pending.extend(_component_refs(components[name]))
    discovery_data = {"source": source, "groupVersions": group_versions, "resources": resources}
    openapi_data = {
        "source": source,
        "components": {name: components[name] for name in sorted(reachable)},
        "kinds": {av: dict(sorted(k.items())) for av, k in sorted(kinds.items())},
    }
    return discovery_data, openapi_data


def _component_refs(node: Any) -> list[str]:
    out: list[str] = []
    if isinstance(node, Mapping):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str) and value.startswith(COMPONENT_PREFIX):
                out.append(value[len(COMPONENT_PREFIX):])
            else:
                out.extend(_component_refs(value))
    elif isinstance(node, list):
        for value in node:
            out.extend(_component_refs(value))
    return out


def write_bundle(out_dir: Path, discovery_data: Mapping[str, Any], openapi_data: Mapping[str, Any]) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, data in (("discovery.json.gz", discovery_data), ("openapi.json.gz", openapi_data)):
        path = out_dir / name
        raw = json.dumps(data, separators=(",", ":"), sort_keys=True).encode()
        # mtime=0: the same input gives byte-identical files.
        path.write_bytes(gzip.compress(raw, compresslevel=9, mtime=0))
        written.append(path)
    return written


def load_dir(directory: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """OpenAPI v3 documents and discovery documents found under ``directory``."""
    openapi_docs: list[dict[str, Any]] = []
    discovery_docs: list[dict[str, Any]] = []
    for path in sorted(directory.rglob("*.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            log.warning("skipping %s: %s", path, exc)
            continue
        if not isinstance(doc, dict):
            continue
        if isinstance(doc.get("components"), dict):
            openapi_docs.append(doc)
        elif doc.get("kind") in ("APIGroupDiscoveryList", "APIResourceList"):
            discovery_docs.append(doc)
    return openapi_docs, discovery_docs


# --- live cluster -----------------------------------------------------------------


class HTTPStatusError(RuntimeError):
    """A GET answered with a non-2xx status."""

    def __init__(self, path: str, status: int):
        super().__init__(f"GET {path}: HTTP {status}")
        self.status = status


def get_json(api_client: Any, path: str, accept: str = "application/json") -> Any:
    """GET ``path`` through a kubernetes ApiClient (old and new generated clients)."""
    headers = {"Accept": accept}
    if hasattr(api_client, "param_serialize"):
        method, url, header_params, body, post_params = api_client.param_serialize(
            method="GET", resource_path=path, header_params=headers, auth_settings=["BearerToken"]
        )
        response = api_client.call_api(method, url, header_params=header_params)
        data = response.read()
        if not 200 <= int(response.status) < 300:
            raise HTTPStatusError(path, int(response.status))
    else:  # kubernetes < 32
        response = api_client.call_api(
            path, "GET", header_params=headers, auth_settings=["BearerToken"],
            _preload_content=False, _return_http_data_only=True,
        )
        data = response.data
    return json.loads(data)


def fetch_discovery_documents(api_client: Any) -> list[dict[str, Any]]:
    """``/api`` and ``/apis`` as aggregated discovery, or per-version lists on old servers."""
    docs: list[dict[str, Any]] = []
    for root in ("/api", "/apis"):
        doc = get_json(api_client, root, AGGREGATED_ACCEPT)
        if doc.get("kind") == "APIGroupDiscoveryList":
            if root == "/api":  # the core group has no name in the aggregated document
                for item in doc.get("items") or ():
                    item.setdefault("metadata", {}).setdefault("name", "")
            docs.append(doc)
        elif doc.get("kind") == "APIVersions":
            for version in doc.get("versions") or ():
                docs.append(get_json(api_client, f"/api/{version}"))
        elif doc.get("kind") == "APIGroupList":
            for group in doc.get("groups") or ():
                for version in group.get("versions") or ():
                    docs.append(get_json(api_client, f"/apis/{version['groupVersion']}"))
    return docs


def fetch_openapi_documents(api_client: Any, group_versions: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
    """OpenAPI v3 documents by ``apiVersion`` (all served group versions, or just those named)."""
    index = get_json(api_client, "/openapi/v3")
    wanted = None if group_versions is None else set(group_versions)
    out: dict[str, dict[str, Any]] = {}
    for path, entry in (index.get("paths") or {}).items():
        if path.startswith("api/"):
            api_version = path[len("api/"):]
        elif path.startswith("apis/") and path.count("/") == 2:
            api_version = path[len("apis/"):]
        else:
            continue
        if wanted is not None and api_version not in wanted:
            continue
        url = entry.get("serverRelativeURL") or f"/openapi/v3/{path}"
        out[api_version] = get_json(api_client, url)
    return out


def fetch_discovery(api_client: Any) -> Discovery:
    """A Discovery of everything the cluster serves (resources and all schemas)."""
    docs = fetch_discovery_documents(api_client)
    openapi = fetch_openapi_documents(api_client)
    discovery_data, openapi_data = build_bundle(openapi.values(), docs, source="cluster")
    return from_bundle(discovery_data, openapi_data)


def cluster_discovery(api_client: Any, base: Discovery | None = None) -> Discovery:
    """``base`` (the built-in bundle) plus what the cluster serves beyond it.

    Resources are taken from the cluster; schemas are fetched only for the
    group versions ``base`` has no schemas for (CRDs, aggregated APIs), so
    a refresh stays cheap.
    """
    base = base if base is not None else builtin()
    docs = fetch_discovery_documents(api_client)
    resources, _versions = parse_discovery(docs)
    known = {(r.group, r.version, r.kind) for r in base.resources if base.schema(r.group, r.version, r.kind)}
    missing = sorted({
        (f"{r['group']}/{r['version']}" if r["group"] else r["version"])
        for r in resources
        if (r["group"], r["version"], r["kind"]) not in known
    })
    schemas: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    if missing:
        documents = fetch_openapi_documents(api_client, missing)
        for doc in documents.values():
            comps = {n: trim_schema(s) for n, s in ((doc.get("components") or {}).get("schemas") or {}).items()}
            shared = {"schemas": comps}
            for name, schema in ((doc.get("components") or {}).get("schemas") or {}).items():
                for gvk in _gvks(schema):
                    schemas[gvk] = {"$ref": COMPONENT_PREFIX + name, "components": shared}
    infos = [
        ResourceInfo(
            group=r["group"], version=r["version"], resource=r["resource"], kind=r["kind"],
            namespaced=r["namespaced"], subresources=tuple(s["name"] for s in r["subresources"]),
            verbs=tuple(r["verbs"]),
        )
        for r in resources
    ]
    return base.with_extra(infos, schemas)


# --- command line -----------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m vpol.kube.openapi",
        description="Regenerate vpol's bundled discovery table and OpenAPI schemas.",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--from-dir", type=Path, metavar="DIR",
                        help="directory holding upstream OpenAPI v3 and discovery JSON files (searched recursively)")
    source.add_argument("--from-cluster", action="store_true",
                        help="read /apis and /openapi/v3 from the cluster of the current kubeconfig")
    parser.add_argument("--out", type=Path, default=DATA_DIR, help=f"output directory (default: {DATA_DIR})")
    parser.add_argument("--source", default="", help="label recorded in the bundle (default: derived from the input)")
    args = parser.parse_args(argv)

    if args.from_dir is not None:
        if not args.from_dir.is_dir():
            print(f"not a directory: {args.from_dir}", file=sys.stderr)
            return 2
        openapi_docs, discovery_docs = load_dir(args.from_dir)
        label = args.source or _label_from_path(args.from_dir)
    else:
        from kubernetes import client, config  # the only place the client is needed

        config.load_kube_config()
        api_client = client.ApiClient()
        discovery_docs = fetch_discovery_documents(api_client)
        openapi_docs = list(fetch_openapi_documents(api_client).values())
        label = args.source or "cluster"
    if not openapi_docs or not discovery_docs:
        print("found no OpenAPI v3 documents or no discovery documents", file=sys.stderr)
        return 2
    discovery_data, openapi_data = build_bundle(openapi_docs, discovery_docs, label)
    for path in write_bundle(args.out, discovery_data, openapi_data):
        print(f"wrote {path} ({path.stat().st_size} bytes)")
    print(f"{len(discovery_data['resources'])} resources, {len(openapi_data['components'])} schemas, "
          f"{sum(len(k) for k in openapi_data['kinds'].values())} kinds")
    return 0


def _label_from_path(path: Path) -> str:
    for part in reversed(path.resolve().parts):
        if part.startswith("kubernetes@"):
            return "kubernetes " + part.split("@", 1)[1]
    return str(path)


if __name__ == "__main__":
    sys.exit(main())
