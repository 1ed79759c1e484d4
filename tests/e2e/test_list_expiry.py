"""A paged list that outlives its ``continue`` token, on a real API server (vpol.kube.dynamic.list_pages).

A scan of 100,000 Pods reads its list page by page while it evaluates and writes reports, for longer than the API
server's etcd compaction interval (5 minutes by default); etcd then no longer has the list's version, and the next
page is refused with 410 Gone and a Status offering a token for the rest of the list at the newest version
(bench/scan.py at 100,000 Pods: the scan failed there and started over, forever). Here the module's control plane
compacts every second (``--etcd-compaction-interval=1s``), so the same happens within seconds:

* the API server really refuses the old token and offers another (checked with a raw request);
* list_pages reads the rest of the list with the offered token: every object once;
* a list whose resourceVersion starts a watch (``consistent=True``, vpol.kube.dynamic.Watcher) gets the 410.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.e2e.conftest import KubeCluster, LocalClusters
from tests.e2e.vpol_fixtures import wait_for

NAMESPACE = "list-expiry"
NAMES = [f"cm-{i:02d}" for i in range(7)]


@pytest.fixture(scope="module")
def compacting_cluster(controlplane_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeCluster]:
    clusters = LocalClusters(controlplane_binary)
    try:
        cluster = clusters.start(tmp_path_factory.mktemp("compacting"),
                                 apiserver_args=["--etcd-compaction-interval=1s"])
        core = client.CoreV1Api(cluster.api_client)
        core.create_namespace({"metadata": {"name": NAMESPACE}})
        for name in NAMES:
            core.create_namespaced_config_map(NAMESPACE, {"metadata": {"name": name}})
        yield cluster
        cluster.close()
    finally:
        clusters.stop_all()


def _expire(cluster: KubeCluster, token: str) -> dict[str, Any]:
    """Write until etcd has compacted past ``token``'s version; the API server's refusal of it (its Status)."""
    from vpol.kube.dynamic import _call

    core = client.CoreV1Api(cluster.api_client)
    path = f"/api/v1/namespaces/{NAMESPACE}/configmaps"

    def refused() -> dict[str, Any] | None:
        core.patch_namespaced_config_map(NAMES[0], NAMESPACE, {"data": {"at": str(time.monotonic())}})
        try:
            _call(cluster.api_client, path, [("limit", 2), ("continue", token)], timeout=30).release_conn()
        except ApiException as exc:
            assert exc.status == 410, exc
            return dict(json.loads(exc.body))
        return None

    return wait_for("etcd to compact past the list's version", refused, timeout=60, interval=1)


def _first_page_then_expire(cluster: KubeCluster, **kwargs: Any) -> tuple[Iterator[Any], list[str]]:
    from vpol.kube.dynamic import list_pages

    pages = list_pages(cluster.api_client, "", "v1", "configmaps", namespace=NAMESPACE, page_size=2, **kwargs)
    items, _rv = next(pages)
    # The token the generator holds is the one the API server gave with this page: read it the same way.
    from vpol.kube.dynamic import _call

    answer = _call(cluster.api_client, f"/api/v1/namespaces/{NAMESPACE}/configmaps", [("limit", 2)], timeout=30)
    token = json.loads(answer.data)["metadata"]["continue"]
    answer.release_conn()
    status = _expire(cluster, token)
    assert status["reason"] == "Expired" and status["metadata"].get("continue"), status
    return pages, [i["metadata"]["name"] for i in items]


def test_the_rest_of_an_expired_list_is_read_at_the_newest_version(
        compacting_cluster: KubeCluster, caplog: pytest.LogCaptureFixture) -> None:
    pages, names = _first_page_then_expire(compacting_cluster)
    with caplog.at_level(logging.INFO, logger="vpol.kube.dynamic"):
        for items, _rv in pages:
            names += [i["metadata"]["name"] for i in items]
    assert [n for n in names if n.startswith("cm-")] == NAMES  # (and the namespace's kube-root-ca.crt)
    assert "continue token expired" in caplog.text


def test_a_consistent_list_gets_the_410(compacting_cluster: KubeCluster) -> None:
    pages, _names = _first_page_then_expire(compacting_cluster, consistent=True)
    with pytest.raises(ApiException) as gone:
        list(pages)
    assert gone.value.status == 410
