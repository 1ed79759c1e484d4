"""vpol's webhook treats every caller as hostile: sent straight to its HTTPS port (as any Pod that reaches the
Service could), malformed, mistyped, oversized and deeply nested AdmissionReviews, wrong content encodings, slow
and many clients get a quick one-line refusal (400, 408 or 413), counted by reason, logged without a traceback,
and a valid request is decided right after each of them. TLS below 1.2 is refused.

The operator runs as in the other end-to-end tests (`vpol run`, the manifests' ServiceAccount); one policy that
vpol's webhook must enforce (a Kyverno library) makes the valid request's answer a real decision.
"""

from __future__ import annotations

import base64
import datetime
import gzip
import http.client
import json
import socket
import ssl
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.e2e.operator_process import OperatorProcess, free_port, sa_kubeconfig
from tests.e2e.test_admission import deny_cm, enforcement
from tests.e2e.vpol_fixtures import Policies, install_vpol, operator, policies, vpol_installed  # noqa: F401

VALID_REQUEST = {"uid": "hostile-valid", "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                 "resource": {"group": "", "version": "v1", "resource": "configmaps"}, "operation": "CREATE",
                 "userInfo": {"username": "someone"}}


#: A value in the objects sent, which must appear in no log line and no metric.
SECRET_MARKER = "s3cr3t-value-4711"


def review(request: Any, **top: Any) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request, **top}


def tls_context() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def post(port: int, path: str, body: bytes, headers: dict[str, str] | None = None,
         timeout: float = 10) -> tuple[int, bytes, float]:
    started = time.monotonic()
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=tls_context(), timeout=timeout)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        return resp.status, resp.read(), time.monotonic() - started
    finally:
        conn.close()


def hostile_inputs(valid: dict[str, Any]) -> list[tuple[str, bytes, dict[str, str], set[int]]]:
    """(what, body, headers, acceptable statuses) of every class of hostile input."""
    req = valid["request"]
    nested = b'{"a":' * 100_000 + b"1" + b"}" * 100_000
    deep_object: dict[str, Any] = {}
    node = deep_object
    for _ in range(400):
        node["x"] = {}
        node = node["x"]
    cases = [
        ("not JSON", b"{not json", {}, {400}),
        ("not an object", b"[1, 2, 3]", {}, {400}),
        ("no request", json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(), {},
         {400}),
        ("another kind", json.dumps(review(req, kind="Pod")).encode(), {}, {400}),
        ("request.kind not an object", json.dumps(review({**req, "kind": "ConfigMap"})).encode(), {}, {400}),
        ("resource a list", json.dumps(review({**req, "resource": ["configmaps"]})).encode(), {}, {400}),
        ("unknown operation", json.dumps(review({**req, "operation": "EXPLODE"})).encode(), {}, {400}),
        ("object a string", json.dumps(review({**req, "object": "a string"})).encode(), {}, {400}),
        ("oldObject a number", json.dumps(review({**req, "oldObject": 5})).encode(), {}, {400}),
        ("uid a number", json.dumps(review({**req, "uid": 7})).encode(), {}, {400}),
        ("userInfo groups mistyped", json.dumps(review({**req, "userInfo": {"groups": [1, 2]}})).encode(), {},
         {400}),
        ("nested 100,000 levels", nested, {}, {400}),
        ("an object nested 400 levels", json.dumps(review({**req, "object": deep_object})).encode(), {}, {400}),
        ("gzip header, plain body", json.dumps(valid).encode(), {"Content-Encoding": "gzip"}, {400}),
        ("unknown encoding", json.dumps(valid).encode(), {"Content-Encoding": "br"}, {400}),
        ("gzip bomb", gzip.compress(b" " * (64 * 1024 * 1024)), {"Content-Encoding": "gzip"}, {413}),
        ("oversized", b" " * (9 * 1024 * 1024), {}, {413}),
        ("truncated", json.dumps(valid).encode()[:-20], {}, {400}),
    ]
    return cases


@pytest.fixture
def webhook_policy(operator: OperatorProcess, policies: Policies, namespace: str) -> dict[str, Any]:
    """A policy only vpol's webhook can enforce, and a valid AdmissionReview it denies."""
    name = policies.create("hostile", deny_cm("!has(object.data) || !('bad' in object.data) || sha256('x') == ''",
                                              message="no bad key"))
    enforcement(policies, name, "Webhook")
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": namespace},
           "data": {"bad": "x", "token": SECRET_MARKER}}
    return review({**VALID_REQUEST, "namespace": namespace, "name": "cm", "object": obj})


