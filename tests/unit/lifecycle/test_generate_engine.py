"""What a GeneratingPolicy generates for a trigger (vpol.policies.generating.engine.GeneratingPolicyEngine), and how its
objects are placed and labelled (docs/internals/generating-and-deleting.md: "The CEL environment", "Exceptions", "Writing the
downstreams", "Reports" and "The CLI")."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from vpol.cel.backend import using
from vpol.cel.offline_backend import OfflineBackend
from vpol.engine.subjects import subject_for
from vpol.policies.generating.engine import (
    GENERATED,
    GENERATED_RESOURCES,
    MANAGED_BY,
    POLICY_NAME,
    POLICY_NAMESPACE,
    SOURCE_UID,
    TRIGGER_GROUP,
    TRIGGER_KIND,
    TRIGGER_NAME,
    TRIGGER_NAMESPACE,
    TRIGGER_UID,
    TRIGGER_VERSION,
    Downstream,
    GeneratingPolicyEngine,
    Generation,
    Placement,
    downstream_labels,
    labelled,
)
from vpol.policies.generating.model import GeneratingPolicy

from tests.unit.lifecycle.builders import configmap, exception, gpol, namespace_object, rules

CM_KIND = '"apiVersion": "v1", "kind": "ConfigMap"'
CR_KIND = '"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole"'


def apply(namespace: str, *objects: str) -> dict[str, Any]:
    """A generate item calling generator.Apply(namespace, [objects]) (CEL literals)."""
    return {"expression": f'generator.Apply("{namespace}", [{", ".join(objects)}])'}


def cm(name: str, **metadata: str) -> str:
    """A ConfigMap literal (its metadata as given)."""
    md = ", ".join(f'"{k}": {v}' for k, v in {"name": f'"{name}"', **metadata}.items())
    return f'{{{CM_KIND}, "metadata": {{{md}}}}}'


def engine(policy: GeneratingPolicy, placement: Placement = Placement.CLUSTER, **kw: Any) -> GeneratingPolicyEngine:
    built = GeneratingPolicyEngine(policy, placement=placement, **kw)
    assert built.ok, built.compiled.problems
    return built


def generate(spec: dict[str, Any], trigger: dict[str, Any] | None = None, *, namespace: str | None = None,
             placement: Placement = Placement.CLUSTER, operation: str = "CREATE", **kw: Any) -> Generation | None:
    return engine(gpol(spec, namespace=namespace), placement, **kw).generate(
        subject_for(trigger or configmap(uid="trigger-uid"), operation=operation))


def objects(generation: Generation | None) -> list[dict[str, Any]]:
    assert generation is not None
    return [d.object for d in generation.downstreams]


def names(generation: Generation | None) -> list[tuple[str, str | None]]:
    return [(o["metadata"]["name"], o["metadata"].get("namespace")) for o in objects(generation)]


# --- the result -------------------------------------------------------------------------------------------------


def test_a_generation_that_ran_passes_with_its_objects() -> None:
    generation = generate({"generate": [apply("team", cm("a"), cm("b"))]})
    assert generation is not None
    r = generation.result
    assert (r.policy, r.result, r.message) == ("p", "pass", GENERATED)
    assert GENERATED == "policy evaluated successfully"
    # The result is about the trigger.
    assert (r.api_version, r.kind, r.namespace, r.name, r.uid) == ("v1", "ConfigMap", "team", "settings",
                                                                    "trigger-uid")
    assert names(generation) == [("a", "team"), ("b", "team")]
    assert r.properties == {GENERATED_RESOURCES: "/v1, Kind=ConfigMap Name=a Namespace=team; "
                                                 "/v1, Kind=ConfigMap Name=b Namespace=team"}


def test_generated_resources_name_the_group_and_version() -> None:
    generation = generate({"generate": [apply("team", f'{{"apiVersion": "apps/v1", "kind": "Deployment", '
                                                      f'"metadata": {{"name": "web"}}}}', f'{{{CR_KIND}, '
                                                      f'"metadata": {{"name": "reader"}}}}')]})
    assert generation is not None
    assert generation.result.properties[GENERATED_RESOURCES] == (
        "apps/v1, Kind=Deployment Name=web Namespace=team; "
        "rbac.authorization.k8s.io/v1, Kind=ClusterRole Name=reader Namespace=")


def test_nothing_generated_passes_without_the_property() -> None:
    generation = generate({"generate": [apply("team"), {"expression": "size(object.?data.orValue({})) >= 0"}]})
    assert generation is not None
    assert generation.result.result == "pass" and generation.downstreams == []
    assert GENERATED_RESOURCES not in generation.result.properties


def test_audit_annotations_are_properties() -> None:
    generation = generate({"generate": [apply("team", cm("a"))],
                           "auditAnnotations": [{"key": "owner", "valueExpression": "'team ' + object.metadata.name"},
                                                {"key": "empty", "valueExpression": "''"},
                                                {"key": "none", "valueExpression": "null"}]})
    assert generation is not None
    assert generation.result.properties == {"owner": "team settings",
                                            GENERATED_RESOURCES: "/v1, Kind=ConfigMap Name=a Namespace=team"}


def test_an_audit_annotation_that_fails_is_an_error() -> None:
    generation = generate({"generate": [apply("team", cm("a"))],
                           "auditAnnotations": [{"key": "k", "valueExpression": "string(object.nope)"}]})
    assert generation is not None
    assert generation.result.result == "error"
    assert "auditAnnotation" in generation.result.message


# --- which triggers --------------------------------------------------------------------------------------------


def test_a_trigger_outside_the_match_constraints_has_no_result() -> None:
    spec = {"generate": [apply("team", cm("a"))]}
    assert generate(spec, namespace_object("team")) is None  # not a configmap
    assert generate(spec, operation="UPDATE") is None  # the rule says CREATE


def test_a_policy_that_does_not_compile_generates_nothing() -> None:
    built = GeneratingPolicyEngine(gpol({"generate": [{"expression": "1"}]}))
    assert not built.ok
    assert built.generate(subject_for(configmap())) is None


def test_a_namespaced_policy_in_a_cluster_takes_triggers_of_its_namespace_only() -> None:
    spec = {"generate": [{"expression": f"generator.Apply([{cm('a')}])"}]}
    assert generate(spec, configmap(namespace="team"), namespace="team") is not None
    assert generate(spec, configmap(namespace="other"), namespace="team") is None
    # ... and the Namespace of that name.
    ns_spec = {"matchConstraints": rules("namespaces"), **spec}
    assert generate(ns_spec, namespace_object("team"), namespace="team") is not None
    assert generate(ns_spec, namespace_object("other"), namespace="team") is None


def test_kyverno_cli_hands_a_namespaced_policy_every_trigger() -> None:
    spec = {"generate": [{"expression": f"generator.Apply([{cm('a')}])"}]}
    generation = generate(spec, configmap(namespace="other"), namespace="team", placement=Placement.KYVERNO_CLI)
    assert names(generation) == [("a", "team")]


# --- the CEL inputs ---------------------------------------------------------------------------------------------


def test_create_sees_an_empty_old_object() -> None:
    spec = {"generate": [{"expression": f"size(oldObject) == 0 && object.metadata.name == 'settings' && "
                                        f"request.operation == 'CREATE' && generator.Apply('team', [{cm('a')}])"}]}
    assert names(generate(spec)) == [("a", "team")]


def test_delete_sees_the_deleted_object_as_old_object() -> None:
    spec = {"matchConstraints": rules("configmaps", ("DELETE",)),
            "generate": [{"expression": "size(object) == 0 && generator.Apply(oldObject.metadata.namespace, "
                                        f"[{{{CM_KIND}, \"metadata\": {{\"name\": oldObject.metadata.name + "
                                        "'-deleted'}}])"}]}
    assert names(generate(spec, operation="DELETE")) == [("settings-deleted", "team")]


def test_a_cluster_scoped_trigger_has_a_null_namespace_object() -> None:
    spec = {"matchConstraints": rules("namespaces"),
            "generate": [{"expression": f"namespaceObject == null && generator.Apply(object.metadata.name, "
                                        f"[{cm('a')}])"}]}
    assert names(generate(spec, namespace_object("team-a"))) == [("a", "team-a")]


def test_variables_are_evaluated_for_the_generate_items() -> None:
    spec = {"variables": [{"name": "target", "expression": "object.metadata.name + '-copy'"}],
            "generate": [{"expression": f'generator.Apply("team", [{{{CM_KIND}, "metadata": {{"name": '
                                        f'variables.target}}}}])'}]}
    assert names(generate(spec)) == [("settings-copy", "team")]


# --- matchConditions ---------------------------------------------------------------------------------------------


def test_a_false_match_condition_means_no_result() -> None:
    assert generate({"matchConditions": [{"name": "m", "expression": "false"}],
                     "generate": [apply("team", cm("a"))]}) is None


def test_a_failing_match_condition_is_an_error() -> None:
    generation = generate({"matchConditions": [{"name": "m", "expression": "object.nope == 1"}],
                           "generate": [apply("team", cm("a"))]})
    assert generation is not None
    assert generation.result.result == "error"
    assert generation.result.message == "failed to evaluate policy: no such key: nope"
    assert generation.downstreams == []


def test_a_false_match_condition_wins_over_a_failing_one() -> None:
    assert generate({"matchConditions": [{"name": "err", "expression": "object.nope == 1"},
                                         {"name": "no", "expression": "false"}],
                     "generate": [apply("team", cm("a"))]}) is None


# --- generate items ----------------------------------------------------------------------------------------------


def test_items_run_in_order_and_the_first_failure_ends_the_evaluation() -> None:
    generation = generate({"generate": [apply("team", cm("one")), {"expression": "object.nope == 1"},
                                        apply("team", cm("three"))]})
    assert generation is not None
    assert generation.result.result == "error"
    assert generation.result.message == "failed to evaluate policy: no such key: nope"
    # What the items before it wrote stays; the items after it do not run.
    assert names(generation) == [("one", "team")]


def test_items_of_both_kinds_keep_their_order() -> None:
    generation = generate({"generate": [
        {"template": {"value": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: first\n  namespace: team\n"}},
        apply("team", cm("second")),
        {"template": {"value": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: third\n  namespace: team\n"}}]})
    assert [n for n, _ns in names(generation)] == ["first", "second", "third"]


def test_a_dyn_generate_expression_must_be_a_bool_at_run_time() -> None:
    generation = generate({"generate": [apply("team", cm("a")), {"expression": "object.metadata.name"}]})
    assert generation is not None
    assert generation.result.result == "error"
    assert generation.result.message.startswith("failed to evaluate policy: ")
    assert names(generation) == [("a", "team")]


def test_a_non_map_object_is_an_error() -> None:
    generation = generate({"generate": [{"expression": 'generator.Apply("team", [dyn(null)])'}]})
    assert generation is not None
    assert generation.result.result == "error"
    assert "failed to generate resources" in generation.result.message
    assert generation.downstreams == []


# --- placing objects: a cluster (the background controller) -------------------------------------------------------


def test_apply_replaces_every_object_namespace() -> None:
    generation = generate({"generate": [apply("target", cm("a", namespace='"elsewhere"'), cm("b"))]})
    assert names(generation) == [("a", "target"), ("b", "target")]


def test_cluster_scoped_kinds_get_no_namespace_and_unknown_kinds_count_as_namespaced() -> None:
    widget = '{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}'
    generation = generate({"generate": [apply("target", f'{{{CR_KIND}, "metadata": {{"name": "cr", '
                                                        f'"namespace": "x"}}}}', widget)]})
    assert names(generation) == [("cr", None), ("w", "target")]


def test_the_scope_function_decides_what_is_cluster_scoped() -> None:
    def scope(api_version: str, kind: str) -> bool | None:
        return {"Widget": False}.get(kind)

    widget = '{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}'
    generation = generate({"generate": [apply("target", widget, cm("c"))]}, namespaced=scope)
    assert names(generation) == [("w", None), ("c", "target")]


def fetched(name: str, namespace: str, **extra: Any) -> dict[str, Any]:
    """An object as read from the API server (uid, resourceVersion and the other server fields)."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "resourceVersion": "42",
                         "creationTimestamp": "2026-01-01T00:00:00Z", "managedFields": [{"manager": "m"}],
                         "selfLink": f"/api/v1/namespaces/{namespace}/configmaps/{name}",
                         "labels": {"keep": "me"}, "annotations": {"note": "source"}, **extra},
            "data": {"k": "v"}}


