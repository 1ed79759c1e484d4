"""The in-cluster backend of Kyverno's I/O libraries: one per operator process, built from its options when it
starts, handed to every path that evaluates (the webhook's workers and its inline path, the image webhooks, the
scanner, background mutation, generation, deletion, image scans) and made the process's default.

- ``resource.Get/List`` read from the API server (with a short-lived cache,
  so a scan that asks for the same ConfigMap for every Pod asks once);
- ``resource.Post`` creates (for SubjectAccessReview-style calls);
- ``http.*`` only when enabled, and only for URLs under an allowlisted prefix;
- ``globalContext.Get`` from the operator's GlobalContextEntry data: in the
  operator's own process read from its store (``global_context``); an
  evaluation worker (vpol.policies.sandbox) is sent the data and wraps this
  backend (vpol.engine.global_context.GlobalContextBackend);
- ``image.GetMetadata`` from the image's registry (vpol.engine.image_metadata,
  through the registry client ``registry`` makes), answers kept for a while.

The backend is picklable (it holds only how to connect; the store stays behind), because evaluation runs in
worker processes that build their own clients.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from vpol.cel.backend import Backend, BackendUnavailable, ObjectNotFound
from vpol.engine.global_context import GlobalContextSource, SyncedView
from vpol.engine.image_metadata import MetadataCache, PolicyRegistryBackend
from vpol.engine.registry_access import Registry, RegistryError
from vpol.model.discovery import builtin

CACHE_SECONDS = 10.0
MAX_HTTP_BODY = 1024 * 1024  # bytes of an http.* answer read


class LiveBackend(Backend):
    name = "cluster"

    def __init__(self, kubeconfig: str | None = None, context: str | None = None, *,
                 http_allowlist: tuple[str, ...] = (), http_timeout: float = 5.0,
                 cache_seconds: float = CACHE_SECONDS, global_context: GlobalContextSource | None = None,
                 registry: Callable[[], Registry] | None = None, registry_timeout: float = 5.0):
        self.kubeconfig = kubeconfig
        self.context = context
        self.http_allowlist = tuple(http_allowlist)
        self.http_timeout = http_timeout
        self.cache_seconds = cache_seconds
        #: The operator's GlobalContextEntry store (None in a worker process, which is sent the data instead).
        self.global_context_source = global_context
        self._view = SyncedView(global_context) if global_context is not None else None
        #: Makes the registry client of image.GetMetadata (picklable: a class or a partial of one).
        self.registry = registry
        self.registry_timeout = registry_timeout
        self._registry: Registry | None = None
        self._images = MetadataCache()
        self._api: Any = None
        self._cache: dict[str, tuple[float, Any]] = {}
        self._lock = threading.Lock()

    def fresh(self) -> "LiveBackend":
        """The same backend without the cache: what generation clones and deletion evaluates must be the objects as
        they are now (a changed clone source is copied at once, not seconds later)."""
        return LiveBackend(self.kubeconfig, self.context, http_allowlist=self.http_allowlist,
                           http_timeout=self.http_timeout, cache_seconds=0.0,
                           global_context=self.global_context_source, registry=self.registry,
                           registry_timeout=self.registry_timeout)

    def __getstate__(self) -> dict[str, Any]:
        return {"kubeconfig": self.kubeconfig, "context": self.context, "http_allowlist": self.http_allowlist,
                "http_timeout": self.http_timeout, "cache_seconds": self.cache_seconds, "registry": self.registry,
                "registry_timeout": self.registry_timeout}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["kubeconfig"], state["context"], http_allowlist=state["http_allowlist"],  # type: ignore[misc]
                      http_timeout=state["http_timeout"], cache_seconds=state.get("cache_seconds", CACHE_SECONDS),
                      registry=state.get("registry"), registry_timeout=state.get("registry_timeout", 5.0))

    def _client(self) -> Any:
        if self._api is None:
            from vpol.kube.client import api_client

            self._api = api_client(self.kubeconfig, self.context)
        return self._api

    def _get(self, path: str, query: list[tuple[str, Any]] | None = None) -> Any:
        key = path + repr(query)
        hit = self._cache.get(key)
        if hit and time.monotonic() - hit[0] < self.cache_seconds:
            return hit[1]
        from kubernetes.client.rest import ApiException

        from vpol.kube.dynamic import _call

        try:
            resp = _call(self._client(), path, query or [], timeout=10)
            data = json.loads(resp.data)
            resp.release_conn()
        except ApiException as exc:
            if exc.status == 404:
                raise ObjectNotFound(f"GET {path}: not found") from None
            raise BackendUnavailable(f"GET {path}: {exc.status} {exc.reason}") from None
        if self.cache_seconds > 0:
            if len(self._cache) > 1000:
                self._cache.clear()
            self._cache[key] = (time.monotonic(), data)
        return data

    @staticmethod
    def _path(api_version: str, resource: str, namespace: str) -> tuple[str, str]:
        base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        res, _, sub = resource.partition("/")
        ns = f"/namespaces/{namespace}" if namespace else ""
        return f"{base}{ns}/{res}", sub

    def get_resource(self, api_version: str, resource: str, namespace: str, name: str) -> dict[str, Any]:
        path, sub = self._path(api_version, resource, namespace)
        return dict(self._get(f"{path}/{name}" + (f"/{sub}" if sub else "")))

    def list_resources(self, api_version: str, resource: str, namespace: str) -> dict[str, Any]:
        path, _sub = self._path(api_version, resource, namespace)
        listed = dict(self._get(path, [("limit", 500)]))
        # The API server leaves apiVersion and kind out of a list's items; Kyverno's client (client-go's
        # unstructured list decoding) puts them back from the list's, so policies see them.
        kind = str(listed.get("kind") or "")
        item_kind = kind[:-4] if kind.endswith("List") else ""
        for item in listed.get("items") or []:
            if isinstance(item, dict):
                item.setdefault("apiVersion", listed.get("apiVersion") or api_version)
                if item_kind:
                    item.setdefault("kind", item_kind)
        return listed

    def post_resource(self, api_version: str, resource: str, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        from kubernetes.client.rest import ApiException

        path, _sub = self._path(api_version, resource, namespace)
        api = self._client()
        method, url, headers, payload, _post = api.param_serialize(
            method="POST", resource_path=path, body=body, header_params={"Content-Type": "application/json",
                                                                         "Accept": "application/json"},
            auth_settings=["BearerToken"])
        try:
            resp = api.call_api(method, url, header_params=headers, body=payload, _request_timeout=10)
        except ApiException as exc:
            raise BackendUnavailable(f"POST {path}: {exc.status} {exc.reason}") from None
        data = resp.read()
        if not 200 <= int(resp.status) < 300:
            raise BackendUnavailable(f"POST {path}: HTTP {resp.status}")
        return dict(json.loads(data))

    def to_gvr(self, api_version: str, kind: str) -> dict[str, str]:
        info = builtin().resource_for_kind(api_version, kind)
        if info is None:
            raise BackendUnavailable(f"no resource is known for {api_version}, Kind={kind}")
        return {"group": info.group, "version": info.version, "resource": info.resource}

    def _http(self, method: str, url: str, body: Any = None, headers: dict[str, str] | None = None) -> Any:
        """What Kyverno's live HTTP client answers: the decoded JSON body; a status outside 2xx
        (``HTTP 404 Not Found``) and a body that is not JSON are errors. (Its CLI's mocks answer the whole
        ``{statusCode, body}`` they are given: that is vpol.cel.offline_backend's.)"""
        if not self.http_allowlist:
            raise BackendUnavailable("http calls are disabled (enable them with --http-allow PREFIX)")
        if not any(url.startswith(prefix) for prefix in self.http_allowlist):
            raise BackendUnavailable(f"{url} is not under an allowed prefix ({', '.join(self.http_allowlist)})")
        # Kyverno sends a JSON body for Post/Put (null included) and only the headers given; urllib would label a
        # body form-encoded unless told otherwise, so a JSON body says so unless the policy set its own type.
        data = json.dumps(body).encode() if method != "GET" else None
        sent = dict(headers or {})
        if data is not None and not any(k.lower() == "content-type" for k in sent):
            sent["Content-Type"] = "application/json"
        req = urllib.request.Request(url, data=data, method=method, headers=sent)
        try:
            with urllib.request.urlopen(req, timeout=self.http_timeout) as resp:  # noqa: S310 - allowlisted
                raw = resp.read(MAX_HTTP_BODY)
        except urllib.error.HTTPError as exc:
            raise BackendUnavailable(f"HTTP {exc.code} {exc.reason}") from None
        except OSError as exc:
            raise BackendUnavailable(f"{method} {url}: {exc}") from None
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise BackendUnavailable(f"Unable to decode JSON body {exc}") from None

    def http_get(self, url: str, headers: dict[str, str] | None = None) -> Any:
        return self._http("GET", url, None, headers)

    def http_post(self, url: str, body: Any, headers: dict[str, str] | None = None) -> Any:
        return self._http("POST", url, body, headers)

    def http_put(self, url: str, body: Any, headers: dict[str, str] | None = None) -> Any:
        return self._http("PUT", url, body, headers)

    def global_context(self, name: str, projection: str) -> Any:
        if self._view is None:
            raise BackendUnavailable("GlobalContextEntry data is not available in this process")
        return self._view.get_checked(name, projection)

    def for_registry(self, registry: Any, cache: Any, deadline: float | None) -> Backend:
        return PolicyRegistryBackend(self, registry, cache, deadline)

    def image_metadata(self, image: str) -> dict[str, Any]:
        if self.registry is None:
            raise BackendUnavailable("image.GetMetadata has no registry client here")
        with self._lock:
            if self._registry is None:
                self._registry = self.registry()
            registry = self._registry
        try:
            # A few requests (manifest, index child, config) share one deadline.
            return self._images.get(registry, image, time.monotonic() + 2 * self.registry_timeout)
        except RegistryError as exc:
            raise BackendUnavailable(str(exc)) from None
