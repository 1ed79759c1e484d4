"""vpol decides like Kyverno: every suite of examples/ and the shared Kyverno CLI corpus, plus generated
variations of their resources, evaluated by vpol and by Kyverno's own CEL policy engines (tests/kyverno: a
Go program over the ValidatingPolicy and MutatingPolicy compilers and engines of the kyverno/kyverno
module, built by tests/kyverno/build), pair by pair.

For each suite, both evaluate every policy on every resource of the suite and on variations of each
resource (a field removed, set to null, emptied, or given a value of another type, chosen with a fixed
seed) as CREATE requests, and on the suite's own resources as UPDATE and DELETE requests too; for
MutatingPolicies (CREATE) also on pod shapes mutations meet (more containers, init containers, nothing
set, everything set). A pair agrees when both give no result (the policy does not select the resource) or
the same result; a `fail` must also carry the same message, and a mutation that passes must leave the same
object. The oracle gets what Kyverno's CLI gives its engine (the suite's context objects and images, HTTP
mocks, mocked GlobalContextEntries, the namespaces of its values file, its user info); which kinds are
namespaced comes from vpol.
Documented deviations (tests/differential/deviations.yaml) are classes of behaviour, each matched by the
two outcomes, never by a test's name.

Locally the test is skipped without Go; under CI=true (or VPOL_REQUIRE_E2E=1) that is a failure.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import random
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import go_built
from vpol.cel.backend import using
from vpol.cli.context import build_backend, load_user_info, load_values
from vpol.cli.global_context import load_mock_entries
from vpol.cli.inputs import Loaded, load_exceptions, load_policies, load_resources
from vpol.cli.kyverno_test import UNSUPPORTED_KEYS, find_test_files
from vpol.cli.resolve import resolver
from vpol.engine.evaluate import compile_exception
from vpol.engine.subjects import subject_for
from vpol.model.documents import Document
from vpol.policies.deleting.engine import DeletingPolicyEngine
from vpol.policies.generating.engine import GeneratingPolicyEngine, Placement
from vpol.policies.mutating.engine import MutatingPolicyEngine
from vpol.policies.validating.engine import PolicyEngine

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO.parent / "shared" / "conformance" / "kyverno-cli"
#: Suites of our own for Kyverno behaviour the corpus and examples/ do not show (each says what it pins).
SUITES = Path(__file__).with_name("suites")
BUILD = REPO / "tests" / "kyverno" / "build"
VARIATIONS = 8
#: Fields of a resource the variations leave alone.
PROTECTED = {"apiVersion", "kind", "metadata"}
#: The kinds of policy documents the oracle takes, by the key of its input.
ORACLE_KINDS = {"ValidatingPolicy": "validating", "NamespacedValidatingPolicy": "namespacedValidating",
                "MutatingPolicy": "mutating", "NamespacedMutatingPolicy": "namespacedMutating",
                "PolicyException": "exceptions"}


def oracle() -> str:
    return go_built(BUILD, "the Kyverno oracle", timeout=3000)


def _variations(obj: dict[str, Any], rng: random.Random) -> list[dict[str, Any]]:
    """Copies of obj, each with one field under its body changed the way real inputs go wrong."""
    leaves: list[tuple[Any, ...]] = []

    def walk(node: Any, path: tuple[Any, ...]) -> None:
        if path and path[0] in PROTECTED:
            return
        if path:
            leaves.append(path)
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, (*path, k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, (*path, i))

    walk(obj, ())
    out = []
    for i in range(min(VARIATIONS, len(leaves))):
        path = rng.choice(leaves)
        changed = copy.deepcopy(obj)
        parent = changed
        for key in path[:-1]:
            parent = parent[key]
        how = rng.choice(("remove", "null", "empty-list", "empty-map", "string", "number", "bool"))
        if how == "remove":
            if isinstance(parent, list):
                parent.pop(path[-1])
            else:
                del parent[path[-1]]
        else:
            parent[path[-1]] = {"null": None, "empty-list": [], "empty-map": {}, "string": "x", "number": 7,
                                "bool": True}[how]
        changed["metadata"] = {**(changed.get("metadata") or {}),
                               "name": f"{(obj.get('metadata') or {}).get('name', 'x')}-v{i}"}
        out.append(changed)
    return out


def _pod_variations(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """Shapes mutations meet in real objects: several containers, init containers, no labels, a container that
    already has what a policy sets (applied to every pod-bearing object)."""
    spec: Any = obj
    for key in (("spec",), ("spec", "template", "spec"), ("spec", "jobTemplate", "spec", "template", "spec")):
        node: Any = obj
        for k in key:
            node = node.get(k) if isinstance(node, dict) else None
        if isinstance(node, dict) and isinstance(node.get("containers"), list):
            spec = key
            break
    else:
        return []
    out = []
    for label, change in (
        ("two", lambda s: s["containers"].append({"name": "second", "image": "docker.io/library/redis:7"})),
        ("init", lambda s: s.setdefault("initContainers", []).append({"name": "setup", "image": "busybox"})),
        ("bare", lambda s: [c.pop(k, None) for c in s["containers"] for k in ("securityContext", "resources",
                                                                             "imagePullPolicy", "env")]),
        ("set", lambda s: [c.update(securityContext={"runAsNonRoot": False}, imagePullPolicy="Always",
                                    resources={"requests": {"cpu": "1"}}) for c in s["containers"]]),
    ):
        changed = copy.deepcopy(obj)
        node = changed
        for k in spec:
            node = node[k]
        change(node)
        if label == "bare":
            changed["metadata"].pop("labels", None)
            changed["metadata"].pop("annotations", None)
        changed["metadata"] = {**changed["metadata"], "name": f"{obj['metadata'].get('name', 'x')}-{label}"}
        out.append(changed)
    return out


@dataclass
class Outcome:
    """One (policy, resource) pair as both engines decided it: "status: message" or "" (no result)."""
    suite: str
    policy: str
    resource: str
    vpol: str
    kyverno: str
    patched: tuple[Any, Any] | None = None  # (vpol's, Kyverno's) object after a passing mutation
    #: The policy is a NamespacedValidatingPolicy and the resource is not in its namespace.
    outside_policy_namespace: bool = False
    #: The policy is a MutatingPolicy.
    mutating: bool = False

    @property
    def agree(self) -> bool:
        if self.vpol.split(":", 1)[0] != self.kyverno.split(":", 1)[0]:
            return False
        if self.vpol.startswith("error:") and self.vpol != self.kyverno and not self.mutating:
            # The reasons of a ValidatingPolicy's errors are worded as Kyverno's engine words them (a
            # MutatingPolicy's are compared by outcome only).
            return False
        if self.vpol.startswith("fail:") and self.vpol != self.kyverno:
            # Why a messageExpression could not be evaluated is worded by each CEL implementation.
            return all(m.startswith("fail: failed to evaluate message expression:") for m in (self.vpol, self.kyverno))
        return self.patched is None or _tidy(self.patched[0]) == _tidy(self.patched[1])


def _tidy(value: Any) -> Any:
    """An object without its null and empty values: Kyverno's CLI compares mutated objects so (SMD leaves an
    empty list it did not touch as null, vpol as []; both mean the field is unset)."""
    if isinstance(value, dict):
        out = {k: _tidy(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v not in (None, [], {})}
    if isinstance(value, list):
        return [_tidy(v) for v in value]
    return value


@dataclass
class Suite:
    """A suite's inputs, as vpol loads them and as the oracle takes them."""
    test_file: Path
    spec: dict[str, Any]
    loaded: Loaded
    oracle_input: dict[str, Any] = field(default_factory=dict)

    def files(self, key: str) -> list[Path]:
        items = self.spec.get(key)
        return [self.test_file.parent / str(i) for i in ([items] if isinstance(items, str) else items or [])]


