"""Evaluating a (Namespaced)ValidatingPolicy and its autogen variants against subjects, over the shared
evaluation runtime (vpol.engine.evaluate: results, exceptions, conditions, variables, validations), first as one
fused program (vpol.policies.validating.fused) when it can be; and several policies' fused programs evaluated as
one (:class:`Batches`, what the admission webhook does)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from cel_expr_python import cel

from vpol.cel.cost import WorkPlan
from vpol.cel.cost import plan as plan_work
from vpol.engine.evaluate import (
    ERROR,
    FAIL,
    LOAD_FAILED,
    PASS,
    WARN,
    CompiledException,
    PolicyRun,
    Result,
    SubjectData,
    conditions_outcome,
    exempted,
    failure_message,
    library_values,
    match_exceptions,
    validate,
)
from vpol.engine.match import names_resources, rules_match, selectors_match
from vpol.engine.request import ResourceType, Subject
from vpol.policies.validating.autogen import autogen_configs
from vpol.policies.validating.compile import CompiledPolicy, compile_policy
from vpol.policies.validating.fused import batch_program, fused_program, fused_text
from vpol.policies.validating.model import ValidatingPolicy


class PolicyEngine:
    """A compiled policy with its autogen variants and exceptions, ready to evaluate."""

    def __init__(self, policy: ValidatingPolicy, exceptions: Sequence[CompiledException] = (), *,
                 fused: bool = True):
        self.policy = policy
        #: Whether a policy's fused program (vpol.policies.validating.fused) is tried first; False evaluates expression
        #: by expression only (tests compare the two).
        self.fused = fused
        self.compiled = compile_policy(policy)
        #: The policy and its autogen variants (Deployments, CronJobs...): (config name, policy, compiled). A
        #: variant is compiled when a subject first matches it (most inputs hold one kind of pod controller).
        self._variants: list[tuple[str, ValidatingPolicy, CompiledPolicy | None]] = [("", policy, self.compiled)]
        for config in autogen_configs(policy):
            self._variants.append((config.name, config.policy, None))
        #: Per (variant, resource type, operation): whether the variant's resource rules select it (variants whose
        #: rules name objects are not kept: see names_resources).
        self._rule_decisions: dict[tuple[int, ResourceType, str], bool] = {}
        self.exceptions = [e for e in exceptions if e.exception.applies_to(policy)]
        #: Per variant: its WorkPlan (work_plan), once asked for.
        self._plans: dict[int, WorkPlan | None] = {}
        #: The subject variant() was last asked about, and its answer (a subject is not changed once made).
        self._last_variant: tuple[Subject | None, int | None] = (None, None)

    @property
    def ok(self) -> bool:
        return self.compiled.ok

    def prepare(self) -> None:
        """Build now what the first subject of the policy as written would build otherwise: its fused program
        (``fused``) and the libraries' values. An evaluation worker does this while it loads its policies,
        so that the first chunk of a scan, or the first admission request, does not wait for it (16 Pod Security
        policies: 0.14-0.24 s at their first subject, 1-3 ms at the next)."""
        library_values()
        if self.fused and self.compiled.ok:
            fused_program(self.compiled)

    def applies_to_namespace(self, subject: Subject) -> bool:
        """A NamespacedValidatingPolicy sees only namespaced objects of its own namespace."""
        if not self.policy.namespace:
            return True
        return subject.type.namespaced and subject.namespace == self.policy.namespace

    def evaluate(self, subject: Subject, data: SubjectData | None = None) -> Result | None:
        """The result for ``subject`` (None when no variant of the policy matches it)."""
        index = self.variant(subject)
        if index is None:
            return None
        config, _policy, compiled = self._variants[index]
        assert compiled is not None
        if data is None or data.mode != compiled.policy.spec.evaluation.mode:
            data = SubjectData(subject, compiled.policy.spec.evaluation.mode)
        result = self._evaluate(compiled, subject, data)
        result.autogen = config
        return result

    @property
    def variant_count(self) -> int:
        """How many variants the policy has (itself and its autogen variants)."""
        return len(self._variants)

    def variant(self, subject: Subject) -> int | None:
        """Which of the policy and its autogen variants :meth:`evaluate` applies to ``subject`` (compiled now if it
        was not yet); None when none does."""
        last_subject, last_index = self._last_variant
        if last_subject is subject:  # asked again for the same request (vpol.policies.inline, then evaluate)
            return last_index
        index = self._variant(subject)
        self._last_variant = (subject, index)
        return index

    def _variant(self, subject: Subject) -> int | None:
        if not self.applies_to_namespace(subject):
            return None
        for index, (config, policy, compiled) in enumerate(self._variants):
            if self._selects(index, policy, subject) or (subject.json_payload and policy.json_mode):
                if compiled is None:
                    self._variants[index] = (config, policy, compile_policy(policy))
                return index
        return None

    def selection(self) -> tuple[Any, ...]:
        """What :meth:`variant` decides from: the policy's namespace, and each variant's matchConstraints and
        JSON mode in order. Engines with equal selections choose the same variant for every subject (the Pod
        Security policies, their autogen variants included, all match alike)."""
        return (self.policy.namespace,
                tuple((policy.spec.match_constraints, policy.json_mode) for _c, policy, _p in self._variants))

    def _compiled_variant(self, index: int) -> CompiledPolicy:
        """Variant ``index``, compiled now if it was not yet."""
        config, policy, compiled = self._variants[index]
        if compiled is None:
            compiled = compile_policy(policy)
            self._variants[index] = (config, policy, compiled)
        return compiled

    def work_plan(self, index: int) -> WorkPlan | None:
        """How much work evaluating variant ``index`` (and the PolicyExceptions of the policy) can take, as
        vpol.cel.cost bounds it from a request; None when it cannot be bounded. Kept per variant."""
        if index not in self._plans:
            compiled = self._compiled_variant(index)
            expressions = [p.expression for _n, p in compiled.match_conditions]
            expressions += [p.expression for _i, p, _m in compiled.validations]
            expressions += [m.expression for _i, _p, m in compiled.validations if m is not None]
            expressions += [p.expression for _k, p in compiled.audit_annotations]
            expressions += [p.expression for e in self.exceptions for p in e.conditions]
            work = None
            if compiled.ok and not any(e.problems for e in self.exceptions):
                work = plan_work(expressions, [(name, p.expression) for name, p in compiled.variables])
            self._plans[index] = work
        return self._plans[index]

    def _selects(self, index: int, policy: ValidatingPolicy, subject: Subject) -> bool:
        """constraints_match of variant ``index``, with the resource rules' answer kept per type and operation."""
        match = policy.spec.match_constraints
        if match is None:
            return False
        key = (index, subject.type, subject.operation)
        decided = self._rule_decisions.get(key)
        if decided is None:
            decided = rules_match(match, subject)
            if not names_resources(match):
                self._rule_decisions[key] = decided
        return decided and selectors_match(match, subject)

    def _result(self, data: SubjectData, result: str, message: str, **kw: Any) -> Result:
        if result == FAIL and not self.policy.scored:
            result = WARN
        api_version, kind, namespace, name, uid = data.identity()
        return Result(policy=self.policy.key, result=result, message=message, api_version=api_version, kind=kind,
                      namespace=namespace, name=name, uid=uid, **kw)

    def _evaluate(self, compiled: CompiledPolicy, subject: Subject, data: SubjectData) -> Result:
        if not compiled.ok:
            return self._result(data, ERROR, "policy does not compile: " +
                                "; ".join(p.short() for p in compiled.errors()))
        exceptions = match_exceptions(self.exceptions, data, compiled.policy.spec.failure_policy)
        if exceptions.error:
            return self._result(data, ERROR, LOAD_FAILED + exceptions.error)
        if exceptions.exempt is not None:
            outcome, message, name = exempted(exceptions.exempt)
            return self._result(data, outcome, message, exception=name)
        if exceptions.partial is None and self.fused:
            fast = self._fused(compiled, data)
            if fast is not None:
                return fast
        return self._stepwise(compiled, data, exceptions.partial)

    def _stepwise(self, compiled: CompiledPolicy, data: SubjectData, partial: dict[str, Any] | None) -> Result:
        """The result expression by expression: matchConditions, then validations (``partial``: the
        ``exceptions`` variable partial PolicyExceptions make, if any matched)."""
        run = PolicyRun(compiled, data, partial)
        stop = conditions_outcome(run, compiled.match_conditions, compiled.policy.spec.failure_policy)
        if stop is not None:
            return self._result(data, *stop)

        # Worded as Kyverno's engine words each outcome (its pkg/cel/policies/vpol: an evaluation error is
        # "error: ...", with the validation's index; audit annotations are evaluated once the outcome is known,
        # and one that fails turns it into an error).
        return validate(compiled, run, lambda *args, **kw: self._result(data, *args, **kw))

    def _fused(self, compiled: CompiledPolicy, data: SubjectData) -> Result | None:
        """The result by the policy's fused program (``fused``) when it evaluates, without an error, to a
        bool per validation; None when it has none, a condition is false or anything else happened: the
        policy is then evaluated expression by expression, which says which condition or expression it was."""
        program = fused_program(compiled)
        if program is None:
            return None
        try:
            value = program.eval(data.activation())
            if value.type() != cel.Type.LIST:
                return None
            values = value.plain_value()
        except Exception:  # noqa: BLE001 - the expression-by-expression evaluation reports it
            return None
        return self._from_fused(compiled, data, values)

    def _from_fused(self, compiled: CompiledPolicy, data: SubjectData, values: Any) -> Result | None:
        """The result from the fused program's value (as a Python value; None when its conditions did not hold),
        when it is a bool per validation; else None (see _fused)."""
        validations = compiled.validations
        if not isinstance(values, list) or len(values) != len(validations):
            return None
        for position, ok in enumerate(values):
            if ok is True:
                continue
            if ok is not False:
                return None  # not a bool: an error, said by the expression-by-expression evaluation
            # The first false validation (those after it evaluated without an error too, so they cannot change
            # what evaluating in order says).
            index, _prog, msg_prog = validations[position]
            run = PolicyRun(compiled, data, None)
            message = failure_message(compiled.policy.spec.validations[index], index, run, msg_prog)
            return self._result(data, FAIL, message, validation=index, properties={})
        return self._result(data, PASS, "success", properties={})

    def batchable(self, index: int) -> str | None:
        """The text of variant ``index``'s fused program (``fused.fused_text``), when :class:`Batches` may
        evaluate it among other policies' (what :meth:`evaluate` would try first): it compiles, has a fused form,
        and no PolicyException applies to the policy; else None (it is evaluated on its own)."""
        if not self.fused or self.exceptions:
            return None
        compiled = self._compiled_variant(index)
        return fused_text(compiled) if compiled.ok else None

    def mode(self, index: int) -> str:
        """The evaluation mode of variant ``index``."""
        return self._variants[index][1].spec.evaluation.mode

    def from_batch(self, index: int, data: SubjectData, value: Any) -> Result:
        """The result of variant ``index`` (:meth:`batchable`) on the subject of ``data``, from its fused program's
        value as a batch computed it: what :meth:`evaluate` gives (the same value, then the same steps)."""
        config, _policy, compiled = self._variants[index]
        assert compiled is not None
        result = self._from_fused(compiled, data, value) or self._stepwise(compiled, data, None)
        result.autogen = config
        return result


