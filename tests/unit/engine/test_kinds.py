"""The kind registry: every policy kind (both variants) is described once, and what asks "which kind is this"
gets the same description from a document, from its parsed policy and from a PolicyException's policyRefs."""

from __future__ import annotations

from pathlib import Path

import yaml

from vpol.controller.plans import PLANS
from vpol.controller.queue_keys import PolicyKey
from vpol.policies.registry import KINDS, kind_for_document, kind_named, kind_of

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
ALL_KINDS = {f"{prefix}{kind}Policy" for kind in ("Validating", "Mutating", "Generating", "Deleting",
                                                  "ImageValidating") for prefix in ("", "Namespaced")}


CRDS = EXAMPLES.parent / "crds"


def example_policies() -> list[dict]:
    out = []
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and str(doc.get("apiVersion", "")).startswith("policies.kyverno.io/") and \
                    str(doc.get("kind", "")).endswith("Policy"):
                out.append(doc)
    return out


def test_every_kind_is_described_once() -> None:
    names = [name for k in KINDS for name in k.kinds]
    assert sorted(names) == sorted(ALL_KINDS)
    assert len({k.model for k in KINDS}) == len(KINDS)
    assert len({k.queue_prefix for k in KINDS}) == len(KINDS)
    # Every kind has its plan in the one reconcile loop, and a key of either variant names it.
    assert set(PLANS) == {k.kind for k in KINDS}
    assert {PolicyKey.of(name, "ns/p" if name.startswith("Namespaced") else "p").variant for name in ALL_KINDS} == \
        ALL_KINDS
    assert kind_named("ClusterPolicy") is None and kind_for_document({"apiVersion": "v1", "kind": "Pod"}) is None


def test_a_document_and_its_policy_are_of_the_same_kind() -> None:
    docs = example_policies()
    assert {d["kind"] for d in docs} == ALL_KINDS  # the examples hold every kind
    for doc in docs:
        kind = kind_for_document(doc)
        assert kind is not None and kind is kind_named(doc["kind"]), doc["kind"]
        policy, problems = kind.parse(dict(doc))
        assert policy is not None and not [p for p in problems if p.severity == "error"], problems
        assert kind_of(policy) is kind
        assert list(kind.compile_problems(policy)) == []
        variants = kind.variants(policy)
        assert variants[0] is policy and all(kind_of(v) is kind for v in variants)


def test_the_plurals_are_the_crds_own() -> None:
    """Each kind's resources are those its CustomResourceDefinition serves (crds/<plural>.yaml)."""
    for kind in KINDS:
        for name, plural in zip(kind.kinds, kind.plurals):
            crd = yaml.safe_load((CRDS / f"{plural}.yaml").read_text())
            names = crd["spec"]["names"]
            assert (names["kind"], names["plural"], crd["spec"]["scope"]) == (
                name, plural, "Namespaced" if name.startswith("Namespaced") else "Cluster"), plural
            # Its group, scope and served versions are those the kind's description states.
            variant = kind.kinds.index(name)
            assert (crd["spec"]["group"], crd["spec"]["scope"]) == (kind.group, kind.scopes[variant]), plural
            served = {v["name"] for v in crd["spec"]["versions"] if v.get("served")}
            assert served == set(kind.versions[variant]), (plural, served)
