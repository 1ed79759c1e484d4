"""The conformance suites that use Kyverno's I/O libraries, evaluated directly.

For each suite the context / cluster-resource files feed an OfflineBackend,
and the policy's variables and validations are evaluated in order on every
resource; the outcome must be the suite's expected result. This is not the
CLI test runner (no matching, autogen or reporting): it checks that the
library functions and the backend give these policies what they need.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.cel.kyverno.conftest import run_with
from vpol.cel.offline_backend import OfflineBackend

SUITES = Path(__file__).resolve().parents[4].parent / "shared" / "conformance" / "kyverno-cli"


@pytest.fixture(autouse=True)
def _corpus_present() -> None:
    """The shared corpus must be there under CI (a failure, never a skip); elsewhere its absence skips."""
    if not SUITES.is_dir():
        if os.environ.get("CI") == "true":
            pytest.fail(f"conformance corpus missing: {SUITES}")
        pytest.skip(f"conformance corpus not found at {SUITES}")


def _docs(path: Path) -> list[Any]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def _backend(suite: Path, test: dict[str, Any]) -> OfflineBackend:
    documents: list[Any] = []
    if test.get("context"):
        documents += _docs(suite / test["context"])
    for name in test.get("clusterResources") or []:
        for doc in _docs(suite / name):
            documents.append(doc)
            # ClusterResource spec.crds are paths, read here (the backend does no I/O)
            for crd in (doc.get("spec") or {}).get("crds") or []:
                if isinstance(crd, str):
                    documents += _docs(suite / crd)
    return OfflineBackend.from_documents(documents, http_responses=test.get("apiCallResponses") or [])


def _namespaces(suite: Path, test: dict[str, Any]) -> dict[str, Any]:
    if not test.get("variables"):
        return {}
    values = _docs(suite / test["variables"])[0]
    return {ns["metadata"]["name"]: ns for ns in values.get("namespaces") or []}


def _evaluate(policy: dict[str, Any], obj: dict[str, Any], namespace_object: Any, backend: OfflineBackend) -> str:
    spec = policy["spec"]
    request = {"kind": {"kind": obj["kind"]}, "namespace": obj["metadata"].get("namespace", ""), "operation": "CREATE"}
    variables: dict[str, Any] = {}

    def evaluate(expr: str) -> Any:
        outcome = run_with(expr, obj=obj, backend=backend, variables=variables,
                                    request=request, namespace_object=namespace_object)
        if outcome.error is not None:
            raise AssertionError(f"{expr!r}: {outcome.error}")
        return outcome.value

    for variable in spec.get("variables") or []:
        variables[variable["name"]] = evaluate(variable["expression"])
    for validation in spec.get("validations") or []:
        if evaluate(validation["expression"]) is not True:
            return "fail"
    return "pass"


@pytest.mark.parametrize(
    "name",
    ["allowed-base-images", "test-context-apicall-vpol", "test-context-configmap-vpol", "restrict-image-registries",
     "policy-with-cm", "cel-http-get-mock", "cel-http-post-mock", "cel-http-post-mock-deny"],
)
def test_suite(name: str) -> None:
    suite = SUITES / name
    test = _docs(suite / "kyverno-test.yaml")[0]
    backend = _backend(suite, test)
    namespaces = _namespaces(suite, test)
    policy = next(d for f in test["policies"] for d in _docs(suite / f) if d.get("kind") == "ValidatingPolicy")
    resources = [d for f in test["resources"] for d in _docs(suite / f)]
    checked = 0
    for expected in test["results"]:
        for ref in expected["resources"]:
            ns_name, _, res_name = ref.rpartition("/")
            obj = next(r for r in resources if r["metadata"]["name"] == res_name and r["kind"] == expected["kind"]
                       and (not ns_name or r["metadata"].get("namespace") == ns_name))
            obj = {**obj, "metadata": {"namespace": "default", **obj["metadata"]}}
            namespace = obj["metadata"]["namespace"]
            namespace_object = namespaces.get(namespace, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
            assert _evaluate(policy, obj, namespace_object, backend) == expected["result"], ref
            checked += 1
    assert checked
