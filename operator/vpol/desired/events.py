"""PolicyViolation Events, as Kyverno emits them for its CEL policies (pure).

Facts (Kyverno 1.19.1, ``pkg/event`` and ``pkg/webhooks/utils/event.go``; measured with its code):

- reason ``PolicyViolation``, type ``Warning``, on failing, warning and erroring results (an error too is a
  violation); nothing for passes (Kyverno's success events are off by default), skips or exceptions;
- at admission: an event on the **policy** (``related``: the resource), message
  ``<Kind> <namespace>/<name>: <status>[ (blocked)]; <message>``, action ``Resource Blocked`` when the request
  was denied, else ``Resource Passed``; when not denied, also an event on the **resource**, message
  ``policy <policy>/ <status>: <message>`` (Kyverno's rule name is empty for these policies);
- in background scans: the resource event, then the policy event, never blocked;
- events.k8s.io/v1 objects named ``<regarding name>.<time in hex nanoseconds>``, in the regarding object's
  namespace (``default`` for cluster-scoped ones), ``reportingController`` the source and
  ``reportingInstance`` ``<source>-<host>``, the note cut at 1024 characters.

vpol's sources are ``vpol-admission`` and ``vpol-scan`` (Kyverno's: ``kyverno-admission``, ``kyverno-scan``).
Where vpol differs: "blocked" means this request was denied (Kyverno says blocked whenever any policy of the
webhook call has Deny, even one that passed), and dry-run requests make no event (nothing was created or
changed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

REASON_VIOLATION = "PolicyViolation"
ACTION_BLOCKED = "Resource Blocked"
ACTION_PASSED = "Resource Passed"
SOURCE_ADMISSION = "vpol-admission"
SOURCE_SCAN = "vpol-scan"
MAX_NOTE = 1024
#: vpol's result names -> Kyverno's rule status words in event messages.
STATUS_WORDS = {"fail": "fail", "warn": "warning", "error": "error"}


@dataclass(frozen=True)
class ObjectRef:
    api_version: str
    kind: str
    name: str
    namespace: str = ""
    uid: str = ""

    def reference(self) -> dict[str, str]:
        ref = {"apiVersion": self.api_version, "kind": self.kind, "name": self.name}
        if self.namespace:
            ref["namespace"] = self.namespace
        if self.uid:
            ref["uid"] = self.uid
        return ref


@dataclass(frozen=True)
class Violation:
    """One policy's failing (or warning, or erroring) result on one resource."""

    policy: ObjectRef
    resource: ObjectRef
    #: vpol's result: fail, warn or error.
    result: str
    message: str


def violating(result: str) -> bool:
    return result in STATUS_WORDS


def policy_message(v: Violation, blocked: bool) -> str:
    where = f"{v.resource.namespace}/{v.resource.name}" if v.resource.namespace else v.resource.name
    text = f"{v.resource.kind} {where}: {STATUS_WORDS.get(v.result, v.result)}"
    if blocked:
        text += " (blocked)"
    return f"{text}; {v.message}" if v.message else text


def resource_message(v: Violation) -> str:
    name = f"{v.policy.namespace}/{v.policy.name}" if v.policy.namespace else v.policy.name
    return f"policy {name}/ {STATUS_WORDS.get(v.result, v.result)}: {v.message}"


@dataclass(frozen=True)
class EventSpec:
    """An event to emit (without the name and time, given when it is sent)."""

    source: str
    action: str
    regarding: ObjectRef
    related: ObjectRef | None
    note: str
    reason: str = REASON_VIOLATION
    type: str = "Warning"


def violation_events(v: Violation, *, source: str, blocked: bool = False) -> list[EventSpec]:
    """The events of one violation, in Kyverno's order: at admission the policy's (and, when the request was not
    denied, the resource's); in background scans the resource's, then the policy's."""
    on_policy = EventSpec(source, ACTION_BLOCKED if blocked else ACTION_PASSED, v.policy, v.resource,
                          policy_message(v, blocked))
    on_resource = EventSpec(source, ACTION_PASSED, v.resource, None, resource_message(v))
    if source == SOURCE_SCAN:
        return [on_resource, on_policy]
    return [on_policy] if blocked else [on_policy, on_resource]


_UNSAFE = re.compile(r"[^a-z0-9.-]")


def event_name(regarding: str, nanos: int) -> str:
    """``<regarding name, made a DNS subdomain>.<hex nanoseconds>`` (Kyverno's naming)."""
    name = _UNSAFE.sub("-", regarding.lower())
    if not name or not name[0].isalnum():
        name = "a" + name
    if not name[-1].isalnum():
        name += "z"
    return f"{name[:200]}.{nanos:x}"


def event_object(spec: EventSpec, *, instance: str, nanos: int, event_time: str) -> dict[str, Any]:
    """The events.k8s.io/v1 Event for ``spec``."""
    note = spec.note if len(spec.note) <= MAX_NOTE else spec.note[:MAX_NOTE - 3] + "..."
    body: dict[str, Any] = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": event_name(spec.regarding.name, nanos),
                     "namespace": spec.regarding.namespace or "default"},
        "eventTime": event_time,
        "reportingController": spec.source,
        "reportingInstance": f"{spec.source}-{instance}"[:128],
        "action": spec.action,
        "reason": spec.reason,
        "regarding": spec.regarding.reference(),
        "note": note,
        "type": spec.type,
    }
    if spec.related is not None:
        body["related"] = spec.related.reference()
    return body


def dedup_key(spec: EventSpec) -> tuple[str, ...]:
    """Events with the same key say the same thing (a retried request, an unchanged result)."""
    r = spec.regarding
    return (spec.source, spec.action, r.kind, r.namespace, r.name, r.uid, spec.note)
