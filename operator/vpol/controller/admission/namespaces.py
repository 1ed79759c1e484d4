"""The cluster's Namespaces, kept by a watch, for ``namespaceObject`` and namespaceSelectors at admission.

A request must not wait for an API call to learn its namespace's labels, so
every replica keeps them in memory (a few hundred bytes per namespace).
Before the first list completes, or for a namespace the watch has not
delivered yet, the namespace is read once from the API server.
"""

from __future__ import annotations

import threading
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from vpol.engine.subjects import namespace_object
from vpol.kube.dynamic import Watcher, get_object


class Namespaces:
    def __init__(self, api: client.ApiClient):
        self.api = api
        self._items: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self.watcher = Watcher(api, "", "v1", "namespaces", self._on_event, kind="Namespace")

    def start(self) -> None:
        self.watcher.start()

    def stop(self) -> None:
        self.watcher.stop()

    def _on_event(self, etype: str, obj: dict[str, Any]) -> None:
        if etype == "SYNCED":
            return
        name = str((obj.get("metadata") or {}).get("name") or "")
        metadata = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
        slim = {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata,
                "spec": obj.get("spec") or {}, "status": obj.get("status") or {}}
        with self._lock:
            if etype == "DELETED":
                self._items.pop(name, None)
            else:
                self._items[name] = slim

    def cached(self, name: str) -> dict[str, Any] | None:
        """The Namespace ``name`` as the watch delivered it, or None (no API call)."""
        with self._lock:
            return self._items.get(name)

    def get(self, name: str) -> dict[str, Any]:
        """The Namespace ``name`` (a minimal one, labelled as the API server does, when it cannot be read)."""
        found = self.cached(name)
        if found is not None:
            return found
        try:
            obj = get_object(self.api, "", "v1", "namespaces", "", name)
            if obj is None:
                return namespace_object(name, {})
            obj.setdefault("apiVersion", "v1")
            obj.setdefault("kind", "Namespace")
            return dict(obj)
        except (ApiException, OSError, ValueError):
            return namespace_object(name, {})
