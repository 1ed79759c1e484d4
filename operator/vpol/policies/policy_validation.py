"""Is a policy document valid? One answer for `vpol check` and for the operator's policy-validation webhook (pure).

A document of one of vpol's kinds is parsed (the model's field rules: Kyverno's
validation rules and the API server's), every expression compiled, and the
policy type-checked against the matched kinds' schemas. Errors make the policy
invalid; type-check warnings do not, except a result of the wrong type for
every matched kind (a mutation that cannot apply, a condition that is a map),
which fails on every object and so is an error, as in `vpol check`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from vpol.cel.typecheck import check_policy, check_policy_cached
from vpol.engine.evaluate import compile_exception
from vpol.model.discovery import Discovery
from vpol.model.global_context import is_global_context_document, parse_global_context_entry
from vpol.model.parse import is_exception_document, parse_exception
from vpol.model.policy import PolicyException
from vpol.model.problems import Problem
from vpol.policies.mutating.model import MutatingPolicy
from vpol.policies.registry import KINDS, AnyPolicy, kind_for_document, kind_of
from vpol.policies.validating.model import ValidatingPolicy


@dataclass
class Verdict:
    """What validating one document found."""

    #: The document's kind and reference (``Kind/name`` or ``Kind/namespace/name``).
    ref: str = ""
    problems: list[Problem] = field(default_factory=list)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity != "error"]


def policy_problems(policy: AnyPolicy, *, typecheck: bool = True,
                    discovery: Discovery | None = None, wrong_result_is_error: bool = True,
                    cached: bool = False) -> list[Problem]:
    """Compile errors and type-check findings of a parsed policy, located in its document.

    ``wrong_result_is_error``: a result of the wrong type for every matched kind fails on every object, so
    `vpol check` calls it an error; at apply time it is a warning (Kyverno, which does not type-check against
    schemas, admits such a policy, and vpol refuses only what Kyverno refuses).

    ``cached``: answered from (and kept in) the operator's memos of compile verdicts and type warnings per spec,
    which its watches, scanner and reconciler then find filled (apply-time validation of objects from the API
    server, whose documents carry no source positions; the CLI locates each file's problems itself).

    A GeneratingPolicy's or DeletingPolicy's expressions are compiled and type-checked by CEL's checker (their
    objects are typed ``dyn``, as in Kyverno); they are not checked against the matched kinds' schemas. So are an
    ImageValidatingPolicy's (whose expressions read images and attestations more than the object)."""
    kind = kind_of(policy)
    if not kind.typechecked:
        return list(kind.compile_problems(policy))
    compile_problems = kind.memo_problems if cached and kind.memo_problems is not None else kind.compile_problems
    problems = list(compile_problems(policy))
    typed = cast(ValidatingPolicy | MutatingPolicy, policy)  # the type-checked kinds
    if typecheck:
        warnings = check_policy_cached(typed, discovery) if cached and discovery is not None else \
            check_policy(typed, discovery)
        problems.extend(typed.locate(Problem(w.warning.strip(), path=w.field_path,
                                              severity="error" if w.wrong_result and wrong_result_is_error
                                              else "warning"))
                        for w in warnings)
    return problems


def exception_problems(exc: PolicyException) -> list[Problem]:
    return list(compile_exception(exc).problems)


def is_validated_document(obj: Any) -> bool:
    """Whether ``obj`` is of a kind :func:`validate_document` answers for."""
    return isinstance(obj, dict) and (kind_for_document(obj) is not None or is_exception_document(obj) or
                                      is_global_context_document(obj))


def validate_document(obj: Mapping[str, Any], discovery: Discovery | None = None, *, cached: bool = False) -> Verdict:
    """Every problem of one document of vpol's kinds (ValidatingPolicy, NamespacedValidatingPolicy,
    MutatingPolicy, NamespacedMutatingPolicy, GeneratingPolicy, NamespacedGeneratingPolicy, DeletingPolicy,
    NamespacedDeletingPolicy, ImageValidatingPolicy, NamespacedImageValidatingPolicy, PolicyException,
    GlobalContextEntry), as apply-time validation sees
    them: what does not parse or compile is an
    error, type-check findings are warnings."""
    data = dict(obj)
    md = data.get("metadata") or {}
    name = f"{md.get('namespace')}/{md.get('name')}" if md.get("namespace") else str(md.get("name") or "")
    verdict = Verdict(ref=f"{data.get('kind')}/{name}")
    if is_global_context_document(data):
        _entry, verdict.problems = parse_global_context_entry(data)
        return verdict
    if is_exception_document(data):
        exc, problems = parse_exception(data)
        verdict.problems = problems + (exception_problems(exc) if exc is not None else [])
        return verdict
    policy, problems = (kind_for_document(data) or KINDS[0]).parse(data)
    verdict.problems = problems + (policy_problems(policy, discovery=discovery, wrong_result_is_error=False,
                                                   cached=cached) if policy is not None else [])
    return verdict
