"""Proving that the API server enforces what vpol wrote, before a policy is called Ready.

The objects and the argument are in :mod:`vpol.desired.probe`; this module
runs the probes. Reconcilers ask, without blocking:

- :meth:`EnforcementProver.native`: are the VAPs/MAPs (and bindings) written
  at or before a given moment enforced? A *round* rewrites the sentinel for a
  new epoch and sends dry-run CREATEs of the probe ConfigMaps until the
  sentinel answers; one round proves every write that finished before it
  began, so many policies applied at once share one round.
- :meth:`EnforcementProver.webhook`: does the API server call vpol's webhook
  with the configuration at a given epoch?

An unproven answer registers the policy key; when its proof arrives, the key
is handed to ``notify`` (the work queue), so the reconcile runs again and
writes ``Ready``. Nothing here decides anything about a policy.

When the probe cannot be sent at all (the operator may not create ConfigMaps in
its namespace, or the namespace does not exist), a round falls back to waiting
:data:`FALLBACK_WAIT` seconds after the sentinel was written (the plugins'
refresh interval of one second, ``policyRefreshInterval`` in
``k8s.io/apiserver/pkg/admission/plugin/policy/generic/policy_source.go``, plus
a margin), and says so once in the log. So does a probe another admission
policy or webhook of the cluster refuses (the API server reports the first
refusal only, which hides the sentinel's answer): a cluster policy denying
every ConfigMap without some label must not keep vpol's policies from Ready.
A probe refused for another reason is retried until the round's deadline.
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes.client.rest import ApiException

from vpol.desired.probe import (
    WEBHOOK_PROBE_LABEL,
    map_answered,
    map_probe_name,
    probe_configmap,
    probed_epoch,
    refused_by_another,
    sentinel_map,
    sentinel_vap,
    vap_answered,
    vap_probe_name,
    webhook_answered,
)
from vpol.controller.queue_keys import PolicyKey
from vpol.kube.errors import describe
from vpol.kube.objects import Objects

logger = logging.getLogger(__name__)

#: Native kinds a round can prove.
VAP = "ValidatingAdmissionPolicy"
MAP = "MutatingAdmissionPolicy"
#: Seconds a round waits for the sentinel before it gives up (and the next round starts).
ROUND_TIMEOUT = 30.0
#: Seconds without an answer after which the sentinel is written again for a new epoch (another replica may have
#: rewritten it in between).
REBUMP_AFTER = 5.0
#: Seconds between two probes of one round.
PROBE_INTERVAL = 0.05
#: When no probe can be sent: the API server's policy refresh interval (1 s) plus a margin.
FALLBACK_WAIT = 3.0
#: Seconds a key waits for a webhook proof before it is dropped (its next reconcile asks again).
WAITER_EXPIRY = 60.0
#: Seconds between rounds after one that got no answer.
RETRY_AFTER_FAILURE = 5.0


@dataclass(frozen=True)
class Proof:
    proven: bool
    #: What is awaited (when not proven), for the condition's message.
    waiting_for: str = ""


class ProbeImpossible(Exception):
    """The probe request cannot be sent (RBAC, no namespace), or its answer is hidden (another admission policy
    refuses it first): fall back to the refresh interval."""


class EnforcementProver(threading.Thread):
    def __init__(self, objects: Objects, namespace: str, *, notify: Callable[[PolicyKey], None],
                 map_api_version: Callable[[], str | None], round_timeout: float = ROUND_TIMEOUT):
        super().__init__(daemon=True, name="vpol-enforcement-prover")
        self.objects = objects
        self.namespace = namespace
        self.notify = notify
        self.map_api_version = map_api_version
        self.round_timeout = round_timeout
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop_event = threading.Event()
        #: Start (monotonic) of the last round that proved each native kind.
        self._proven_native: dict[str, float] = {}
        #: Keys waiting for a native proof: key -> (kind, written at).
        self._native_waiters: dict[PolicyKey, tuple[str, float]] = {}
        #: (configuration, mutating) -> the epochs proven (the last few).
        self._proven_epochs: dict[tuple[str, bool], list[str]] = {}
        #: Keys waiting for a webhook proof: key -> (configuration, mutating).
        self._webhook_waiters: dict[PolicyKey, tuple[str, bool]] = {}
        #: When each webhook waiter asked (monotonic), for WAITER_EXPIRY.
        self._webhook_asked: dict[PolicyKey, float] = {}
        self._counter = itertools.count()
        self._fallback_said: set[str] = set()
        #: (configuration, mutating, epoch) -> when its webhook probe was first refused by another policy.
        self._hidden_since: dict[tuple[str, bool, str], float] = {}
        #: Rounds run and probes sent (for tests and the benchmark).
        self.rounds = 0
        self.probes = 0

    # -- what reconcilers ask

    def native(self, key: PolicyKey, kind: str, written: float) -> Proof:
        """Whether the native objects of ``kind`` written (finished) at monotonic time ``written`` are enforced."""
        with self._lock:
            if self._proven_native.get(kind, -1.0) > written:
                self._native_waiters.pop(key, None)
                return Proof(True)
            self._native_waiters[key] = (kind, written)
        self._wake.set()
        return Proof(False, "the API server to load them (an enforcement probe is under way)")

    def webhook(self, key: PolicyKey, configuration: str, epoch: str, mutating: bool) -> Proof:
        """Whether the API server calls vpol's webhook with ``configuration`` at ``epoch``."""
        with self._lock:
            if epoch and epoch in self._proven_epochs.get((configuration, mutating), []):
                self._webhook_waiters.pop(key, None)
                return Proof(True)
            self._webhook_waiters[key] = (configuration, mutating)
            self._webhook_asked[key] = time.monotonic()
        self._wake.set()
        return Proof(False, f"the API server to call vpol's webhook with {configuration} as it is now "
                            "(an enforcement probe is under way)")

    def forget(self, key: PolicyKey) -> None:
        with self._lock:
            self._native_waiters.pop(key, None)
            self._webhook_waiters.pop(key, None)
            self._webhook_asked.pop(key, None)

    def stop(self) -> None:
        self._stop_event.set()
        self._wake.set()

    # -- the thread

    def run(self) -> None:
        while not self._stop_event.is_set():
            self._wake.wait(1.0)
            self._wake.clear()
            try:
                self.step()
            except Exception as exc:  # noqa: BLE001 - keep proving; the keys stay waiting
                logger.warning("enforcement probe failed: %s", describe(exc))
                self._stop_event.wait(1.0)

    def step(self) -> None:
        """Run what the waiting keys need: one native round, one probe per configuration."""
        with self._lock:
            expired = time.monotonic() - WAITER_EXPIRY
            for key in [k for k, at in self._webhook_asked.items() if at < expired]:
                self._webhook_waiters.pop(key, None)
                self._webhook_asked.pop(key, None)
            kinds = sorted({kind for kind, _w in self._native_waiters.values()})
            configurations = sorted(set(self._webhook_waiters.values()))
        if kinds:
            self.native_round(kinds)
        for configuration, mutating in configurations:
            self.webhook_probe(configuration, mutating)

    def native_round(self, kinds: list[str]) -> None:
        """Write the sentinels of ``kinds`` for a new epoch and probe until they answer (or the round times out)."""
        self.rounds += 1
        started = time.monotonic()
        deadline = started + self.round_timeout
        pending = set(kinds)
        map_version = self.map_api_version() if MAP in pending else None
        if MAP in pending and map_version is None:
            pending.discard(MAP)  # no MAP API: nothing native of that kind can be waiting for long
        epoch, bumped = self._bump(pending, map_version), time.monotonic()
        fallback = False
        while pending and time.monotonic() < deadline and not self._stop_event.is_set():
            for kind in sorted(pending):
                try:
                    if self._answered(kind, epoch):
                        pending.discard(kind)
                except ProbeImpossible as exc:
                    self._say_fallback(str(exc))
                    fallback = True
            if fallback and time.monotonic() - bumped >= FALLBACK_WAIT:
                pending.clear()
            if not pending:
                break
            if time.monotonic() - bumped >= REBUMP_AFTER:
                epoch, bumped = self._bump(pending, map_version), time.monotonic()
            self._stop_event.wait(PROBE_INTERVAL)
        proven = [k for k in kinds if k not in pending]
        done: list[PolicyKey] = []
        with self._lock:
            for kind in proven:
                self._proven_native[kind] = started
            for key, (kind, written) in list(self._native_waiters.items()):
                if kind in proven and written < started:
                    del self._native_waiters[key]
                    done.append(key)
        for key in done:
            self.notify(key)
        if pending:
            logger.warning("enforcement probe: the API server did not answer for %s within %.0f s", sorted(pending),
                           self.round_timeout)
            self._stop_event.wait(RETRY_AFTER_FAILURE)

    def _say_fallback(self, why: str) -> None:
        """Log, once per reason, that probes give way to waiting."""
        if why not in self._fallback_said:
            logger.warning("enforcement probes cannot prove enforcement (%s): vpol waits %.0f s after writing instead "
                           "(the API server's policy refresh interval plus a margin)", why, FALLBACK_WAIT)
            self._fallback_said.add(why)

    def _bump(self, kinds: set[str], map_version: str | None) -> str:
        epoch = f"{int(time.time() * 1000):x}{next(self._counter)}"
        objects: list[dict[str, Any]] = []
        if VAP in kinds:
            objects += sentinel_vap(self.namespace, epoch)
        if MAP in kinds and map_version:
            objects += sentinel_map(self.namespace, epoch, map_version)
        for obj in objects:
            self.objects.apply(obj)
        return epoch

    def _answered(self, kind: str, epoch: str) -> bool:
        self.probes += 1
        name = vap_probe_name(epoch) if kind == VAP else map_probe_name(epoch)
        try:
            result = self.objects.dry_run_configmap(self.namespace, probe_configmap(name))
        except ApiException as exc:
            message = _message(exc)
            if kind == VAP and vap_answered(message):
                return True
            if (other := refused_by_another(message)):
                raise ProbeImpossible(f"the probe ConfigMap is refused by {other} first") from exc
            if exc.status in (403, 404) and "vpol" not in message:
                raise ProbeImpossible(f"{exc.status}: {message}") from exc
            return False
        return kind == MAP and map_answered(result, epoch)

    def webhook_probe(self, configuration: str, mutating: bool) -> None:
        """Probe vpol's webhook through the configuration as it is in the cluster now."""
        config = self.objects.get_webhook_configuration(configuration, mutating)
        epoch = probed_epoch(config)
        if not epoch:
            return  # none, or written by a vpol without probes: the leader rewrites it
        self.probes += 1
        name = f"vpol-probe-w-{epoch}-{next(self._counter)}"
        answered = False
        try:
            self.objects.dry_run_configmap(self.namespace, probe_configmap(name, {WEBHOOK_PROBE_LABEL: epoch}))
        except ApiException as exc:
            message = _message(exc)
            answered = webhook_answered(message, epoch)
            other = "" if answered else refused_by_another(message)
            if other:  # hidden by another policy's refusal: the configuration is taken as loaded after a wait
                self._say_fallback(f"the webhook probe ConfigMap is refused by {other} first")
                since = self._hidden_since.setdefault((configuration, mutating, epoch), time.monotonic())
                answered = time.monotonic() - since >= FALLBACK_WAIT
        if not answered:
            self._wake.set()
            self._stop_event.wait(PROBE_INTERVAL)
            return
        done: list[PolicyKey] = []
        for hidden in [k for k in self._hidden_since if k[:2] == (configuration, mutating)]:
            del self._hidden_since[hidden]
        with self._lock:
            epochs = self._proven_epochs.setdefault((configuration, mutating), [])
            epochs.append(epoch)
            del epochs[:-8]
            for key, waited in list(self._webhook_waiters.items()):
                if waited == (configuration, mutating):
                    del self._webhook_waiters[key]
                    self._webhook_asked.pop(key, None)
                    done.append(key)
        for key in done:
            self.notify(key)  # each re-reads the configuration it is covered by


def _message(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "").get("message", exc.reason))
    except (TypeError, ValueError, AttributeError):
        return str(exc.reason or exc)
