"""``vpol test``: running Kyverno CLI test files (``kyverno-test.yaml``).

A test file (``cli.kyverno.io/v1alpha1``, kind ``Test``) names policies,
resources (or JSON payloads), optional exceptions, a values file, a context
file, cluster resources, mocked API answers and GlobalContextEntries
(``globalContextEntries``, vpol.cli.global_context), and lists expected results per policy,
resource and kind. Each expectation is reported as agreed or not. Payload
modes vpol does not support (HTTP, Envoy) are reported as unsupported, not
as failures of the engine.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vpol.cel.backend import using
from vpol.cli.context import build_backend, load_user_info, load_values
from vpol.cli.global_context import load_mock_entries
from vpol.cli.inputs import Loaded, expand, load_documents, load_exceptions, load_policies, load_resources
from vpol.cli.resolve import resolver
from vpol.engine.evaluate import PASS, SKIP, Result, compile_exception
from vpol.engine.image_verification import Outcomes, VerificationCache
from vpol.engine.request import Subject
from vpol.engine.subjects import json_subject, subject_for
from vpol.model.documents import Document
from vpol.model.problems import InputError, Problem
from vpol.oci.registry import RegistryClient
from vpol.policies.deleting.engine import DeletingPolicyEngine
from vpol.policies.generating.engine import GeneratingPolicyEngine, Placement
from vpol.policies.image_validating.engine import ImagePolicyEngine, apply_required
from vpol.policies.mutating.engine import MutatingPolicyEngine, Mutated
from vpol.policies.mutating.mutate_existing import offline_runs
from vpol.policies.validating.engine import PolicyEngine

TEST_FILE_NAMES = ("kyverno-test.yaml", "kyverno-test.yml")
UNSUPPORTED_KEYS = ("httpPayloads", "envoyPayloads")


@dataclass
class Check:
    test: str
    policy: str
    resource: str
    kind: str
    expected: str
    actual: str = ""
    message: str = ""
    status: str = "agree"  # agree, disagree, unsupported, error, not checked

    @property
    def ok(self) -> bool:
        return self.status in ("agree", "unsupported", "not checked")


@dataclass
class TestOutcome:
    file: str
    name: str
    checks: list[Check] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    unsupported: str = ""


def find_test_files(paths: Iterable[str]) -> list[Path]:
    found: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_file():
            found.append(p)
        elif p.is_dir():
            found.extend(f for f in expand([raw], hidden=True) if f.name in TEST_FILE_NAMES)
    return sorted(set(found))


def _rel(base: Path, items: Any) -> list[str]:
    if items is None:
        return []
    if isinstance(items, str):
        items = [items]
    return [str(base / str(i)) for i in items]


def _resource_names(doc: Document) -> set[str]:
    md = doc.data.get("metadata") or {}
    name = str(md.get("name", ""))
    ns = str(md.get("namespace", "") or "")
    names = {name}
    names.add(f"{ns or 'default'}/{name}")
    return names


def run_test_document(doc: Document) -> TestOutcome:
    spec = doc.data if isinstance(doc.data, dict) else {}
    base = Path(doc.file).parent
    name = str((spec.get("metadata") or {}).get("name", "")) or Path(doc.file).parent.name
    outcome = TestOutcome(file=doc.file, name=name)
    if spec.get("kind") != "Test":
        outcome.problems.append(Problem(f'not a Kyverno CLI test (kind "{spec.get("kind")}")', file=doc.file))
        return outcome
    unsupported = [k for k in UNSUPPORTED_KEYS if spec.get(k)]

    loaded = load_policies(_rel(base, spec.get("policies")), Loaded(), strict_kinds=False)
    load_exceptions(_rel(base, spec.get("exceptions")), loaded)
    load_resources(_rel(base, spec.get("resources")), loaded)
    # Objects the MutatingPolicies with mutateExisting change (Kyverno's targetResources); they are cluster
    # objects too, for resource.Get/List.
    targets = load_resources(_rel(base, spec.get("targetResources")), Loaded())
    outcome.problems.extend(targets.unreadable)
    mode_problems = [p for p in loaded.problems if "is not supported by vpol" in p.message]
    if mode_problems:
        unsupported.append(mode_problems[0].message)
    if unsupported:
        outcome.unsupported = "; ".join(unsupported)
        for r in spec.get("results") or []:
            outcome.checks.append(Check(name, str(r.get("policy", "")), ",".join(r.get("resources") or []),
                                        str(r.get("kind", "")), str(r.get("result", "")), status="unsupported",
                                        message=outcome.unsupported))
        return outcome
    outcome.problems.extend(loaded.unreadable)
    outcome.problems.extend(p for p in loaded.problems if p.severity == "error")

    payloads: list[tuple[str, Any]] = []
    for path in _rel(base, spec.get("jsonPayloads")):
        try:
            for d in load_documents(Path(path)):
                payloads.append((Path(path).name, d.data))
        except InputError as exc:
            outcome.problems.append(exc.problem)

    try:
        values = load_values(_rel(base, spec.get("variables")))
        values.user_info = load_user_info(_rel(base, spec.get("userinfo")))
        global_context = load_mock_entries(spec.get("globalContextEntries"), base, doc.file)
        backend, extra_types = build_backend(
            context_files=_rel(base, spec.get("context")),
            cluster_resource_files=_rel(base, spec.get("clusterResources")) + _rel(base, spec.get("targetResources")),
            api_call_responses=[r for r in spec.get("apiCallResponses") or [] if isinstance(r, dict)],
            global_context=global_context,
        )
    except InputError as exc:
        outcome.problems.append(exc.problem)
        return outcome
    resolve = resolver(extra_types)

    exceptions = [compile_exception(e) for e in loaded.exceptions]
    engines = {p.name: PolicyEngine(p, exceptions) for p in loaded.policies}
    mutating = [MutatingPolicyEngine(p, exceptions) for p in loaded.mutating]
    for engine in engines.values():
        outcome.problems.extend(engine.compiled.errors())
    for mutating_engine in mutating:
        outcome.problems.extend(mutating_engine.compiled.errors())
    expected_patched: list[Document] = []
    for path in _rel(base, spec.get("patchedResources")):
        try:
            expected_patched.extend(load_documents(Path(path)))
        except InputError as exc:
            outcome.problems.append(exc.problem)
    # GeneratingPolicies run as in Kyverno's CLI: generated objects placed as its fake context places them (or,
    # when the test gives cluster resources, its cluster context in CLI evaluation mode), every exception of the
    # test applying to each of them, a namespaced one handed every resource.
    placement = Placement.KYVERNO_CLI_CLUSTER if spec.get("clusterResources") else Placement.KYVERNO_CLI

    def scope(api_version: str, kind: str) -> bool | None:
        known = resolve(api_version, kind)
        return None if known is None else known.namespaced

    generating = {p.name: GeneratingPolicyEngine(p, exceptions, namespaced=scope, placement=placement,
                                                 every_exception=True) for p in loaded.generating}
    deleting = {p.name: DeletingPolicyEngine(p, exceptions, confined=False) for p in loaded.deleting}
    for generating_engine in generating.values():
        outcome.problems.extend(generating_engine.compiled.errors())
    for deleting_engine in deleting.values():
        outcome.problems.extend(deleting_engine.compiled.errors())
    chains = _Chains(mutating, values, resolve)
    images = _ImageRuns(loaded.image_validating, exceptions, values, resolve)
    outcome.problems.extend(p for engine in images.engines for p in engine.compiled.errors())
    fail_on_missing = bool(spec.get("failOnMissingResources"))
    target_runs = _TargetRuns(mutating, loaded.resources, targets.resources, values, resolve)

    with using(backend):
        for expected in spec.get("results") or []:
            policy_name = str(expected.get("policy", ""))
            bare_name = policy_name.rsplit("/", 1)[-1]  # Kyverno's CLI matches a namespaced policy by its name
            if bare_name in generating and not expected.get("isValidatingPolicy"):
                outcome.checks.extend(_check_generation(name, expected, generating[bare_name], loaded.resources,
                                                        values, resolve, base))
                continue
            if bare_name in images.by_name and not expected.get("isValidatingPolicy"):
                outcome.checks.extend(images.check(name, expected, loaded.resources, payloads))
                continue
            if bare_name in deleting and not expected.get("isValidatingPolicy"):
                outcome.checks.extend(_check_deletion(name, expected, deleting[bare_name], loaded.resources,
                                                      values, resolve))
                continue
            if any(m.policy.name == bare_name for m in mutating) and not expected.get("isValidatingPolicy"):
                expected = {**expected, "policy": bare_name}
                # patchedResources may be given per result (Kyverno's usual layout) or for the whole test.
                given = spec.get("patchedResources") or expected.get("patchedResources") or \
                    expected.get("patchedResource")
                wanted: list[Document] | None = list(expected_patched) if given else None
                for path in _rel(base, expected.get("patchedResources") or expected.get("patchedResource")):
                    try:
                        assert wanted is not None
                        wanted.extend(load_documents(Path(path)))
                    except InputError as exc:
                        outcome.problems.append(exc.problem)
                outcome.checks.extend(_check_mutation(name, expected, chains, loaded.resources, wanted,
                                                      fail_on_missing or bool(expected.get("failOnMissingResources")),
                                                      target_runs))
                continue
            outcome.checks.extend(_check(name, expected, engines, loaded.resources, payloads, values, resolve,
                                         chains))
    return outcome


class _Chains:
    """Every MutatingPolicy of a test applied in order to each resource (computed once per resource)."""

    def __init__(self, engines: list[MutatingPolicyEngine], values: Any, resolve: Any) -> None:
        self.engines = engines
        self.values = values
        self.resolve = resolve
        self._done: dict[tuple[int, str], tuple[dict[str, Any], dict[str, tuple[Result, dict[str, Any]]]]] = {}

    def run(self, doc: Document, operation: str) -> tuple[dict[str, Any], dict[str, tuple[Result, dict[str, Any]]]]:
        """(the final object, policy name -> (its result, the object after it))."""
        key = (id(doc.data), operation)
        if key not in self._done:
            subject = subject_for(doc.data, operation=operation, resolve=self.resolve,
                                  namespaces=self.values.namespaces, user_info=self.values.user_info)
            per_policy: dict[str, tuple[Result, dict[str, Any]]] = {}
            current = subject
            for engine in self.engines:
                mutated = engine.mutate(current)
                if mutated is None:
                    continue
                per_policy[engine.policy.name] = (mutated.result, mutated.object)
                current = dataclasses.replace(current, object=mutated.object)
            self._done[key] = (current.object or doc.data, per_policy)
        return self._done[key]


class _ImageRuns:
    """ImageValidatingPolicies as Kyverno's CLI runs them (HandleValidating on each resource: every policy of the test,
    ``required`` decided across them, no digest mutation), reading the images' registries; verifications cached for
    the run. A result checks every response of the policy (the kind has no rules)."""

    def __init__(self, policies: list[Any], exceptions: list[Any], values: Any, resolve: Any) -> None:
        self.engines = [ImagePolicyEngine(p, exceptions) for p in policies]
        self.by_name = {e.policy.name: e for e in self.engines}
        self.values, self.resolve = values, resolve
        self.registry = RegistryClient()
        self.cache = VerificationCache()
        self._done: dict[tuple[int, str], dict[str, Result]] = {}

    def _run(self, key: tuple[int, str], subject: Subject) -> dict[str, Result]:
        if key not in self._done:
            verified = Outcomes()
            loaded: dict[str, Any] = {}
            outcomes = [o for e in self.engines if (o := e.evaluate(subject, registry=self.registry, outcomes=verified,
                                                                    cache=self.cache, loaded=loaded)) is not None]
            apply_required(outcomes, verified)
            self._done[key] = {o.result.policy.rsplit("/", 1)[-1]: o.result for o in outcomes}
        return self._done[key]

    def check(self, test: str, expected: dict[str, Any], resources: list[Document],
              payloads: list[tuple[str, Any]]) -> list[Check]:
        policy = str(expected.get("policy", "")).rsplit("/", 1)[-1]
        kind = str(expected.get("kind", ""))
        want = str(expected.get("result", ""))
        operation = str(expected.get("operation", "") or "CREATE").upper()
        names = [str(n) for n in (expected.get("resources") or [])]
        engine = self.by_name[policy]
        out: list[Check] = []
        if engine.policy.json_mode:
            for pname, payload in [(n, p) for n, p in payloads if not names or n in names]:
                got = self._run((id(payload), "JSON"), json_subject(payload)).get(policy)
                out.append(_compare(test, policy, pname, kind, want, got))
            return out
        candidates = [d for d in resources if not kind or str(d.data.get("kind", "")) == kind]
        for n in names or [str((d.data.get("metadata") or {}).get("name", "")) for d in candidates]:
            docs = [d for d in candidates if n in _resource_names(d)]
            if not docs:
                out.append(Check(test, policy, n, kind, want, status="error",
                                 message=f"resource {kind}/{n} is not among the test's resources"))
            for doc in docs:
                subject = subject_for(doc.data, operation=operation, resolve=self.resolve,
                                      namespaces=self.values.namespaces, user_info=self.values.user_info)
                got = self._run((id(doc.data), operation), subject).get(policy)
                out.append(_compare(test, policy, n, kind, want, got) if got is not None else _not_found(
                    test, policy, n, kind, want))
        return out


def _not_found(test: str, policy: str, resource: str, kind: str, want: str) -> Check:
    """An ImageValidatingPolicy that does not apply to a resource (its matchConstraints or matchConditions) gives
    no result in Kyverno's CLI, where the other kinds give ``skip``: any expectation of it fails there ("Not
    found"), and here."""
    return Check(test, policy, resource, kind, want, "-",
                 "no result: the policy does not apply to this resource (an ImageValidatingPolicy then has none, "
                 "not even skip)", "disagree")


