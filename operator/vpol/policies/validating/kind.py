"""The ValidatingPolicy kind's description of itself (collected by vpol.policies.registry)."""

from __future__ import annotations

from vpol.model.kind import ADMISSION, SCAN, PolicyKind, problems_of
from vpol.policies.validating.autogen import autogen_configs
from vpol.policies.validating.compile import compile_policy, compile_verdict
from vpol.policies.validating.model import ValidatingPolicy, is_policy_document, parse_policy

KIND = PolicyKind(
    "ValidatingPolicy", ValidatingPolicy, ("validatingpolicies", "namespacedvalidatingpolicies"), "",
    is_policy_document, parse_policy, problems_of(compile_policy), True,
    lambda p: [p, *(c.policy for c in autogen_configs(p))], frozenset({ADMISSION, SCAN}),
    problems_of(compile_verdict))
