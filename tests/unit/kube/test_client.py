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


def test_the_credential_refresh_runs_at_most_once_per_interval(tmp_path: Path, monkeypatch) -> None:
    """The kubeconfig loader's refresh hook (re-applied before every request by the generated client) is
    throttled; it still runs, so a token due for renewal is renewed."""
    from vpol.kube import client as vclient

    api = api_client(str(kubeconfig(tmp_path)))
    cfg = api.configuration
    assert cfg.refresh_api_key_hook is not None  # the loader's hook, wrapped by api_client
    calls = []
    clock = [100.0]
    monkeypatch.setattr(vclient.time, "monotonic", lambda: clock[0])
    cfg.refresh_api_key_hook = lambda c: calls.append(clock[0])
    vclient.throttle_refresh(cfg, interval=1.0)
    for t in (100.0, 100.2, 100.9, 101.0, 101.5, 103.0):
        clock[0] = t
        assert cfg.get_api_key_with_prefix("BearerToken") == "Bearer t"
    assert calls == [100.0, 101.0, 103.0]
    cfg.refresh_api_key_hook = None
    vclient.throttle_refresh(cfg)  # nothing to wrap
    assert cfg.refresh_api_key_hook is None


def _applies_at(loader_class, monkeypatch) -> tuple[list[float], list[float]]:
    """The times (a stand-in clock, also the throttle's) at which ``loader_class`` applies its configuration."""
    from vpol.kube import client as vclient

    applied: list[float] = []
    clock = [100.0]
    set_config = loader_class._set_config

    def counting(self, configuration):
        applied.append(clock[0])
        return set_config(self, configuration)

    monkeypatch.setattr(vclient.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(loader_class, "_set_config", counting)
    return applied, clock


def test_the_kubeconfig_loaders_own_refresh_stays_throttled(tmp_path: Path, monkeypatch) -> None:
    """The kubeconfig loader's hook installs a new hook of its own each time it runs: the throttle stays in place
    (it did not: after its first run every request re-applied the whole configuration)."""
    from kubernetes.config import kube_config

    applied, clock = _applies_at(kube_config.KubeConfigLoader, monkeypatch)
    cfg = api_client(str(kubeconfig(tmp_path))).configuration
    applied.clear()  # loading it
    for t in (100.0, 100.2, 100.9, 101.0, 101.1, 101.5, 103.0, 103.2):
        clock[0] = t
        assert cfg.get_api_key_with_prefix("BearerToken") == "Bearer t"
    assert applied == [100.0, 101.0, 103.0]
    assert cfg.host == "https://127.0.0.1:1"


def test_the_in_cluster_loaders_own_refresh_stays_throttled(tmp_path: Path, monkeypatch) -> None:
    """The in-cluster loader's hook (the operator's in a Pod) re-installs itself the same way."""
    from kubernetes import client
    from kubernetes.config import incluster_config

    from vpol.kube import client as vclient

    token, cert = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("t")
    cert.write_text("not read here")
    loader = incluster_config.InClusterConfigLoader(
        str(token), str(cert), environ={incluster_config.SERVICE_HOST_ENV_NAME: "10.0.0.1",
                                        incluster_config.SERVICE_PORT_ENV_NAME: "443"})
    applied, clock = _applies_at(incluster_config.InClusterConfigLoader, monkeypatch)
    cfg = client.Configuration()
    loader.load_and_set(cfg)
    vclient.throttle_refresh(cfg, interval=1.0)
    applied.clear()
    for t in (100.0, 100.5, 101.0, 101.2, 102.5):
        clock[0] = t
        assert cfg.get_api_key_with_prefix("BearerToken").lower() == "bearer t"
    assert applied == [100.0, 101.0, 102.5]


def test_reports_are_sent_encoded_once_and_answer_with_their_resource_version(tmp_path: Path, monkeypatch) -> None:
    """Reports.create/update/apply send the report's compact JSON straight to the connection pool (no sanitising,
    no re-encoding), with the field manager, ask for the written report's metadata only (PartialObjectMetadata,
    plain JSON as the fallback) and return its resourceVersion; a 409 on create
    says "exists", a 409 or 404 on update says "not at that version any more"; other errors keep the Status."""
    import json

    import pytest
    from kubernetes.client.rest import ApiException

    from vpol.kube.dynamic import METADATA_ANSWER
    from vpol.kube.reports import Reports

    api = api_client(str(kubeconfig(tmp_path)))
    sent = []
    status = [201]

    class Answer:
        def __init__(self, code: int):
            self.status = code
            self.data = b'{"kind":"Status","message":"m"}' if code >= 300 else \
                b'{"kind":"PolicyReport","metadata":{"name":"vpol-u1","resourceVersion":"%d"}}' % len(sent)

        def release_conn(self) -> None:
            sent[-1]["released"] = True

    def request(method, url, body=None, headers=None, **kw):
        sent.append({"method": method, "url": url, "body": body, "headers": headers, "kw": kw})
        return Answer(status[0])

    monkeypatch.setattr(api.rest_client.pool_manager, "request", request)
    report = {"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
              "metadata": {"name": "vpol-u1", "namespace": "ns"}, "results": [{"policy": "p", "message": "é"}]}
    reports = Reports(api)
    assert reports.create(report) == "1"
    first = sent[-1]
    assert first["method"] == "POST" and first["released"]
    assert first["url"] == "https://127.0.0.1:1/apis/wgpolicyk8s.io/v1alpha2/namespaces/ns/policyreports" \
                           "?fieldManager=vpol"
    assert isinstance(first["body"], bytes) and json.loads(first["body"]) == report
    assert b" " not in first["body"] and first["headers"]["Content-Type"] == "application/json"
    assert first["headers"]["authorization"] == "Bearer t"
    assert first["headers"]["Accept"] == METADATA_ANSWER
    assert METADATA_ANSWER.split(", ") == ["application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
                                           "application/json"]
    status[0] = 409
    assert reports.create(report) is None
    status[0] = 200
    assert reports.apply(report) == "3"
    applied = sent[-1]
    assert applied["method"] == "PATCH" and applied["headers"]["Content-Type"] == "application/apply-patch+yaml"
    assert applied["url"].endswith("/namespaces/ns/policyreports/vpol-u1?fieldManager=vpol&force=true")
    assert applied["headers"]["Accept"] == METADATA_ANSWER
    # An update replaces the report at the version given, and only there.
    assert reports.update(report, "3") == "4"
    put = sent[-1]
    assert put["method"] == "PUT" and put["url"].endswith("/namespaces/ns/policyreports/vpol-u1?fieldManager=vpol")
    assert json.loads(put["body"]) == {**report, "metadata": {**report["metadata"], "resourceVersion": "3"}}
    assert put["headers"]["Accept"] == METADATA_ANSWER
    assert "resourceVersion" not in report["metadata"]
    for refused in (409, 404):
        status[0] = refused
        assert reports.update(report, "3") is None
    status[0] = 200
    cluster = {**report, "kind": "ClusterPolicyReport", "metadata": {"name": "vpol-u2"}}
    reports.apply(cluster)
    assert sent[-1]["url"].endswith("/apis/wgpolicyk8s.io/v1alpha2/clusterpolicyreports/vpol-u2"
                                    "?fieldManager=vpol&force=true")
    for refused in (422, 403):
        status[0] = refused
        with pytest.raises(ApiException) as failed:
            reports.apply(report)
        assert failed.value.status == refused and '"message":"m"' in failed.value.body
        with pytest.raises(ApiException):
            reports.update(report, "3")


def test_only_reports_that_vpol_alone_wrote_are_replaced() -> None:
    from vpol.kube.objects import written_by_vpol_only

    def report(*managers: str) -> dict:
        return {"metadata": {"managedFields": [{"manager": m, "operation": "Update"} for m in managers]}}

    assert written_by_vpol_only(report("vpol", "vpol"))
    assert not written_by_vpol_only(report("vpol", "kubectl-label"))
    assert not written_by_vpol_only(report())
    assert not written_by_vpol_only({"metadata": {}})
