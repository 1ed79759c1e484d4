"""Compiling every CEL expression of a policy, with every error reported.

Rules enforced (besides syntax and types):
- variables compile in order; each may use only the variables declared
  before it (``variables`` is typed as a message holding exactly those, so
  a later or unknown name is a type error at its position);
- result types: validations and matchConditions yield bool,
  messageExpression yields string, auditAnnotations' valueExpression yields
  string or null (``dyn`` is accepted and checked again at run time);
- every error names the field path, the line:column inside the expression
  and carries the caret excerpt.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from cel_expr_python import cel

from vpol.cel import compat
from vpol.cel.aggregate_literals import Mismatch, checked_tree, mismatches
from vpol.cel.compat import line_column, tokenize
from vpol.cel.compat.syntax import member_references, nesting
from vpol.cel.environment import POLICY_VARIABLES, EnvSpec, environment, library_variables
from vpol.cel.format_check import FormatProblem, format_problems
from vpol.cel.literal_check import PARSED_LITERAL_CALLS, LiteralProblem, literal_problems
from vpol.cel.variables import typed_variables_message
from vpol.model.policy import AuditAnnotation, NamedExpression, Validation
from vpol.model.problems import Position, Problem

T = cel.Type

#: Deepest nesting the CEL parser accepts: cel-cpp (under cel-expr-python) stops at 32
#: recursion levels, counting brackets and the operands of a chain of binary operators
#: (``1 + 2 + ... + 33``). The API server's cel-go parser allows 250: vpol is stricter
#: here, and says so with the position where the limit is crossed (docs/cli.md documents it).
MAX_NESTING = 32
#: What the parser reports when that limit is crossed (without a usable position).
_RECURSION_RX = re.compile(r"Exceeded max recursion depth|Expression recursion limit exceeded")

_ERROR_RX = re.compile(r"ERROR: <input>:(\d+):(\d+): ")
_UNDECLARED_VAR_RX = re.compile(r"undefined field '([^']+)' not found in struct 'vpol\.typecheck\.Vars[0-9a-f]+'")

#: Expected result type per expression role: (allowed type names, description).
RESULT_TYPES: dict[str, tuple[tuple[str, ...], str]] = {
    "validation": (("bool",), "bool"),
    "matchCondition": (("bool",), "bool"),
    "generate": (("bool",), "bool"),
    "messageExpression": (("string",), "string"),
    "auditAnnotation": (("string", "null_type"), "string or null"),
    "imageReference": (("bool",), "bool"),
    "imageExtractor": (("list<string>", "list<dyn>"), "a list of image references"),
}

#: Roles whose expressions build typed literals (``Object{...}``, ``JSONPatch{...}``): compiled as
#: map literals (vpol.cel.compat.typed_literals), type-checked with the schema's types.
MUTATION_ROLES: dict[str, tuple[str, str]] = {
    "applyConfiguration": ("map", "an Object (apply configuration)"),
    "jsonPatch": ("list", "a list of JSONPatch"),
}


@dataclass(frozen=True)
class Program:
    """A compiled expression and what it needs at run time."""

    path: str
    source: str
    role: str
    expression: cel.Expression
    #: Names of policy variables this expression refers to.
    uses: frozenset[str] = frozenset()
    result_type: str = "dyn"
    #: Top-level names (object, request, variables, library variables...) the expression may read; an
    #: Activation for it needs no others. None: unknown, all of them.
    reads: frozenset[str] | None = None
    #: The text ``expression`` was built from (the source after the compiler's rewrites), and whether it was
    #: built without type checking: what vpol.policies.validating.fused composes a policy's one program from.
    evaluated: str = ""
    unchecked: bool = False


#: Which variables an expression's Activation holds, in order, and the (name, value key) pairs that identify it
#: among policy runs on one subject (None: not shared). See vpol.engine.evaluate.PolicyRun._activation_for.
ActivationPlan = tuple[tuple[str, ...], tuple[tuple[str, Any], ...] | None]


@dataclass
class CompiledOutcome:
    """What every compiled policy kind says of itself: its problems, and what the engine learns about its
    variables at run time (filled by the engine, once per compiled policy, shared by every subject)."""

    problems: list[Problem] = field(default_factory=list, kw_only=True)
    #: Per set of variable names: the variables it needs, transitively, in declaration order.
    needed: dict[frozenset[str], list[str]] = field(default_factory=dict, repr=False, kw_only=True)
    #: Per variable, what identifies its value on a given subject across policies (its expression and those
    #: of the variables it reads; None: never shared).
    value_keys: dict[str, tuple[Any, ...] | None] = field(default_factory=dict, repr=False, kw_only=True)
    #: Per set of variable names an expression reads: its ActivationPlan.
    activation_plans: dict[frozenset[str], ActivationPlan] = field(default_factory=dict, repr=False, kw_only=True)

    @property
    def ok(self) -> bool:
        return not any(p.severity == "error" for p in self.problems)

    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]


class CompiledAny(Protocol):
    """What the evaluation runtime (vpol.engine.evaluate.PolicyRun) reads of any kind's compiled policy: its
    variables, and the caches :class:`CompiledOutcome` holds for them."""

    variables: list[tuple[str, Program]]
    needed: dict[frozenset[str], list[str]]
    value_keys: dict[str, tuple[Any, ...] | None]
    activation_plans: dict[frozenset[str], ActivationPlan]


def parse_cel_errors(text: str) -> list[tuple[Position | None, str, str]]:
    """Split cel-expr-python's error text into (position, message, caret excerpt) items."""
    text = re.sub(r"\s*\[[A-Z_]+\]\s*$", "", text.strip())
    text = re.sub(r"^[A-Z_]+: ", "", text)
    matches = list(_ERROR_RX.finditer(text))
    if not matches:
        return [(None, text.strip(), "")]
    out: list[tuple[Position | None, str, str]] = []
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        body = text[m.end():end].rstrip()
        message, _, excerpt = body.partition("\n")
        message = _UNDECLARED_VAR_RX.sub(r"undeclared variable '\1' (a variable can only use variables declared before it)", message.strip())
        out.append((Position(int(m.group(1)), int(m.group(2))), message, excerpt))
    return out


