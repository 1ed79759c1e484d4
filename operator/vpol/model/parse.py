"""Turning documents (dicts) into typed policies and exceptions, with every problem reported: the reader, the
parts every policy kind shares (head, metadata, match constraints, named expressions, the admission-policy spec)
and PolicyExceptions. Each kind's own parsing is its model's (vpol.policies.<kind>.model, over :func:`parse_kind`).

The parser never raises on bad content: it collects a ``Problem`` for each
wrong field (missing, wrong type, invalid value, duplicate name, unknown
field) with its field path and position, and returns a policy only when
nothing blocks it. Defaults are Kyverno's (see ../shared/NOTES.md, section 1).
"""

from __future__ import annotations

import datetime

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from vpol.model.documents import Document
from vpol.model.policy import (
    ACTION_DENY,
    ACTION_WARN,
    FAILURE_POLICIES,
    GROUP,
    MODES,
    NAMESPACED_VERSIONS,
    OPERATIONS,
    SCOPES,
    VALIDATION_ACTIONS,
    AuditAnnotation,
    Autogen,
    Evaluation,
    LabelSelector,
    MatchResources,
    NamedExpression,
    PolicyException,
    PolicyRef,
    PolicySpec,
    Requirement,
    Rule,
    Validation,
)
from vpol.model.problems import Problem

