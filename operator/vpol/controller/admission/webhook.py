"""The admission webhook as a whole: what every replica runs, and what only the leader does.

Every replica: watches the policies and namespaces, keeps its serving
certificate current (``vpol.kube.webhook_tls``) and serves admission
requests. The replica holding the leader Lease also writes the
ValidatingWebhookConfiguration and the MutatingWebhookConfiguration (with the
serving CA as their caBundle), and the configuration validating vpol's own kinds
at apply time (``vpol-policy-validation``, unless ``--policy-validation=off``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import threading
from typing import Any
from urllib.parse import urlsplit

from kubernetes import client

from vpol.cel.backend import Backend
from vpol.controller.admission.configurator import PolicyValidationConfigurator, WebhookConfigurator, client_config
from vpol.controller.admission.images import REGISTRY_TIMEOUT
from vpol.controller.admission.namespaces import Namespaces
from vpol.controller.admission.policies import AdmissionPolicies
from vpol.controller.admission.server import CertificateFiles, ServerOptions, WebhookServer
from vpol.controller.registry_credentials import RegistryClients
from vpol.controller.runtime import Options
from vpol.desired.webhook import MUTATING_WEBHOOK_CONFIGURATION, WEBHOOK_CONFIGURATION
from vpol.engine.global_context import GlobalContextSource
from vpol.kube.errors import describe
from vpol.kube.webhook_tls import WebhookTLS
from vpol.model.discovery import Discovery
from vpol.policies.inline import InlineLimits

logger = logging.getLogger(__name__)

#: How often every replica re-reads (and, when managed, renews) the serving certificate.
CERTIFICATE_PERIOD = 60.0
MANAGED_SECRET = "vpol-webhook-tls"


def serving_names(options: Options) -> tuple[list[str], list[str]]:
    """DNS names and IP addresses the serving certificate must carry."""
    if options.webhook_url:
        host = urlsplit(options.webhook_url).hostname or ""
        try:
            ipaddress.ip_address(host)
            return [], [host]
        except ValueError:
            return [host], []
    svc, ns = options.webhook_service, options.namespace
    return [f"{svc}.{ns}.svc", f"{svc}.{ns}.svc.cluster.local", f"{svc}.{ns}", svc], []


class Admission:
    def __init__(self, api: client.ApiClient, options: Options, *, leading: threading.Event, backend: Backend,
                 discovery: Any, events: Any = None, global_context: GlobalContextSource | None = None):
        self.options = options
        dns_names, ips = serving_names(options)
        managed = not options.webhook_cert_secret
        self.tls = WebhookTLS(api, options.namespace, options.webhook_cert_secret or MANAGED_SECRET,
                              managed=managed, dns_names=dns_names, ip_addresses=ips)
        self.policies = AdmissionPolicies(api, generation=options.vap_generation)
        self.namespaces = Namespaces(api)

        def get_discovery() -> Discovery:
            value: Discovery = discovery.get()
            return value

        certificates = CertificateFiles(self.tls.current, options.webhook_client_ca)
        self.server = WebhookServer(
            self.policies, self.namespaces, get_discovery, certificates, backend=backend,
            options=ServerOptions(port=options.webhook_port, workers=options.webhook_workers,
                                  eval_timeout=min(options.webhook_eval_timeout, max(1.0, options.webhook_timeout - 1)),
                                  eval_memory_mib=options.eval_memory_mib,
                                  inline=InlineLimits() if options.webhook_inline else None,
                                  image_timeout=options.webhook_timeout,
                                  # Behind a URL there is no other replica to hand requests to.
                                  drain_seconds=0.0 if options.webhook_url else options.webhook_drain),
            events=events,
            global_context=global_context,
            registry_clients=RegistryClients(api, options.namespace, timeout=REGISTRY_TIMEOUT))
        service = {"namespace": options.namespace, "name": options.webhook_service, "port": 443}
        self.configurator = WebhookConfigurator(
            api, self.policies, name=WEBHOOK_CONFIGURATION, leading=leading,
            client_config=lambda: self._client_config(service), timeout_seconds=options.webhook_timeout,
            excluded_namespaces=("kube-system", options.namespace, *options.webhook_excluded_namespaces),
            serving=self.server.answering_version, probe_namespace=options.namespace,
            owner_cluster_role=options.owner_cluster_role)
        self.mutating_configurator = WebhookConfigurator(
            api, self.policies, name=MUTATING_WEBHOOK_CONFIGURATION, leading=leading,
            client_config=lambda: self._client_config(service), timeout_seconds=options.webhook_timeout,
            excluded_namespaces=("kube-system", options.namespace, *options.webhook_excluded_namespaces),
            serving=self.server.answering_version, mutating=True, probe_namespace=options.namespace,
            owner_cluster_role=options.owner_cluster_role)
        self.policy_configurator = PolicyValidationConfigurator(
            api, self.policies, enabled=options.policy_validation, leading=leading,
            client_config=lambda: self._client_config(service), timeout_seconds=options.webhook_timeout,
            serving=self.server.answering_version, owner_cluster_role=options.owner_cluster_role)
        self._stop = threading.Event()
        self._cert_thread = threading.Thread(target=self._certificates, daemon=True, name="vpol-webhook-certificate")

    def _client_config(self, service: dict[str, Any]) -> dict[str, Any] | None:
        bundle = self.tls.current()
        if bundle is None:
            return None
        return client_config(url=self.options.webhook_url, service=service, ca_pem=bundle.ca_pem)

    def _certificates(self) -> None:
        while not self._stop.is_set():
            try:
                self.tls.ensure()
            except Exception as exc:  # noqa: BLE001 - keep the certificate we have; try again
                logger.warning("admission webhook certificate: %s", describe(exc))
                self._stop.wait(5)
                continue
            self._stop.wait(CERTIFICATE_PERIOD)

    async def start(self) -> None:
        self._cert_thread.start()
        self.policies.start()
        self.namespaces.start()
        self.configurator.start()
        self.mutating_configurator.start()
        self.policy_configurator.start()
        await self.server.start()

    async def stop(self) -> None:
        self._stop.set()
        self.configurator.stop()
        self.mutating_configurator.stop()
        self.policy_configurator.stop()
        self.policies.stop()
        self.namespaces.stop()
        await self.server.stop()
        await asyncio.to_thread(self.configurator.join, 5)
        await asyncio.to_thread(self.mutating_configurator.join, 5)
        await asyncio.to_thread(self.policy_configurator.join, 5)