#: Most policies in one program of a batch: compiling one program of many policies takes more memory at once
#: than compiling them apart (18 Pod Security policies: 14 MiB against 4.5, of which 4 stay either way; 6 at a
#: time: 7.7), while the calls saved are about as many (measured: the same CPU per subject with 3, 6 or 18).
MAX_PART = 6
#: Programs a Batches keeps (each about as large as the fused programs it holds: ~1.3 MiB for 6 Pod Security
#: policies); beyond, the policies of a group of variants not met yet are evaluated one by one.
MAX_PARTS = 24


class _Part(NamedTuple):
    """One program of a batch: the fused programs of some of its policies (``fused.batch_program``)."""

    program: cel.Expression
    #: The indexes (in Batches.engines) of those policies, in the order of the program's value.
    members: tuple[int, ...]


class Batches:
    """Policies evaluated together, by their fused programs made one (``fused.batch_program``): the engines
    are taken in groups of MAX_PART, in order, and for each combination of variants met in a group (which
    variant of each of its policies applies to a subject, and the subject data's evaluation mode), the fused
    programs of the variants that apply make one program, so a subject costs a call into cel-expr-python and a
    conversion of its value per group instead of per policy. Subjects that differ in what applies in one group
    share the other groups' programs; at most MAX_PARTS programs are kept.

    Each policy's result is the one :meth:`PolicyEngine.evaluate` gives: its part of a program's value is the
    value of its own fused program, and from there the same steps follow (a false validation's message, an
    expression-by-expression evaluation when a condition is false). A policy no program holds (no fused form,
    PolicyExceptions, another evaluation mode, alone in its group), and every policy of a program whose value is
    an error (one of its parts failed), are evaluated on their own. A program is compiled, in the calling thread,
    the first time its combination is met (about as long as compiling its policies' fused programs, which it
    replaces)."""

    def __init__(self, engines: Sequence[PolicyEngine], limit: int = MAX_PARTS):
        self.engines = list(engines)
        self.limit = limit
        count = len(self.engines)
        groups = -(-count // MAX_PART)  # as even as can be: 13 policies are 5 + 4 + 4, not 6 + 6 + 1
        #: The engines' groups: indexes in Batches.engines.
        self._groups = [tuple(range(n * count // groups, (n + 1) * count // groups)) for n in range(groups)]
        #: Per group, combination of its variants and evaluation mode: its program (None: fewer than two of its
        #: policies can be held, or it does not compile).
        self._parts: dict[tuple[int, tuple[int | None, ...], str], _Part | None] = {}
        #: Per engine: the first engine whose selection (PolicyEngine.selection) is the same as its own, whose
        #: variant it takes (itself when none before it has).
        firsts: dict[Any, int] = {}
        self._same_as = [firsts.setdefault(engine.selection(), i) for i, engine in enumerate(self.engines)]
        #: The subject shape() was last asked about, and its answer (a subject is not changed once made).
        self._last: tuple[Subject | None, tuple[int | None, ...]] = (None, ())

    def shape(self, subject: Subject) -> tuple[int | None, ...]:
        """The variant of each engine that applies to ``subject`` (PolicyEngine.variant; None: none does), decided
        once for engines whose policies select alike."""
        last, answer = self._last
        if last is subject:
            return answer
        engines = self.engines
        shape: list[int | None] = []
        for i, first in enumerate(self._same_as):
            shape.append(engines[i].variant(subject) if first == i else shape[first])
        self._last = (subject, tuple(shape))
        return self._last[1]

    def evaluate(self, subject: Subject, data: SubjectData) -> list[Result]:
        """The results of the engines that apply to ``subject``, in their order (:meth:`PolicyEngine.evaluate`
        of each, with ``data``: the subject's data in its evaluation mode)."""
        engines = self.engines
        shape = self.shape(subject)
        values: dict[int, Any] = {}
        for g, group in enumerate(self._groups):
            key = (g, tuple(shape[i] for i in group), data.mode)
            part = self._parts[key] if key in self._parts else self._build(key)
            got = _part_values(part, data) if part is not None else None
            if got is not None and part is not None:
                values.update(zip(part.members, got))
        out = []
        for i, index in enumerate(shape):
            if index is None:
                continue
            if i in values:
                result: Result | None = engines[i].from_batch(index, data, values[i])
            else:
                result = engines[i].evaluate(subject, data)
            if result is not None:
                out.append(result)
        return out

    def _build(self, key: tuple[int, tuple[int | None, ...], str]) -> _Part | None:
        if len(self._parts) >= self.limit:
            return None  # beyond the programs kept: policy by policy, as without batches
        g, variants, mode = key
        members: list[tuple[int, str]] = []
        for i, index in zip(self._groups[g], variants):
            if index is None or self.engines[i].mode(index) != mode:
                continue
            text = self.engines[i].batchable(index)
            if text is not None:
                members.append((i, text))
        program = batch_program([text for _i, text in members], mode) if len(members) >= 2 else None
        part = _Part(program, tuple(i for i, _t in members)) if program is not None else None
        self._parts[key] = part
        return part


def _part_values(part: _Part, data: SubjectData) -> list[Any] | None:
    """A batch program's value on ``data``: a list with a value per policy, as Python values; None when it is an
    error (or anything but such a list)."""
    try:
        value = part.program.eval(data.activation())
        if value.type() != cel.Type.LIST:
            return None
        values = value.plain_value()
    except Exception:  # noqa: BLE001 - each policy is evaluated on its own, which says what failed
        return None
    return values if isinstance(values, list) and len(values) == len(part.members) else None
