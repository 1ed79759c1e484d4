"""A kmock Kubernetes emulator close enough to an API server for the vpol operator, with scripted faults.

``kmock.KubernetesEmulator`` stores objects in memory and serves discovery,
list, watch, get, create, merge/JSON patch and delete. This subclass adds
what the operator relies on and the plain emulator lacks:

- ``metadata.uid``, ``creationTimestamp``, ``generation`` and a cluster-wide
  increasing ``resourceVersion`` stamped on every write; ``generation`` is
  bumped only when ``spec`` changes (as for a CRD with a status subresource);
- lists at the current resourceVersion, and watches from a resourceVersion
  that send only later changes (kmock replays every object on every watch);
- a status subresource: a PATCH of ``.../status`` changes only ``status``,
  a PATCH of the object itself ignores ``status``;
- JSON patches whose ``test`` operation fails are answered 422, as the API
  server does, instead of a generic 500;
- SelfSubjectAccessReviews are answered ``allowed: true`` without storing
  anything (the plain emulator would answer the second one 409);
- an empty OpenAPI v3 index (the operator then takes schemas from its bundle);
- :class:`Fault` objects checked *before* the request reaches the store,
  so an injected 500 or 409 on a write really leaves the object unchanged
  (kmock's own DSL reactions run after the store was updated).

Unless told otherwise, faults apply to the operator's requests (kubernetes
client, Kopf), never to the test's own requests made through kmock's client.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import enum
import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import aiohttp.web
import attrs
import jsonpatch
import kmock

#: The plural names this emulator serves, with their discovery information.
RESOURCES: dict[str, kmock.ResourceInfo] = {
    "v1/namespaces": kmock.ResourceInfo(kind="Namespace", singular="namespace", namespaced=False,
                                        verbs={"get", "list", "watch"}),
    "v1/configmaps": kmock.ResourceInfo(kind="ConfigMap", singular="configmap", namespaced=True,
                                        verbs={"create", "delete", "get", "list", "patch", "update", "watch"}),
    "policies.kyverno.io/v1/validatingpolicies": kmock.ResourceInfo(
        kind="ValidatingPolicy", singular="validatingpolicy", namespaced=False, shortnames={"vpol"},
        verbs={"create", "delete", "get", "list", "patch", "update", "watch"}, subresources={"status"}),
    "policies.kyverno.io/v1alpha1/policyexceptions": kmock.ResourceInfo(
        kind="PolicyException", singular="policyexception", namespaced=True,
        verbs={"create", "delete", "get", "list", "patch", "update", "watch"}),
    "policies.kyverno.io/v1/policyexceptions": kmock.ResourceInfo(
        kind="PolicyException", singular="policyexception", namespaced=True,
        verbs={"create", "delete", "get", "list", "patch", "update", "watch"}),
    "admissionregistration.k8s.io/v1/validatingadmissionpolicies": kmock.ResourceInfo(
        kind="ValidatingAdmissionPolicy", singular="validatingadmissionpolicy", namespaced=False,
        verbs={"create", "delete", "get", "list", "patch", "update", "watch"}, subresources={"status"}),
    "admissionregistration.k8s.io/v1/validatingadmissionpolicybindings": kmock.ResourceInfo(
        kind="ValidatingAdmissionPolicyBinding", singular="validatingadmissionpolicybinding", namespaced=False,
        verbs={"create", "delete", "get", "list", "patch", "update", "watch"}),
    "apiextensions.k8s.io/v1/customresourcedefinitions": kmock.ResourceInfo(
        kind="CustomResourceDefinition", singular="customresourcedefinition", namespaced=False,
        verbs={"get", "list", "watch"}),
    "authorization.k8s.io/v1/selfsubjectaccessreviews": kmock.ResourceInfo(
        kind="SelfSubjectAccessReview", singular="selfsubjectaccessreview", namespaced=False, verbs={"create"}),
}

POLICIES = "policies.kyverno.io/v1/validatingpolicies"
POLICY_PATH = "/apis/policies.kyverno.io/v1/validatingpolicies"
#: User-Agent prefixes of the two clients in the operator.
KOPF = "kopf/"
VPOL = "OpenAPI-Generator/"
#: User-Agent prefix of the test's own requests (kmock's client).
TEST_CLIENT = "kmock/"


class Effect(enum.Enum):
    """What a fault does to a matching request."""

    #: Answer with ``Fault.status`` (a Kubernetes ``Status`` body); nothing is stored.
    STATUS = "status"
    #: Wait ``Fault.delay`` seconds (or until ``Fault.release`` is set), then serve normally.
    SLOW = "slow"
    #: A watch stream that sends nothing until released, then one ERROR 410 event, then ends.
    GONE = "gone"
    #: A watch stream that sends half an event until released, then the connection is cut.
    DROP = "drop"


_REASONS = {
    409: ("Conflict", "Operation cannot be fulfilled: the object has been modified; please apply your changes "
                      "to the latest version and try again"),
    410: ("Expired", "too old resource version"),
    422: ("Invalid", "the request is invalid"),
    429: ("TooManyRequests", "the server has received too many requests and has asked us to try again later"),
    500: ("InternalError", "Internal error occurred: injected by the test"),
    503: ("ServiceUnavailable", "the server is currently unable to handle the request"),
}


def status_body(code: int, message: str | None = None) -> dict[str, Any]:
    reason, default = _REASONS.get(code, ("Failure", "injected failure"))
    return {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
            "message": message or default, "reason": reason, "code": code}


@dataclass
class Fault:
    """A failure for the first ``times`` operator requests that match every criterion given.

    ``method`` is an HTTP method ("GET", "PATCH", ...), ``resource`` a kmock
    resource string ("policies.kyverno.io/v1/validatingpolicies"),
    ``name``/``subresource`` narrow it to one object or to ``status``
    ("" means the object itself), ``watch`` to watch (True) or non-watch
    (False) requests, ``path`` to an exact path ("/apis"), ``agent`` to
    one client.
    """

    effect: Effect
    method: str | None = None
    resource: str | None = None
    name: str | None = None
    subresource: str | None = None
    watch: bool | None = None
    path: str | None = None
    #: Prefix of the User-Agent: KOPF (Kopf's watches and lists), VPOL (vpol's client), TEST_CLIENT;
    #: None: any client but the test's own.
    agent: str | None = None
    times: int = 1
    status: int = 500
    delay: float = 0.0
    #: For SLOW, GONE and DROP: the fault holds until this is set (bounded by ``hold_limit``).
    release: asyncio.Event | None = None
    hold_limit: float = 30.0
    #: How many requests this fault has answered so far.
    hits: int = 0
    _hit: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    def matches(self, request: kmock.Request) -> bool:
        if self.hits >= self.times:
            return False
        if self.method is not None and str(request.method.value).upper() != self.method.upper():
            return False
        if self.path is not None and request.url.path != self.path:
            return False
        agent = str(request.headers.get("User-Agent", ""))
        if self.agent is None and agent.startswith(TEST_CLIENT) or not agent.startswith(self.agent or ""):
            return False
        if self.resource is not None and request.resource != kmock.resource(self.resource):
            return False
        if self.name is not None and request.name != self.name:
            return False
        if self.subresource is not None and (request.subresource or "") != self.subresource:
            return False
        if self.watch is not None and (request.action == kmock.action.WATCH) != self.watch:
            return False
        return True

    async def wait_hits(self, n: int, timeout: float) -> None:
        """Wait until this fault has been hit ``n`` times (fails the test after ``timeout`` s)."""
        async with asyncio.timeout(timeout):
            while self.hits < n:
                self._hit.clear()
                await self._hit.wait()

    async def hold(self) -> None:
        if self.release is not None:
            try:
                async with asyncio.timeout(self.hold_limit):
                    await self.release.wait()
            except TimeoutError:
                pass
        if self.delay:
            await asyncio.sleep(self.delay)


def _merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (what the API server does for application/merge-patch+json).

    Hand-written because it is a dozen lines and kmock applies merges itself;
    this copy is only used to know beforehand whether ``spec`` changes.
    """
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge_patch(out.get(key), value)
    return out