class _TargetRuns:
    """mutateExisting offline, as Kyverno's CLI runs it: every trigger resource against every target resource of
    each policy with mutateExisting (a target of the policy's target rules, or one its expression resolves from
    the trigger); each target mutated with the trigger's request. Computed once per test."""

    def __init__(self, engines: list[MutatingPolicyEngine], triggers: list[Document], targets: list[Document],
                 values: Any, resolve: Any) -> None:
        self.by_target: dict[tuple[str, str, str, str], list[tuple[str, Mutated]]] = {}
        self.targets = targets
        by_key = {e.policy.key: e for e in engines}
        subjects = [subject_for(d.data, operation="UPDATE", resolve=resolve, namespaces=values.namespaces)
                    for d in targets]
        trigger_subjects = [subject_for(d.data, operation="CREATE", resolve=resolve, namespaces=values.namespaces,
                                        user_info=values.user_info) for d in triggers] if subjects else []

        def mutate(policy: Any, target: Any) -> tuple[Result, dict[str, Any]]:
            mutated = by_key[policy.key].mutate_target(target)
            return mutated.result, mutated.object

        runs = offline_runs([e.policy for e in engines], trigger_subjects, subjects,
                            resolve=lambda p, t: by_key[p.key].resolve_targets(t, conditions=False), mutate=mutate)
        for policy, index, result, patched in runs:
            self.by_target.setdefault(_identity(targets[index].data), []).append(
                (policy.name, Mutated(result, patched)))

    def find(self, name: str, kind: str) -> list[Document]:
        return [d for d in self.targets if (not kind or str(d.data.get("kind", "")) == kind) and
                name in _resource_names(d)]


