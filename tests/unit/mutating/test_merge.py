"""Apply configurations merged as the API server merges them (structured-merge-diff semantics).

The expected orders and errors are the API server's, measured with Kubernetes
1.37's ApplyConfiguration patcher on the same inputs (see docs/mutating-policies.md
for how they were obtained).
"""

from __future__ import annotations

import pytest

from vpol.engine.merge import MergeError, apply_configuration
from vpol.model.discovery import builtin

POD = builtin().schema("", "v1", "Pod")
DEPLOYMENT = builtin().schema("apps", "v1", "Deployment")


def _pod(*names: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"keep": "1"}},
            "spec": {"containers": [{"name": n, "image": n} for n in names]}}


@pytest.mark.parametrize(("patch", "order"), [
    (["z", "b"], ["a", "z", "b", "c"]),
    (["c", "a"], ["b", "c", "a"]),
    (["z"], ["a", "b", "c", "z"]),
    ([], ["a", "b", "c"]),
    (["b", "z", "a"], ["b", "c", "z", "a"]),
    (["a", "z"], ["a", "b", "c", "z"]),
    (["z", "c", "b"], ["a", "z", "c", "b"]),
])
def test_list_map_items_keep_structured_merge_order(patch: list[str], order: list[str]) -> None:
    out = apply_configuration(_pod("a", "b", "c"), {"spec": {"containers": [{"name": n} for n in patch]}}, POD)
    assert [c["name"] for c in out["spec"]["containers"]] == order


def test_existing_item_fields_are_kept_and_new_ones_added() -> None:
    out = apply_configuration(_pod("a"), {"spec": {"containers": [
        {"name": "a", "securityContext": {"runAsNonRoot": True}}]}}, POD)
    assert out["spec"]["containers"] == [{"name": "a", "image": "a", "securityContext": {"runAsNonRoot": True}}]


def test_granular_maps_merge_and_input_is_untouched() -> None:
    pod = _pod("a")
    out = apply_configuration(pod, {"metadata": {"labels": {"new": "2"}}}, POD)
    assert out["metadata"]["labels"] == {"keep": "1", "new": "2"}
    assert pod["metadata"]["labels"] == {"keep": "1"}


@pytest.mark.parametrize(("patch", "path"), [
    ({"spec": {"tolerations": []}}, ".spec.tolerations"),
    ({"spec": {"nodeSelector": {"a": "b"}}}, ".spec.nodeSelector"),
    ({"spec": {"containers": [{"name": "a", "args": ["x"]}]}}, ".spec.containers[0].args"),
])
def test_atomic_values_are_refused(patch: dict, path: str) -> None:
    with pytest.raises(MergeError, match="may not mutate atomic arrays, maps or structs: " + path.replace("[", r"\[")
                       .replace("]", r"\]") + "$"):
        apply_configuration(_pod("a"), patch, POD)


def test_atomic_struct_selector_refused_on_deployments() -> None:
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                  "spec": {"selector": {"matchLabels": {"a": "b"}}}}
    with pytest.raises(MergeError, match=r"\.spec\.selector"):
        apply_configuration(deployment, {"spec": {"selector": {"matchLabels": {"c": "d"}}}}, DEPLOYMENT)


@pytest.mark.parametrize(("patch", "message"), [
    ({"spec": {"foo": 1}}, ".spec.foo: field not declared in schema"),
    ({"spec": {"priority": "high"}}, ".spec.priority: expected numeric (int or float), got string"),
    ({"metadata": {"labels": {"a": None}}}, ".metadata.labels.a: expected string, got null"),
    ({"spec": {"containers": [{"name": "x"}, {"name": "x"}]}}, 'duplicate entries for key [name="x"]'),
])
def test_patches_the_schema_refuses(patch: dict, message: str) -> None:
    with pytest.raises(MergeError) as err:
        apply_configuration(_pod("a"), patch, POD)
    assert message in str(err.value)


def test_without_a_schema_maps_merge_and_lists_are_replaced() -> None:
    out = apply_configuration({"spec": {"list": [1, 2], "map": {"a": 1}}},
                              {"spec": {"list": [3], "map": {"b": 2}}}, None)
    assert out == {"spec": {"list": [3], "map": {"a": 1, "b": 2}}}


def test_duplicates_in_the_live_object_collapse_when_touched() -> None:
    pod = _pod("a")
    pod["spec"]["containers"][0]["env"] = [{"name": "t", "value": "a"}, {"name": "t", "value": "b"},
                                           {"name": "foo", "value": "x"}]
    out = apply_configuration(pod, {"spec": {"containers": [{"name": "a", "env": [{"name": "t", "value": "c"}]}]}},
                              POD)
    assert out["spec"]["containers"][0]["env"] == [{"name": "t", "value": "c"}, {"name": "foo", "value": "x"}]


def test_the_live_object_must_fit_its_schema_but_may_hold_nulls() -> None:
    pod = _pod("a")
    pod["spec"]["containers"][0]["resources"] = {"limits": {"cpu": {}}}
    with pytest.raises(MergeError, match="failed to convert original object to typed object: "
                                         r"\.spec\.containers\[0\]\.resources\.limits\.cpu"):
        apply_configuration(pod, {"metadata": {"labels": {"a": "b"}}}, POD)
    pod = _pod("a")
    pod["spec"]["initContainers"] = None
    out = apply_configuration(pod, {"metadata": {"labels": {"a": "b"}}}, POD)
    assert out["metadata"]["labels"]["a"] == "b"


def test_int_or_string_fields_take_any_value_as_structured_merge_diff_types_them() -> None:
    # IntOrString is an untyped atomic value there (Kyverno's engine mutates such a Service); Quantity is not.
    service = builtin().schema("", "v1", "Service")
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
           "spec": {"ports": [{"port": 80, "targetPort": ["odd"]}]}}
    out = apply_configuration(svc, {"metadata": {"labels": {"a": "b"}}}, service)
    assert out["metadata"]["labels"] == {"a": "b"} and out["spec"]["ports"][0]["targetPort"] == ["odd"]
    pod = _pod("a")
    pod["spec"]["containers"][0]["resources"] = {"limits": {"cpu": ["1"]}}
    with pytest.raises(MergeError, match=r"\.resources\.limits\.cpu"):
        apply_configuration(pod, {"metadata": {"labels": {"a": "b"}}}, POD)


def test_a_configuration_may_carry_the_objects_own_values_with_their_nulls_but_not_write_nulls() -> None:
    # Kyverno's engine accepts a configuration carrying the object's volumes whole, one with an empty field (null),
    # and refuses a null the expression produces: a literal, or a field read on its own (checked with tests/kyverno).
    pod = _pod("a")
    pod["spec"]["volumes"] = [{"name": "n", "nfs": {"server": None, "path": "/x"}}]
    extra = {"name": "e", "emptyDir": {}}
    out = apply_configuration(pod, {"spec": {"volumes": [pod["spec"]["volumes"][0], extra]}}, POD)
    assert [v["name"] for v in out["spec"]["volumes"]] == ["n", "e"]
    for written in ({"spec": {"nodeName": None}},
                    {"spec": {"volumes": [{"name": "n", "nfs": {"server": None, "path": "/y"}}]}}):
        with pytest.raises(MergeError, match="failed to convert patch object to typed object: .spec"):
            apply_configuration(pod, written, POD)
