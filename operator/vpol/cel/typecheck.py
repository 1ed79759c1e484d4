"""Schema-aware type checking of a policy's expressions, as the API server does for VAPs.

kube-controller-manager's ValidatingAdmissionPolicy status controller
(k8s.io/apiserver/pkg/admission/plugin/policy/validating/typechecking.go)
compiles every validation ``expression`` and ``messageExpression`` once per
kind the policy matches, with ``object``/``oldObject`` typed by that kind's
OpenAPI schema, and writes what fails to ``status.typeChecking``. We do the
same, offline or against a cluster's schemas:

- kinds come from ``matchConstraints.resourceRules`` (``kinds_to_check``):
  a rule with ``*`` in its groups or versions is skipped, wildcard and
  ``res/sub`` resources are ignored, a rule stops after 10 resolved kinds,
  kinds without a schema are skipped; the result is sorted by group,
  version, kind;
- variables are compiled in order in the typed environment and ``variables``
  is typed by their results (scalars, lists, maps, timestamps and durations
  keep their type; objects and anything else become ``dyn``, as Kubernetes'
  ``convertCelTypeToDeclType`` does); a variable that fails to compile is
  ``dyn`` for the expressions after it;
- for each expression, one line per failing kind, exactly as Kubernetes
  formats ``TypeCheckingResults``: ``"<group>/<version>, Kind=<Kind>: " +
  <cel issues> + "\\n"``, the kinds joined by ``"\\n"``; core kinds read
  ``/v1, Kind=Pod``. cel-cpp's "undefined field 'x' not found in struct 'T'"
  is shortened to cel-go's "undefined field 'x'".

Differences from the API server, on purpose: we check every expression we
are given (matchConditions, variables, auditAnnotations too, not only
validations), and only those that compile without schemas (anything else is
the compiler's error to report); and the schema typing of
``vpol.cel.schemas`` is more lenient where Kubernetes reports fields that
exist (Quantity values such as ``resources.limits``, property-less objects
such as ``fieldsV1``, preserve-unknown-fields objects). Everything else was
compared verbatim with what kube-controller-manager v1.37.2 writes
(tests/unit/schema/data). Warnings never make a policy invalid.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from cel_expr_python import cel
from google.protobuf import descriptor_pb2

from vpol.cel import schemas
from vpol.cel.compat import OR_VALUE, TokenStream, line_column, rewrite, typed_literals
from vpol.cel.compat.syntax import literals
from vpol.cel.compiler import (
    CROSS_NUMERIC_RX,
    MUTATION_ROLES,
    RESULT_TYPES,
    compile_expression,
    excerpt_at,
    spelled,
    type_name,
)
from vpol.cel.environment import EnvSpec, environment
from vpol.cel.memo import BoundedMemo
from vpol.cel.object_types import JSON_PATCH_TYPE, atomic_assignments, construction_container, untyped_literal_paths
from vpol.cel.variables import typed_variables_message
from vpol.model.discovery import Discovery, ResourceInfo, builtin
from vpol.model.policy import MatchResources, NamedExpression
from vpol.model.problems import Position

log = logging.getLogger(__name__)

FDP = descriptor_pb2.FieldDescriptorProto

#: The API server type-checks against at most this many kinds per rule.
MAX_TYPES_TO_CHECK = 10

ROLES = ("validation", "messageExpression", "matchCondition", "variable", "auditAnnotation", *MUTATION_ROLES)

SchemaSource = Callable[[str, str, str], Mapping[str, Any] | None]


@dataclass(frozen=True)
class TypeWarning:
    """One expression's type-check result: ``status.typeChecking.expressionWarnings[]``."""

    field_path: str
    warning: str
    #: The expression's type with the kind's schema is not what its role needs (a validation that
    #: is a map, say): it fails on every object of that kind, so `vpol check` calls it an error.
    wrong_result: bool = False


class RuleLike(Protocol):
    @property
    def api_groups(self) -> Sequence[str]: ...

    @property
    def api_versions(self) -> Sequence[str]: ...

    @property
    def resources(self) -> Sequence[str]: ...


