"""Evaluating policies against subjects: pass, fail, warn, error or skip.

Per policy and subject (../shared/NOTES.md section 3):
1. matchConstraints (no match: no result at all);
2. PolicyExceptions referencing the policy: all their matchConditions true
   exempts (``skip``, or ``pass`` with ``reportResult: pass``); exceptions
   carrying ``images``/``allowedValues`` instead feed the ``exceptions``
   variable;
3. matchConditions: any false is ``skip``; an error with failurePolicy
   Ignore is a non-match (``skip``), otherwise ``error``;
4. variables are evaluated on demand, at most once, in declaration order;
5. validations in order: the first false is ``fail`` (messageExpression,
   else message, else a default naming the expression); an evaluation
   error is ``error``; all true is ``pass``; audit annotations become
   result properties. ``policies.kyverno.io/scored: "false"`` turns
   ``fail`` into ``warn``.

Steps 3-5 are first tried as one program (vpol.cel.fused: every variable
computed, every validation evaluated, in one call); its answer is taken only
when it evaluates without an error to a bool per validation, and then it is
the answer the steps give one by one. Anything else (a false condition, an error, a
policy with audit annotations or partial exceptions) goes through the steps.
Several policies' fused programs can also be evaluated as one (:class:`Batches`,
what the admission webhook does): one call per few policies instead of one each,
each policy's result the one it gets alone.

Activations: cel-expr-python converts a value an Activation holds when an
expression first reads it, again in every Activation, and an Activation costs
per name it holds. So the subject's data sits in one base Activation that
every expression reading no variable shares; an expression that reads
variables gets an Activation holding only those values and the top-level
names it mentions, and one whose values are all shared between policies
(alike variables, computed once per subject) is shared too.
"""

from __future__ import annotations

import functools
import json
from json.encoder import encode_basestring_ascii  # type: ignore[attr-defined]
from collections.abc import Iterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, NamedTuple

from cel_expr_python import cel

from vpol.cel.cost import WorkPlan
from vpol.cel.cost import plan as plan_work
from vpol.cel.compiler import (
    CompiledAny,
    CompiledImageValidatingPolicy,
    CompiledMutatingPolicy,
    CompiledPolicy,
    Program,
    compile_expression,
    compile_policy,
)
from vpol.cel.environment import EnvSpec, environment, library_variables
from vpol.cel.fused import batch_program, fused_program, fused_text
from vpol.cel.go_error_text import as_cel_go
from vpol.cel.values import to_activation
from vpol.engine.autogen import autogen_configs
from vpol.engine.match import names_resources, rules_match, selectors_match
from vpol.engine.request import ResourceType, Subject
from vpol.model.policy import PolicyException, ValidatingPolicy, Validation
from vpol.model.problems import Problem

PASS, FAIL, WARN, ERROR, SKIP = "pass", "fail", "warn", "error", "skip"


@dataclass
class Result:
    #: The policy's key: its name, or ``namespace/name`` for a NamespacedValidatingPolicy.
    policy: str
    result: str
    message: str
    api_version: str = ""
    kind: str = ""
    namespace: str = ""
    name: str = ""
    uid: str = ""
    #: Index of the validation that failed (or errored), when one did.
    validation: int | None = None
    properties: dict[str, str] = field(default_factory=dict)
    #: "" for the policy as written, else the autogen config ("defaults", "cronjobs").
    autogen: str = ""
    exception: str = ""

    def __reduce__(self) -> tuple[Any, ...]:
        # Results come back from the evaluation workers by the hundred thousand: pickled as the arguments of
        # the constructor, they take about half the bytes and time of the default (a dict per object).
        return (Result, tuple([getattr(self, name) for name in _RESULT_FIELDS]))

    def as_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "apiVersion": self.api_version,
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "result": self.result,
            "message": self.message,
        }

    def rendered(self) -> "Rendered":
        """(result, the row of :meth:`as_dict` as JSON text, exactly as ``json.dumps`` writes it): what `vpol
        apply` prints, made where the result is (an evaluation worker) rather than pickled back whole."""
        row = self.as_dict()
        try:
            # json.dumps builds the same text through its generic encoder at about three times the cost; with
            # 100,000s of rows that is a tenth of a large `vpol apply`.
            return self.result, _ROW_TEMPLATE % tuple(map(encode_basestring_ascii, row.values()))
        except TypeError:  # a value that is not a string
            return self.result, json.dumps(row)