CLONE = {"generate": [{"expression": 'generator.Apply("team-a", [resource.Get("v1", "configmaps", "default", '
                                     '"source")])'}]}
OWNER = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "o"}]


def clone(placement: Placement, **extra: Any) -> Generation | None:
    with using(OfflineBackend(resources=[fetched("source", "default", **extra)])):
        return generate(CLONE, placement=placement)


def test_a_clone_in_a_cluster() -> None:
    generation = clone(Placement.CLUSTER, ownerReferences=OWNER)
    assert generation is not None and generation.result.result == "pass"
    [downstream] = generation.downstreams
    # What the API server owns is dropped; the source's uid is remembered (it carried a resourceVersion); an
    # owner in the source's namespace cannot own the copy in another one.
    assert downstream.source_uid == "uid-source"
    assert downstream.object == {"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "v"},
                                 "metadata": {"name": "source", "namespace": "team-a", "labels": {"keep": "me"},
                                              "annotations": {"note": "source"}}}


def test_owner_references_stay_when_the_namespace_does_not_change() -> None:
    keep = {"generate": [apply("team", cm("a", namespace='"team"', ownerReferences='[{"name": "o"}]'),
                               cm("b", ownerReferences='[{"name": "o"}]'))]}
    assert [o["metadata"].get("ownerReferences") for o in objects(generate(keep))] == [[{"name": "o"}]] * 2
    moved = {"generate": [apply("team", cm("a", namespace='"other"', ownerReferences='[{"name": "o"}]'))]}
    assert "ownerReferences" not in objects(generate(moved))[0]["metadata"]