# --- which kinds -----------------------------------------------------------------


def kinds_to_check(rules: Iterable[RuleLike], discovery: Discovery | None = None) -> list[ResourceInfo]:
    """The kinds the API server would type-check a policy with these resource rules against."""
    discovery = discovery if discovery is not None else builtin()
    found: dict[tuple[str, str, str], ResourceInfo] = {}

    def ordered() -> list[ResourceInfo]:
        return [found[key] for key in sorted(found)]

    for rule in rules:
        if any("*" in g for g in rule.api_groups) or not rule.api_groups:
            continue
        if any("*" in v for v in rule.api_versions) or not rule.api_versions:
            continue
        names = sorted(r for r in rule.resources if "*" not in r and "/" not in r)
        if not names:
            continue
        count = 0
        for group in sorted(rule.api_groups):
            for version in sorted(rule.api_versions):
                for name in names:
                    info = discovery.resource(group, version, name)
                    if info is None:
                        continue
                    found.setdefault(info.gvk, info)
                    count += 1
                    if count == MAX_TYPES_TO_CHECK:
                        return ordered()
    return ordered()


# --- types of variables ------------------------------------------------------------

# A parsed cel.Type name: ("INT",), ("LIST", elem), ("MAP", key, value), ("MSG", name), ...


# --- compiling ------------------------------------------------------------------------

_PREFIX = re.compile(r"^[A-Z_]+: ")
_SUFFIX = re.compile(r"\s*\[[A-Z_]+\]\s*$")
_UNDEFINED_FIELD = re.compile(r"undefined field '([^']*)' not found in struct '[^']*'")


_CEL_GO_NAMES = (("google.protobuf.Timestamp", "timestamp"), ("google.protobuf.Duration", "duration"))
#: Our generated schema messages carry a content hash in their package (vpol.schema.h<hash>.Container):
#: an implementation detail; messages show the schema's own type name.
_SCHEMA_PACKAGE = re.compile(r"\bvpol\.schema\.h[0-9a-f]+\.")


#: The issue cel reports for ``orValue`` on what is not an optional, which Kyverno's environments accept.
_OR_VALUE_OVERLOAD = "found no matching overload for 'orValue'"


def issues_text(error: str, *, or_value_compat: bool = False) -> str:
    """cel-expr-python's compile error as cel-go's ``Issues.String()``.

    cel-cpp and cel-go word a few messages differently; the message lines
    (not the quoted source) are rewritten to cel-go's wording. cel-cpp also
    reports follow-on errors about the ``*error*`` type produced by an
    earlier error (selecting from it, iterating it); cel-go does not, so
    they are dropped. With ``or_value_compat``, so are the issues of ``orValue`` on values that are not
    optionals (Kyverno's reading, see :func:`_compile`), unless nothing else is left.
    """
    text = _SUFFIX.sub("", _PREFIX.sub("", error.strip(), count=1))
    blocks: list[list[str]] = []
    for line in text.split("\n"):
        if line.startswith("ERROR: ") or not blocks:
            blocks.append([])
        blocks[-1].append(line)
    kept = []
    for block in blocks:
        head = block[0]
        if head.startswith("ERROR: "):
            if "'*error*'" in head and len(blocks) > 1:
                continue
            if or_value_compat and _OR_VALUE_OVERLOAD in head and \
                    any(_OR_VALUE_OVERLOAD not in b[0] and "'*error*'" not in b[0] for b in blocks):
                continue
            if CROSS_NUMERIC_RX.search(head):
                continue  # ordering between int, uint and double is allowed (vpol.cel.compiler.compile_written)
            head = _UNDEFINED_FIELD.sub(r"undefined field '\1'", head)
            for cpp, go in _CEL_GO_NAMES:
                head = head.replace(cpp, go)
            head = _SCHEMA_PACKAGE.sub("", head)
            head = _IN_CONTAINER.sub("", _OBJECT_CONTAINER.sub("", head)).replace("vpolac.JSONPatch", "JSONPatch")
        kept.append("\n".join([head, *block[1:]]))
    return "\n".join(kept)


