"""vpol's native admission policies are the objects Kyverno's generator builds, field for field.

For every cluster-wide ValidatingPolicy and MutatingPolicy of the repository's suites and examples and of the
shared Kyverno CLI corpus (with the PolicyExceptions of its suite), opted in to generation as a Kyverno user
opts in (``spec.autogen.validatingAdmissionPolicy`` / ``mutatingAdmissionPolicy`` ``enabled: true``), the
Kyverno oracle (tests/kyverno, ``generate``: Kyverno 1.19.1's own builders in pkg/admissionpolicy, with its
controller's decisions around them) builds Kyverno's VAP/MAP and binding, and vpol builds its own in its opt-in
mode (``--vap-generation=opt-in``) and in its default mode. A pod policy, for which Kyverno generates nothing
(pod-controller autogen), is also tried with ``podControllers.controllers: []``, so that both generate.

Both sets of objects are created on a real API server with ``dryRun=All``, so both are compared as the API server
stores them (its defaults applied, nothing persisted), with everything but the server's own metadata (uid,
resourceVersion, timestamps, managedFields) and vpol's own label (``vpol.kyverno.io/policy``). Kyverno's objects
must be accepted whenever vpol generates; where vpol does not, the API server must refuse Kyverno's objects, or
vpol's reason must be one of the documented classes where Kyverno's object would decide otherwise than the
policy (docs/kyverno-compatibility.md). The documented differences of vpol's objects are applied to Kyverno's
before comparing, each by the policy field that causes it (never by a policy's name).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.differential.test_kyverno import CORPUS, REPO, SUITES, oracle
from tests.e2e.conftest import KubeCluster
from vpol.cli.kyverno_test import find_test_files
from vpol.model.parse import parse_exception
from vpol.policies.mutating.map import desired_map_objects
from vpol.policies.mutating.model import parse_mutating_policy
from vpol.policies.validating.model import parse_policy
from vpol.policies.validating.vap import desired_objects

KINDS = {"ValidatingPolicy": "validating", "MutatingPolicy": "mutating"}
SERVER_FIELDS = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields")
#: Why vpol leaves a policy to its webhook although the API server accepts Kyverno's objects: each a class
#: where those objects would decide otherwise than the policy does in Kyverno's own engine (docs/kyverno-compatibility.md).
SEMANTIC_REASONS = (
    r"JSON mode policies are evaluated by vpol only",  # a VAP would validate Kubernetes objects
    r"admission evaluation is disabled",  # a VAP would enforce at admission
    r"calls orValue on a value that may not be an optional",  # cel-go refuses it at run time
    r"reads request\.object or request\.oldObject",  # the API server's request has neither
    r"chooses other targets: requests are not mutated themselves",  # a MAP would mutate the trigger
    r"reads variables, which a MutatingAdmissionPolicy evaluates only after",  # match conditions first
    r"reads the exceptions variable, which only vpol provides",
)


def _documents(paths: list[Path]) -> list[dict[str, Any]]:
    out = []
    for path in paths:
        if path.is_file():
            out += [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
    return out


def cases() -> Iterator[tuple[str, dict[str, Any], list[dict[str, Any]]]]:
    """(where, policy document, the exception documents of its suite) for every cluster-wide policy, once."""
    seen: set[str] = set()
    for test_file in find_test_files([str(REPO / "examples"), str(CORPUS), str(SUITES)]):
        for spec in yaml.safe_load_all(test_file.read_text()):
            if not isinstance(spec, dict):
                continue
            files = lambda key: [test_file.parent / str(f) for f in  # noqa: E731
                                 ([spec[key]] if isinstance(spec.get(key), str) else spec.get(key) or [])]
            docs = _documents(files("policies") + files("exceptions"))
            exceptions = [d for d in docs if d.get("kind") == "PolicyException"
                          and str(d.get("apiVersion", "")).startswith("policies.kyverno.io/")]
            for doc in docs:
                if doc.get("kind") not in KINDS or not str(doc.get("apiVersion", "")).startswith("policies."):
                    continue
                key = json.dumps([doc, exceptions], sort_keys=True, default=str)
                if key in seen:
                    continue
                seen.add(key)
                yield str(test_file.parent.relative_to(REPO.parent)), doc, exceptions


def opted_in(doc: dict[str, Any], uid: str, *, no_controllers: bool = False) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    doc.setdefault("metadata", {})["uid"] = uid
    spec = doc.setdefault("spec", {})
    autogen = spec.get("autogen") if isinstance(spec.get("autogen"), dict) else {}
    key = "validatingAdmissionPolicy" if doc["kind"] == "ValidatingPolicy" else "mutatingAdmissionPolicy"
    autogen[key] = {"enabled": True}
    if no_controllers:
        autogen["podControllers"] = {"controllers": []}
    spec["autogen"] = autogen
    return doc


def kyverno_generated(binary: str, policies: list[dict[str, Any]],
                      exceptions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    import subprocess

    case = {"generate": True, "validating": [p for p in policies if p["kind"] == "ValidatingPolicy"],
            "mutating": [p for p in policies if p["kind"] == "MutatingPolicy"], "exceptions": exceptions}
    proc = subprocess.run([binary], input=json.dumps(case, default=str), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    answer = json.loads(proc.stdout)
    assert "error" not in answer, answer["error"]
    return list(answer["generated"])


def vpol_generated(doc: dict[str, Any], exceptions: list[dict[str, Any]], *, force: bool) -> tuple[
        list[dict[str, Any]], str]:
    """vpol's objects for the policy (opt-in mode; ``force``: its default mode) and why none, if none."""
    excs = [e for e in (parse_exception(x)[0] for x in exceptions) if e is not None]
    if doc["kind"] == "ValidatingPolicy":
        policy, problems = parse_policy(doc)
        assert policy is not None, problems
        plan = desired_objects(policy, exceptions=excs, force=force)
    else:
        mpol, problems = parse_mutating_policy(doc)
        assert mpol is not None, problems
        plan = desired_map_objects(mpol, exceptions=excs, force=force)
    return plan.objects, plan.reason


