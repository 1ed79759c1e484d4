"""Leader election explains what stops it, once, in a sentence (never an HTTP response dump)."""

from __future__ import annotations

import logging

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from vpol.kube.lease import LeaderElection


def election() -> LeaderElection:
    return LeaderElection(client.ApiClient(), "vpol-system")


@pytest.mark.parametrize("status,fragment", [(404, "namespace vpol-system does not exist"),
                                             (403, "forbidden (grant get, create and update on leases")])
def test_missing_namespace_and_rbac_are_explained(status: int, fragment: str) -> None:
    exc = ApiException(status=status, reason="x")
    exc.headers = {"Audit-Id": "123"}
    exc.body = '{"kind":"Status"}'
    text = election()._explain(exc)
    assert fragment in text and "Audit-Id" not in text and "{" not in text


def test_a_problem_is_logged_once_and_its_end_too(caplog: pytest.LogCaptureFixture) -> None:
    e = election()
    with caplog.at_level(logging.INFO, logger="vpol.kube.lease"):
        for _ in range(5):
            e._report("cannot take the Lease: x")
        e._report("")
        e._report("")
    messages = [r.getMessage() for r in caplog.records]
    assert len([m for m in messages if "cannot take the Lease" in m]) == 1
    assert messages[-1] == "leader election works again" and e.problem == ""


class OneLease:
    """Stands for the coordination API with one Lease in it."""

    def __init__(self) -> None:
        self.lease: client.V1Lease | None = None

    def read_namespaced_lease(self, _name: str, _namespace: str) -> client.V1Lease:
        if self.lease is None:
            raise ApiException(status=404)
        return self.lease

    def create_namespaced_lease(self, _namespace: str, body: client.V1Lease) -> None:
        self.lease = body

    def replace_namespaced_lease(self, _name: str, _namespace: str, body: client.V1Lease) -> None:
        self.lease = body


@pytest.mark.parametrize("release", [True, False])
def test_the_lease_is_released_at_stop_unless_its_work_may_still_run(release: bool) -> None:
    """A holder whose background scans have not stopped leaves the Lease to expire (vpol.controller.handlers'
    cleanup): released, another replica would take it and scan while this one still writes."""
    e = LeaderElection(client.ApiClient(), "vpol-system", renew=0.05)
    e.coordination = OneLease()
    e.start()
    assert e.leading.wait(5)
    e.stop(release=release)
    e.join(5)
    assert not e.is_alive()
    holder = e.coordination.lease.spec.holder_identity
    assert holder == (None if release else e.identity)