def tidy(value: Any) -> Any:
    """``value`` without nulls, empty maps and empty lists, at any depth (how Kyverno's CLI compares)."""
    if isinstance(value, dict):
        out = {k: tidy(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v not in (None, {}, [])}
    if isinstance(value, list):
        items = [tidy(v) for v in value]
        return [v for v in items if v not in (None, {}, [])]
    return value


def _identity(obj: dict[str, Any]) -> tuple[str, str, str, str]:
    meta = obj.get("metadata") or {}
    namespace = str(meta.get("namespace") or "")
    return str(obj.get("apiVersion", "")), str(obj.get("kind", "")), namespace or "default", str(meta.get("name", ""))


def _without_namespace_default(obj: Any) -> Any:
    """Kyverno's CLI gives namespaced inputs without a namespace ``default``; compare them alike."""
    if isinstance(obj, dict) and isinstance(obj.get("metadata"), dict) and obj["metadata"].get("namespace") == "default":
        return {**obj, "metadata": {k: v for k, v in obj["metadata"].items() if k != "namespace"}}
    return obj


def _check_mutation(test: str, expected: dict[str, Any], chains: _Chains, resources: list[Document],
                    patched: list[Document] | None, fail_on_missing: bool,
                    target_runs: _TargetRuns | None = None) -> list[Check]:
    """``patched``: the expected patched resources, None when the test gives none."""
    policy = str(expected.get("policy", ""))
    kind = str(expected.get("kind", ""))
    want = str(expected.get("result", ""))
    operation = str(expected.get("operation", "") or "CREATE").upper()
    names = [str(n) for n in (expected.get("resources") or [])]
    candidates = [d for d in resources if not kind or str(d.data.get("kind", "")) == kind]
    out: list[Check] = []
    chosen: list[tuple[str, Document]] = []
    for n in names or [str((d.data.get("metadata") or {}).get("name", "")) for d in candidates]:
        docs = [d for d in candidates if n in _resource_names(d)]
        target_docs = target_runs.find(n, kind) if target_runs is not None else []
        if target_docs and not docs:
            assert target_runs is not None
            for doc in target_docs:
                runs = [m for p, m in target_runs.by_target.get(_identity(doc.data), []) if p == policy]
                out.append(_check_target(test, policy, n, kind, want, runs[-1] if runs else None, patched,
                                         fail_on_missing))
            continue
        if not docs:
            out.append(Check(test, policy, n, kind, want, status="error",
                             message=f"resource {kind}/{n} is not among the test's resources"))
        chosen.extend((n, d) for d in docs if (n, d) not in chosen)
    for n, doc in chosen:
        _final, per_policy = chains.run(doc, operation)
        got = per_policy.get(policy)
        if got is None:
            out.append(_compare(test, policy, n, kind, want, None))
            continue
        result, mutated = got
        check = _compare(test, policy, n, kind, want, result)
        if patched is not None:
            wanted = next((p.data for p in patched if isinstance(p.data, dict) and _identity(p.data) ==
                           _identity(mutated)), None)
            if wanted is None:
                # As Kyverno's CLI: a resource missing from patchedResources is not checked at all, unless
                # failOnMissingResources says it must be there.
                check = Check(test, policy, n, kind, want, result.result, "resource not found in patchedResources",
                              "disagree" if fail_on_missing else "not checked")
            elif not check.ok:
                pass
            elif tidy(_without_namespace_default(wanted)) != tidy(_without_namespace_default(mutated)):
                check = Check(test, policy, n, kind, want, result.result,
                              "the patched resource differs from patchedResources:\n" + _diff(wanted, mutated),
                              "disagree")
        out.append(check)
    return out


def _check_target(test: str, policy: str, name: str, kind: str, want: str, mutated: Mutated | None,
                  patched: list[Document] | None, fail_on_missing: bool) -> Check:
    """An expectation about a target of mutateExisting: its result, and the patched target against
    patchedResources."""
    check = _compare(test, policy, name, kind, want, mutated.result if mutated is not None else None)
    if mutated is None or patched is None or not check.ok:
        return check
    wanted = next((p.data for p in patched if isinstance(p.data, dict) and _identity(p.data) ==
                   _identity(mutated.object)), None)
    if wanted is None:
        return Check(test, policy, name, kind, want, mutated.result.result, "target not found in patchedResources",
                     "disagree" if fail_on_missing else "not checked")
    if tidy(_without_namespace_default(wanted)) != tidy(_without_namespace_default(mutated.object)):
        return Check(test, policy, name, kind, want, mutated.result.result,
                     "the patched target differs from patchedResources:\n" + _diff(wanted, mutated.object),
                     "disagree")
    return check


def _chosen(expected: dict[str, Any], resources: list[Document]) -> tuple[list[tuple[str, Document]], list[str]]:
    """The resources an expectation names (all of its kind when it names none), and the names not found."""
    kind = str(expected.get("kind", ""))
    candidates = [d for d in resources if not kind or str(d.data.get("kind", "")) == kind]
    names = [str(n) for n in (expected.get("resources") or [])]
    if not names:
        return [(str((d.data.get("metadata") or {}).get("name", "")), d) for d in candidates], []
    chosen: list[tuple[str, Document]] = []
    missing = []
    for n in names:
        docs = [d for d in candidates if n in _resource_names(d)]
        missing += [] if docs else [n]
        chosen.extend((n, d) for d in docs if (n, d) not in chosen)
    return chosen, missing


def _not_among(test: str, expected: dict[str, Any], names: list[str]) -> list[Check]:
    kind = str(expected.get("kind", ""))
    return [Check(test, str(expected.get("policy", "")), n, kind, str(expected.get("result", "")), status="error",
                  message=f"resource {kind}/{n} is not among the test's resources") for n in names]


#: What Kyverno's CLI says of a resource no result of the policy names (a failure, whatever was expected).
NOT_FOUND = "not found: the policy gave no result for this resource"


def without_generate_labels(obj: Any) -> Any:
    """``obj`` with its labels as Kyverno's CLI compares generated objects: every ``generate.kyverno.io/`` label
    dropped and ``app.kubernetes.io/managed-by: kyverno`` set (on the expected and the generated object alike)."""
    if not isinstance(obj, dict):
        return obj
    meta: dict[str, Any] = obj["metadata"] if isinstance(obj.get("metadata"), dict) else {}
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if not str(k).startswith("generate.kyverno.io/")}
    labels["app.kubernetes.io/managed-by"] = "kyverno"
    return {**obj, "metadata": {**meta, "labels": labels}}


