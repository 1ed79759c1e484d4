"""Paged lists (vpol.kube.dynamic.list_pages): every page once, in order, each connection given back; with
prefetch, the next page is already asked for while the caller works on the one it was given (how a restart
reads its reports back). Lists read one item at a time (list_items, how a restart reads reports back from
reports-server): the same items, pages and expired tokens."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from vpol.kube import dynamic
from vpol.kube.reports import Reports

PAGES = 4


class _Answer:
    """What vpol.kube.dynamic._call returns: urllib3's response, its body whole (``data``) or in pieces."""

    def __init__(self, body: dict[str, Any]):
        self.data = json.dumps(body).encode()
        self.released = False
        self.closed = False
        self.streamed = False

    def stream(self, amt: int) -> Iterator[bytes]:
        self.streamed = True
        for at in range(0, len(self.data), 7):  # small pieces: items are parsed across them
            yield self.data[at:at + 7]

    def release_conn(self) -> None:
        self.released = True

    def close(self) -> None:
        self.closed = True


class _Server:
    """A fake API server serving PAGES pages of two objects each. It records the ``continue`` of each request
    and, per request, how many pages the caller had finished by then."""

    def __init__(self, path: str, kind: str, api_version: str):
        self.path, self.kind, self.api_version = path, kind, api_version
        self.asked: list[tuple[int, int]] = []
        self.done = 0
        self.lock = threading.Lock()
        self.answers: list[_Answer] = []

    def call(self, _api: Any, path: str, query: list[tuple[str, Any]], *, timeout: float | None = None) -> _Answer:
        params = dict(query)
        assert path == self.path and params["limit"] in (2, 100)
        index = int(params.get("continue", "0"))
        with self.lock:
            self.asked.append((index, self.done))
        more = {"continue": str(index + 1)} if index + 1 < PAGES else {}
        answer = _Answer({"kind": f"{self.kind}List", "apiVersion": self.api_version,
                          "metadata": {"resourceVersion": f"rv{index}", **more},
                          "items": [{"metadata": {"name": f"o-{index}-{i}"}} for i in range(2)]})
        self.answers.append(answer)
        return answer

    def finished_one(self) -> None:
        with self.lock:
            self.done += 1

    def wait_for_request(self, index: int) -> None:
        """The caller works on a page until page ``index`` has been asked for (or the last page was, or 2 s)."""
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            with self.lock:
                if index >= PAGES or any(i == index for i, _done in self.asked):
                    return
            time.sleep(0.01)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> _Server:
    s = _Server("/api/v1/namespaces/ns/configmaps", "ConfigMap", "v1")
    monkeypatch.setattr(dynamic, "_call", s.call)
    return s


def _pages(prefetch: bool) -> Iterator[tuple[list[dict[str, Any]], str]]:
    api: Any = None  # the fake _call does not use it
    return dynamic.list_pages(api, "", "v1", "configmaps", namespace="ns", page_size=2, prefetch=prefetch)


def _read(server: _Server, prefetch: bool, on_page: Callable[[int], None] | None = None) -> list[str]:
    names: list[str] = []
    for number, (items, rv) in enumerate(_pages(prefetch)):
        if on_page is not None:
            on_page(number)
        assert rv == f"rv{number}"
        assert all(i["kind"] == "ConfigMap" and i["apiVersion"] == "v1" for i in items)
        names += [i["metadata"]["name"] for i in items]
        server.finished_one()
    return names


@pytest.mark.parametrize("prefetch", [False, True])
def test_every_page_is_read_once_in_order(server: _Server, prefetch: bool) -> None:
    assert _read(server, prefetch) == [f"o-{p}-{i}" for p in range(PAGES) for i in range(2)]
    assert [index for index, _done in server.asked] == list(range(PAGES))
    assert all(a.released for a in server.answers)


def test_without_prefetch_a_page_is_asked_for_once_the_caller_is_done_with_the_one_before(server: _Server) -> None:
    _read(server, False)
    assert server.asked == [(index, index) for index in range(PAGES)]


def test_with_prefetch_the_next_page_is_asked_for_while_the_caller_works_on_this_one(server: _Server) -> None:
    _read(server, True, lambda number: server.wait_for_request(number + 1))
    # Page n+1 was asked for while the caller was still working on page n (n pages finished), not after it.
    assert server.asked == [(0, 0)] + [(index, index - 1) for index in range(1, PAGES)]


def test_a_caller_that_stops_early_leaves_no_request_running(server: _Server) -> None:
    pages = _pages(True)
    next(pages)
    pages.close()
    assert [index for index, _done in server.asked] == [0, 1]
    assert not [t for t in threading.enumerate() if t.name.startswith("vpol-list-prefetch")]


