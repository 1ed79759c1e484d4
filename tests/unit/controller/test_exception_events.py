"""A PolicyException's events queue the policies it names, of every kind: a namespaced kind's policies of that
name in every namespace they were seen in (Kyverno matches an exception to a policy by kind and name only), a
reference without a kind every policy of that name; deleted policies are forgotten."""

from __future__ import annotations

import asyncio
from typing import Any

import kopf

from vpol.controller import handlers
from vpol.controller.queue_keys import PolicyKey
from vpol.controller.runtime import Options, Runtime


class Queue:
    def __init__(self) -> None:
        self.keys: list[PolicyKey] = []

    def add(self, key: PolicyKey) -> None:
        assert isinstance(key, PolicyKey), key
        self.keys.append(key)


def memo() -> dict[str, Any]:
    rt = Runtime(Options(), api=None)  # type: ignore[arg-type]
    rt.queue = Queue()  # type: ignore[assignment]
    return {"vpol": rt}


def queued(m: dict[str, Any]) -> list[str]:
    """The keys queued since last asked, as text (``mpol:team/m``)."""
    keys = m["vpol"].queue.keys
    out, keys[:] = [str(k) for k in keys], []
    return out


def resource(plural: str) -> kopf.Resource:
    return kopf.Resource("policies.kyverno.io", "v1", plural)


def test_every_kind_and_namespace_is_queued() -> None:
    m = memo()
    events = [("namespacedvalidatingpolicies", "a", "p"), ("namespacedvalidatingpolicies", "b", "p"),
              ("namespacedgeneratingpolicies", "a", "g"), ("namespacedimagevalidatingpolicies", "b", "i"),
              ("deletingpolicies", "", "d"), ("namespacedmutatingpolicies", "c", "m")]
    for plural, namespace, name in events:
        asyncio.run(handlers.policy_event(type="ADDED", resource=resource(plural),
                                          meta={"name": name, "namespace": namespace}, memo=m))
    queued(m)

    def refs(*pairs: tuple[str, str]) -> list[str]:
        asyncio.run(handlers.exception_event(spec={"policyRefs": [{"kind": k, "name": n} for k, n in pairs]},
                                             memo=m))
        return sorted(queued(m))

    assert refs(("NamespacedValidatingPolicy", "p")) == ["a/p", "b/p"]
    assert refs(("NamespacedGeneratingPolicy", "g"), ("NamespacedImageValidatingPolicy", "i")) == \
        ["gpol:a/g", "ivpol:b/i"]
    assert refs(("DeletingPolicy", "d"), ("NamespacedMutatingPolicy", "m"), ("ValidatingPolicy", "v")) == \
        ["dpol:d", "mpol:c/m", "v"]
    assert refs(("ClusterPolicy", "legacy")) == []
    # No kind: every policy of that name (PolicyException.applies_to exempts them all).
    assert {"a/p", "b/p", "p", "mpol:p", "gpol:p"} <= set(refs(("", "p")))
    asyncio.run(handlers.policy_event(type="DELETED", resource=resource("namespacedvalidatingpolicies"),
                                      meta={"name": "p", "namespace": "a"}, memo=m))
    queued(m)
    assert refs(("NamespacedValidatingPolicy", "p")) == ["b/p"]


def test_an_expiring_exception_requeues_the_policies_it_names_of_every_kind() -> None:
    from vpol.controller.reconcile import exception_policy_keys
    from vpol.model.policy import PolicyException, PolicyRef

    exc = PolicyException("x", "team", policy_refs=tuple(PolicyRef(n, k) for n, k in (
        ("v", "ValidatingPolicy"), ("nv", "NamespacedValidatingPolicy"), ("m", "MutatingPolicy"),
        ("g", "GeneratingPolicy"), ("ng", "NamespacedGeneratingPolicy"), ("d", "DeletingPolicy"),
        ("i", "NamespacedImageValidatingPolicy"), ("old", "ClusterPolicy"))))
    assert [str(k) for k in exception_policy_keys(exc)] == ["v", "team/nv", "mpol:m", "gpol:g", "gpol:team/ng", "dpol:d",
                                                            "ivpol:team/i"]