def type_name(t: cel.Type) -> str:
    """A CEL type's name as the messages spell it (``bool``, ``map(string, string)``, ``null_type``)."""
    name = t.name().lower()
    return {"null": "null_type"}.get(name, name)


def spelled(type_name: str) -> str:
    """A type name as cel-go spells it in messages: ``map(string, int)``, not ``map<string, int>``."""
    return type_name.replace("<", "(").replace(">", ")")


def _nesting(src: str) -> int:
    return nesting(tokenize(src))


_BINARY = frozenset({"+", "-", "*", "/", "%", "&&", "||", "==", "!=", "<", "<=", ">", ">=", "in", "?"})


def deepest_position(src: str, limit: int = MAX_NESTING) -> Position | None:
    """Where ``src`` first nests ``limit`` levels deep: brackets, plus the operands of a chain of binary
    operators at one bracket level (each adds a level to the parser's recursion)."""
    chains = [0]
    for tok in tokenize(src):
        if tok.text in ("(", "[", "{"):
            chains.append(0)
        elif tok.text in (")", "]", "}"):
            if len(chains) > 1:
                chains.pop()
            continue
        elif tok.text in _BINARY:
            chains[-1] += 1
        else:
            continue
        if len(chains) - 1 + chains[-1] >= limit - 1:
            return Position(*line_column(src, tok.start))
    return None


def _too_deep(src: str, path: str) -> Problem:
    position = deepest_position(src) or Position(1, 1)
    return Problem(f"expression nests deeper than {MAX_NESTING} levels (brackets and chained operators; vpol's "
                   "CEL parser stops there, the API server's at 250): split it, for example with variables",
                   path=path, expression_position=position, excerpt=excerpt_at(src, position))


