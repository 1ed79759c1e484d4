"""The webhook's serving certificate in its Secret: read it, and (when vpol manages it) create or renew it.

Every replica calls :meth:`WebhookTLS.ensure` now and then. With a managed
Secret the first replica to find it missing or due for renewal writes a new
one; a replica that loses the race (409) reads the winner's, so all replicas
serve the same pair and the webhook configuration's caBundle matches it. An
unmanaged Secret (``--webhook-cert-secret``, e.g. cert-manager's) is only read.
"""

from __future__ import annotations

import datetime
import logging
import threading
from collections.abc import Sequence
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from vpol.kube.dynamic import create_object, get_object, replace_object
from vpol.desired.certificates import (ServingCertificate, from_secret_data, needs_renewal, new_serving_certificate,
                                       to_secret_data)

logger = logging.getLogger(__name__)


class CertificateUnavailable(RuntimeError):
    """The Secret that should hold the certificate is missing or incomplete."""


class WebhookTLS:
    def __init__(self, api: client.ApiClient, namespace: str, secret_name: str = "vpol-webhook-tls", *,
                 managed: bool = True, dns_names: Sequence[str] = (), ip_addresses: Sequence[str] = ()):
        self.api = api
        self.namespace = namespace
        self.secret_name = secret_name
        self.managed = managed
        self.dns_names = tuple(dns_names)
        self.ip_addresses = tuple(ip_addresses)
        self._current: ServingCertificate | None = None
        self._lock = threading.Lock()

    def current(self) -> ServingCertificate | None:
        """The bundle last read or written (None before the first successful :meth:`ensure`)."""
        with self._lock:
            return self._current

    def _read(self) -> tuple[Any, ServingCertificate | None]:
        secret = get_object(self.api, "", "v1", "secrets", self.namespace, self.secret_name)  # None: not found
        if secret is None:
            return None, None
        return secret, from_secret_data(secret.get("data"))

    def ensure(self, now: datetime.datetime | None = None) -> ServingCertificate:
        """A current bundle: read, or (managed) created or renewed. Raises CertificateUnavailable otherwise."""
        now = now or datetime.datetime.now(datetime.timezone.utc)
        for _attempt in range(3):
            secret, bundle = self._read()
            if not self.managed:
                if bundle is None:
                    raise CertificateUnavailable(
                        f"Secret {self.namespace}/{self.secret_name} is missing or lacks ca.crt, tls.crt, tls.key")
                return self._keep(bundle)
            if not needs_renewal(bundle, self.dns_names, self.ip_addresses, now=now):
                assert bundle is not None
                return self._keep(bundle)
            fresh = new_serving_certificate(self.dns_names, self.ip_addresses, now=now)
            metadata: dict[str, Any] = {"name": self.secret_name, "namespace": self.namespace,
                                        "labels": {"app.kubernetes.io/managed-by": "vpol"}}
            body = {"apiVersion": "v1", "kind": "Secret", "metadata": metadata, "type": "kubernetes.io/tls",
                    "data": dict(to_secret_data(fresh))}
            try:
                if secret is None:
                    create_object(self.api, "", "v1", "secrets", self.namespace, body)
                    logger.info("created the webhook serving certificate in %s/%s", self.namespace, self.secret_name)
                else:
                    metadata["resourceVersion"] = (secret.get("metadata") or {}).get("resourceVersion")
                    replace_object(self.api, "", "v1", "secrets", self.namespace, self.secret_name, body)
                    logger.info("renewed the webhook serving certificate in %s/%s", self.namespace,
                                self.secret_name)
                return self._keep(fresh)
            except ApiException as exc:
                if exc.status != 409:  # 409: another replica wrote it first; read theirs
                    raise
        raise CertificateUnavailable(f"Secret {self.namespace}/{self.secret_name} keeps changing")

    def _keep(self, bundle: ServingCertificate) -> ServingCertificate:
        with self._lock:
            self._current = bundle
        return bundle
