"""What a GeneratingPolicy generates for one trigger, and what a DeletingPolicy deletes (pure; Kyverno's
semantics, docs/internals/generating-and-deleting.md).

**Generation.** A trigger the policy's matchConstraints select (a NamespacedGeneratingPolicy: one in its
namespace) goes through the PolicyExceptions (one that exempts: no objects, result ``skip`` or ``pass``), the
matchConditions (one false: no result at all; an error: ``error``), then every ``generate`` item in order: an
expression's ``generator.Apply`` calls and a template's documents are its objects. The first item that fails ends
the evaluation with ``error`` (the objects of the items before it are kept, as Kyverno has written them by then).
Objects are then placed as Kyverno places them:

- a map whose ``items`` is a list stands for its items (``resource.List(...)`` clones every object listed);
- ``generator.Apply(ns, objects)``: every object goes to ``ns`` (its own namespace is ignored), a cluster-scoped
  kind to none; ``generator.Apply(objects)`` (a namespaced policy): its own namespace, and a cluster-scoped kind is
  an error;
- a template's object keeps its ``metadata.namespace``; a namespaced policy fills in its own and refuses another;
- ``uid``, ``resourceVersion``, ``creationTimestamp``, ``managedFields`` and ``selfLink`` of a copied object go.

An object that carried a ``resourceVersion`` came from the cluster (a clone): :class:`Downstream` remembers its
source's uid. Labelling the objects and writing them is the caller's (the CLI writes nothing; the operator labels
them as Kyverno does, vpol.desired.generated).

**Deletion.** An object of the policy's matchConstraints (any operation; a namespaced policy: in its namespace) is
deleted when no PolicyException exempts it and every condition holds (``object`` the object, ``namespaceObject``
its Namespace, the policy's variables); an error is ``error``.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vpol.cel.compiler import (
    CompiledDeletingPolicy,
    CompiledGeneratingPolicy,
    compile_deleting_policy,
    compile_generating_policy,
)
from vpol.cel.libraries.kyverno.generator_lib import VARIABLE as GENERATOR_VARIABLE
from vpol.cel.libraries.kyverno.generator_lib import NamespacedGeneratorContext, collecting
from vpol.engine.evaluate import (
    ERROR,
    PASS,
    SKIP,
    CompiledException,
    EvaluationError,
    Result,
    SubjectData,
    _PolicyRun,
    conditions_outcome,
    exception_matches,
)
from vpol.engine.match import constraints_match
from vpol.engine.request import Subject
from vpol.model.deleting import DeletingPolicy
from vpol.model.generating import GeneratingPolicy
from vpol.model.templates import Placeholder, TemplateError, render

#: What Kyverno's engine says of a generation that ran (its report message).
GENERATED = "policy evaluated successfully"
#: The report property listing what a generation wrote (Kyverno's).
GENERATED_RESOURCES = "generated-resources"
#: Copied objects lose what the API server owns (as Kyverno drops them).
SERVER_FIELDS = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "selfLink")

#: Kyverno's labels on a generated object (pkg/background/common): tools, reports and migrations find downstreams
#: by them, and vpol finds its own.
MANAGED_BY, MANAGED_BY_VALUE = "app.kubernetes.io/managed-by", "kyverno"
POLICY_NAME = "generate.kyverno.io/policy-name"
POLICY_NAMESPACE = "generate.kyverno.io/policy-namespace"
TRIGGER_NAME = "generate.kyverno.io/trigger-name"
TRIGGER_NAMESPACE = "generate.kyverno.io/trigger-namespace"
TRIGGER_UID = "generate.kyverno.io/trigger-uid"
TRIGGER_KIND = "generate.kyverno.io/trigger-kind"
TRIGGER_GROUP = "generate.kyverno.io/trigger-group"
TRIGGER_VERSION = "generate.kyverno.io/trigger-version"
SOURCE_UID = "generate.kyverno.io/source-uid"

#: namespaced(apiVersion, kind): whether the kind is namespaced (None: unknown, taken as namespaced, as Kyverno).
Scope = Callable[[str, str], bool | None]


@dataclass(frozen=True)
class KnownScopes:
    """A :data:`Scope` from a table of the kinds known at one moment (plain data: it goes to an evaluation worker
    with the engine, vpol.engine.sandbox)."""

    #: (apiVersion, kind) -> namespaced.
    table: Mapping[tuple[str, str], bool]

    @classmethod
    def of(cls, resources: Iterable[Any]) -> "KnownScopes":
        """From discovery's resources (ResourceInfo: api_version, kind, namespaced; subresources left out)."""
        return cls({(r.api_version, r.kind): r.namespaced for r in resources if "/" not in r.resource})

    def __call__(self, api_version: str, kind: str) -> bool | None:
        return self.table.get((api_version, kind))


