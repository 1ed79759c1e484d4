"""Writing vpol's webhook configurations (only the replica holding the leader Lease).

One configurator per configuration: ``vpol-validating`` (ValidatingPolicies)
and ``vpol-mutating`` (MutatingPolicies the API server cannot apply natively).

Level-based: the desired configuration is computed from the webhook
policies (:mod:`vpol.controller.admission.policies`), the serving CA and the
operator's flags by the pure builder :mod:`vpol.desired.webhook`, annotated
with the policy generations it covers (:mod:`vpol.desired.webhook_coverage`),
and compared with the object in the cluster: applied (server-side, field
manager ``vpol``) when different, deleted when no policy needs the webhook
(zero webhook overhead then). Checked again on every policy change and every
few seconds, so an edited or deleted configuration is repaired.

Nothing is written before every policy watch has listed once: a
configuration computed from half the policies would drop rules of the other
half, leaving them unenforced.

With ``owner_cluster_role`` (``--owner-clusterrole``: the installation's own
ClusterRole) every configuration written is owned by that ClusterRole, so
uninstalling vpol garbage-collects it; while the ClusterRole does not exist
(being uninstalled, or misnamed) nothing is written and ``error`` says why.
"""

from __future__ import annotations

import base64
import copy
import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kubernetes import client

from vpol.controller.admission.policies import AdmissionPolicies, Snapshot
from vpol.desired.policy_webhook import POLICY_VALIDATION_CONFIGURATION, policy_validation_configuration
from vpol.desired.probe import PROBE_PATH, with_probe
from vpol.desired.webhook import client_config_at, desired_webhook_configuration, image_webhook_policies
from vpol.desired.webhook_coverage import coverage_annotation
from vpol.kube.errors import describe
from vpol.kube.objects import Objects
from vpol.policies.registry import PLURALS, policy_variants

logger = logging.getLogger(__name__)


def client_config(*, url: str = "", service: Mapping[str, Any] | None = None, ca_pem: bytes) -> dict[str, Any]:
    config: dict[str, Any] = {"url": url} if url else {"service": dict(service or {})}
    config["caBundle"] = base64.b64encode(ca_pem).decode()
    return config


def with_coverage(config: dict[str, Any], snapshot: Snapshot, mutating: bool = False) -> dict[str, Any]:
    md = config.setdefault("metadata", {})
    policies = snapshot.mutating.values() if mutating else snapshot.policies.values()
    images = image_webhook_policies(list(snapshot.images.values()), mutating)
    md["annotations"] = {**(md.get("annotations") or {}), **coverage_annotation(policies, images)}
    return config


def contains(actual: Any, desired: Any) -> bool:
    """Every field of ``desired`` is in ``actual`` with the same value (fields the API server defaulted are
    ignored; lists must have the same length, element by element)."""
    if isinstance(desired, Mapping):
        return isinstance(actual, Mapping) and all(k in actual and contains(actual[k], v) for k, v in desired.items())
    if isinstance(desired, list):
        return isinstance(actual, list) and len(actual) == len(desired) and \
            all(contains(a, d) for a, d in zip(actual, desired))
    return bool(actual == desired)