def decided(port: int, valid: dict[str, Any]) -> float:
    """Send the valid request; it must be denied by the policy. Returns the time it took."""
    status, body, took = post(port, "/validate/fail", json.dumps(valid).encode())
    assert status == 200, body
    response = json.loads(body)["response"]
    assert response["uid"] == "hostile-valid" and response["allowed"] is False, response
    assert "no bad key" in response["status"]["message"], response
    return took


def metric(operator: OperatorProcess, reason: str) -> float:
    needle = f'vpol_admission_rejected_requests_total{{reason="{reason}"}} '
    return next((float(line.split()[-1]) for line in operator.metrics().splitlines() if line.startswith(needle)), 0.0)


def test_every_malformed_class_is_refused_at_once_and_valid_requests_are_decided_after_each(
        operator: OperatorProcess, webhook_policy: dict[str, Any]) -> None:
    port = operator.webhook_port
    log_before = len(operator.log_path.read_text(errors="replace"))
    decided(port, webhook_policy)
    for what, body, headers, statuses in hostile_inputs(webhook_policy):
        for path in ("/validate/fail", "/mutate/ignore", "/probe", "/validate-policy"):
            status, answer, took = post(port, path, body, headers)
            assert status in statuses, (what, path, status, answer[:300])
            assert took < 1.0 or what in ("gzip bomb", "oversized"), (what, path, took)
            message = json.loads(answer)
            line = message.get("message") or message["response"]["status"]["message"]
            assert "\n" not in line and line, (what, line)
        assert decided(port, webhook_policy) < 2.0, what
    # A refusal that could read the uid is still an AdmissionReview naming it.
    status, answer, _took = post(port, "/validate/fail", json.dumps(
        review({**webhook_policy["request"], "object": "a string"})).encode())
    assert status == 400 and json.loads(answer)["response"]["uid"] == "hostile-valid"
    assert metric(operator, "invalid-request") >= 1 and metric(operator, "too-deep") >= 1
    assert metric(operator, "encoding") >= 1 and metric(operator, "too-large") >= 1
    log = operator.log_path.read_text(errors="replace")[log_before:]
    assert "Traceback" not in log, log[-3000:]
    assert "refused a request" in log
    # No log line carries what the requests held, and the metrics hold no object content.
    assert SECRET_MARKER not in log and SECRET_MARKER not in operator.metrics()


def test_slow_and_many_clients_do_not_delay_valid_requests(operator: OperatorProcess,
                                                            webhook_policy: dict[str, Any]) -> None:
    port = operator.webhook_port
    stop = threading.Event()
    opened: list[ssl.SSLSocket] = []

    def slow_client() -> None:
        # Headers trickle in, a byte at a time, and never end.
        try:
            sock = tls_context().wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=5))
            opened.append(sock)
            sock.sendall(b"POST /validate/fail HTTP/1.1\r\nHost: x\r\n")
            while not stop.wait(1.0):
                sock.sendall(b"X")
        except OSError:
            pass  # closed by the server: what a limit does

    threads = [threading.Thread(target=slow_client, daemon=True) for _ in range(200)]
    for t in threads:
        t.start()
    try:
        time.sleep(3)
        took = [decided(port, webhook_policy) for _ in range(5)]
        assert max(took) < 2.0, took
        # A body announced but never sent is given up on, and answered.
        sock = tls_context().wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=30))
        sock.sendall(b"POST /validate/fail HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000\r\n\r\n{")
        answer = sock.recv(4096)
        sock.close()
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        # A burst of 400 valid requests, 20 at a time: every one decided.
        results: list[float] = []
        lock = threading.Lock()

        def burst() -> None:
            for _ in range(20):
                t = decided(port, webhook_policy)
                with lock:
                    results.append(t)

        workers = [threading.Thread(target=burst) for _ in range(20)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert len(results) == 400
    finally:
        stop.set()
        for sock in opened:
            try:
                sock.close()
            except OSError:
                pass
    assert "Traceback" not in operator.log()


def test_tls_below_1_2_is_refused(operator: OperatorProcess) -> None:
    ctx = tls_context()
    with warnings.catch_warnings():  # the versions are deprecated: that is the point
        warnings.simplefilter("ignore", DeprecationWarning)
        ctx.minimum_version = ssl.TLSVersion.TLSv1
        ctx.maximum_version = ssl.TLSVersion.TLSv1_1
    ctx.set_ciphers("ALL:@SECLEVEL=0")
    with pytest.raises(ssl.SSLError):
        with socket.create_connection(("127.0.0.1", operator.webhook_port), timeout=5) as raw:
            with ctx.wrap_socket(raw):
                pass
    # TLS 1.2 and 1.3 are accepted; a client offering both gets 1.3.
    for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
        ctx = tls_context()
        ctx.minimum_version = ctx.maximum_version = version
        with socket.create_connection(("127.0.0.1", operator.webhook_port), timeout=5) as raw:
            with ctx.wrap_socket(raw) as tls:
                assert tls.version() == {ssl.TLSVersion.TLSv1_2: "TLSv1.2", ssl.TLSVersion.TLSv1_3: "TLSv1.3"}[version]
    with socket.create_connection(("127.0.0.1", operator.webhook_port), timeout=5) as raw:
        with tls_context().wrap_socket(raw) as tls:
            assert tls.version() == "TLSv1.3"



def client_certificates(directory: Path) -> tuple[Path, bytes, bytes, bytes, bytes]:
    """A CA file, and a client certificate and key it signed (PEM), and another client pair it did not sign."""
    now = datetime.datetime.now(datetime.timezone.utc)

    def pair(issuer_key: Any, issuer: x509.Name, subject: str, ca: bool) -> tuple[Any, x509.Certificate]:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
        builder = (x509.CertificateBuilder().subject_name(name).issuer_name(issuer if not ca else name)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if not ca:
            builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        return key, builder.sign(key if ca else issuer_key, hashes.SHA256())

    pem = serialization.Encoding.PEM

    def key_pem(key: Any) -> bytes:
        return bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))

    ca_key, ca = pair(None, x509.Name([]), "api server clients", ca=True)
    client_key, client = pair(ca_key, ca.subject, "kube-apiserver", ca=False)
    other_ca_key, other_ca = pair(None, x509.Name([]), "someone else", ca=True)
    stranger_key, stranger = pair(other_ca_key, other_ca.subject, "a pod", ca=False)
    ca_file = directory / "client-ca.crt"
    ca_file.write_bytes(ca.public_bytes(pem))
    return ca_file, client.public_bytes(pem), key_pem(client_key), stranger.public_bytes(pem), key_pem(stranger_key)


