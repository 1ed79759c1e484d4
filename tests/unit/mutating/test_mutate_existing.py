"""mutateExisting's pure parts: target selection, target resolution from a trigger, the target's evaluation, and the
offline runs of `vpol test` / `vpol apply --target-resource` (Kyverno 1.19.1's semantics, docs/mutate-existing.md).
The operator's side on a real cluster is tests/e2e/test_mutate_existing.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from vpol.engine.request import ResourceType, Subject
from vpol.policies.mutating.engine import MutatingPolicyEngine
from vpol.policies.mutating.model import parse_mutating_policy
from vpol.policies.mutating.mutate_existing import as_target, offline_runs, selects_target, target_constraints

CM = ResourceType("", "v1", "configmaps", "ConfigMap", True)
NS = ResourceType("", "v1", "namespaces", "Namespace", False)
LABEL = 'Object{metadata: Object.metadata{labels: {"seen": request.operation + "-" + request.name}}}'


def policy(**spec: Any) -> Any:
    doc = {"apiVersion": "policies.kyverno.io/v1", "kind": spec.pop("kind", "MutatingPolicy"),
           "metadata": {"name": "p", **spec.pop("metadata", {})},
           "spec": {"evaluation": {"mutateExisting": {"enabled": True}},
                    "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                            "operations": ["CREATE"], "resources": ["namespaces"]}]},
                    "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": LABEL}}],
                    **spec}}
    parsed, problems = parse_mutating_policy(doc)
    assert parsed is not None, problems
    return parsed


def cm(name: str, namespace: str = "team", labels: dict[str, str] | None = None) -> Subject:
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace,
                                                                 "labels": labels or {}}}
    return Subject(type=CM, object=obj, operation="UPDATE")


def trigger(name: str = "team", data: dict[str, Any] | None = None) -> Subject:
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    if data:
        obj["metadata"]["labels"] = data
    return Subject(type=NS, object=obj, operation="CREATE")


TARGET_RULES = {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                   "resources": ["configmaps"]}],
                "excludeResourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["*"],
                                          "resources": ["configmaps"], "resourceNames": ["excluded"]}],
                "objectSelector": {"matchLabels": {"target": "yes"}}}


def test_listed_targets_follow_the_target_rules_not_their_operations_or_exclusions() -> None:
    p = policy(targetMatchConstraints=TARGET_RULES)
    assert target_constraints(p) is p.spec.target_match_constraints
    assert selects_target(p, cm("a", labels={"target": "yes"}))  # an UPDATE, though the rule says CREATE
    assert selects_target(p, cm("excluded", labels={"target": "yes"}))  # exclusions do not filter targets
    assert not selects_target(p, cm("b"))  # objectSelector
    # Without targetMatchConstraints (or with selectors only), the targets are what matchConstraints matches.
    plain = policy()
    assert target_constraints(plain) is plain.spec.match_constraints
    assert not selects_target(plain, cm("a")) and selects_target(plain, trigger())
    selectors_only = policy(targetMatchConstraints={"objectSelector": {"matchLabels": {"x": "y"}}})
    assert target_constraints(selectors_only) is selectors_only.spec.match_constraints


def test_a_namespaced_policy_selects_targets_of_its_namespace_only() -> None:
    p = policy(kind="NamespacedMutatingPolicy", metadata={"namespace": "team"},
               targetMatchConstraints={"resourceRules": TARGET_RULES["resourceRules"]})
    assert selects_target(p, cm("a", "team")) and not selects_target(p, cm("a", "other"))


def test_a_target_sees_itself_as_object_and_the_triggers_request() -> None:
    engine = MutatingPolicyEngine(policy(targetMatchConstraints={"resourceRules": TARGET_RULES["resourceRules"]},
                                         targetMatchConditions=[{"name": "not-skipped",
                                                                 "expression": "object.metadata.name != 'skipped'"}]))
    request = trigger("team").admission_request()
    mutated = engine.mutate_target(as_target(cm("a"), request))
    assert mutated.result.result == "pass" and mutated.object["metadata"]["labels"] == {"seen": "CREATE-team"}
    # Without a trigger (the policy was created, a periodic scan): a synthetic UPDATE of the target itself.
    alone = engine.mutate_target(as_target(cm("a"), None))
    assert alone.object["metadata"]["labels"] == {"seen": "UPDATE-a"}
    skipped = engine.mutate_target(as_target(cm("skipped"), request))
    assert skipped.result.result == "skip" and "not-skipped" in skipped.result.message
    # oldObject and namespaceObject are null for a target, as in Kyverno.
    probe = MutatingPolicyEngine(policy(mutations=[{"patchType": "ApplyConfiguration", "applyConfiguration": {
        "expression": 'Object{metadata: Object.metadata{labels: {"old": string(oldObject == null), '
                      '"ns": string(namespaceObject == null)}}}'}}]))
    labels = probe.mutate_target(as_target(cm("a"), request)).object["metadata"]["labels"]
    assert labels == {"old": "true", "ns": "true"}


def test_an_expression_resolves_one_object_or_items_from_the_trigger() -> None:
    listed = MutatingPolicyEngine(policy(
        matchConditions=[{"name": "labelled", "expression": "has(object.metadata.labels)"}],
        targetMatchConstraints={"expression": "{'items': [{'apiVersion': dyn('v1'), 'kind': dyn('ConfigMap'), "
                                              "'metadata': dyn({'name': object.metadata.name + '-cm', "
                                              "'namespace': object.metadata.name})}]}"}))
    found = listed.resolve_targets(trigger("team", {"a": "b"}))
    assert found.matched and [o["metadata"]["name"] for o in found.objects] == ["team-cm"]
    assert not listed.resolve_targets(trigger("team")).matched  # matchConditions false: no targets
    assert listed.resolve_targets(trigger("team"), conditions=False).objects  # Kyverno's CLI does not check them
    single = MutatingPolicyEngine(policy(targetMatchConstraints={
        "expression": "{'apiVersion': dyn('v1'), 'kind': dyn('ConfigMap'), 'metadata': dyn({'name': 'one'})}"}))
    assert [o["metadata"]["name"] for o in single.resolve_targets(trigger()).objects] == ["one"]
    bad = MutatingPolicyEngine(policy(targetMatchConstraints={"expression": "{'items': [1, 2]}"}))
    assert "item is not a valid Kubernetes object" in bad.resolve_targets(trigger()).error
    # A type that cannot be a map is refused when compiling, as Kyverno refuses it.
    refused = MutatingPolicyEngine(policy(targetMatchConstraints={"expression": "'a string'"}))
    assert any("output type must be a map" in p.message for p in refused.compiled.errors())


def test_offline_runs_match_targets_to_triggers() -> None:
    p = policy(targetMatchConstraints=TARGET_RULES)
    engine = MutatingPolicyEngine(p)
    targets = [cm("a", labels={"target": "yes"}), cm("b")]

    def mutate(pol: Any, target: Subject) -> tuple[Any, dict[str, Any]]:
        m = engine.mutate_target(target)
        return m.result, m.object

    runs = offline_runs([p], [trigger("t1"), trigger("t2")], targets,
                        resolve=lambda pol, t: engine.resolve_targets(t, conditions=False), mutate=mutate)
    assert [(i, patched["metadata"]["labels"]["seen"]) for _p, i, _r, patched in runs] == \
        [(0, "CREATE-t1"), (0, "CREATE-t2")]
    # A policy without mutateExisting has no targets.
    assert not offline_runs([policy(evaluation={"mutateExisting": {"enabled": False}})], [trigger()], targets,
                            resolve=lambda pol, t: None, mutate=mutate)


def write(path: Path, docs: list[dict[str, Any]]) -> str:
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path.name


def test_vpol_apply_and_test_with_target_resources(tmp_path: Path) -> None:
    pol = {"apiVersion": "policies.kyverno.io/v1", "kind": "MutatingPolicy", "metadata": {"name": "label-targets"},
           "spec": {"evaluation": {"mutateExisting": {"enabled": True}},
                    "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                            "operations": ["CREATE"], "resources": ["namespaces"]}]},
                    "targetMatchConstraints": TARGET_RULES,
                    "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": LABEL}}]}}
    write(tmp_path / "policy.yaml", [pol])
    write(tmp_path / "trigger.yaml", [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}])
    target = {"apiVersion": "v1", "kind": "ConfigMap",
              "metadata": {"name": "a", "namespace": "team", "labels": {"target": "yes"}}}
    write(tmp_path / "targets.yaml", [target, {"apiVersion": "v1", "kind": "ConfigMap",
                                               "metadata": {"name": "b", "namespace": "team"}}])
    proc = subprocess.run([sys.executable, "-m", "vpol.cli.main", "apply", "-p", "policy.yaml", "-r", "trigger.yaml",
                           "--target-resource", "targets.yaml", "-o", "json"], capture_output=True, text=True,
                          cwd=tmp_path)
    rows = [r for r in json.loads(proc.stdout) if r.get("target")]
    assert [(r["name"], r["result"]) for r in rows] == [("a", "pass")], proc.stdout
    assert rows[0]["patchedResource"]["metadata"]["labels"] == {"target": "yes", "seen": "CREATE-team"}
    patched = json.loads(json.dumps(target))
    patched["metadata"]["labels"]["seen"] = "CREATE-team"
    write(tmp_path / "patched.yaml", [patched])
    test = {"apiVersion": "cli.kyverno.io/v1alpha1", "kind": "Test", "metadata": {"name": "targets"},
            "policies": ["policy.yaml"], "resources": ["trigger.yaml"], "targetResources": ["targets.yaml"],
            "results": [{"policy": "label-targets", "isMutatingPolicy": True, "resources": ["team/a"],
                         "kind": "ConfigMap", "patchedResources": "patched.yaml", "result": "pass"}]}
    write(tmp_path / "kyverno-test.yaml", [test])
    ok = subprocess.run([sys.executable, "-m", "vpol.cli.main", "test", str(tmp_path)], capture_output=True,
                        text=True)
    assert ok.returncode == 0 and "1 agreed, 0 disagreed" in ok.stdout, ok.stdout
    patched["metadata"]["labels"]["seen"] = "something else"
    write(tmp_path / "patched.yaml", [patched])
    wrong = subprocess.run([sys.executable, "-m", "vpol.cli.main", "test", str(tmp_path)], capture_output=True,
                           text=True)
    assert wrong.returncode == 1 and "the patched target differs" in wrong.stdout, wrong.stdout
