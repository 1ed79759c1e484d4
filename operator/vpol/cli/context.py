"""Kyverno CLI side inputs: values files, context files, cluster resources, canned API responses.

These files stand in for the cluster when evaluating offline. Values give
namespaces (objects or just labels); context, clusterResources and
apiCallResponses feed the offline backend behind ``resource.*``,
``image.GetMetadata`` and ``http.*``; mocked GlobalContextEntries
(vpol.cli.global_context) the one behind ``globalContext.Get``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vpol.cel.offline_backend import OfflineBackend
from vpol.cli.inputs import load_documents
from vpol.engine.request import ResourceType
from vpol.model.problems import InputError, Problem


@dataclass
class Values:
    namespaces: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: request.userInfo (a test file's `userinfo`, or --userinfo).
    user_info: dict[str, Any] = field(default_factory=dict)


def load_values(paths: Iterable[str]) -> Values:
    """Kyverno CLI values files (``cli.kyverno.io/v1alpha1`` Value, or the older plain form)."""
    values = Values()
    for path in paths:
        for doc in load_documents(Path(path)):
            data = doc.data
            if not isinstance(data, dict):
                raise InputError(Problem("a values file must be a mapping", file=doc.file))
            for i, ns in enumerate(data.get("namespaces") or []):
                name = ((ns or {}).get("metadata") or {}).get("name") if isinstance(ns, dict) else None
                if not name:
                    raise InputError(Problem("namespace without metadata.name", file=doc.file,
                                             path=f"namespaces[{i}]", position=doc.position(f"namespaces[{i}]")))
                values.namespaces[str(name)] = ns
            for i, sel in enumerate(data.get("namespaceSelector") or []):
                if not isinstance(sel, dict) or not sel.get("name"):
                    raise InputError(Problem("namespaceSelector entry needs a name", file=doc.file,
                                             path=f"namespaceSelector[{i}]"))
                name = str(sel["name"])
                ns = values.namespaces.setdefault(name, {"apiVersion": "v1", "kind": "Namespace",
                                                         "metadata": {"name": name}})
                labels = dict((ns.get("metadata") or {}).get("labels") or {})
                labels.update({str(k): str(v) for k, v in (sel.get("labels") or {}).items()})
                ns.setdefault("metadata", {})["labels"] = labels
    return values


def load_user_info(paths: Iterable[str]) -> dict[str, Any]:
    """The request's userInfo from Kyverno CLI user-info files (``kind: UserInfo``, as ``kyverno create
    user-info`` writes them: ``userInfo: {username, groups, uid, extra}``), or a plain userInfo mapping."""
    info: dict[str, Any] = {}
    for path in paths:
        for doc in load_documents(Path(path)):
            data = doc.data
            if not isinstance(data, dict):
                raise InputError(Problem("a user-info file must be a mapping", file=doc.file))
            user = data.get("userInfo", data) if data.get("kind") == "UserInfo" or "userInfo" in data else data
            if not isinstance(user, dict):
                raise InputError(Problem("userInfo must be a mapping", file=doc.file, path="userInfo",
                                         position=doc.position("userInfo")))
            for key in ("username", "uid"):
                if key in user and not isinstance(user[key], str):
                    raise InputError(Problem(f"{key} must be a string", file=doc.file, path=f"userInfo.{key}",
                                             position=doc.position(f"userInfo.{key}")))
            if "groups" in user and not (isinstance(user["groups"], list) and
                                         all(isinstance(g, str) for g in user["groups"])):
                raise InputError(Problem("groups must be a list of strings", file=doc.file, path="userInfo.groups",
                                         position=doc.position("userInfo.groups")))
            info.update({k: v for k, v in user.items() if k in ("username", "uid", "groups", "extra")})
    return info


def _objects(paths: Iterable[str]) -> list[tuple[str, Any]]:
    out = []
    for path in paths:
        for doc in load_documents(Path(path)):
            out.append((doc.file, doc.data))
    return out


def build_backend(*, context_files: Iterable[str] = (), cluster_resource_files: Iterable[str] = (),
                  api_call_responses: Iterable[dict[str, Any]] = (), global_context: dict[str, Any] | None = None
                  ) -> tuple[OfflineBackend, list[ResourceType]]:
    """An offline backend from the files, and the resource types their CRDs declare.

    ``ClusterResource`` documents name CRD files relative to themselves;
    those are read here and handed over as documents. ``global_context``: mocked GlobalContextEntry data by
    name (vpol.cli.global_context).
    """
    documents: list[dict[str, Any]] = []
    crds: list[dict[str, Any]] = []
    for file, data in _objects([*context_files, *cluster_resource_files]):
        if not isinstance(data, dict):
            raise InputError(Problem("expected a mapping (a Kubernetes object or a Kyverno CLI document)",
                                     file=file))
        documents.append(data)
        if data.get("kind") == "ClusterResource":
            spec = data.get("spec") or {}
            base = Path(file).parent
            for _f, crd in _objects(str(base / str(p)) for p in spec.get("crds") or []):
                if isinstance(crd, dict):
                    documents.append(crd)
    for doc in documents:
        if doc.get("kind") == "CustomResourceDefinition":
            crds.append(doc)
    backend = OfflineBackend.from_documents(documents, http_responses=list(api_call_responses),
                                            global_context=global_context)
    return backend, [_crd_type(c, v) for c in crds for v in (c.get("spec") or {}).get("versions") or []]


def _crd_type(crd: dict[str, Any], version: dict[str, Any]) -> ResourceType:
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    return ResourceType(group=str(spec.get("group", "")), version=str(version.get("name", "")),
                        resource=str(names.get("plural", "")), kind=str(names.get("kind", "")),
                        namespaced=spec.get("scope") == "Namespaced")
