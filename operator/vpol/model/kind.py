"""What a policy kind says of itself: :class:`PolicyKind`, the one shape of the description each kind package
exports (vpol.policies.<kind>.kind.KIND), and the paths a kind can take part in. The registry
(vpol.policies.registry) collects the descriptions; code that handles "any policy" asks it instead of testing
types one after the other."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from vpol.model.documents import Document
from vpol.model.policy import GROUP, NAMESPACED_VERSIONS, VERSIONS
from vpol.model.problems import Problem


class Parse(Protocol):
    def __call__(self, data: Any, doc: Document | None = None) -> tuple[Any, list[Problem]]: ...


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
    #: The API group of both variants (Kyverno's CEL policy kinds share one).
    group: str = GROUP
    #: The versions served of the cluster-wide and of the namespaced variant (Kyverno serves no v1alpha1 of the
    #: namespaced kinds).
    versions: tuple[tuple[str, ...], tuple[str, ...]] = (VERSIONS, NAMESPACED_VERSIONS)

    #: The scope of the cluster-wide and of the namespaced variant's objects.
    scopes: ClassVar[tuple[str, str]] = ("Cluster", "Namespaced")

    @property
    def kinds(self) -> tuple[str, str]:
        return self.kind, f"Namespaced{self.kind}"


def problems_of(compile_: Callable[[Any], Any]) -> Callable[[Any], Sequence[Problem]]:
    """``compile_problems`` from a kind's compile function (its compiled policy's problems)."""
    return lambda policy: compile_(policy).problems