def test_data_generated_by_the_policy_has_no_source() -> None:
    generation = generate({"generate": [apply("team", cm("a", uid='"u"'))]})
    assert generation is not None
    [downstream] = generation.downstreams
    assert downstream.source_uid == ""  # no resourceVersion: not a copy of a live object
    assert "uid" not in downstream.object["metadata"]


def test_objects_are_copies() -> None:
    source = fetched("source", "default")
    backend = OfflineBackend(resources=[source])
    with using(backend):
        first = generate(CLONE)
    assert first is not None
    first.downstreams[0].object["metadata"]["labels"]["keep"] = "changed"
    with using(backend):
        second = generate(CLONE)
    assert objects(second)[0]["metadata"]["labels"] == {"keep": "me"}


# --- placing objects: Kyverno's CLI ---------------------------------------------------------------------------


def test_kyverno_cli_sets_the_namespace_and_changes_nothing_else() -> None:
    generation = clone(Placement.KYVERNO_CLI, ownerReferences=OWNER)
    assert generation is not None
    [obj] = objects(generation)
    expected = fetched("source", "default", ownerReferences=OWNER)
    expected["metadata"]["namespace"] = "team-a"
    assert obj == expected
    cluster_scoped = generate({"generate": [apply("target", f'{{{CR_KIND}, "metadata": {{"name": "cr"}}}}')]},
                              placement=Placement.KYVERNO_CLI)
    assert names(cluster_scoped) == [("cr", "target")]  # also for cluster-scoped kinds


