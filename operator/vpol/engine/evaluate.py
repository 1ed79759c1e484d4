"""The evaluation runtime every policy kind's engine shares (vpol.policies.<kind>.engine): results (pass, fail,
warn, error or skip), a subject's data and Activations, one policy's run on one subject (lazy variables),
conditions, compiled PolicyExceptions and their matching, validations and audit annotations.

A ValidatingPolicy's engine (vpol.policies.validating.engine) goes, per policy and subject (../shared/NOTES.md
section 3):
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

Steps 3-5 are first tried as one program (vpol.policies.validating.fused: every variable
computed, every validation evaluated, in one call); its answer is taken only
when it evaluates without an error to a bool per validation, and then it is
the answer the steps give one by one. Anything else (a false condition, an error, a
policy with audit annotations or partial exceptions) goes through the steps.
Several policies' fused programs can also be evaluated as one (``Batches`` there,
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
from typing import Any, NamedTuple, Protocol

from cel_expr_python import cel

from vpol.cel.compiler import CompiledAny, Program, compile_expression
from vpol.cel.environment import EnvSpec, environment, library_variables
from vpol.cel.go_error_text import as_cel_go
from vpol.cel.values import to_activation
from vpol.engine.request import Subject
from vpol.model.policy import PolicyException, PolicySpec, Validation
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
def library_values() -> dict[str, Any]:
    """The values of the libraries' variables (the same for every subject)."""
    return {name: value for name, (_t, value) in library_variables().items()}


class SubjectData:
    """The CEL inputs of one subject, converted once and shared by all policies."""

    def __init__(self, subject: Subject, mode: str = "Kubernetes", *, absent_as_empty: bool = True):
        """``absent_as_empty``: an object the request does not carry is {} (Kyverno's engine, below), not null
        (a mutateExisting target's oldObject, as Kyverno's background controller gives it)."""
        self.subject = subject
        self.mode = mode
        lib_vars = library_values()
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


class _WithValidations(Protocol):
    @property
    def spec(self) -> PolicySpec: ...


class CompiledValidations(Protocol):
    """What :func:`validate` reads of a compiled policy with validations (a ValidatingPolicy's, an
    ImageValidatingPolicy's): the policy (its validations as written), its compiled validations and audit
    annotations."""

    @property
    def policy(self) -> _WithValidations: ...

    validations: list[tuple[int, Program, Program | None]]
    audit_annotations: list[tuple[str, Program]]


#: How Kyverno's engine begins the message of a validation that could not be evaluated (engineapi.RuleError).
EVALUATION_FAILED = "error: "
#: ... and of a policy whose matchConditions, or audit annotations after every validation held, could not be.
LOAD_FAILED = "failed to load context: "


def audit_annotations(compiled: CompiledValidations, run: PolicyRun) -> tuple[dict[str, str], str]:
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


def validate(compiled: CompiledValidations, run: PolicyRun, result: Callable[..., Result],
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
