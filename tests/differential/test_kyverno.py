"""vpol decides like Kyverno: every suite of examples/ and the shared Kyverno CLI corpus, plus generated
variations of their resources, checked by Kyverno's own CLI (`kyverno test`, built from its module by
tests/kyverno/build).

For each suite, vpol evaluates every policy on every resource of the suite and on variations of each
resource (a field removed, set to null, emptied, or given a value of another type, chosen with a fixed
seed); its results become the expectations of a new kyverno-test.yaml in a copy of the suite, and
`kyverno test` must agree with every one of them. Pairs a policy does not select have no result in
either tool and are not listed. Documented deviations (tests/differential/deviations.yaml) are classes
of behaviour, each matched by what the resource or policy contains, never by a test's name.

Locally the test is skipped without Go; under CI=true (or VPOL_REQUIRE_E2E=1) that is a failure.
"""

from __future__ import annotations

import copy
import os
import random
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import e2e_required
from vpol.cel.backend import using
from vpol.cli.context import build_backend, load_user_info, load_values
from vpol.cli.inputs import Loaded, load_exceptions, load_policies, load_resources
from vpol.cli.kyverno_test import UNSUPPORTED_KEYS, find_test_files
from vpol.cli.resolve import resolver
from vpol.engine.evaluate import PolicyEngine, compile_exception
from vpol.engine.mutate import MutatingPolicyEngine
from vpol.model.documents import Document
from vpol.engine.subjects import subject_for

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO.parent / "shared" / "conformance" / "kyverno-cli"
BUILD = REPO / "tests" / "kyverno" / "build"
VARIATIONS = 8
#: Fields of a resource the variations leave alone.
PROTECTED = {"apiVersion", "kind", "metadata"}
#: Keys of a test file that name input files.
FILE_KEYS = ("policies", "resources", "exceptions", "context", "clusterResources", "variables", "userinfo")


def kyverno() -> str:
    if not shutil.which("go"):
        if e2e_required():
            pytest.fail("Go is needed to build Kyverno's CLI (the differential oracle)")
        pytest.skip("Go is not installed: the Kyverno oracle cannot be built")
    proc = subprocess.run([str(BUILD)], capture_output=True, text=True, timeout=3000)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


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


def _suite(test_file: Path, spec: dict[str, Any], work: Path, rng: random.Random,
           messages: dict[tuple[str, str, str], str]) -> int:
    """Copy the suite into work/, add variations, write vpol's results as expectations; their count.

    ``messages`` gets vpol's message for each (suite folder, policy, resource) it expects something of.
    """
    base = test_file.parent
    rel = lambda items: [str(base / i) for i in ([items] if isinstance(items, str) else items or [])]  # noqa
    loaded = load_policies(rel(spec.get("policies")), Loaded(), strict_kinds=False)
    load_exceptions(rel(spec.get("exceptions")), loaded)
    load_resources(rel(spec.get("resources")), loaded)
    if loaded.has_errors or loaded.unreadable or any(p.json_mode for p in loaded.policies):
        return 0
    if loaded.mutating:
        return _mutating_suite(test_file, spec, work, rng, messages, loaded)
    values = load_values(rel(spec.get("variables")))
    values.user_info = load_user_info(rel(spec.get("userinfo")))
    backend, extra = build_backend(context_files=rel(spec.get("context")),
                                   cluster_resource_files=rel(spec.get("clusterResources")),
                                   api_call_responses=[r for r in spec.get("apiCallResponses") or []
                                                       if isinstance(r, dict)])
    resolve = resolver(extra)
    originals = [d.data for d in loaded.resources if isinstance(d.data, dict)]
    varied = [v for obj in originals for v in _variations(obj, rng)]
    exceptions = [compile_exception(e) for e in loaded.exceptions]
    engines = [PolicyEngine(p, exceptions) for p in loaded.policies]
    results = []
    dest = work / f"{len(list(work.iterdir())):03}-{base.name}"
    with using(backend):
        for obj in originals + varied:
            subject = subject_for(obj, resolve=resolve, namespaces=values.namespaces, user_info=values.user_info)
            for engine in engines:
                res = engine.evaluate(subject)
                if res is None:
                    continue
                results.append({"isValidatingPolicy": True, "policy": engine.policy.name,
                                "kind": str(obj.get("kind")), "resources": [subject.name], "result": res.result})
                messages[(dest.name, engine.policy.name, subject.name)] = f"{res.result}: {res.message}"
    if not results:
        return 0
    shutil.copytree(base, dest)
    (dest / test_file.name).unlink()
    (dest / "vpol-variations.yaml").write_text(yaml.safe_dump_all(varied))
    new = {k: v for k, v in spec.items() if k != "results"}
    # Inputs outside the suite's folder (`../x.yaml`) come along into the copy.
    for key in FILE_KEYS:
        items = spec.get(key)
        if not items:
            continue
        listed = [items] if isinstance(items, str) else list(items)
        moved = []
        for item in listed:
            source = (base / str(item)).resolve()
            if base.resolve() in source.parents:
                moved.append(item)
                continue
            shutil.copy(source, dest / f"outside-{source.name}")
            moved.append(f"outside-{source.name}")
        new[key] = moved if not isinstance(items, str) else moved[0]
    new["resources"] = list(new.get("resources") or []) + ["vpol-variations.yaml"]
    new["results"] = results
    (dest / "kyverno-test.yaml").write_text(yaml.safe_dump(new, sort_keys=False))
    return len(results)


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


_CLUSTER_KINDS = {"Namespace", "Node", "ClusterRole", "ClusterRoleBinding", "PersistentVolume", "StorageClass",
                  "CustomResourceDefinition"}