def _generated_identity(obj: Any) -> tuple[str, str, str, str]:
    meta = obj.get("metadata") or {} if isinstance(obj, dict) else {}
    return (str(obj.get("apiVersion", "")), str(obj.get("kind", "")), str(meta.get("namespace") or ""),
            str(meta.get("name", ""))) if isinstance(obj, dict) else ("", "", "", "")


def _as_kyverno_reads(doc: Any, namespaced: Callable[[str, str], bool | None]) -> Any:
    """An expected object as Kyverno's CLI reads a manifest: a namespaced kind (or one it does not know) without a
    namespace is in ``default``."""
    if not isinstance(doc, dict) or not isinstance(doc.get("metadata"), dict) or doc["metadata"].get("namespace"):
        return doc
    if namespaced(str(doc.get("apiVersion") or ""), str(doc.get("kind") or "")) is False:
        return doc
    return {**doc, "metadata": {**doc["metadata"], "namespace": "default"}}


def _compare_generated(generated: dict[str, Any], files: list[str],
                       namespaced: Callable[[str, str], bool | None]) -> str:
    """"" when one of ``files`` holds an object equal to ``generated`` (found by apiVersion, kind, namespace and
    name; compared as Kyverno's CLI compares them), else why not."""
    why = ""
    for path in files:
        try:
            docs = [_as_kyverno_reads(d.data, namespaced) for d in load_documents(Path(path))]
        except InputError as exc:
            why = why or exc.problem.render()
            continue
        wanted = next((d for d in docs if _generated_identity(d) == _generated_identity(generated)), None)
        if wanted is None:
            meta = generated.get("metadata") or {}
            why = why or f"resource with name {meta.get('name', '')} not found in {path}"
            continue
        if tidy(without_generate_labels(wanted)) == tidy(without_generate_labels(generated)):
            return ""
        why = "the generated resource differs from the expected one:\n" + _diff(without_generate_labels(wanted),
                                                                                without_generate_labels(generated))
    return why


