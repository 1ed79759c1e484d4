"""What the scanner does with a GeneratingPolicy that goes: deleted, its downstreams go as its settings say (the
"generating-removed" work); made invalid, it only stops, and what it generated stays (bad input never destroys what
was written), until it is deleted."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from vpol.controller.scanner import Scanner
from vpol.desired.report import PolicyMeta, ReportEntry, ResourceRef
from vpol.controller.queue_keys import PolicyKey
from vpol.policies.generating.model import parse_generating_policy


def _policy() -> Any:
    policy, problems = parse_generating_policy({
        "apiVersion": "policies.kyverno.io/v1", "kind": "GeneratingPolicy", "metadata": {"name": "p"},
        "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                         "operations": ["CREATE"], "resources": ["namespaces"]}]},
                 "evaluation": {"synchronize": {"enabled": True}},
                 "generate": [{"expression": "generator.Apply(object.metadata.name, [])"}]}})
    assert policy is not None, problems
    return policy


def _queued(scanner: Scanner) -> list[tuple[Any, ...]]:
    return scanner._events.queued()


def test_a_deleted_policy_is_removed_with_its_downstreams() -> None:
    scanner = Scanner(client.ApiClient(), backend=None, discovery=None)  # type: ignore[arg-type]
    policy = _policy()
    scanner.hand_over(PolicyKey.of("GeneratingPolicy", "p"), policy)
    assert _queued(scanner) == [("generating", "p")]
    scanner.hand_over(PolicyKey.of("GeneratingPolicy", "p"), policy)  # the same spec again: nothing to do
    assert _queued(scanner) == []
    scanner.hand_over(PolicyKey.of("GeneratingPolicy", "p"), None, gone=True)
    assert _queued(scanner) == [("generating-removed", policy)]


def test_an_invalid_policy_only_stops_until_it_is_deleted() -> None:
    scanner = Scanner(client.ApiClient(), backend=None, discovery=None)  # type: ignore[arg-type]
    policy = _policy()
    scanner.hand_over(PolicyKey.of("GeneratingPolicy", "p"), policy)
    _queued(scanner)
    scanner.hand_over(PolicyKey.of("GeneratingPolicy", "p"), None)  # invalid now
    assert _queued(scanner) == [] and scanner.generation.get("p") is None
    scanner.hand_over(PolicyKey.of("GeneratingPolicy", "p"), None, gone=True)  # then deleted: its downstreams go as it said
    assert _queued(scanner) == [("generating-removed", policy)]


def test_an_invalid_policy_made_valid_again_generates_again() -> None:
    scanner = Scanner(client.ApiClient(), backend=None, discovery=None)  # type: ignore[arg-type]
    policy = _policy()
    scanner.hand_over(PolicyKey.of("GeneratingPolicy", "p"), policy)
    scanner.hand_over(PolicyKey.of("GeneratingPolicy", "p"), None)
    _queued(scanner)
    scanner.hand_over(PolicyKey.of("GeneratingPolicy", "p"), policy)
    assert _queued(scanner) == [("generating", "p")]
    scanner.hand_over(PolicyKey.of("GeneratingPolicy", "p"), None, gone=True)
    assert _queued(scanner) == [("generating-removed", policy)]


def test_the_first_scan_waits_for_every_policy_whose_results_are_in_the_reports(monkeypatch: Any) -> None:
    """MutatingPolicies', GeneratingPolicies' and ImageValidatingPolicies' results are in the reports too: a first scan before they are known would take those results for stale
    and rewrite every such report (bench/generate.py found it: a restarted operator, nothing changed, deleted the
    ClusterPolicyReport of every generated-for Namespace and wrote each again)."""
    import vpol.controller.scanner as scanner_module

    def body(kind: str, name: str, namespace: str = "") -> dict[str, Any]:
        md = {"name": name, **({"namespace": namespace} if namespace else {})}
        return {"apiVersion": "policies.kyverno.io/v1", "kind": kind, "metadata": md}

    listed = scanner_module.StartupPolicies({"MutatingPolicy": [body("MutatingPolicy", "m")],
                                             "GeneratingPolicy": [body("GeneratingPolicy", "p"),
                                                                  body("NamespacedGeneratingPolicy", "q", "team-a")],
                                             "ImageValidatingPolicy": [body("ImageValidatingPolicy", "i")],
                                             "DeletingPolicy": [body("DeletingPolicy", "d")]})

    class NoExceptions:
        def __init__(self, _api: Any) -> None:
            pass

        def policy_exceptions(self) -> list[Any]:
            return []

    monkeypatch.setattr(scanner_module.StartupPolicies, "read", classmethod(lambda cls, objects: listed))
    monkeypatch.setattr(scanner_module, "Objects", NoExceptions)
    scanner = Scanner(client.ApiClient(), backend=None, discovery=None)  # type: ignore[arg-type]
    scanner._prime()
    assert not scanner.startup.is_open()
    scanner.hand_over(PolicyKey.of("MutatingPolicy", "m"), None)  # one without mutateExisting is seen all the same
    scanner.hand_over(PolicyKey.of("GeneratingPolicy", "p"), _policy())
    assert not scanner.startup.is_open()
    scanner.hand_over(PolicyKey.of("GeneratingPolicy", "team-a/q"), None)  # an invalid one too
    assert not scanner.startup.is_open()  # an ImageValidatingPolicy's results are in the reports as well
    scanner.hand_over(PolicyKey.of("ImageValidatingPolicy", "i"), None)
    assert scanner.startup.is_open()  # not waiting for the DeletingPolicy, which reports nothing


def _writing_scanner(monkeypatch: Any, *policies: str) -> tuple[Scanner, list[Any]]:
    """A scanner whose report writes are recorded (in the order they are queued), not sent; ``policies`` known."""
    scanner = Scanner(client.ApiClient(), backend=None, discovery=None)  # type: ignore[arg-type]
    submitted: list[Any] = []

    class Done:
        def result(self) -> bool:
            return True  # written

    def submit(_fn: Any, write: Any) -> Done:
        submitted.append(write)
        return Done()

    monkeypatch.setattr(scanner.store._writers, "submit", submit)
    monkeypatch.setattr(scanner.store, "_meta", lambda: {p: PolicyMeta() for p in policies})
    return scanner, submitted


def test_results_of_one_report_before_a_drain_are_one_write(monkeypatch: Any) -> None:
    """Three GeneratingPolicies selecting one new Namespace give its report one write (a create, with the three
    results), not a create and two updates."""
    scanner, submitted = _writing_scanner(monkeypatch, "a", "b", "c")
    ns = ResourceRef("v1", "Namespace", "team", "", "uid-team")
    other = ResourceRef("v1", "Namespace", "other", "", "uid-other")
    for policy in ("a", "b", "c"):
        scanner.store.store_one(ns, policy, ReportEntry(policy, "pass", "ok", (), 1))
    scanner.store.store_one(other, "a", ReportEntry("a", "pass", "ok", (), 1))
    assert submitted == []  # held until the drain
    scanner.store.drain()
    assert [(w.ref.uid, [e.policy for e in w.entries], w.create) for w in submitted] == [
        ("uid-team", ["a", "b", "c"], True), ("uid-other", ["a"], True)]


def test_a_newer_write_of_a_held_report_replaces_it(monkeypatch: Any) -> None:
    """A full evaluation's write of a report whose generation result is still held goes out alone, as a create (the
    held one, written after it, would put the older results back)."""
    scanner, submitted = _writing_scanner(monkeypatch, "gen", "val")
    ns = ResourceRef("v1", "Namespace", "team", "", "uid-team")
    scanner.store.store_one(ns, "gen", ReportEntry("gen", "pass", "ok", (), 1))
    newer = scanner.store.store(ns, [ReportEntry("val", "fail", "bad", (), 2)], ["val"])
    assert newer is not None and not newer.create
    scanner.store.flush([newer])
    scanner.store.drain()
    assert [(w.ref.uid, [e.policy for e in w.entries], w.create) for w in submitted] == [
        ("uid-team", ["gen", "val"], True)]
