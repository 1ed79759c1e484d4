"""vpol enforces a policy natively exactly when the API server runs it as vpol's engine does, shape by shape.

A table of expression shapes where the API server's CEL and Kyverno's differ or might (literals of map-valued
fields, ``Object.<path>{...}`` on maps, optional fields and entries, ``dyn``, plain map literals, unknown fields,
values of the wrong type, atomic fields, ``orValue`` on what is not an optional, Kyverno's ``request.object``).
For each, the policy's native objects as Kyverno's generator builds them (the Kyverno oracle: they are built
whatever vpol decides) are created on a real API server, confined to a namespace of the shape's own, and sample
objects are sent through it (server-side dry-run creates); the same objects go through vpol's engine offline.
The API server *runs the shape as vpol does* when it accepts the objects and every sample gets the same outcome
(the same mutated object, or an error in both; admitted or denied alike). vpol must generate native objects for
exactly those shapes (``desired_map_objects`` / ``desired_objects``); the others go to its webhook. A shape vpol
does not enforce at all (a mutation that cannot apply to the kind: its operator reports a compile error, as
`vpol check` does) must fail on every sample in the API server too.

Every admission policy is created before a last *sentinel* MAP and VAP, and samples are sent once the sentinels
act: the API server's policy plugins load definitions in resourceVersion order, so every shape is loaded by then
(the argument vpol's own enforcement proof rests on, see docs/kyverno-compatibility.md).
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client, dynamic
from kubernetes.client.rest import ApiException

from tests.e2e.conftest import KubeCluster
from tests.e2e.test_generated_differential import kyverno_generated
from tests.e2e.test_mutating_differential import _clean
from tests.differential.test_kyverno import oracle
from vpol.engine.evaluate import FAIL
from vpol.engine.subjects import subject_for
from vpol.policies.mutating.engine import MutatingPolicyEngine, mutate_all
from vpol.policies.mutating.map import desired_map_objects
from vpol.policies.mutating.model import parse_mutating_policy
from vpol.policies.policy_validation import policy_problems
from vpol.policies.validating.engine import PolicyEngine
from vpol.policies.validating.model import parse_policy
from vpol.policies.validating.vap import desired_objects

CONFIGMAPS = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}
PODS = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
CONFIGMAP_SAMPLES = [
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bare"}},
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "labelled", "labels": {"team": "web", "b": "y"},
                                                           "annotations": {"note": "n"}}, "data": {"note": "hi"}},
]
POD_SAMPLES = [
    {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
     "spec": {"containers": [{"name": "c", "image": "registry.example/app:1"}]}},
    {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "q", "labels": {"team": "a"}},
     "spec": {"nodeSelector": {"zone": "a"}, "containers": [{"name": "c", "image": "registry.example/app:1"}]}},
]
#: (shape, rule, apply configuration) of MutatingPolicies.
MUTATIONS = [
    ("map-typed literal", CONFIGMAPS,
     'Object{metadata: Object.metadata{labels: Object.metadata.labels{managed: "true"}}}'),
    ("map-typed literal, two maps", CONFIGMAPS,
     'Object{metadata: Object.metadata{labels: Object.metadata.labels{a: "1"}, '
     'annotations: Object.metadata.annotations{b: "2"}}}'),
    ("map-typed literal, optional entry", CONFIGMAPS,
     "Object{metadata: Object.metadata{annotations: Object.metadata.annotations{?copied: object.?data.?note}}}"),
    ("map-typed literal, value read from the object", CONFIGMAPS,
     "Object{metadata: Object.metadata{labels: Object.metadata.labels{"
     "owner: object.metadata.?labels.?team.orValue('none')}}}"),
    ("map-typed literal, dyn value", CONFIGMAPS,
     'Object{data: Object.data{k: dyn("v")}}'),
    ("map-typed literal of a map in a list item", PODS,
     'Object{spec: Object.spec{containers: [Object.spec.containers{name: "c", '
     'resources: Object.spec.containers.resources{limits: Object.spec.containers.resources.limits{cpu: "1"}}}]}}'),
    ("plain map literal with keys that are no identifiers", CONFIGMAPS,
     'Object{metadata: Object.metadata{labels: {"app.kubernetes.io/name": "x"}}}'),
    ("optional field of an object literal", CONFIGMAPS,
     "Object{metadata: Object.metadata{?labels: optional.none()}, data: Object.data{z: 'z'}}"),
    ("unknown field", CONFIGMAPS,
     'Object{metadata: Object.metadata{nosuch: "x"}}'),
    ("atomic map", PODS,
     'Object{spec: Object.spec{nodeSelector: {"disk": "ssd"}}}'),
    ("orValue on what is not an optional", CONFIGMAPS,
     'Object{metadata: Object.metadata{labels: {"a": object.metadata.labels.orValue({"b": "c"}).b}}}'),
]
#: (shape, rule, validation) of ValidatingPolicies.
VALIDATIONS = [
    ("optional chain", CONFIGMAPS, "object.metadata.?labels.?team.orValue('') != ''"),
    ("dyn", CONFIGMAPS, "dyn(object.metadata).name.size() > 3"),
    ("has on a map", CONFIGMAPS, "has(object.metadata.labels) && 'team' in object.metadata.labels"),
    ("orValue on what is not an optional", CONFIGMAPS, "object.metadata.labels.orValue({}).size() > 0"),
    ("Kyverno's request.object", CONFIGMAPS, "request.object.metadata.name == object.metadata.name"),
]
SENTINEL = "shape-sentinel"
NATIVE, WEBHOOK, REFUSED = "native", "webhook", "refused"


def _mutating(name: str, rule: dict[str, Any], expression: str) -> dict[str, Any]:
    return {"apiVersion": "policies.kyverno.io/v1", "kind": "MutatingPolicy", "metadata": {"name": name, "uid": name},
            "spec": {"autogen": {"mutatingAdmissionPolicy": {"enabled": True}, "podControllers": {"controllers": []}},
                     "matchConstraints": {
                "resourceRules": [rule]}, "mutations": [{"patchType": "ApplyConfiguration",
                                                         "applyConfiguration": {"expression": expression}}]}}


def _validating(name: str, rule: dict[str, Any], expression: str) -> dict[str, Any]:
    return {"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy",
            "metadata": {"name": name, "uid": name},
            "spec": {"autogen": {"validatingAdmissionPolicy": {"enabled": True}, "podControllers": {"controllers": []}},
                     "matchConstraints": {"resourceRules": [rule]},
                     "validations": [{"expression": expression, "message": "denied by " + name}]}}


def _confined(objects: list[dict[str, Any]], namespace: str) -> list[dict[str, Any]]:
    out = copy.deepcopy(objects)
    for obj in out:
        if obj["kind"] in ("MutatingAdmissionPolicy", "ValidatingAdmissionPolicy"):
            obj["spec"]["matchConstraints"]["namespaceSelector"] = {
                "matchLabels": {"kubernetes.io/metadata.name": namespace}}
        obj["metadata"].pop("ownerReferences", None)
    return out


def _create(cluster: KubeCluster, objects: list[dict[str, Any]]) -> str:
    """Create the objects; "" or the API server's refusal."""
    dyn = dynamic.DynamicClient(cluster.api_client)
    for obj in objects:
        try:
            dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"]).create(body=obj)
        except ApiException as exc:
            return f"{exc.status}: {json.loads(exc.body or '{}').get('message', exc.reason)}"
    return ""


