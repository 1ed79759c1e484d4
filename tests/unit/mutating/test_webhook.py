"""The mutating webhook's pure parts: routes, its configuration, its answers."""

from __future__ import annotations

import base64
import json
from typing import Any

import jsonpatch

from vpol.desired.webhook import desired_webhook_configuration
from vpol.engine.admission import mutation_response
from vpol.engine.evaluate import Result
from vpol.policies.mutating.map import NATIVE, NOT_APPLICABLE, WEBHOOK, map_ineligibility, mutating_route
from vpol.policies.mutating.model import parse_mutating_policy
from vpol.policies.registry import policy_variants


def _policy(expression: str, **spec: Any) -> Any:
    doc = {"apiVersion": "policies.kyverno.io/v1", "kind": "MutatingPolicy", "metadata": {"name": "p", "generation": 3},
           "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                            "operations": ["CREATE"], "resources": ["pods"]}]},
                    "mutations": [{"patchType": "ApplyConfiguration",
                                   "applyConfiguration": {"expression": expression}}], **spec}}
    policy, problems = parse_mutating_policy(doc)
    assert policy is not None, problems
    return policy


PLAIN = 'Object{metadata: Object.metadata{labels: {"a": "b"}}}'
KYVERNO_ONLY = 'cel.bind(v, "b", Object{metadata: Object.metadata{labels: {"a": v}}})'


def test_routes() -> None:
    assert mutating_route(_policy(PLAIN), generation="eligible", compiles=True) == NATIVE
    assert mutating_route(_policy(PLAIN), generation="opt-in", compiles=True) == WEBHOOK
    assert mutating_route(_policy(PLAIN, autogen={"mutatingAdmissionPolicy": {"enabled": True}}),
                          generation="opt-in", compiles=True) == NATIVE
    assert mutating_route(_policy(KYVERNO_ONLY), generation="eligible", compiles=True) == WEBHOOK
    assert mutating_route(_policy(PLAIN), generation="eligible", compiles=True, map_refused=True) == WEBHOOK
    assert mutating_route(_policy(PLAIN, evaluation={"admission": {"enabled": False},
                                                     "mutateExisting": {"enabled": True}}),
                          generation="eligible", compiles=True) == NOT_APPLICABLE
    # orValue on what may not be an optional: Kyverno's reading, not the API server's.
    compat = 'Object{metadata: Object.metadata{labels: {"a": object.metadata.labels.orValue({}).b}}}'
    assert mutating_route(_policy(compat), generation="eligible", compiles=True) == WEBHOOK
    # A literal of a map-valued field builds the map in the API server too (tests/e2e/test_map_shapes.py).
    labels = "Object{metadata: Object.metadata{labels: Object.metadata.labels{a: 'b'}}}"
    assert mutating_route(_policy(labels), generation="eligible", compiles=True) == NATIVE
    # useServerSideApply replaces atomic fields a MAP refuses to set: Kyverno generates none, nor does vpol.
    ssa = _policy(labels, evaluation={"useServerSideApply": True})
    assert mutating_route(ssa, generation="eligible", compiles=True) == WEBHOOK
    assert "useServerSideApply" in map_ineligibility(ssa)


def test_configuration_covers_the_policies_and_their_controllers() -> None:
    fail = _policy(KYVERNO_ONLY, reinvocationPolicy="IfNeeded")
    config = desired_webhook_configuration(
        [fail], variants=policy_variants, client_config={"url": "https://127.0.0.1:9443"}, mutating=True,
                                           excluded_namespaces=("kube-system", "vpol-system"))
    assert config is not None and config["kind"] == "MutatingWebhookConfiguration"
    assert config["metadata"]["name"] == "vpol-mutating"
    (webhook,) = config["webhooks"]
    assert webhook["name"] == "fail.mutate.vpol.kyverno.io"
    assert webhook["clientConfig"]["url"] == "https://127.0.0.1:9443/mutate/fail"
    assert webhook["reinvocationPolicy"] == "IfNeeded" and webhook["sideEffects"] == "None"
    rules = sorted((tuple(r["apiGroups"]), tuple(r["resources"])) for r in webhook["rules"])
    assert rules == [(("",), ("pods",)), (("apps",), ("daemonsets", "deployments", "replicasets", "statefulsets")),
                     (("batch",), ("cronjobs",)), (("batch",), ("jobs",))]
    assert {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "vpol-system"]} \
        in webhook["namespaceSelector"]["matchExpressions"]
    assert desired_webhook_configuration(
        [], variants=policy_variants, client_config={}, mutating=True) is None