def _mutating_suite(test_file: Path, spec: dict[str, Any], work: Path, rng: random.Random,
                    messages: dict[tuple[str, str, str], str], loaded: Loaded) -> int:
    """A suite with MutatingPolicies: vpol's results and patched resources become the expectations."""
    from vpol.cli.kyverno_test import _Chains

    base = test_file.parent
    if loaded.policies or len(loaded.mutating) != 1:
        return 0  # one mutating policy per suite: one patched resource per object
    originals = [d.data for d in loaded.resources if isinstance(d.data, dict)]
    varied = [v for obj in originals for v in _variations(obj, rng) + _pod_variations(obj)]
    names = [str((o.get("metadata") or {}).get("name")) for o in originals + varied]
    if len(set(names)) != len(names):
        return 0  # Kyverno's test picks resources by name only
    engine = MutatingPolicyEngine(loaded.mutating[0], [compile_exception(e) for e in loaded.exceptions])
    values = load_values([])
    chains = _Chains([engine], values, None)
    dest = work / f"{len(list(work.iterdir())):03}-{base.name}"
    results, patched = [], []
    for obj in originals + varied:
        doc = Document(data=obj, file="")
        _final, per_policy = chains.run(doc, "CREATE")
        got = per_policy.get(engine.policy.name)
        if got is None:
            continue
        result, mutated = got
        name = str(obj["metadata"].get("name"))
        entry: dict[str, Any] = {"isMutatingPolicy": True, "policy": engine.policy.name, "kind": str(obj.get("kind")),
                                 "resources": [name], "result": result.result}
        if result.result == "pass":
            entry["patchedResources"] = "vpol-patched.yaml"
            entry["failOnMissingResources"] = True
            # Kyverno's CLI places namespaced objects without a namespace in "default" (and looks them up so).
            meta = mutated.setdefault("metadata", {})
            if not meta.get("namespace") and str(obj.get("kind")) not in _CLUSTER_KINDS:
                mutated = {**mutated, "metadata": {**meta, "namespace": "default"}}
            patched.append(mutated)
        results.append(entry)
        messages[(dest.name, engine.policy.name, name)] = f"{result.result}: {result.message}"
    if not results:
        return 0
    dest.mkdir()
    for item in [spec.get("policies")] if isinstance(spec.get("policies"), str) else spec.get("policies") or []:
        shutil.copy(base / str(item), dest / Path(str(item)).name)
    (dest / "resources.yaml").write_text(yaml.safe_dump_all(originals + varied))
    (dest / "vpol-patched.yaml").write_text(yaml.safe_dump_all(patched))
    policies = spec.get("policies")
    new = {"apiVersion": spec.get("apiVersion"), "kind": "Test", "metadata": spec.get("metadata") or {},
           "policies": [Path(str(p)).name for p in ([policies] if isinstance(policies, str) else policies or [])],
           "resources": ["resources.yaml"], "results": results}
    (dest / "kyverno-test.yaml").write_text(yaml.safe_dump(new, sort_keys=False))
    return len(results)


def _deviations() -> list[dict[str, Any]]:
    path = Path(__file__).with_name("deviations.yaml")
    return list(yaml.safe_load(path.read_text()) or []) if path.exists() else []


@pytest.mark.slow
def test_vpol_agrees_with_kyverno_on_every_suite_and_variation(tmp_path: Path) -> None:
    binary = kyverno()
    rng = random.Random(20261125)
    pairs = 0
    messages: dict[tuple[str, str, str], str] = {}
    for test_file in find_test_files([str(REPO / "examples"), str(CORPUS)]):
        for spec in yaml.safe_load_all(test_file.read_text()):
            if not isinstance(spec, dict) or any(spec.get(k) for k in UNSUPPORTED_KEYS) or \
                    any(str(r.get("operation", "CREATE")).upper() != "CREATE" for r in spec.get("results") or []):
                continue
            pairs += _suite(test_file, spec, tmp_path, rng, messages)
    assert pairs >= 2000, pairs
    proc = subprocess.run([binary, "test", str(tmp_path), "--detailed-results"], capture_output=True, text=True,
                          timeout=1800)
    output = proc.stdout + proc.stderr
    deviations = _deviations()
    suite = ""
    explained: dict[str, int] = {}
    unexplained = []
    for line in output.splitlines():
        m = re.search(r"Loading test\s+\(\s*(\S+)/kyverno-test.yaml", line)
        if m:
            suite = Path(m.group(1)).name
        cols = [c.strip() for c in line.split("\u2502")]
        if len(cols) < 7 or cols[5] != "Fail":
            continue
        policy, resource = cols[2], cols[4].rsplit("/", 1)[-1]
        ours = messages.get((suite, policy, resource), "")
        found = next((d for d in deviations if re.search(d["vpol"], ours) and re.search(d["kyverno"], cols[6])),
                     None)
        if found:
            explained[found["class"]] = explained.get(found["class"], 0) + 1
            if os.environ.get("VPOL_SHOW_DEVIATIONS"):  # print every explained pair too
                print(f"DEVIATION {found['class']}: {suite}: {policy} on {cols[4]}: {ours[:400]}")
        else:
            unexplained.append(f"{suite}: {policy} on {cols[4]}: kyverno says {cols[6]!r}; vpol: {ours[:300]}")
    summary = re.findall(r"Test Summary: .*", output)
    print(f"{pairs} (policy, resource) pairs; {summary}; documented deviations: {explained}")
    assert summary, output[-3000:]
    assert not unexplained, "\n".join(unexplained[:60])
