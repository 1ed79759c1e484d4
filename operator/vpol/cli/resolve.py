"""Resolving apiVersion + kind to a resource type for offline evaluation.

Built-in kinds come from the bundled discovery table, extra ones (CRDs from
test inputs) from the caller.
"""

from __future__ import annotations

from collections.abc import Iterable

from vpol.engine.request import ResourceType
from vpol.engine.subjects import Resolver
from vpol.model.discovery import builtin


def resolver(extra: Iterable[ResourceType] = ()) -> Resolver:
    table = {(t.api_version, t.kind): t for t in extra}
    discovery = builtin()

    def resolve(api_version: str, kind: str) -> ResourceType | None:
        if (api_version, kind) in table:
            return table[(api_version, kind)]
        info = discovery.resource_for_kind(api_version, kind)
        if info is None:
            return None
        return ResourceType(group=info.group, version=info.version, resource=info.resource, kind=info.kind,
                            namespaced=info.namespaced)

    return resolve