_RESULT_FIELDS = tuple(f.name for f in fields(Result))
#: Result.as_dict as json.dumps writes it, with a %s per (already encoded) value.
_ROW_TEMPLATE = "{" + ", ".join(f'"{key}": %s' for key in Result("", "", "").as_dict()) + "}"

#: A result as `vpol apply` prints it: (result, its row as JSON text), see Result.rendered.
Rendered = tuple[str, str]


class EvaluationError(Exception):
    """An expression's evaluation failed; the message says why."""


@dataclass
class CompiledException:
    exception: PolicyException
    conditions: list[Program]
    problems: list[Problem]


def compile_exception(exc: PolicyException) -> CompiledException:
    programs: list[Program] = []
    problems: list[Problem] = []
    for i, mc in enumerate(exc.match_conditions):
        prog, probs = compile_expression(mc.expression, f"spec.matchConditions[{i}].expression",
                                         "matchCondition", EnvSpec())
        problems.extend(p.located(object=f"PolicyException/{exc.name}", file=exc.source) for p in probs)
        if prog:
            programs.append(prog)
    return CompiledException(exc, programs, problems)


_OPTIONAL_VALUE = ("expression produced an optional value, which vpol cannot pass on; "
                   "use .orValue(...) or .value()")


def _value(v: cel.Value) -> Any:
    # Optional values cannot leave cel-expr-python (0.1.3 even types them ERROR, and their value() raises).
    try:
        if v.type() == cel.Type.ERROR:
            raise EvaluationError(as_cel_go(str(v.value())))
        return v.plain_value()
    except TypeError:
        raise EvaluationError(_OPTIONAL_VALUE) from None


@functools.cache
def _library_values() -> dict[str, Any]:
    """The values of the libraries' variables (the same for every subject)."""
    return {name: value for name, (_t, value) in library_variables().items()}


class SubjectData:
    """The CEL inputs of one subject, converted once and shared by all policies."""

    def __init__(self, subject: Subject, mode: str = "Kubernetes", *, absent_as_empty: bool = True):
        """``absent_as_empty``: an object the request does not carry is {} (Kyverno's engine, below), not null
        (a mutateExisting target's oldObject, as Kyverno's background controller gives it)."""
        self.subject = subject
        self.mode = mode
        lib_vars = _library_values()
        if mode == "JSON":
            self.data: dict[str, Any] = {"object": subject.object, "variables": {}}
        else:
            ns = subject.namespace_object if subject.type.namespaced else None
            # Kyverno's engine hands a policy the request's objects as unstructured objects, and one the request
            # does not carry (oldObject on CREATE, object on DELETE) as an empty one: {} where the API server
            # (a generated VAP) says null; request.object and request.oldObject stay null.
            absent: dict[str, Any] | None = {} if absent_as_empty else None
            self.data = {
                "object": absent if subject.object is None else subject.object,
                "oldObject": absent if subject.old_object is None else subject.old_object,
                "request": subject.admission_request(),
                "namespaceObject": ns,
                "variables": {},
            }
        self.data["exceptions"] = {"allowedImages": [], "allowedValues": []}
        self.data.update(lib_vars)
        self._base: cel.Activation | None = None
        #: Variable values computed on this subject, by value key (see PolicyRun._value_key): policies that
        #: declare the same variable (say every Pod Security policy's list of all containers) compute it
        #: once per subject.
        self.shared: dict[tuple[Any, ...], Any] = {}
        #: Activations holding only shared variable values, by the (name, value key) pairs they hold: every
        #: policy run on this subject that reads the same shared values evaluates in the same Activation.
        self.activations: dict[tuple[Any, ...], cel.Activation] = {}
        self._env = environment(EnvSpec(mode=self.mode))
        self._identity: tuple[str, str, str, str, str] | None = None

    def identity(self) -> tuple[str, str, str, str, str]:
        """(apiVersion, kind, namespace, name, uid) of the subject as its results name it (computed once)."""
        if self._identity is None:
            subject = self.subject
            obj = subject.current
            api_version = str(obj.get("apiVersion", "")) if isinstance(obj, dict) else ""
            kind = str(obj.get("kind", "")) if isinstance(obj, dict) else ""
            uid = str((obj.get("metadata") or {}).get("uid", "")) if isinstance(obj, dict) else ""
            if subject.json_payload:
                api_version = kind = ""
            self._identity = (api_version or subject.type.api_version,
                              kind or (subject.type.kind if not subject.json_payload else ""),
                              subject.namespace, subject.name, uid)
        return self._identity

    def bind(self, values: Mapping[str, Any]) -> None:
        """Add top-level inputs (an ImageValidatingPolicy's images, attestors and attestations, known once its
        extractors ran): later Activations hold them."""
        self.data.update(values)
        self._base = None
        self.activations.clear()

    def activation(self, variables: dict[str, Any] | None = None,
                   exceptions: dict[str, Any] | None = None, reads: frozenset[str] | None = None) -> cel.Activation:
        """An Activation of this subject's data with ``variables`` and ``exceptions`` (the subject's own when
        None); with ``reads``, holding only those top-level names (an Activation costs per name it holds)."""
        env = self._env
        if not variables and exceptions is None and reads is None:
            if self._base is None:
                self._base = env.Activation(data=self.data)
            return self._base
        data = dict(self.data) if reads is None else {k: self.data[k] for k in reads if k in self.data}
        if variables and (reads is None or "variables" in reads):
            data["variables"] = variables
        if exceptions is not None and (reads is None or "exceptions" in reads):
            data["exceptions"] = exceptions
        return env.Activation(data=data)


