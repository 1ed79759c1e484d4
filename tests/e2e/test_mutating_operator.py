"""The operator with MutatingPolicies on the real control plane (the operator runs as the manifests' ServiceAccount).

Each policy is limited to the test's namespace (its matchConstraints'
namespaceSelector), so tests do not see each other's mutations.
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client

from tests.e2e.operator_process import OperatorProcess
from tests.e2e.vpol_fixtures import (  # noqa: F401 - fixtures
    Policies,
    mutating_policies,
    operator,
    operator_stopped,
    vpol_installed,
    wait_for,
)

POD_RULE = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}

TEAM_LABEL = ('Object{metadata: Object.metadata{labels: {"example.com/team": "unassigned"}}}')
NON_ROOT = ('Object{spec: Object.spec{containers: object.spec.containers.map(c, Object.spec.containers{'
            'name: c.name, securityContext: Object.spec.containers.securityContext{runAsNonRoot: true}})}}')
ANNOTATE = ('[JSONPatch{op: "add", path: "/metadata/annotations", value: {}}, '
            'JSONPatch{op: "add", path: "/metadata/annotations/" + jsonpatch.escapeKey("example.com/seen"), '
            'value: "yes"}]')


def apply_config(expression: str, **extra: Any) -> dict[str, Any]:
    return {"matchConstraints": {"resourceRules": [POD_RULE]},
            "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": expression}}],
            **extra}


def workloads(namespace: str, suffix: str) -> list[dict[str, Any]]:
    pod_spec = {"containers": [{"name": "app", "image": "registry.example/app:1.0"},
                               {"name": "side", "image": "registry.example/side:1.0"}]}
    labels = {"app": suffix}
    return [
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"pod-{suffix}", "namespace": namespace},
         "spec": pod_spec},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": f"dep-{suffix}", "namespace": namespace},
         "spec": {"selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels}, "spec": pod_spec}}},
        {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": f"cron-{suffix}", "namespace": namespace},
         "spec": {"schedule": "0 * * * *", "jobTemplate": {"spec": {"template": {
             "spec": {**pod_spec, "restartPolicy": "Never"}}}}}},
    ]


def pod_template(obj: dict[str, Any]) -> dict[str, Any]:
    if obj["kind"] == "Pod":
        return obj
    if obj["kind"] == "CronJob":
        return obj["spec"]["jobTemplate"]["spec"]["template"]
    return obj["spec"]["template"]


def native(policies: Policies, name: str) -> dict[str, Any]:
    cond = policies.wait_condition(name, "AdmissionEnforced", "True")
    assert cond["reason"] == "NativeMAP", cond
    policies.wait_condition(name, "Ready", "True")
    return cond


def create_all(cluster: Any, objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for obj in objs:
        proc = cluster.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(obj))
        out.append(json.loads(proc.stdout))
    return out


def test_mutations_are_applied_natively_to_pods_and_controllers(mutating_policies: Policies, cluster: Any,
                                                                 namespace: str) -> None:
    team = mutating_policies.create("team", apply_config(TEAM_LABEL))
    non_root = mutating_policies.create("nonroot", apply_config(NON_ROOT))
    annotate = mutating_policies.create("annotate", {
        "matchConstraints": {"resourceRules": [POD_RULE]}, "autogen": {"podControllers": {"controllers": []}},
        "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": ANNOTATE}}]})
    for name in (team, non_root, annotate):
        cond = native(mutating_policies, name)
        assert f"mpol-{name}" in cond["message"]
        status = mutating_policies.get(name)["status"]
        assert status["enforcement"] == "NativeMAP" and status["generated"] is True
        types = {c["type"]: c["status"] for c in status["conditions"]}
        assert types == {"Compiled": "True", "TypeChecked": "True", "MAPGenerated": "True",
                         "AdmissionEnforced": "True", "Ready": "True"}
        assert mutating_policies.map(f"mpol-{name}") is not None
        assert mutating_policies.map(f"mpol-{name}-binding", binding=True) is not None
    for name in (team, non_root):
        assert mutating_policies.map(f"mpol-{name}-autogen-defaults") is not None
        assert mutating_policies.map(f"mpol-{name}-autogen-cronjobs") is not None
        assert set(mutating_policies.get(name)["status"]["autogen"]["configs"]) == {"defaults", "cronjobs"}
    assert mutating_policies.map(f"mpol-{annotate}-autogen-defaults") is None

    # The API server picks new admission policies up within seconds: retry on fresh names until they apply.
    attempt = iter(range(100))

    def mutated() -> list[dict[str, Any]] | None:
        objs = create_all(cluster, workloads(namespace, f"a{next(attempt)}"))
        templates = [pod_template(o) for o in objs]
        if all((t.get("metadata") or {}).get("labels", {}).get("example.com/team") == "unassigned"
               and all((c.get("securityContext") or {}).get("runAsNonRoot") is True for c in t["spec"]["containers"])
               for t in templates) and \
                (objs[0]["metadata"].get("annotations") or {}).get("example.com/seen") == "yes":
            return objs
        return None

    pod, deployment, cronjob = wait_for("objects mutated by the generated MAPs", mutated, 60, 1)
    # Controllers are mutated in their pod template, not in their own metadata; JSONPatch only for Pods.
    assert "example.com/team" not in (deployment["metadata"].get("labels") or {})
    assert "example.com/seen" not in (deployment["metadata"].get("annotations") or {})
    assert [c["name"] for c in pod["spec"]["containers"]] == ["app", "side"]


def test_broken_mutations_are_reported_with_path_and_position(operator: OperatorProcess,
                                                              mutating_policies: Policies) -> None:
    unknown = mutating_policies.create("unknown", apply_config("Object{spec: Object.spec{hostNetworking: true}}"))
    atomic = mutating_policies.create("atomic", apply_config("Object{spec: Object.spec{tolerations: []}}"))
    with operator_stopped(operator):  # else vpol's policy validation refuses it (tests/e2e/test_policy_validation.py)
        syntax = mutating_policies.create("syntax",
                                          apply_config('Object{metadata: Object.metadata{labels: {"a": "b"} + }}'))
    expected = {
        syntax: ("spec.mutations[0].applyConfiguration.expression (1:", "Syntax error"),
        unknown: ("spec.mutations[0].applyConfiguration.expression", "undefined field 'hostNetworking'"),
        atomic: ("spec.mutations[0].applyConfiguration.expression", "may not mutate atomic arrays, maps or structs: "
                                                                    ".spec.tolerations"),
    }
    for name, (where, what) in expected.items():
        cond = mutating_policies.wait_condition(name, "Compiled", "False")
        assert where in cond["message"] and what in cond["message"], cond["message"]
        enforced = mutating_policies.wait_condition(name, "AdmissionEnforced", "False")
        assert enforced["reason"] == "CompilationFailed"
        mutating_policies.wait_condition(name, "Ready", "False")
        assert mutating_policies.map(f"mpol-{name}") is None
    # Type errors carry the position inside the expression, as the typeChecking status does.
    warnings = mutating_policies.get(unknown)["status"]["typeChecking"]["expressionWarnings"]
    assert any("<input>:1:" in w["warning"] for w in warnings), warnings


def test_maps_are_repaired_and_follow_the_policy(mutating_policies: Policies, cluster: Any) -> None:
    name = mutating_policies.create("lifecycle", apply_config(TEAM_LABEL))
    native(mutating_policies, name)
    admission = client.AdmissionregistrationV1Api(cluster.api_client)
    before = mutating_policies.map(f"mpol-{name}")
    assert before is not None
    admission.delete_mutating_admission_policy(f"mpol-{name}")
    repaired = wait_for("the deleted MAP to come back", lambda: (
        (m := mutating_policies.map(f"mpol-{name}")) and m["metadata"]["uid"] != before["metadata"]["uid"] and m), 30)
    assert repaired["spec"]["mutations"] == before["spec"]["mutations"]
    # Opting out removes the native objects; vpol's webhook applies the policy instead.
    mutating_policies.replace_spec(name, apply_config(TEAM_LABEL, autogen={"mutatingAdmissionPolicy":
                                                                           {"enabled": False}}))
    cond = mutating_policies.wait_condition(name, "AdmissionEnforced", "True")
    assert cond["reason"] == "Webhook" and "enabled: false" in cond["message"]
    wait_for("the MAPs to be removed", lambda: mutating_policies.map(f"mpol-{name}") is None and
             mutating_policies.map(f"mpol-{name}-autogen-defaults") is None, 30)


def test_a_policy_the_api_server_cannot_express_is_applied_by_vpols_webhook(mutating_policies: Policies,
                                                                            cluster: Any, namespace: str) -> None:
    # cel.bind is Kyverno's: a MutatingAdmissionPolicy cannot use it, so vpol's mutating webhook applies it,
    # to Pods and (autogen) to the pod templates of Deployments and CronJobs.
    name = mutating_policies.create("kyverno-only", apply_config(
        'cel.bind(team, "webhook", Object{metadata: Object.metadata{labels: {"example.com/team": team}}})'))
    generated = mutating_policies.wait_condition(name, "MAPGenerated", "False")
    assert generated["reason"] == "NotEligible" and "cel.bind" in generated["message"], generated
    enforced = mutating_policies.wait_condition(name, "AdmissionEnforced", "True")
    assert enforced["reason"] == "Webhook" and "vpol-mutating" in enforced["message"], enforced
    mutating_policies.wait_condition(name, "Ready", "True")
    assert mutating_policies.get(name)["status"]["enforcement"] == "Webhook"
    assert mutating_policies.map(f"mpol-{name}") is None
    config = client.AdmissionregistrationV1Api(cluster.api_client).read_mutating_webhook_configuration(
        "vpol-mutating")
    rules = {(tuple(r.api_groups), tuple(r.resources)) for w in config.webhooks for r in w.rules}
    assert (("",), ("pods",)) in rules and (("apps",), ("daemonsets", "deployments", "replicasets", "statefulsets")) \
        in rules
    attempt = iter(range(100))

    def mutated() -> list[dict[str, Any]] | None:
        objs = create_all(cluster, workloads(namespace, f"w{next(attempt)}"))
        ok = all((pod_template(o).get("metadata") or {}).get("labels", {}).get("example.com/team") == "webhook"
                 for o in objs)
        return objs if ok else None

    wait_for("objects mutated by vpol's webhook", mutated, 60, 1)
    # Deleting the last webhook policy removes its configuration.
    mutating_policies.api.delete_cluster_custom_object("policies.kyverno.io", "v1", "mutatingpolicies", name)

    def removed() -> bool:
        try:
            client.AdmissionregistrationV1Api(cluster.api_client).read_mutating_webhook_configuration(
                "vpol-mutating")
            return False
        except client.ApiException as exc:
            return exc.status == 404

    wait_for("the mutating webhook configuration to be removed", removed, 30)