def _check_generation(test: str, expected: dict[str, Any], engine: GeneratingPolicyEngine,
                      resources: list[Document], values: Any, resolve: Any, base: Path) -> list[Check]:
    """A GeneratingPolicy's expectation, as Kyverno's CLI checks it: each named resource is a trigger (the
    expectation's operation, CREATE by default); a generation that produced objects is one check per object (its
    result, and the object against ``generatedResource`` or one of ``generatedResources`` when given); one that
    produced none (an error, an exception, nothing generated) is one check of its result."""
    policy, kind, want = str(expected.get("policy", "")), str(expected.get("kind", "")), str(expected.get("result", ""))
    operation = str(expected.get("operation", "") or "CREATE").upper()
    files = _rel(base, expected.get("generatedResources")) or _rel(base, expected.get("generatedResource"))
    chosen, missing = _chosen(expected, resources)
    out = _not_among(test, expected, missing)
    for n, doc in chosen:
        subject = subject_for(doc.data, operation=operation, resolve=resolve, namespaces=values.namespaces,
                              user_info=values.user_info)
        generation = engine.generate(subject)
        if generation is None:
            out.append(Check(test, policy, n, kind, want, "", NOT_FOUND, "disagree"))
            continue
        result = generation.result
        # Kyverno's CLI lists the objects of a generation that passed only (an error leaves none behind).
        downstreams = generation.downstreams if result.result == PASS else []
        if not downstreams:
            out.append(_compare(test, policy, n, kind, want, result))
        for downstream in downstreams:
            obj = downstream.object
            _av, obj_kind, obj_namespace, obj_name = _generated_identity(obj)
            where = f"{n} -> {obj_kind}/{obj_namespace + '/' if obj_namespace else ''}{obj_name}"
            why = _compare_generated(obj, files, engine.namespaced) if files else ""
            out.append(Check(test, policy, where, kind, want, result.result, why, "disagree") if why else
                       _compare(test, policy, where, kind, want, result))
    return out