@dataclass(frozen=True)
class Downstream:
    """One generated object, placed (namespace set), and the uid of the object it was copied from ("" for
    data generated by the policy itself)."""

    object: dict[str, Any]
    source_uid: str = ""

    @property
    def ref(self) -> str:
        """``<group>/<version>, Kind=<Kind> Name=<name> Namespace=<namespace>``, as Kyverno's reports list them."""
        api_version = str(self.object.get("apiVersion") or "")
        gv = api_version if "/" in api_version else f"/{api_version}"
        md = self.object.get("metadata") or {}
        return f"{gv}, Kind={self.object.get('kind', '')} Name={md.get('name', '')} Namespace={md.get('namespace', '')}"


def downstream_labels(policy: GeneratingPolicy, trigger: Subject, source_uid: str = "") -> dict[str, str]:
    """The labels Kyverno's background controller puts on an object ``policy`` generated for ``trigger``.

    A namespaced policy's objects also carry ``generate.kyverno.io/policy-namespace``: Kyverno labels them with the
    bare policy name but looks them up by namespace/name, so its namespaced policies never find their objects
    again; vpol labels and finds them by both (docs/internals/generating-and-deleting.md)."""
    t = trigger.type
    labels = {
        MANAGED_BY: MANAGED_BY_VALUE,
        POLICY_NAME: policy.name,
        TRIGGER_NAME: trigger.name,
        TRIGGER_NAMESPACE: trigger.namespace,
        TRIGGER_UID: str((trigger.current.get("metadata") or {}).get("uid") or "")
        if isinstance(trigger.current, dict) else "",
        TRIGGER_KIND: t.kind,
        TRIGGER_GROUP: t.group,
        TRIGGER_VERSION: t.version,
    }
    if policy.namespace:
        labels[POLICY_NAMESPACE] = policy.namespace
    if source_uid:
        labels[SOURCE_UID] = source_uid
    return labels


def labelled(downstream: Downstream, policy: GeneratingPolicy, trigger: Subject) -> dict[str, Any]:
    """The downstream's object as vpol writes it: with :func:`downstream_labels` over its own labels."""
    obj = copy.deepcopy(downstream.object)
    md = obj.setdefault("metadata", {})
    md["labels"] = {**(md.get("labels") or {}), **downstream_labels(policy, trigger, downstream.source_uid)}
    return obj


@dataclass
class Generation:
    """A generation's outcome: the result for the trigger, and the objects (also those made before an error)."""

    result: Result
    downstreams: list[Downstream] = field(default_factory=list)
    #: The kinds of generated objects whose scope was unknown (taken as namespaced): (apiVersion, kind).
    unknown_kinds: tuple[tuple[str, str], ...] = ()


class GenerationError(Exception):
    """A generated object that cannot be placed (a cross-scope or cross-namespace object)."""


