"""GeneratingPolicies as Kyverno runs them while the cluster changes, on the real control plane:

- a kind whose CRD is installed after the operator started is generated (and scanned) without a restart;
- a synchronized trigger that stops matching the policy's matchConditions takes its downstream with it, and gets it
  back when it matches again (Kyverno 1.19);
- a PolicyException with ``reportResult: pass`` exempts a trigger from generation and reports it passed;
- permissions granted after the policy (a ClusterRole aggregated into the operator's) show in its status and the
  generation they refused is done, within a minute.

The module's operator resyncs hourly: what must follow the cluster does so through its own watches, not a resync.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.e2e.operator_process import OperatorProcess, sa_kubeconfig
from tests.e2e.test_generate_delete import Kube, report_results
from tests.e2e.vpol_fixtures import vpol_installed, wait_for  # noqa: F401

GROUP = "policies.kyverno.io"
CM_RULE = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"]}


@pytest.fixture(scope="module")
def operator(vpol_installed: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    tmp = tmp_path_factory.mktemp("operator-follows")
    proc = OperatorProcess(sa_kubeconfig(vpol_installed, tmp / "kubeconfig"), tmp / "operator.log",
                           extra=("--scan-interval", "3600", "--resync", "3600")).start()
    yield proc
    proc.stop()


@pytest.fixture
def kube(operator: OperatorProcess, cluster: Any) -> Iterator[Kube]:
    k = Kube(cluster)
    yield k
    k.cleanup()


def gpol(name: str, labels: dict[str, str], generate: str, *, sync: bool,
         conditions: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/v1", "kind": "GeneratingPolicy", "metadata": {"name": name},
            "spec": {"matchConstraints": {"resourceRules": [CM_RULE], "objectSelector": {"matchLabels": labels}},
                     "matchConditions": conditions or [],
                     "evaluation": {"synchronize": {"enabled": sync}},
                     "generate": [{"expression": generate}]}}


def configmap(name: str, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace,
                                                                  "labels": labels}, "data": {}}


def test_a_kind_whose_crd_is_installed_later_is_generated_and_scanned(kube: Kube, cluster: Any, namespace: str,
                                                                      operator: OperatorProcess,
                                                                      unique_name: Callable[..., str]) -> None:
    run = unique_name("later")
    group = f"{run}.e2e.vpol.io"
    labels = {"run": run}
    # A background policy on the kind, made while no API serves it.
    kube.apply({"apiVersion": f"{GROUP}/v1", "kind": "ValidatingPolicy", "metadata": {"name": f"{run}-size"},
                "spec": {"validationActions": ["Audit"],
                         "matchConstraints": {"resourceRules": [{"apiGroups": [group], "apiVersions": ["v1"],
                                                                 "operations": ["CREATE", "UPDATE"],
                                                                 "resources": ["widgets"]}]},
                         "validations": [{"expression": "object.spec.size <= 3", "message": "too big"}]}})
    # A policy whose template names the kind says that it is not served yet.
    templated = f"{run}-template"
    kube.apply({"apiVersion": f"{GROUP}/v1", "kind": "GeneratingPolicy", "metadata": {"name": templated},
                "spec": {"matchConstraints": {"resourceRules": [CM_RULE],
                                              "objectSelector": {"matchLabels": {"run": f"{run}-t"}}},
                         "generate": [{"template": {"interpolate": "cel", "value": (
                             f"apiVersion: {group}/v1\nkind: Widget\nmetadata:\n"
                             "  name: (( object.metadata.name + '-t' ))\n"
                             "  namespace: (( object.metadata.namespace ))\nspec:\n  size: 1\n")}}]}})

    def generating_message() -> str:
        return str((kube.condition("generatingpolicy", templated, "Generating") or {}).get("message") or "")

    wait_for("the template's kind said unserved", lambda: "serves no" in generating_message(), timeout=60)
    # Installed now, with the rights to write its objects (aggregated into vpol's roles).
    kube.apply({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": f"widgets.{group}"},
                "spec": {"group": group, "scope": "Namespaced",
                         "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                         "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                             "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}},
               {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": f"{run}-widgets", "labels": {"vpol.kyverno.io/aggregate-to-generate": "true"}},
                "rules": [{"apiGroups": [group], "resources": ["widgets"],
                           "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}]})
    cluster.kubectl("wait", "--for=condition=Established", f"crd/widgets.{group}", "--timeout=30s")
    name = f"{run}-gen"
    kube.apply(gpol(name, labels, (
        f"generator.Apply(object.metadata.namespace, [{{'apiVersion': '{group}/v1', 'kind': 'Widget', "
        "'metadata': {'name': object.metadata.name}, 'spec': {'size': 5}}])"), sync=False))
    kube.wait_ready("generatingpolicy", name, timeout=90)
    kube.apply(configmap("trigger", namespace, labels))
    widget = wait_for("the Widget generated", lambda: kube.get(f"widgets.{group}", "trigger", namespace), timeout=60)
    assert widget["spec"]["size"] == 5
    wait_for("the template's kind served", lambda: "serves no" not in generating_message(), timeout=30)
    # The policy made before the kind existed scans it now.
    found = wait_for("the Widget's scan result", lambda: next(
        (r for r in report_results(cluster, f"widgets.{group}", "trigger", namespace)
         if r.get("policy") == f"{run}-size"), None), timeout=60)
    assert found["result"] == "fail" and found["message"] == "too big", found


def test_a_trigger_that_stops_matching_loses_its_downstream_and_gets_it_back(
        kube: Kube, cluster: Any, namespace: str, unique_name: Callable[..., str]) -> None:
    run = unique_name("optin")
    labels = {"run": run}
    name = f"{run}-gen"
    kube.apply(gpol(name, labels, (
        "generator.Apply(object.metadata.namespace, [{'apiVersion': 'v1', 'kind': 'ConfigMap', "
        "'metadata': {'name': object.metadata.name + '-copy'}, 'data': {'from': object.metadata.name}}])"),
        sync=True, conditions=[{"name": "opted-in",
                                "expression": "object.metadata.?labels['opt-in'].orValue('') == 'true'"}]))
    kube.wait_ready("generatingpolicy", name, timeout=90)
    kube.apply(configmap("trigger", namespace, {**labels, "opt-in": "true"}))
    wait_for("the copy generated", lambda: kube.get("configmap", "trigger-copy", namespace), timeout=60)
    cluster.kubectl("label", "configmap", "trigger", "-n", namespace, "opt-in=false", "--overwrite")
    wait_for("the copy deleted", lambda: kube.get("configmap", "trigger-copy", namespace) is None, timeout=60)
    cluster.kubectl("label", "configmap", "trigger", "-n", namespace, "opt-in=true", "--overwrite")
    wait_for("the copy generated again", lambda: kube.get("configmap", "trigger-copy", namespace), timeout=60)


@pytest.mark.parametrize("made", ["before", "after"])
def test_an_exception_reporting_pass_exempts_a_trigger(made: str, kube: Kube, cluster: Any, namespace: str,
                                                       unique_name: Callable[..., str]) -> None:
    """The exception made before the policy, or after it is Ready (in another namespace than the triggers')."""
    run = unique_name("passed")
    labels = {"run": run}
    name = f"{run}-gen"
    exception = {"apiVersion": f"{GROUP}/v1", "kind": "PolicyException",
                 "metadata": {"name": f"{run}-testing", "namespace": "default"},
                 "spec": {"policyRefs": [{"name": name, "kind": "GeneratingPolicy"}], "reportResult": "pass",
                          "matchConditions": [{"name": "testing",
                                               "expression": "object.metadata.name == 'testing'"}]}}
    if made == "before":
        kube.apply(exception)
    kube.apply(gpol(name, labels, (
        "generator.Apply(object.metadata.namespace, [{'apiVersion': 'v1', 'kind': 'ConfigMap', "
        "'metadata': {'name': object.metadata.name + '-copy'}, 'data': {}}])"), sync=False))
    kube.wait_ready("generatingpolicy", name, timeout=90)
    if made == "after":
        kube.apply(exception)
    # The exempt trigger first, so once the other's copy exists the exempt one's would.
    kube.apply(configmap("testing", namespace, labels), configmap("other", namespace, labels))
    wait_for("the other trigger's copy", lambda: kube.get("configmap", "other-copy", namespace), timeout=60)
    assert kube.get("configmap", "testing-copy", namespace) is None
    found = wait_for("the exempt trigger's result", lambda: next(
        (r for r in report_results(cluster, "configmap", "testing", namespace) if r.get("policy") == name), None),
        timeout=60)
    assert found["result"] == "pass" and found["message"].startswith("rule is passed due to policy exception"), found


def test_permissions_granted_later_show_and_the_refused_generation_is_done(
        kube: Kube, cluster: Any, namespace: str, unique_name: Callable[..., str]) -> None:
    """Nothing tells the operator when a ClusterRole grants it more: a policy lacking permissions is checked again
    every 30 s (not at the hourly resync), and a GeneratingPolicy that gets them makes a pass (its refused
    triggers are owed their generation)."""
    run = unique_name("grant")
    labels = {"run": run}
    name = f"{run}-gen"
    kube.apply({"apiVersion": f"{GROUP}/v1", "kind": "GeneratingPolicy", "metadata": {"name": name},
                "spec": {"matchConstraints": {"resourceRules": [CM_RULE], "objectSelector": {"matchLabels": labels}},
                         "generate": [{"template": {"interpolate": "cel", "value": (
                             "apiVersion: v1\nkind: PodTemplate\nmetadata:\n"
                             "  name: (( object.metadata.name + '-tpl' ))\n"
                             "  namespace: (( object.metadata.namespace ))\n"
                             "template:\n  spec:\n    containers:\n    - name: app\n      image: busybox:1.36\n")}}]}})

    def granted() -> str:
        return str((kube.condition("generatingpolicy", name, "RBACPermissionsGranted") or {}).get("status") or "")

    wait_for("the missing permission said", lambda: granted() == "False", timeout=60)
    kube.apply(configmap("trigger", namespace, labels))
    refused = wait_for("the refused generation reported", lambda: next(
        (r for r in report_results(cluster, "configmap", "trigger", namespace) if r.get("policy") == name), None),
        timeout=60)
    assert refused["result"] == "error", refused
    assert kube.get("podtemplate", "trigger-tpl", namespace) is None
    kube.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": f"{run}-podtemplates", "labels": {"vpol.kyverno.io/aggregate-to-generate": "true"}},
                "rules": [{"apiGroups": [""], "resources": ["podtemplates"],
                           "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}]})
    wait_for("the permission granted in the status", lambda: granted() == "True", timeout=75)
    generated = wait_for("the refused generation done", lambda: kube.get("podtemplate", "trigger-tpl", namespace),
                         timeout=30)
    assert generated["template"]["spec"]["containers"][0]["image"] == "busybox:1.36"
