"""The MutatingPolicy kind's description of itself (collected by vpol.policies.registry)."""

from __future__ import annotations

from vpol.model.kind import ADMISSION, MUTATE_EXISTING, PolicyKind, problems_of
from vpol.policies.mutating.autogen import mutating_autogen_configs
from vpol.policies.mutating.compile import compile_mutating_policy
from vpol.policies.mutating.model import MutatingPolicy, is_mutating_policy_document, parse_mutating_policy

KIND = PolicyKind(
    "MutatingPolicy", MutatingPolicy, ("mutatingpolicies", "namespacedmutatingpolicies"), "mpol",
    is_mutating_policy_document, parse_mutating_policy, problems_of(compile_mutating_policy), True,
    lambda p: [p, *(variant for _name, variant in mutating_autogen_configs(p))],
    frozenset({ADMISSION, MUTATE_EXISTING}))