#: What an Activation says of a Python value it cannot hand to CEL (a duration, timestamp or bytearray
#: a variable produced): the variables are then converted (vpol.cel.values) and the expression run again.
_NON_CEL = "Non-CEL value type"


class PolicyRun:
    """Evaluation state of one policy on one subject (lazy variables)."""

    def __init__(self, compiled: CompiledAny, data: SubjectData, exceptions: dict[str, Any] | None):
        self.compiled = compiled
        self.data = data
        self.exceptions = exceptions
        self.values: dict[str, Any] = {}
        self.errors: dict[str, str] = {}
        self.programs = dict(compiled.variables)
        self.order = [name for name, _ in compiled.variables]
        #: Variable values are passed on as evaluated; converted only when an Activation refuses one.
        self.converted = False
        #: Activations of this run by the variable names they hold (see _activation_for).
        self._activations: dict[tuple[Any, ...], cel.Activation] = {}

    def _needed(self, uses: frozenset[str]) -> list[str]:
        """The variables ``uses`` needs, transitively, in declaration order (cached per compiled policy)."""
        cached = self.compiled.needed.get(uses)
        if cached is not None:
            return cached
        need: set[str] = set()
        stack = list(uses)
        while stack:
            name = stack.pop()
            if name in need or name not in self.programs:
                continue
            need.add(name)
            stack.extend(self.programs[name].uses)
        out = [n for n in self.order if n in need]
        self.compiled.needed[uses] = out
        return out

    def rebase(self, data: SubjectData) -> None:
        """Evaluate later expressions on other subject data (a mutation changed the object); the variables
        already read keep their values."""
        self.data = data
        self._activations = {}

    def _value_key(self, name: str) -> tuple[Any, ...] | None:
        """What identifies variable ``name``'s value on any subject: its expression and, recursively, those
        of the variables it reads (None when one of them is undefined or cyclic). Cached per compiled policy."""
        keys = self.compiled.value_keys
        if name in keys:
            return keys[name]
        keys[name] = None  # a cycle back to this variable finds None
        prog = self.programs.get(name)
        if prog is None:
            return None
        deps = []
        for used in sorted(prog.uses):
            key = self._value_key(used)
            if key is None:
                return None
            deps.append((used, key))
        keys[name] = (prog.source, tuple(deps))
        return keys[name]

    def _activation_for(self, prog: Program) -> cel.Activation:
        """The Activation for ``prog``: it holds only the variables it reads (``uses``) and the top-level
        names it mentions (``reads``).

        An Activation converts each value it holds (the object, the variables map) to CEL when an expression
        first reads it, and again in every other Activation, so holding only what the expression reads keeps
        the conversions small, and an Activation whose values are all shared (SubjectData.shared) is shared by
        every policy run on the subject that reads the same values. Failed variables are never in it."""
        uses, reads = prog.uses, prog.reads
        plans = self.compiled.activation_plans
        plan = plans.get(uses)
        if plan is None:
            names = tuple(sorted(uses))
            keys = [self._value_key(name) for name in names]
            shared = None if any(k is None for k in keys) else tuple(zip(names, keys))
            plan = plans[uses] = (names, shared)
        names, shared = plan
        values = self.values
        held = {name: values[name] for name in names if name in values}
        if shared is not None and len(held) == len(names) and self.exceptions is None and not self.converted:
            shared_key = (shared, reads)
            act = self.data.activations.get(shared_key)
            if act is None:
                act = self.data.activations[shared_key] = self.data.activation(held or None, None, reads)
            return act
        key = (frozenset(held), reads)
        act = self._activations.get(key)
        if act is None:
            act = self._activations[key] = self.data.activation(held or None, self.exceptions, reads)
        return act

    def _run(self, prog: Program, reads_variables: bool) -> Any:
        if not reads_variables:
            act = self.data.activation(None, self.exceptions)
        else:
            act = self._activation_for(prog)
        try:
            return _value(prog.expression.eval(act))
        except EvaluationError as exc:
            if self.converted or _NON_CEL not in str(exc):
                raise
        self.values = {k: to_activation(v) for k, v in self.values.items()}
        self._activations = {}
        self.converted = True
        return self._run(prog, reads_variables)

    def _ensure(self, uses: frozenset[str]) -> None:
        for name in self._needed(uses):
            if name in self.values or name in self.errors:
                continue
            prog = self.programs[name]
            failed = [u for u in prog.uses if u in self.errors]
            # Shared with other policies only when nothing policy-specific (the exceptions variable) is in play.
            key = self._value_key(name) if self.exceptions is None else None
            try:
                if key is not None and key in self.data.shared:
                    value = self.data.shared[key]
                else:
                    value = self._run(prog, bool(prog.uses))
                    if key is not None:
                        self.data.shared[key] = value
                self.values[name] = to_activation(value) if self.converted else value
            except EvaluationError as exc:
                # A variable that failed is an error only where it is read (variables are lazy in cel-go):
                # when this one failed with such a variable left out, that variable's error is the cause.
                # Worded as Kyverno's lazy variables are: the error itself, the variable unnamed.
                self.errors[name] = self.errors[failed[0]] if failed else str(exc)
            except Exception as exc:  # noqa: BLE001 - e.g. cel-cpp's iteration limit raises
                self.errors[name] = self.errors[failed[0]] if failed else _describe(exc)

    def eval(self, prog: Program) -> Any:
        failed: list[str] = []
        if prog.uses:
            self._ensure(prog.uses)
            failed = [name for name in prog.uses if name in self.errors]
        try:
            # Variables that failed are left out: an expression that does not read them (a branch not taken)
            # still evaluates, as with cel-go's lazy variables; one that reads them fails with their error.
            return self._run(prog, bool(prog.uses))
        except EvaluationError:
            if failed:
                raise EvaluationError(self.errors[failed[0]]) from None
            raise
        except Exception as exc:  # noqa: BLE001
            if failed:
                raise EvaluationError(self.errors[failed[0]]) from None
            raise EvaluationError(_describe(exc)) from None


