"""Every replica's view of the policies its admission webhook enforces.

Kopf's peering lets only one replica handle events, but every replica serves
admission requests, so each keeps its own copy of the policies and exceptions,
fed by watches of its own (list, then watch; a relist drops what disappeared).
Which policies the webhook enforces is decided by the same pure function as
the reconciler's (:func:`vpol.policies.validating.enforcement.route`), from the policy and
the operator's flags, plus one fact only the cluster knows: the API server
refused the policy's generated VAP (the reconciler records that in the status
condition ``VAPGenerated=False, ApplyFailed`` for the current generation).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from vpol.controller.reconcile import EXPIRY_MARGIN
from vpol.desired.enforcement import GENERATION_ELIGIBLE
from vpol.kube.dynamic import Watcher
from vpol.kube.objects import EXCEPTION_PLURAL, GROUP, STORAGE_VERSION
from vpol.model.kind import ADMISSION
from vpol.model.parse import parse_exception
from vpol.model.policy import PolicyException, active_exceptions, policy_key
from vpol.policies.image_validating.compile import compile_image_validating_policy
from vpol.policies.image_validating.model import ImageValidatingPolicy, parse_image_validating_policy
from vpol.policies.mutating.compile import compile_mutating_policy
from vpol.policies.mutating.map import WEBHOOK, mutating_route
from vpol.policies.mutating.model import MutatingPolicy, parse_mutating_policy
from vpol.policies.registry import KINDS
from vpol.policies.validating.compile import compile_verdict
from vpol.policies.validating.enforcement import route
from vpol.policies.validating.model import ValidatingPolicy, parse_policy

logger = logging.getLogger(__name__)


def vap_refused(body: Mapping[str, Any], condition: str = "VAPGenerated") -> bool:
    """The status says the API server refused this generation's VAP (or MAP)."""
    generation = int((body.get("metadata") or {}).get("generation") or 0)
    for c in ((body.get("status") or {}).get("conditions")) or []:
        if isinstance(c, Mapping) and c.get("type") == condition and c.get("status") == "False" and \
                c.get("reason") == "ApplyFailed" and int(c.get("observedGeneration") or 0) == generation:
            return True
    return False


def map_refused(body: Mapping[str, Any]) -> bool:
    return vap_refused(body, "MAPGenerated")


@dataclass(frozen=True)
class Snapshot:
    """The webhook policies and the exceptions at one moment (never mutated)."""

    policies: Mapping[str, ValidatingPolicy] = field(default_factory=dict)
    exceptions: tuple[PolicyException, ...] = ()
    #: The MutatingPolicies vpol's mutating webhook applies (not natively applied), by name.
    mutating: Mapping[str, MutatingPolicy] = field(default_factory=dict)
    #: The ImageValidatingPolicies vpol's image webhooks enforce (those that compile, admission enabled), by key.
    images: Mapping[str, ImageValidatingPolicy] = field(default_factory=dict)
    #: Bumped on every change.
    version: int = 0


