"""Helpers for the CRD tests: loading the CRDs, walking their schemas, evaluating their CEL rules."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml
import pytest
from cel_expr_python import cel

ROOT = Path(__file__).resolve().parents[3]
CRDS = ROOT / "crds"
SEEDS = Path("/work/shared/seeds")


def load_crd(name: str) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all((CRDS / name).read_text()) if d]
    assert len(docs) == 1, f"{name} holds {len(docs)} documents"
    return docs[0]


@pytest.fixture(scope="session")
def vpol_crd() -> dict[str, Any]:
    return load_crd("validatingpolicies.yaml")


@pytest.fixture(scope="session")
def polex_crd() -> dict[str, Any]:
    return load_crd("policyexceptions.yaml")


def version_schema(crd: dict[str, Any], version: str = "v1") -> dict[str, Any]:
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            return v["schema"]["openAPIV3Schema"]
    raise KeyError(version)


def node(schema: dict[str, Any], path: str) -> dict[str, Any]:
    """The schema node at a dotted path; ``[]`` steps into array items (``spec.variables[].name``)."""
    current = schema
    for part in path.split("."):
        many = part.endswith("[]")
        current = current["properties"][part.removesuffix("[]")]
        if many:
            current = current["items"]
    return current


def walk(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node with its path."""
    yield path, schema
    for name, sub in (schema.get("properties") or {}).items():
        yield from walk(sub, f"{path}.{name}" if path else name)
    if isinstance(schema.get("items"), dict):
        yield from walk(schema["items"], path + "[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from walk(schema["additionalProperties"], path + "{}")


_ENV = cel.NewEnv(variables={"self": cel.Type.DYN, "oldSelf": cel.Type.DYN})


def rule_checker(schema_node: dict[str, Any]) -> Callable[[Any], bool]:
    """Evaluate every x-kubernetes-validations rule of a node against a value: True when all pass."""
    programs = [_ENV.compile(r["rule"]) for r in schema_node["x-kubernetes-validations"]]

    def check(value: Any) -> bool:
        results = []
        for prog in programs:
            out = prog.eval(data={"self": value, "oldSelf": None})
            assert out.type() != cel.Type.ERROR, out.value()
            results.append(out.plain_value())
        return all(results)

    return check
