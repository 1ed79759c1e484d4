"""What ``globalContext.Get(name, projection)`` answers in a cluster: GlobalContextEntry data, as Kyverno serves it.

The operator loads each entry (vpol.controller.global_context) and hands its data to the processes that
evaluate policies as :class:`EntryChange` records; a :class:`GlobalContextView` applies them and answers the
library's calls. Both are plain data and pure functions (no I/O), so the same view serves the webhook's and
the scanner's worker processes and ``vpol apply``'s entries read from files.

What a call answers (Kyverno's ``contextProvider.GetGlobalReference`` and its two kinds of store entries,
pkg/globalcontext/{k8sresource,externalapi} in Kyverno 1.19):

* no entry of that name: **null** (not an error);
* a **kubernetesResource** entry: projection ``""`` gives the list of every object; a named projection gives
  its JMESPath result over that list, computed when the objects change (an expression that fails to
  evaluate keeps its last good value); a name that is not one of its projections (or never computed) is
  the error ``projection "NAME" not found``;
* an **apiCall** entry: the last failed refresh's error while its last call failed; else projection ``""``
  gives the decoded answer and a named projection its result, and a missing or null value is the error
  ``no data available``.

Beyond Kyverno (which keeps an entry out of its store until it has loaded, so a policy then reads null): an
entry vpol knows but could not load, or has not loaded yet, is an error that says why (the issue asks for
an error with the reason, never a silent null).

Objects are listed sorted by namespace and name (Kyverno's informer lists them in no set order).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from vpol.cel import go_jmespath
from vpol.cel.declare import Checked, guard_result
from vpol.cel.libraries.kubernetes.goquote import go_quote

RESOURCE = "kubernetesResource"
API_CALL = "apiCall"

READY = "ready"
LOADING = "loading"
FAILED = "failed"


class GlobalContextError(LookupError):
    """What a ``globalContext.Get`` call fails with (the library prefixes ``failed to get global reference``)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "global context error"


@dataclass(frozen=True)
class EntryState:
    """One entry's kind, whether it serves data, and what is not per object."""

    name: str
    kind: str
    status: str = LOADING
    #: Why the entry serves nothing (status FAILED), or what it waits for (LOADING).
    error: str = ""
    #: A resource entry's projections: (name, JMESPath), computed over its objects when read.
    projections: tuple[tuple[str, str], ...] = ()
    #: An apiCall entry: the decoded answer, and its projections' results (computed when it was fetched).
    data: Any = None
    projected: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EntryChange:
    """How one entry changed: its new state (None: the entry is gone) and, for a resource entry, its objects."""

    state: EntryState | None
    #: The objects below replace every object held (else they are merged in).
    reset: bool = False
    #: Objects added or changed, by key (``namespace/name``).
    objects: Mapping[str, Any] = field(default_factory=dict)
    #: Keys of objects removed.
    removed: tuple[str, ...] = ()


def object_key(obj: Mapping[str, Any]) -> str:
    md = obj.get("metadata") or {}
    namespace, name = str(md.get("namespace") or ""), str(md.get("name") or "")
    return f"{namespace}/{name}"


class _Held:
    __slots__ = ("state", "objects", "unchecked", "listed", "projected", "stale", "data", "answers", "checked")

    def __init__(self, state: EntryState) -> None:
        self.state = state
        #: A resource entry's objects, by key, as CEL values (vpol.cel.declare.guard_result, once, on arrival).
        self.objects: dict[str, Any] = {}
        #: Keys of objects CEL cannot take as they are (an integer beyond 64 bits...): checked on each read.
        self.unchecked: set[str] = set()
        self.listed: list[Any] | None = None
        #: Last good result of each projection (kept when a later evaluation fails, as Kyverno keeps it).
        self.projected: dict[str, Any] = {}
        self.stale = True
        #: An apiCall entry's answer and projections, as CEL values when ``checked``.
        self.data: Any = None
        self.answers: Mapping[str, Any] = {}
        self.checked = True


def _as_cel(value: Any) -> tuple[Any, bool]:
    """(``value`` made of CEL values, True), or (``value`` as it is, False) when CEL cannot take it."""
    try:
        return guard_result(value), True
    except ValueError:
        return value, False


