"""What is being evaluated: one resource, as an admission request would present it.

The same structure serves admission-like evaluation (CLI with an
operation), background scans (a synthetic CREATE without user info, see
../shared/NOTES.md section 3) and JSON payloads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


#: AdmissionRequest fields (and userInfo fields) that are left out when empty: Kyverno hands its CEL
#: engine the request converted to an unstructured map, which drops the ``omitempty`` fields that are
#: empty, so ``request.subResource`` of a request without one, ``request.namespace`` of a cluster-scoped
#: object or ``request.userInfo.username`` when nobody is known are "no such key" errors there, not "".
_OMITTED_WHEN_EMPTY = ("subResource", "requestSubResource", "name", "namespace")


@dataclass(frozen=True)
class ResourceType:
    """Group/version/resource/kind of the object, and whether it is namespaced."""

    group: str
    version: str
    resource: str
    kind: str
    namespaced: bool = True
    subresource: str = ""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


@dataclass
class Subject:
    """One object under evaluation (plus its request context)."""

    type: ResourceType
    object: dict[str, Any] | None
    old_object: dict[str, Any] | None = None
    operation: str = "CREATE"
    namespace_object: dict[str, Any] | None = None
    user_info: dict[str, Any] = field(default_factory=dict)
    dry_run: bool = False
    #: A JSON payload (JSON mode); `object` then holds the payload itself.
    json_payload: bool = False
    #: The ``request`` the policy sees when it is not this subject's own (a target of mutateExisting sees the
    #: request of its trigger, as in Kyverno).
    request: dict[str, Any] | None = None
    #: The AdmissionRequest's ``name`` and ``namespace`` (empty outside admission): what the request is about even
    #: when its object says nothing of it (``kubectl exec``: CONNECT pods/exec, a PodExecOptions object without
    #: metadata; a name the API server generates is empty here too).
    request_name: str = ""
    request_namespace: str = ""

    @property
    def current(self) -> dict[str, Any]:
        """The object the request is about (the old one for DELETE)."""
        return self.object if self.object is not None else (self.old_object or {})

    @property
    def name(self) -> str:
        if self.request_name:
            return self.request_name
        md = self.current.get("metadata") if isinstance(self.current, dict) else None
        return str(md.get("name", "")) if isinstance(md, dict) else ""

    @property
    def namespace(self) -> str:
        if self.request_namespace:
            return self.request_namespace
        md = self.current.get("metadata") if isinstance(self.current, dict) else None
        return str(md.get("namespace", "") or "") if isinstance(md, dict) else ""

    @property
    def labels(self) -> dict[str, str]:
        md = self.current.get("metadata") if isinstance(self.current, dict) else None
        labels = md.get("labels") if isinstance(md, dict) else None
        return labels if isinstance(labels, dict) else {}

    def admission_request(self) -> dict[str, Any]:
        """The CEL ``request`` variable as Kyverno's engine sees it: the admission.k8s.io/v1 AdmissionRequest
        with its empty ``omitempty`` fields left out (see _OMITTED_WHEN_EMPTY), plus the objects themselves
        (``request.object``, ``request.oldObject``, as Kyverno's request type declares them). The API server's
        own ``request`` (generated VAPs) is its business."""
        if self.request is not None:
            return self.request
        t = self.type
        kind = {"group": t.group, "version": t.version, "kind": t.kind}
        resource = {"group": t.group, "version": t.version, "resource": t.resource}
        request: dict[str, Any] = {
            "uid": "",
            "kind": kind,
            "resource": resource,
            "subResource": t.subresource,
            "requestKind": kind,
            "requestResource": resource,
            "requestSubResource": t.subresource,
            "name": self.name,
            "namespace": self.namespace,
            "operation": self.operation,
            "userInfo": {k: v for k, v in self.user_info.items() if v not in ("", None) and v != [] and v != {}},
            "object": self.object,
            "oldObject": self.old_object,
            "dryRun": self.dry_run,
            "options": None,
        }
        for key in _OMITTED_WHEN_EMPTY:
            if not request[key]:
                del request[key]
        return request
