"""Registry access for ImageValidatingPolicies in a cluster: the credentials and settings each policy reads with,
as plain data (vpol.oci.access) its evaluation worker builds a client from; and the client of ``image.GetMetadata``.

A policy's ``credentials.secrets`` and its cosign attestors' ``source.PullSecrets`` name image pull Secrets (type
``kubernetes.io/dockerconfigjson``, or the older ``kubernetes.io/dockercfg``) in the operator's namespace, as
Kyverno's name Secrets in its own; ``credentials.allowInsecureRegistry`` allows plain HTTP and unverified TLS. The
Secrets are read when a policy first needs them and again after :data:`REFRESH_SECONDS` (a rotated password is
used within a minute); reading them needs ``get`` on those Secrets (the chart's ``rbac.registrySecrets``). A Secret
that cannot be read is logged once per refresh and left out: the registry then says what it refuses.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from vpol.controller import metrics
from vpol.kube.dynamic import get_object
from vpol.oci.access import RegistryAccess
from vpol.oci.registry import RegistryClient
from vpol.policies.image_validating.model import ImageValidatingPolicy

logger = logging.getLogger(__name__)

REFRESH_SECONDS = 60.0


def secret_names(policy: ImageValidatingPolicy) -> tuple[str, ...]:
    """The pull Secrets a policy names (its credentials', then its attestors' signature repositories')."""
    names = list(policy.spec.credentials.secrets)
    for attestor in policy.spec.attestors:
        if attestor.cosign is not None:
            names += attestor.cosign.source_pull_secrets
    return tuple(dict.fromkeys(n for n in names if n))


def docker_config(secret: Mapping[str, Any]) -> dict[str, Any] | None:
    """The Docker config JSON an image pull Secret holds (None: not such a Secret)."""
    data = secret.get("data") or {}
    for key, wrap in ((".dockerconfigjson", False), (".dockercfg", True)):
        if key in data:
            try:
                config = json.loads(base64.b64decode(data[key]))
            except (ValueError, TypeError):
                return None
            if not isinstance(config, dict):
                return None
            return {"auths": config} if wrap else config
    return None


class RegistryClients:
    """The registry access each policy reads with (thread-safe): what its evaluation worker builds its client from
    (vpol.oci.access)."""

    def __init__(self, api: client.ApiClient | None, namespace: str, *, timeout: float = 5.0,
                 clock: Callable[[], float] = time.monotonic):
        self.api = api
        self.namespace = namespace
        self.timeout = timeout
        self.clock = clock
        self._lock = threading.Lock()
        self._access: dict[tuple[tuple[str, ...], bool], tuple[float, RegistryAccess]] = {}

    def access_for(self, policy: ImageValidatingPolicy) -> RegistryAccess:
        """The access of ``policy``: its pull Secrets' Docker configs (read again after :data:`REFRESH_SECONDS`)
        and ``allowInsecureRegistry``."""
        key = (secret_names(policy), policy.spec.credentials.allow_insecure_registry)
        with self._lock:
            held = self._access.get(key)
        if held is not None and (not key[0] or self.clock() < held[0]):
            return held[1]
        access = RegistryAccess.of(self._configs(key[0]) if key[0] else [], insecure=key[1], timeout=self.timeout)
        with self._lock:
            self._access[key] = (self.clock() + REFRESH_SECONDS, access)
        return access

    def access(self, policies: Iterable[ImageValidatingPolicy]) -> dict[str, RegistryAccess]:
        """The access of each policy, by key."""
        return {p.key: self.access_for(p) for p in policies}

    def _configs(self, names: tuple[str, ...]) -> list[Mapping[str, Any]]:
        out: list[Mapping[str, Any]] = []
        if self.api is None:
            return out
        for name in names:
            try:
                # Read generically (vpol.kube.dynamic): the generated CoreV1Api costs the operator 21 MiB.
                secret = get_object(self.api, "", "v1", "secrets", self.namespace, name)
            except ApiException as exc:
                logger.warning("image pull Secret %s/%s cannot be read (%s): registries are read without it",
                               self.namespace, name, exc.reason or exc.status)
                continue
            if secret is None:
                logger.warning("image pull Secret %s/%s does not exist: registries are read without it",
                               self.namespace, name)
                continue
            config = docker_config(secret)
            if config is None:
                logger.warning("Secret %s/%s holds no Docker config (.dockerconfigjson): left out", self.namespace,
                               name)
                continue
            out.append(config)
        return out


def _count_request(kind: str) -> None:
    metrics.IMAGE_REGISTRY_REQUESTS.labels(kind).inc()


def metadata_client(timeout: float = 5.0) -> RegistryClient:
    """The registry client of ``image.GetMetadata`` in every kind and path: anonymous (Kyverno's, without its
    ``--imagePullSecrets``, reads with its default keychain, which a Pod without registry credentials has empty),
    plain HTTP where go-containerregistry uses it (vpol.oci.registry.plain_http). A module-level function, so the
    backend that names it can be sent to evaluation workers."""
    return RegistryClient(None, timeout=timeout, on_request=_count_request)