def test_kyverno_cli_with_cluster_resources_places_as_a_cluster_and_drops_annotations() -> None:
    generation = clone(Placement.KYVERNO_CLI_CLUSTER, ownerReferences=OWNER)
    assert generation is not None
    [obj] = objects(generation)
    md = obj["metadata"]
    for key in ("uid", "resourceVersion", "creationTimestamp", "managedFields", "annotations", "ownerReferences"):
        assert key not in md, key
    assert (md["name"], md["namespace"], md["labels"]) == ("source", "team-a", {"keep": "me"})
    cluster_scoped = generate({"generate": [apply("target", f'{{{CR_KIND}, "metadata": {{"name": "cr"}}}}')]},
                              placement=Placement.KYVERNO_CLI_CLUSTER)
    assert names(cluster_scoped) == [("cr", None)]


def test_kyverno_cli_with_cluster_resources_keeps_self_link() -> None:
    generation = clone(Placement.KYVERNO_CLI_CLUSTER)
    assert objects(generation)[0]["metadata"].get("selfLink") == "/api/v1/namespaces/default/configmaps/source"


# --- lists ------------------------------------------------------------------------------------------------------


def test_every_map_with_an_items_list_stands_for_its_items() -> None:
    i1, i2 = cm("i1"), cm("i2", namespace='"x"')
    listed = f'{{"apiVersion": "v1", "kind": "Anything", "items": [{i1}, {i2}]}}'
    not_a_list = f'{{{CM_KIND}, "metadata": {{"name": "scalar-items"}}, "items": "not a list"}}'
    generation = generate({"generate": [apply("team", cm("before"), listed, not_a_list)]})
    assert names(generation) == [("before", "team"), ("i1", "team"), ("i2", "team"), ("scalar-items", "team")]


