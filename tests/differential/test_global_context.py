"""globalContext.Get over GlobalContextEntries as a cluster holds them: vpol and Kyverno's own code, pair by pair.

The oracle (tests/kyverno) builds Kyverno's real store entries (its kubernetesResource entry over a fake
dynamic client holding the objects, its apiCall entry over a canned API client) behind Kyverno's own context
provider; vpol loads the same entries through its controller's loaders (fed the same objects as watch events)
and the same API answers. Both then evaluate the same policies on the same resources; every pair must give
the same result, and a `fail` the same message. The cases pin what a cluster shows and a Kyverno CLI test
cannot: objects' integers stay int64 (go-jmespath neither orders nor equates them with literals), API answers
are float64, a field missing at the top of a projection is an error, unknown and failing projections, failing
calls, unknown entries.

Kyverno's informer lists objects in no set order (vpol sorts them): no case depends on the order.
"""

from __future__ import annotations

import json
from typing import Any

from tests.differential.test_kyverno import _ask_oracle, _kyverno_outcome, oracle
from tests.unit.policies import make_policy
from vpol.cel.backend import using
from vpol.cel.global_context import API_CALL, FAILED, EntryState, api_call_state
from vpol.cel.go_jmespath import go_json
from vpol.cel.offline_backend import OfflineBackend
from vpol.controller.global_context import GlobalContextOptions, _ResourceLoader
from vpol.engine.global_context import GlobalContextBackend, GlobalContextStore
from vpol.engine.request import ResourceType
from vpol.engine.subjects import subject_for
from vpol.model.global_context import parse_global_context_entry
from vpol.policies.validating.engine import PolicyEngine

DEPLOYMENTS = ResourceType("apps", "v1", "deployments", "Deployment", True)
DEPLOY_RULE = {"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["deployments"]}


def deploy(name: str, replicas: int, namespace: str = "default") -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas}}


