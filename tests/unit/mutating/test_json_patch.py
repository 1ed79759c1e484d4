"""JSON patches with the API server's (json-patch v4) rules, where they differ from RFC 6902."""

from __future__ import annotations

import pytest

from vpol.engine.json_patch import PatchError, PatchTestFailed, apply_patch

DOC = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}, {"name": "b"}]}}


def test_replace_of_a_missing_member_adds_it() -> None:
    out = apply_patch(DOC, [{"op": "replace", "path": "/metadata/labels", "value": {"a": "b"}}])
    assert out["metadata"]["labels"] == {"a": "b"}
    assert "labels" not in DOC["metadata"]


@pytest.mark.parametrize(("path", "names"), [
    ("/spec/containers/-", ["a", "b", "c"]),
    ("/spec/containers/2", ["a", "b", "c"]),
    ("/spec/containers/0", ["c", "a", "b"]),
    ("/spec/containers/-1", ["a", "b", "c"]),
    ("/spec/containers/-2", ["a", "c", "b"]),
])
def test_add_to_arrays(path: str, names: list[str]) -> None:
    out = apply_patch(DOC, [{"op": "add", "path": path, "value": {"name": "c"}}])
    assert [c["name"] for c in out["spec"]["containers"]] == names


def test_negative_index_removes_from_the_end() -> None:
    out = apply_patch(DOC, [{"op": "remove", "path": "/spec/containers/-1"}])
    assert out["spec"]["containers"] == [{"name": "a"}]


def test_escaped_tokens() -> None:
    out = apply_patch({"metadata": {"annotations": {}}},
                      [{"op": "add", "path": "/metadata/annotations/example.com~1a~0b", "value": "x"}])
    assert out["metadata"]["annotations"] == {"example.com/a~b": "x"}


@pytest.mark.parametrize(("op", "message"), [
    ({"op": "add", "path": "/metadata/labels/a", "value": "x"}, "doc is missing path"),
    ({"op": "remove", "path": "/metadata/labels"}, "Unable to remove nonexistent key: labels"),
    ({"op": "add", "path": "/spec/containers/5", "value": 1}, "invalid index"),
    ({"op": "replace", "path": "/spec/containers/-", "value": 1}, "doc is missing key"),
    ({"op": "frobnicate", "path": "/a"}, "Unexpected kind: frobnicate"),
])
def test_errors(op: dict, message: str) -> None:
    with pytest.raises(PatchError, match=message):
        apply_patch(DOC, [op])


def test_failed_test_is_its_own_outcome_and_missing_member_tests_as_null() -> None:
    with pytest.raises(PatchTestFailed):
        apply_patch(DOC, [{"op": "test", "path": "/metadata/name", "value": "q"}])
    apply_patch(DOC, [{"op": "test", "path": "/metadata/labels", "value": None}])
    apply_patch(DOC, [{"op": "test", "path": "/spec/containers/0", "value": {"name": "a"}}])


def test_move_and_copy() -> None:
    out = apply_patch(DOC, [{"op": "copy", "from": "/metadata/name", "path": "/metadata/generateName"},
                            {"op": "move", "from": "/spec/containers/0", "path": "/spec/containers/-"}])
    assert out["metadata"]["generateName"] == "p"
    assert [c["name"] for c in out["spec"]["containers"]] == ["b", "a"]
