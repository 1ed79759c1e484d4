"""A policy's generated objects are applied again only when they may differ from what this process applied."""

from __future__ import annotations

from typing import Any

from kubernetes.client.rest import ApiException

from vpol.controller.generated_apply import GeneratedObjects, digest
from vpol.kube.objects import GENERATED_DIGEST_ANNOTATION, Listed


class FakeObjects:
    """The API server's side of an apply: every write gets a new resourceVersion; vpol's apply owns the fields
    (managedFields) and its annotations are kept."""

    def __init__(self) -> None:
        self.version = 10
        self.applies: list[str] = []
        self.refuse = False
        self.stored: dict[str, dict[str, Any]] = {}

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        if self.refuse:
            raise ApiException(status=422, reason="Invalid")
        self.version += 1
        name = obj["metadata"]["name"]
        self.applies.append(name)
        stored = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self.version),
                                      "managedFields": [{"manager": "vpol", "operation": "Apply"}]}}
        self.stored[name] = stored
        return stored

    def listed(self) -> dict[tuple[str, str], Listed]:
        return {(o["kind"], n): Listed.of(o) for n, o in self.stored.items()}

    def touch(self, name: str, entry: dict[str, Any]) -> None:
        """Someone else writes the object: a new resourceVersion and their managedFields entry."""
        self.version += 1
        md = self.stored[name]["metadata"]
        md["resourceVersion"] = str(self.version)
        md["managedFields"] = [*md["managedFields"], entry]


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
    assert api.stored["a"]["metadata"]["annotations"] == {GENERATED_DIGEST_ANNOTATION: digest(vap("a"))}
    assert gen.changed([vap("a"), vap("b")], {})  # written by this apply: not as listed before it
    again: list[str] = []
    listed = api.listed()
    assert gen.apply([vap("a"), vap("b")], listed, again)[0] and again == [] and api.applies == ["a", "b"]
    assert not gen.changed([vap("a"), vap("b")], listed)


def test_any_change_applies_again() -> None:
    api = FakeObjects()
    gen = GeneratedObjects(api)  # type: ignore[arg-type]
    gen.apply([vap("a"), vap("b"), vap("c")], {}, [])
    # "a": a user edited it; "b": the desired object changed; "c": gone (deleted).
    api.touch("a", {"manager": "kubectl-edit", "operation": "Update"})
    listed = api.listed()
    del listed[("ValidatingAdmissionPolicy", "c")]
    applied: list[str] = []
    gen.apply([vap("a"), vap("b", "false"), vap("c")], listed, applied)
    assert applied == ["a", "b", "c"]


def test_a_restarted_process_applies_only_what_someone_else_changed() -> None:
    """A new process knows nothing it applied: the digest recorded in each object and its managedFields say
    whether it is still what vpol applied. The API server's status writes (a subresource) do not count;
    another manager's entry, or an object whose digest differs, is applied."""
    api = FakeObjects()
    GeneratedObjects(api).apply([vap("a"), vap("b"), vap("c"), vap("d")], {}, [])  # type: ignore[arg-type]
    api.touch("a", {"manager": "kube-controller-manager", "operation": "Update", "subresource": "status"})
    api.touch("b", {"manager": "kubectl", "operation": "Apply"})  # a forced apply by someone else
    api.stored["c"]["metadata"]["managedFields"] = [{"manager": "kubectl-edit", "operation": "Update"}]
    api.stored["d"]["metadata"]["annotations"] = {}  # written by a vpol without digests
    fresh = GeneratedObjects(api)  # type: ignore[arg-type]
    applied: list[str] = []
    assert fresh.apply([vap("a"), vap("b"), vap("c"), vap("d")], api.listed(), applied)[0]
    assert applied == ["b", "c", "d"]
    assert fresh.versions[("ValidatingAdmissionPolicy", "a")] == api.stored["a"]["metadata"]["resourceVersion"]
    # and the desired object changing is applied as well
    later: list[str] = []
    GeneratedObjects(api).apply([vap("a", "false")], api.listed(), later)  # type: ignore[arg-type]
    assert later == ["a"]


def test_a_refusal_says_which_object_and_why() -> None:
    api = FakeObjects()
    api.refuse = True
    ok, message = GeneratedObjects(api).apply([vap("a")], {}, [])  # type: ignore[arg-type]
    assert not ok and message.startswith("the API server rejected ValidatingAdmissionPolicy a:")