def dry_run(cluster: KubeCluster, obj: dict[str, Any]) -> dict[str, Any] | str:
    """The object as the API server would store it, or its refusal."""
    api = client.AdmissionregistrationV1Api(cluster.api_client)
    create = getattr(api, "create_" + re.sub(r"(?<!^)([A-Z])", r"_\1", obj["kind"]).lower())
    try:
        resp = create(body=obj, dry_run="All", _preload_content=False)
    except ApiException as exc:
        return f"HTTP {exc.status}: {json.loads(exc.body or '{}').get('message', exc.reason)}"
    return dict(json.loads(resp.data))


def stored(obj: dict[str, Any]) -> dict[str, Any]:
    """What is compared of a stored object: all but the server's own metadata and vpol's own labels and
    annotations."""
    obj = copy.deepcopy(obj)
    md = obj["metadata"]
    for key in SERVER_FIELDS:
        md.pop(key, None)
    md["labels"] = {k: v for k, v in (md.get("labels") or {}).items() if not k.startswith("vpol.kyverno.io/")}
    annotations = {k: v for k, v in (md.pop("annotations", None) or {}).items() if not k.startswith("vpol.kyverno.io/")}
    if annotations:
        md["annotations"] = annotations
    obj.pop("status", None)
    return obj


def with_vpols_differences(kyverno: dict[str, Any], doc: dict[str, Any]) -> dict[str, Any]:
    """Kyverno's stored object with vpol's documented differences applied, each decided by the policy's own
    fields: failurePolicy is the policy's (Kyverno's objects keep the API server's default, Fail); a MAP keeps
    the whole matchConstraints (Kyverno's keeps only the resource rules)."""
    obj = copy.deepcopy(kyverno)
    spec = doc.get("spec") or {}
    if obj["kind"] in ("ValidatingAdmissionPolicy", "MutatingAdmissionPolicy") and spec.get("failurePolicy"):
        obj["spec"]["failurePolicy"] = spec["failurePolicy"]
    if obj["kind"] == "MutatingAdmissionPolicy":
        constraints = dict(spec.get("matchConstraints") or {})
        ours = obj["spec"]["matchConstraints"]
        for key in ("excludeResourceRules", "namespaceSelector", "objectSelector", "matchPolicy"):
            if key in constraints:
                ours[key] = constraints[key]
        for key in ("excludeResourceRules",):
            for rule in ours.get(key) or []:
                rule.setdefault("scope", "*")
    return obj