T = TypeVar("T")
_P = TypeVar("_P")

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
CEL_IDENT = re.compile(r"^[_a-zA-Z][_a-zA-Z0-9]*$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_SELECTOR_OPS = ("In", "NotIn", "Exists", "DoesNotExist")

#: Longest expression we accept (the API server's limit for VAP expressions is 5 kB
#: for valueExpression and unbounded-but-costed for others; cel-cpp's parser stops
#: at 100k code points). Beyond this we refuse before compiling.
MAX_EXPRESSION_LENGTH = 100_000


@dataclass
class Reader:
    """Reads typed values out of a dict, recording problems by field path."""

    doc: Document | None
    object_ref: str = ""
    problems: list[Problem] = field(default_factory=list)

    def problem(self, path: str, message: str, severity: str = "error") -> None:
        pos = self.doc.position(path) if self.doc else None
        self.problems.append(
            Problem(
                message=message,
                path=path,
                severity=severity,  # type: ignore[arg-type]
                file=self.doc.file if self.doc else "",
                object=self.object_ref,
                position=pos,
            )
        )

    @property
    def failed(self) -> bool:
        return any(p.severity == "error" for p in self.problems)

    def obj(self, data: Any, path: str, known: tuple[str, ...] | None = None) -> dict[str, Any]:
        if data is None:
            return {}
        if not isinstance(data, dict):
            self.problem(path, f"must be an object, not {value_kind(data)}")
            return {}
        if known is not None:
            for key in data:
                if key not in known:
                    self.problem(f"{path}.{key}" if path else key, f'unknown field "{key}"', "warning")
        return data

    def str_(self, data: dict[str, Any], key: str, path: str, *, required: bool = False,
             default: str = "", choices: tuple[str, ...] | None = None) -> str:
        here = f"{path}.{key}" if path else key
        value = data.get(key)
        if value is None:
            if required:
                self.problem(here, "required field is missing")
            return default
        if not isinstance(value, str):  # as the API server: `name: 5` is a number, not a string
            self.problem(here, f"must be a string, not {value_kind(value)}")
            return default
        value = str(value)
        if choices is not None and value not in choices:
            self.problem(here, f'unsupported value "{value}": must be one of {", ".join(choices)}')
            return default
        return value

    def bool_(self, data: dict[str, Any], key: str, path: str, default: bool) -> bool:
        value = data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.problem(f"{path}.{key}", f"must be a boolean, not {value_kind(value)}")
            return default
        return value

    def int_(self, data: dict[str, Any], key: str, path: str) -> int | None:
        value = data.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.problem(f"{path}.{key}", f"must be an integer, not {value_kind(value)}")
            return None
        return value

    def list_(self, data: dict[str, Any], key: str, path: str) -> list[Any]:
        value = data.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            self.problem(f"{path}.{key}", f"must be a list, not {value_kind(value)}")
            return []
        return value

    def strings(self, data: dict[str, Any], key: str, path: str,
                choices: tuple[str, ...] | None = None) -> tuple[str, ...]:
        out: list[str] = []
        for i, item in enumerate(self.list_(data, key, path)):
            here = f"{path}.{key}[{i}]"
            if isinstance(item, bool) or not isinstance(item, (str, int, float)):
                self.problem(here, f"must be a string, not {value_kind(item)}")
                continue
            item = str(item)
            if choices is not None and item not in choices:
                self.problem(here, f'unsupported value "{item}": must be one of {", ".join(choices)}')
                continue
            out.append(item)
        return tuple(out)

    def objects(self, data: dict[str, Any], key: str, path: str,
                each: Callable[[dict[str, Any], str], T | None]) -> tuple[T, ...]:
        out: list[T] = []
        for i, item in enumerate(self.list_(data, key, path)):
            here = f"{path}.{key}[{i}]"
            if not isinstance(item, dict):
                self.problem(here, f"must be an object, not {value_kind(item)}")
                continue
            parsed = each(item, here)
            if parsed is not None:
                out.append(parsed)
        return tuple(out)

    def expression(self, data: dict[str, Any], key: str, path: str, required: bool = True) -> str:
        value = self.str_(data, key, path, required=required)
        here = f"{path}.{key}"
        if required and value is not None and data.get(key) is not None and not value.strip():
            self.problem(here, "expression must not be empty")
        if len(value) > MAX_EXPRESSION_LENGTH:
            self.problem(here, f"expression is {len(value)} characters long; the limit is {MAX_EXPRESSION_LENGTH}")
            return ""
        return value


def value_kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


# --- pieces -------------------------------------------------------------------------------


def _selector(r: Reader, data: Any, path: str) -> LabelSelector | None:
    if data is None:
        return None
    d = r.obj(data, path, ("matchLabels", "matchExpressions"))
    labels = r.obj(d.get("matchLabels"), f"{path}.matchLabels")
    for k, v in labels.items():
        if not isinstance(v, str):
            r.problem(f"{path}.matchLabels.{k}", f"must be a string, not {value_kind(v)}")

    def req(item: dict[str, Any], here: str) -> Requirement | None:
        key = r.str_(item, "key", here, required=True)
        op = r.str_(item, "operator", here, required=True, choices=_SELECTOR_OPS)
        values = r.strings(item, "values", here)
        if op in ("In", "NotIn") and not values:
            r.problem(f"{here}.values", f"must be non-empty for operator {op}")
        if op in ("Exists", "DoesNotExist") and values:
            r.problem(f"{here}.values", f"must be empty for operator {op}")
        return Requirement(key, op, values) if key and op else None

    exprs = r.objects(d, "matchExpressions", path, req)
    return LabelSelector(tuple(sorted((str(k), str(v)) for k, v in labels.items())), exprs)


def _rule(r: Reader, item: dict[str, Any], here: str) -> Rule:
    r.obj(item, here, ("apiGroups", "apiVersions", "resources", "operations", "resourceNames", "scope"))
    return Rule(
        api_groups=r.strings(item, "apiGroups", here),
        api_versions=r.strings(item, "apiVersions", here),
        resources=r.strings(item, "resources", here),
        operations=r.strings(item, "operations", here, choices=OPERATIONS),
        resource_names=r.strings(item, "resourceNames", here),
        scope=r.str_(item, "scope", here, default="*", choices=SCOPES),
    )


def match_resources(r: Reader, data: Any, path: str) -> MatchResources | None:
    if data is None:
        return None
    d = r.obj(data, path, ("resourceRules", "excludeResourceRules", "namespaceSelector", "objectSelector",
                           "matchPolicy"))
    return MatchResources(
        resource_rules=r.objects(d, "resourceRules", path, lambda i, h: _rule(r, i, h)),
        exclude_resource_rules=r.objects(d, "excludeResourceRules", path, lambda i, h: _rule(r, i, h)),
        namespace_selector=_selector(r, d.get("namespaceSelector"), f"{path}.namespaceSelector"),
        object_selector=_selector(r, d.get("objectSelector"), f"{path}.objectSelector"),
        match_policy=r.str_(d, "matchPolicy", path, default="Equivalent", choices=("Exact", "Equivalent")),
    )


def named_expressions(r: Reader, d: dict[str, Any], key: str, path: str, ident: bool) -> tuple[NamedExpression, ...]:
    seen: dict[str, int] = {}

    def each(item: dict[str, Any], here: str) -> NamedExpression | None:
        r.obj(item, here, ("name", "expression"))
        name = r.str_(item, "name", here, required=True)
        expr = r.expression(item, "expression", here)
        if name:
            if ident and not CEL_IDENT.match(name):
                r.problem(f"{here}.name", f'"{name}" is not a valid CEL identifier')
            elif not ident and not _QUALIFIED_NAME.match(name):
                # Kyverno accepts any name (its catalogue has "check the job spec"); the API server does not
                # in a generated VAP/MAP, where vpol turns it into a qualified one.
                r.problem(f"{here}.name", f'"{name}" is not a qualified name (letters, digits, "-", "_", "."); '
                                          "generated admission policies use a qualified form of it", "warning")
            if name in seen:
                r.problem(f"{here}.name", f'duplicate name "{name}" (first at {path}.{key}[{seen[name]}])')
            seen.setdefault(name, int(here.rsplit("[", 1)[1].rstrip("]")))
        return NamedExpression(name, expr) if name and expr else None

    return r.objects(d, key, path, each)


def _validation(r: Reader, item: dict[str, Any], here: str, any_reason: bool = False) -> Validation | None:
    """One ``validations[]`` item; ``any_reason``: ``reason`` is free text (an ImageValidatingPolicy's, where
    Kyverno does not restrict it), else one of the API server's reasons."""
    r.obj(item, here, ("expression", "message", "messageExpression", "reason"))
    expr = r.expression(item, "expression", here)
    message = r.str_(item, "message", here)
    # As the API server: surrounding whitespace (the newline `message: >` ends with) is trimmed first.
    if "\n" in message.strip():
        r.problem(f"{here}.message", "must not contain line breaks")
    msg_expr = r.expression(item, "messageExpression", here, required=False)
    reason = r.str_(item, "reason", here,
                    choices=None if any_reason else ("Unauthorized", "Forbidden", "Invalid", "RequestEntityTooLarge"))
    return Validation(expr, message, msg_expr, reason) if expr else None


def audit_annotation(r: Reader, item: dict[str, Any], here: str) -> AuditAnnotation | None:
    r.obj(item, here, ("key", "valueExpression"))
    key = r.str_(item, "key", here, required=True)
    if key and (len(key) > 63 or not _QUALIFIED_NAME.match(key)):
        r.problem(f"{here}.key", f'"{key}" must be a qualified name of at most 63 characters')
    value = r.expression(item, "valueExpression", here)
    return AuditAnnotation(key, value) if key and value else None


_SPEC_FIELDS = ("matchConstraints", "matchConditions", "variables", "validations", "auditAnnotations",
                "validationActions", "failurePolicy", "evaluation", "autogen", "webhookConfiguration")


def _mode(r: Reader, ev: dict[str, Any]) -> str:
    mode = ev.get("mode", "Kubernetes")
    if mode in MODES:
        return str(mode)
    # Kyverno has further payload modes (HTTP, Envoy) that vpol does not support.
    r.problem("spec.evaluation.mode", f'evaluation mode "{mode}" is not supported by vpol '
                                      f'(supported: {", ".join(MODES)})')
    return "Kubernetes"


def policy_spec(r: Reader, data: Any, fields: tuple[str, ...] = _SPEC_FIELDS, any_reason: bool = False) -> PolicySpec:
    """A ValidatingPolicy's spec, or (``fields``: the known fields, ``any_reason``: see _validation) the frame an
    ImageValidatingPolicy shares with it."""
    d = r.obj(data, "spec", fields)
    ev = r.obj(d.get("evaluation"), "spec.evaluation", ("admission", "background", "mode"))
    evaluation = Evaluation(
        admission_enabled=r.bool_(r.obj(ev.get("admission"), "spec.evaluation.admission", ("enabled",)),
                                  "enabled", "spec.evaluation.admission", True),
        background_enabled=r.bool_(r.obj(ev.get("background"), "spec.evaluation.background", ("enabled",)),
                                   "enabled", "spec.evaluation.background", True),
        mode=_mode(r, ev),
    )
    ag = r.obj(d.get("autogen"), "spec.autogen", ("podControllers", "validatingAdmissionPolicy"))
    pc = r.obj(ag.get("podControllers"), "spec.autogen.podControllers", ("controllers",))
    controllers = None
    if "controllers" in pc and pc.get("controllers") is not None:
        controllers = tuple(c.lower() for c in r.strings(pc, "controllers", "spec.autogen.podControllers"))
    vap = r.obj(ag.get("validatingAdmissionPolicy"), "spec.autogen.validatingAdmissionPolicy", ("enabled",))
    vap_enabled = None if vap.get("enabled") is None else \
        r.bool_(vap, "enabled", "spec.autogen.validatingAdmissionPolicy", False)
    autogen = Autogen(controllers, vap_enabled)

    actions = r.strings(d, "validationActions", "spec", choices=VALIDATION_ACTIONS)
    if len(set(actions)) != len(actions):
        r.problem("spec.validationActions", "must not contain duplicates")
    if ACTION_DENY in actions and ACTION_WARN in actions:
        r.problem("spec.validationActions", "Deny and Warn together are not allowed")
    if "validationActions" in d and d.get("validationActions") == []:
        r.problem("spec.validationActions", "must not be empty when set")

    wh = r.obj(d.get("webhookConfiguration"), "spec.webhookConfiguration", ("timeoutSeconds",))
    timeout = r.int_(wh, "timeoutSeconds", "spec.webhookConfiguration")
    if timeout is not None and not 1 <= timeout <= 30:
        r.problem("spec.webhookConfiguration.timeoutSeconds", "must be between 1 and 30 seconds")

    match = match_resources(r, d.get("matchConstraints"), "spec.matchConstraints")
    if ev.get("mode", "Kubernetes") == "Kubernetes" and (match is None or not match.resource_rules):
        r.problem("spec.matchConstraints", "a matchConstraints with at least one resource rule is required")

    validations = r.objects(d, "validations", "spec", lambda i, h: _validation(r, i, h, any_reason))
    audits = r.objects(d, "auditAnnotations", "spec", lambda i, h: audit_annotation(r, i, h))
    if not d.get("validations") and not d.get("auditAnnotations"):
        r.problem("spec.validations", "validations and auditAnnotations may not both be empty")

    return PolicySpec(
        match_constraints=match,
        match_conditions=named_expressions(r, d, "matchConditions", "spec", ident=False),
        variables=named_expressions(r, d, "variables", "spec", ident=True),
        validations=validations,
        audit_annotations=audits,
        validation_actions=tuple(dict.fromkeys(actions)) or (ACTION_DENY,),
        failure_policy=r.str_(d, "failurePolicy", "spec", default="Fail", choices=FAILURE_POLICIES),
        evaluation=evaluation,
        autogen=autogen,
        webhook_timeout_seconds=timeout,
    )


def policy_metadata(r: Reader, data: dict[str, Any], namespaced: bool
                    ) -> tuple[str, str, dict[str, str], dict[str, str], str, int]:
    md = r.obj(data.get("metadata"), "metadata")
    name = r.str_(md, "name", "metadata", required=True)
    if md.get("name") == "":
        r.problem("metadata.name", "must not be empty")
    if name and (len(name) > 253 or not _DNS_SUBDOMAIN.match(name)):
        r.problem("metadata.name", f'"{name}" is not a valid name (lowercase RFC 1123 subdomain)')
    namespace = r.str_(md, "namespace", "metadata") if namespaced else ""
    labels = {str(k): str(v) for k, v in r.obj(md.get("labels"), "metadata.labels").items()}
    annotations = {str(k): str(v) for k, v in r.obj(md.get("annotations"), "metadata.annotations").items()}
    for where, keys in (("metadata.labels", labels), ("metadata.annotations", annotations)):
        for key in keys:
            if not _valid_key(key):
                r.problem(f"{where}.{key}", f'"{key}" is not a valid key: an optional DNS subdomain prefix and "/", '
                                            "then at most 63 letters, digits, '-', '_' or '.', starting and ending "
                                            "with a letter or digit")
    for key, value in labels.items():
        if value and (len(value) > 63 or not _QUALIFIED_NAME.match(value)):
            r.problem(f"metadata.labels.{key}", f'"{value}" is not a valid label value (at most 63 letters, digits, '
                                                "'-', '_' or '.', starting and ending with a letter or digit)")
    raw_generation = md.get("generation")
    generation = raw_generation if isinstance(raw_generation, int) else 0
    return name, namespace, labels, annotations, str(md.get("uid") or ""), generation


def _valid_key(key: str) -> bool:
    """A label or annotation key as the API server accepts it (a qualified name)."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(_QUALIFIED_NAME.match(name))


def policy_head(data: Any, doc: Document | None, kinds: tuple[str, ...], versions: tuple[str, ...]
          ) -> tuple[Reader, str | None, str]:
    """The reader of a policy document and its apiVersion and kind, checked against what is served
    (apiVersion None: the document is not even an object)."""
    name_hint = data.get("metadata", {}).get("name", "") if isinstance(data, dict) and isinstance(
        data.get("metadata"), dict) else ""
    r = Reader(doc, object_ref=f"{kinds[0]}/{name_hint}" if name_hint else kinds[0])
    if not isinstance(data, dict):
        r.problem("", f"a policy must be an object, not {value_kind(data)}")
        return r, None, ""
    api_version = str(data.get("apiVersion", ""))
    kind = str(data.get("kind", ""))
    group, _, version = api_version.partition("/")
    if kind not in kinds:
        expected = kinds[0] if len(kinds) == 1 else "one of " + ", ".join(kinds)
        r.problem("kind", f'unsupported kind "{kind}": expected {expected}')
    if kind.startswith("Namespaced"):
        versions = tuple(v for v in versions if v in NAMESPACED_VERSIONS)  # Kyverno serves no v1alpha1 of them
    if group != GROUP or version not in versions:
        r.problem("apiVersion", f'unsupported apiVersion "{api_version}": expected {GROUP}/'
                                f'{{{",".join(versions)}}}')
    if kind in kinds:
        r.object_ref = f"{kind}/{name_hint}" if name_hint else kind
    return r, api_version, kind


def is_exception_document(data: Any) -> bool:
    return isinstance(data, dict) and str(data.get("apiVersion", "")).startswith(f"{GROUP}/") and \
        data.get("kind") == "PolicyException"


def parse_exception(data: Any, doc: Document | None = None) -> tuple[PolicyException | None, list[Problem]]:
    """Parse a policies.kyverno.io PolicyException."""
    r = Reader(doc, object_ref="PolicyException")
    if not isinstance(data, dict):
        r.problem("", f"an exception must be an object, not {value_kind(data)}")
        return None, r.problems
    name, namespace, labels, *_ = policy_metadata(r, data, True)
    r.object_ref = f"PolicyException/{name}"
    d = r.obj(data.get("spec"), "spec", ("policyRefs", "matchConditions", "images", "allowedValues",
                                         "reportResult", "background", "expiresAt"))
    refs = r.objects(d, "policyRefs", "spec",
                     lambda i, h: PolicyRef(r.str_(i, "name", h, required=True), r.str_(i, "kind", h)))
    if not refs:
        r.problem("spec.policyRefs", "at least one policy reference is required")
    exc = PolicyException(
        name=name,
        namespace=namespace,
        policy_refs=refs,
        match_conditions=named_expressions(r, d, "matchConditions", "spec", ident=False),
        allowed_images=r.strings(d, "images", "spec"),
        allowed_values=r.strings(d, "allowedValues", "spec"),
        report_result=r.str_(d, "reportResult", "spec", default="skip", choices=("skip", "pass")),
        expires_at=_timestamp(r, d, "expiresAt", "spec"),
        labels=labels,
        source=doc.file if doc else "",
    )
    return (None if r.failed else exc), r.problems


def _timestamp(r: Reader, data: dict[str, Any], key: str, path: str) -> float | None:
    """A metav1.Time field (RFC 3339, as the API server accepts it) as POSIX seconds; None when absent."""
    text = r.str_(data, key, path)
    if not text:
        return None
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None or "T" not in text.upper():
        r.problem(f"{path}.{key}", f'invalid value "{text}": must be an RFC 3339 date-time, '
                                   "such as 2026-12-31T23:59:59Z")
        return None
    return moment.timestamp()


def parse_kind(data: Any, doc: Document | None, kinds: tuple[str, str], versions: tuple[str, ...],
               spec: Callable[[Reader, Any], Any], make: Callable[..., _P]) -> tuple[_P | None, list[Problem]]:
    """Parse one document of a policy kind whose namespaced twin is ``kinds[1]``: its head and metadata as for every
    kind, its spec with ``spec``; the policy ``make`` builds (None when invalid) and every problem."""
    r, api_version, kind = policy_head(data, doc, kinds, versions)
    if api_version is None:
        return None, r.problems
    name, namespace, labels, annotations, uid, generation = policy_metadata(r, data, kind == kinds[1])
    if data.get("spec") is None:
        r.problem("spec", "required field is missing")
        return None, r.problems
    parsed = spec(r, data.get("spec"))
    if r.failed:
        return None, r.problems
    return make(name=name, spec=parsed, kind=kind or kinds[0], api_version=api_version, namespace=namespace, uid=uid,
                generation=generation, labels=labels, annotations=annotations, raw=data,
                source=doc.file if doc else "", positions=doc.positions if doc else {}), r.problems