def _documents(paths: list[Path]) -> list[dict[str, Any]]:
    return [d for p in paths for d in yaml.safe_load_all(p.read_text()) if isinstance(d, dict)]


def _oracle_input(suite: Suite) -> dict[str, Any]:
    """What Kyverno's CLI hands its engine for this suite (without the resources)."""
    out: dict[str, Any] = {key: [] for key in ORACLE_KINDS.values()}
    for doc in _documents(suite.files("policies") + suite.files("exceptions")):
        if doc.get("kind") in ORACLE_KINDS:
            out[ORACLE_KINDS[doc["kind"]]].append(doc)
    context: dict[str, Any] = {"resources": [], "images": [], "httpMocks": {}}
    for doc in _documents(suite.files("context")):
        spec = doc.get("spec") or {}
        context["resources"] += spec.get("resources") or []
        context["images"] += spec.get("images") or []
    # A test with clusterResources runs Kyverno's CLI against a fake cluster holding them: resource.Get sees them.
    for doc in _documents(suite.files("clusterResources")):
        context["resources"] += (doc.get("spec") or {}).get("resources") or [] if doc.get("kind") == "ClusterResource" \
            else [doc]
    for mock in suite.spec.get("apiCallResponses") or []:
        response = mock.get("response") or {}
        url = str(mock.get("url") or mock.get("urlPath") or "").strip()
        method = str(mock.get("method") or "").strip().upper()
        context["httpMocks"][f"{method}:{url}" if method else url] = {
            "body": response.get("body"), "statusCode": response.get("statusCode") or 200}
    # Mocked GlobalContextEntries, their resourceFiles read into resources (Kyverno's CLI does the same before it
    # resolves them; the oracle resolves them with the CLI's own code).
    gctx = []
    for entry in suite.spec.get("globalContextEntries") or []:
        entry = dict(entry)
        if entry.get("resourceFiles") is not None:
            entry["resources"] = [d for f in entry.pop("resourceFiles") or []
                                  for d in _documents([suite.test_file.parent / str(f).strip()]) if d]
        gctx.append(entry)
    context["globalContextEntries"] = gctx
    out["context"] = context
    namespaces: dict[str, Any] = {}
    for doc in _documents(suite.files("variables")):
        for sel in doc.get("namespaceSelector") or []:
            namespaces[str(sel["name"])] = {"apiVersion": "v1", "kind": "Namespace",
                                            "metadata": {"name": str(sel["name"]), "labels": sel.get("labels")}}
        for ns in doc.get("namespaces") or []:  # these take precedence, as in Kyverno's CLI
            namespaces[str(ns["metadata"]["name"])] = ns
    out["namespaces"] = list(namespaces.values())
    users = _documents(suite.files("userinfo"))
    out["userInfo"] = (users[0].get("userInfo") or {}) if users else {}
    out["operation"] = "CREATE"
    return out