class GlobalContextView:
    """Every entry's data as changes delivered it; answers ``globalContext.Get`` (see the module docstring).

    Data is made of CEL values once, when it arrives (and a list of every object once per change), so a
    policy reading an entry pays for its conversion into CEL, not for a Python copy of it: the library gets
    it wrapped in :class:`vpol.cel.declare.Checked` (:meth:`get_checked`)."""

    def __init__(self) -> None:
        self._entries: dict[str, _Held] = {}

    def names(self) -> list[str]:
        return sorted(self._entries)

    def apply(self, changes: Mapping[str, EntryChange]) -> None:
        for name, change in changes.items():
            if change.state is None:
                self._entries.pop(name, None)
                continue
            held = self._entries.get(name)
            if held is None or held.state.kind != change.state.kind:
                held = self._entries[name] = _Held(change.state)
            if held.state.projections != change.state.projections:
                held.projected = {}
            if change.state.kind == API_CALL and (held.state is not change.state or held.data is None):
                held.data, data_ok = _as_cel(change.state.data)
                held.answers, answers_ok = _as_cel(dict(change.state.projected))
                held.checked = data_ok and answers_ok
            held.state = change.state
            if change.reset:
                held.objects, held.unchecked = {}, set()
            for key, obj in change.objects.items():
                held.objects[key], ok = _as_cel(obj)
                (held.unchecked.discard if ok else held.unchecked.add)(key)
            for key in change.removed:
                held.objects.pop(key, None)
                held.unchecked.discard(key)
            if change.reset or change.objects or change.removed:
                held.listed = None
                held.stale = True

    def get(self, name: str, projection: str) -> Any:
        return self._value(name, projection)[0]

    def get_checked(self, name: str, projection: str) -> Any:
        """What :meth:`get` answers, wrapped in :class:`Checked` when it is made of CEL values already."""
        value, checked = self._value(name, projection)
        return Checked(value) if checked else value

    def _value(self, name: str, projection: str) -> tuple[Any, bool]:
        held = self._entries.get(name)
        if held is None:
            return None, False
        state = held.state
        if state.status == LOADING:
            raise GlobalContextError(f"no data available: global context entry {go_quote(name)} is not loaded yet"
                                     + (f" ({state.error})" if state.error else ""))
        if state.status == FAILED:
            raise GlobalContextError(state.error or f"global context entry {go_quote(name)} could not be loaded")
        if state.kind == API_CALL:
            value = held.data if projection == "" else held.answers.get(projection)
            if value is None:
                raise GlobalContextError("no data available")
            return value, held.checked
        checked = not held.unchecked
        if projection == "":
            return self._listed(held), checked
        if projection not in dict(state.projections):
            raise GlobalContextError(f"projection {go_quote(projection)} not found")
        self._project(held)
        if projection not in held.projected:
            raise GlobalContextError(f"projection {go_quote(projection)} not found")
        # JMESPath results are made of the (checked) objects' parts and of JSON values.
        return held.projected[projection], checked

    @staticmethod
    def _listed(held: _Held) -> list[Any]:
        if held.listed is None:
            held.listed = [held.objects[k] for k in sorted(held.objects)]
        return held.listed

    def _project(self, held: _Held) -> None:
        if not held.stale:
            return
        listed = self._listed(held)
        for pname, expression in held.state.projections:
            try:
                held.projected[pname] = go_jmespath.search(expression, listed)
            except Exception:  # noqa: BLE001 - Kyverno keeps the last good result (and emits an event)
                continue
        held.stale = False


def api_call_state(name: str, data: Any, projections: Iterable[tuple[str, str]]) -> EntryState:
    """The state of an apiCall entry whose call answered ``data`` (decoded as Go decodes JSON): its projections
    computed once; a projection that fails makes the entry answer that error (as Kyverno's does)."""
    projected: dict[str, Any] = {}
    for pname, expression in projections:
        try:
            projected[pname] = go_jmespath.search(expression, data)
        except Exception as exc:  # noqa: BLE001 - the entry reports it
            return EntryState(name, API_CALL, FAILED, error=str(exc))  # Kyverno's entry answers the bare error
    return EntryState(name, API_CALL, READY, data=data, projected=projected)
