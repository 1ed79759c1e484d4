"""The pluggable backend behind Kyverno's I/O libraries.

`resource.*`, `http.*`, `globalContext.*` and `image.GetMetadata` call the
backend that is current for the evaluation (a context variable, so one
compiled environment serves the offline CLI, tests and the operator).
Offline, the CLI installs a backend fed from test context files; in the
cluster, the operator builds one (vpol.kube.live_backend) when it starts and
makes it the process's default (:func:`install`), so every thread that
evaluates (a webhook's thread pool, the scanner, generation, deletion) is
served by it even where no :func:`using` block was opened.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
from collections.abc import Iterator
from typing import Any


class BackendUnavailable(RuntimeError):
    """The data an I/O library asks for cannot be had here."""


class ObjectNotFound(LookupError):
    """The object asked for does not exist (the API server's NotFound): ``resource.Get`` yields null then,
    as in Kyverno, where every other failure is an error."""


class Backend:
    """Base backend: every call fails with a clear reason.

    Subclasses override what they can serve. Values are plain JSON-like
    Python data (dicts, lists, str, int, float, bool, None).
    """

    name = "none"

    def get_resource(self, api_version: str, resource: str, namespace: str, name: str) -> dict[str, Any]:
        raise BackendUnavailable(f"resource.Get is not available ({self.name} backend)")

    def list_resources(self, api_version: str, resource: str, namespace: str) -> dict[str, Any]:
        raise BackendUnavailable(f"resource.List is not available ({self.name} backend)")

    def post_resource(self, api_version: str, resource: str, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        raise BackendUnavailable(f"resource.Post is not available ({self.name} backend)")

    def to_gvr(self, api_version: str, kind: str) -> dict[str, str]:
        raise BackendUnavailable(f"resource.ToGVR is not available ({self.name} backend)")

    def http_get(self, url: str, headers: dict[str, str] | None = None) -> Any:
        raise BackendUnavailable(f"http.Get is not available ({self.name} backend)")

    def http_post(self, url: str, body: Any, headers: dict[str, str] | None = None) -> Any:
        raise BackendUnavailable(f"http.Post is not available ({self.name} backend)")

    def http_put(self, url: str, body: Any, headers: dict[str, str] | None = None) -> Any:
        raise BackendUnavailable(f"http.Put is not available ({self.name} backend)")

    def global_context(self, name: str, projection: str) -> Any:
        raise BackendUnavailable(f"globalContext.Get is not available ({self.name} backend)")

    def image_metadata(self, image: str) -> dict[str, Any]:
        raise BackendUnavailable(f"image.GetMetadata is not available ({self.name} backend)")

    def for_registry(self, registry: Any, cache: Any, deadline: float | None) -> Backend:
        """This backend as an ImageValidatingPolicy sees it, whose own registry client is ``registry``: where this
        backend reads registries, ``image.GetMetadata`` reads with that client (vpol.kube.live_backend); elsewhere
        (offline: answers mocked by test context files, as Kyverno's CLI mocks them) the backend itself."""
        return self


class Delegating(Backend):
    """A backend that passes every call to ``inner``; subclasses answer one library themselves."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.name = inner.name

    def get_resource(self, api_version: str, resource: str, namespace: str, name: str) -> dict[str, Any]:
        return self.inner.get_resource(api_version, resource, namespace, name)

    def list_resources(self, api_version: str, resource: str, namespace: str) -> dict[str, Any]:
        return self.inner.list_resources(api_version, resource, namespace)

    def post_resource(self, api_version: str, resource: str, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.inner.post_resource(api_version, resource, namespace, body)

    def to_gvr(self, api_version: str, kind: str) -> dict[str, str]:
        return self.inner.to_gvr(api_version, kind)

    def http_get(self, url: str, headers: dict[str, str] | None = None) -> Any:
        return self.inner.http_get(url, headers)

    def http_post(self, url: str, body: Any, headers: dict[str, str] | None = None) -> Any:
        return self.inner.http_post(url, body, headers)

    def http_put(self, url: str, body: Any, headers: dict[str, str] | None = None) -> Any:
        return self.inner.http_put(url, body, headers)

    def global_context(self, name: str, projection: str) -> Any:
        return self.inner.global_context(name, projection)

    def image_metadata(self, image: str) -> dict[str, Any]:
        return self.inner.image_metadata(image)

    def for_registry(self, registry: Any, cache: Any, deadline: float | None) -> Backend:
        inner = self.inner.for_registry(registry, cache, deadline)
        if inner is self.inner:
            return self
        wrapped = copy.copy(self)
        wrapped.inner = inner
        return wrapped


_CURRENT: contextvars.ContextVar[Backend | None] = contextvars.ContextVar("vpol_cel_backend", default=None)
#: What a thread without a :func:`using` block gets (:func:`install`).
_PROCESS: list[Backend] = [Backend()]


def current() -> Backend:
    return _CURRENT.get() or _PROCESS[0]


def install(backend: Backend) -> Backend:
    """Make ``backend`` this process's default (every thread's, where no :func:`using` block says otherwise);
    the previous default is returned."""
    previous, _PROCESS[0] = _PROCESS[0], backend
    return previous


@contextlib.contextmanager
def using(backend: Backend) -> Iterator[Backend]:
    token = _CURRENT.set(backend)
    try:
        yield backend
    finally:
        _CURRENT.reset(token)