def _first_false(conditions: Iterable[tuple[str, Program]], evaluate: Callable[[Program], Any]
                 ) -> tuple[str | None, list[tuple[str, str]]]:
    """Conditions evaluated as the API server and Kyverno evaluate matchConditions: (the name of the first that
    is false, which ends the evaluation, or None; the (name, reason) of those that failed to evaluate or are
    not bools)."""
    errors: list[tuple[str, str]] = []
    for name, prog in conditions:
        try:
            value = evaluate(prog)
        except EvaluationError as exc:
            errors.append((name, str(exc)))
            continue
        if value is not True:
            if not isinstance(value, bool):
                errors.append((name, f"expected a bool, got {type(value).__name__}"))
                continue
            return name, errors
    return None, errors


def conditions_outcome(run: PolicyRun, conditions: Sequence[tuple[str, Program]],
                       failure_policy: str, error_prefix: str = "") -> tuple[str, str] | None:
    """matchConditions as the API server evaluates them: None when all hold, else (result, message). A false
    condition is ``skip`` (it wins over errors); errors are ``error``, or ``skip`` under failurePolicy Ignore.
    An error is worded as Kyverno's engines word it: ``error_prefix`` (the ValidatingPolicy engine's
    :data:`LOAD_FAILED` by default) and every condition's error, joined as Go's multierr joins them; a skip
    names the condition that was false or failed."""
    false, errors = _first_false(conditions, run.eval)
    if false is not None:
        return SKIP, f"matchCondition {false} is false"
    if errors:
        if failure_policy == "Ignore":
            return SKIP, "; ".join(f"matchCondition {name}: {reason}" for name, reason in errors)
        return ERROR, (error_prefix or LOAD_FAILED) + "; ".join(reason for _name, reason in errors)
    return None


