"""The cluster's API discovery and schemas, cached for every part of the operator (thread-safe).

The reconciler type-checks policies and resolves what they match against it, the scanner watches what it names,
and the webhook routes by it; a kind missing from it (a CRD installed since) makes it look again, at most every
:data:`MISS_REFRESH` seconds.
"""

from __future__ import annotations

import logging
import threading
import time

from kubernetes import client

from vpol.kube.errors import describe
from vpol.kube.openapi import cluster_discovery
from vpol.model.discovery import Discovery, ResourceInfo, builtin

logger = logging.getLogger(__name__)

#: How long cluster discovery (resources and schemas) is reused before refetching.
DISCOVERY_TTL = 300.0
#: After a failed discovery, how soon to try again (seconds).
RETRY_AFTER_FAILURE = 15.0
#: Seconds between the rediscoveries that a kind missing from the cached discovery may cause.
MISS_REFRESH = 5.0



class DiscoveryCache:
    """The cluster's discovery and schemas, refreshed every ``ttl`` seconds (thread-safe)."""

    def __init__(self, api: client.ApiClient, ttl: float = DISCOVERY_TTL):
        self.api = api
        self.ttl = ttl
        self._value: Discovery | None = None
        self._at = 0.0
        self._lock = threading.Lock()
        self.error = ""

    def get(self) -> Discovery:
        with self._lock:
            if self._value is None or time.monotonic() - self._at > self.ttl:
                try:
                    self._value = cluster_discovery(self.api, builtin())
                    self.error = ""
                    self._at = time.monotonic()
                except Exception as exc:  # noqa: BLE001 - fall back to the bundled discovery
                    logger.warning("cluster discovery failed, using the bundled one: %s", describe(exc))
                    self.error = describe(exc)
                    if self._value is None:
                        self._value = builtin()
                    # try again soon rather than after a whole TTL
                    self._at = time.monotonic() - self.ttl + RETRY_AFTER_FAILURE
            return self._value

    def invalidate(self) -> None:
        with self._lock:
            self._at = 0.0

    def resource_for_kind(self, api_version: str, kind: str) -> ResourceInfo | None:
        """What serves ``kind`` of ``api_version``; a kind the cached discovery does not know is looked up again
        first (a CRD installed since), at most once every :data:`MISS_REFRESH` seconds."""
        found = self.get().resource_for_kind(api_version, kind)
        if found is not None:
            return found
        with self._lock:
            if time.monotonic() - self._at >= MISS_REFRESH:
                self._at = 0.0
        return self.get().resource_for_kind(api_version, kind)

