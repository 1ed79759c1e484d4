"""The DeletingPolicy kind's description of itself (collected by vpol.policies.registry)."""

from __future__ import annotations

from vpol.model.kind import DELETE, PolicyKind, problems_of
from vpol.policies.deleting.compile import compile_deleting_policy
from vpol.policies.deleting.engine import worker_engine
from vpol.policies.deleting.model import DeletingPolicy, is_deleting_policy_document, parse_deleting_policy

KIND = PolicyKind(
    "DeletingPolicy", DeletingPolicy, ("deletingpolicies", "namespaceddeletingpolicies"), "dpol",
    is_deleting_policy_document, parse_deleting_policy, problems_of(compile_deleting_policy), False,
    lambda p: [p], frozenset({DELETE}), worker_engine=worker_engine)
