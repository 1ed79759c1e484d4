"""The one reconcile loop: a typed key reaches its kind's plan, the policy is read where its kind lives, the status is
written only when it changed and the watch echo of that write is known, a deleted policy is forgotten, and an
expiring exception requeues the typed keys of the policies it names. (The plans themselves run against the real
API server in tests/e2e.)"""

from __future__ import annotations

from typing import Any

from kubernetes import client

from vpol.controller.plan_context import ReconcileContext, ReconcileResult
from vpol.controller.queue_keys import PolicyKey
from vpol.controller.reconcile import Reconciler
from vpol.desired.status import Findings
from vpol.model.policy import PolicyException, PolicyRef
from vpol.policies.registry import KINDS


class Objects:
    """The policies of a cluster, by (plurals, key); records every read and status write."""

    def __init__(self) -> None:
        self.policies: dict[tuple[tuple[str, str], str], dict[str, Any]] = {}
        self.reads: list[tuple[tuple[str, str], str]] = []
        self.writes: list[tuple[tuple[str, str], str, dict[str, Any]]] = []
        self.exceptions: list[PolicyException] = []
        self.version = 100

    def get_policy(self, key: str, plurals: tuple[str, str]) -> dict[str, Any] | None:
        self.reads.append((plurals, key))
        return self.policies.get((plurals, key))

    def patch_policy_status(self, key: str, status: dict[str, Any], plurals: tuple[str, str]) -> str:
        self.writes.append((plurals, key, status))
        self.policies[(plurals, key)]["status"] = status
        self.version += 1
        return str(self.version)

    def policy_exceptions(self) -> list[PolicyException]:
        return self.exceptions


class Plan:
    """A kind's plan that says the policy is ready when its spec says so."""

    def __init__(self, kind: str, calls: list[tuple[str, str, PolicyKey]]):
        self.kind, self.calls = kind, calls

    def status(self, findings: Findings, current: Any) -> dict[str, Any]:
        return {"conditionStatus": {"ready": not findings.compile_errors}, "plan": self.kind}

    def plan(self, key: PolicyKey, body: dict[str, Any]) -> tuple[ReconcileResult, Findings]:
        self.calls.append((self.kind, "plan", key))
        return ReconcileResult(key), Findings(generation=1, compile_errors=[] if body["spec"]["ok"] else ["broken"])

    def gone(self, key: PolicyKey) -> ReconcileResult:
        self.calls.append((self.kind, "gone", key))
        return ReconcileResult(key)


def reconciler(objects: Objects, calls: list[tuple[str, str, PolicyKey]],
               requeued: list[tuple[PolicyKey, float]] | None = None) -> Reconciler:
    plans = {k.kind: (lambda ctx, kind=k.kind: Plan(kind, calls)) for k in KINDS}
    return Reconciler(client.ApiClient(), plans=plans, objects=objects,  # type: ignore[arg-type]
                      requeue=lambda key, delay: (requeued if requeued is not None else []).append((key, delay)))


def test_each_kind_is_read_where_it_lives_and_planned_by_its_plan() -> None:
    objects, calls = Objects(), []
    loop = reconciler(objects, calls)
    for kind in KINDS:
        for variant, key in zip(kind.kinds, ("p", "team/p")):
            objects.policies[(kind.plurals, key)] = {"metadata": {"resourceVersion": "1"}, "spec": {"ok": True}}
            result = loop.reconcile(PolicyKey.of(variant, key))
            assert result.ready is True and result.status_written
            assert objects.reads[-1] == (kind.plurals, key)
            assert objects.writes[-1][:2] == (kind.plurals, key) and objects.writes[-1][2]["plan"] == kind.kind
            assert calls[-1] == (kind.kind, "plan", PolicyKey(kind.kind, "team" if "/" in key else "", "p"))
    assert len(objects.writes) == 2 * len(KINDS)


def test_status_is_written_only_when_it_changed_and_its_echo_is_known() -> None:
    objects, calls = Objects(), []
    loop = reconciler(objects, calls)
    key = PolicyKey.of("NamespacedMutatingPolicy", "team/m")
    plurals = key.policy_kind.plurals
    objects.policies[(plurals, "team/m")] = {"metadata": {}, "spec": {"ok": False}}
    assert loop.reconcile(key).ready is False
    written = str(objects.version)
    assert loop.is_echo(key, written) and not loop.is_echo(key, "1") and not loop.is_echo(key, "")
    # The same policy, the same status: nothing is written (level-based).
    again = loop.reconcile(key)
    assert not again.status_written and len(objects.writes) == 1
    # Another kind's policy of the same name and namespace is another key.
    assert not loop.is_echo(PolicyKey.of("NamespacedValidatingPolicy", "team/m"), written)
    objects.policies[(plurals, "team/m")]["spec"]["ok"] = True
    assert loop.reconcile(key).status_written and len(objects.writes) == 2


def test_a_deleted_policy_is_forgotten_by_its_plan_and_the_loop() -> None:
    objects, calls = Objects(), []
    loop = reconciler(objects, calls)
    key = PolicyKey.of("GeneratingPolicy", "g")
    objects.policies[(key.policy_kind.plurals, "g")] = {"metadata": {}, "spec": {"ok": True}}
    loop.reconcile(key)
    assert loop.is_echo(key, str(objects.version))
    del objects.policies[(key.policy_kind.plurals, "g")]
    result = loop.reconcile(key)
    assert calls[-1] == ("GeneratingPolicy", "gone", key) and result.ready is None
    assert not loop.is_echo(key, str(objects.version))


def test_an_expiring_exception_requeues_the_typed_keys_it_names_once() -> None:
    objects, calls, requeued = Objects(), [], []
    loop = reconciler(objects, calls, requeued)
    import time
    objects.exceptions = [PolicyException("x", "team", policy_refs=(PolicyRef("m", "NamespacedMutatingPolicy"),
                                                                    PolicyRef("d", "DeletingPolicy")),
                                          expires_at=time.time() + 60)]
    loop.exceptions()
    loop.exceptions()
    assert [k for k, _delay in requeued] == [PolicyKey("MutatingPolicy", "team", "m"),
                                              PolicyKey("DeletingPolicy", "", "d")]
    assert all(55 < delay <= 61 for _k, delay in requeued)
    assert str(requeued[0][0]) == "mpol:team/m" and str(requeued[1][0]) == "dpol:d"


def test_every_kind_has_a_plan_made_from_the_context() -> None:
    loop = Reconciler(client.ApiClient())
    assert set(loop.plans) == {k.kind for k in KINDS}
    assert all(getattr(plan, "ctx", None) is loop.context for plan in loop.plans.values())
    assert isinstance(loop.context, ReconcileContext)