def test_resource_list_clones_every_object_listed() -> None:
    backend = OfflineBackend(resources=[fetched("one", "default"), fetched("two", "default"),
                                        fetched("elsewhere", "other")])
    spec = {"generate": [{"expression": 'generator.Apply("team-a", [resource.List("v1", "configmaps", "default")])'}]}
    with using(backend):
        generation = generate(spec)
    assert generation is not None
    assert [(d.object["metadata"]["name"], d.object["metadata"]["namespace"], d.source_uid)
            for d in generation.downstreams] == [("one", "team-a", "uid-one"), ("two", "team-a", "uid-two")]


# --- templates ----------------------------------------------------------------------------------------------------

GROUPED = """apiVersion: v1
kind: ConfigMap
metadata: {name: a, namespace: x}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: b}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: c, namespace: y}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: d, namespace: x}
"""


def test_template_objects_keep_their_namespace_grouped_by_namespace() -> None:
    generation = generate({"generate": [{"template": {"value": GROUPED}}]})
    # Grouped by namespace, the groups in the order they first appear (Kyverno's applyTemplate).
    assert names(generation) == [("a", "x"), ("d", "x"), ("b", None), ("c", "y")]


def test_a_template_with_placeholders() -> None:
    value = ("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: (( object.metadata.name ))-copy\n"
             "  namespace: (( object.metadata.namespace ))\n  labels: \"(( {'from': object.metadata.name} ))\"\n"
             "data:\n  size: (( size(object.metadata.name) ))\n  text: \"n=(( size(object.metadata.name) ))\"\n"
             "  kept: \\(( literal ))\n")
    [obj] = objects(generate({"generate": [{"template": {"value": value, "interpolate": "cel"}}]}))
    assert obj == {"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "settings-copy", "namespace": "team", "labels": {"from": "settings"}},
                   "data": {"size": 8, "text": "n=8", "kept": "(( literal ))"}}


def test_a_template_placeholder_that_fails_is_an_error() -> None:
    value = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: (( object.nope ))\n"
    generation = generate({"generate": [apply("team", cm("before")),
                                        {"template": {"value": value, "interpolate": "cel"}}]})
    assert generation is not None
    assert generation.result.result == "error"
    assert generation.result.message.startswith("failed to evaluate policy: ")
    assert names(generation) == [("before", "team")]


def test_an_embedded_structured_placeholder_is_an_error() -> None:
    value = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x-(( object.metadata ))\n  namespace: team\n"
    generation = generate({"generate": [{"template": {"value": value, "interpolate": "cel"}}]})
    assert generation is not None and generation.result.result == "error"
    assert "embedded in a string must evaluate to a scalar" in generation.result.message


def test_template_render_errors_name_the_document_and_field() -> None:
    value = ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: team}\n---\n"
             "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x-(( object.metadata ))\n")
    generation = generate({"generate": [{"template": {"value": value, "interpolate": "cel"}}]})
    assert generation is not None
    assert "failed to render generation template: document 2: field \"metadata\"" in generation.result.message


# --- namespaced policies -----------------------------------------------------------------------------------------


def test_a_namespaced_policy_applies_into_its_own_namespace() -> None:
    a, b = cm("a", namespace='"elsewhere"'), cm("b")
    spec = {"generate": [{"expression": f"generator.Apply([{a}, {b}])"}]}
    generation = generate(spec, namespace="team")
    assert names(generation) == [("a", "team"), ("b", "team")]
    assert generation is not None and generation.result.policy == "team/p"


def test_a_namespaced_policy_may_not_generate_a_cluster_scoped_kind() -> None:
    spec = {"generate": [{"expression": f"generator.Apply([{cm('first')}])"},
                         {"expression": f'generator.Apply([{{{CR_KIND}, "metadata": {{"name": "cr"}}}}])'}]}
    generation = generate(spec, namespace="team")
    assert generation is not None
    assert generation.result.result == "error"
    assert generation.result.message == (
        'failed to evaluate policy: cross-scope generation denied: a policy scoped to namespace "team" cannot '
        "generate cluster-scoped resource rbac.authorization.k8s.io/v1/ClusterRole")
    assert names(generation) == [("first", "team")]
    # Kyverno's CLI's fake context places it like any other object.
    cli = generate(spec, namespace="team", placement=Placement.KYVERNO_CLI)
    assert names(cli) == [("first", "team"), ("cr", "team")]