def _untyped_variables(declared: Sequence[tuple[str, str]]) -> str:
    """The compiler's ``variables`` type; map(string, dyn) when it cannot be built (e.g. repeated names)."""
    try:
        return typed_variables_message(declared)
    except Exception:  # noqa: BLE001 - the compiler reports bad variable names itself
        return ""


def _compile(env: cel.Env, src: str, role: str = "", *,
             kubernetes_only: bool = False) -> tuple[str | None, str | None]:
    """(result type name, None) or (None, issues); a result type the role does not allow is an issue.

    Outside Kubernetes' own environment, an expression that checks once its ``orValue`` calls are read as
    Kyverno reads them (vpol.cel.compat.OR_VALUE: any receiver, a ``dyn`` result) is no
    issue; the issues reported are those of the expression as written (their positions are the user's)."""
    try:
        expr = env.compile(src)
    except RuntimeError as exc:
        compat = src if kubernetes_only else rewrite(src, (OR_VALUE,)).text
        try:
            if compat == src:
                raise
            expr = env.compile(compat)
        except RuntimeError:
            text = issues_text(str(exc), or_value_compat=compat != src)
            if not text.strip():
                return "dyn", None  # only orderings between numbers of different types: fine in cel-go
            return None, text
    except Exception as exc:  # noqa: BLE001 - a checker must never take its caller down
        log.debug("type check of %r failed internally: %s", src, exc)
        return None, None
    expected = RESULT_TYPES.get(role)
    result = type_name(expr.return_type())
    if expected and result not in expected[0] and result != "dyn":
        return None, f"{WRONG_RESULT}{expected[1]}, not {spelled(result)}"
    if role in MUTATION_ROLES and result != "dyn":
        raw = expr.return_type().name()
        wanted_ok = raw.endswith(".Object") if role == "applyConfiguration" else \
            result in (f"list<{JSON_PATCH_TYPE.lower()}>", "list<dyn>")
        if not wanted_ok:
            shown = _OBJECT_CONTAINER.sub("", spelled(raw)).replace("vpolac.", "")
            return None, f"{WRONG_RESULT}{MUTATION_ROLES[role][1]}, not {shown}"
    return expr.return_type().name(), None


_ISSUE_AT = re.compile(r"^ERROR: <input>:(\d+):(\d+): ")


def _placed_in(issues: str, rewritten: TokenStream, src: str) -> str:
    """``issues`` about ``rewritten.text`` with their positions and excerpts moved to ``src``, as written."""
    blocks: list[str] = []
    for line in issues.split("\n"):
        m = _ISSUE_AT.match(line)
        if m:
            at = Position(*rewritten.original_line_column(int(m.group(1)), int(m.group(2))))
            blocks.append(f"ERROR: <input>:{at.line}:{at.column}: {line[m.end():]}\n{excerpt_at(src, at)}")
        elif not line.startswith(" | ") and blocks:
            blocks[-1] += "\n" + line
        elif not blocks:
            blocks.append(line)
    return "\n".join(blocks)


def _atomic_issues(schema: Mapping[str, Any], src: str) -> str | None:
    """The API server's refusal of apply configurations that set atomic values, as checker issues."""
    found = atomic_assignments(schema, src)
    if not found:
        return None
    lines = []
    for offset, path in found:
        line, column = line_column(src, offset)
        lines.append(f"ERROR: <input>:{line}:{column}: invalid ApplyConfiguration: may not mutate atomic arrays, "
                     f"maps or structs: {path}\n{excerpt_at(src, Position(line, column))}")
    return "\n".join(lines)


#: The container prefix of literal types (vpol.cel.object_types), left out of messages.
_OBJECT_CONTAINER = re.compile(r"\bvpolac\.h[0-9a-f]+(\.l[0-9]+)*\.")
_IN_CONTAINER = re.compile(r" \(in container '[^']*'\)")


