"""Asking the API server what the operator's own identity may do (SelfSubjectAccessReview)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

from kubernetes import client

VERBS = ("get", "list", "watch")


#: How long an access review answer is reused (RBAC changes are rare; reconciles are not).
CACHE_SECONDS = 30.0


class AccessChecker:
    """SelfSubjectAccessReviews with a short-lived cache (thread-safe)."""

    def __init__(self, api: client.ApiClient, ttl: float = CACHE_SECONDS):
        self.authz = client.AuthorizationV1Api(api)
        self.ttl = ttl
        self._cache: dict[tuple[str, str, str, str], tuple[float, bool]] = {}
        self._lock = threading.Lock()

    def allowed(self, group: str, version: str, resource: str, verb: str) -> bool:
        key = (group, version, resource, verb)
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(key)
        if hit and now - hit[0] < self.ttl:
            return hit[1]
        # A subresource ("pods/resize") is asked for as RBAC grants it: the resource and its subresource.
        base, _, sub = resource.partition("/")
        review = client.V1SelfSubjectAccessReview(spec=client.V1SelfSubjectAccessReviewSpec(
            resource_attributes=client.V1ResourceAttributes(group=group, version=version, resource=base,
                                                            subresource=sub or None, verb=verb)))
        result = self.authz.create_self_subject_access_review(review)
        ok = bool(result.status and result.status.allowed)
        with self._lock:
            self._cache[key] = (now, ok)
        return ok

    def missing(self, resources: Iterable[tuple[str, str, str]], verbs: Iterable[str] = VERBS) -> list[str]:
        """``"<verb> <group>/<version> <resource>"`` for each (group, version, resource) not allowed."""
        out = []
        for group, version, resource in resources:
            for verb in verbs:
                if not self.allowed(group, version, resource, verb):
                    gv = f"{group}/{version}" if group else version
                    out.append(f"{verb} {gv} {resource}")
        return out