def test_an_error_on_a_prefetched_page_reaches_the_caller(server: _Server, monkeypatch: pytest.MonkeyPatch) -> None:
    from kubernetes.client.rest import ApiException

    def expired(api: Any, path: str, query: list[tuple[str, Any]], *, timeout: float | None = None) -> _Answer:
        if dict(query).get("continue") == "2":
            raise ApiException(status=410, reason="Expired")
        return server.call(api, path, query, timeout=timeout)

    monkeypatch.setattr(dynamic, "_call", expired)
    with pytest.raises(ApiException) as gone:
        _read(server, True)
    assert gone.value.status == 410 and server.done == 2


def _expiring(server: _Server, offered: str) -> Callable[..., _Answer]:
    """The server, but the token of page 2 has expired (as after etcd's compaction): 410 Gone with the Status an API
    server sends, offering ``offered`` for the rest of the list ("" offers none)."""
    from kubernetes.client.rest import ApiException

    def call(api: Any, path: str, query: list[tuple[str, Any]], *, timeout: float | None = None) -> _Answer:
        token = dict(query).get("continue")
        if token == "2":
            exc = ApiException(status=410, reason="Expired")
            exc.body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Expired",
                                   "code": 410, "metadata": {"continue": offered} if offered else {},
                                   "message": "The provided continue parameter is too old to display a consistent "
                                              "list result."})
            raise exc
        if token == "2-newest":
            query = [(k, "2" if k == "continue" else v) for k, v in query]
        return server.call(api, path, query, timeout=timeout)
    return call


@pytest.mark.parametrize("prefetch", [False, True])
def test_a_list_outliving_its_continue_token_goes_on_at_the_newest_version(
        server: _Server, monkeypatch: pytest.MonkeyPatch, prefetch: bool) -> None:
    """A scan of 100,000 Pods reads its list for longer than etcd's compaction interval: the rest of the list is
    read with the token the API server offers, every object once."""
    monkeypatch.setattr(dynamic, "_call", _expiring(server, "2-newest"))
    names = [i["metadata"]["name"] for items, _rv in _pages(prefetch) for i in items]
    assert names == [f"o-{p}-{i}" for p in range(PAGES) for i in range(2)]


