"""The status a policy of any kind should have, from what reconciling found (pure).

Conditions (metav1.Condition shape), written both to
``status.conditionStatus.conditions`` (Kyverno's place) and to
``status.conditions`` (so ``kubectl wait --for=condition=Ready`` works):

- ``Compiled``: every expression compiles;
- ``TypeChecked``: schema-aware type checking found no warning
  (informational: it never blocks readiness);
- ``RBACPermissionsGranted``: the operator may get/list/watch what the
  policy (and its autogen variants) matches;
- ``VAPGenerated``: only when native generation is asked for (explicitly, or by
  the operator's ``eligible`` generation mode); informational: when the API server
  cannot enforce the policy natively, the webhook does, and ``AdmissionEnforced``
  says so;
- ``AdmissionEnforced``: on every policy that applies at admission: True with
  reason ``NativeVAP`` or ``Webhook`` (naming the objects), False with the reason
  when nothing enforces it;
- for a MutatingPolicy, ``MAPGenerated`` takes VAPGenerated's place, the native
  route is ``NativeMAP``, and there is no RBACPermissionsGranted (vpol does not
  scan with mutating policies);
- ``MutateExisting`` (a MutatingPolicy with ``evaluation.mutateExisting.enabled``):
  True when the operator mutates the existing targets (it names them and when),
  False when it cannot (background scans are off in the operator);
- a GeneratingPolicy's ``Generating`` (False when the operator runs no
  background work) and ``GenerationSucceeded`` (informational: False, with the
  last error, while generating for some trigger fails); a DeletingPolicy's
  ``Scheduled`` (when it runs next). Their status holds only
  ``conditionStatus``, ``conditions`` and (DeletingPolicy) ``lastExecutionTime``;
- ``LibrariesServed`` (any kind; only when False): the policy calls a library
  this operator cannot serve, so every evaluation would fail (``http.*`` without
  ``--http-allow``: vpol.cel.library_use);
- ``Ready``: every condition above that applies, TypeChecked, VAPGenerated and
  GenerationSucceeded excepted, is True.

``status.enforcement`` holds the route in one word for ``kubectl get``:
``NativeVAP``, ``Webhook``, ``None`` or ``NotApplicable``.

``lastTransitionTime`` changes only when a condition's status flips, so a
reconcile that finds nothing new produces an identical status and no write.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

COMPILED = "Compiled"
TYPE_CHECKED = "TypeChecked"
RBAC = "RBACPermissionsGranted"
VAP_GENERATED = "VAPGenerated"
MAP_GENERATED = "MAPGenerated"
ADMISSION_ENFORCED = "AdmissionEnforced"
MUTATE_EXISTING = "MutateExisting"
READY = "Ready"
#: Present only when False: a library the policy calls cannot be served here (vpol.cel.library_use).
LIBRARIES_SERVED = "LibrariesServed"
#: Conditions that inform but never block readiness.
INFORMATIONAL = (TYPE_CHECKED, VAP_GENERATED, MAP_GENERATED)

#: Longest condition message we write (the API caps messages at 32 kB).
MAX_MESSAGE = 4000


@dataclass(frozen=True)
class Condition:
    type: str
    status: bool
    reason: str
    message: str


@dataclass
class Findings:
    """What one reconcile found out about a policy."""

    generation: int
    compile_errors: Sequence[str] = ()
    #: (fieldRef, warning) pairs, as in a VAP's status.typeChecking.
    type_warnings: Sequence[tuple[str, str]] = ()
    #: False when type checking could not run (e.g. schemas unavailable): message says why.
    type_checked: bool = True
    type_check_note: str = ""
    #: Permissions the operator lacks, e.g. "list apps/v1 deployments".
    missing_permissions: Sequence[str] = ()
    background_enabled: bool = True
    #: None: VAP generation is not enabled. Else (ok, reason, message).
    vap: tuple[bool, str, str] | None = None
    generated: bool = False
    autogen: Mapping[str, Any] = field(default_factory=dict)
    #: None: the policy does not apply at admission. Else (enforced, reason, message).
    admission: tuple[bool, str, str] | None = None
    #: The route in one word (see the module docstring).
    enforcement: str = "None"
    #: The native-generation condition: VAPGenerated (ValidatingPolicy) or MAPGenerated (MutatingPolicy).
    native_condition: str = VAP_GENERATED
    #: False for kinds vpol does not scan (MutatingPolicy): no RBACPermissionsGranted condition.
    rbac_applicable: bool = True
    #: None: not a policy that mutates existing objects. Else (active, reason, message).
    mutate_existing: tuple[bool, str, str] | None = None
    #: What the RBACPermissionsGranted condition says when nothing is missing.
    rbac_message: str = "the operator may get, list and watch every matched resource"
    #: Conditions of the kind's own: (type, ok, reason, message, informational).
    extra: Sequence[tuple[str, bool, str, str, bool]] = ()
    #: What the policy calls that the operator cannot serve (vpol.cel.library_use), a sentence each.
    unserved_libraries: Sequence[str] = ()


def _truncate(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 15] + "... (truncated)"


def conditions_for(f: Findings) -> list[Condition]:
    out = []
    if f.compile_errors:
        out.append(Condition(COMPILED, False, "CompilationFailed",
                             _truncate(f"{len(f.compile_errors)} error(s): " + "; ".join(f.compile_errors))))
    else:
        out.append(Condition(COMPILED, True, "Succeeded", "every expression compiles"))
    if not f.type_checked:
        out.append(Condition(TYPE_CHECKED, False, "NotChecked", _truncate(f.type_check_note)))
    elif f.type_warnings:
        out.append(Condition(TYPE_CHECKED, False, "Warnings", _truncate(
            f"{len(f.type_warnings)} type warning(s), see status.typeChecking: " +
            "; ".join(f"{ref}: {w.splitlines()[0] if w else ''}" for ref, w in f.type_warnings))))
    else:
        out.append(Condition(TYPE_CHECKED, True, "Succeeded",
                             f.type_check_note or "expressions type-check against the matched kinds' schemas"))
    if not f.rbac_applicable:
        pass
    elif f.missing_permissions:
        out.append(Condition(RBAC, False, "Failed", _truncate(
            "the operator lacks: " + ", ".join(f.missing_permissions))))
    elif not f.background_enabled:
        out.append(Condition(RBAC, True, "Succeeded",
                             "Background scanning disabled, no permissions needed for matched resources"))
    else:
        out.append(Condition(RBAC, True, "Succeeded", f.rbac_message))
    if f.vap is not None:
        ok, reason, message = f.vap
        out.append(Condition(f.native_condition, ok, reason, _truncate(message)))
    if f.admission is not None:
        ok, reason, message = f.admission
        out.append(Condition(ADMISSION_ENFORCED, ok, reason, _truncate(message)))
    if f.mutate_existing is not None:
        ok, reason, message = f.mutate_existing
        out.append(Condition(MUTATE_EXISTING, ok, reason, _truncate(message)))
    if f.unserved_libraries:
        out.append(Condition(LIBRARIES_SERVED, False, "Unavailable", _truncate("; ".join(f.unserved_libraries))))
    informational = set(INFORMATIONAL)
    for type_, ok, reason, message, info in f.extra:
        out.append(Condition(type_, ok, reason, _truncate(message)))
        if info:
            informational.add(type_)
    blocking = [c for c in out if c.type not in informational and not c.status]
    if blocking:
        out.append(Condition(READY, False, "NotReady", "; ".join(f"{c.type} is False" for c in blocking)))
    else:
        out.append(Condition(READY, True, "Ready", "the policy is ready"))
    return out


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def condition_dicts(conditions: Sequence[Condition], previous: Sequence[Mapping[str, Any]], generation: int,
                    now: str | None = None) -> list[dict[str, Any]]:
    """metav1.Condition dicts; lastTransitionTime is kept unless the status flipped."""
    before = {c.get("type"): c for c in previous if isinstance(c, Mapping)}
    stamp = now or _now()
    out = []
    for c in conditions:
        status = "True" if c.status else "False"
        old = before.get(c.type)
        transition = old.get("lastTransitionTime") if old and old.get("status") == status else None
        out.append({
            "type": c.type,
            "status": status,
            "reason": c.reason,
            "message": c.message,
            "observedGeneration": generation,
            "lastTransitionTime": transition or stamp,
        })
    return out


def desired_status(f: Findings, previous: Mapping[str, Any] | None, now: str | None = None) -> dict[str, Any]:
    """The whole ``status`` for the policy."""
    previous = previous or {}
    prev_conditions = ((previous.get("conditionStatus") or {}).get("conditions")) or previous.get("conditions") or []
    conds = conditions_for(f)
    dicts = condition_dicts(conds, prev_conditions, f.generation, now)
    ready = next(c.status for c in conds if c.type == READY)
    message = next((c.message for c in conds if c.type in (VAP_GENERATED, MAP_GENERATED) and not c.status and
                    c.reason == "NotEligible"), "")
    status: dict[str, Any] = {
        "conditionStatus": {"ready": ready, "conditions": dicts, "message": message},
        "conditions": dicts,
        "autogen": {"configs": dict(f.autogen)},
        "generated": f.generated,
        "enforcement": f.enforcement,
        "typeChecking": {"expressionWarnings": [{"fieldRef": ref, "warning": w} for ref, w in f.type_warnings]},
    }
    return status


def lifecycle_status(f: Findings, previous: Mapping[str, Any] | None, now: str | None = None) -> dict[str, Any]:
    """The ``status`` of a GeneratingPolicy or DeletingPolicy (the fields their CRDs have; a DeletingPolicy's
    ``lastExecutionTime`` is written by its runs, not here)."""
    whole = desired_status(f, previous, now)
    return {"conditionStatus": whole["conditionStatus"], "conditions": whole["conditions"]}


def status_changed(current: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> bool:
    """True when writing ``desired`` would change anything the operator owns."""
    current = current or {}
    return any(current.get(k) != v for k, v in desired.items())
