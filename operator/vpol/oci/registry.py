"""Reading OCI registries: manifests, blobs and referrers, as image verification needs them.

The client speaks the OCI distribution API over HTTP(S):

- ``GET /v2/<repo>/manifests/<tag or digest>`` with the OCI and Docker manifest media types accepted; a manifest
  fetched by digest is checked against it, and the digest of one fetched by tag is the server's
  ``Docker-Content-Digest`` checked against the body;
- ``GET /v2/<repo>/blobs/<digest>``, checked against the digest, at most :data:`MAX_BLOB` bytes;
- ``GET /v2/<repo>/referrers/<digest>`` (OCI 1.1); a registry without the API (404) is read through the referrers
  tag schema: the image index tagged ``sha256-<hex>``;
- authentication as Docker clients do it: anonymous first, then on a 401 the challenge of
  ``WWW-Authenticate``: ``Bearer realm=...,service=...`` is answered by a token from the realm (with the
  credentials for that registry, if any, as basic authentication), ``Basic`` by the credentials.

Plain HTTP is used where go-containerregistry (and so Kyverno) uses it without being told: ``localhost``,
``127.0.0.1``, ``::1`` and hosts ending in ``.local`` or ``.localhost``; elsewhere only with ``insecure`` (the
policy's ``credentials.allowInsecureRegistry``), which also skips TLS verification.

Every call has a deadline, and every error is a :class:`RegistryError` saying what was asked of which registry.

Hand-written on urllib3 (installed with the Kubernetes client) rather than with an OCI library: the surface is
these four reads plus the token dance, and what matters here is that every request shares the deadline of the
admission request it serves and that every body is checked against its digest before anything is parsed, which a
thin client makes plain; ``oras`` (the Python OCI SDK) centres on pushing and pulling artifacts to files.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import urllib3

from vpol.engine.registry_access import Fetched, NotFound, RegistryError

__all__ = ["Credentials", "Fetched", "NotFound", "RegistryClient", "RegistryError", "plain_http"]

MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
INDEX_TYPES = ("application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json")
#: Largest manifest, referrers index and blob read (signature layers and attestations are kilobytes).
MAX_MANIFEST = 4 * 1024 * 1024
MAX_BLOB = 16 * 1024 * 1024
_CHALLENGE_RX = re.compile(r'(\w+)="([^"]*)"')
_PLAIN_HOSTS = ("localhost", "127.0.0.1", "::1", "[::1]")


def plain_http(registry: str) -> bool:
    """Whether go-containerregistry talks plain HTTP to ``registry`` (host[:port]) without being told to."""
    if registry.startswith("["):
        host = registry.split("]", 1)[0] + "]"
    elif registry.count(":") == 1:
        host = registry.split(":", 1)[0]
    else:
        host = registry
    return host in _PLAIN_HOSTS or host.endswith((".local", ".localhost"))


def sha256_digest(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


def _check_digest(body: bytes, digest: str, what: str) -> None:
    algorithm, _, _hex = digest.partition(":")
    if algorithm != "sha256":
        raise RegistryError(f"{what}: unsupported digest algorithm {algorithm!r}")
    if sha256_digest(body) != digest:
        raise RegistryError(f"{what}: the content does not match its digest {digest}")


class Credentials:
    """Registry credentials from Docker config JSON documents (image pull Secrets): (user, password) per host."""

    def __init__(self, configs: list[Mapping[str, Any]] | None = None):
        self._by_host: dict[str, tuple[str, str]] = {}
        for config in configs or []:
            for host, entry in ((config.get("auths") or {}) if isinstance(config, Mapping) else {}).items():
                if not isinstance(entry, Mapping):
                    continue
                user, password = str(entry.get("username") or ""), str(entry.get("password") or "")
                if entry.get("auth"):
                    try:
                        user, _, password = base64.b64decode(str(entry["auth"])).decode().partition(":")
                    except (ValueError, UnicodeDecodeError):
                        continue
                key = re.sub(r"^https?://", "", str(host)).split("/", 1)[0]
                self._by_host.setdefault(key, (user, password))

    def for_registry(self, registry: str) -> tuple[str, str] | None:
        if registry in self._by_host:
            return self._by_host[registry]
        if registry == "index.docker.io":
            return self._by_host.get("docker.io") or self._by_host.get("registry-1.docker.io")
        return None


class RegistryClient:
    """One client per set of credentials and settings; thread-safe (tokens are shared per registry and scope)."""

    def __init__(self, credentials: Credentials | None = None, *, insecure: bool = False, timeout: float = 5.0,
                 pool: urllib3.PoolManager | None = None, on_request: Callable[[str], None] | None = None):
        self.credentials = credentials or Credentials()
        self.insecure = insecure
        self.timeout = timeout
        self._pool = pool or urllib3.PoolManager(num_pools=16, maxsize=8, retries=False,
                                                 cert_reqs="CERT_NONE" if insecure else "CERT_REQUIRED")
        self._tokens: dict[tuple[str, str], str] = {}
        #: Registries found to speak plain HTTP (``insecure`` only: HTTPS is tried first, as go-containerregistry
        #: does for an insecure registry).
        self._plain: set[str] = set()
        self._lock = threading.Lock()
        #: Requests sent, by kind (manifest, blob, referrer, token): what benchmarks count.
        self.requests: dict[str, int] = {}
        #: Told the kind of every request sent (the operator's metrics).
        self.on_request = on_request

    # -- the API --------------------------------------------------------------------------------------------

    def manifest(self, registry: str, repository: str, reference: str, deadline: float | None = None) -> Fetched:
        """The manifest of ``reference`` (a tag or a digest) in ``registry/repository``."""
        what = f"manifest {registry}/{repository}{'@' if reference.startswith('sha256:') else ':'}{reference}"
        response = self._get(registry, repository, f"manifests/{reference}", what, deadline,
                             accept=", ".join(MANIFEST_TYPES), limit=MAX_MANIFEST)
        body = response.data
        if reference.startswith("sha256:"):
            _check_digest(body, reference, what)
            digest = reference
        else:
            digest = response.headers.get("Docker-Content-Digest") or sha256_digest(body)
            _check_digest(body, digest, what)
        media_type = (response.headers.get("Content-Type") or "").split(";")[0].strip()
        try:
            media_type = str(json.loads(body).get("mediaType") or media_type)
        except (ValueError, AttributeError):
            raise RegistryError(f"{what}: not a JSON manifest") from None
        return Fetched(body, media_type, digest)

    def blob(self, registry: str, repository: str, digest: str, deadline: float | None = None) -> bytes:
        response = self._get(registry, repository, f"blobs/{digest}", f"blob {registry}/{repository}@{digest}",
                             deadline, limit=MAX_BLOB)
        _check_digest(response.data, digest, f"blob {registry}/{repository}@{digest}")
        return bytes(response.data)

    def referrers(self, registry: str, repository: str, digest: str,
                  deadline: float | None = None) -> list[dict[str, Any]]:
        """The descriptors of the manifests whose ``subject`` is ``digest``: the referrers API, or the tag schema
        when the registry has no such API."""
        try:
            response = self._get(registry, repository, f"referrers/{digest}",
                                 f"referrers of {registry}/{repository}@{digest}", deadline,
                                 accept=INDEX_TYPES[0], limit=MAX_MANIFEST)
            index = json.loads(response.data)
        except NotFound:
            try:
                index = self.manifest(registry, repository, digest.replace(":", "-"), deadline).json()
            except NotFound:
                return []
        except ValueError:
            raise RegistryError(f"referrers of {registry}/{repository}@{digest}: not a JSON index") from None
        manifests = index.get("manifests") if isinstance(index, dict) else None
        return [m for m in manifests or [] if isinstance(m, dict) and isinstance(m.get("digest"), str)]

    # -- HTTP -----------------------------------------------------------------------------------------------

    def _count(self, kind: str) -> None:
        with self._lock:
            self.requests[kind] = self.requests.get(kind, 0) + 1
        if self.on_request is not None:
            self.on_request(kind)

    def _url(self, registry: str, path: str) -> str:
        scheme = "http" if plain_http(registry) or registry in self._plain else "https"
        return f"{scheme}://{registry}/v2/{path}"

    def _remaining(self, deadline: float | None, what: str) -> float:
        if deadline is None:
            return self.timeout
        left = deadline - time.monotonic()
        if left <= 0:
            raise RegistryError(f"{what}: out of time")
        return min(left, self.timeout)

    def _get(self, registry: str, repository: str, path: str, what: str, deadline: float | None, *,
             accept: str = "*/*", limit: int) -> _Answer:
        kind = path.split("/", 1)[0].rstrip("s")  # manifest, blob, referrer
        url = self._url(registry, f"{repository}/{path}")
        scope = f"repository:{repository}:pull"
        for attempt in range(2):
            headers = {"Accept": accept}
            token = self._tokens.get((registry, scope))
            if token:
                headers["Authorization"] = token
            try:
                response = self._request("GET", url, headers, deadline, what, limit)
            except RegistryError:
                if not self.insecure or registry in self._plain or not url.startswith("https://"):
                    raise
                with self._lock:
                    self._plain.add(registry)  # an insecure registry without TLS: plain HTTP from now on
                url = self._url(registry, f"{repository}/{path}")
                response = self._request("GET", url, headers, deadline, what, limit)
            self._count(kind)
            if response.status == 401 and attempt == 0:
                self._authenticate(registry, scope, response.headers.get("WWW-Authenticate", ""), deadline, what)
                continue
            if response.status == 404:
                raise NotFound(f"{what}: not found")
            if response.status != 200:
                raise RegistryError(f"{what}: the registry answered {response.status} {_reason(response)}")
            return response
        raise RegistryError(f"{what}: unauthorized")

    def _request(self, method: str, url: str, headers: Mapping[str, str], deadline: float | None, what: str,
                 limit: int) -> _Answer:
        seconds = self._remaining(deadline, what)
        try:
            response = self._pool.request(method, url, headers=dict(headers), preload_content=False,
                                          timeout=urllib3.Timeout(connect=seconds, read=seconds), redirect=True)
        except urllib3.exceptions.HTTPError as exc:
            raise RegistryError(f"{what}: {_describe(exc)}") from None
        try:
            body = response.read(limit + 1)
        except urllib3.exceptions.HTTPError as exc:
            raise RegistryError(f"{what}: {_describe(exc)}") from None
        finally:
            response.release_conn()
        if len(body) > limit:
            raise RegistryError(f"{what}: larger than {limit} bytes")
        return _Answer(response.status, response.headers, body)

    def _authenticate(self, registry: str, scope: str, challenge: str, deadline: float | None, what: str) -> None:
        scheme, _, params = challenge.partition(" ")
        creds = self.credentials.for_registry(registry)
        basic = "Basic " + base64.b64encode(f"{creds[0]}:{creds[1]}".encode()).decode() if creds else ""
        if scheme.lower() == "basic":
            if not basic:
                raise RegistryError(f"{what}: the registry asks for credentials and none were given")
            self._tokens[(registry, scope)] = basic
            return
        if scheme.lower() != "bearer":
            raise RegistryError(f"{what}: unauthorized (challenge {challenge!r})")
        fields = dict(_CHALLENGE_RX.findall(params))
        realm = fields.get("realm")
        if not realm:
            raise RegistryError(f"{what}: a Bearer challenge without a realm")
        query = urllib.parse.urlencode({"service": fields.get("service", ""), "scope": scope})
        response = self._request("GET", f"{realm}?{query}", {"Authorization": basic} if basic else {}, deadline,
                                 f"{what} (token)", MAX_MANIFEST)
        self._count("token")
        if response.status != 200:
            raise RegistryError(f"{what}: the token service answered {response.status} {_reason(response)}")
        try:
            answer = json.loads(response.data)
            token = answer.get("token") or answer.get("access_token")
        except (ValueError, AttributeError):
            token = None
        if not isinstance(token, str) or not token:
            raise RegistryError(f"{what}: the token service gave no token")
        with self._lock:
            self._tokens[(registry, scope)] = f"Bearer {token}"


@dataclass(frozen=True)
class _Answer:
    """A response read once, within its size limit."""

    status: int
    headers: Mapping[str, str]
    data: bytes


def _reason(response: _Answer) -> str:
    try:
        errors = json.loads(response.data).get("errors") or []
        return "; ".join(str(e.get("message") or e.get("code")) for e in errors if isinstance(e, dict))
    except (ValueError, AttributeError):
        return ""


def _describe(exc: Exception) -> str:
    reason = getattr(exc, "reason", None)
    text = str(reason or exc)
    if "timed out" in text.lower():
        return "timed out"
    if "refused" in text.lower():
        return "connection refused"
    return text
