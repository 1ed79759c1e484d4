"""The configuration writer compares only what it owns, and tells refused VAPs apart."""

from __future__ import annotations

from vpol.controller.admission.configurator import client_config, contains
from vpol.controller.admission.policies import vap_refused


def test_contains_ignores_server_defaults_but_sees_edits():
    desired = {"webhooks": [{"name": "w", "rules": [{"resources": ["pods"]}]}]}
    defaulted = {"webhooks": [{"name": "w", "rules": [{"resources": ["pods"], "scope": "*"}],
                               "matchPolicy": "Equivalent"}]}
    assert contains(defaulted, desired)
    assert not contains({"webhooks": [{"name": "w", "rules": []}]}, desired)
    assert not contains({"webhooks": [{"name": "w", "rules": [{"resources": ["pods", "x"]}]}]}, desired)
    assert not contains({"webhooks": defaulted["webhooks"] * 2}, desired)
    assert not contains({}, desired)


def test_client_config_by_url_or_service_carries_the_ca():
    by_url = client_config(url="https://127.0.0.1:9443", ca_pem=b"PEM")
    assert by_url == {"url": "https://127.0.0.1:9443", "caBundle": "UEVN"}
    svc = client_config(service={"namespace": "vpol-system", "name": "vpol-webhook", "port": 443}, ca_pem=b"PEM")
    assert svc["service"]["name"] == "vpol-webhook" and "url" not in svc


def test_vap_refused_only_for_the_current_generation():
    def body(generation, observed, reason="ApplyFailed"):
        return {"metadata": {"generation": generation}, "status": {"conditions": [
            {"type": "VAPGenerated", "status": "False", "reason": reason, "observedGeneration": observed}]}}
    assert vap_refused(body(2, 2))
    assert not vap_refused(body(3, 2))
    assert not vap_refused(body(2, 2, reason="NotEligible"))
    assert not vap_refused({"metadata": {"generation": 1}})


