"""The ImageValidatingPolicy kind's description of itself (collected by vpol.policies.registry)."""

from __future__ import annotations

from vpol.model.kind import ADMISSION, SCAN, PolicyKind, problems_of
from vpol.policies.image_validating.autogen import image_autogen_configs
from vpol.policies.image_validating.compile import compile_image_validating_policy
from vpol.policies.image_validating.evaluation import worker_engine
from vpol.policies.image_validating.model import (
    ImageValidatingPolicy,
    is_image_validating_policy_document,
    parse_image_validating_policy,
)

KIND = PolicyKind(
    "ImageValidatingPolicy", ImageValidatingPolicy,
    ("imagevalidatingpolicies", "namespacedimagevalidatingpolicies"), "ivpol",
    is_image_validating_policy_document, parse_image_validating_policy,
    problems_of(compile_image_validating_policy), False,
    lambda p: [p, *(variant for _name, _targets, variant in image_autogen_configs(p))],
    frozenset({ADMISSION, SCAN}), worker_engine=worker_engine)
