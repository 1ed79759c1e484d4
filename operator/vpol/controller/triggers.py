"""Watch events as the admission requests they stand for (the triggers of mutateExisting and of generation).

vpol sees triggers through the scanner's watches rather than through admission requests (one replica does all the
work, dry runs never trigger, and a watch started from a policy's resourceVersion replays what happened while no
replica was watching): ADDED is a CREATE, MODIFIED an UPDATE, DELETED a DELETE. The trigger's ``request`` has no
userInfo and no oldObject."""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, TypeVar

from kubernetes import client

from vpol.engine.request import ResourceType, Subject
from vpol.engine.scope import trigger_resources
from vpol.engine.subjects import subject_for
from vpol.kube.dynamic import get_object
from vpol.policies.generating.model import GeneratingPolicy
from vpol.policies.mutating.model import MutatingPolicy

OPERATIONS = {"ADDED": "CREATE", "MODIFIED": "UPDATE", "DELETED": "DELETE"}
#: Objects remembered as deleted when their deletionTimestamp appeared (their removal is then no new trigger).
DELETING_KEPT = 100_000
#: Metadata the API server adds when it accepts a delete that waits (finalizers, a grace period).
DELETION_FIELDS = ("deletionTimestamp", "deletionGracePeriodSeconds")
#: Writes remembered as a path's own (skipBackgroundRequests, generation's echoes): the watch reports them within
#: seconds.
OWN_WRITES_KEPT = 100_000

P = TypeVar("P", MutatingPolicy, GeneratingPolicy)


