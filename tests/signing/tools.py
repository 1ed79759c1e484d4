"""Real parts for the image verification tests: an OCI registry (go-containerregistry's, with the referrers API and
optional token authentication: tests/signing/registry), images pushed with crane and signed and attested with cosign
v3.1.2 (the version Kyverno 1.19.1 links), all built from Go modules by tests/signing/build and cached, all offline.

``Signer`` drives cosign as a user does (NOTES.md section 14): a key pair from ``cosign generate-key-pair``, then
``cosign sign`` / ``cosign attest`` with ``--tlog-upload=false`` (no Rekor here), in the Sigstore bundle format
cosign v3 writes by default or the legacy ``.sig``/``.att`` tags (``bundle=False``).
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import socket
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.e2e.conftest import go_built

BUILD = Path(__file__).resolve().parent / "build"


@dataclass(frozen=True)
class Tools:
    crane: str
    cosign: str
    registry: str
    notation: str


@functools.cache
def tools() -> Tools:
    return Tools(go_built(BUILD, "crane", args=("crane",)), go_built(BUILD, "cosign", args=("cosign",)),
                 go_built(BUILD, "the test registry", args=("registry",)),
                 go_built(BUILD, "notation", args=("notation",)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RegistryProcess:
    """A registry on 127.0.0.1 (plain HTTP, as go-containerregistry and vpol use for loopback hosts)."""

    def __init__(self, *, user: str = "", password: str = "", referrers: bool = True, port: int = 0):
        self.user, self.password, self.referrers = user, password, referrers
        self.port = port or free_port()
        self.proc: subprocess.Popen[str] | None = None

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> RegistryProcess:
        args = [tools().registry, "--address", self.host]
        if self.user:
            args += ["--user", self.user, "--password", self.password]
        if not self.referrers:
            args.append("--no-referrers")
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.startswith("listening on"), f"the test registry did not start: {line!r}"
        return self

    def requests(self) -> dict[str, int]:
        """How many requests the registry served, by kind (manifests, blobs, referrers, tags, other)."""
        import urllib.request

        with urllib.request.urlopen(f"http://{self.host}/_requests") as answer:
            return {str(k): int(v) for k, v in json.loads(answer.read()).items()}

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None


class Signer:
    """Pushes images and signs them with cosign, in a HOME of its own (keys, docker config for registry logins)."""

    def __init__(self, home: Path, password: str = "vpol-test"):
        self.home = home
        self.password = password
        (home / ".docker").mkdir(parents=True, exist_ok=True)
        self._auths: dict[str, Any] = {}
        self._write_docker_config()

    def _write_docker_config(self) -> None:
        (self.home / ".docker" / "config.json").write_text(json.dumps({"auths": self._auths}))

    def login(self, host: str, user: str, password: str) -> None:
        import base64

        self._auths[host] = {"auth": base64.b64encode(f"{user}:{password}".encode()).decode()}
        self._write_docker_config()

    @property
    def docker_config(self) -> Path:
        return self.home / ".docker" / "config.json"

    def _env(self) -> dict[str, str]:
        return {**os.environ, "HOME": str(self.home), "DOCKER_CONFIG": str(self.home / ".docker"),
                "XDG_CONFIG_HOME": str(self.home / ".config"), "COSIGN_PASSWORD": self.password,
                "COSIGN_YES": "true"}

    # -- Notary (the notation CLI, test certificates it makes itself) ------------------------------------------

    def notation_key(self, name: str) -> str:
        """A Notary signing key with its self-signed test certificate (``notation cert generate-test``); the
        certificate's PEM."""
        self._run(tools().notation, "cert", "generate-test", name)
        return (self.home / ".config" / "notation" / "localkeys" / f"{name}.crt").read_text()

    def notation_sign(self, reference: str, key: str) -> None:
        """Sign ``host/repo@digest`` with ``notation sign`` (a JWS envelope, the default)."""
        self._run(tools().notation, "sign", "--insecure-registry", "--key", key, reference)

    def push_referrer(self, host: str, repository: str, subject: str, artifact_type: str,
                      content: dict[str, Any]) -> str:
        """Attach an artifact (``content`` as its one JSON layer) to the manifest ``subject``, as ``oras attach``
        does; its digest."""
        import hashlib
        import urllib.request

        def upload(data: bytes) -> str:
            digest = "sha256:" + hashlib.sha256(data).hexdigest()
            start = urllib.request.Request(f"http://{host}/v2/{repository}/blobs/uploads/", method="POST")
            with urllib.request.urlopen(start) as answer:
                location = answer.headers["Location"]
            url = location if location.startswith("http") else f"http://{host}{location}"
            put = urllib.request.Request(f"{url}{'&' if '?' in url else '?'}digest={digest}", data=data,
                                         method="PUT", headers={"Content-Type": "application/octet-stream"})
            urllib.request.urlopen(put).close()
            return digest

        layer = json.dumps(content).encode()
        empty = b"{}"
        subject_manifest = urllib.request.urlopen(urllib.request.Request(
            f"http://{host}/v2/{repository}/manifests/{subject}",
            headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})).read()
        manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "artifactType": artifact_type,
                    "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": upload(empty),
                               "size": len(empty)},
                    "layers": [{"mediaType": artifact_type, "digest": upload(layer), "size": len(layer)}],
                    "subject": {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": subject,
                                "size": len(subject_manifest)}}
        body = json.dumps(manifest).encode()
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        urllib.request.urlopen(urllib.request.Request(
            f"http://{host}/v2/{repository}/manifests/{digest}", data=body, method="PUT",
            headers={"Content-Type": "application/vnd.oci.image.manifest.v1+json"})).close()
        return digest

    def _run(self, *args: str, timeout: float = 120) -> str:
        proc = subprocess.run(list(args), capture_output=True, text=True, env=self._env(), cwd=self.home,
                              timeout=timeout)
        assert proc.returncode == 0, f"{' '.join(args[:3])} failed:\n{proc.stderr[-2000:]}"
        return proc.stdout

    def key_pair(self, name: str) -> tuple[Path, str]:
        """(private key file, public key PEM) of a new cosign key pair."""
        self._run(tools().cosign, "generate-key-pair", "--output-key-prefix", name)
        return self.home / f"{name}.key", (self.home / f"{name}.pub").read_text()

    def push_image(self, host: str, repository: str, tag: str = "v1", content: str = "") -> str:
        """Push a one-layer image (its digest unique to ``content``, random when empty); returns its digest."""
        with tempfile.TemporaryDirectory() as tmp:
            layer = Path(tmp) / "layer.tar"
            payload = Path(tmp) / "app"
            payload.write_text(content or secrets.token_hex(16))
            with tarfile.open(layer, "w") as tar:
                info = tar.gettarinfo(str(payload), arcname="app")
                info.mtime = 0
                with payload.open("rb") as f:
                    tar.addfile(info, f)
            image = f"{host}/{repository}:{tag}"
            self._run(tools().crane, "append", "--oci-empty-base", "-f", str(layer), "-t", image)
        return self._run(tools().crane, "digest", image).strip()

    def sign(self, image: str, key: Path, *, bundle: bool = True, annotations: dict[str, str] | None = None,
             certificate: tuple[str, str] | None = None) -> None:
        """``certificate``: (the signing certificate, its chain) attached to the signature."""
        args = [tools().cosign, "sign", "--key", str(key), "--yes", "--use-signing-config=false",
                "--tlog-upload=false", f"--new-bundle-format={str(bundle).lower()}"]
        if certificate is not None:
            leaf, chain = self.home / f"leaf-{time.monotonic_ns()}.pem", self.home / f"chain-{time.monotonic_ns()}.pem"
            leaf.write_text(certificate[0])
            chain.write_text(certificate[1])
            args += ["--certificate", str(leaf), "--certificate-chain", str(chain)]
        for k, v in (annotations or {}).items():
            args += ["-a", f"{k}={v}"]
        self._run(*args, image)

    def attest(self, image: str, key: Path, predicate: dict[str, Any], kind: str, *, bundle: bool = True) -> None:
        path = self.home / f"predicate-{time.monotonic_ns()}.json"
        path.write_text(json.dumps(predicate))
        self._run(tools().cosign, "attest", "--key", str(key), "--yes", "--use-signing-config=false",
                  "--tlog-upload=false", f"--new-bundle-format={str(bundle).lower()}", "--predicate", str(path),
                  "--type", kind, image)

    def verify(self, image: str, public_key: str) -> bool:
        """What cosign itself says of the signature (the reference the tests compare vpol with)."""
        path = self.home / f"verify-{time.monotonic_ns()}.pub"
        path.write_text(public_key)
        proc = subprocess.run([tools().cosign, "verify", "--key", str(path), "--insecure-ignore-tlog=true", image],
                              capture_output=True, text=True, env=self._env(), timeout=120)
        return proc.returncode == 0