class AdmissionPolicies:
    def __init__(self, api: client.ApiClient, *, generation: str = GENERATION_ELIGIBLE,
                 on_change: Callable[[Snapshot], None] | None = None):
        self.api = api
        self.generation = generation
        self._listeners: list[Callable[[Snapshot], None]] = [on_change] if on_change else []
        self._lock = threading.Lock()
        self._webhook: dict[str, ValidatingPolicy] = {}
        self._mutating: dict[str, MutatingPolicy] = {}
        self._images: dict[str, ImageValidatingPolicy] = {}
        self._exceptions: dict[str, PolicyException] = {}
        #: Each kind that takes part in admission (vpol.policies.registry): the store of the policies the webhook
        #: enforces, and the handler of its watch events (which decides whether the webhook enforces a policy).
        self.admission_kinds: dict[str, tuple[dict[str, Any], Callable[[str, dict[str, Any]], str]]] = {
            "ValidatingPolicy": (self._webhook, self._on_policy),
            "MutatingPolicy": (self._mutating, self._on_mutating),
            "ImageValidatingPolicy": (self._images, self._on_image),
        }
        #: Keys seen since each watcher's current list began (to drop vanished ones at SYNCED).
        self._listing: dict[str, set[str]] = {}
        self._snapshot = Snapshot()
        self.watchers: list[Watcher] = []
        #: Publishes again when the next exception expires (its snapshot then leaves it out).
        self._expiry: threading.Timer | None = None

    def listen(self, fn: Callable[[Snapshot], None]) -> None:
        self._listeners.append(fn)

    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    @property
    def synced(self) -> bool:
        """Every kind has been listed once (a kind that cannot be listed, 403/404, has nothing to wait for)."""
        return bool(self.watchers) and all(w.synced.is_set() or w.unavailable for w in self.watchers)

    def _watched(self) -> list[tuple[str, str, Callable[[str, dict[str, Any]], str]]]:
        """(plural, kind, handler) of what the webhook watches: every kind that takes part in admission (both
        variants; the registry says which) and the PolicyExceptions."""
        out: list[tuple[str, str, Callable[[str, dict[str, Any]], str]]] = \
            [(EXCEPTION_PLURAL, "PolicyException", self._on_exception)]
        for kind in KINDS:
            if ADMISSION in kind.paths:
                _store, handler = self.admission_kinds[kind.kind]
                out += [(plural, name, handler) for plural, name in zip(kind.plurals, kind.kinds)]
        return out

    def start(self) -> None:
        for plural, kind, handler in self._watched():
            watcher = Watcher(self.api, GROUP, STORAGE_VERSION, plural, _tracked(self, plural, handler), kind=kind,
                              on_list=self._listing_starts(plural))
            self.watchers.append(watcher)
            watcher.start()

    def stop(self) -> None:
        for w in self.watchers:
            w.stop()
        if self._expiry is not None:
            self._expiry.cancel()

    def _listing_starts(self, plural: str) -> Callable[[], None]:
        def begin() -> None:
            self._listing[plural] = set()
        return begin

    # -- events (watcher threads)

    def _on_policy(self, etype: str, obj: dict[str, Any]) -> str:
        policy, _problems = parse_policy(obj)
        if policy is None:
            key = _key(obj)
            self._set_policy(key, None)
            return key
        if etype == "DELETED":
            self._set_policy(policy.key, None)
            return policy.key
        compiles = compile_verdict(policy).ok
        way = route(policy, generation=self.generation, compiles=compiles, vap_failed=vap_refused(obj))
        self._set_policy(policy.key, policy if way.webhook else None)
        return policy.key

    def _on_mutating(self, etype: str, obj: dict[str, Any]) -> str:
        policy, _problems = parse_mutating_policy(obj)
        key = _key(obj)
        wanted = None
        if policy is not None and etype != "DELETED":
            compiles = compile_mutating_policy(policy).ok
            way = mutating_route(policy, generation=self.generation, compiles=compiles,
                                 map_refused=map_refused(obj))
            wanted = policy if way == WEBHOOK and compiles else None
        with self._lock:
            before = self._mutating.get(key)
            if wanted is None:
                self._mutating.pop(key, None)
            else:
                self._mutating[key] = wanted
        if before != wanted:
            self._publish()
        return key

    def _on_image(self, etype: str, obj: dict[str, Any]) -> str:
        policy, _problems = parse_image_validating_policy(obj)
        key = _key(obj)
        wanted = None
        if policy is not None and etype != "DELETED" and policy.spec.evaluation.admission_enabled and \
                not policy.json_mode and compile_image_validating_policy(policy).ok:
            wanted = policy
        with self._lock:
            before = self._images.get(key)
            if wanted is None:
                self._images.pop(key, None)
            else:
                self._images[key] = wanted
        if before != wanted:
            self._publish()
        return key

    def _on_exception(self, etype: str, obj: dict[str, Any]) -> str:
        key = _key(obj)
        exc, _problems = parse_exception(obj)
        with self._lock:
            if etype == "DELETED" or exc is None:
                changed = self._exceptions.pop(key, None) is not None
            else:
                changed = self._exceptions.get(key) != exc
                self._exceptions[key] = exc
        if changed:
            self._publish()
        return key

    def _set_policy(self, key: str, policy: ValidatingPolicy | None) -> None:
        with self._lock:
            before = self._webhook.get(key)
            if policy is None:
                self._webhook.pop(key, None)
            else:
                self._webhook[key] = policy
        # Equality covers what decisions depend on (spec, identity, generation), not `raw`: a status
        # write (every reconcile's) must not rebuild every replica's evaluation workers.
        if before != policy:
            self._publish()

    def _store_of(self, plural: str) -> tuple[dict[str, Any], bool | None]:
        """The store of what a resource's watch lists, and whether its keys are namespaced (None: either)."""
        if plural == EXCEPTION_PLURAL:
            return self._exceptions, None
        kind = next(k for k in KINDS if plural in k.plurals)
        store, _handler = self.admission_kinds[kind.kind]
        return store, plural == kind.plurals[1]

    def _drop_unlisted(self, plural: str, seen: set[str]) -> None:
        """A watch listed again: what it no longer lists is gone (of its variant only: the other variant's keys
        are another watch's)."""
        store, namespaced = self._store_of(plural)
        with self._lock:
            gone = [k for k in store if k not in seen and (namespaced is None or ("/" in k) == namespaced)]
            for k in gone:
                del store[k]
        if gone:
            self._publish()

    def _publish(self) -> None:
        now = time.time()
        with self._lock:
            # Expired exceptions exempt nothing (Kyverno leaves them out when it lists them); the next to expire
            # publishes a snapshot without it when it does.
            active, upcoming = active_exceptions(self._exceptions.values(), now)
            self._snapshot = Snapshot(policies=dict(self._webhook), exceptions=tuple(active),
                                      mutating=dict(self._mutating), images=dict(self._images),
                                      version=self._snapshot.version + 1)
            snapshot = self._snapshot
            if self._expiry is not None:
                self._expiry.cancel()
                self._expiry = None
            if upcoming is not None:
                self._expiry = threading.Timer(upcoming - now + EXPIRY_MARGIN, self._publish)
                self._expiry.daemon = True
                self._expiry.start()
        for fn in self._listeners:
            try:
                fn(snapshot)
            except Exception:  # noqa: BLE001 - one listener never stops the others
                logger.exception("admission policy listener failed")


def _tracked(owner: AdmissionPolicies, plural: str,
             handler: Callable[[str, dict[str, Any]], str]) -> Callable[[str, dict[str, Any]], None]:
    """A watcher callback that also records which keys each list produced."""

    def on_event(etype: str, obj: dict[str, Any]) -> None:
        if etype == "SYNCED":
            owner._drop_unlisted(plural, owner._listing.pop(plural, set()))
            return
        try:
            key = handler(etype, obj)
        except Exception:  # noqa: BLE001 - a bad object never stops the watch
            logger.exception("admission: could not process %s %s", plural, _key(obj))
            key = _key(obj)
        listing = owner._listing.get(plural)
        if listing is not None and etype != "DELETED":
            listing.add(key)

    return on_event


def _key(obj: Mapping[str, Any]) -> str:
    return policy_key(obj.get("metadata") or {})
