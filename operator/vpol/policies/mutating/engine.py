"""Evaluating MutatingPolicies: the object each policy makes of a subject, and a result per policy.

Per policy and subject, as Kyverno's engine does (the CLI and scans follow
Kyverno; the generated MutatingAdmissionPolicy follows the API server, see
docs/kyverno-compatibility.md for where the two differ):

1. matchConstraints on the object as the previous policies left it (no
   match: no result); each autogen variant right after its policy;
2. PolicyExceptions referencing the policy: ``skip`` (or ``pass``);
3. variables: evaluated lazily, once per policy evaluation;
4. matchConditions: a false one is ``skip``, an error is ``error``;
5. mutations in order, each on the result of the one before:
   ``ApplyConfiguration`` results are merged with structured-merge
   semantics (``vpol.engine.merge``), ``JSONPatch`` lists applied with the
   API server's JSON patch rules (``vpol.engine.json_patch``; a failed
   ``test`` leaves the object as it was). The first error ends the policy
   with ``error`` and the object it had before.
6. ``pass`` ("success") when every mutation applied, changed or not.

``reinvocationPolicy: IfNeeded`` is honoured as the API server does it (one
more pass of the IfNeeded policies that ran before a later policy changed
the object); Kyverno's offline engine never reinvokes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vpol.engine.evaluate import (
    ERROR,
    PASS,
    CompiledException,
    EvaluationError,
    Result,
    SubjectData,
    PolicyRun,
    conditions_outcome,
    exempted,
    match_exceptions,
)
from vpol.engine.json_patch import PatchError, PatchTestFailed, apply_patch
from vpol.engine.match import constraints_match
from vpol.engine.merge import MergeError, apply_configuration
from vpol.engine.request import Subject
from vpol.model.discovery import builtin
from vpol.policies.mutating.autogen import mutating_autogen_configs
from vpol.policies.mutating.compile import CompiledMutatingPolicy, compile_mutating_policy
from vpol.policies.mutating.model import PATCH_APPLY_CONFIGURATION, MutatingPolicy

SchemaSource = Callable[[str, str, str], Mapping[str, Any] | None]
#: How Kyverno's MutatingPolicy engine begins the message of a policy it could not evaluate (its matchConditions'
#: errors included).
MUTATION_FAILED = "failed to evaluate policy: "


@dataclass
class Targets:
    """What a trigger resolves for a policy with mutateExisting: whether its matchConditions hold, the targets its
    expression resolved (``error``: why it could not)."""

    objects: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    error: str = ""
    #: The trigger's matchConditions hold (for listed targets, the only question).
    matched: bool = True


@dataclass
class Mutated:
    """What one policy did to one subject."""

    result: Result
    #: The object after the policy (the object it was given when it failed or did not apply).
    object: dict[str, Any]

    @property
    def changed(self) -> bool:
        return self.result.properties.get("changed") == "true"


class MutatingPolicyEngine:
    """A compiled MutatingPolicy with its autogen variants and exceptions, ready to evaluate."""

    def __init__(self, policy: MutatingPolicy, exceptions: Sequence[CompiledException] = (),
                 schema_source: SchemaSource | None = None) -> None:
        self.policy = policy
        self.compiled = compile_mutating_policy(policy)
        self.variants: list[tuple[str, CompiledMutatingPolicy]] = [("", self.compiled)]
        for name, variant in mutating_autogen_configs(policy):
            self.variants.append((name, compile_mutating_policy(variant)))
        self.exceptions = [e for e in exceptions if e.exception.applies_to(policy)]
        self.schema_source = schema_source or builtin().schema

    @property
    def ok(self) -> bool:
        return self.compiled.ok

    def applies_to_namespace(self, subject: Subject) -> bool:
        """A NamespacedMutatingPolicy sees only namespaced objects of its own namespace."""
        if not self.policy.namespace:
            return True
        return subject.type.namespaced and subject.namespace == self.policy.namespace

    def mutate(self, subject: Subject) -> Mutated | None:
        """The policy applied to ``subject`` (None when no variant matches it)."""
        if subject.object is None or not self.applies_to_namespace(subject):
            return None  # nothing to mutate (a DELETE), or outside a namespaced policy's namespace
        for config, compiled in self.variants:
            if constraints_match(compiled.policy.spec.match_constraints, subject):
                outcome = self._mutate(compiled, subject)
                outcome.result.autogen = config
                return outcome
        return None

    def _result(self, subject: Subject, obj: dict[str, Any], result: str, message: str,
                changed: bool = False) -> Mutated:
        meta = obj.get("metadata") or {}
        return Mutated(Result(
            policy=self.policy.key, result=result, message=message,
            api_version=str(obj.get("apiVersion") or subject.type.api_version),
            kind=str(obj.get("kind") or subject.type.kind), namespace=subject.namespace, name=subject.name,
            uid=str(meta.get("uid", "")) if isinstance(meta, dict) else "",
            properties={"changed": "true" if changed else "false"},
        ), obj)

    def resolve_targets(self, trigger: Subject, *, conditions: bool = True) -> Targets:
        """The targets ``spec.targetMatchConstraints.expression`` resolves from ``trigger`` (Kyverno's semantics:
        matchConditions first, false or failing: no targets; then the expression, with ``object`` the trigger and
        no ``oldObject`` or ``namespaceObject``: one object, or a map whose ``items`` lists them)."""
        compiled = self.compiled
        if not compiled.ok:
            return Targets(error="policy does not compile", matched=False)
        prog = compiled.target_expression
        subject = dataclasses.replace(trigger, old_object=None, namespace_object=None)
        # oldObject is null, not {}: Kyverno's background controller evaluates the expression with the trigger
        # (the deleted object for a DELETE) as object and no old object at all.
        run = PolicyRun(compiled, SubjectData(subject, absent_as_empty=False), None)
        # ``conditions=False``: Kyverno's CLI resolves targets without the trigger's matchConditions.
        if conditions and conditions_outcome(run, compiled.match_conditions, "Fail") is not None:
            return Targets(matched=False)
        if prog is None:
            return Targets()
        try:
            value = run.eval(prog)
        except EvaluationError as exc:
            return Targets(error=f"{prog.path}: {exc}")
        if not isinstance(value, dict):
            return Targets(error=f"{prog.path}: output type must be a map, not {type(value).__name__}")
        items = value.get("items") if "items" in value else [value]
        if not isinstance(items, list):
            return Targets(error=f"{prog.path}: items is not a list")
        bad = next((i for i in items if not isinstance(i, dict)), None)
        if bad is not None:
            return Targets(error=f"{prog.path}: item is not a valid Kubernetes object: {bad!r}")
        return Targets(objects=list(items))

    def mutate_target(self, target: Subject) -> Mutated:
        """The policy applied to one target of mutateExisting, as Kyverno's background controller applies it:
        ``object`` is the target (``oldObject`` and ``namespaceObject`` null), ``request`` the trigger's (the
        subject's ``request``); no matching and no matchConditions, only targetMatchConditions (false: ``skip``);
        exceptions; the mutations."""
        subject = dataclasses.replace(target, old_object=None, namespace_object=None)
        return self._mutate(self.compiled, subject, self.compiled.target_match_conditions, target=True)

    def _mutate(self, compiled: CompiledMutatingPolicy, subject: Subject,
                conditions: Sequence[tuple[str, Any]] | None = None, *, target: bool = False) -> Mutated:
        original: dict[str, Any] = subject.object or {}
        if not compiled.ok:
            return self._result(subject, original, ERROR, "policy does not compile: " +
                                "; ".join(p.short() for p in compiled.errors()))
        data = SubjectData(subject, absent_as_empty=not target)
        exceptions = match_exceptions(self.exceptions, data, compiled.policy.spec.failure_policy)
        if exceptions.error:
            return self._result(subject, original, ERROR, MUTATION_FAILED + exceptions.error)
        if exceptions.exempt is not None:
            outcome, message, _name = exempted(exceptions.exempt)
            return self._result(subject, original, outcome, message)
        # Partial exceptions (images, values) feed the `exceptions` variable, as for validations.
        run = PolicyRun(compiled, data, exceptions.partial)
        stop = conditions_outcome(run, compiled.match_conditions if conditions is None else conditions,
                                  compiled.policy.spec.failure_policy, error_prefix=MUTATION_FAILED)
        if stop is not None:
            return self._result(subject, original, *stop)
        replace_atomic = compiled.policy.spec.evaluation.use_server_side_apply

        current = original
        schema = self.schema_source(subject.type.group, subject.type.version, subject.type.kind)
        for index, patch_type, prog in compiled.mutations:
            try:
                value = run.eval(prog)
                if patch_type == PATCH_APPLY_CONFIGURATION:
                    current = apply_configuration(current, value, schema, replace_atomic=replace_atomic)
                else:
                    if not isinstance(value, list):
                        raise PatchError(f"expected a list of JSONPatch, got {type(value).__name__}")
                    try:
                        current = apply_patch(current, value)
                    except PatchTestFailed:
                        pass  # the API server leaves the object as it was
            except (EvaluationError, MergeError, PatchError) as exc:
                return self._result(subject, original, ERROR, f"{prog.path}: {exc}")
            # Later expressions see the mutated object (variables already read keep their values).
            run.rebase(SubjectData(dataclasses.replace(subject, object=current), absent_as_empty=not target))
        return self._result(subject, current, PASS, "success", changed=current != original)


def mutate_all(engines: Sequence[MutatingPolicyEngine], subject: Subject) -> tuple[dict[str, Any] | None, list[Result]]:
    """Every policy in order on ``subject``, each on the object the previous ones made.

    Returns the final object and one result per policy that applied (the
    last one for a reinvoked policy).
    """
    current = subject
    results: dict[int, Result] = {}
    invoked_if_needed: list[int] = []
    reinvoke: list[int] = []
    for index, engine in enumerate(engines):
        outcome = engine.mutate(current)
        if outcome is None:
            continue
        results[index] = outcome.result
        if outcome.object != current.object:
            reinvoke.extend(i for i in invoked_if_needed if i not in reinvoke)
            invoked_if_needed.clear()
            current = dataclasses.replace(current, object=outcome.object)
        if engine.policy.spec.reinvocation_policy == "IfNeeded":
            invoked_if_needed.append(index)
    for index in sorted(reinvoke):  # one more pass, as the API server's reinvocation
        outcome = engines[index].mutate(current)
        if outcome is None:
            continue
        results[index] = outcome.result
        current = dataclasses.replace(current, object=outcome.object)
    return current.object, [results[i] for i in sorted(results)]
