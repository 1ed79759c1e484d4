"""The pluggable backend behind Kyverno's I/O libraries.

`resource.*`, `http.*`, `globalContext.*` and `image.GetMetadata` call the
backend that is current for the evaluation (a context variable, so one
compiled environment serves the offline CLI, tests and the operator).
Offline, the CLI installs a backend fed from test context files; in the
cluster, the operator installs one backed by its caches and the API.
"""

from __future__ import annotations

import contextlib
import contextvars
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


_CURRENT: contextvars.ContextVar[Backend] = contextvars.ContextVar("vpol_cel_backend", default=Backend())


def current() -> Backend:
    return _CURRENT.get()


@contextlib.contextmanager
def using(backend: Backend) -> Iterator[Backend]:
    token = _CURRENT.set(backend)
    try:
        yield backend
    finally:
        _CURRENT.reset(token)