def _merge_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch that turns ``old`` into ``new`` (nulls for removed keys, nested dicts recursed)."""
    out: dict[str, Any] = {k: None for k in old if k not in new}
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            out[key] = _merge_diff(before, value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _version_priority(version: str) -> tuple[int, int, int]:
    """Kubernetes' version priority (GA > beta > alpha, then higher numbers first) as a sort key."""
    m = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if not m:
        return (3, 0, 0)
    stage = {None: 0, "beta": 1, "alpha": 2}[m.group(2)]
    return (stage, -int(m.group(1)), -int(m.group(3) or 0))


def _prefer_highest(group: dict[str, Any]) -> dict[str, Any]:
    group["versions"].sort(key=lambda v: _version_priority(v["version"]))
    group["preferredVersion"] = dict(group["versions"][0])
    return group


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _with_data(request: kmock.Request, data: Any) -> kmock.Request:
    """``request`` with another body, changed in place.

    kmock matches its reactions to the requests it recorded by identity, so
    the request object cannot be replaced by a copy (``attrs.evolve``).
    """
    object.__setattr__(request, "data", data)
    return request


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


@attrs.define(kw_only=True)
class VpolApiServer(kmock.KubernetesEmulator):
    """The emulator the fault tests run the operator against (see the module docstring)."""

    faults: list[Fault] = attrs.field(factory=list)
    #: Successful writes: (HTTP method, resource plural, name, subresource or "").
    writes: list[tuple[str, str, str, str]] = attrs.field(factory=list)
    #: The last resourceVersion handed out (cluster-wide, increasing).
    _version: int = attrs.field(default=1000, init=False)
    #: The last resourceVersion whose write is in the store (what a list is consistent with).
    _committed: int = attrs.field(default=1000, init=False)
    #: resourceVersion at which each object was (last) created: (resource, namespace, name) -> int.
    _created: dict[Any, int] = attrs.field(factory=dict, init=False)
    _write_lock: asyncio.Lock = attrs.field(factory=asyncio.Lock, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        for name, info in RESOURCES.items():
            self.resources[name] = info

    # -- discovery: kmock picks a group's preferredVersion at random among its versions; Kopf
    # serves only resources of the preferred version, so it must be the API server's choice.

    async def _serve_apis(self, request: kmock.Request) -> Any:
        doc = cast(dict[str, Any], await super()._serve_apis(request))
        for group in doc["groups"]:
            _prefer_highest(group)
        return doc

    async def _serve_group(self, request: kmock.Request) -> Any:
        return _prefer_highest(cast(dict[str, Any], await super()._serve_group(request)))

    # -- lists and watches with resourceVersions: kmock lists with resourceVersion "..." and replays
    # every existing object as ADDED on every watch; an API server lists at the current version and
    # a watch from version N sends only the changes after N. Without this, a client that ignored
    # its list results would still see every object on its next watch.

    async def _serve_list(self, request: kmock.Request) -> Any:
        version = self._committed  # read before the objects: a concurrent write is at worst seen twice
        doc = cast(dict[str, Any], await super()._serve_list(request))
        doc["metadata"]["resourceVersion"] = str(version)
        return doc

    async def _serve_watch(self, request: kmock.Request) -> Any:
        since = _int_or_none(request.params.get("resourceVersion"))
        async for event in super()._serve_watch(request):
            if since is None or not isinstance(event, Mapping) or event.get("type") == "DELETED":
                yield event
                continue
            obj = event.get("object") or {}
            meta = obj.get("metadata") or {}
            version = _int_or_none(meta.get("resourceVersion"))
            if version is not None and version <= since:
                continue  # the client has seen this state already
            created = self._created.get((request.resource, meta.get("namespace"), meta.get("name")))
            if event.get("type") == "ADDED" and created is not None and created <= since:
                event = {**event, "type": "MODIFIED"}  # created before, changed after `since`
            yield event

    # -- scripting

    def inject(self, effect: Effect, **criteria: Any) -> Fault:
        fault = Fault(effect, **criteria)
        self.faults.append(fault)
        return fault

    def get_object(self, resource: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """The stored object (a deep copy), read without going through HTTP or faults."""
        key = (kmock.resource(resource), namespace, name)
        if key not in self.objects or self.objects[key].deleted:
            return None
        return copy.deepcopy(self.objects[key].raw)

    def status_writes(self, name: str) -> int:
        return sum(1 for w in self.writes if w[2] == name and w[3] == "status")

    # -- request handling

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        for fault in self.faults:
            if fault.matches(request):
                fault.hits += 1
                fault._hit.set()
                response = await self._apply_fault(fault, request)
                if response is not None:
                    return response
                break

        if request.url.path == "/openapi/v3":
            return aiohttp.web.json_response({"paths": {}})
        if request.resource is None:
            return await super()._handle(request)
        if request.resource == kmock.resource("authorization.k8s.io/v1/selfsubjectaccessreviews"):
            review = dict(request.data or {})
            review["status"] = {"allowed": True, "reason": "the fault-test API server allows everything"}
            return aiohttp.web.json_response(review, status=201)
        if request.action not in (kmock.action.CREATE, kmock.action.UPDATE):
            return await super()._handle(request)

        async with self._write_lock:  # stamping and storing must not interleave with another write
            plural = str(request.resource.plural)
            request = self._stamp(request)
            response = await super()._handle(request)
            self._committed = self._version
            if response.status < 400:
                self.writes.append((str(request.method.value), plural,
                                    str(request.name or (request.data or {}).get("metadata", {}).get("name")),
                                    request.subresource or ""))
            return response

    async def _apply_fault(self, fault: Fault, request: kmock.Request) -> aiohttp.web.StreamResponse | None:
        if fault.effect is Effect.STATUS:
            if fault.delay:
                await asyncio.sleep(fault.delay)
            return aiohttp.web.json_response(status_body(fault.status), status=fault.status)
        if fault.effect is Effect.SLOW:
            await fault.hold()
            return None
        raw = request._raw_request
        assert raw is not None
        response = aiohttp.web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        await response.prepare(raw)
        if fault.effect is Effect.GONE:
            await fault.hold()
            event = {"type": "ERROR", "object": status_body(410)}
            await response.write(json.dumps(event).encode() + b"\n")
            await response.write_eof()
            return response
        # DROP: half an event, then the TCP connection goes away without the chunked terminator.
        await response.write(b'{"type": "ADDED", "object": {"apiVersion": ')
        await fault.hold()
        if raw.transport is not None:
            raw.transport.abort()
        return response

    def _stamp(self, request: kmock.Request) -> kmock.Request:
        """The request with the metadata an API server would set on this write (or a KubernetesError)."""
        self._version += 1
        version = str(self._version)
        data = request.data
        if request.action == kmock.action.CREATE:
            if not isinstance(data, Mapping):
                raise kmock.KubernetesError(status=400, reason="BadRequest", message="the body must be an object")
            body = copy.deepcopy(dict(data))
            meta = body.setdefault("metadata", {})
            meta.update(uid=str(uuid.uuid4()), resourceVersion=version, generation=1, creationTimestamp=_now())
            self._created[(request.resource, request.namespace or meta.get("namespace"), meta.get("name"))] = \
                self._version
            return _with_data(request, body)

        assert request.resource is not None and request.name is not None
        key = (request.resource, request.namespace, request.name)
        if key not in self.objects or self.objects[key].deleted:
            raise kmock.KubernetesObjectNotFoundError()
        current = copy.deepcopy(self.objects[key].raw)
        status_only = request.subresource == "status"

        if isinstance(data, list):  # JSON patch (application/json-patch+json)
            try:
                patched = jsonpatch.apply_patch(current, data, in_place=False)
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
                raise kmock.KubernetesError(status=422, reason="Invalid", message=f"the patch failed: {exc}")
        elif isinstance(data, Mapping):  # merge patch
            patched = _merge_patch(current, data)
        else:
            raise kmock.KubernetesError(status=415, reason="UnsupportedMediaType",
                                        message="the emulator takes JSON and merge patches only")

        # The status subresource changes only status; the object itself never changes status.
        if status_only:
            final = {**current, "status": patched.get("status")}
        else:
            final = {**patched, "status": current.get("status")}
            if final["status"] is None:
                final.pop("status")
        meta = final.setdefault("metadata", {})
        meta["resourceVersion"] = version
        if not status_only and patched.get("spec") != current.get("spec"):
            meta["generation"] = int(current.get("metadata", {}).get("generation") or 1) + 1
        # kmock merges the request data into the stored object: send the merge patch that turns
        # the stored object into exactly the new one.
        return _with_data(request, _merge_diff(current, final))