def variable_references(src: str) -> frozenset[str]:
    """The policy variables ``src`` reads (``variables.x``, ``variables["x"]``)."""
    return frozenset(name for name, _at in member_references(tokenize(src), "variables"))


def top_level_references(src: str) -> frozenset[str]:
    """The environment's top-level names (POLICY_VARIABLES and the library variables) that ``src`` mentions.

    CEL has no way to read a variable it does not name, so this is a safe over-approximation (a field or a
    comprehension variable of the same name counts too)."""
    return frozenset(tok.text for tok in tokenize(src) if tok.kind == "ident" and tok.text in _top_level_names())


@functools.cache
def _top_level_names() -> frozenset[str]:
    return frozenset({*POLICY_VARIABLES, *library_variables()})


def excerpt_at(src: str, position: Position) -> str:
    """The caret excerpt cel prints under an error, for ``position`` in ``src``."""
    lines = src.split("\n")
    text = lines[position.line - 1] if 0 < position.line <= len(lines) else ""
    return f" | {text}\n | {'.' * max(0, position.column - 1)}^"


def compile_expression(src: str, path: str, role: str, spec: EnvSpec, *,
                       evaluated: bool = True) -> tuple[Program | None, list[Problem]]:
    """Compile one expression in the environment ``spec``; check its result type.

    ``evaluated=False``: only the verdict and the result type are wanted (a compile verdict, the type checker's
    first pass), so the rewrites that make the evaluated program behave as cel-go's are skipped (they never add
    a problem: a rewrite that does not compile keeps the program as written)."""
    if not src.strip():
        return None, [Problem("expression is empty", path=path)]
    if _nesting(src) > MAX_NESTING:
        return None, [_too_deep(src, path)]
    mutation = MUTATION_ROLES.get(role)
    # The one reading of the expression (vpol.cel.compat): what is checked, and the map back to `src`.
    source = compat.read(src, typed_object_literals=mutation is not None)
    written = source.checked
    #: Built without type checking (see compile_written): the evaluated program is too.
    unchecked = False
    try:
        expr, unchecked = compile_written(environment(spec), written)
    except RuntimeError as exc:
        if _RECURSION_RX.search(str(exc)):
            return None, [_too_deep(src, path)]
        problems = []
        for pos, msg, excerpt in parse_cel_errors(str(exc)):
            if CROSS_NUMERIC_RX.search(msg):
                continue  # not an error in cel-go (see compile_written)
            if mutation is not None and pos is not None:
                # A position in the checked text, moved back to what the user wrote.
                pos = Position(*source.position(pos.line, pos.column))
                excerpt = excerpt_at(src, pos)
            problems.append(Problem(msg, path=path, expression_position=pos, excerpt=excerpt))
        return None, problems
    except Exception as exc:  # noqa: BLE001 - the engine must never take the caller down
        return None, [Problem(f"expression cannot be compiled: {exc}", path=path)]
    result = type_name(expr.return_type())
    expected = RESULT_TYPES.get(role)
    if expected and result not in expected[0] and result != "dyn":
        return None, [Problem(f"expression must evaluate to {expected[1]}, not {spelled(result)}", path=path,
                              expression_position=Position(1, 1))]
    if mutation and not result.startswith(mutation[0]) and result != "dyn":
        return None, [Problem(f"expression must evaluate to {mutation[1]}, not {spelled(result)}", path=path,
                              expression_position=Position(1, 1))]
    if not mutation:
        # Mixed-type list and map literals, which cel-go's checker refuses in the API server and in Kyverno.
        # (Mutations are left out: their Object literals are checked as maps here, vpol.cel.compat.typed_literals.
        # A GeneratingPolicy's environment allows them: Kyverno builds it without HomogeneousAggregateLiterals,
        # objects to generate being maps of mixed values.)
        # And format calls whose literal template and arguments do not fit (cel-go's strings extension checks them).
        # And literal arguments that do not parse (matches, duration, timestamp, find: vpol.cel.literal_check).
        mixed: list[Mismatch | FormatProblem | LiteralProblem] = []
        # Reading the checked tree costs more than compiling; an expression without a list or map literal
        # (no `[` or `{`), without a `format` call and without a call whose literal argument must parse has
        # nothing these checks could find.
        literals = ("[" in written or "{" in written) and not spec.generating
        formats = not unchecked and "format" in written
        parsed = not unchecked and any(name in written for name in PARSED_LITERAL_CALLS)
        try:
            if literals or formats or parsed:
                tree = checked_tree(expr)
                mixed += mismatches(tree) if literals else []
                mixed += format_problems(tree) if formats else []
                mixed += literal_problems(tree) if parsed else []
        except Exception:  # noqa: BLE001 - an unreadable checked expression: nothing known, nothing refused
            pass
        if mixed:
            return None, [Problem(m.message, path=path, expression_position=(at := Position(*line_column(src, m.offset))),
                                  excerpt=excerpt_at(src, at)) for m in sorted(mixed, key=lambda m: m.offset)]
    if evaluated and not spec.kubernetes_only:
        # The program evaluates what cel-go would (vpol.cel.compat.EVALUATED: Go's format, Kyverno's orValue,
        # selections and presence on scalars, eager cel.bind); what was checked and reported above is the
        # expression as written.
        guarded = source.evaluated
        if guarded != written:
            try:
                expr = environment(spec).compile(guarded, disable_check=unchecked)
                written = guarded
            except Exception:  # noqa: BLE001 - keep the program as written
                pass
    return Program(path, src, role, expr, variable_references(src), result, top_level_references(src),
                   written, unchecked), []


