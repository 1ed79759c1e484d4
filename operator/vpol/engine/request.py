"""What is being evaluated: one resource, as an admission request would present it.

The same structure serves admission-like evaluation (CLI with an
operation), background scans (a synthetic CREATE without user info, see
NOTES.md section 3) and JSON payloads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


#: The request's userInfo when nobody is known (background scans, offline runs without a
#: user): every field present with its zero value, as the typed request Kyverno's CEL
#: environment declares reads, so ``request.userInfo.username`` is "" rather than an error.
EMPTY_USER_INFO: dict[str, Any] = {"username": "", "uid": "", "groups": [], "extra": {}}


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

    @property
    def current(self) -> dict[str, Any]:
        """The object the request is about (the old one for DELETE)."""
        return self.object if self.object is not None else (self.old_object or {})

    @property
    def name(self) -> str:
        md = self.current.get("metadata") if isinstance(self.current, dict) else None
        return str(md.get("name", "")) if isinstance(md, dict) else ""

    @property
    def namespace(self) -> str:
        md = self.current.get("metadata") if isinstance(self.current, dict) else None
        return str(md.get("namespace", "") or "") if isinstance(md, dict) else ""

    @property
    def labels(self) -> dict[str, str]:
        md = self.current.get("metadata") if isinstance(self.current, dict) else None
        labels = md.get("labels") if isinstance(md, dict) else None
        return labels if isinstance(labels, dict) else {}

    def admission_request(self) -> dict[str, Any]:
        """The CEL ``request`` variable (admission.k8s.io/v1 AdmissionRequest shape).

        As in the API server, the objects themselves are not repeated here:
        they are the ``object`` and ``oldObject`` variables.
        """
        t = self.type
        kind = {"group": t.group, "version": t.version, "kind": t.kind}
        resource = {"group": t.group, "version": t.version, "resource": t.resource}
        return {
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
            "userInfo": {**EMPTY_USER_INFO, **self.user_info},
            "dryRun": self.dry_run,
            "options": None,
        }
