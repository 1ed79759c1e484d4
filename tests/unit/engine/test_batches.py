"""Policies evaluated together by one program (vpol.policies.validating.engine.Batches) get the results each gets on
its own:
on every suite of the corpus (as tests/differential/test_fused.py compares the fused fast path with the
expression-by-expression evaluation), and in the cases where the batch cannot answer (a part that fails, a false
matchCondition, policies it does not hold, more programs than it keeps)."""

from __future__ import annotations

import dataclasses
import random
from typing import Any


from tests.differential.test_kyverno import REPO, _backend, _values, _variations, every_suite
from tests.unit.engine.test_evaluate import resolve
from tests.unit.policies import make_policy, pod
from vpol.cel.backend import using
from vpol.cli.inputs import load_policies
from vpol.engine.evaluate import Result, SubjectData, compile_exception
from vpol.engine.subjects import subject_for
from vpol.model.policy import NamedExpression, PolicyException, PolicyRef
from vpol.policies.validating.engine import MAX_PART, Batches, PolicyEngine, _part_values


def _fields(results: list[Result]) -> list[Any]:
    return [dataclasses.astuple(r) for r in results]


def slow(engines: list[PolicyEngine]) -> list[PolicyEngine]:
    """The same policies without the fused fast path."""
    return [PolicyEngine(e.policy, e.exceptions, fused=False) for e in engines]


def alone(engines: list[PolicyEngine], subject: Any) -> list[Result]:
    """What the engines give one by one, each with its own subject data."""
    out = []
    for engine in engines:
        result = engine.evaluate(subject)
        if result is not None:
            out.append(result)
    return out


def test_batches_decide_as_each_policy_alone_on_every_suite() -> None:
    """Every suite's policies, with some Pod Security policies of examples/ beside them (so that suites of one
    policy are batched too, and Pods meet several policies), on the suite's resources and variations of them."""
    rng = random.Random(20261206)
    pod_security = load_policies([str(REPO / "examples" / "pod-security")]).policies[::4]
    beside = [PolicyEngine(p) for p in pod_security]
    beside_reference = slow(beside)
    subjects = batched = 0
    differences = []
    for test_file, suite in every_suite():
        if suite is None or not suite.loaded.policies:
            continue
        values = _values(suite)
        backend, resolve_suite = _backend(suite)
        exceptions = [compile_exception(e) for e in suite.loaded.exceptions]
        own = [PolicyEngine(p, exceptions) for p in suite.loaded.policies]
        batches = Batches([*own, *beside], limit=1000)
        reference = [*slow(own), *beside_reference]
        originals = [d.data for d in suite.loaded.resources if isinstance(d.data, dict)]
        objects = originals + [v for obj in originals for v in _variations(obj, rng)]
        for operation in ("CREATE", "UPDATE", "DELETE"):
            for obj in objects if operation == "CREATE" else originals:
                subject = subject_for(obj, operation=operation, resolve=resolve_suite,
                                      namespaces=values.namespaces, user_info=values.user_info)
                if operation == "UPDATE":
                    subject = dataclasses.replace(subject, old_object=subject.object)
                with using(backend):
                    got = _fields(batches.evaluate(subject, SubjectData(subject)))
                    want = _fields(alone(reference, subject))
                subjects += 1
                if got != want:
                    differences.append(f"{test_file.parent.name} on {subject.name} ({operation}):\n"
                                       f"  batch    {got}\n  one by one {want}")
        batched += sum(part is not None for part in batches._parts.values())
    print(f"{subjects} subjects, {batched} batches built")
    assert subjects >= 2000 and batched >= 50, (subjects, batched)  # batched: programs built
    assert not differences, f"{len(differences)} differences:\n" + "\n".join(differences[:20])


def _engines(*policies: Any, exceptions: tuple[PolicyException, ...] = ()) -> list[PolicyEngine]:
    compiled = [compile_exception(e) for e in exceptions]
    return [PolicyEngine(p, compiled) for p in policies]


NAMED = make_policy(name="named", validations=[{"expression": "object.spec.containers.all(c, c.name != '')"}])
IMAGES = make_policy(name="images", validations=[
    {"expression": "object.spec.containers.all(c, !c.image.endsWith(':latest'))", "message": "no latest"}])
LABELLED = make_policy(name="labelled", matchConditions=[
    {"name": "has-team", "expression": "has(object.metadata.labels) && 'team' in object.metadata.labels"}],
    validations=[{"expression": "object.metadata.labels.team != ''"}])
MISSING = make_policy(name="missing", validations=[{"expression": "object.spec.nodeName.size() > 0"}])
AUDITED = make_policy(name="audited", validations=[{"expression": "true"}],
                      auditAnnotations=[{"key": "who", "valueExpression": "object.metadata.name"}])


def test_a_batch_holds_the_policies_that_apply_and_answers_with_their_results() -> None:
    engines = _engines(NAMED, IMAGES, LABELLED, AUDITED)
    batches = Batches(engines)
    latest = {**pod(), "spec": {"containers": [{"name": "c", "image": "x:latest"}]}}
    for obj in (pod(labels={"team": "a"}), pod(), latest):
        subject = subject_for(obj, resolve=resolve)
        assert _fields(batches.evaluate(subject, SubjectData(subject))) == _fields(alone(slow(engines), subject))
    assert [part.members for part in batches._parts.values() if part is not None] == [(0, 1, 2)]
    # (the audited policy has no fused form)
    # A false matchCondition (its part is null) is said by name, as evaluating the policy alone says it.
    subject = subject_for(pod(), resolve=resolve)
    skipped = [r for r in batches.evaluate(subject, SubjectData(subject)) if r.policy == "labelled"]
    assert [(r.result, r.message) for r in skipped] == [("skip", "matchCondition has-team is false")]


