"""A policy's generated objects are applied again only when they may differ from what this process applied."""

from __future__ import annotations

from typing import Any

from kubernetes.client.rest import ApiException

from vpol.controller.generated_apply import GeneratedObjects


class FakeObjects:
    """The API server's side of an apply: every write gets a new resourceVersion."""

    def __init__(self) -> None:
        self.version = 10
        self.applies: list[str] = []
        self.refuse = False

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        if self.refuse:
            raise ApiException(status=422, reason="Invalid")
        self.version += 1
        self.applies.append(obj["metadata"]["name"])
        return {"metadata": {"name": obj["metadata"]["name"], "resourceVersion": str(self.version)}}


def vap(name: str, expression: str = "true") -> dict[str, Any]:
    return {"kind": "ValidatingAdmissionPolicy", "metadata": {"name": name},
            "spec": {"validations": [{"expression": expression}]}}


def test_unchanged_objects_are_not_applied_again() -> None:
    api = FakeObjects()
    gen = GeneratedObjects(api)  # type: ignore[arg-type]
    applied: list[str] = []
    assert gen.apply([vap("a"), vap("b")], {}, applied) == (True, "generated a, b")
    assert applied == ["a", "b"] and gen.versions == {("ValidatingAdmissionPolicy", "a"): "11",
                                                       ("ValidatingAdmissionPolicy", "b"): "12"}
    listed = dict(gen.versions)
    again: list[str] = []
    assert gen.apply([vap("a"), vap("b")], listed, again)[0] and again == [] and api.applies == ["a", "b"]


def test_any_change_applies_again() -> None:
    api = FakeObjects()
    gen = GeneratedObjects(api)  # type: ignore[arg-type]
    gen.apply([vap("a"), vap("b"), vap("c")], {}, [])
    listed = dict(gen.versions)
    # "a": someone (the API server's status writer, a user) wrote it since; "b": the desired object changed;
    # "c": gone (deleted).
    listed[("ValidatingAdmissionPolicy", "a")] = "99"
    del listed[("ValidatingAdmissionPolicy", "c")]
    applied: list[str] = []
    gen.apply([vap("a"), vap("b", "false"), vap("c")], listed, applied)
    assert applied == ["a", "b", "c"]
    # A new process knows nothing it applied: everything is applied once.
    fresh = GeneratedObjects(api)  # type: ignore[arg-type]
    first: list[str] = []
    fresh.apply([vap("a")], dict(gen.versions), first)
    assert first == ["a"]


def test_a_refusal_says_which_object_and_why() -> None:
    api = FakeObjects()
    api.refuse = True
    ok, message = GeneratedObjects(api).apply([vap("a")], {}, [])  # type: ignore[arg-type]
    assert not ok and message.startswith("the API server rejected ValidatingAdmissionPolicy a:")
