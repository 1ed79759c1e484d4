"""The policy kinds vpol serves, one description each: what code that handles "any policy" asks of a kind.

The registry sits above the kind packages (vpol.policies.<kind>, which know nothing of each other) and is the one
module that names them all. Code that must tell the kinds apart asks :func:`kind_of` (a policy) or
:func:`kind_for_document` (a document) for the description, instead of testing types one after the other. Each
description says how the kind's documents are recognised and parsed, how its expressions are compiled (and whether
they are type-checked against the matched kinds' schemas), what its autogen variants are, which queue key prefix its
policies carry, what builds its engine in an evaluation worker, and which paths it takes part in (Kyverno's split of
the same work: ``pkg/cel/policies/<kind>`` over one compiler and engine).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from vpol.model.documents import Document
from vpol.model.problems import Problem
from vpol.policies.deleting.compile import compile_deleting_policy
from vpol.policies.deleting.engine import worker_engine as deleting_worker_engine
from vpol.policies.deleting.model import DeletingPolicy, is_deleting_policy_document, parse_deleting_policy
from vpol.policies.generating.compile import compile_generating_policy
from vpol.policies.generating.engine import worker_engine as generating_worker_engine
from vpol.policies.generating.model import GeneratingPolicy, is_generating_policy_document, parse_generating_policy
from vpol.policies.image_validating.autogen import image_autogen_configs
from vpol.policies.image_validating.compile import compile_image_validating_policy
from vpol.policies.image_validating.model import (
    ImageValidatingPolicy,
    is_image_validating_policy_document,
    parse_image_validating_policy,
)
from vpol.policies.mutating.autogen import mutating_autogen_configs
from vpol.policies.mutating.compile import compile_mutating_policy
from vpol.policies.mutating.model import MutatingPolicy, is_mutating_policy_document, parse_mutating_policy
from vpol.policies.validating.autogen import autogen_configs
from vpol.policies.validating.compile import compile_policy, compile_verdict
from vpol.policies.validating.model import ValidatingPolicy, is_policy_document, parse_policy


class Parse(Protocol):
    def __call__(self, data: Any, doc: Document | None = None) -> tuple[Any, list[Problem]]: ...


AnyPolicy = ValidatingPolicy | MutatingPolicy | GeneratingPolicy | DeletingPolicy | ImageValidatingPolicy

#: The paths a kind can take part in.
ADMISSION, SCAN, MUTATE_EXISTING, GENERATE, DELETE = "admission", "scan", "mutate-existing", "generate", "delete"


@dataclass(frozen=True)
class PolicyKind:
    """One policy kind and its namespaced variant."""

    #: The cluster-wide kind (``ValidatingPolicy``); its namespaced variant is ``Namespaced`` + kind.
    kind: str
    #: The model class of both variants.
    model: type
    #: The resources (plurals) of the cluster-wide and the namespaced variant.
    plurals: tuple[str, str]
    #: The prefix of its policies' queue keys ("" for the ValidatingPolicies, whose keys are bare).
    queue_prefix: str
    #: Whether a document is of this kind (either variant).
    is_document: Callable[[Mapping[str, Any]], bool]
    #: The document parsed: the policy (None when it does not parse) and the problems found (located in the
    #: document's text when it is given).
    parse: Parse
    #: The problems of compiling every expression of a parsed policy.
    compile_problems: Callable[[Any], Sequence[Problem]]
    #: Whether its expressions are type-checked against the matched kinds' schemas (the others' objects are
    #: ``dyn``, as in Kyverno).
    typechecked: bool
    #: The policy and its autogen variants (pod controllers, CronJobs), as policies of the same kind.
    variants: Callable[[Any], list[Any]]
    #: The paths it takes part in (ADMISSION, SCAN, MUTATE_EXISTING, GENERATE, DELETE).
    paths: frozenset[str]
    #: compile_problems answered from the operator's memo of compile verdicts per spec (None: not memoized).
    memo_problems: Callable[[Any], Sequence[Problem]] | None = None
    #: What builds its engine in an evaluation worker from plain data (the policy, its exceptions and what else the
    #: kind's engine is made with: vpol.policies.sandbox's ``load``); None: it runs in no worker by key.
    worker_engine: Callable[..., Any] | None = None

    @property
    def kinds(self) -> tuple[str, str]:
        return self.kind, f"Namespaced{self.kind}"


def _problems(compile_: Callable[[Any], Any]) -> Callable[[Any], Sequence[Problem]]:
    return lambda policy: compile_(policy).problems


KINDS: tuple[PolicyKind, ...] = (
    PolicyKind("ValidatingPolicy", ValidatingPolicy, ("validatingpolicies", "namespacedvalidatingpolicies"), "",
    is_policy_document, parse_policy,
               _problems(compile_policy), True,
               lambda p: [p, *(c.policy for c in autogen_configs(p))], frozenset({ADMISSION, SCAN}),
               _problems(compile_verdict)),
    PolicyKind("MutatingPolicy", MutatingPolicy, ("mutatingpolicies", "namespacedmutatingpolicies"), "mpol",
    is_mutating_policy_document, parse_mutating_policy,
               _problems(compile_mutating_policy), True,
               lambda p: [p, *(variant for _name, variant in mutating_autogen_configs(p))],
               frozenset({ADMISSION, MUTATE_EXISTING})),
    PolicyKind("GeneratingPolicy", GeneratingPolicy, ("generatingpolicies", "namespacedgeneratingpolicies"), "gpol",
    is_generating_policy_document, parse_generating_policy,
               _problems(compile_generating_policy), False, lambda p: [p], frozenset({GENERATE}),
               worker_engine=generating_worker_engine),
    PolicyKind("DeletingPolicy", DeletingPolicy, ("deletingpolicies", "namespaceddeletingpolicies"), "dpol",
    is_deleting_policy_document, parse_deleting_policy,
               _problems(compile_deleting_policy), False, lambda p: [p], frozenset({DELETE}),
               worker_engine=deleting_worker_engine),
    PolicyKind("ImageValidatingPolicy", ImageValidatingPolicy, ("imagevalidatingpolicies",
    "namespacedimagevalidatingpolicies"), "ivpol", is_image_validating_policy_document,
               parse_image_validating_policy, _problems(compile_image_validating_policy), False,
               lambda p: [p, *(variant for _name, _targets, variant in image_autogen_configs(p))],
               frozenset({ADMISSION, SCAN})),
)

#: The resources of every kind, both variants (what vpol's apply-time validation receives).
PLURALS: tuple[str, ...] = tuple(plural for k in KINDS for plural in k.plurals)

_BY_MODEL: dict[type, PolicyKind] = {k.model: k for k in KINDS}
_BY_NAME: dict[str, PolicyKind] = {name: k for k in KINDS for name in k.kinds}


def kind_of(policy: AnyPolicy) -> PolicyKind:
    """The description of ``policy``'s kind."""
    return _BY_MODEL[type(policy)]


def kind_named(name: str) -> PolicyKind | None:
    """The description of a kind by its name (``MutatingPolicy`` or ``NamespacedMutatingPolicy``); None for a
    name that is no policy kind."""
    return _BY_NAME.get(name)


def policy_variants(policy: AnyPolicy) -> list[Any]:
    """``policy`` and its autogen variants (its kind's :attr:`PolicyKind.variants`)."""
    return kind_of(policy).variants(policy)


def kind_for_document(document: Mapping[str, Any]) -> PolicyKind | None:
    """The kind of a document of vpol's policy kinds (None: another kind, or not vpol's group)."""
    return next((k for k in KINDS if k.is_document(document)), None)
