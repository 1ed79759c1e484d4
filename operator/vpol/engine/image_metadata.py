"""``image.GetMetadata(ref)`` served from a registry: the answer Kyverno's imagedata loader gives.

Kyverno (its SDK's ``imagedataloader.FetchImageData``, marshalled to JSON for CEL) answers an object with the
parsed reference (``image``, ``registry``, ``repository``, ``identifier``; ``tag`` for a tag reference,
``digest``), ``resolvedImage`` (``<registry>/<repository>[:<tag>]@<digest>``), the image's ``manifest`` and
its ``config`` (the image configuration blob) and, when the reference names an image index, ``imageIndex`` (the
index as JSON) with ``manifest``/``config`` those of the platform image go-containerregistry picks
(``linux/amd64``). Keys whose value is empty are left out, as Go's ``omitempty`` leaves them out. The manifest
and the config are given as the registry stores them (Kyverno decodes them into go-containerregistry's structs
and encodes them again, which can add that struct's zero fields; docs/operator.md says so).

Pure: the registry is any :class:`vpol.engine.registry_access.Registry`; errors are :class:`RegistryError`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from vpol.cel.backend import Backend, BackendUnavailable, Delegating
from vpol.cel.libraries.kyverno import imageref
from vpol.engine.image_verification import VerificationCache
from vpol.engine.registry_access import Registry, RegistryError

#: The platform go-containerregistry's ``remote.Image`` picks from an index when none is given.
DEFAULT_PLATFORM = ("linux", "amd64")
INDEX_TYPES = ("application/vnd.oci.image.index.v1+json",
               "application/vnd.docker.distribution.manifest.list.v2+json")
#: How long the answer for a tag is kept (a digest's answer never changes: kept for DIGEST_SECONDS).
TAG_SECONDS = 10.0
DIGEST_SECONDS = 3600.0
ENTRIES = 1000


def _platform_entry(index: Mapping[str, Any]) -> Mapping[str, Any] | None:
    entries = [m for m in index.get("manifests") or [] if isinstance(m, Mapping) and isinstance(m.get("digest"), str)]
    for entry in entries:
        platform = entry.get("platform") or {}
        if isinstance(platform, Mapping) and (platform.get("os"), platform.get("architecture")) == DEFAULT_PLATFORM:
            return entry
    return None


def image_metadata(registry: Registry, image: str, deadline: float | None = None) -> dict[str, Any]:
    """Kyverno's ``image.GetMetadata(image)`` answer, read from ``registry``."""
    try:
        ref = imageref.parse(image)
    except imageref.BadReference as exc:
        raise RegistryError(str(exc)) from None
    fetched = registry.manifest(ref.registry, ref.repository, ref.digest or ref.tag, deadline)
    manifest = fetched.json()
    out: dict[str, Any] = {"image": image, "registry": ref.registry, "repository": ref.repository,
                           "identifier": ref.identifier}
    if ref.digest:
        out["digest"] = ref.digest
    else:
        out["tag"] = ref.tag
        out["digest"] = fetched.digest
    name = ref.context_name + (f":{ref.tag}" if not ref.digest else "")
    out["resolvedImage"] = f"{name}@{out['digest']}"
    if fetched.media_type in INDEX_TYPES or "manifests" in manifest:
        out["imageIndex"] = manifest
        entry = _platform_entry(manifest)
        if entry is None:
            raise RegistryError(f"no child with platform {'/'.join(DEFAULT_PLATFORM)} in index {image}")
        manifest = registry.manifest(ref.registry, ref.repository, str(entry["digest"]), deadline).json()
    out["manifest"] = manifest
    config = manifest.get("config")
    if isinstance(config, Mapping) and isinstance(config.get("digest"), str):
        raw = registry.blob(ref.registry, ref.repository, str(config["digest"]), deadline)
        try:
            out["config"] = json.loads(raw)
        except ValueError:
            raise RegistryError(f"the config of {image} is not JSON") from None
    return out


class MetadataCache:
    """Answers of :func:`image_metadata`, by image: a digest reference's for :data:`DIGEST_SECONDS`, a tag's for
    :data:`TAG_SECONDS` (a scan asking for the same image on every Pod asks the registry once, and requests asking
    at the same moment wait for one answer); at most :data:`ENTRIES` in all, the least recently used dropped
    first; failures are not kept. Two of image verification's caches, one per lifetime. Thread-safe."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, entries: int = ENTRIES) -> None:
        self._digests = VerificationCache(ttl=DIGEST_SECONDS, entries=entries // 2, clock=clock)
        self._tags = VerificationCache(ttl=TAG_SECONDS, entries=entries - entries // 2, clock=clock)

    def get(self, registry: Registry, image: str, deadline: float | None = None) -> dict[str, Any]:
        cache = self._digests if "@sha256:" in image else self._tags
        data = cache.compute(image, lambda: image_metadata(registry, image, deadline))
        return json.loads(json.dumps(data))  # a copy: callers may not change what is kept


class PolicyRegistryBackend(Delegating):
    """``inner`` with ``image.GetMetadata`` read through ``registry``: an ImageValidatingPolicy's own registry
    client (its credentials and ``allowInsecureRegistry``), as Kyverno hands such a policy's registry options to the
    imagedata loader; within the deadline of the request or object being evaluated."""

    def __init__(self, inner: Backend, registry: Registry, cache: MetadataCache, deadline: float | None) -> None:
        super().__init__(inner)
        self.registry, self.cache, self.deadline = registry, cache, deadline

    def image_metadata(self, image: str) -> dict[str, Any]:
        try:
            return self.cache.get(self.registry, image, self.deadline)
        except RegistryError as exc:
            raise BackendUnavailable(str(exc)) from None
