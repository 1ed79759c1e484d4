"""The background scans' watches: the resource types the policies match, the namespaces, the policies themselves.

One watcher per resource type some background path wants (its first list is covered by the scan that follows it,
so it starts without emitting it; later events re-evaluate the one resource within seconds), a namespace watcher
whose objects are the namespace cache (``namespaceObject``, namespace selectors, the scan key), and while scans run
the scanner's own watch of the ValidatingPolicies, which tells it of a change before the operator's reconcile does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kubernetes import client

from vpol.engine.request import ResourceType
from vpol.kube.dynamic import Watcher, list_pages
from vpol.kube.objects import GROUP, NAMESPACED_POLICY_PLURAL, POLICY_PLURAL, STORAGE_VERSION
from vpol.model.discovery import ResourceInfo

GVR = tuple[str, str, str]
OnEvent = Callable[[str, dict[str, Any]], None]

#: The policy kinds background scans watch themselves: (resource, kind).
POLICY_RESOURCES = ((POLICY_PLURAL, "ValidatingPolicy"), (NAMESPACED_POLICY_PLURAL, "NamespacedValidatingPolicy"))


class ScanWatches:
    """The watches of the background scans; started and stopped from the scanner's thread."""

    def __init__(self, api: client.ApiClient, on_object: OnEvent) -> None:
        self.api = api
        self._on_object = on_object
        self._watchers: dict[GVR, Watcher] = {}
        self._types: dict[tuple[str, str], ResourceType] = {}
        #: The cluster's namespaces by name, as the namespace watch last saw them (shared with every path).
        self.namespaces: dict[str, dict[str, Any]] = {}
        self._ns_watcher: Watcher | None = None
        self._policy_watchers: list[Watcher] = []

    def start_namespaces(self) -> None:
        self._ns_watcher = Watcher(self.api, "", "v1", "namespaces", self._on_namespace, kind="Namespace")
        self._ns_watcher.start()

    def namespaces_synced(self, timeout: float) -> bool:
        return self._ns_watcher is not None and self._ns_watcher.synced.wait(timeout)

    def watch_policies(self, on_policy: OnEvent) -> None:
        """Watch the ValidatingPolicies and NamespacedValidatingPolicies directly (from before the scanner lists
        them, so no change falls between the two): a change reaches the scanner as soon as the API server sends
        it. The operator's Kopf handlers tell it too, but later: measured with 16 policies applied at once, their
        events ran 0.5-1.2 s after the last request, each such delay pushing the quiet that starts their one
        pass."""
        for resource, kind in POLICY_RESOURCES:
            w = Watcher(self.api, GROUP, STORAGE_VERSION, resource, on_policy, kind=kind, emit_initial=False)
            self._policy_watchers.append(w)
            w.start()

    def policy_watchers(self) -> list[Watcher]:
        return list(self._policy_watchers)

    def sync(self, wanted: Mapping[GVR, ResourceInfo], since: Callable[[GVR], str]) -> None:
        """Watch exactly the ``wanted`` types; a new watch starts at ``since(gvr)`` ("" now)."""
        for gvr in list(self._watchers):
            if gvr not in wanted:
                self._watchers.pop(gvr).stop()
        for gvr, info in wanted.items():
            self._types[(info.api_version, info.kind)] = ResourceType(info.group, info.version, info.resource,
                                                                     info.kind, info.namespaced)
            if gvr not in self._watchers:
                # Started before the scan that covers existing objects, so no change is missed; the triggers of a
                # policy that acts on changes (mutateExisting, generation) from when the policy was seen.
                w = Watcher(self.api, *gvr, on_event=self._on_object, kind=info.kind, emit_initial=False,
                            since=since(gvr))
                self._watchers[gvr] = w
                w.start()

    def watched(self) -> list[GVR]:
        return list(self._watchers)

    def resolve(self, api_version: str, kind: str) -> ResourceType | None:
        """The resource type of a kind some watch serves (None when none does)."""
        return self._types.get((api_version, kind))

    def list_all(self, gvrs: Iterable[GVR], page_size: int) -> Iterable[dict[str, Any]]:
        """Every object of ``gvrs``, listed in pages of ``page_size`` (a parsed Pod is ~10x its JSON, and a page
        is held until its last object is evaluated: pages of 500 were the operator's peak resident memory at
        10,000 Pods)."""
        for gvr in gvrs:
            kind = self._watchers[gvr].kind if gvr in self._watchers else ""
            for items, _rv in list_pages(self.api, *gvr, page_size=page_size):
                for item in items:
                    if kind:
                        item.setdefault("kind", kind)
                    yield item

    def stop(self) -> None:
        for w in self._policy_watchers:
            w.stop()
        self._policy_watchers.clear()
        for w in self._watchers.values():
            w.stop()
        self._watchers.clear()
        if self._ns_watcher:
            self._ns_watcher.stop()
            self._ns_watcher = None

    def _on_namespace(self, etype: str, obj: dict[str, Any]) -> None:
        name = (obj.get("metadata") or {}).get("name")
        if not name:
            return
        if etype == "DELETED":
            self.namespaces.pop(name, None)
        else:
            self.namespaces[name] = obj