def test_a_part_that_fails_leaves_every_policy_to_be_evaluated_alone() -> None:
    engines = _engines(NAMED, MISSING, IMAGES)
    batches = Batches(engines)
    subject = subject_for(pod(), resolve=resolve)
    results = batches.evaluate(subject, SubjectData(subject))
    assert [r.result for r in results] == ["pass", "error", "pass"]
    assert _fields(results) == _fields(alone(slow(engines), subject))


def test_policies_with_exceptions_and_autogen_variants_are_answered_as_alone() -> None:
    exempt = PolicyException(name="exempt", namespace="default", policy_refs=(PolicyRef(name="images"),),
                             match_conditions=(NamedExpression("web", "object.metadata.name == 'web'"),))
    engines = _engines(NAMED, IMAGES, LABELLED, exceptions=(exempt,))
    batches = Batches(engines)
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "default"},
                  "spec": {"template": {"metadata": {"labels": {"team": "a"}}, "spec": {"containers": [
                      {"name": "c", "image": "x:latest"}]}}}}
    for obj in (pod("web", labels={"team": "t"}), pod("other"), deployment):
        subject = subject_for(obj, resolve=resolve)
        assert _fields(batches.evaluate(subject, SubjectData(subject))) == _fields(alone(slow(engines), subject)), obj
    members = [part.members for part in batches._parts.values() if part is not None]
    # The Pods' program and the Deployment's (autogen variants); the policy with an exception is in neither.
    assert members == [(0, 2), (0, 2)]


def test_combinations_beyond_the_limit_are_evaluated_policy_by_policy() -> None:
    by_name = [make_policy(name=f"n{i}", rules=[{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                                 "resources": ["pods"], "resourceNames": [f"pod-{i}"]}],
                           validations=[{"expression": "true"}]) for i in range(4)]
    engines = _engines(NAMED, IMAGES, *by_name)
    batches = Batches(engines, limit=2)
    reference = slow(engines)
    for i in range(4):
        subject = subject_for(pod(f"pod-{i}"), resolve=resolve)
        assert _fields(batches.evaluate(subject, SubjectData(subject))) == _fields(alone(reference, subject))
    assert len(batches._parts) == 2 and all(part is not None for part in batches._parts.values())


def test_many_policies_make_programs_of_a_few_and_a_failing_one_costs_only_its_own() -> None:
    # One container: every policy passes but the last (1 > 1).
    several = [make_policy(name=f"c{i}", validations=[
        {"expression": f"size(object.spec.containers) > {i - 2 * MAX_PART + 2}"}]) for i in range(2 * MAX_PART)]
    engines = _engines(*several[:3], MISSING, *several[3:])
    batches = Batches(engines)
    subject = subject_for(pod(), resolve=resolve)
    results = batches.evaluate(subject, SubjectData(subject))
    assert _fields(results) == _fields(alone(slow(engines), subject))
    assert [r.result for r in results].count("error") == 1 and [r.result for r in results].count("fail") == 1
    parts = [part for part in batches._parts.values() if part is not None]
    assert len(parts) == 3 and all(len(part.members) <= MAX_PART for part in parts)
    assert sorted(i for part in parts for i in part.members) == list(range(len(engines)))
    # The program holding the failing policy gives no value; the others answer their policies.
    data = SubjectData(subject)
    answered = [_part_values(part, data) is not None for part in parts]
    assert answered == [3 not in part.members for part in parts] and answered.count(False) == 1


def test_policies_that_select_alike_are_matched_once_and_the_shape_is_each_ones_variant() -> None:
    elsewhere = make_policy(name="elsewhere", validations=[{"expression": "true"}], matchConstraints={
        "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                           "resources": ["pods"]}],
        "namespaceSelector": {"matchLabels": {"team": "other"}}})
    engines = _engines(NAMED, IMAGES, elsewhere, LABELLED)
    batches = Batches(engines)
    assert batches._same_as == [0, 0, 2, 0]
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "default"},
                  "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}}
    for obj in (pod(), deployment):
        subject = subject_for(obj, resolve=resolve)
        shape = batches.shape(subject)
        assert shape == tuple(PolicyEngine(e.policy).variant(subject) for e in engines)
        assert shape[2] is None and shape[0] is not None
        assert _fields(batches.evaluate(subject, SubjectData(subject))) == _fields(alone(slow(engines), subject))


def test_subjects_that_differ_in_one_group_share_the_other_groups_programs() -> None:
    """Pods of one namespace meet every policy, Pods of another all but one: the groups that one is not in keep
    their program for both."""
    team = {"namespaceSelector": {"matchLabels": {"team": "a"}}}
    several = [make_policy(name=f"c{i}", validations=[{"expression": "object.spec.containers.size() > 0"}])
               for i in range(2 * MAX_PART)]
    selective = make_policy(name="team-a", validations=[{"expression": "true"}], matchConstraints={
        "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                           "resources": ["pods"]}], **team})
    engines = _engines(selective, *several)
    batches = Batches(engines)
    reference = slow(engines)
    namespaces = {"a": {"metadata": {"name": "a", "labels": {"team": "a"}}},
                  "b": {"metadata": {"name": "b", "labels": {"team": "b"}}}}
    for namespace in ("a", "b", "a", "b"):
        subject = subject_for(pod(namespace=namespace), resolve=resolve, namespaces=namespaces)
        assert _fields(batches.evaluate(subject, SubjectData(subject))) == _fields(alone(reference, subject))
    # Three groups: the first has a program for each namespace, the other two one for both.
    assert len(batches._parts) == 4 and all(part is not None for part in batches._parts.values())