def _decode(answer: dict[str, Any]) -> list[dict[str, Any]]:
    return json.loads(base64.b64decode(answer["response"]["patch"]))


def test_answer_is_a_json_patch_to_the_mutated_object() -> None:
    original = {"metadata": {"name": "x"}, "spec": {"containers": [{"name": "a"}]}}
    mutated = {"metadata": {"name": "x", "labels": {"a": "b"}}, "spec": {"containers": [{"name": "a"}]}}
    ok = Result(policy="p", result="pass", message="success")
    answer = mutation_response("u1", original, mutated, [ok], {"p": "Fail"})
    assert answer["response"]["allowed"] is True and answer["response"]["patchType"] == "JSONPatch"
    assert jsonpatch.apply_patch(original, _decode(answer)) == mutated
    unchanged = mutation_response("u2", original, original, [ok], {"p": "Fail"})
    assert "patch" not in unchanged["response"]


def test_errors_follow_the_failure_policy() -> None:
    original = {"metadata": {"name": "x"}}
    broken = Result(policy="p", result="error", message="boom")
    denied = mutation_response("u", original, original, [broken], {"p": "Fail"})
    assert denied["response"]["allowed"] is False and "boom" in denied["response"]["status"]["message"]
    ignored = mutation_response("u", original, original, [broken], {"p": "Ignore"})
    assert ignored["response"]["allowed"] is True


def test_condition_names_kyverno_accepts_are_qualified_in_generated_policies() -> None:
    import re

    from vpol.policies.mutating.map import desired_map_objects

    doc = {"apiVersion": "policies.kyverno.io/v1", "kind": "MutatingPolicy", "metadata": {"name": "p"},
           "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": ["batch"], "apiVersions": ["v1"],
                                                            "operations": ["CREATE"], "resources": ["jobs"]}]},
                    "matchConditions": [{"name": "check the job spec", "expression": "true"},
                                        {"name": "check the job spec!", "expression": "true"}],
                    "mutations": [{"patchType": "ApplyConfiguration",
                                   "applyConfiguration": {"expression": "Object{}"}}]}}
    policy, problems = parse_mutating_policy(doc)
    assert policy is not None
    assert [p.severity for p in problems if p.path.startswith("spec.matchConditions")] == ["warning", "warning"]
    (generated, _binding) = desired_map_objects(policy, force=True).objects
    names = [c["name"] for c in generated["spec"]["matchConditions"]]
    assert names == ["check-the-job-spec", "check-the-job-spec-2"]
    assert all(re.fullmatch(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]", n) for n in names)


def test_a_mutating_policy_labelled_reports_disabled_labels_its_map_not_its_binding() -> None:
    from vpol.policies.mutating.map import desired_map_objects

    doc = {"apiVersion": "policies.kyverno.io/v1", "kind": "MutatingPolicy",
           "metadata": {"name": "p", "labels": {"reports.kyverno.io/disabled": ""}},
           "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": ["batch"], "apiVersions": ["v1"],
                                                            "operations": ["CREATE"], "resources": ["jobs"]}]},
                    "mutations": [{"patchType": "ApplyConfiguration",
                                   "applyConfiguration": {"expression": "Object{}"}}]}}
    policy, _problems = parse_mutating_policy(doc)
    assert policy is not None and policy.reports_disabled
    (generated, binding) = desired_map_objects(policy, force=True).objects
    assert generated["metadata"]["labels"]["reports.kyverno.io/disabled"] == "true"
    assert "reports.kyverno.io/disabled" not in binding["metadata"]["labels"]