def _check_deletion(test: str, expected: dict[str, Any], engine: DeletingPolicyEngine, resources: list[Document],
                    values: Any, resolve: Any) -> list[Check]:
    """A DeletingPolicy's expectation, as Kyverno's CLI checks it: ``pass`` for a resource the policy would
    delete, ``fail`` for one it selects and keeps; no operation may be given."""
    policy, kind, want = str(expected.get("policy", "")), str(expected.get("kind", "")), str(expected.get("result", ""))
    if expected.get("operation"):
        return [Check(test, policy, ",".join(str(r) for r in expected.get("resources") or []), kind, want,
                      status="error", message="operation is not supported for deleting policies")]
    chosen, missing = _chosen(expected, resources)
    out = _not_among(test, expected, missing)
    for n, doc in chosen:
        subject = subject_for(doc.data, operation="CREATE", resolve=resolve, namespaces=values.namespaces,
                              user_info=values.user_info)
        result = engine.evaluate(subject)
        out.append(Check(test, policy, n, kind, want, "", NOT_FOUND, "disagree") if result is None else
                   _compare(test, policy, n, kind, want, result))
    return out


def _diff(want: Any, got: Any) -> str:
    import difflib

    import yaml

    a = yaml.safe_dump(tidy(_without_namespace_default(want)), sort_keys=True).splitlines()
    b = yaml.safe_dump(tidy(_without_namespace_default(got)), sort_keys=True).splitlines()
    return "\n".join(difflib.unified_diff(a, b, "expected", "vpol", lineterm=""))


