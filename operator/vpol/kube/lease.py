"""Leader election with a coordination.k8s.io Lease: only the holder runs background scans.

Kopf's peering decides which replica handles events; scans run in our own
threads, so they take a Lease of their own (the same protocol as
client-go's leader election: holderIdentity, renewTime, leaseDurationSeconds).
"""

from __future__ import annotations

import datetime
import logging
import os
import socket
import threading
import uuid
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

logger = logging.getLogger(__name__)


def identity() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


class LeaderElection(threading.Thread):
    def __init__(self, api: client.ApiClient, namespace: str, name: str = "vpol-scanner", *,
                 duration: int = 15, renew: float = 5.0):
        super().__init__(daemon=True, name="vpol-leader-election")
        self.coordination: Any = client.CoordinationV1Api(api)
        self.namespace = namespace
        self.lease_name = name
        self.identity = identity()
        self.duration = duration
        self.renew = renew
        self.leading = threading.Event()
        self._stop_event = threading.Event()
        #: What stops this replica from even trying to lead ("" when nothing does).
        self.problem = ""
        self._release_at_stop = True

    def stop(self, *, release: bool = True) -> None:
        """Stop renewing; the Lease is released (another replica may take it at once) unless ``release`` is false:
        then it is left to expire (``duration`` seconds), for a holder whose work may not have stopped yet."""
        self._release_at_stop = release
        self._stop_event.set()

    def run(self) -> None:
        while not self._stop_event.is_set():
            try:
                held = self._try()
                self._report("")
            except Exception as exc:  # noqa: BLE001 - lose leadership on API trouble, retry
                self._report(self._explain(exc))
                held = False
            if held and not self.leading.is_set():
                logger.info("leading background scans as %s", self.identity)
                self.leading.set()
            elif not held and self.leading.is_set():
                logger.warning("lost the scanner lease")
                self.leading.clear()
            self._stop_event.wait(self.renew)
        if self.leading.is_set() and self._release_at_stop:
            self._release()

    def _explain(self, exc: BaseException) -> str:
        """One line a person can act on (an API error's str() carries headers and a body)."""
        status = getattr(exc, "status", None)
        where = f"the Lease {self.namespace}/{self.lease_name}"
        if status == 404:
            return f"cannot take {where}: namespace {self.namespace} does not exist (create it, or run with " \
                   "--namespace set to the operator's namespace)"
        if status == 403:
            return f"cannot take {where}: forbidden (grant get, create and update on leases in " \
                   f"{self.namespace}: manifests/operator/rbac.yaml, Role vpol-scanner-lease)"
        if status is not None:
            return f"cannot take {where}: HTTP {status} {getattr(exc, 'reason', '') or ''}".strip()
        return f"cannot take {where}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"

    def _report(self, problem: str) -> None:
        """Log a problem once (and when it goes away), not at every retry."""
        if problem == self.problem:
            return
        if problem:
            logger.error("%s; background scans and the webhook configuration wait until this is fixed", problem)
        else:
            logger.info("leader election works again")
        self.problem = problem

    def _try(self) -> bool:
        now = _now()
        try:
            lease = self.coordination.read_namespaced_lease(self.lease_name, self.namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
            body = client.V1Lease(metadata=client.V1ObjectMeta(name=self.lease_name),
                                  spec=client.V1LeaseSpec(holder_identity=self.identity,
                                                          lease_duration_seconds=self.duration,
                                                          acquire_time=now, renew_time=now, lease_transitions=0))
            try:
                self.coordination.create_namespaced_lease(self.namespace, body)
                return True
            except ApiException as exc2:
                if exc2.status == 409:
                    return False
                raise
        spec = lease.spec
        expired = spec.renew_time is None or (now - spec.renew_time).total_seconds() > (
            spec.lease_duration_seconds or self.duration)
        if spec.holder_identity != self.identity and not expired:
            return False
        if spec.holder_identity != self.identity:
            spec.lease_transitions = (spec.lease_transitions or 0) + 1
            spec.acquire_time = now
        spec.holder_identity = self.identity
        spec.renew_time = now
        spec.lease_duration_seconds = self.duration
        try:
            self.coordination.replace_namespaced_lease(self.lease_name, self.namespace, lease)
        except ApiException as exc:
            if exc.status == 409:  # someone else renewed first
                return False
            raise
        return True

    def _release(self) -> None:
        try:
            lease = self.coordination.read_namespaced_lease(self.lease_name, self.namespace)
            if lease.spec.holder_identity == self.identity:
                lease.spec.renew_time = None
                lease.spec.holder_identity = None
                self.coordination.replace_namespaced_lease(self.lease_name, self.namespace, lease)
        except Exception:  # noqa: BLE001 - best effort; the lease expires anyway
            pass