WRONG_RESULT = "ERROR: <input>:1:1: expression must evaluate to "


def _object_type(schema: Mapping[str, Any]) -> str | None:
    try:
        name = schemas.message_type(schema)
    except Exception as exc:  # noqa: BLE001 - a broken schema means "no schema", as in k8s
        log.debug("cannot build types from schema: %s", exc)
        return None
    # The pool CEL uses may still refuse a file the Python pool took; check.
    try:
        got = environment(EnvSpec(object_type=name)).compile("object").return_type().name()
    except Exception:  # noqa: BLE001
        return None
    return name if got == name else None


def check(
    expressions: Sequence[tuple[str, str, str]],
    variable_names: Sequence[str],
    resources: Sequence[ResourceInfo],
    schema_source: SchemaSource | None = None,
    *,
    kubernetes_only: bool = False,
) -> list[TypeWarning]:
    """Type-check ``expressions`` ((field path, source, role)) against each kind in ``resources``.

    ``variable_names`` are the policy's variables in order; the expressions
    with role ``variable`` are their sources, in the same order.
    ``schema_source(group, version, kind)`` returns an OpenAPI schema (or
    None to skip the kind); by default the built-in bundle.
    """
    if not resources or not expressions:
        return []
    source = schema_source if schema_source is not None else builtin().schema
    variables = [(path, src) for path, src, role in expressions if role == "variable"]
    names = list(variable_names)[: len(variables)]
    variable_paths = {path for path, _ in variables}

    # 1. Without schemas, exactly as the compiler does: what fails here is not ours to report.
    untyped_ok: set[str] = set()
    declared: list[tuple[str, str]] = []
    for (path, src), name in zip(variables, names):
        prog, problems = compile_expression(
            src, path, "variable", EnvSpec(kubernetes_only=kubernetes_only, variables_type=_untyped_variables(declared)),
            evaluated=False)
        if prog is not None and not problems:
            untyped_ok.add(path)
        declared.append((name, prog.result_type if prog else "dyn"))
    full_untyped = EnvSpec(kubernetes_only=kubernetes_only, variables_type=_untyped_variables(declared))
    for path, src, role in expressions:
        if path in variable_paths:
            continue
        prog, problems = compile_expression(src, path, role, full_untyped, evaluated=False)
        if prog is not None and not problems:
            untyped_ok.add(path)
    if not untyped_ok:
        return []

    # 2. Per kind, in group/version/kind order.
    failures: dict[str, list[str]] = {}
    for info in sorted(resources, key=lambda r: r.gvk):
        schema = source(info.group, info.version, info.kind)
        if schema is None:
            continue
        object_type = _object_type(schema)
        if object_type is None:
            continue
        typed: list[tuple[str, str]] = []
        for (path, src), name in zip(variables, names):
            if path not in untyped_ok:  # broken anyway: dyn for the expressions after it
                typed.append((name, "DYN"))
                continue
            env = environment(EnvSpec(kubernetes_only=kubernetes_only, object_type=object_type,
                                      variables_type=typed_variables_message(typed)))
            result, issues = _compile(env, src, kubernetes_only=kubernetes_only)
            if issues is not None:
                failures.setdefault(path, []).append(f"{info.gvk_string}: {issues}\n")
            typed.append((name, result or "DYN"))
        env = environment(EnvSpec(kubernetes_only=kubernetes_only, object_type=object_type,
                                  variables_type=typed_variables_message(typed)))
        for path, src, _role in expressions:
            if path in variable_paths or path not in untyped_ok:
                continue
            expression_env = env
            checked: TokenStream | None = None
            if _role in MUTATION_ROLES:
                literal_names = [lit.name for lit in literals(src)]
                # Literals of map-valued fields (Object.metadata.labels{...}) build maps, in Kyverno's compiler
                # and in the API server alike (its Object types are resolved by name at run time: measured,
                # tests/e2e/test_map_shapes.py); their values are checked against the map's value type.
                dynamic = untyped_literal_paths(schema, literal_names)
                checked = rewrite(src, (typed_literals(only=dynamic),)) if dynamic else None
                container = construction_container(schema, [n for n in literal_names if n not in dynamic])
                expression_env = environment(EnvSpec(kubernetes_only=kubernetes_only, object_type=object_type,
                                                     variables_type=typed_variables_message(typed),
                                                     container=container))
            _result, issues = _compile(expression_env, checked.text if checked else src, _role,
                                       kubernetes_only=kubernetes_only)
            if issues is not None and checked is not None:
                issues = _placed_in(issues, checked, src)
            if issues is None and _role == "applyConfiguration":
                issues = _atomic_issues(schema, src)
            if issues is not None:
                failures.setdefault(path, []).append(f"{info.gvk_string}: {issues}\n")

    # A mutation that does not type-check fails on every object of the kind (the API server compiles
    # it with the kind's types and cannot apply it), like an expression of the wrong result type.
    return [TypeWarning(path, "\n".join(failures[path]),
                        wrong_result=role in MUTATION_ROLES or any(WRONG_RESULT in f for f in failures[path]))
            for path, _src, role in expressions if path in failures]