def _check(test: str, expected: dict[str, Any], engines: dict[str, PolicyEngine], resources: list[Document],
           payloads: list[tuple[str, Any]], values: Any, resolve: Any, chains: _Chains | None = None) -> list[Check]:
    policy = str(expected.get("policy", ""))
    kind = str(expected.get("kind", ""))
    want = str(expected.get("result", ""))
    operation = str(expected.get("operation", "") or "CREATE").upper()
    names = [str(n) for n in (expected.get("resources") or [])]
    engine = engines.get(policy)
    out: list[Check] = []
    if engine is None:
        return [Check(test, policy, ",".join(names), kind, want, status="error",
                      message=f'policy "{policy}" is not among the test\'s policies')]

    if engine.policy.json_mode:
        chosen = [(n, p) for n, p in payloads if not names or n in names]
        if not chosen:
            return [Check(test, policy, ",".join(names), kind, want, status="error", message="no such payload")]
        for pname, payload in chosen:
            res = engine.evaluate(json_subject(payload))
            out.append(_compare(test, policy, pname, kind, want, res))
        return out

    candidates = [d for d in resources if not kind or str(d.data.get("kind", "")) == kind]
    if names:
        for n in names:
            docs = [d for d in candidates if n in _resource_names(d)]
            if not docs:
                out.append(Check(test, policy, n, kind, want, status="error",
                                 message=f"resource {kind}/{n} is not among the test's resources"))
            for d in docs:
                out.append(_evaluate_doc(test, engine, d, n, kind, want, operation, values, resolve, chains))
    else:
        for d in candidates:
            n = str((d.data.get("metadata") or {}).get("name", ""))
            out.append(_evaluate_doc(test, engine, d, n, kind, want, operation, values, resolve, chains))
    return out


