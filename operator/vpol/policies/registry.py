"""The policy kinds vpol serves: every kind package's description of itself (vpol.model.kind.PolicyKind, exported
as vpol.policies.<kind>.kind.KIND), collected, and what code that handles "any policy" asks of them.

The registry sits above the kind packages (which know nothing of each other) and is the one module that names them
all. Code that must tell the kinds apart asks :func:`kind_of` (a policy), :func:`kind_named` (a kind's name) or
:func:`kind_for_document` (a document) for the description, instead of testing types one after the other (Kyverno's
split of the same work: ``pkg/cel/policies/<kind>`` over one compiler and engine).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vpol.model.kind import PolicyKind
from vpol.policies.deleting.kind import KIND as DELETING
from vpol.policies.deleting.model import DeletingPolicy
from vpol.policies.generating.kind import KIND as GENERATING
from vpol.policies.generating.model import GeneratingPolicy
from vpol.policies.image_validating.kind import KIND as IMAGE_VALIDATING
from vpol.policies.image_validating.model import ImageValidatingPolicy
from vpol.policies.mutating.kind import KIND as MUTATING
from vpol.policies.mutating.model import MutatingPolicy
from vpol.policies.validating.kind import KIND as VALIDATING
from vpol.policies.validating.model import ValidatingPolicy

AnyPolicy = ValidatingPolicy | MutatingPolicy | GeneratingPolicy | DeletingPolicy | ImageValidatingPolicy

#: Every kind's description (vpol.model.kind.PolicyKind), as each kind package exports it.
KINDS: tuple[PolicyKind, ...] = (VALIDATING, MUTATING, GENERATING, DELETING, IMAGE_VALIDATING)

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
