"""The I/O of GlobalContextEntries: their API calls and their status (the watches are vpol.kube.dynamic's).

An ``apiCall`` entry calls either a path of the Kubernetes API server (``urlPath``, with the operator's own
credentials, as ``kubectl get --raw`` would) or a web service (``service``: its URL, optional CA bundle and
headers). Failures are worded as Kyverno's API call executor words them (pkg/engine/apicall in Kyverno 1.19),
for instance ``failed to GET resource with raw url: /api/v1/x: ...`` or ``HTTP 404 Not Found: ...``; every
answer is bounded (``max_bytes``) with Kyverno's message beyond it.
"""

from __future__ import annotations

import http.client
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from vpol.kube.errors import describe
from vpol.model.global_context import GROUP, PLURAL, READ_VERSION, ApiCallSource


class CallFailed(RuntimeError):
    """An API call of an entry failed; the message is what policies reading the entry are told."""


def _too_long(max_bytes: int) -> CallFailed:
    return CallFailed(f"response length must be less than max allowed response length of {max_bytes}")


def call(api: client.ApiClient, entry_name: str, spec: ApiCallSource, *, max_bytes: int,
         timeout: float) -> bytes:
    """One call of an entry's apiCall: the raw answer (raises CallFailed)."""
    if spec.url_path:
        return _api_server(api, spec, max_bytes=max_bytes, timeout=timeout)
    return _service(entry_name, spec, max_bytes=max_bytes, timeout=timeout)


def _api_server(api: client.ApiClient, spec: ApiCallSource, *, max_bytes: int, timeout: float) -> bytes:
    body = spec.body()
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = "application/json"
    path, _, query = spec.url_path.partition("?")
    query_params = urllib.parse.parse_qsl(query, keep_blank_values=True)
    method, url, header_params, payload, _post = api.param_serialize(
        method=spec.method, resource_path=path, query_params=query_params, header_params=headers, body=body,
        auth_settings=["BearerToken"])
    where = f"failed to {spec.method} resource with raw url: {spec.url_path}"
    try:
        resp = api.call_api(method, url, header_params=header_params, body=payload, _request_timeout=timeout)
        raw = resp.response.read(max_bytes + 1, decode_content=True)
        status = int(resp.status)
        resp.response.release_conn()
    except ApiException as exc:
        raise CallFailed(f"{where}: {describe(exc)}") from None
    except Exception as exc:  # noqa: BLE001 - a transport failure: said, never raised further
        raise CallFailed(f"{where}: {describe(exc)}") from None
    if len(raw) > max_bytes:
        raise _too_long(max_bytes)
    if not 200 <= status < 300:
        message = _status_message(raw) or f"HTTP {status}"
        if status in (401, 403):
            raise CallFailed(f"{where}: permission denied: {message}")
        raise CallFailed(f"{where}: {message}")
    return bytes(raw)


def _status_message(raw: bytes) -> str:
    try:
        return str(json.loads(raw).get("message") or "")
    except (ValueError, AttributeError):
        return raw[:500].decode(errors="replace").strip()


def _service(entry_name: str, spec: ApiCallSource, *, max_bytes: int, timeout: float) -> bytes:
    service = spec.service
    if service is None:
        raise CallFailed(f"missing service for APICall {entry_name}")
    context = None
    if service.url.startswith("https:"):
        context = ssl.create_default_context()
        if service.ca_bundle:
            try:
                context = ssl.create_default_context(cadata=service.ca_bundle)
            except (ssl.SSLError, ValueError):
                raise CallFailed(f"failed to parse PEM CA bundle for APICall {entry_name}") from None
    body = spec.body()
    # encoding/json's Encoder ends what it writes with a newline.
    data = (json.dumps(body, separators=(",", ":")) + "\n").encode() if spec.method == "POST" else None
    request = urllib.request.Request(service.url, data=data, method=spec.method)
    for key, value in service.headers:
        request.add_header(key, value)
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as resp:  # noqa: S310 - the entry's URL
            raw = resp.read(max_bytes + 1)
            status = int(resp.status)
            reason = str(resp.reason or "")
    except urllib.error.HTTPError as exc:
        text = exc.read(max_bytes + 1)
        raise CallFailed(f"HTTP {exc.code} {exc.reason}: {text.decode(errors='replace')}") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
        reason_text = getattr(exc, "reason", None) or exc
        raise CallFailed(f"failed to execute HTTP request for APICall {entry_name}: {reason_text}") from None
    if not 200 <= status < 300:
        raise CallFailed(f"HTTP {status} {reason}: {raw.decode(errors='replace')}")
    if len(raw) > max_bytes:
        raise _too_long(max_bytes)
    return bytes(raw)


def patch_status(api: client.ApiClient, name: str, status: Mapping[str, Any]) -> None:
    """Merge-patch an entry's status (its conditions list is replaced whole)."""
    custom: Any = client.CustomObjectsApi(api)
    custom.patch_cluster_custom_object_status(GROUP, READ_VERSION, PLURAL, name, {"status": dict(status)})


def served(api: client.ApiClient, group: str, version: str, resource: str) -> bool | None:
    """Whether the API server serves ``resource`` in ``group/version`` (None: discovery cannot say). An identity
    without access to a resource is refused it (403) whether it exists or not: discovery tells the two apart."""
    from vpol.kube.dynamic import _call

    path = f"/apis/{group}/{version}" if group else f"/api/{version}"
    try:
        resp = _call(api, path, [], timeout=10)
        data = json.loads(resp.data)
        resp.release_conn()
    except ApiException as exc:
        return False if exc.status == 404 else None
    except Exception:  # noqa: BLE001 - unknown
        return None
    return any(r.get("name") == resource for r in data.get("resources") or [] if isinstance(r, dict))