def _server(cluster: KubeCluster, obj: dict[str, Any], namespace: str) -> dict[str, Any] | str:
    """The object as admitted in ``namespace`` (a dry-run create), or the refusal."""
    api = dynamic.DynamicClient(cluster.api_client).resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    try:
        return _clean(api.create(body=copy.deepcopy(obj), namespace=namespace, dry_run="All").to_dict())
    except ApiException as exc:
        return f"refused: {json.loads(exc.body or '{}').get('message', exc.reason)}"


def _wait(what: str, done: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


@pytest.mark.slow
def test_native_exactly_where_the_api_server_runs_the_shape_as_vpol(own_cluster: KubeCluster) -> None:
    binary = oracle()
    core = client.CoreV1Api(own_cluster.api_client)
    shapes: list[tuple[str, dict[str, Any], str, list[dict[str, Any]]]] = []
    for i, (shape, rule, expression) in enumerate(MUTATIONS):
        doc = _mutating(f"mshape-{i}", rule, expression)
        mpol, problems = parse_mutating_policy(doc)
        assert mpol is not None, problems
        route = REFUSED if any(p.severity == "error" for p in policy_problems(mpol)) else \
            NATIVE if desired_map_objects(mpol, force=True).objects else WEBHOOK
        shapes.append((shape, doc, route, CONFIGMAP_SAMPLES if rule is CONFIGMAPS else POD_SAMPLES))
    for i, (shape, rule, expression) in enumerate(VALIDATIONS):
        doc = _validating(f"vshape-{i}", rule, expression)
        policy, problems = parse_policy(doc)
        assert policy is not None, problems
        route = REFUSED if any(p.severity == "error" for p in policy_problems(policy)) else \
            NATIVE if desired_objects(policy, force=True).objects else WEBHOOK
        shapes.append((shape, doc, route, CONFIGMAP_SAMPLES))

    neutral = "shape-neutral"
    for ns in [neutral, SENTINEL, *(d["metadata"]["name"] for _s, d, _e, _x in shapes)]:
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    generated = kyverno_generated(binary, [d for _s, d, _e, _x in shapes], [])
    created: dict[str, str] = {}
    for g in generated:
        assert not g.get("skip"), g
        created[g["name"]] = _create(own_cluster, _confined(g["objects"], g["name"]))
    # The sentinels, created last: once they act, every shape before them is loaded.
    sentinels = kyverno_generated(binary, [_mutating(SENTINEL, CONFIGMAPS, 'Object{data: Object.data{s: "1"}}'),
                                           _validating(SENTINEL + "-v", CONFIGMAPS, "object.metadata.name != 'no'")],
                                  [])
    for g in sentinels:
        assert _create(own_cluster, _confined(g["objects"], SENTINEL)) == ""
    probe = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "no"}}
    _wait("the sentinel MAP and VAP", lambda: (lambda r: isinstance(r, str) and "denied by" in r)(
        _server(own_cluster, probe, SENTINEL)))
    _wait("the sentinel MAP", lambda: (lambda r: isinstance(r, dict) and (r.get("data") or {}).get("s") == "1")(
        _server(own_cluster, {**probe, "metadata": {"name": "yes"}}, SENTINEL)))

    verdicts: list[str] = []
    wrong: list[str] = []
    for shape, doc, route, samples in shapes:
        name = doc["metadata"]["name"]
        refusal = created[name]
        same = not refusal
        detail = refusal
        fails_always = bool(refusal)
        for sample in samples if not refusal else []:
            admitted = _server(own_cluster, sample, neutral)
            assert isinstance(admitted, dict), admitted  # what admission sees, defaulted
            theirs = _server(own_cluster, sample, name)
            fails_always = fails_always or isinstance(theirs, str)
            subject = subject_for({**admitted, "metadata": {**admitted["metadata"], "namespace": name}})
            if doc["kind"] == "MutatingPolicy":
                mpol, _ = parse_mutating_policy(doc)
                assert mpol is not None
                mutated, results = mutate_all([MutatingPolicyEngine(mpol)], subject)
                if any(r.result == "error" for r in results) or mutated is None:
                    ours: dict[str, Any] | str = "error: " + "; ".join(r.message for r in results)
                    agree = isinstance(theirs, str)
                else:
                    ours = _server(own_cluster, _clean(mutated), neutral)
                    agree = ours == theirs
            else:
                policy, _ = parse_policy(doc)
                assert policy is not None
                result = PolicyEngine(policy).evaluate(subject)
                ours = f"{result.result}: {result.message}" if result else "no result"
                agree = (result is not None and result.result in (FAIL, "error")) == isinstance(theirs, str)
            if not agree:
                same = False
                detail = detail or f"{sample['metadata']['name']}: API server {theirs!r}, vpol {ours!r}"
            if not isinstance(theirs, str):
                fails_always = False
        verdicts.append(f"{route:7} | API server {'runs it alike' if same else 'differs'}"
                        f"{', fails on every object' if fails_always else ''} | {doc['kind']} {shape}"
                        f"{': ' + detail[:200] if detail else ''}")
        if (route == REFUSED and not fails_always) or (route != REFUSED and (route == NATIVE) != same):
            wrong.append(verdicts[-1])
    print("\n".join(verdicts))
    assert not wrong, "vpol's native eligibility disagrees with the API server:\n" + "\n".join(wrong)
    # The table is not one-sided: both answers occur.
    assert {v.split()[0] for v in verdicts} == {NATIVE, WEBHOOK, REFUSED}