def test_a_namespaced_template_fills_in_its_namespace_and_refuses_another() -> None:
    own = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nkind: ConfigMap\n" \
          "metadata: {name: b, namespace: team}\n"
    assert names(generate({"generate": [{"template": {"value": own}}]}, namespace="team")) == [("a", "team"),
                                                                                                ("b", "team")]
    other = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: x}\n"
    generation = generate({"generate": [{"template": {"value": other}}]}, namespace="team")
    assert generation is not None and generation.result.result == "error"
    assert generation.result.message == (
        'failed to evaluate policy: cross-namespace generation denied: a policy in namespace "team" cannot '
        'generate resources into namespace "x"')
    assert generation.downstreams == []


# --- exceptions ---------------------------------------------------------------------------------------------------


def exempt(conditions: list[str], *, policy: str = "p", kind: str = "GeneratingPolicy", name: str = "e1",
           **spec: Any) -> Any:
    return exception(name, conditions, policy=policy, kind=kind, **spec)


def test_an_exception_exempts_the_trigger() -> None:
    generation = generate({"generate": [apply("team", cm("a"))]}, exceptions=[exempt(["true"])])
    assert generation is not None
    r = generation.result
    assert (r.result, r.message, r.exception) == ("skip", "rule is skipped due to policy exception: default/e1",
                                                   "e1")
    assert r.properties == {"exceptions": "e1"}
    assert generation.downstreams == []


def test_an_exception_reporting_pass() -> None:
    generation = generate({"generate": [apply("team", cm("a"))]},
                          exceptions=[exempt(["true"], reportResult="pass")])
    assert generation is not None
    assert (generation.result.result, generation.result.message) == (
        "pass", "rule is passed due to policy exception: default/e1")
    assert generation.downstreams == []


def test_exceptions_come_before_the_match_conditions() -> None:
    generation = generate({"matchConditions": [{"name": "m", "expression": "object.nope == 1"}],
                           "generate": [apply("team", cm("a"))]}, exceptions=[exempt(["true"])])
    assert generation is not None and generation.result.result == "skip"


def test_an_exception_whose_conditions_do_not_hold_changes_nothing() -> None:
    generation = generate({"generate": [apply("team", cm("a"))]},
                          exceptions=[exempt(["object.metadata.name == 'other'"])])
    assert generation is not None and generation.result.result == "pass"
    assert names(generation) == [("a", "team")]


def test_an_exception_that_fails_is_an_error() -> None:
    generation = generate({"generate": [apply("team", cm("a"))]}, exceptions=[exempt(["object.nope == 1"])])
    assert generation is not None
    assert generation.result.result == "error"
    assert generation.result.message == "failed to evaluate policy: no such key: nope"
    assert generation.downstreams == []


def test_exceptions_apply_to_the_policy_they_name() -> None:
    spec = {"generate": [apply("team", cm("a"))]}
    for other in (exempt(["true"], policy="another"), exempt(["true"], kind="ValidatingPolicy")):
        generation = generate(spec, exceptions=[other])
        assert generation is not None and generation.result.result == "pass", other
    # Kyverno's CLI hands every GeneratingPolicy every exception of a test.
    generation = generate(spec, exceptions=[exempt(["true"], policy="another")], every_exception=True)
    assert generation is not None and generation.result.result == "skip"


def test_a_namespaced_policy_takes_exceptions_naming_its_kind() -> None:
    spec = {"generate": [{"expression": f"generator.Apply([{cm('a')}])"}]}
    generation = generate(spec, namespace="team", exceptions=[exempt(["true"], kind="NamespacedGeneratingPolicy")])
    assert generation is not None and generation.result.result == "skip"


def test_an_exception_with_allowed_values_only_fills_the_exceptions_variable() -> None:
    spec = {"matchConditions": [{"name": "m", "expression": "size(exceptions.allowedValues) > 0"}],
            "generate": [{"expression": f'generator.Apply("team", exceptions.allowedValues.map(v, '
                                        f'{{{CM_KIND}, "metadata": {{"name": v}}}}))'}]}
    generation = generate(spec, exceptions=[exempt(["true"], allowedValues=["x", "y"])])
    assert generation is not None and generation.result.result == "pass"
    assert names(generation) == [("x", "team"), ("y", "team")]
    # Without it the matchCondition is false: no result.
    assert generate(spec) is None


