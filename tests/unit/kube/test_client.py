"""The operator's API client: pooled connections and default timeouts."""

from __future__ import annotations

from pathlib import Path

import yaml

from vpol.kube.client import DEFAULT_TIMEOUT, POOL_SIZE, api_client


def kubeconfig(tmp_path: Path) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }))
    return path


def test_the_connection_pool_holds_what_the_operator_uses_at_once(tmp_path: Path) -> None:
    api = api_client(str(kubeconfig(tmp_path)))
    assert api.configuration.host == "https://127.0.0.1:1"
    assert api.configuration.connection_pool_maxsize >= POOL_SIZE
    assert api.rest_client.pool_manager.connection_pool_kw["maxsize"] >= POOL_SIZE


def test_calls_without_a_timeout_get_the_default(tmp_path: Path, monkeypatch) -> None:
    api = api_client(str(kubeconfig(tmp_path)))
    seen = {}

    def fake_request(method, url, **kwargs):
        seen.update(kwargs)
        raise RuntimeError("stop here")

    monkeypatch.setattr(api.rest_client, "request", fake_request)
    try:
        api.call_api("GET", "https://127.0.0.1:1/version")
    except RuntimeError:
        pass
    assert seen["_request_timeout"] == DEFAULT_TIMEOUT