def certificate_chain(public_pem: str, *, days: int = 30, expired: bool = False, email: str = "",
                      oidc_issuer: str = "") -> tuple[str, str]:
    """(a leaf certificate for ``public_pem``, its chain: an intermediate and a self-signed root), made with
    ``cryptography`` as a private CA would make them (code signing); with ``email`` and ``oidc_issuer``, as a
    Fulcio-like CA makes a keyless signing certificate (the subject in the SAN, the issuer in Fulcio's extension
    1.3.6.1.4.1.57264.1.8)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = (now - datetime.timedelta(days=days + 2), now - datetime.timedelta(days=1)) if expired else \
        (now - datetime.timedelta(hours=1), now + datetime.timedelta(days=days))

    def name(common: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])

    def build(subject: str, key: Any, issuer: str, issuer_key: Any, ca: bool) -> x509.Certificate:
        builder = (x509.CertificateBuilder().subject_name(name(subject)).issuer_name(name(issuer))
                   .public_key(key).serial_number(x509.random_serial_number())
                   .not_valid_before(start).not_valid_after(end)
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if ca:
            builder = builder.add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                                            critical=True)
        else:
            builder = builder.add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False,
                                                          False), critical=True)
            builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False)
            if email:
                builder = builder.add_extension(x509.SubjectAlternativeName([x509.RFC822Name(email)]), critical=True)
            if oidc_issuer:
                text = oidc_issuer.encode()
                builder = builder.add_extension(x509.UnrecognizedExtension(
                    x509.ObjectIdentifier("1.3.6.1.4.1.57264.1.8"), bytes([0x0C, len(text)]) + text), critical=False)
        return builder.sign(issuer_key, hashes.SHA256())

    root_key, middle_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    root = build("vpol test root", root_key.public_key(), "vpol test root", root_key, True)
    middle = build("vpol test intermediate", middle_key.public_key(), "vpol test root", root_key, True)
    leaf = build("signer@vpol.test", serialization.load_pem_public_key(public_pem.encode()),
                 "vpol test intermediate", middle_key, False)
    pem = lambda c: c.public_bytes(serialization.Encoding.PEM).decode()  # noqa: E731
    return pem(leaf), pem(middle) + pem(root)