class WebhookConfigurator(threading.Thread):
    def __init__(self, api: client.ApiClient, policies: AdmissionPolicies, *, name: str,
                 client_config: Callable[[], dict[str, Any] | None], leading: threading.Event,
                 timeout_seconds: int = 10, excluded_namespaces: Sequence[str] = ("kube-system",),
                 period: float = 5.0, serving: Callable[[], int] | None = None, mutating: bool = False,
                 probe_namespace: str = "", owner_cluster_role: str = ""):
        super().__init__(daemon=True, name="vpol-mutating-webhook-configurator" if mutating
                         else "vpol-webhook-configurator")
        #: Writes the MutatingWebhookConfiguration of the webhook's MutatingPolicies instead.
        self.mutating = mutating
        self.objects = Objects(api)
        self.policies = policies
        self.name = name
        self.owner_cluster_role = owner_cluster_role
        self.client_config = client_config
        self.leading = leading
        self.timeout_seconds = timeout_seconds
        self.excluded_namespaces = tuple(excluded_namespaces)
        #: The namespace of the probe ConfigMaps (vpol's own; "" writes no probe webhook): see vpol.desired.probe.
        self.probe_namespace = probe_namespace
        self.period = period
        #: The policy snapshot version this replica's own server answers with (-1 while it does not listen):
        #: rules are written only for policies the local server already serves; removing the configuration
        #: when no policy needs it waits for nothing.
        self.serving = serving or (lambda: self.policies.snapshot.version)
        self._wake = threading.Event()
        self._stop_event = threading.Event()
        #: The last error writing the configuration ("" after a success).
        self.error = ""
        self.writes = 0
        #: The last desired configuration built, with what it was built from (see desired()).
        self._desired: tuple[tuple[Any, ...], dict[str, Any] | None] | None = None
        policies.listen(lambda _s: self._wake.set())

    def stop(self) -> None:
        self._stop_event.set()
        self._wake.set()

    def run(self) -> None:
        pending = False
        while not self._stop_event.is_set():
            self._wake.wait(0.2 if pending else self.period)
            self._wake.clear()
            if self._stop_event.is_set():
                return
            if not self.leading.is_set() or not self.policies.synced:
                continue
            pending = self.waits(self.policies.snapshot)
            if pending:
                continue
            try:
                self.reconcile()
                self.error = ""
            except Exception as exc:  # noqa: BLE001 - keep trying; status tells the policies
                self.error = describe(exc)
                logger.warning("writing the webhook configuration %s failed: %s", self.name, self.error)

    def waits(self, snapshot: Snapshot) -> bool:
        """Whether writing must wait: the local server does not answer for these policies yet."""
        needed = snapshot.mutating if self.mutating else snapshot.policies
        images = image_webhook_policies(list(snapshot.images.values()), self.mutating)
        return bool(needed or images) and self.serving() < snapshot.version

    def desired(self, snapshot: Snapshot) -> dict[str, Any] | None:
        policies: list[Any] = sorted((snapshot.mutating if self.mutating else snapshot.policies).values(),
                                     key=lambda p: p.key)
        if not policies and not image_webhook_policies(list(snapshot.images.values()), self.mutating):
            return None
        config = self.client_config()
        if config is None:
            raise RuntimeError("no serving certificate yet")
        owner = self.owner()
        # The same snapshot, certificate and owner give the same configuration: built once (tens of policies'
        # rules take milliseconds of the GIL, every period, while the server answers admission requests).
        key = (snapshot.version, id(snapshot), json.dumps([config, owner], sort_keys=True))
        if self._desired is not None and self._desired[0] == key:
            return copy.deepcopy(self._desired[1])
        desired = self._build(snapshot, policies, config, owner)
        self._desired = (key, desired)
        return copy.deepcopy(desired)

    def _build(self, snapshot: Snapshot, policies: list[Any], config: dict[str, Any],
               owner: dict[str, Any] | None) -> dict[str, Any] | None:
        images = sorted(snapshot.images.values(), key=lambda p: p.key)
        desired = desired_webhook_configuration(
            policies, variants=policy_variants, client_config=config, timeout_seconds=self.timeout_seconds,
            excluded_namespaces=self.excluded_namespaces, mutating=self.mutating, owner=owner, images=images)
        if desired is None:
            return None
        desired["metadata"]["name"] = self.name
        desired = with_coverage(desired, snapshot, self.mutating)
        if self.probe_namespace:
            # The probe webhook proves the API server calls vpol with this configuration (vpol.desired.probe).
            desired = with_probe(desired, client_config_at(config, PROBE_PATH), self.probe_namespace, self.mutating)
        return desired

    def owner(self) -> dict[str, Any] | None:
        """The ownerReference of the configuration (``--owner-clusterrole``), None without the flag; raises while
        that ClusterRole does not exist (nothing is written without its owner)."""
        if not self.owner_cluster_role:
            return None
        owner = self.objects.cluster_role_reference(self.owner_cluster_role)
        if owner is None:
            raise RuntimeError(f"the ClusterRole {self.owner_cluster_role} named by --owner-clusterrole does not "
                               "exist (vpol is being uninstalled, or the flag names the wrong ClusterRole); "
                               "the webhook configuration is written only with its owner")
        return owner

    def reconcile(self) -> str:
        """Make the cluster's configuration the desired one; returns what was done."""
        snapshot = self.policies.snapshot
        desired = self.desired(snapshot)
        actual = self.objects.get_webhook_configuration(self.name, self.mutating)
        if desired is None:
            if actual is not None and self.objects.delete_webhook_configuration(self.name, self.mutating):
                self.writes += 1
                logger.info("no policy needs the webhook: deleted %s", self.name)
                return "deleted"
            return "unchanged"
        if actual is not None and contains(actual, {k: desired[k] for k in ("webhooks",)}) and \
                contains(actual.get("metadata"), {k: v for k, v in desired["metadata"].items() if k != "name"}):
            return "unchanged"
        self.objects.apply(desired)
        self.writes += 1
        logger.info("applied webhook configuration %s (%d policies)", self.name,
                    len(snapshot.mutating if self.mutating else snapshot.policies))
        return "applied"


class PolicyValidationConfigurator(WebhookConfigurator):
    """Writes ``vpol-policy-validation`` (vpol.desired.policy_webhook): vpol's own kinds validated at apply time.

    It does not depend on the policies; it is written once the local server listens (``enabled``), and deleted
    when the operator runs with ``--policy-validation=off``."""

    def __init__(self, api: client.ApiClient, policies: AdmissionPolicies, *, enabled: bool, **kwargs: Any):
        super().__init__(api, policies, name=POLICY_VALIDATION_CONFIGURATION, **kwargs)
        self.enabled = enabled

    def waits(self, snapshot: Snapshot) -> bool:
        return self.enabled and self.serving() < 0

    def desired(self, snapshot: Snapshot) -> dict[str, Any] | None:
        if not self.enabled:
            return None
        config = self.client_config()
        if config is None:
            raise RuntimeError("no serving certificate yet")
        desired = policy_validation_configuration(config, PLURALS, timeout_seconds=self.timeout_seconds)
        owner = self.owner()
        if owner is not None:
            desired["metadata"]["ownerReferences"] = [owner]
        return desired