def exceptions_unordered(obj: dict[str, Any], doc: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with the matchConditions its exceptions add sorted: Kyverno's generator takes exceptions in its
    informer cache's order, which is a Go map's (client-go's threadSafeMap.List), so only a single exception's
    conditions have an order to compare (vpol takes them by namespace and name)."""
    obj = copy.deepcopy(obj)
    conditions = (obj.get("spec") or {}).get("matchConditions")
    if not conditions:
        return obj
    own = len((doc.get("spec") or {}).get("matchConditions") or [])
    key = lambda c: (c["name"], c["expression"])  # noqa: E731
    if obj["kind"] == "ValidatingAdmissionPolicy":
        obj["spec"]["matchConditions"] = conditions[:own] + sorted(conditions[own:], key=key)
    else:
        cut = len(conditions) - own
        obj["spec"]["matchConditions"] = sorted(conditions[:cut], key=key) + conditions[cut:]
    return obj


def fine_grained_with_conditions(doc: dict[str, Any], exceptions: list[dict[str, Any]]) -> bool:
    """Whether an exception of the policy allows images or values under conditions, or exempts everything
    without conditions: vpol's object then follows Kyverno's engine, not its generator
    (vpol.desired.admission_policy.exception_parts)."""
    name = (doc.get("metadata") or {}).get("name")
    for exc in exceptions:
        spec = exc.get("spec") or {}
        refs = [r for r in spec.get("policyRefs") or [] if isinstance(r, dict) and r.get("name") == name]
        fine, conditions = spec.get("images") or spec.get("allowedValues"), spec.get("matchConditions")
        if refs and bool(fine) == bool(conditions):
            return True
    return False


@pytest.mark.slow
def test_vpols_generated_objects_are_kyvernos(own_cluster: KubeCluster) -> None:
    binary = oracle()
    compared = identical = kyverno_refused = semantic = 0
    by_kind: dict[str, int] = {}
    differences: list[str] = []
    reasons: dict[str, int] = {}
    for n, (where, doc, exceptions) in enumerate(cases()):
        for no_controllers in (False, True):
            policy = opted_in(doc, f"00000000-0000-0000-0000-{n:012d}", no_controllers=no_controllers)
            (theirs,) = kyverno_generated(binary, [policy], exceptions)
            if theirs.get("skip"):
                if "useServerSideApply" in theirs["skip"]:
                    assert not vpol_generated(policy, exceptions, force=True)[0], where
                continue
            label = f"{where}: {doc['kind']} {policy['metadata']['name']}" + (" (no controllers)" * no_controllers)
            ours, why = vpol_generated(policy, exceptions, force=False)
            ours_default, _ = vpol_generated(policy, exceptions, force=True)
            # vpol's default mode generates the same objects for a policy that opts in.
            assert ours_default == ours, label
            theirs_stored = [dry_run(own_cluster, o) for o in theirs["objects"]]
            refused = [r for r in theirs_stored if isinstance(r, str)]
            if not ours:
                if refused:
                    kyverno_refused += 1  # the API server refuses what Kyverno generates: vpol's webhook enforces it
                    continue
                found = next((r for r in SEMANTIC_REASONS if re.search(r, why)), None)
                assert found, f"{label}: vpol generates nothing ({why}) where the API server accepts Kyverno's objects"
                reasons[found] = reasons.get(found, 0) + 1
                semantic += 1
                continue
            # Pod-controller variants are vpol's own (Kyverno generates none): the policy's own objects compare.
            ours = [o for o in ours if "-autogen-" not in o["metadata"]["name"]]
            assert not refused, f"{label}: vpol generates, but the API server refuses Kyverno's objects: {refused}"
            ours_stored = [dry_run(own_cluster, o) for o in ours]
            assert all(isinstance(o, dict) for o in ours_stored), f"{label}: {ours_stored}"
            if fine_grained_with_conditions(policy, exceptions):
                continue  # vpol's objects decide as Kyverno's engine (unit tests in tests/unit/desired/test_vap.py)
            compared += 1
            by_kind[doc["kind"]] = by_kind.get(doc["kind"], 0) + 1
            expected = [exceptions_unordered(stored(with_vpols_differences(t, policy)), policy)  # type: ignore[arg-type]
                        for t in theirs_stored]
            got = [exceptions_unordered(stored(o), policy) for o in ours_stored]  # type: ignore[arg-type]
            if got == expected:
                identical += 1
            else:
                differences.append(f"{label}:\n  kyverno {json.dumps(expected, sort_keys=True)}\n"
                                   f"  vpol    {json.dumps(got, sort_keys=True)}")
    print(f"{compared} policies compared {by_kind} ({identical} identical); {kyverno_refused} where the API server refuses "
          f"Kyverno's objects; {semantic} left to vpol's webhook for these reasons: {reasons}")
    assert compared >= 60 and by_kind.get("MutatingPolicy", 0) >= 10, by_kind
    assert not differences, f"{len(differences)} differ:\n" + "\n".join(differences[:20])
