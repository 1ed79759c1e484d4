"""The controller's loaders fed watch events directly (no cluster): relists drop what vanished, the limits stop an
entry with a clear error, API call answers and failures become what policies read."""

from __future__ import annotations

from typing import Any

import pytest

from vpol.cel.global_context import FAILED, READY, GlobalContextError
from vpol.controller import global_context as controller
from vpol.controller.global_context import GlobalContextOptions, _ApiCallLoader, _ResourceLoader
from vpol.engine.global_context import GlobalContextStore
from vpol.kube.dynamic import StopWatching
from vpol.kube.global_context import CallFailed
from vpol.model.global_context import parse_global_context_entry


def entry(spec: dict[str, Any]) -> Any:
    parsed, problems = parse_global_context_entry({"apiVersion": "kyverno.io/v2", "kind": "GlobalContextEntry",
                                                   "metadata": {"name": "e"}, "spec": spec})
    assert parsed is not None, problems
    return parsed


RESOURCE = {"kubernetesResource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "projections": [{"name": "names", "jmesPath": "[].metadata.name"}]}


def deploy(name: str, pad: int = 0) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "d"},
            "spec": {"note": "x" * pad}}


def loader(options: GlobalContextOptions = GlobalContextOptions()) -> tuple[_ResourceLoader, GlobalContextStore,
                                                                             list[str]]:
    store = GlobalContextStore()
    changed: list[str] = []
    ld = _ResourceLoader(entry(RESOURCE), api=None, store=store, options=options,  # type: ignore[arg-type]
                         changed=changed.append)
    ld.prepare()
    return ld, store, changed


def test_list_watch_and_relist() -> None:
    ld, store, changed = loader()
    ld._on_list()
    for name in ("a", "b"):
        ld._on_event("ADDED", deploy(name))
    ld._on_event("SYNCED", {})
    assert store.view().get("e", "names") == ["a", "b"]
    assert ld.ready is True and ld.last_refresh and changed == ["e"]
    ld._on_event("DELETED", deploy("a"))
    ld._on_event("ADDED", deploy("c"))
    assert store.view().get("e", "names") == ["b", "c"]
    # a relist after a broken watch: what it no longer lists is dropped
    ld._on_list()
    ld._on_event("ADDED", deploy("c"))
    ld._on_event("SYNCED", {})
    assert store.view().get("e", "names") == ["c"]


@pytest.mark.parametrize("options,message", [
    (GlobalContextOptions(max_objects=2), "more than 2 objects (the limit of --global-context-max-objects)"),
    (GlobalContextOptions(max_bytes=500), "more than 500 bytes of objects as JSON (the limit of "
                                          "--global-context-max-bytes)"),
])
def test_limits_stop_the_entry_with_a_clear_error(options: GlobalContextOptions, message: str) -> None:
    ld, store, _changed = loader(GlobalContextOptions(max_objects=options.max_objects, max_bytes=options.max_bytes,
                                                      retry_after=3600))
    ld._on_list()
    with pytest.raises(StopWatching):
        for name in ("a", "b", "c"):
            ld._on_event("ADDED", deploy(name, pad=200))
    try:
        state = store.state("e")
        assert state is not None and state.status == FAILED and message in state.error
        assert store.object_count("e") == 0  # nothing of it is held
        assert ld.ready is False and message in ld.message
        with pytest.raises(GlobalContextError, match="would hold more than"):
            store.view().get("e", "names")
    finally:
        ld.stop()


def test_a_stopped_loader_writes_nothing_more() -> None:
    ld, store, _changed = loader()
    ld.stop()
    with pytest.raises(StopWatching):
        ld._on_event("ADDED", deploy("late"))
    assert store.object_count("e") == 0


def test_api_call_answers_failures_and_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    answers: list[Any] = [CallFailed("failed to GET resource with raw url: /x: boom"),
                          b'{"items": [{"n": 1}], "count": 2}']
    calls: list[str] = []

    def fake_call(api: Any, name: str, spec: Any, *, max_bytes: int, timeout: float) -> bytes:
        calls.append(name)
        answer = answers.pop(0) if answers else CallFailed("HTTP 500 Internal Server Error: down")
        if isinstance(answer, Exception):
            raise answer
        return bytes(answer)

    monkeypatch.setattr(controller, "call", fake_call)
    store = GlobalContextStore()
    ld = _ApiCallLoader(entry({"apiCall": {"urlPath": "/x", "retryLimit": 2},
                               "projections": [{"name": "first", "jmesPath": "items[0].n"}]}),
                        api=None, store=store, options=GlobalContextOptions(), changed=lambda _n: None)  # type: ignore[arg-type]
    state, ok = ld._refresh()  # the first attempt fails, the retry answers
    assert ok and state.status == READY and len(calls) == 2
    store.set_state(state)
    view = store.view()
    assert view.get("e", "first") == 1.0 and isinstance(view.get("e", "")["count"], float)
    state, ok = ld._refresh()  # both attempts fail: the last failure is what policies read
    assert not ok and state.status == FAILED and state.error == "HTTP 500 Internal Server Error: down"
    store.set_state(state)
    with pytest.raises(GlobalContextError, match="^HTTP 500 Internal Server Error: down$"):
        store.view().get("e", "first")