def _describe(exc: BaseException) -> str:
    text = str(exc)
    if "bad_alloc" in text or isinstance(exc, MemoryError):
        return "evaluation ran out of memory (the expression builds too large a value)"
    if "Iteration budget exceeded" in text:
        return "evaluation exceeded the comprehension iteration limit"
    return as_cel_go(text)


class ExceptionMatch(NamedTuple):
    """What the PolicyExceptions of a policy say of a subject."""

    #: The exception that exempts the subject (the first whose conditions all hold and that has no images or
    #: values), if any.
    exempt: CompiledException | None = None
    #: The ``exceptions`` variable the matching partial exceptions (images, values) make, if any matched.
    partial: dict[str, Any] | None = None
    #: Why the subject's result is an error: an exception's condition failed to evaluate (under failurePolicy
    #: Fail) before any exception exempted the subject.
    error: str = ""


#: What no PolicyException says of a subject.
_NO_EXCEPTION = ExceptionMatch()


def exception_conditions(exc: CompiledException, data: SubjectData) -> tuple[str | None, list[tuple[str, str]]]:
    """An exception's conditions on one subject, as a policy's matchConditions are evaluated (:func:`_first_false`):
    the first false one ("" when it is; None when none is), and the errors."""

    def evaluate(prog: Program) -> Any:
        try:
            return _value(prog.expression.eval(data.activation()))
        except EvaluationError:
            raise
        except Exception as error:  # noqa: BLE001 - e.g. cel-cpp's iteration limit raises
            raise EvaluationError(_describe(error)) from None

    return _first_false((("", prog) for prog in exc.conditions), evaluate)


def exception_matches(exceptions: Sequence[CompiledException], data: SubjectData
                      ) -> Iterator[tuple[CompiledException, list[tuple[str, str]]]]:
    """The exceptions (in order, those that compile) none of whose conditions is false on one subject, each with
    its conditions' errors (an exception with errors and none false is neither a match nor a miss: the caller
    decides)."""
    for exc in exceptions:
        if exc.problems and any(p.severity == "error" for p in exc.problems):
            continue
        false, errors = exception_conditions(exc, data)
        if false is None:
            yield exc, errors


def match_exceptions(exceptions: Sequence[CompiledException], data: SubjectData,
                     failure_policy: str = "Fail") -> ExceptionMatch:
    """The PolicyExceptions of a policy on one subject, as Kyverno's engines evaluate them (in order): an
    exception's conditions are a policy's matchConditions (one false: no match; errors: an error, or no match
    under failurePolicy Ignore); an error before an exemption is the policy's error, after one it is ignored."""
    if not exceptions:
        return _NO_EXCEPTION
    partial_images: list[str] = []
    partial_values: list[str] = []
    for exc, errors in exception_matches(exceptions, data):
        e = exc.exception
        if errors:
            if failure_policy == "Ignore":
                continue
            # The conditions' errors, as Kyverno's engines give them (the caller words the result).
            return ExceptionMatch(error="; ".join(reason for _n, reason in errors))
        if e.allowed_images or e.allowed_values:
            partial_images.extend(e.allowed_images)
            partial_values.extend(e.allowed_values)
            continue
        return ExceptionMatch(exempt=exc)
    if partial_images or partial_values:
        return ExceptionMatch(partial={"allowedImages": partial_images, "allowedValues": partial_values})
    return _NO_EXCEPTION


def exempted(exempt: CompiledException) -> tuple[str, str, str]:
    """(result, message, exception name) of a subject a PolicyException exempts."""
    e = exempt.exception
    outcome = PASS if e.report_result == "pass" else SKIP
    how = "passed" if outcome == PASS else "skipped"
    return outcome, f"rule is {how} due to policy exception: {e.key}", e.name


#: How Kyverno's engine begins the message of a validation that could not be evaluated (engineapi.RuleError).
EVALUATION_FAILED = "error: "
#: ... and of a policy whose matchConditions, or audit annotations after every validation held, could not be.
LOAD_FAILED = "failed to load context: "


