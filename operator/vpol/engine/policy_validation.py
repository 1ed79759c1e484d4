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
from typing import Any

from vpol.cel.compiler import (
    compile_deleting_policy,
    compile_generating_policy,
    compile_image_validating_policy,
    compile_mutating_policy,
    compile_policy,
    compile_verdict,
)
from vpol.cel.typecheck import check_policy, check_policy_cached
from vpol.engine.evaluate import compile_exception
from vpol.model.deleting import DeletingPolicy, is_deleting_policy_document, parse_deleting_policy
from vpol.model.discovery import Discovery
from vpol.model.generating import GeneratingPolicy, is_generating_policy_document, parse_generating_policy
from vpol.model.image_validating import (
    ImageValidatingPolicy,
    is_image_validating_policy_document,
    parse_image_validating_policy,
)
from vpol.model.global_context import is_global_context_document, parse_global_context_entry
from vpol.model.mutating import MutatingPolicy
from vpol.model.parse import (
    is_exception_document,
    is_mutating_policy_document,
    is_policy_document,
    parse_exception,
    parse_mutating_policy,
    parse_policy,
)
from vpol.model.policy import PolicyException, ValidatingPolicy
from vpol.model.problems import Problem


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


AnyPolicy = ValidatingPolicy | MutatingPolicy | GeneratingPolicy | DeletingPolicy | ImageValidatingPolicy


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
    problems: list[Problem]
    if isinstance(policy, ImageValidatingPolicy):
        return list(compile_image_validating_policy(policy).problems)
    if isinstance(policy, GeneratingPolicy):
        return list(compile_generating_policy(policy).problems)
    if isinstance(policy, DeletingPolicy):
        return list(compile_deleting_policy(policy).problems)
    if cached and isinstance(policy, ValidatingPolicy):
        problems = list(compile_verdict(policy).problems)
    else:
        compiled = compile_policy(policy) if isinstance(policy, ValidatingPolicy) else compile_mutating_policy(policy)
        problems = list(compiled.problems)
    if typecheck:
        warnings = check_policy_cached(policy, discovery) if cached and discovery is not None else \
            check_policy(policy, discovery)
        problems.extend(policy.locate(Problem(w.warning.strip(), path=w.field_path,
                                              severity="error" if w.wrong_result and wrong_result_is_error
                                              else "warning"))
                        for w in warnings)
    return problems


def exception_problems(exc: PolicyException) -> list[Problem]:
    return list(compile_exception(exc).problems)


def is_validated_document(obj: Any) -> bool:
    """Whether ``obj`` is of a kind :func:`validate_document` answers for."""
    return is_policy_document(obj) or is_mutating_policy_document(obj) or is_exception_document(obj) or \
        is_global_context_document(obj) or is_generating_policy_document(obj) or is_deleting_policy_document(obj) or \
        is_image_validating_policy_document(obj)


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
    policy: AnyPolicy | None
    if is_mutating_policy_document(data):
        policy, problems = parse_mutating_policy(data)
    elif is_generating_policy_document(data):
        policy, problems = parse_generating_policy(data)
    elif is_deleting_policy_document(data):
        policy, problems = parse_deleting_policy(data)
    elif is_image_validating_policy_document(data):
        policy, problems = parse_image_validating_policy(data)
    else:
        policy, problems = parse_policy(data)
    verdict.problems = problems + (policy_problems(policy, discovery=discovery, wrong_result_is_error=False,
                                                   cached=cached) if policy is not None else [])
    return verdict