def _evaluate_doc(test: str, engine: PolicyEngine, doc: Document, name: str, kind: str, want: str,
                  operation: str, values: Any, resolve: Any, chains: _Chains | None = None) -> Check:
    subject = subject_for(doc.data, operation=operation, resolve=resolve, namespaces=values.namespaces,
                          user_info=values.user_info)
    if chains is not None and chains.engines:
        # Validating policies see the object as the mutating policies left it (admission order).
        subject = dataclasses.replace(subject, object=chains.run(doc, operation)[0])
    res = engine.evaluate(subject)
    return _compare(test, engine.policy.name, name, kind, want, res)


def _compare(test: str, policy: str, resource: str, kind: str, want: str, res: Result | None) -> Check:
    # A resource the policy does not select counts as skip in Kyverno's CLI tests.
    actual = res.result if res is not None else SKIP
    message = res.message if res is not None else "not selected by matchConstraints"
    return Check(test, policy, resource, kind, want, actual, message,
                 "agree" if actual == want else "disagree")


def run_tests(paths: Iterable[str]) -> list[TestOutcome]:
    outcomes: list[TestOutcome] = []
    files = find_test_files(paths)
    for f in files:
        try:
            docs = load_documents(f)
        except InputError as exc:
            o = TestOutcome(file=str(f), name=f.parent.name)
            o.problems.append(exc.problem)
            outcomes.append(o)
            continue
        for d in docs:
            outcomes.append(run_test_document(d))
    return outcomes
