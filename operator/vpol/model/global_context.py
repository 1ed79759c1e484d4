"""Kyverno's GlobalContextEntry (``kyverno.io`` v2, v2beta1, v2alpha1): typed, with every problem reported.

An entry names where cached data comes from, exactly one of:

* ``spec.kubernetesResource`` {group, version, resource, namespace}: every object of one resource (of one
  namespace, or all), kept current by a watch;
* ``spec.apiCall`` {urlPath | service {url, caBundle, headers}, method, data, refreshInterval, retryLimit}: the
  JSON answer of a call to the API server (``urlPath``) or to a web service, made again every refreshInterval;

plus ``spec.projections`` [{name, jmesPath}], named JMESPath extracts of that data.

The checks and their messages are those of Kyverno's API types (``GlobalContextEntrySpec.Validate`` and the
nested ``Validate`` methods in api/kyverno/v2/global_context_entry_types.go), on the real field paths
(Kyverno reports a kubernetesResource problem under ``spec.resource`` and a refresh interval of zero under
``spec.apiCall.refreshIntervalSeconds``). The defaults are the CRD's (method GET, refreshInterval 10m,
retryLimit 3), so a document read offline means what the same document means in a cluster.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import jmespath
from jmespath.exceptions import JMESPathError

from vpol.model.documents import Document
from vpol.model.parse import Reader, value_kind, policy_metadata
from vpol.model.problems import Problem

GROUP = "kyverno.io"
KIND = "GlobalContextEntry"
#: Served as Kyverno 1.19 serves them (v2alpha1 deprecated); one schema.
VERSIONS = ("v2", "v2beta1", "v2alpha1")
PLURAL = "globalcontextentries"
#: The version vpol reads and writes (every served version has the same schema and no conversion).
READ_VERSION = "v2"

METHODS = ("GET", "POST")
DEFAULT_REFRESH = "10m"
DEFAULT_RETRY_LIMIT = 3

_ENTRY_FIELDS = ("kubernetesResource", "apiCall", "projections")
_RESOURCE_FIELDS = ("group", "version", "resource", "namespace")
_CALL_FIELDS = ("urlPath", "service", "method", "data", "refreshInterval", "retryLimit")
_SERVICE_FIELDS = ("url", "caBundle", "headers")


@dataclass(frozen=True)
class ResourceSource:
    """``spec.kubernetesResource``: every object of a resource, in one namespace or all."""

    group: str
    version: str
    resource: str
    #: Empty: every namespace (or a cluster-scoped resource).
    namespace: str = ""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def describe(self) -> str:
        """``deployments.apps/v1`` (``in namespace ns``), for messages."""
        name = f"{self.resource}.{self.group}" if self.group else self.resource
        where = f" in namespace {self.namespace}" if self.namespace else ""
        return f"{name}/{self.version}{where}"


@dataclass(frozen=True)
class ServiceCall:
    url: str
    ca_bundle: str = ""
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ApiCallSource:
    """``spec.apiCall``: a call made again every ``refresh_seconds``."""

    url_path: str = ""
    service: ServiceCall | None = None
    method: str = "GET"
    #: (key, value) members of a POST's JSON body, in order.
    data: tuple[tuple[str, Any], ...] = ()
    refresh_seconds: float = 600.0
    retry_limit: int = DEFAULT_RETRY_LIMIT

    def body(self) -> dict[str, Any] | None:
        """The JSON object a POST sends (one member per data item; a later key wins, as in a Go map); None for a
        GET without data."""
        if not self.data and self.method != "POST":
            return None
        return {key: value for key, value in self.data}

    def describe(self) -> str:
        target = self.url_path or (self.service.url if self.service else "")
        return f"{self.method} {target}"


@dataclass(frozen=True)
class Projection:
    name: str
    jmes_path: str


@dataclass(frozen=True)
class GlobalContextEntry:
    name: str
    resource: ResourceSource | None = None
    api_call: ApiCallSource | None = None
    projections: tuple[Projection, ...] = ()
    uid: str = ""
    generation: int = 0
    api_version: str = f"{GROUP}/{READ_VERSION}"

    @property
    def source(self) -> str:
        """What feeds the entry, in a few words (for messages)."""
        if self.resource is not None:
            return self.resource.describe()
        if self.api_call is not None:
            return self.api_call.describe()
        return "nothing"


def is_global_context_document(data: Any) -> bool:
    """A ``kyverno.io`` GlobalContextEntry of a served version."""
    return isinstance(data, dict) and data.get("kind") == KIND and \
        str(data.get("apiVersion", "")) in {f"{GROUP}/{v}" for v in VERSIONS}


# time.ParseDuration: an optional sign, then one or more decimal numbers each followed by a unit.
_DURATION_PART = re.compile(r"([0-9]*(?:\.[0-9]*)?)([^0-9.]*)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "\u00b5s": 1e-6, "\u03bcs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0,
                 "h": 3600.0}


def parse_go_duration(text: str) -> float:
    """Seconds in a Go duration (``time.ParseDuration``: ``300ms``, ``1.5h``, ``2h45m``, ``0``); ValueError,
    worded as Go's, when it is not one."""
    s = text
    sign = 1.0
    if s[:1] in ("-", "+"):
        sign = -1.0 if s[0] == "-" else 1.0
        s = s[1:]
    if s == "0":
        return 0.0
    if not s:
        raise ValueError(f'time: invalid duration "{text}"')
    total, pos = 0.0, 0
    while pos < len(s):
        m = _DURATION_PART.match(s, pos)
        assert m is not None  # both groups may be empty
        number, unit = m.group(1), m.group(2)
        if number in ("", "."):
            raise ValueError(f'time: invalid duration "{text}"')
        if unit == "":
            raise ValueError(f'time: missing unit in duration "{text}"')
        if unit not in _UNIT_SECONDS:
            raise ValueError(f'time: unknown unit "{unit}" in duration "{text}"')
        total += float(number) * _UNIT_SECONDS[unit]
        pos = m.end()
    return sign * total