class _CheckedSpec(Protocol):
    @property
    def match_constraints(self) -> MatchResources | None: ...
    @property
    def variables(self) -> tuple[NamedExpression, ...]: ...


class CheckedPolicy(Protocol):
    """What :func:`check_policy` reads of a policy whose kind is type-checked against the matched kinds' schemas
    (a ValidatingPolicy, a MutatingPolicy: ``typechecked`` in vpol.policies.registry)."""

    @property
    def kind(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def json_mode(self) -> bool: ...
    @property
    def spec(self) -> _CheckedSpec: ...
    def expressions(self) -> list[tuple[str, str, str]]: ...


def check_policy(
    policy: CheckedPolicy,
    discovery: Discovery | None = None,
    schema_source: SchemaSource | None = None,
    *,
    roles: Iterable[str] = ROLES,
    kubernetes_only: bool = False,
) -> list[TypeWarning]:
    """Type warnings for ``policy`` (none in JSON mode: its payloads have no schema)."""
    if policy.json_mode:
        return []
    discovery = discovery if discovery is not None else builtin()
    constraints = policy.spec.match_constraints
    resources = kinds_to_check(constraints.resource_rules if constraints else (), discovery)
    wanted = set(roles)
    expressions = [e for e in policy.expressions() if e[2] in wanted or e[2] == "variable"]
    warnings = check(
        expressions,
        [v.name for v in policy.spec.variables],
        resources,
        schema_source if schema_source is not None else discovery.schema,
        kubernetes_only=kubernetes_only,
    )
    return [w for w in warnings if _role_of(w.field_path, expressions) in wanted]


#: check_policy's warnings by spec, for the discovery snapshot they were computed against (the operator's
#: reconciles ask again at every event of a policy's generated objects: 27 ms per Pod Security policy each time,
#: measured); a new snapshot gets a new memo.
CHECKED_KEPT = 512
_CHECKED: list[tuple[Discovery | None, BoundedMemo[tuple[TypeWarning, ...]]]] = [(None, BoundedMemo(CHECKED_KEPT))]
_CHECKED_LOCK = threading.Lock()


def check_policy_cached(policy: CheckedPolicy, discovery: Discovery) -> list[TypeWarning]:
    """:func:`check_policy` of ``policy`` against ``discovery``, computed once per spec while ``discovery`` (an
    immutable snapshot) is the one asked with; a new snapshot starts afresh."""
    with _CHECKED_LOCK:
        if _CHECKED[0][0] is not discovery:
            _CHECKED[0] = (discovery, BoundedMemo(CHECKED_KEPT))
        memo = _CHECKED[0][1]
    key = (type(policy).__name__, policy.kind, policy.namespace, policy.spec)
    return list(memo.get(key, lambda: tuple(check_policy(policy, discovery))))


def _role_of(path: str, expressions: Sequence[tuple[str, str, str]]) -> str:
    return next((role for p, _src, role in expressions if p == path), "")
