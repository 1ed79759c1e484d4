"""What globalContext.Get answers: Kyverno's store semantics (cluster), its CLI's mocks, and Go's JMESPath numbers.

Expected values come from Kyverno 1.19's code paths named in vpol.cel.global_context and
vpol.cli.global_context (the mocked entries are also compared with Kyverno's own code by the differential
test, tests/differential/suites/global-context).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.unit.cel.kyverno.conftest import error, value
from vpol.cel import go_jmespath
from vpol.cel.global_context import (
    API_CALL,
    FAILED,
    LOADING,
    READY,
    RESOURCE,
    EntryChange,
    EntryState,
    GlobalContextError,
    GlobalContextView,
    api_call_state,
)
from vpol.cel.declare import Checked
from vpol.cel.offline_backend import OfflineBackend
from vpol.cli.global_context import load_mock_entries, resolve_mock_entry, validate_mock_entries
from vpol.engine.global_context import GlobalContextBackend, GlobalContextStore
from vpol.model.problems import InputError


def deploy(name: str, namespace: str = "default", replicas: int = 1) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas}}


def resource_view(*objects: dict[str, Any], projections: tuple[tuple[str, str], ...] = ()) -> GlobalContextView:
    view = GlobalContextView()
    view.apply({"deps": EntryChange(EntryState("deps", RESOURCE, READY, projections=projections), reset=True,
                                    objects={f"{o['metadata']['namespace']}/{o['metadata']['name']}": o
                                             for o in objects})})
    return view


# --- the cluster's semantics ---------------------------------------------------------------------------------


def test_unknown_entry_is_null() -> None:
    assert GlobalContextView().get("nothing", "") is None
    assert GlobalContextView().get("nothing", "p") is None


def test_resource_entry_lists_every_object_sorted_and_projects() -> None:
    view = resource_view(deploy("b", "y"), deploy("a", "y"), deploy("z", "x", 3),
                         projections=(("names", "[].metadata.name"), ("count", "length(@)"), ("bad", "abs(@)")))
    assert [o["metadata"]["name"] for o in view.get("deps", "")] == ["z", "a", "b"]
    assert view.get("deps", "names") == ["z", "a", "b"]
    assert view.get("deps", "count") == 3.0 and isinstance(view.get("deps", "count"), float)
    # A projection that cannot be evaluated was never computed: not found, as in Kyverno's k8sresource entry.
    with pytest.raises(GlobalContextError, match='^projection "bad" not found$'):
        view.get("deps", "bad")
    with pytest.raises(GlobalContextError, match='^projection "other" not found$'):
        view.get("deps", "other")


def test_resource_entry_follows_changes_and_keeps_last_good_projection() -> None:
    view = resource_view(deploy("a"), projections=(("first", "[0].spec.replicas"), ("sum", "sum([].spec.replicas)")))
    assert view.get("deps", "first") == 1
    state = EntryState("deps", RESOURCE, READY, projections=(("first", "[0].spec.replicas"),
                                                              ("sum", "sum([].spec.replicas)")))
    view.apply({"deps": EntryChange(state, objects={"default/0": deploy("0", replicas=7)})})
    assert view.get("deps", "first") == 7
    view.apply({"deps": EntryChange(state, removed=("default/0",))})
    assert view.get("deps", "first") == 1
    # sum() over int64 replicas is an invalid type in go-jmespath: never computed, so not found
    with pytest.raises(GlobalContextError, match="not found"):
        view.get("deps", "sum")
    view.apply({"deps": EntryChange(None)})
    assert view.get("deps", "") is None


def test_loading_and_failed_entries_are_errors_with_the_reason() -> None:
    view = GlobalContextView()
    view.apply({"l": EntryChange(EntryState("l", RESOURCE, LOADING, error="listing deployments.apps/v1")),
                "f": EntryChange(EntryState("f", API_CALL, FAILED, error="failed to GET resource with raw url: /x: no"))})
    with pytest.raises(GlobalContextError, match='no data available: global context entry "l" is not loaded yet'):
        view.get("l", "")
    with pytest.raises(GlobalContextError, match="^failed to GET resource with raw url: /x: no$"):
        view.get("f", "anything")


def test_api_call_entry() -> None:
    data = go_jmespath.go_json({"items": [{"n": "a"}, {"n": "b"}], "missing": None})
    state = api_call_state("c", data, [("names", "items[].n"), ("none", "missing")])
    view = GlobalContextView()
    view.apply({"c": EntryChange(state)})
    assert view.get("c", "") == data
    assert view.get("c", "names") == ["a", "b"]
    # Kyverno's externalapi entry: a null value, or an unknown projection, is "no data available"
    for projection in ("none", "unknown"):
        with pytest.raises(GlobalContextError, match="^no data available$"):
            view.get("c", projection)
    failing = api_call_state("c", data, [("bad", "abs(items)")])
    assert failing.status == FAILED and failing.error.startswith("In function abs(), invalid type")
    # go-jmespath: a missing field at the top of a projection is an error, which the whole entry then answers
    missing = api_call_state("c", data, [("m", "nothing.here")])
    assert missing.status == FAILED and missing.error == 'Unknown key "nothing" in path'


def test_numbers_of_api_answers_are_go_float64s() -> None:
    state = api_call_state("c", go_jmespath.go_json({"count": 3}), [])
    view = GlobalContextView()
    view.apply({"c": EntryChange(state)})
    backend = GlobalContextBackend(OfflineBackend(), view)
    assert value('globalContext.Get("c", "").count == 3', backend=backend) is True
    # double + int has no overload in CEL: the policy author must write 1.0, as with Kyverno
    assert "No matching overloads" in error('globalContext.Get("c", "").count + 1', backend=backend)
    assert value('globalContext.Get("c", "").count + 1.0', backend=backend) == 4.0


def test_library_errors_name_the_call_and_kyvernos_reason() -> None:
    backend = GlobalContextBackend(OfflineBackend(), resource_view(deploy("a")))
    message = error('globalContext.Get("deps", "x")', backend=backend)
    assert 'globalContext.Get("deps", "x"): failed to get global reference: projection "x" not found' in message
    assert value('globalContext.get("deps", "")[0].metadata.name', backend=backend) == "a"
    assert value('globalContext.Get("nope", "") == null', backend=backend) is True


# --- Go's JMESPath numbers ------------------------------------------------------------------------------------


@pytest.mark.parametrize("expression,data,expected", [
    ("length(@)", [1, 2], 2.0),
    ("[?n > `1`].n", [{"n": 1}, {"n": 2}], []),  # int64s are not ordered by go-jmespath
    ("[?n > `1`].n", [{"n": 1.0}, {"n": 2.0}], [2.0]),
    ("[?n == `2`].n", [{"n": 2}], []),  # int64(2) is not float64(2) to reflect.DeepEqual
    ("[?n == `2`].n", [{"n": 2.0}], [2.0]),
    ("contains(@, `1`)", [1.0], True),
    ("contains(@, `1`)", [1], False),
    ("to_number('2')", None, 2.0),
    ("max(@)", [1.0, 3.0], 3.0),
    ("[?t == `true`] | length(@)", [{"t": True}, {"t": 1.0}], 1.0),
])
def test_go_number_model(expression: str, data: Any, expected: Any) -> None:
    result = go_jmespath.search(expression, data)
    assert result == expected and type(result) is type(expected)


@pytest.mark.parametrize("expression,expected", [
    ("items[].a", [1.0]), ("items[?a].a", [1.0]), ("missing || n", 2.0), ("[missing, n]", [None, 2.0]),
    ("{x: missing}", {"x": None}), ("!missing", True), ("missing | n", None),
])
def test_missing_fields_read_as_null_inside_expressions(expression: str, expected: Any) -> None:
    assert go_jmespath.search(expression, {"items": [{"a": 1.0}, {"b": 2.0}], "n": 2.0}) == expected


@pytest.mark.parametrize("expression,key", [("missing", "missing"), ("a.b", "a"), ("items[0].b", "b"),
                                            ("n && missing", "missing")])
def test_missing_fields_at_the_top_are_errors(expression: str, key: str) -> None:
    with pytest.raises(go_jmespath.NotFound, match=f'^Unknown key "{key}" in path$'):
        go_jmespath.search(expression, {"items": [{"a": 1.0}], "n": 2.0})


def test_go_number_model_refuses_ints_where_a_number_is_required() -> None:
    with pytest.raises(go_jmespath.JMESPathError):
        go_jmespath.search("abs(@)", 3)


# --- the store and what workers are sent ---------------------------------------------------------------------


def test_store_sends_only_what_changed() -> None:
    store = GlobalContextStore()
    state = EntryState("deps", RESOURCE, READY)
    store.set_state(state)
    store.replace_objects("deps", {"default/a": deploy("a"), "default/b": deploy("b")})
    v1, first = store.changes_since(-1)
    assert first["deps"].reset and set(first["deps"].objects) == {"default/a", "default/b"}
    store.upsert("deps", deploy("c"))
    store.remove("deps", "default/a")
    v2, delta = store.changes_since(v1)
    assert not delta["deps"].reset and set(delta["deps"].objects) == {"default/c"}
    assert delta["deps"].removed == ("default/a",)
    assert store.changes_since(v2) == (v2, {})
    view = GlobalContextView()
    view.apply(first)
    view.apply(delta)
    assert [o["metadata"]["name"] for o in view.get("deps", "")] == ["b", "c"]
    assert [o["metadata"]["name"] for o in store.view().get("deps", "")] == ["b", "c"]
    store.drop("deps")
    _v3, gone = store.changes_since(v2)
    assert gone == {"deps": EntryChange(None)}


def test_store_resets_a_consumer_behind_its_forgotten_removals(monkeypatch: pytest.MonkeyPatch) -> None:
    from vpol.engine import global_context

    monkeypatch.setattr(global_context, "MAX_TOMBSTONES", 2)
    store = GlobalContextStore()
    store.set_state(EntryState("deps", RESOURCE, READY))
    store.replace_objects("deps", {f"default/{n}": deploy(n) for n in "abcd"})
    v, _ = store.changes_since(-1)
    for n in "abc":
        store.remove("deps", f"default/{n}")
    _v, changes = store.changes_since(v)
    assert changes["deps"].reset and set(changes["deps"].objects) == {"default/d"}


def test_backend_wrapper_delegates_everything_else() -> None:
    inner = OfflineBackend(resources=[deploy("a")], global_context={"m": {"k": 1}})
    wrapped = GlobalContextBackend(inner, resource_view(deploy("x")))
    assert wrapped.get_resource("apps/v1", "deployments", "default", "a")["metadata"]["name"] == "a"
    served = wrapped.global_context("deps", "")
    assert isinstance(served, Checked)  # made of CEL values once, on arrival: not walked again per call
    assert served.value[0]["metadata"]["name"] == "x"
    assert wrapped.global_context("m", "") is None  # the view answers, not the inner backend


def test_data_cel_cannot_take_as_it_is_is_still_checked_per_call() -> None:
    huge = deploy("big")
    huge["spec"]["replicas"] = 2**70
    view = resource_view(huge)
    assert not isinstance(view.get_checked("deps", ""), Checked)
    backend = GlobalContextBackend(OfflineBackend(), view)
    assert "does not fit in 64 bits" in error('globalContext.Get("deps", "")', backend=backend)
    state = api_call_state("c", {"n": 2**70}, [])
    view.apply({"c": EntryChange(state)})
    assert not isinstance(view.get_checked("c", ""), Checked)


# --- Kyverno CLI's mocked entries ---------------------------------------------------------------------------


def test_mocked_data_fieldpath_and_projections() -> None:
    entry = {"name": "cfg", "data": {"teams": {"a": {"size": 3}, "b": {"size": 5}}}, "fieldPath": "teams",
             "projections": [{"name": "sizes", "path": "*.size"}, {"name": "a", "path": "a"}]}
    assert resolve_mock_entry(entry) == {"sizes": [3.0, 5.0], "a": {"size": 3.0}}
    assert resolve_mock_entry({"name": "plain", "data": {"x": 1}}) == {"x": 1.0}
    listed = resolve_mock_entry({"name": "r", "projections": [{"name": "n", "path": "[].metadata.name"}]},
                                resources=[deploy("a"), deploy("b")])
    assert listed == {"n": ["a", "b"]}
    assert resolve_mock_entry({"name": "r"}, resources=[deploy("a")])[0]["spec"]["replicas"] == 1.0


def test_mocked_entries_are_answered_as_kyvernos_cli_does() -> None:
    backend = OfflineBackend(global_context={"cfg": {"sizes": [3.0]}, "list": [1.0]})
    assert value('globalContext.Get("cfg", "sizes")', backend=backend) == [3.0]
    assert value('globalContext.Get("list", "")', backend=backend) == [1.0]
    assert 'projection "x" not found in global context entry "cfg"' in error('globalContext.Get("cfg", "x")',
                                                                              backend=backend)
    assert "stored value is not an object" in error('globalContext.Get("list", "x")', backend=backend)
    assert value('globalContext.Get("other", "x") == null', backend=backend) is True


@pytest.mark.parametrize("entries,message", [
    ([{"data": {}}], "globalContextEntries: name is required"),
    ([{"name": "a", "data": {"x": 1}}, {"name": "a", "data": {"x": 1}}], 'globalContextEntries: duplicate name "a"'),
    ([{"name": "a", "data": {"x": 1}, "projections": [{"path": "x"}]}],
     'globalContextEntries entry "a": projection name is required'),
    ([{"name": "a", "data": {"x": 1}, "projections": [{"name": "p"}]}],
     'globalContextEntries entry "a" projection "p": path is required'),
    ([{"name": "a", "data": {"x": 1}, "resources": []}],
     'globalContextEntries entry "a": data, resources, and resourceFiles are mutually exclusive'),
    ([{"name": "a"}], 'globalContextEntries entry "a": one of data, resources, or resourceFiles is required'),
    ([{"name": "a", "data": [1]}], 'globalContextEntries entry "a": data must be a JSON object'),
    ([{"name": "a", "resources": ["x"]}],
     'globalContextEntries entry "a" resources[0]: must be a JSON object (Kubernetes resource manifest)'),
    ([{"name": "a", "resourceFiles": ["/etc/x.yaml"]}],
     'globalContextEntries entry "a" resourceFiles[0]: file path must not be absolute'),
    ([{"name": "a", "resourceFiles": ["../x.yaml"]}],
     'globalContextEntries entry "a" resourceFiles[0]: file path must not escape the test directory'),
])
def test_mocked_entries_are_validated_with_kyvernos_messages(entries: Any, message: str) -> None:
    with pytest.raises(InputError) as caught:
        validate_mock_entries(entries, "kyverno-test.yaml")
    assert caught.value.problem.message == message
    assert caught.value.problem.file == "kyverno-test.yaml"


def test_resource_files_are_read_relative_to_the_test(tmp_path: Path) -> None:
    (tmp_path / "objs").mkdir()
    (tmp_path / "objs" / "d.yaml").write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a}\n---\n---\n"
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: b}\n")
    data = load_mock_entries([{"name": "d", "resourceFiles": ["objs/d.yaml"],
                               "projections": [{"name": "n", "path": "[].metadata.name"}]}], tmp_path, "t.yaml")
    assert data == {"d": {"n": ["a", "b"]}}
    with pytest.raises(InputError, match="failed to load globalContextEntries resource files"):
        load_mock_entries([{"name": "d", "resourceFiles": ["objs/none.yaml"]}], tmp_path, "t.yaml")
    with pytest.raises(InputError, match='globalContextEntries "d": data is required when projections are set|'
                                         "one of data"):
        load_mock_entries([{"name": "d", "projections": [{"name": "n", "path": "x"}]}], tmp_path, "t.yaml")