def parse_global_context_entry(data: Any, doc: Document | None = None
                               ) -> tuple[GlobalContextEntry | None, list[Problem]]:
    """Parse one GlobalContextEntry document; the entry is None when any error blocks it."""
    name_hint = data.get("metadata", {}).get("name", "") if isinstance(data, dict) and isinstance(
        data.get("metadata"), dict) else ""
    r = Reader(doc, object_ref=f"{KIND}/{name_hint}" if name_hint else KIND)
    if not isinstance(data, dict):
        r.problem("", f"a GlobalContextEntry must be an object, not {value_kind(data)}")
        return None, r.problems
    api_version = str(data.get("apiVersion", ""))
    if data.get("kind") != KIND:
        r.problem("kind", f'unsupported kind "{data.get("kind")}": expected {KIND}')
    if api_version not in {f"{GROUP}/{v}" for v in VERSIONS}:
        r.problem("apiVersion", f'unsupported apiVersion "{api_version}": expected {GROUP}/{{{",".join(VERSIONS)}}}')
    name, _ns, _labels, _annotations, uid, generation = policy_metadata(r, data, False)
    if data.get("spec") is None:
        r.problem("spec", "required field is missing")
        return None, r.problems
    spec = r.obj(data.get("spec"), "spec", _ENTRY_FIELDS)
    resource = _resource(r, spec) if spec.get("kubernetesResource") is not None else None
    api_call = _api_call(r, spec) if spec.get("apiCall") is not None else None
    if (spec.get("kubernetesResource") is None) == (spec.get("apiCall") is None):
        r.problem("spec.kubernetesResource", "A global context entry should either have KubernetesResource or APICall")
    projections = r.objects(spec, "projections", "spec", lambda item, here: _projection(r, item, here, name))
    if r.failed:
        return None, r.problems
    return GlobalContextEntry(name=name, resource=resource, api_call=api_call, projections=projections, uid=uid,
                              generation=generation, api_version=api_version), r.problems