def audit_annotations(compiled: CompiledPolicy | CompiledImageValidatingPolicy, run: PolicyRun) -> tuple[dict[str, str], str]:
    """(the audit annotations that evaluate to a non-empty string, by key; the error of the first that could not
    be evaluated, worded as Kyverno's engine words it, or "")."""
    properties: dict[str, str] = {}
    for key, prog in compiled.audit_annotations:
        try:
            value = run.eval(prog)
        except EvaluationError as exc:
            return {}, f"failed to evaluate auditAnnotation '{key}': {exc}"
        if isinstance(value, str) and value:
            properties[key] = value
    return properties, ""


def failure_message(validation: Validation, index: int, run: PolicyRun, message_program: Program | None) -> str:
    """The message of a failed validation, as Kyverno's engine words it (its CLI, reports and webhook; a
    generated VAP is the API server's, which falls back to ``message`` instead): the messageExpression's
    value when it has one, a note saying why when it cannot be evaluated or is not a string, else
    ``message``, and a default naming the validation when that is empty."""
    message = validation.message
    if message_program is not None:
        try:
            value = run.eval(message_program)
        except EvaluationError as exc:
            message = f"failed to evaluate message expression: {exc}"
        else:
            message = value if isinstance(value, str) else \
                f"failed to convert message expression to string: {type(value).__name__} is not a string"
    return message or f"CEL expression validation failed at index {index}"


def validate(compiled: CompiledPolicy | CompiledImageValidatingPolicy, run: PolicyRun, result: Callable[..., Result],
             *, error_prefix: str = EVALUATION_FAILED, audit_prefix: str = LOAD_FAILED,
             explain: Callable[[], str] = lambda: "") -> Result:
    """A policy's validations in order, then its audit annotations: the Result ``result(outcome, message, ...)``
    makes. The first false validation fails the policy with its message (followed by `` (explain())`` when that
    says something); one that cannot be evaluated, or is not a bool, is an error (``error_prefix``); an audit
    annotation that cannot be evaluated turns the outcome into an error (``error_prefix`` after a failure,
    ``audit_prefix`` after every validation held)."""
    for index, prog, msg_prog in compiled.validations:
        try:
            value = run.eval(prog)
        except EvaluationError as exc:
            return result(ERROR, f"{error_prefix}{exc}", validation=index)
        if value is True:
            continue
        if value is not False:
            return result(ERROR, f"{error_prefix}expected a bool, got {type(value).__name__}", validation=index)
        message = failure_message(compiled.policy.spec.validations[index], index, run, msg_prog)
        if (why := explain()):
            message = f"{message} ({why})"
        properties, error = audit_annotations(compiled, run)
        if error:
            return result(ERROR, error_prefix + error, validation=index)
        return result(FAIL, message, validation=index, properties=properties)
    properties, error = audit_annotations(compiled, run)
    if error:
        return result(ERROR, audit_prefix + error)
    return result(PASS, "success", properties=properties)


class PolicyEngine:
    """A compiled policy with its autogen variants and exceptions, ready to evaluate."""

    def __init__(self, policy: ValidatingPolicy, exceptions: Sequence[CompiledException] = (), *,
                 fused: bool = True):
        self.policy = policy
        #: Whether a policy's fused program (vpol.cel.fused) is tried first; False evaluates expression by
        #: expression only (tests compare the two).
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
        (vpol.cel.fused) and the libraries' values. An evaluation worker does this while it loads its policies,
        so that the first chunk of a scan, or the first admission request, does not wait for it (16 Pod Security
        policies: 0.14-0.24 s at their first subject, 1-3 ms at the next)."""
        _library_values()
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
        if last_subject is subject:  # asked again for the same request (vpol.engine.inline, then evaluate)
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
        """The result by the policy's fused program (vpol.cel.fused) when it evaluates, without an error, to a
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
        """The text of variant ``index``'s fused program (vpol.cel.fused.fused_text), when :class:`Batches` may
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
    """One program of a batch: the fused programs of some of its policies (vpol.cel.fused.batch_program)."""

    program: cel.Expression
    #: The indexes (in Batches.engines) of those policies, in the order of the program's value.
    members: tuple[int, ...]


class Batches:
    """Policies evaluated together, by their fused programs made one (vpol.cel.fused.batch_program): the engines
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
