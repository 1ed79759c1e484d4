"""The GeneratingPolicy kind's description of itself (collected by vpol.policies.registry)."""

from __future__ import annotations

from vpol.model.kind import GENERATE, PolicyKind, problems_of
from vpol.policies.generating.compile import compile_generating_policy
from vpol.policies.generating.engine import worker_engine
from vpol.policies.generating.model import GeneratingPolicy, is_generating_policy_document, parse_generating_policy

KIND = PolicyKind(
    "GeneratingPolicy", GeneratingPolicy, ("generatingpolicies", "namespacedgeneratingpolicies"), "gpol",
    is_generating_policy_document, parse_generating_policy, problems_of(compile_generating_policy), False,
    lambda p: [p], frozenset({GENERATE}), worker_engine=worker_engine)
