"""matchConstraints semantics: rules, wildcards, subresources, scope, names, exclusions, selectors."""

from __future__ import annotations

from vpol.engine.match import constraints_match, selector_matches
from vpol.engine.request import ResourceType, Subject
from vpol.model.policy import LabelSelector, MatchResources, Requirement, Rule

PODS = ResourceType("", "v1", "pods", "Pod", True)
DEPLOY = ResourceType("apps", "v1", "deployments", "Deployment", True)
NODES = ResourceType("", "v1", "nodes", "Node", False)
NS = ResourceType("", "v1", "namespaces", "Namespace", False)


def subj(t=PODS, name="x", labels=None, op="CREATE", ns_labels=None, old_labels=None):
    obj = {"metadata": {"name": name, "namespace": "default" if t.namespaced else "", "labels": labels or {}}}
    old = {"metadata": {"name": name, "labels": old_labels}} if old_labels is not None else None
    nso = {"metadata": {"name": "default", "labels": ns_labels or {}}}
    return Subject(type=t, object=obj, old_object=old, operation=op, namespace_object=nso)


def rule(**kw):
    base = dict(api_groups=("",), api_versions=("v1",), resources=("pods",), operations=("CREATE",))
    base.update(kw)
    return Rule(**base)


def test_rule_fields_must_all_match():
    m = MatchResources(resource_rules=(rule(),))
    assert constraints_match(m, subj())
    assert not constraints_match(m, subj(op="UPDATE"))
    assert not constraints_match(m, subj(DEPLOY))


def test_wildcards():
    m = MatchResources(resource_rules=(rule(api_groups=("*",), api_versions=("*",), resources=("*",),
                                            operations=("*",)),))
    assert constraints_match(m, subj(DEPLOY, op="DELETE"))
    # "*" does not cover subresources, "*/*" does
    status = ResourceType("", "v1", "pods", "Pod", True, subresource="status")
    assert not constraints_match(m, subj(status))
    m2 = MatchResources(resource_rules=(rule(resources=("*/*",)),))
    assert constraints_match(m2, subj(status))
    m3 = MatchResources(resource_rules=(rule(resources=("pods/status",)),))
    assert constraints_match(m3, subj(status)) and not constraints_match(m3, subj())


def test_scope_and_resource_names():
    cluster_only = MatchResources(resource_rules=(rule(resources=("*",), scope="Cluster"),))
    assert constraints_match(cluster_only, subj(NODES)) and not constraints_match(cluster_only, subj())
    named = MatchResources(resource_rules=(rule(resource_names=("a",)),))
    assert constraints_match(named, subj(name="a")) and not constraints_match(named, subj(name="b"))


def test_exclusions_win():
    m = MatchResources(resource_rules=(rule(),), exclude_resource_rules=(rule(resource_names=("skip-me",)),))
    assert constraints_match(m, subj(name="keep"))
    assert not constraints_match(m, subj(name="skip-me"))


def test_namespace_selector_uses_namespace_labels_or_the_namespace_itself():
    sel = LabelSelector(match_labels=(("env", "prod"),))
    m = MatchResources(resource_rules=(rule(resources=("pods", "namespaces", "nodes")),), namespace_selector=sel)
    assert constraints_match(m, subj(ns_labels={"env": "prod"}))
    assert not constraints_match(m, subj(ns_labels={"env": "dev"}))
    assert constraints_match(m, subj(NS, labels={"env": "prod"}))
    assert not constraints_match(m, subj(NS, labels={}))
    # cluster-scoped objects other than namespaces ignore the namespace selector
    assert constraints_match(m, subj(NODES))



def test_a_namespace_nobody_described_has_only_the_api_servers_name_label():
    unknown = Subject(type=PODS, object={"metadata": {"name": "x", "namespace": "team-a"}}, namespace_object=None)
    by_name = LabelSelector(match_labels=(("kubernetes.io/metadata.name", "team-a"),))
    assert constraints_match(MatchResources(resource_rules=(rule(),), namespace_selector=by_name), unknown)
    by_env = LabelSelector(match_labels=(("env", "prod"),))
    assert not constraints_match(MatchResources(resource_rules=(rule(),), namespace_selector=by_env), unknown)


def test_object_selector_matches_object_or_old_object():
    sel = LabelSelector(match_expressions=(Requirement("app", "In", ("web",)),))
    m = MatchResources(resource_rules=(rule(operations=("*",)),), object_selector=sel)
    assert constraints_match(m, subj(labels={"app": "web"}))
    assert not constraints_match(m, subj(labels={"app": "db"}))
    assert constraints_match(m, subj(labels={}, old_labels={"app": "web"}, op="UPDATE"))


def test_selector_operators():
    labels = {"a": "1", "b": "2"}
    assert selector_matches(LabelSelector(match_expressions=(Requirement("a", "Exists"),)), labels)
    assert not selector_matches(LabelSelector(match_expressions=(Requirement("c", "Exists"),)), labels)
    assert selector_matches(LabelSelector(match_expressions=(Requirement("c", "DoesNotExist"),)), labels)
    assert selector_matches(LabelSelector(match_expressions=(Requirement("a", "NotIn", ("2",)),)), labels)
    assert not selector_matches(LabelSelector(match_expressions=(Requirement("a", "NotIn", ("1",)),)), labels)
    assert selector_matches(None, {}) and selector_matches(LabelSelector(), {})
