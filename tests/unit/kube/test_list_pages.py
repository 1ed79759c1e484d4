"""Paged lists (vpol.kube.dynamic.list_pages): every page once, in order, each connection given back."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from vpol.kube import dynamic

PAGES = 4


class _Answer:
    def __init__(self, body: dict[str, Any]):
        self.data = json.dumps(body).encode()
        self.released = False

    def release_conn(self) -> None:
        self.released = True


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A fake API server serving PAGES pages of two ConfigMaps each; it records the ``continue`` of each request
    and, per request, how many pages the caller had finished by then (the next page is asked for only when
    the caller is done with the one before)."""
    state: dict[str, Any] = {"asked": [], "done": 0, "lock": threading.Lock(), "answers": []}

    def call(_api: Any, path: str, query: list[tuple[str, Any]], *, timeout: float | None = None) -> _Answer:
        params = dict(query)
        assert path == "/api/v1/namespaces/ns/configmaps" and params["limit"] == 2
        index = int(params.get("continue", "0"))
        with state["lock"]:
            state["asked"].append((index, state["done"]))
        more = {"continue": str(index + 1)} if index + 1 < PAGES else {}
        answer = _Answer({"kind": "ConfigMapList", "apiVersion": "v1",
                          "metadata": {"resourceVersion": f"rv{index}", **more},
                          "items": [{"metadata": {"name": f"cm-{index}-{i}"}} for i in range(2)]})
        state["answers"].append(answer)
        return answer

    monkeypatch.setattr(dynamic, "_call", call)
    return state


def _read(server: dict[str, Any]) -> list[str]:
    names = []
    api: Any = None  # the fake _call does not use it
    for items, rv in dynamic.list_pages(api, "", "v1", "configmaps", namespace="ns", page_size=2):
        assert rv == f"rv{int(items[0]['metadata']['name'].split('-')[1])}"
        assert all(i["kind"] == "ConfigMap" and i["apiVersion"] == "v1" for i in items)
        names += [i["metadata"]["name"] for i in items]
        with server["lock"]:
            server["done"] += 1
    return names


def test_every_page_is_read_once_in_order(server: dict[str, Any]) -> None:
    assert _read(server) == [f"cm-{p}-{i}" for p in range(PAGES) for i in range(2)]
    assert server["asked"] == [(index, index) for index in range(PAGES)]
    assert all(a.released for a in server["answers"])
