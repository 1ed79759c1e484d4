"""The webhook's serving certificate in its Secret, against a real API server."""

from __future__ import annotations

import datetime
import threading
from typing import Any

import pytest

from vpol.kube.webhook_tls import CertificateUnavailable, WebhookTLS

NAMES = ["vpol-webhook.vpol-system.svc"]


def test_created_reused_and_renewed(cluster: Any, namespace: str) -> None:
    tls = WebhookTLS(cluster.api_client, namespace, "tls", dns_names=NAMES)
    first = tls.ensure()
    assert tls.current() == first
    again = WebhookTLS(cluster.api_client, namespace, "tls", dns_names=NAMES).ensure()
    assert again == first  # another replica reads the same pair
    later = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=340)
    renewed = tls.ensure(now=later)
    assert renewed != first and renewed.ca_pem != first.ca_pem
    assert WebhookTLS(cluster.api_client, namespace, "tls", dns_names=NAMES).ensure(now=later) == renewed
    # a new name (the Service moved) is a reason to renew too
    moved = WebhookTLS(cluster.api_client, namespace, "tls", dns_names=NAMES + ["other.svc"]).ensure(now=later)
    assert moved != renewed


def test_racing_replicas_end_with_one_certificate(cluster: Any, namespace: str) -> None:
    results: list[Any] = []
    replicas = [WebhookTLS(cluster.api_client, namespace, "race", dns_names=NAMES) for _ in range(4)]
    threads = [threading.Thread(target=lambda t=t: results.append(t.ensure())) for t in replicas]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    final = WebhookTLS(cluster.api_client, namespace, "race", dns_names=NAMES, managed=False).ensure()
    assert len(results) == 4
    assert all(r == final for r in results)  # the losers of the create (409) adopted the winner's pair


def test_unmanaged_secret_is_only_read(cluster: Any, namespace: str) -> None:
    with pytest.raises(CertificateUnavailable, match=f"{namespace}/cert-manager-made"):
        WebhookTLS(cluster.api_client, namespace, "cert-manager-made", dns_names=NAMES, managed=False).ensure()