#: The checker's complaint about ordering between an int, a uint and a double.
CROSS_NUMERIC_RX = re.compile(r"found no matching overload for '_(?:<|<=|>|>=)_' applied to "
                              r"'\((?:int|uint|double), (?:int|uint|double)\)'")


def compile_written(env: cel.Env, text: str) -> tuple[cel.Expression, bool]:
    """``text`` compiled in ``env``, and whether it had to be built without type checking.

    cel-go's CrossTypeNumericComparisons, which the API server and Kyverno enable, type-checks ordering between
    int, uint and double (``quantity(q).asApproximateFloat() > 1``); cel-cpp compares such values at run time,
    but its checker has no declarations for them and takes none (the runtime already has the overloads). When
    those are the only errors, the program is built unchecked; any other error is raised as it is."""
    try:
        return env.compile(text), False
    except RuntimeError as exc:
        errors = parse_cel_errors(str(exc))
        if not errors or not all(CROSS_NUMERIC_RX.search(message) for _pos, message, _excerpt in errors):
            raise
        return env.compile(text, disable_check=True), True


class Frame:
    """Compiles the parts every admission policy kind shares: variables (in order) and matchConditions."""

    def __init__(self, out: Any, mode: str, kubernetes_only: bool, *, evaluated: bool = True,
                 generating: str = "", image_validating: bool = False, kind: str = "ValidatingPolicy") -> None:
        self.out = out
        self.mode = mode
        self.kubernetes_only = kubernetes_only
        self.evaluated = evaluated
        self.generating = generating
        self.image_validating = image_validating
        self.kind = kind
        self.declared: list[tuple[str, str]] = []

    def spec_now(self) -> EnvSpec:
        return EnvSpec(mode=self.mode, kubernetes_only=self.kubernetes_only,
                       variables_type=typed_variables_message(self.declared), generating=self.generating,
                       image_validating=self.image_validating)

    def add(self, src: str, path: str, role: str, env_spec: EnvSpec | None = None) -> Program | None:
        prog, problems = compile_expression(src, path, role, env_spec or self.spec_now(), evaluated=self.evaluated)
        self.out.problems.extend(problems)
        return prog

    def validations_and_audits(self, validations: Sequence[Validation],
                               audit_annotations: Sequence[AuditAnnotation]) -> None:
        """validations (bools) with their messageExpressions (strings), then auditAnnotations (strings or null)."""
        for i, val in enumerate(validations):
            prog = self.add(val.expression, f"spec.validations[{i}].expression", "validation")
            msg = None
            if val.message_expression:
                msg = self.add(val.message_expression, f"spec.validations[{i}].messageExpression",
                               "messageExpression")
            if prog:
                self.out.validations.append((i, prog, msg))
        for i, aa in enumerate(audit_annotations):
            prog = self.add(aa.value_expression, f"spec.auditAnnotations[{i}].valueExpression", "auditAnnotation")
            if prog:
                self.out.audit_annotations.append((aa.key, prog))

    def finish(self, policy: Any) -> None:
        """A namespaced policy's forbidden libraries, then every problem located in the policy's document."""
        if policy.namespace:
            self.out.problems.extend(namespaced_forbidden(policy.expressions()))
        self.out.problems = [policy.locate(p) for p in self.out.problems]

    def variables_and_conditions(self, variables: Sequence[NamedExpression],
                                 conditions: Sequence[NamedExpression], *, conditions_see_variables: bool) -> None:
        for i, var in enumerate(variables):
            prog = self.add(var.expression, f"spec.variables[{i}].expression", "variable")
            # A variable that does not compile is still declared (as dyn), so its
            # users are not reported a second time for it.
            self.declared.append((var.name, prog.result_type if prog else "dyn"))
            if prog:
                self.out.variables.append((var.name, prog))
        for i, mc in enumerate(conditions):
            path = f"spec.matchConditions[{i}].expression"
            prog = self.add(mc.expression, path, "matchCondition")
            if prog and not conditions_see_variables and prog.uses:
                # Kyverno compiles a ValidatingPolicy's matchConditions before its variables (the API server's
                # VAPs and Kyverno's MutatingPolicies let them read variables).
                name = sorted(prog.uses)[0]
                at = next((at for used, at in member_references(tokenize(mc.expression), "variables")
                           if used == name), None)
                self.out.problems.append(Problem(
                    f"undefined field '{name}': {'an' if self.kind[0] in 'AEIOU' else 'a'} {self.kind}'s "
                    "matchConditions cannot read variables (Kyverno "
                    "compiles them before the variables)", path=path,
                    expression_position=Position(*line_column(mc.expression, at)) if at is not None else None))
                continue
            if prog:
                self.out.match_conditions.append((mc.name, prog))