def gce(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """An entry as the API server stores it: the CRD's defaults applied (Kyverno's externalapi entry relies on
    them: with retryLimit 0 its call is never made)."""
    if "apiCall" in spec:
        spec = {**spec, "apiCall": {"method": "GET", "refreshInterval": "10m", "retryLimit": 3, **spec["apiCall"]}}
    return {"apiVersion": "kyverno.io/v2beta1", "kind": "GlobalContextEntry", "metadata": {"name": name},
            "spec": spec}


ENTRIES: list[dict[str, Any]] = [
    {"entry": gce("deps", {
        "kubernetesResource": {"group": "apps", "version": "v1", "resource": "deployments"},
        "projections": [{"name": "names", "jmesPath": "[].metadata.name"},
                        {"name": "count", "jmesPath": "length(@)"},
                        {"name": "big", "jmesPath": "[?spec.replicas > `2`].metadata.name"},
                        {"name": "one", "jmesPath": "[?spec.replicas == `1`].metadata.name"},
                        {"name": "sum", "jmesPath": "sum([].spec.replicas)"}]}),
     "objects": [deploy("web", 1), deploy("api", 4), deploy("db", 3, "data")]},
    {"entry": gce("empty", {"kubernetesResource": {"version": "v1", "resource": "configmaps", "namespace": "none"},
                            "projections": [{"name": "count", "jmesPath": "length(@)"}]}),
     "objects": []},
    {"entry": gce("call", {
        "apiCall": {"urlPath": "/apis/example.com/v1/things", "refreshInterval": "1h"},
        "projections": [{"name": "names", "jmesPath": "items[].metadata.name"},
                        {"name": "big", "jmesPath": "items[?spec.replicas > `1`].metadata.name"},
                        {"name": "none", "jmesPath": "items[5]"}]}),
     "response": {"items": [{"metadata": {"name": "x"}, "spec": {"replicas": 2}},
                            {"metadata": {"name": "y"}, "spec": {"replicas": 1}}], "n": 2}},
    # a projection reading a field the answer lacks: an error, which the whole entry then answers
    {"entry": gce("call-missing-field", {"apiCall": {"urlPath": "/y", "refreshInterval": "1h"},
                                         "projections": [{"name": "p", "jmesPath": "status.phase"}]}),
     "response": {"items": []}},
    {"entry": gce("failing", {"apiCall": {"urlPath": "/api/v1/nothing", "refreshInterval": "1h"}}),
     "error": "the server could not find the requested resource"},
    {"entry": gce("bad-projection", {"apiCall": {"urlPath": "/x", "refreshInterval": "1h"},
                                     "projections": [{"name": "p", "jmesPath": "abs(items)"}]}),
     "response": {"items": [1]}},
]

#: (name, expression, message expression or ""): one policy each.
CHECKS = [
    ("member", "object.metadata.name in globalContext.Get('deps', 'names')", "'unknown ' + object.metadata.name"),
    ("count-is-double", "globalContext.Get('deps', 'count') == 3.0 && globalContext.Get('deps', 'count') + 1.0 == 4.0",
     ""),
    ("int64-not-ordered", "size(globalContext.Get('deps', 'big')) == 0 && size(globalContext.Get('deps', 'one')) == 0",
     "'big: ' + string(size(globalContext.Get('deps', 'big')))"),
    ("sum-of-int64-fails", "globalContext.Get('deps', 'sum') > 0.0", ""),
    ("unknown-projection", "globalContext.Get('deps', 'other') != null", ""),
    ("list-keeps-int64", "globalContext.Get('deps', '').all(d, d.spec.replicas + 1 > 1)", ""),
    ("replicas-vs-list", "globalContext.Get('deps', '').exists(d, d.metadata.name == object.metadata.name && "
                         "d.spec.replicas == object.spec.replicas)", "'different replicas'"),
    ("empty-entry", "size(globalContext.Get('empty', '')) == 0 && globalContext.Get('empty', 'count') == 0.0", ""),
    ("unknown-entry", "globalContext.Get('no-such-entry', '') == null && globalContext.Get('no-such-entry', 'p') == null",
     ""),
    ("call-floats", "globalContext.Get('call', '').n + 1.0 == 3.0 && globalContext.Get('call', '').n == 2", ""),
    ("call-ordered", "globalContext.Get('call', 'big') == ['x'] && object.metadata.name in globalContext.Get('call', "
                     "'names')", "'not called ' + object.metadata.name"),
    ("call-null-projection", "globalContext.Get('call', 'none') == null", ""),
    ("call-unknown-projection", "globalContext.Get('call', 'nope') == null", ""),
    ("call-failing", "globalContext.Get('failing', '') != null", ""),
    ("call-bad-projection", "globalContext.Get('bad-projection', '') != null", ""),
    ("call-missing-field", "globalContext.Get('call-missing-field', '') != null", ""),
]

RESOURCES = [deploy("web", 1), deploy("api", 2), deploy("x", 5), deploy("new", 1, "data")]


def policies() -> list[Any]:
    out = []
    for name, expression, message in CHECKS:
        validation: dict[str, str] = {"expression": expression}
        if message:
            validation["messageExpression"] = message
        out.append(make_policy(name=name, rules=[DEPLOY_RULE], validations=[validation]))
    return out


def vpol_store() -> GlobalContextStore:
    """The entries loaded as the operator loads them."""
    store = GlobalContextStore()
    for case in ENTRIES:
        entry, problems = parse_global_context_entry(case["entry"])
        assert entry is not None, problems
        projections = [(p.name, p.jmes_path) for p in entry.projections]
        if entry.resource is not None:
            loader = _ResourceLoader(entry, None, store, GlobalContextOptions(), lambda _n: None)  # type: ignore[arg-type]
            loader.prepare()
            loader._on_list()
            for obj in case["objects"]:
                loader._on_event("ADDED", json.loads(json.dumps(obj)))
            loader._on_event("SYNCED", {})
        elif "error" in case:
            store.set_state(EntryState(entry.name, API_CALL, FAILED, error=case["error"]))
        else:
            store.set_state(api_call_state(entry.name, go_json(json.loads(json.dumps(case["response"]))),
                                           projections))
    return store


def test_cluster_entries_decide_as_kyvernos_store() -> None:
    binary = oracle()
    pols = policies()
    answers = _ask_oracle(binary, {
        "validating": [p.raw for p in pols], "namespacedValidating": [], "mutating": [], "exceptions": [],
        "operation": "CREATE", "namespaces": [], "userInfo": {},
        "resources": [{"object": r, "namespaced": True} for r in RESOURCES],
        "context": {"resources": [], "images": [], "httpMocks": {}, "globalContextEntries": [],
                    "clusterGlobalContext": ENTRIES}})
    backend = GlobalContextBackend(OfflineBackend(), vpol_store().view())
    engines = [PolicyEngine(p) for p in pols]
    disagreements = []
    decided: dict[str, int] = {}
    with using(backend):
        for obj, answer in zip(RESOURCES, answers):
            subject = subject_for(obj, resolve=lambda a, k: DEPLOYMENTS)
            for engine in engines:
                res = engine.evaluate(subject)
                ours = f"{res.result}: {res.message}" if res is not None else ""
                theirs = _kyverno_outcome(answer, engine.policy.name)
                decided[theirs.split(":", 1)[0]] = decided.get(theirs.split(":", 1)[0], 0) + 1
                same = ours.split(":", 1)[0] == theirs.split(":", 1)[0] and (not ours.startswith("fail") or ours == theirs)
                if not same:
                    disagreements.append(f"{engine.policy.name} on {obj['metadata']['name']}: vpol {ours[:200]!r}, "
                                         f"Kyverno {theirs[:200]!r}")
    print(f"{sum(decided.values())} pairs decided (Kyverno: {decided})")
    assert not disagreements, "\n".join(disagreements)
    # the cases cover every kind of outcome
    assert {"pass", "fail", "error"} <= set(decided), decided