class Operations:
    """The admission operation each watch event stands for (one instance per consumer of the events)."""

    def __init__(self) -> None:
        #: uids of the objects whose DELETE came with their deletionTimestamp.
        self._deleting: collections.OrderedDict[str, None] = collections.OrderedDict()

    def of(self, etype: str, obj: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
        """The operation of a watch event, and the trigger object (None: no trigger).

        A delete the API server accepts but does not carry out at once (finalizers, a Pod's grace period) shows
        as a change that sets ``deletionTimestamp``; the admission request Kyverno's webhook sees is the DELETE,
        then, with the object as it was (no deletion fields), and the later removal is no request of its own. A
        removal whose deletionTimestamp was not seen (a restart in between) is still the DELETE."""
        operation = OPERATIONS.get(etype)
        md = obj.get("metadata") or {}
        uid = str(md.get("uid", ""))
        if operation == "UPDATE" and md.get("deletionTimestamp") and uid and uid not in self._deleting:
            self._deleting[uid] = None
            while len(self._deleting) > DELETING_KEPT:
                self._deleting.popitem(last=False)
            before = {k: v for k, v in md.items() if k not in DELETION_FIELDS}
            return "DELETE", {**obj, "metadata": before}
        if operation == "DELETE" and uid in self._deleting:
            del self._deleting[uid]
            return None, obj
        return operation, obj


def trigger_subject(obj: dict[str, Any], operation: str, resolve: Callable[[str, str], ResourceType | None],
                    namespaces: dict[str, dict[str, Any]], *, api: client.ApiClient | None = None) -> Subject | None:
    """The trigger subject of a watch event: ``object`` the object (the deleted one for DELETE), ``request`` as an
    admission request of that operation would have it (no userInfo, no oldObject). None for an object of a kind
    nobody can place.

    ``namespaces`` is the scanner's cache, filled by its watch of the Namespaces; an object of a Namespace created
    just before it may come before that Namespace's event, and would be matched without its labels (a
    namespaceSelector on them would pass it over, until the next full scan): with ``api``, such a Namespace is read
    and cached."""
    md = obj.get("metadata")
    namespace = md.get("namespace") if isinstance(md, dict) else None
    if api is not None and isinstance(namespace, str) and namespace and namespace not in namespaces:
        try:
            found = get_object(api, "", "v1", "namespaces", "", namespace)
        except Exception:  # noqa: BLE001 - matched without its labels, as before; the next full scan sees them
            found = None
        if found is not None:
            namespaces.setdefault(namespace, found)
    try:
        subject = subject_for(obj, operation=operation, resolve=resolve, namespaces=namespaces, default_namespace="")
    except Exception:  # noqa: BLE001 - an object of a kind we cannot place is no trigger
        return None
    request = subject.admission_request()
    if operation == "DELETE":
        subject = Subject(type=subject.type, object=obj, old_object=obj, operation=operation,
                          namespace_object=subject.namespace_object)
    return Subject(type=subject.type, object=subject.object, old_object=subject.old_object, operation=operation,
                   namespace_object=subject.namespace_object, request=request)


def watch_start(seen: Iterable[str]) -> str:
    """Where a new watch starts so that no trigger of the policies reading it is missed: the oldest of the
    resourceVersions they were first seen at ("" (start from now) when there is none, or one is not a number:
    resourceVersions are opaque, only etcd's are ordered integers, and this is the only place vpol compares
    them)."""
    versions = []
    for version in seen:
        if not version.isdigit():
            return ""
        versions.append(int(version))
    return str(min(versions)) if versions else ""


class TriggeredPolicies(Generic[P]):
    """The policies of a path that acts on triggers (MutatingPolicies that mutate existing objects,
    GeneratingPolicies), the resourceVersion each was seen at, and the writes the path made itself (their watch
    events are no triggers). Thread-safe.

    ``restart_on_change``: a changed spec is seen anew (its triggers' watch replays from the change; the mutation
    of existing objects), or keeps the version it was first seen at (generation: what was owed since then is
    still owed)."""

    def __init__(self, *, restart_on_change: bool) -> None:
        self._restart = restart_on_change
        self._lock = threading.Lock()
        self._policies: dict[str, P] = {}
        self._seen_at: dict[str, str] = {}
        #: uid -> resourceVersion of the objects the path wrote last; the oldest are forgotten beyond
        #: OWN_WRITES_KEPT.
        self._own: collections.OrderedDict[str, str] = collections.OrderedDict()

    def set(self, key: str, policy: P | None) -> P | bool | None:
        """Hold ``policy`` under ``key`` (None: no more). Returns, for None, the policy that was held (None when
        none was); else True when its spec or annotations changed (what evaluation depends on), False when not."""
        with self._lock:
            old = self._policies.get(key)
            if policy is None:
                self._seen_at.pop(key, None)
                return self._policies.pop(key, None)
            if old is not None and old.spec == policy.spec and old.annotations == policy.annotations:
                return False
            self._policies[key] = policy
            version = str((policy.raw.get("metadata") or {}).get("resourceVersion") or "")
            if self._restart:
                self._seen_at[key] = version
            else:
                self._seen_at.setdefault(key, version)
            return True

    def policies(self) -> list[P]:
        with self._lock:
            return sorted(self._policies.values(), key=lambda p: p.key)

    def get(self, key: str) -> P | None:
        with self._lock:
            return self._policies.get(key)

    def trigger_since(self, gvr: tuple[str, str, str], discovery: Any) -> str:
        """Where a new watch of ``gvr`` starts (:func:`watch_start`): a policy is Ready before the scanner watches
        its triggers, and the watch replays what changed since it was seen."""
        with self._lock:
            seen = dict(self._seen_at)
        return watch_start(seen.get(p.key, "") for p in self.policies()
                           if any((i.group, i.version, i.resource) == gvr for i in trigger_resources(p, discovery)))

    def remember(self, written: Mapping[str, Any]) -> None:
        """An object the path wrote (its uid and the resourceVersion written; a deletion's marker)."""
        md = written.get("metadata") or {}
        uid = str(md.get("uid", ""))
        with self._lock:
            self._own[uid] = str(md.get("resourceVersion", ""))
            self._own.move_to_end(uid)
            while len(self._own) > OWN_WRITES_KEPT:
                self._own.popitem(last=False)

    def own(self, uid: str) -> str:
        """The resourceVersion of the path's last write of ``uid`` ("" when it wrote none lately)."""
        with self._lock:
            return self._own.get(uid, "")