def _expanded(objects: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for obj in objects:
        items = obj.get("items")
        if isinstance(items, list):
            out.extend(copy.deepcopy(dict(i)) for i in items if isinstance(i, Mapping))
        else:
            out.append(copy.deepcopy(dict(obj)))
    return out


@dataclass
class _GeneratingExceptions:
    #: The exceptions that matched, when one of them exempts fully (none: no full exemption).
    exempt: list[CompiledException] = field(default_factory=list)
    partial: dict[str, Any] | None = None
    error: str = ""


def generating_exceptions(exceptions: Sequence[CompiledException], data: SubjectData) -> _GeneratingExceptions:
    """The PolicyExceptions of a GeneratingPolicy on a trigger, as Kyverno's generating policies evaluate them: all
    of them, in order; one whose conditions hold and that has neither images nor values exempts fully, and then
    every one that matched is named; the others fill ``exceptions.allowedImages/allowedValues``; an error before
    a full exemption is the generation's error, after one it is ignored."""
    out = _GeneratingExceptions()
    matched: list[CompiledException] = []
    full = False
    images: list[str] = []
    values: list[str] = []
    for exc, errors in exception_matches(exceptions, data):
        if errors:
            if full:
                continue
            out.error = "; ".join(reason for _n, reason in errors)
            return out
        matched.append(exc)
        e = exc.exception
        if not e.allowed_images and not e.allowed_values:
            full = True
        elif not full:
            images.extend(e.allowed_images)
            values.extend(e.allowed_values)
    if full:
        out.exempt = matched
    elif images or values:
        out.partial = {"allowedImages": images, "allowedValues": values}
    return out


class Placement(enum.Enum):
    """How generated objects are placed, after whom.

    ``CLUSTER``: Kyverno's background controller, what vpol's operator writes (and ``vpol apply`` shows): a
    cluster-scoped kind gets no namespace (a namespaced policy may not generate one), owner references to another
    namespace go, and what the API server owns (uid, resourceVersion, creationTimestamp, managedFields, selfLink)
    is dropped. ``KYVERNO_CLI``: Kyverno's CLI with its fake context (a test without cluster resources): the
    namespace is set and nothing else changes. ``KYVERNO_CLI_CLUSTER``: Kyverno's CLI with cluster resources
    (its context in CLI evaluation mode): placed as ``CLUSTER``, and annotations dropped too."""

    CLUSTER = "cluster"
    KYVERNO_CLI = "kyverno-cli"
    KYVERNO_CLI_CLUSTER = "kyverno-cli-cluster"


class GeneratingPolicyEngine:
    """A compiled GeneratingPolicy with its exceptions, ready to generate for triggers."""

    def __init__(self, policy: GeneratingPolicy, exceptions: Sequence[CompiledException] = (), *,
                 namespaced: Scope | None = None, placement: Placement = Placement.CLUSTER,
                 every_exception: bool = False):
        """``every_exception``: every exception given applies, whatever its policyRefs name (Kyverno's CLI hands
        each GeneratingPolicy all the exceptions of a test); else those naming the policy, as in a cluster."""
        self.policy = policy
        self.compiled: CompiledGeneratingPolicy = compile_generating_policy(policy)
        self.exceptions = [e for e in exceptions if every_exception or e.exception.applies_to(policy)]
        self.namespaced: Scope = namespaced or _builtin_scope
        self.placement = placement
        #: The kinds whose scope was unknown in the generation under way (see Generation.unknown_kinds).
        self._unknown: dict[tuple[str, str], None] = {}

    @property
    def ok(self) -> bool:
        return self.compiled.ok

    def selects(self, subject: Subject) -> bool:
        """Whether ``subject`` is a trigger of the policy: its matchConstraints select it and a namespaced
        policy's namespace holds it (in the cluster: Kyverno's CLI hands a namespaced policy every resource)."""
        policy = self.policy
        if policy.namespace and self.placement is Placement.CLUSTER:
            t = subject.type
            inside = subject.namespace == policy.namespace if t.namespaced else (
                t.group == "" and t.kind == "Namespace" and subject.name == policy.namespace)
            if not inside:
                return False
        return constraints_match(policy.spec.match_constraints, subject)

    def generate(self, subject: Subject) -> Generation | None:
        """The generation for trigger ``subject``; None when the policy does not select it or a matchCondition
        is false (no result at all, as in Kyverno)."""
        if not self.compiled.ok or not self.selects(subject):
            return None
        self._unknown = {}
        generation = self._generate(subject)
        if generation is not None and self._unknown:
            generation.unknown_kinds = tuple(self._unknown)
        return generation

    def _generate(self, subject: Subject) -> Generation | None:
        data = SubjectData(subject)
        if self.policy.namespace:
            data.data[GENERATOR_VARIABLE] = NamespacedGeneratorContext()  # its Apply(objects) overload
        base = self._result(subject, data)
        match = generating_exceptions(self.exceptions, data)
        if match.error:
            return Generation(dataclasses.replace(base, result=ERROR, message=f"failed to evaluate policy: "
                                                                                f"{match.error}"))
        if match.exempt:
            # Every exception that matched is named; the one with the highest polex.kyverno.io/priority (the first
            # when none has one) says pass or skip.
            selected = match.exempt[0]
            for exc in match.exempt:
                if exc.exception.priority > max(selected.exception.priority, 0):
                    selected = exc
            outcome = PASS if selected.exception.report_result == "pass" else SKIP
            keys = ", ".join(e.exception.key for e in match.exempt)
            names = ",".join(e.exception.name for e in match.exempt)
            message = f"rule is {'passed' if outcome == PASS else 'skipped'} due to policy exception: {keys}"
            return Generation(dataclasses.replace(base, result=outcome, message=message, exception=names,
                                                  properties={"exceptions": names}))
        run = _PolicyRun(self.compiled, data, match.partial)
        skipped = conditions_outcome(run, self.compiled.match_conditions, "Fail",
                                     error_prefix="failed to evaluate policy: ")
        if skipped is not None:
            return None if skipped[0] == SKIP else Generation(dataclasses.replace(base, result=ERROR,
                                                                                   message=skipped[1]))
        downstreams: list[Downstream] = []
        try:
            for _index, item in self._items():
                downstreams += item(run)
        except (EvaluationError, GenerationError, TemplateError) as exc:
            return Generation(dataclasses.replace(base, result=ERROR, message=f"failed to evaluate policy: {exc}"),
                              downstreams)
        try:
            properties = dict(self._audit(run))
        except EvaluationError as exc:
            return Generation(dataclasses.replace(base, result=ERROR, message=f"failed to evaluate policy: {exc}"),
                              downstreams)
        if downstreams:
            properties[GENERATED_RESOURCES] = "; ".join(d.ref for d in downstreams)
        return Generation(dataclasses.replace(base, result=PASS, message=GENERATED, properties=properties),
                          downstreams)

    def _result(self, subject: Subject, data: SubjectData) -> Result:
        api_version, kind, namespace, name, uid = data.identity()
        return Result(self.policy.key, PASS, "", api_version, kind, namespace, name, uid)

    def _items(self) -> list[tuple[int, Callable[[_PolicyRun], list[Downstream]]]]:
        """The generate items in order, each a function of the policy run giving its objects."""
        out: list[tuple[int, Callable[[_PolicyRun], list[Downstream]]]] = []
        for index, prog in self.compiled.expressions:
            out.append((index, functools.partial(self._expression, prog=prog)))
        for index, template, programs in self.compiled.templates:
            out.append((index, functools.partial(self._template, template=template, programs=programs)))
        out.sort(key=lambda item: item[0])
        return out

    def _expression(self, run: _PolicyRun, prog: Any) -> list[Downstream]:
        with collecting() as calls:
            value = run.eval(prog)
        if not isinstance(value, bool):
            raise EvaluationError(f"{prog.path}: expected a bool, got {type(value).__name__}")
        return [self._place(obj, self.policy.namespace if namespace is None else namespace)
                for namespace, objects in calls for obj in _expanded(objects)]

    def _template(self, run: _PolicyRun, template: Any, programs: Mapping[str, Any]) -> list[Downstream]:
        """A template's objects, grouped by their namespace (the groups in the order they first appear), as
        Kyverno hands them over."""

        def evaluate(placeholder: Placeholder) -> Any:
            return run.eval(programs[placeholder.expression])

        policy_ns = self.policy.namespace
        groups: dict[str, list[dict[str, Any]]] = {}
        try:
            rendered = render(template, evaluate)
        except TemplateError as exc:
            raise GenerationError(f"failed to render generation template: {exc}") from None
        for obj in rendered:
            own = str((obj.get("metadata") or {}).get("namespace") or "")
            if policy_ns and not own:
                own = policy_ns
            elif policy_ns and own != policy_ns:
                raise GenerationError(f'cross-namespace generation denied: a policy in namespace "{policy_ns}" '
                                      f'cannot generate resources into namespace "{own}"')
            groups.setdefault(own, []).append(obj)
        return [self._place(obj, namespace) for namespace, objects in groups.items() for obj in _expanded(objects)]

    def _place(self, obj: dict[str, Any], namespace: str) -> Downstream:
        """``obj`` placed in ``namespace`` ("" for none) as :attr:`placement` says."""
        md = obj.get("metadata")
        md = obj["metadata"] = dict(md) if isinstance(md, Mapping) else {}
        if self.placement is not Placement.KYVERNO_CLI:
            gvk = (str(obj.get("apiVersion") or ""), str(obj.get("kind") or ""))
            scope = self.namespaced(*gvk)
            if scope is None:
                self._unknown[gvk] = None
            if scope is False:
                if namespace and self.policy.namespace:
                    raise GenerationError(f'cross-scope generation denied: a policy scoped to namespace '
                                          f'"{namespace}" cannot generate cluster-scoped resource '
                                          f'{obj.get("apiVersion")}/{obj.get("kind")}')
                namespace = ""
            if md.get("namespace") not in (None, "", namespace) and md.get("ownerReferences") is not None:
                md.pop("ownerReferences")  # an owner in another namespace cannot own it
        source_uid = str(md.get("uid") or "") if md.get("resourceVersion") else ""
        if self.placement is Placement.CLUSTER:
            for key in SERVER_FIELDS:
                md.pop(key, None)
        elif self.placement is Placement.KYVERNO_CLI_CLUSTER:
            for key in SERVER_FIELDS:
                if key != "selfLink":  # Kyverno's CLI mode leaves it
                    md.pop(key, None)
        if self.placement is Placement.KYVERNO_CLI_CLUSTER:
            md.pop("annotations", None)
        if namespace:
            md["namespace"] = namespace
        else:
            md.pop("namespace", None)
        return Downstream(obj, source_uid)

    def _audit(self, run: _PolicyRun) -> dict[str, str]:
        """The audit annotations that evaluate to a non-empty string; one that fails fails the generation, as in
        Kyverno (it comes after the objects are generated)."""
        out: dict[str, str] = {}
        for key, prog in self.compiled.audit_annotations:
            try:
                value = run.eval(prog)
            except EvaluationError as exc:
                raise EvaluationError(f'failed to evaluate auditAnnotation "{key}": {exc}') from None
            if isinstance(value, str) and value:
                out[key] = value
        return out


def _builtin_scope(api_version: str, kind: str) -> bool | None:
    from vpol.model.discovery import builtin

    info = builtin().resource_for_kind(api_version, kind)
    return None if info is None else info.namespaced


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
        run = _PolicyRun(self.compiled, data, None)
        outcome = conditions_outcome(run, self.compiled.match_conditions, "Fail", error_prefix=" ")
        if outcome is None:
            return result
        if outcome[0] == SKIP:
            return dataclasses.replace(result, result="fail", message=KEEP)
        return dataclasses.replace(result, result=ERROR, message=outcome[1].strip())