#: Libraries a namespaced policy may not name (Kyverno's rule, pkg/cel/policies/vpol/validate.go and
#: mpol/validate.go: they reach beyond the namespace), with Kyverno's messages.
NAMESPACED_FORBIDDEN = {
    "globalContext": "globalContext.* is not allowed in namespaced policies",
    "http": "http.* is not allowed in namespaced policies; set --allowHTTPInNamespacedPolicies to enable",
}


def namespaced_forbidden(expressions: Sequence[tuple[str, str, str]]) -> list[Problem]:
    """Kyverno refuses a namespaced policy that names ``globalContext`` or ``http`` in any expression: the first
    use of each, with its position (a name in a string, or a field after ``.`` or ``.?``, does not count)."""
    found: dict[str, Problem] = {}
    for path, src, _role in expressions:
        before, previous = "", ""
        for tok in tokenize(src):
            selected = previous == "." or (previous == "?" and before == ".")
            if tok.kind == "ident" and not selected and tok.text in NAMESPACED_FORBIDDEN and tok.text not in found:
                at = Position(*line_column(src, tok.start))
                found[tok.text] = Problem(NAMESPACED_FORBIDDEN[tok.text], path=path, expression_position=at,
                                          excerpt=excerpt_at(src, at))
            before, previous = previous, tok.text
    return [found[name] for name in NAMESPACED_FORBIDDEN if name in found]