def test_the_webhook_can_require_the_api_servers_client_certificate(
        local_clusters: Any, tmp_path: Path, unique_name: Any) -> None:
    """--webhook-client-ca: the API server, given a client certificate for vpol's webhook by its
    AdmissionConfiguration (Kubernetes' WebhookAdmission kubeconfig), is answered; a caller without one, or with one
    another CA signed, cannot even complete the TLS handshake."""
    ca_file, cert, key, stranger_cert, stranger_key = client_certificates(tmp_path)
    port = free_port()
    kubeconfig = tmp_path / "webhook-admission.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "users": [{
        "name": f"127.0.0.1:{port}", "user": {"client-certificate-data": base64.b64encode(cert).decode(),
                                              "client-key-data": base64.b64encode(key).decode()}}]}))
    plugin = {"apiVersion": "apiserver.config.k8s.io/v1", "kind": "WebhookAdmissionConfiguration",
              "kubeConfigFile": str(kubeconfig)}
    admission = tmp_path / "admission.yaml"
    admission.write_text(yaml.safe_dump({"apiVersion": "apiserver.config.k8s.io/v1", "kind": "AdmissionConfiguration",
                                         "plugins": [{"name": "ValidatingAdmissionWebhook", "configuration": plugin},
                                                     {"name": "MutatingAdmissionWebhook", "configuration": plugin}]}))
    cluster = local_clusters.start(tmp_path / "cp", apiserver_args=[f"--admission-control-config-file={admission}"])
    install_vpol(cluster)
    operator = OperatorProcess(sa_kubeconfig(cluster, tmp_path / "sa.kubeconfig"), tmp_path / "operator.log",
                               extra=("--webhook-client-ca", str(ca_file)))
    operator.webhook_port = port
    operator.start()
    try:
        namespace = unique_name("client-ca")
        cluster.kubectl("create", "namespace", namespace)
        policies = Policies(cluster, namespace, unique_name)
        name = policies.create("client-ca", deny_cm("!has(object.data) || !('bad' in object.data) || "
                                                    "sha256('x') == ''", message="no bad key"))
        enforcement(policies, name, "Webhook")  # the API server answered the webhook's probe: it was let in
        cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": namespace},
              "data": {"bad": "x"}}
        proc = cluster.kubectl("create", "-f", "-", "--dry-run=server", input=json.dumps(cm), check=False)
        assert proc.returncode != 0 and "no bad key" in proc.stderr, proc.stderr
        # Without a certificate, or with another CA's: no handshake at all.
        for pair in (None, (stranger_cert, stranger_key)):
            ctx = tls_context()
            if pair is not None:
                (tmp_path / "c.crt").write_bytes(pair[0])
                (tmp_path / "c.key").write_bytes(pair[1])
                ctx.load_cert_chain(tmp_path / "c.crt", tmp_path / "c.key")
            with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
                with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
                    with ctx.wrap_socket(raw) as tls:
                        tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                        if not tls.recv(1024):
                            raise ConnectionResetError("closed")
    finally:
        operator.stop()
