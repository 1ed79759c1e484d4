"""What a DeletingPolicy deletes (pure; Kyverno's semantics, docs/internals/generating-and-deleting.md).

An object of the policy's matchConstraints (any operation; a namespaced policy: in its namespace) is deleted when
no PolicyException exempts it and every condition holds (``object`` the object, ``namespaceObject`` its Namespace,
the policy's variables); an error is ``error``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from vpol.engine.evaluate import (
    ERROR,
    PASS,
    SKIP,
    CompiledException,
    PolicyRun,
    Result,
    SubjectData,
    compile_exception,
    conditions_outcome,
    exception_matches,
)
from vpol.engine.match import constraints_match
from vpol.engine.request import Subject
from vpol.model.policy import PolicyException
from vpol.policies.deleting.compile import CompiledDeletingPolicy, compile_deleting_policy
from vpol.policies.deleting.model import DeletingPolicy


#: What a DeletingPolicy says of an object (Kyverno's CLI: ``pass`` would be deleted).
DELETE, KEEP = "resource matched", "resource did not match"


class DeletingPolicyEngine:
    """A compiled DeletingPolicy with its exceptions: which objects it deletes."""

    def __init__(self, policy: DeletingPolicy, exceptions: Sequence[CompiledException] = (), *,
                 confined: bool = True):
        """``confined``: a namespaced policy selects objects of its namespace only (the cluster; Kyverno's CLI
        hands it every resource)."""
        self.policy = policy
        self.confined = confined
        self.compiled: CompiledDeletingPolicy = compile_deleting_policy(policy)
        self.exceptions = [e for e in exceptions if e.exception.applies_to(policy)]

    @property
    def ok(self) -> bool:
        return self.compiled.ok

    def selects(self, subject: Subject) -> bool:
        """Whether the policy's matchConstraints (any operation) select ``subject``, in its namespace for a
        namespaced policy."""
        policy = self.policy
        if policy.namespace and self.confined and not (subject.type.namespaced and
                                                       subject.namespace == policy.namespace):
            return False
        rules = policy.spec.match_constraints
        if rules is None:
            return False
        anything = dataclasses.replace(rules, resource_rules=tuple(
            dataclasses.replace(r, operations=("*",)) for r in rules.resource_rules), exclude_resource_rules=tuple(
            dataclasses.replace(r, operations=("*",)) for r in rules.exclude_resource_rules))
        return constraints_match(anything, subject)

    def evaluate(self, subject: Subject) -> Result | None:
        """``pass`` (delete it), ``fail`` (keep it: a condition is false, or an exception) or ``error``; None when
        the policy does not select ``subject``."""
        if not self.compiled.ok or not self.selects(subject):
            return None
        data = SubjectData(dataclasses.replace(subject, old_object=None), absent_as_empty=False)
        if subject.type.group == "" and subject.type.kind == "Namespace":
            data.data["namespaceObject"] = subject.object  # a Namespace is its own (Kyverno's namespace lister)
        for unbound in ("oldObject", "request"):
            data.data.pop(unbound, None)  # declared, never bound (Kyverno): reading them is an evaluation error
        api_version, kind, namespace, name, uid = data.identity()
        result = Result(self.policy.key, PASS, DELETE, api_version, kind, namespace, name, uid)
        for exc, errors in exception_matches(self.exceptions, data):
            # Any exception whose conditions hold keeps the object (its images, values and reportResult play no
            # part); an error before one does is the object's error.
            if errors:
                return dataclasses.replace(result, result=ERROR, message="; ".join(r for _n, r in errors))
            return dataclasses.replace(result, result="fail", message=KEEP, exception=exc.exception.name)
        run = PolicyRun(self.compiled, data, None)
        outcome = conditions_outcome(run, self.compiled.match_conditions, "Fail", error_prefix=" ")
        if outcome is None:
            return result
        if outcome[0] == SKIP:
            return dataclasses.replace(result, result="fail", message=KEEP)
        return dataclasses.replace(result, result=ERROR, message=outcome[1].strip())


def worker_engine(policy: DeletingPolicy, exceptions: Sequence[PolicyException]) -> DeletingPolicyEngine:
    """The engine an evaluation worker builds from plain data (vpol.policies.sandbox)."""
    return DeletingPolicyEngine(policy, [compile_exception(e) for e in exceptions])