def _ask_oracle(binary: str, case: dict[str, Any]) -> list[dict[str, Any]]:
    proc = subprocess.run([binary], input=json.dumps(case, default=str), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    answer = json.loads(proc.stdout)
    assert "error" not in answer, f"Kyverno does not compile what vpol does: {answer['error']}"
    return list(answer["results"])


def _kyverno_outcome(answer: dict[str, Any], policy: str) -> str:
    if answer.get("error"):
        return f"error: {answer['error']}"
    rules = [r for p in answer["policies"] if p["policy"] == policy for r in p["rules"]]
    assert len(rules) <= 1, rules  # one compiled variant matches a resource
    return f"{rules[0]['status']}: {rules[0]['message']}" if rules else ""


def every_suite() -> Iterator[tuple[Path, Suite | None]]:
    """Each Kyverno CLI test of examples/, the corpus and the project's suites (and of the folders in
    VPOL_DIFFERENTIAL_EXTRA, os.pathsep-separated, e.g. a checkout of a public catalogue) that vpol's test runner
    supports, with its suite loaded (None: it does not load)."""
    extra = [p for p in os.environ.get("VPOL_DIFFERENTIAL_EXTRA", "").split(os.pathsep) if p]
    for test_file in find_test_files([str(REPO / "examples"), str(CORPUS), str(SUITES), *extra]):
        for spec in yaml.safe_load_all(test_file.read_text()):
            if isinstance(spec, dict) and not any(spec.get(k) for k in UNSUPPORTED_KEYS):
                yield test_file, _load(test_file, spec)


def _load(test_file: Path, spec: dict[str, Any]) -> Suite | None:
    suite = Suite(test_file, spec, Loaded())
    load_policies([str(p) for p in suite.files("policies")], suite.loaded, strict_kinds=False)
    load_exceptions([str(p) for p in suite.files("exceptions")], suite.loaded)
    load_resources([str(p) for p in suite.files("resources")], suite.loaded)
    if suite.loaded.has_errors or suite.loaded.unreadable or any(p.json_mode for p in suite.loaded.policies):
        return None
    suite.oracle_input = _oracle_input(suite)
    return suite


def _values(suite: Suite) -> Any:
    """The suite's values file (namespaces) and user info, as vpol's CLI reads them."""
    values = load_values([str(p) for p in suite.files("variables")])
    values.user_info = load_user_info([str(p) for p in suite.files("userinfo")])
    return values


def _backend(suite: Suite) -> tuple[Any, Any]:
    """The suite's offline backend (context, cluster resources, API call mocks) and its resolver, as vpol's CLI
    builds them for `vpol test`."""
    rel = lambda key: [str(p) for p in suite.files(key)]  # noqa: E731
    backend, extra = build_backend(context_files=rel("context"), cluster_resource_files=rel("clusterResources"),
                                   api_call_responses=[r for r in suite.spec.get("apiCallResponses") or []
                                                       if isinstance(r, dict)],
                                   global_context=load_mock_entries(suite.spec.get("globalContextEntries"),
                                                                    suite.test_file.parent, str(suite.test_file)))
    return backend, resolver(extra)


def _validating_suite(suite: Suite, binary: str, rng: random.Random) -> list[Outcome]:
    values = _values(suite)
    backend, resolve = _backend(suite)
    originals = [d.data for d in suite.loaded.resources if isinstance(d.data, dict)]
    objects = originals + [v for obj in originals for v in _variations(obj, rng)]
    exceptions = [compile_exception(e) for e in suite.loaded.exceptions]
    engines = [PolicyEngine(p, exceptions) for p in suite.loaded.policies]
    outcomes = []
    # Every object under CREATE; the suite's own objects also under UPDATE (oldObject: the same object, as
    # Kyverno's CLI shapes it) and DELETE (object null, oldObject the object).
    for operation, batch in (("CREATE", objects), ("UPDATE", originals), ("DELETE", originals)):
        subjects = [subject_for(obj, operation=operation, resolve=resolve, namespaces=values.namespaces,
                                user_info=values.user_info) for obj in batch]
        if operation == "UPDATE":
            subjects = [dataclasses.replace(s, old_object=s.object) for s in subjects]
        answers = _ask_oracle(binary, {**suite.oracle_input, "mutating": [], "operation": operation,
                                       "resources": [{"object": obj, "namespaced": s.type.namespaced}
                                                     for obj, s in zip(batch, subjects)]})
        with using(backend):
            for subject, answer in zip(subjects, answers):
                for engine in engines:
                    res = engine.evaluate(subject)
                    home = engine.policy.namespace
                    outside = bool(home) and (subject.object or subject.old_object or {}).get("metadata", {}).get(
                        "namespace", "default") != home
                    outcomes.append(Outcome(suite.test_file.parent.name, engine.policy.name,
                                            f"{subject.name} ({operation})",
                                            f"{res.result}: {res.message}" if res else "",
                                            _kyverno_outcome(answer, engine.policy.name),
                                            outside_policy_namespace=outside))
    return outcomes


def _mutating_suite(suite: Suite, binary: str, rng: random.Random) -> list[Outcome]:
    """Each MutatingPolicy of a suite on its own (one mutated object per resource): results and mutated objects."""
    from vpol.cli.kyverno_test import _Chains

    loaded = suite.loaded
    originals = [d.data for d in loaded.resources if isinstance(d.data, dict)]
    objects = originals + [v for obj in originals for v in _variations(obj, rng) + _pod_variations(obj)]
    backend, resolve = _backend(suite)
    values = _values(suite)
    namespaced = [subject_for(o, resolve=resolve).type.namespaced for o in objects]
    outcomes = []
    for policy in loaded.mutating:
        engine = MutatingPolicyEngine(policy, [compile_exception(e) for e in loaded.exceptions])
        chains = _Chains([engine], values, resolve)
        answers = _ask_oracle(binary, {
            **suite.oracle_input, "validating": [], "namespacedValidating": [],
            "mutating": [d for d in suite.oracle_input["mutating"] if (d.get("metadata") or {}).get("name") == policy.name],
            "resources": [{"object": o, "namespaced": n} for o, n in zip(objects, namespaced)]})
        for obj, is_namespaced, answer in zip(objects, namespaced, answers):
            with using(backend):
                _final, per_policy = chains.run(Document(data=obj, file=""), "CREATE")
            got = per_policy.get(engine.policy.name)
            name = str((obj.get("metadata") or {}).get("name"))
            kyverno = _kyverno_outcome(answer, engine.policy.name)
            outcome = Outcome(suite.test_file.parent.name, engine.policy.name, name,
                              f"{got[0].result}: {got[0].message}" if got else "", kyverno, mutating=True)
            if got and got[0].result == "pass" and kyverno.startswith("pass"):
                mutated = copy.deepcopy(got[1])
                meta = mutated.setdefault("metadata", {})
                if is_namespaced and not meta.get("namespace"):
                    meta["namespace"] = "default"  # as the oracle (Kyverno's CLI) places it
                theirs = answer.get("patched")
                if theirs is None:  # nothing changed
                    theirs = copy.deepcopy(obj)
                    if is_namespaced and not (theirs.get("metadata") or {}).get("namespace"):
                        theirs.setdefault("metadata", {})["namespace"] = "default"
                outcome.patched = (json.loads(json.dumps(mutated, default=str)), theirs)
            outcomes.append(outcome)
    return outcomes


def _canonical(objects: list[Any]) -> list[Any]:
    """Objects as JSON gives them, in a fixed order (Kyverno's fake context lists a namespace's objects in map
    order)."""
    return sorted((json.loads(json.dumps(o, default=str)) for o in objects), key=lambda o: json.dumps(o, sort_keys=True))


def _lifecycle_suite(suite: Suite, binary: str, rng: random.Random) -> list[Outcome]:
    """The GeneratingPolicies and DeletingPolicies of a suite, as Kyverno's CLI runs them: every resource (and its
    variations) a trigger of each GeneratingPolicy under CREATE, the suite's own also under UPDATE and DELETE,
    results and generated objects compared; every resource a candidate of each DeletingPolicy."""
    loaded = suite.loaded
    values = _values(suite)
    backend, resolve = _backend(suite)
    originals = [d.data for d in loaded.resources if isinstance(d.data, dict)]
    objects = originals + [v for obj in originals for v in _variations(obj, rng)]
    exceptions = [compile_exception(e) for e in loaded.exceptions]

    def scope(api_version: str, kind: str) -> bool | None:
        known = resolve(api_version, kind)
        return None if known is None else known.namespaced

    generating = [GeneratingPolicyEngine(p, exceptions, namespaced=scope, placement=Placement.KYVERNO_CLI,
                                         every_exception=True) for p in loaded.generating]
    deleting = [DeletingPolicyEngine(p, exceptions, confined=False) for p in loaded.deleting]
    outcomes = []
    for operation, batch in (("CREATE", objects), ("UPDATE", originals), ("DELETE", originals)):
        subjects = [subject_for(obj, operation=operation, resolve=resolve, namespaces=values.namespaces,
                                user_info=values.user_info) for obj in batch]
        if operation == "UPDATE":
            subjects = [dataclasses.replace(s, old_object=s.object) for s in subjects]
        # Deleting policies ignore the operation: asked once.
        answers = _ask_oracle(binary, {
            **suite.oracle_input, "validating": [], "namespacedValidating": [], "mutating": [],
            "generating": [p.raw for p in loaded.generating],
            "deleting": [p.raw for p in loaded.deleting] if operation == "CREATE" else [],
            "operation": operation,
            "resources": [{"object": obj, "namespaced": s.type.namespaced} for obj, s in zip(batch, subjects)]})
        with using(backend):
            for subject, answer in zip(subjects, answers):
                where = f"{subject.name} ({operation})"
                for gpol in generating:
                    generation = gpol.generate(subject)
                    theirs = next((r for r in answer.get("generating") or [] if r["policy"] == gpol.policy.name), None)
                    kyverno = f"{theirs['rules'][0]['status']}: {theirs['rules'][0]['message']}" if theirs else ""
                    outcome = Outcome(suite.test_file.parent.name, gpol.policy.name, where,
                                      f"{generation.result.result}: {generation.result.message}" if generation
                                      else "", kyverno)
                    if generation is not None and theirs is not None and generation.result.result == "pass":
                        outcome.patched = (_canonical([d.object for d in generation.downstreams]),
                                           _canonical(theirs["generated"]))
                    outcomes.append(outcome)
                for dpol in deleting if operation == "CREATE" else []:
                    verdict = dpol.evaluate(subject)
                    theirs = next((r for r in answer.get("deleting") or [] if r["policy"] == dpol.policy.name), None)
                    outcomes.append(Outcome(
                        suite.test_file.parent.name, dpol.policy.name, where,
                        f"{verdict.result}: {verdict.message}" if verdict else "",
                        f"{theirs['rules'][0]['status']}: {theirs['rules'][0]['message']}" if theirs else ""))
    return outcomes


def _deviations() -> list[dict[str, Any]]:
    path = Path(__file__).with_name("deviations.yaml")
    return list(yaml.safe_load(path.read_text()) or []) if path.exists() else []


@pytest.mark.slow
def test_vpol_agrees_with_kyverno_on_every_suite_and_variation() -> None:
    binary = oracle()
    rng = random.Random(20261125)
    outcomes: list[Outcome] = []
    for test_file, suite in every_suite():
        if suite is None:
            # Our own suites must load (a broken one would silently test nothing).
            assert SUITES not in test_file.parents, f"{test_file} does not load"
            continue
        if suite.loaded.mutating:
            outcomes += _mutating_suite(suite, binary, rng)
        if suite.loaded.policies:
            outcomes += _validating_suite(suite, binary, rng)
        if suite.loaded.generating or suite.loaded.deleting:
            outcomes += _lifecycle_suite(suite, binary, rng)
    decided = [o for o in outcomes if o.vpol or o.kyverno]
    deviations = _deviations()
    explained: dict[str, int] = {}
    unexplained = []
    for o in decided:
        if o.agree:
            continue
        found = next((d for d in deviations if re.search(d["vpol"], o.vpol) and re.search(d["kyverno"], o.kyverno)
                      and d.get("outsidePolicyNamespace", o.outside_policy_namespace) == o.outside_policy_namespace),
                     None)
        if found:
            explained[found["class"]] = explained.get(found["class"], 0) + 1
            if os.environ.get("VPOL_SHOW_DEVIATIONS"):  # print every explained pair too
                print(f"DEVIATION {found['class']}: {o.suite}: {o.policy} on {o.resource}: {o.vpol[:300]}")
        else:
            detail = f"; objects differ: vpol {o.patched[0]} kyverno {o.patched[1]}" if o.patched else ""
            unexplained.append(f"{o.suite}: {o.policy} on {o.resource}: kyverno {o.kyverno[:300]!r}; "
                               f"vpol {o.vpol[:300]!r}{detail[:1500]}")
    by_status: dict[str, int] = {}
    for o in decided:
        by_status[o.kyverno.split(":", 1)[0] or "none"] = by_status.get(o.kyverno.split(":", 1)[0] or "none", 0) + 1
    print(f"{len(decided)} decided (policy, resource) pairs (Kyverno: {by_status}); {len(outcomes)} pairs in all; "
          f"documented deviations: {explained}")
    assert len(decided) >= 2000, len(decided)
    assert not unexplained, f"{len(unexplained)} disagreements:\n" + "\n".join(unexplained[:60])