def _resource(r: Reader, spec: dict[str, Any]) -> ResourceSource | None:
    path = "spec.kubernetesResource"
    d = r.obj(spec.get("kubernetesResource"), path, _RESOURCE_FIELDS)
    group = r.str_(d, "group", path)
    version = r.str_(d, "version", path)
    resource = r.str_(d, "resource", path)
    namespace = r.str_(d, "namespace", path)
    if group == "" and version != "v1":
        r.problem(f"{path}.group", "A Resource entry requires a group")
    if version == "":
        r.problem(f"{path}.version", "A Resource entry requires a version")
    if resource == "":
        r.problem(f"{path}.resource", "A Resource entry requires a resource")
    return ResourceSource(group, version, resource, namespace)


def _api_call(r: Reader, spec: dict[str, Any]) -> ApiCallSource | None:
    path = "spec.apiCall"
    d = r.obj(spec.get("apiCall"), path, _CALL_FIELDS)
    url_path = r.str_(d, "urlPath", path)
    service = None
    if d.get("service") is not None:
        sd = r.obj(d.get("service"), f"{path}.service", _SERVICE_FIELDS)
        headers = r.objects(sd, "headers", f"{path}.service",
                            lambda h, here: (r.str_(h, "key", here, required=True),
                                             r.str_(h, "value", here, required=True)))
        service = ServiceCall(url=r.str_(sd, "url", f"{path}.service", required=True),
                              ca_bundle=r.str_(sd, "caBundle", f"{path}.service"), headers=headers)
    method = r.str_(d, "method", path, default="GET", choices=METHODS)
    data = r.objects(d, "data", path, lambda item, here: _data_item(r, item, here))
    interval_text = r.str_(d, "refreshInterval", path, default=DEFAULT_REFRESH)
    try:
        refresh = parse_go_duration(interval_text)
    except ValueError as exc:
        r.problem(f"{path}.refreshInterval", str(exc))
        refresh = 600.0
    else:
        if refresh <= 0:
            # Kyverno refuses zero (as "refreshIntervalSeconds"); a negative interval would make its refresh loop
            # spin, and is refused here too.
            r.problem(f"{path}.refreshInterval", "A Resource entry requires a refresh interval greater than 0 seconds")
    retry = r.int_(d, "retryLimit", path)
    if retry is not None and retry < 1:
        r.problem(f"{path}.retryLimit", f"must be at least 1, not {retry}")
    if (service is None) == (url_path == ""):
        r.problem(f"{path}.service", "An External API call should either have Service or URLPath")
    if data and method != "POST":
        r.problem(f"{path}.method", "An External API call with data should have method as POST")
    return ApiCallSource(url_path=url_path, service=service, method=method, data=data, refresh_seconds=refresh,
                         retry_limit=retry if retry is not None and retry >= 1 else DEFAULT_RETRY_LIMIT)


def _data_item(r: Reader, item: dict[str, Any], here: str) -> tuple[str, Any] | None:
    key = r.str_(item, "key", here, required=True)
    if "value" not in item:
        r.problem(f"{here}.value", "required field is missing")
    return key, item.get("value")


def _projection(r: Reader, item: dict[str, Any], here: str, entry_name: str) -> Projection | None:
    name = r.str_(item, "name", here)
    expression = r.str_(item, "jmesPath", here)
    if name == "":
        r.problem(f"{here}.name", "A projection entry requires a name")
    elif name == entry_name:
        r.problem(f"{here}.name", "A projection entry requires a name different from the global context entry name")
    if expression == "":
        r.problem(f"{here}.jmesPath", "A projection entry requires a JMESPath")
        return None
    try:
        jmespath.compile(expression)
    except JMESPathError as exc:
        r.problem(f"{here}.jmesPath", f'Invalid value: "{expression}": {jmespath_error(exc)}')
        return None
    return Projection(name, expression)


def jmespath_error(exc: JMESPathError) -> str:
    """A JMESPath error in one line (the library's parse errors add the expression and a caret line)."""
    message = getattr(exc, "msg", "") or str(exc).splitlines()[0]
    column = getattr(exc, "lex_position", None)
    return f"{message} at column {column}" if isinstance(column, int) else str(message)