def test_a_status_write_does_not_change_the_webhook_policy_set():
    from tests.unit.policies import make_policy
    from vpol.controller.admission.policies import AdmissionPolicies

    changes = []
    admission = AdmissionPolicies(None, on_change=changes.append)  # type: ignore[arg-type]
    body = make_policy(name="p", validations=[{"expression": "sha256(object.metadata.name) != ''"}]).raw
    admission._on_policy("ADDED", body)
    assert len(changes) == 1 and "p" in admission.snapshot.policies
    admission._on_policy("MODIFIED", {**body, "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    assert len(changes) == 1
    admission._on_policy("MODIFIED", {**body, "metadata": {**body["metadata"], "generation": 2}})
    assert len(changes) == 2
    admission._on_policy("DELETED", body)
    assert len(changes) == 3 and not admission.snapshot.policies


def one_policy_source(version: int) -> type:
    """A stand-in for AdmissionPolicies: synced, one webhook policy ``p`` at snapshot ``version``."""
    from tests.unit.policies import make_policy
    from vpol.controller.admission.policies import Snapshot

    class Policies:
        synced = True
        snapshot = Snapshot(policies={"p": make_policy(name="p", validations=[{"expression": "true"}])},
                            version=version)

        def listen(self, _callback):
            pass

    return Policies


def test_configuration_is_written_only_once_the_local_server_answers():
    # Found on a fresh cluster: the configuration named the webhook ~1 s before its TLS site listened (it
    # waits for the certificate), and a Fail webhook refused every matching request meanwhile.
    import threading
    import time

    from vpol.controller.admission.configurator import WebhookConfigurator
    from vpol.controller.admission.policies import Snapshot

    Policies = one_policy_source(version=3)
    answering = {"version": -1}
    leading = threading.Event()
    leading.set()
    configurator = WebhookConfigurator(None, Policies(), name="vpol-validating",  # type: ignore[arg-type]
                                       client_config=lambda: None, leading=leading, period=0.05,
                                       serving=lambda: answering["version"])
    reconciled = []
    configurator.reconcile = lambda: reconciled.append(Policies.snapshot.version) or "applied"  # type: ignore
    configurator.start()
    try:
        time.sleep(0.6)
        assert reconciled == []  # nothing listens yet: nothing written
        answering["version"] = 3
        deadline = time.monotonic() + 5
        while not reconciled and time.monotonic() < deadline:
            time.sleep(0.05)
        assert reconciled
        # With no policy left, the configuration is removed even while nothing listens.
        answering["version"] = -1
        Policies.snapshot = Snapshot(version=4)
        count = len(reconciled)
        deadline = time.monotonic() + 5
        while len(reconciled) == count and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(reconciled) > count
    finally:
        configurator.stop()
        configurator.join(5)


def test_with_an_owner_clusterrole_nothing_is_written_while_it_is_missing():
    import threading

    import pytest

    from vpol.controller.admission.configurator import WebhookConfigurator

    Policies = one_policy_source(version=1)

    class Objects:
        owner: dict | None = None
        applied: list = []

        def cluster_role_reference(self, name):
            return self.owner and {**self.owner, "name": name}

        def get_webhook_configuration(self, name, mutating=False):
            return None

        def apply(self, obj):
            self.applied.append(obj)

    configurator = WebhookConfigurator(None, Policies(), name="vpol-validating",  # type: ignore[arg-type]
                                       client_config=lambda: {"url": "https://127.0.0.1:1", "caBundle": "Q0E="},
                                       leading=threading.Event(), owner_cluster_role="vpol-operator")
    objects = Objects()
    configurator.objects = objects  # type: ignore[assignment]
    with pytest.raises(RuntimeError, match="ClusterRole vpol-operator named by --owner-clusterrole does not exist"):
        configurator.reconcile()
    assert objects.applied == []
    objects.owner = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "uid": "u-1"}
    assert configurator.reconcile() == "applied"
    [written] = objects.applied
    assert written["metadata"]["ownerReferences"][0]["uid"] == "u-1"


def test_excluded_namespaces_from_the_command_line_reach_both_configurations():
    """`vpol run --webhook-exclude-namespaces` adds to kube-system and the operator's namespace, in the validating and
    the mutating configuration alike (the configurations' namespaceSelector: tests/unit/desired/test_webhook.py)."""
    import threading

    from kubernetes import client

    from vpol.cel.backend import Backend
    from vpol.cli.main import build_parser
    from vpol.controller.admission.webhook import Admission
    from vpol.controller.runtime import Options

    args = build_parser().parse_args(["run", "--namespace", "ops", "--webhook-exclude-namespaces", "a", "b"])
    assert args.webhook_exclude_namespaces == ["a", "b"]
    assert build_parser().parse_args(["run"]).webhook_exclude_namespaces is None
    admission = Admission(client.ApiClient(), Options(namespace="ops", webhook_excluded_namespaces=("a", "b")),
                          leading=threading.Event(), backend=Backend(), discovery=None)
    assert admission.configurator.excluded_namespaces == ("kube-system", "ops", "a", "b")
    assert admission.mutating_configurator.excluded_namespaces == ("kube-system", "ops", "a", "b")


def test_the_desired_configuration_is_built_once_per_snapshot_certificate_and_owner():
    """Built in the configurator's thread every period while the server answers requests on the same interpreter:
    rebuilt only when what it is made of changed, and handed out as a copy each time."""
    import threading

    from tests.unit.policies import make_policy
    from vpol.controller.admission.configurator import WebhookConfigurator
    from vpol.controller.admission.policies import Snapshot

    Policies = one_policy_source(version=1)
    certificate = {"url": "https://127.0.0.1:1", "caBundle": "Q0E="}
    configurator = WebhookConfigurator(None, Policies(), name="vpol-validating",  # type: ignore[arg-type]
                                       client_config=lambda: dict(certificate), leading=threading.Event())
    builds = []
    build = configurator._build
    configurator._build = lambda *a: builds.append(a[0].version) or build(*a)  # type: ignore[method-assign]
    first = configurator.desired(Policies.snapshot)
    first["webhooks"].clear()  # the caller's copy
    assert configurator.desired(Policies.snapshot)["webhooks"] and builds == [1]
    certificate["caBundle"] = "Q0EK"
    assert configurator.desired(Policies.snapshot)["webhooks"][0]["clientConfig"]["caBundle"] == "Q0EK"
    changed = Snapshot(policies={"q": make_policy(name="q", validations=[{"expression": "true"}])}, version=2)
    configurator.desired(changed)
    assert builds == [1, 1, 2]


def test_inline_answers_can_be_turned_off():
    """`vpol run --webhook-inline off`: the server gets no inline limits, so every request goes to a worker."""
    import threading

    from kubernetes import client

    from vpol.cel.backend import Backend
    from vpol.cli.main import build_parser
    from vpol.controller.admission.webhook import Admission
    from vpol.controller.runtime import Options

    assert build_parser().parse_args(["run"]).webhook_inline == "on"
    assert build_parser().parse_args(["run", "--webhook-inline", "off"]).webhook_inline == "off"
    for inline in (True, False):
        admission = Admission(client.ApiClient(), Options(webhook_inline=inline), leading=threading.Event(),
                              backend=Backend(), discovery=None)
        assert (admission.server.options.inline is not None) is inline
