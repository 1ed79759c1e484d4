"""Each policy kind's part of reconciling (vpol.controller.plan_context.Plan), one module per kind, and
:data:`PLANS`: the one registration of each kind's plan with the reconcile loop (vpol.controller.reconcile)."""

from __future__ import annotations

from collections.abc import Callable

from vpol.controller.plan_context import Plan, ReconcileContext
from vpol.controller.plans.deleting import DeletingPlan
from vpol.controller.plans.generating import GeneratingPlan
from vpol.controller.plans.image_validating import ImageValidatingPlan
from vpol.controller.plans.mutating import MutatingPlan
from vpol.controller.plans.validating import ValidatingPlan

#: The plan of each kind (the cluster-wide kind's name, vpol.policies.registry), made from the reconcile context.
PLANS: dict[str, Callable[[ReconcileContext], Plan]] = {
    "ValidatingPolicy": ValidatingPlan,
    "MutatingPolicy": MutatingPlan,
    "GeneratingPolicy": GeneratingPlan,
    "DeletingPolicy": DeletingPlan,
    "ImageValidatingPolicy": ImageValidatingPlan,
}