def test_a_consistent_list_raises_the_expired_token_and_so_does_one_offered_nothing(
        server: _Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """A list whose resourceVersion starts a watch (vpol.kube.dynamic.Watcher) must be consistent: it starts over."""
    from kubernetes.client.rest import ApiException

    monkeypatch.setattr(dynamic, "_call", _expiring(server, "2-newest"))
    api: Any = None
    with pytest.raises(ApiException) as gone:
        list(dynamic.list_pages(api, "", "v1", "configmaps", namespace="ns", page_size=2, consistent=True))
    assert gone.value.status == 410
    monkeypatch.setattr(dynamic, "_call", _expiring(server, ""))
    with pytest.raises(ApiException):
        list(_pages(False))


def test_reports_are_read_back_with_the_next_page_in_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    import vpol.kube.reports as reports_module

    monkeypatch.setattr(reports_module, "get_object", lambda *a: {"spec": {"group": "wgpolicyk8s.io"}})  # local
    server = _Server("/apis/wgpolicyk8s.io/v1alpha2/policyreports", "PolicyReport", "wgpolicyk8s.io/v1alpha2")
    cluster_reports = _Server("/apis/wgpolicyk8s.io/v1alpha2/clusterpolicyreports", "ClusterPolicyReport",
                              "wgpolicyk8s.io/v1alpha2")
    monkeypatch.setattr(dynamic, "_call", lambda api, path, query, **kw: (
        server if "/policyreports" in path else cluster_reports).call(api, path, query, **kw))
    api: Any = None
    seen = 0
    for report in Reports(api).existing("app.kubernetes.io/managed-by=vpol"):
        if report["kind"] == "PolicyReport":
            seen += 1
            if seen % 2 == 0:  # the last object of a page: the caller is done with it
                server.wait_for_request(seen // 2)
                server.finished_one()
    assert seen == 2 * PAGES
    assert server.asked == [(0, 0)] + [(index, index - 1) for index in range(1, PAGES)]


def test_reports_served_by_another_api_server_are_read_back_namespace_by_namespace(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Kyverno's reports-server answers a list whole, whatever its limit: with its APIService in place the
    PolicyReports are read one namespace at a time (ClusterPolicyReports as before), each answer one report at a
    time as its bytes arrive."""
    import vpol.kube.reports as reports_module

    asked: list[str] = []
    report_answers: list[_Answer] = []

    def call(_api: Any, path: str, query: list[tuple[str, Any]], *, timeout: float | None = None) -> _Answer:
        asked.append(path)
        if path == "/api/v1/namespaces":
            items = [{"metadata": {"name": n}} for n in ("a", "b")]
            return _Answer({"kind": "NamespaceList", "apiVersion": "v1", "metadata": {}, "items": items})
        namespace = path.split("/namespaces/")[1].split("/")[0] if "/namespaces/" in path else ""
        kind = "PolicyReport" if "/policyreports" in path else "ClusterPolicyReport"
        items = [{"metadata": {"name": f"{kind}-{namespace}-{i}", "namespace": namespace}} for i in range(3)]
        report_answers.append(_Answer({"kind": f"{kind}List", "apiVersion": "wgpolicyk8s.io/v1alpha2",
                                       "metadata": {"resourceVersion": "1"}, "items": items}))
        return report_answers[-1]

    monkeypatch.setattr(dynamic, "_call", call)
    apiservice = {"spec": {"group": "wgpolicyk8s.io", "service": {"name": "reports-server",
                                                                   "namespace": "reports-server"}}}
    monkeypatch.setattr(reports_module, "get_object", lambda *a: apiservice)
    api: Any = None
    names = [r["metadata"]["name"] for r in Reports(api).existing("app.kubernetes.io/managed-by=vpol")]
    assert names == [*(f"PolicyReport-{ns}-{i}" for ns in ("a", "b") for i in range(3)),
                     *(f"ClusterPolicyReport--{i}" for i in range(3))]
    assert asked == ["/api/v1/namespaces", "/apis/wgpolicyk8s.io/v1alpha2/namespaces/a/policyreports",
                     "/apis/wgpolicyk8s.io/v1alpha2/namespaces/b/policyreports",
                     "/apis/wgpolicyk8s.io/v1alpha2/clusterpolicyreports"]
    assert len(report_answers) == 3 and all(a.streamed and a.released for a in report_answers)


@pytest.mark.parametrize("answer", [None, {"spec": {"group": "wgpolicyk8s.io", "groupPriorityMinimum": 1000}}, 403])
def test_reports_are_served_by_the_api_server_itself_unless_the_apiservice_names_a_service(
        monkeypatch: pytest.MonkeyPatch, answer: Any) -> None:
    """No such APIService, a local one (the CRDs), or no permission to read it: one paged list, as always."""
    from kubernetes.client.rest import ApiException

    import vpol.kube.reports as reports_module

    def get(*_args: Any) -> Any:
        if answer == 403:
            raise ApiException(status=403, reason="Forbidden")
        return answer

    monkeypatch.setattr(reports_module, "get_object", get)
    api: Any = None
    assert Reports(api).aggregated() is False


def _items(**kw: Any) -> Iterator[dict[str, Any]]:
    api: Any = None  # the fake _call does not use it
    return dynamic.list_items(api, "", "v1", "configmaps", namespace="ns", page_size=2, **kw)


def test_a_list_read_one_item_at_a_time_reads_every_page_once_in_order(server: _Server) -> None:
    items = list(_items())
    assert [i["metadata"]["name"] for i in items] == [f"o-{p}-{i}" for p in range(PAGES) for i in range(2)]
    assert all(i["kind"] == "ConfigMap" and i["apiVersion"] == "v1" for i in items)
    assert [index for index, _done in server.asked] == list(range(PAGES))
    assert all(a.released and not a.closed for a in server.answers)


def test_a_list_whose_items_come_before_its_continue_token_is_read_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """The API server writes a list of custom resources with its keys in order: items, kind, metadata."""
    def call(_api: Any, path: str, query: list[tuple[str, Any]], *, timeout: float | None = None) -> _Answer:
        index = int(dict(query).get("continue", "0"))
        more = {"continue": str(index + 1)} if index + 1 < PAGES else {}
        items = [{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": f"w-{index}-{i}"}}
                 for i in range(2)]
        return _Answer({"apiVersion": "example.com/v1", "items": items, "kind": "WidgetList",
                        "metadata": {"resourceVersion": "9", **more}})

    monkeypatch.setattr(dynamic, "_call", call)
    api: Any = None
    items = list(dynamic.list_items(api, "example.com", "v1", "widgets", page_size=2))
    assert [i["metadata"]["name"] for i in items] == [f"w-{p}-{i}" for p in range(PAGES) for i in range(2)]
    assert {(i["apiVersion"], i["kind"]) for i in items} == {("example.com/v1", "Widget")}


def test_a_list_read_one_item_at_a_time_and_left_early_closes_its_connection(server: _Server) -> None:
    items = _items()
    next(items)
    items.close()
    assert len(server.answers) == 1 and server.answers[0].closed and not server.answers[0].released


def test_a_list_read_one_item_at_a_time_goes_on_past_an_expired_token(
        server: _Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dynamic, "_call", _expiring(server, "2-newest"))
    assert [i["metadata"]["name"] for i in _items()] == [f"o-{p}-{i}" for p in range(PAGES) for i in range(2)]
    monkeypatch.setattr(dynamic, "_call", _expiring(server, ""))
    from kubernetes.client.rest import ApiException
    with pytest.raises(ApiException):
        list(_items())