def test_every_matching_exception_is_named() -> None:
    generation = generate({"generate": [apply("team", cm("a"))]},
                          exceptions=[exempt(["true"], name="e1"), exempt(["true"], name="e2")])
    assert generation is not None
    assert generation.result.message == "rule is skipped due to policy exception: default/e1, default/e2"


def test_the_exception_with_the_highest_priority_decides_the_result() -> None:
    generation = generate({"generate": [apply("team", cm("a"))]},
                          exceptions=[exempt(["true"], name="low"),
                                      exempt(["true"], name="high", reportResult="pass",
                                             labels={"polex.kyverno.io/priority": "10"})])
    assert generation is not None and generation.result.result == "pass"


# --- labels -----------------------------------------------------------------------------------------------------


def deployment_trigger() -> Any:
    return subject_for({"apiVersion": "apps/v1", "kind": "Deployment",
                        "metadata": {"name": "web", "namespace": "team", "uid": "dep-uid"}})


def test_downstream_labels() -> None:
    policy = gpol({"generate": [apply("team", cm("a"))]}, name="copy")
    assert downstream_labels(policy, deployment_trigger()) == {
        MANAGED_BY: "kyverno", POLICY_NAME: "copy", TRIGGER_NAME: "web", TRIGGER_NAMESPACE: "team",
        TRIGGER_UID: "dep-uid", TRIGGER_KIND: "Deployment", TRIGGER_GROUP: "apps", TRIGGER_VERSION: "v1"}
    assert (MANAGED_BY, TRIGGER_GROUP, SOURCE_UID) == ("app.kubernetes.io/managed-by", "generate.kyverno.io/"
                                                       "trigger-group", "generate.kyverno.io/source-uid")


def test_downstream_labels_of_a_clone_and_of_a_core_cluster_scoped_trigger() -> None:
    policy = gpol({"generate": [apply("team", cm("a"))]})
    labels = downstream_labels(policy, subject_for(namespace_object("team-a", uid="ns-uid")), source_uid="src")
    assert labels[SOURCE_UID] == "src"
    assert (labels[TRIGGER_NAMESPACE], labels[TRIGGER_GROUP], labels[TRIGGER_KIND], labels[TRIGGER_UID]) == (
        "", "", "Namespace", "ns-uid")
    assert POLICY_NAMESPACE not in labels


def test_a_namespaced_policy_is_labelled_by_its_bare_name() -> None:
    policy = gpol({"generate": [{"expression": f"generator.Apply([{cm('a')}])"}]}, namespace="team", name="copy")
    labels = downstream_labels(policy, deployment_trigger())
    assert labels[POLICY_NAME] == "copy"
    # vpol also records the namespace (Kyverno does not, and then cannot find these objects again).
    assert labels[POLICY_NAMESPACE] == "team"


def test_labelled_adds_the_labels_over_the_objects_own() -> None:
    policy = gpol({"generate": [apply("team", cm("a"))]})
    original = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "a", "labels": {"keep": "me", MANAGED_BY: "someone-else"}}}
    downstream = Downstream(copy.deepcopy(original), source_uid="src")
    written = labelled(downstream, policy, deployment_trigger())
    assert written["metadata"]["labels"] == {"keep": "me", **downstream_labels(policy, deployment_trigger(), "src")}
    assert written["metadata"]["labels"][MANAGED_BY] == "kyverno"
    assert downstream.object == original  # the downstream itself is left as it was


def test_labelled_gives_an_object_without_metadata_its_labels() -> None:
    policy = gpol({"generate": [apply("team", cm("a"))]})
    written = labelled(Downstream({"apiVersion": "v1", "kind": "ConfigMap"}), policy, deployment_trigger())
    assert written["metadata"]["labels"][POLICY_NAME] == "p"
    assert SOURCE_UID not in written["metadata"]["labels"]


def test_downstream_ref() -> None:
    assert Downstream({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "n"}}).ref == \
        "/v1, Kind=Secret Name=s Namespace=n"
    assert Downstream({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                       "metadata": {"name": "r"}}).ref == "rbac.authorization.k8s.io/v1, Kind=ClusterRole Name=r " \
                                                         "Namespace="
