"""Listing and watching arbitrary resources by group/version/resource (paged lists, resumable watches)."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException

from vpol.kube.list_answer import ListReader

logger = logging.getLogger(__name__)

PAGE_SIZE = 500


def collection_path(group: str, version: str, resource: str, namespace: str = "") -> str:
    base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
    if namespace:
        return f"{base}/namespaces/{namespace}/{resource}"
    return f"{base}/{resource}"


def _call(api: client.ApiClient, path: str, query: list[tuple[str, Any]], *, timeout: float | None = None) -> Any:
    """A raw GET; returns the urllib3 response (not preloaded, so watches stream)."""
    method, url, headers, _body, _post = api.param_serialize(
        method="GET", resource_path=path, query_params=query, header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"])
    resp = api.call_api(method, url, header_params=headers, _request_timeout=timeout)
    if not 200 <= int(resp.status) < 300:
        raise api_error(int(resp.status), resp.read()[:4096])
    return resp.response


def api_error(status: int, answer: bytes) -> ApiException:
    """The error for a refused request; its body is the API server's Status (for vpol.kube.errors.describe),
    as the generated client keeps it."""
    exc = ApiException(status=status, reason=answer[:1000].decode(errors="replace"))
    exc.body = answer.decode(errors="replace")
    return exc


def list_pages(api: client.ApiClient, group: str, version: str, resource: str, *, namespace: str = "",
               page_size: int = PAGE_SIZE, label_selector: str = "", prefetch: bool = False,
               consistent: bool = False) -> Iterator[tuple[list[dict[str, Any]], str]]:
    """Yields (items, resourceVersion) page by page (``limit``/``continue``), items with apiVersion/kind set.

    With ``prefetch`` the next page is requested (and parsed) in a thread while the caller works on this one,
    so the API server's time on a page overlaps the caller's instead of adding to it; one more page is held.
    Reading back 10,001 reports in pages of 100 at a restart: 5.0-5.2 s against 5.9-7.0 s (bench/results/scan.md).

    A list read more slowly than the API server compacts etcd (every 5 minutes by default; a scan of 100,000 Pods
    reads its list for longer than that) outlives its ``continue`` token: 410 Gone. The API server then offers a
    token for the rest of the list at its newest version, and the list goes on with it: objects changed since the
    first page may be seen as they were or as they are, which a scan does not mind (the scanner's watches report
    the changes). With ``consistent`` (a list whose resourceVersion starts a watch) the 410 is raised instead."""
    path = collection_path(group, version, resource, namespace)

    def page(cont: str) -> tuple[list[dict[str, Any]], str, str]:
        resp = _page_answer(api, path, page_size, cont, label_selector, replace_expired=not consistent)
        data = json.loads(resp.data)
        resp.release_conn()
        kind = str(data.get("kind", "")).removesuffix("List")
        api_version = data.get("apiVersion", f"{group}/{version}" if group else version)
        items = data.get("items") or []
        for item in items:
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        meta = data.get("metadata") or {}
        return items, str(meta.get("resourceVersion", "")), str(meta.get("continue") or "")

    ahead = ThreadPoolExecutor(1, thread_name_prefix="vpol-list-prefetch") if prefetch else None
    try:
        items, rv, cont = page("")
        while True:
            upcoming = ahead.submit(page, cont) if ahead is not None and cont else None
            yield items, rv
            if not cont:
                return
            items, rv, cont = upcoming.result() if upcoming is not None else page(cont)
    finally:
        # A caller that stops early waits for the page in flight (bounded by its timeout).
        if ahead is not None:
            ahead.shutdown()


def _list_query(page_size: int, cont: str, label_selector: str) -> list[tuple[str, Any]]:
    """The query of one page of a list (:func:`_page_answer`, for :func:`list_pages` and :func:`list_items`)."""
    query: list[tuple[str, Any]] = [("limit", page_size)]
    if cont:
        query.append(("continue", cont))
    if label_selector:
        query.append(("labelSelector", label_selector))
    return query


#: Expired continue tokens replaced in a row for one page before its 410 is raised.
EXPIRED_CONTINUES = 3


def _page_answer(api: client.ApiClient, path: str, page_size: int, cont: str, label_selector: str, *,
                 replace_expired: bool = True) -> Any:
    """The API server's answer to one page of a list (unread). A ``continue`` token that expired (410 Gone) is
    replaced by the one the API server offers for the rest of the list, up to EXPIRED_CONTINUES times in a row;
    then, or without ``replace_expired``, the 410 is raised."""
    replaced = 0
    while True:
        try:
            return _call(api, path, _list_query(page_size, cont, label_selector), timeout=120)
        except ApiException as exc:
            offered = _continue_offered(exc) if replace_expired and cont and replaced < EXPIRED_CONTINUES else ""
            if not offered:
                raise
            logger.info("listing %s: the list's continue token expired; reading the rest at the newest version", path)
            cont, replaced = offered, replaced + 1


#: Bytes read from the socket at a time by :func:`list_items`.
STREAM_CHUNK = 64 * 1024


def list_items(api: client.ApiClient, group: str, version: str, resource: str, *, namespace: str = "",
               page_size: int = PAGE_SIZE, label_selector: str = "") -> Iterator[dict[str, Any]]:
    """Yields a list's items one at a time, each parsed as its bytes arrive (vpol.kube.list_answer), page by page.

    For servers that answer a list whole whatever its ``limit`` says (Kyverno's reports-server): the operator
    holds one item of the answer, not all of them parsed. Items get the list's apiVersion and kind when the
    answer names them before its items, as typed lists do (the API server's lists of custom resources name them
    after, and their items carry their own). Unlike :func:`list_pages` nothing is fetched ahead: a page's
    ``continue`` token may come after its items. An expired token is replaced as there (_page_answer)."""
    path = collection_path(group, version, resource, namespace)
    cont = ""
    while True:
        resp = _page_answer(api, path, page_size, cont, label_selector)
        reader = ListReader(resp.stream(STREAM_CHUNK))
        finished = False
        try:
            for item in reader.items():
                if isinstance(item, dict):
                    item.setdefault("apiVersion", reader.head.get("apiVersion") or
                                    (f"{group}/{version}" if group else version))
                    if "kind" in reader.head:
                        item.setdefault("kind", str(reader.head["kind"]).removesuffix("List"))
                    yield item
            finished = True
        finally:
            # A connection with unread bytes cannot serve another request: closed, not given back.
            if finished:
                resp.release_conn()
            else:
                resp.close()
        cont = str((reader.head.get("metadata") or {}).get("continue") or "")
        if not cont:
            return


def _continue_offered(exc: ApiException) -> str:
    """The token an API server offers for the rest of a list whose ``continue`` expired (410 Gone: its Status's
    metadata.continue); "" for any other error."""
    if exc.status != 410:
        return ""
    try:
        status = json.loads(exc.body or "")
    except ValueError:
        return ""
    return str(((status if isinstance(status, dict) else {}).get("metadata") or {}).get("continue") or "")


class StopWatching(Exception):
    """Raised by a Watcher's callback: stop this watcher for good (no retry)."""


class Watcher(threading.Thread):
    """Lists then watches one resource, calling ``on_event(type, object)`` for every change.

    Initial objects arrive as ``ADDED`` (``SYNCED`` is sent once the first
    list is complete). A watch that ends is resumed from the last
    resourceVersion; 410 Gone (or any error) relists, after ``on_error(exc)``
    is told. Stops when ``stop()`` is called, or when the callback raises
    :class:`StopWatching`. ``namespace`` limits it to one namespace.

    ``since`` (with ``emit_initial=False``): the watch starts at that resourceVersion instead of a list, so every
    change after it is delivered even though the watcher started later (the API server's watch cache replays
    them); when the API server no longer has that version (410 Gone at once), it starts from a list as usual.
    """

    def __init__(self, api: client.ApiClient, group: str, version: str, resource: str,
                 on_event: Callable[[str, dict[str, Any]], None], *, kind: str = "", timeout: int = 300,
                 emit_initial: bool = True, on_list: Callable[[], None] | None = None, namespace: str = "",
                 on_error: Callable[[BaseException], None] | None = None, since: str = ""):
        super().__init__(daemon=True, name=f"watch-{resource}.{group or 'core'}")
        self.api = api
        self.gvr = (group, version, resource)
        self.namespace = namespace
        self.on_error = on_error
        self.kind = kind
        self.on_event = on_event
        self.timeout = timeout
        self._stop_event = threading.Event()
        self.synced = threading.Event()
        self.errors = 0
        #: The last failure of a list or watch (None once one succeeds).
        self.last_error: BaseException | None = None
        #: False: the first list only fixes the starting point (someone else scans the objects).
        self.emit_initial = emit_initial
        #: Called before each list that emits its objects (so a caller can tell what a relist dropped).
        self.on_list = on_list
        self.since = since if not emit_initial else ""
        #: Events delivered by the watches so far (a replay from ``since`` refused at once delivered none).
        self.delivered = 0
        #: The next list only fixes the starting point (a replay from ``since`` was refused).
        self._quiet_list = False
        #: The watch response being read (stop() cuts it).
        self._stream: Any = None

    def stop(self) -> None:
        """Stop; a watch stream in flight is cut at once (its connection is not held until the server ends it)."""
        self._stop_event.set()
        stream = self._stream
        if stream is not None:
            try:
                stream.shutdown()
            except Exception:  # noqa: BLE001 - already closed, or closing anyway
                pass

    @property
    def unavailable(self) -> bool:
        """The resource cannot be listed at all: no such resource (404) or not allowed (403)."""
        return getattr(self.last_error, "status", None) in (403, 404)

    @property
    def stopped(self) -> bool:
        return self._stop_event.is_set()

    def run(self) -> None:
        backoff = 0.5
        since, self.since = self.since, ""
        while not self.stopped:
            try:
                rv: str | None = since or self._list()
                self.last_error = None
                self.synced.set()
                self.on_event("SYNCED", {})
                backoff = 0.5
                while not self.stopped and rv is not None:
                    rv = self._watch(rv)  # None after 410 Gone: relist
                if since and not self.delivered:
                    self._quiet_list = True  # the version is gone: start from a list, as without it
                since = ""
            except StopWatching:
                self.stop()
                return
            except Exception as exc:  # noqa: BLE001 - reconnect with backoff, never die
                if self.stopped:
                    return  # the stream stop() cut
                self.errors += 1
                self.last_error = exc
                if since and getattr(exc, "status", None) == 410:
                    since, self._quiet_list = "", True  # the version is gone (answered as an HTTP error)
                if self.on_error is not None:
                    try:
                        self.on_error(exc)
                    except StopWatching:
                        self.stop()
                        return
                    except Exception:  # noqa: BLE001 - the callback's own failure changes nothing here
                        logger.exception("watch error callback failed")
                logger.warning("watch of %s failed: %s; retrying in %.1fs", "/".join(self.gvr), exc, backoff)
                self._stop_event.wait(backoff)
                backoff = min(30.0, backoff * 2)

    def _list(self) -> str:
        rv = ""
        if not self.emit_initial and (not self.synced.is_set() or self._quiet_list):
            self._quiet_list = False
            for _items, rv in list_pages(self.api, *self.gvr, namespace=self.namespace, page_size=1):
                return rv
            return rv
        if self.on_list is not None:
            self.on_list()
        for items, rv in list_pages(self.api, *self.gvr, namespace=self.namespace, consistent=True):
            for item in items:
                self.on_event("ADDED", item)
        return rv

    def _watch(self, rv: str) -> str | None:
        group, version, resource = self.gvr
        query: list[tuple[str, Any]] = [("watch", "true"), ("resourceVersion", rv), ("allowWatchBookmarks", "true"),
                                        ("timeoutSeconds", self.timeout)]
        resp = _call(self.api, collection_path(group, version, resource, self.namespace), query,
                     timeout=self.timeout + 30)
        self._stream = resp
        if self.stopped:  # stopped while the request was made
            resp.release_conn()
            return rv
        try:
            for line in resp:
                if self.stopped:
                    return rv
                if not line.strip():
                    continue
                event = json.loads(line)
                etype, obj = event.get("type"), event.get("object") or {}
                if etype == "ERROR":
                    if obj.get("code") == 410:
                        return None
                    raise RuntimeError(f"watch error: {obj.get('message')}")
                rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                self.delivered += 1
                if etype == "BOOKMARK":
                    continue
                obj.setdefault("apiVersion", f"{group}/{version}" if group else version)
                if self.kind:
                    obj.setdefault("kind", self.kind)
                self.on_event(str(etype), obj)
        finally:
            self._stream = None
            resp.release_conn()
        return rv



def object_path(group: str, version: str, resource: str, namespace: str, name: str, subresource: str = "") -> str:
    return f"{collection_path(group, version, resource, namespace)}/{name}" + (f"/{subresource}" if subresource else "")


def encoded(obj: Any) -> bytes:
    """``obj`` as compact JSON, once (what the API server decodes; JSON is also YAML for an apply)."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _send(api: client.ApiClient, method: str, path: str, *, body: Any = None, content_type: str = "",
          query: list[tuple[str, Any]] | None = None) -> dict[str, Any]:
    raw = send_encoded(api, method, path, encoded(body) if body is not None else None, content_type=content_type,
                       query=query)
    return dict(json.loads(raw or b"{}"))


#: Accept header of a write whose caller needs only the written object's metadata (its resourceVersion): the
#: API server answers with the object as PartialObjectMetadata (creates, updates and patches answer through the
#: same transformation as reads) instead of encoding the whole object back, and the client reads a fraction of
#: it. Plain JSON follows, the media type the server picks for what it does not transform (an error's Status).
METADATA_ANSWER = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1, application/json"


def send_encoded(api: client.ApiClient, method: str, path: str, data: bytes | None, *, content_type: str = "",
                 query: list[tuple[str, Any]] | None = None, timeout: tuple[float, float] = (10.0, 60.0),
                 accept: str = "application/json") -> bytes:
    """A request whose body (if any) is already encoded JSON; returns the answer's body (unparsed), raises
    ApiException when the status is not 2xx.

    For the operator's high-volume writes (a report per scanned resource): the generated client walks a
    body recursively to "sanitise" it, encodes it with the pure-Python path of ``json.dumps`` and parses
    the object the API server sends back; here the caller encodes once and the answer is read (so the
    connection goes back to the pool) and parsed only by a caller that needs it. Measured with 16-result
    reports: 1.7 ms of client CPU per write through the generated client, 1.2 ms this way. ``accept`` is the
    Accept header (:data:`METADATA_ANSWER`: the written object's metadata only)."""
    headers = {"Accept": accept}
    if content_type:
        headers["Content-Type"] = content_type
    method, url, headers, _body, _post = api.param_serialize(
        method=method, resource_path=path, query_params=query or [], header_params=headers,
        auth_settings=["BearerToken"])
    resp = api.rest_client.pool_manager.request(method, url, body=data, headers=headers, preload_content=False,
                                                timeout=urllib3.Timeout(connect=timeout[0], read=timeout[1]))
    try:
        raw = resp.data
    finally:
        resp.release_conn()
    if not 200 <= int(resp.status) < 300:
        raise api_error(int(resp.status), raw)
    return bytes(raw)


def get_object(api: client.ApiClient, group: str, version: str, resource: str, namespace: str,
               name: str) -> dict[str, Any] | None:
    """One object (None when it does not exist)."""
    try:
        return _send(api, "GET", object_path(group, version, resource, namespace, name))
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def create_object(api: client.ApiClient, group: str, version: str, resource: str, namespace: str,
                  body: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
    """POST one object (``dry_run``: admission runs, nothing is stored); the object as the API server stores it.

    Core kinds go through these generic calls rather than the generated CoreV1Api: importing that module costs
    the operator 21 MiB of resident memory (measured with kubernetes 37.0.2), for the three calls vpol makes."""
    return _send(api, "POST", collection_path(group, version, resource, namespace), body=body,
                 content_type="application/json", query=[("dryRun", "All")] if dry_run else None)


def replace_object(api: client.ApiClient, group: str, version: str, resource: str, namespace: str, name: str,
                   body: dict[str, Any]) -> dict[str, Any]:
    """PUT one object (its metadata.resourceVersion, when set, guards against a concurrent write: 409)."""
    return _send(api, "PUT", object_path(group, version, resource, namespace, name), body=body,
                 content_type="application/json")


def apply_object(api: client.ApiClient, group: str, version: str, resource: str, namespace: str,
                 body: dict[str, Any], *, field_manager: str) -> dict[str, Any]:
    """Server-side apply of one object (``body`` names it) under ``field_manager``, forced; the object as stored."""
    return _send(api, "PATCH", object_path(group, version, resource, namespace, str(body["metadata"]["name"])),
                 body=body, content_type="application/apply-patch+yaml",
                 query=[("fieldManager", field_manager), ("force", "true")])


def json_patch_object(api: client.ApiClient, group: str, version: str, resource: str, namespace: str, name: str,
                      patch: list[dict[str, Any]], *, field_manager: str, subresource: str = "") -> dict[str, Any]:
    """A JSON patch (RFC 6902) of one object under ``field_manager``; a failed ``test`` operation (a guard on the
    resourceVersion: the object changed since it was read) comes back as an ApiException (422 or 409)."""
    return _send(api, "PATCH", object_path(group, version, resource, namespace, name, subresource), body=patch,
                 content_type="application/json-patch+json", query=[("fieldManager", field_manager)])


def delete_object(api: client.ApiClient, group: str, version: str, resource: str, namespace: str, name: str, *,
                  propagation_policy: str = "", uid: str = "") -> dict[str, Any] | None:
    """DELETE one object (``propagation_policy``: Foreground, Background or Orphan; "" the API server's default
    for the kind; ``uid``: only that object, not one recreated under its name since): the API server's answer (the
    object, or a Status naming it), None when it was gone."""
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
    if propagation_policy:
        body["propagationPolicy"] = propagation_policy
    if uid:
        body["preconditions"] = {"uid": uid}
    try:
        return _send(api, "DELETE", object_path(group, version, resource, namespace, name), body=body,
                     content_type="application/json")
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
