"""pytest fixtures for vpol's end-to-end tests against a real Kubernetes API.

Fixtures
--------
cluster (session)
    A live cluster, as a :class:`KubeCluster`: ``.kubeconfig`` (path),
    ``.api_client`` (``kubernetes.client.ApiClient``, admin), ``.configuration``,
    ``.kubectl(*args, check=True, input=None, timeout=120)``,
    ``.kubectl_path``, ``.local``/``.state_dir``/``.info`` (local control
    plane only) and ``.sa_api_client(namespace, name, ...)``.
    ``VPOL_TEST_KUBECONFIG`` selects an existing cluster (e.g. kind; its
    kubectl comes from ``VPOL_KUBECTL``, else PATH, else our build);
    otherwise the local control plane of tests/controlplane is built if needed
    and started in a temporary directory for the session.
namespace (function)
    Name of a fresh namespace (labelled ``vpol-e2e=true``), deleted afterwards.
sa_client (function)
    Factory ``sa_client(namespace, name, *, create=True, duration="1h")``
    returning an ``ApiClient`` that authenticates as that ServiceAccount with
    a token minted by ``kubectl create token``.
local_clusters (function)
    ``local_clusters.start(state_dir) -> KubeCluster`` starts an additional
    local control plane (``.exports`` holds the printed KUBECONFIG/PATH);
    ``local_clusters.stop(state_dir)``; all are stopped at teardown.
unique_name (session)
    ``unique_name(prefix, hint="")``: a random DNS-1123 name.
own_cluster (module)
    A local control plane of the test module's own (a :class:`KubeCluster`).
node_cluster (module)
    The same with a scheduler and a node whose Pods run (``cluster start --node``); ``local_clusters.start(dir,
    node=True)`` starts more.
controlplane_binary (session)
    Path of the built control-plane binary (its ``kubectl`` sits next to it).
controlplane_script (session)
    Path of ``tests/controlplane/cluster``.
installed_crds (session)
    Applies every CRD in ``crds/`` and waits until each is Established;
    returns the CRD manifests (skips when ``crds/`` has none).

When no cluster can be had (no Go, failed build, cluster does not start),
the tests that need one are skipped with the reason; with ``CI=true`` or
``VPOL_REQUIRE_E2E=1`` they fail instead.

Every test under tests/e2e gets the ``e2e`` marker.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator, NoReturn, Sequence

import pytest

REPO = Path(__file__).resolve().parents[2]
CONTROLPLANE = REPO / "tests" / "controlplane"
CLUSTER_SCRIPT = CONTROLPLANE / "cluster"
CRDS_DIR = REPO / "crds"
E2E_DIR = Path(__file__).resolve().parent

# A cold build of the control plane can take half an hour on 2 cores.
BUILD_TIMEOUT = float(os.environ.get("VPOL_CONTROLPLANE_BUILD_TIMEOUT", "3600"))
START_TIMEOUT = 180


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: end-to-end test against a real Kubernetes API server")
    config.addinivalue_line("markers", "slow: slow test")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if E2E_DIR in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.e2e)


def e2e_required() -> bool:
    """True when a missing cluster must fail the run instead of skipping."""
    return (os.environ.get("CI", "").lower() == "true"
            or os.environ.get("VPOL_REQUIRE_E2E", "").lower() not in ("", "0", "false", "no"))


def unavailable(reason: str) -> NoReturn:
    if e2e_required():
        pytest.fail(f"no Kubernetes cluster for e2e tests (required by CI=true / VPOL_REQUIRE_E2E): {reason}",
                    pytrace=False)
    pytest.skip(f"no Kubernetes cluster for e2e tests: {reason}")


def go_built(script: Path, what: str, timeout: float = 3600, args: Sequence[str] = ()) -> str:
    """The path a build script prints (a binary it builds with Go once and caches outside the repository),
    ``args`` its arguments. Without Go a local run skips; under CI=true (or VPOL_REQUIRE_E2E=1) that is a
    failure."""
    if not shutil.which("go"):
        if e2e_required():
            pytest.fail(f"Go is needed to build {what} ({script.relative_to(REPO)})")
        pytest.skip(f"Go is not installed: {what} cannot be built ({script.relative_to(REPO)})")
    proc = subprocess.run([str(script), *args], capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{script.relative_to(REPO)} failed:\n{proc.stderr[-3000:]}"
    return proc.stdout.strip().splitlines()[-1]


class KubectlError(subprocess.CalledProcessError):
    def __str__(self) -> str:
        return (f"{' '.join(map(str, self.cmd))} exited with {self.returncode}\n"
                f"stdout: {self.stdout}\nstderr: {self.stderr}")


class KubeCluster:
    """A reachable cluster: admin kubeconfig, Python client and kubectl."""

    def __init__(self, kubeconfig: str | os.PathLike[str], kubectl_path: str | os.PathLike[str],
                 state_dir: Path | None = None, info: dict[str, Any] | None = None,
                 exports: dict[str, str] | None = None) -> None:
        from kubernetes import client, config

        self.kubeconfig = str(kubeconfig)
        self.kubectl_path = str(kubectl_path)
        self.state_dir = state_dir
        self.local = state_dir is not None
        self.info = info or {}
        self.exports = exports or {}
        self.configuration = client.Configuration()
        config.load_kube_config(config_file=self.kubeconfig, client_configuration=self.configuration)
        self.api_client = client.ApiClient(self.configuration)

    def kubectl(self, *args: str, check: bool = True, input: str | None = None,
                timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run the matching kubectl against this cluster; text output captured."""
        cmd = [self.kubectl_path, *args]
        env = dict(os.environ, KUBECONFIG=self.kubeconfig)
        proc = subprocess.run(cmd, input=input, capture_output=True, text=True, env=env, timeout=timeout)
        if check and proc.returncode != 0:
            raise KubectlError(proc.returncode, cmd, proc.stdout, proc.stderr)
        return proc

    def sa_token(self, namespace: str, name: str, *, duration: str = "1h",
                 audiences: list[str] | None = None) -> str:
        args = ["create", "token", name, "-n", namespace, f"--duration={duration}"]
        for audience in audiences or []:
            args.append(f"--audience={audience}")
        return self.kubectl(*args).stdout.strip()

    def sa_api_client(self, namespace: str, name: str, *, create: bool = False,
                      duration: str = "1h") -> Any:
        """An ApiClient authenticated as ServiceAccount namespace/name (token via kubectl)."""
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        if create:
            try:
                client.CoreV1Api(self.api_client).create_namespaced_service_account(
                    namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name)))
            except ApiException as exc:
                if exc.status != 409:
                    raise
        token = self.sa_token(namespace, name, duration=duration)
        admin = self.configuration
        cfg = client.Configuration()
        cfg.host = admin.host
        cfg.ssl_ca_cert = admin.ssl_ca_cert
        cfg.verify_ssl = admin.verify_ssl
        cfg.tls_server_name = getattr(admin, "tls_server_name", None)
        cfg.api_key = {"authorization": f"Bearer {token}"}
        return client.ApiClient(cfg)

    def close(self) -> None:
        self.api_client.close()


def _run_script(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CLUSTER_SCRIPT), *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def _last_lines(text: str, n: int = 25) -> str:
    return "\n".join(text.strip().splitlines()[-n:])


@pytest.fixture(scope="session")
def controlplane_script() -> Path:
    return CLUSTER_SCRIPT


@pytest.fixture(scope="session")
def controlplane_binary() -> Path:
    """Build (or reuse the cached) control-plane binary; skip/fail when impossible."""
    if shutil.which("go") is None:
        unavailable("the Go toolchain is not installed, so tests/controlplane cannot be built")
    try:
        proc = _run_script("build", timeout=BUILD_TIMEOUT)
    except subprocess.TimeoutExpired:
        unavailable(f"`tests/controlplane/cluster build` did not finish within {BUILD_TIMEOUT:.0f}s")
    if proc.returncode != 0:
        unavailable(f"`tests/controlplane/cluster build` failed:\n{_last_lines(proc.stderr)}")
    binary = Path(proc.stdout.strip().splitlines()[-1])
    if not binary.is_file():
        unavailable(f"`cluster build` printed {binary}, which is not a file")
    return binary


def start_local_cluster(state: Path, timeout: float = START_TIMEOUT,
                        apiserver_args: Sequence[str] = (), node: bool = False) -> tuple[Path, dict[str, str]]:
    """Start a control plane with state in `state` (and more kube-apiserver flags; with `node`, a scheduler
    and a node whose Pods run); return (state, exported env).

    Raises RuntimeError with the tail of the logs when it does not come up.
    """
    proc = _run_script("start", str(state), "--timeout", str(int(timeout)),
                       *(f"--apiserver-arg={a}" for a in apiserver_args), *(["--node"] if node else []),
                       timeout=timeout + 60)
    if proc.returncode != 0:
        raise RuntimeError(f"`cluster start {state}` failed:\n{_last_lines(proc.stderr, 60)}")
    return state, exported_env(proc.stdout)


def exported_env(stdout: str) -> dict[str, str]:
    """The variables `cluster start` prints as `export NAME=VALUE` lines (PATH: the added part)."""
    env: dict[str, str] = {}
    for line in stdout.splitlines():
        m = re.match(r"export (\w+)=(.*)$", line.strip())
        if m:
            value = m.group(2)
            if m.group(1) == "PATH":
                value = value.removesuffix(':"$PATH"')
            env[m.group(1)] = shlex.split(value)[0]
    return env


def stop_local_cluster(state: Path) -> None:
    proc = _run_script("stop", str(state), timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"`cluster stop {state}` failed:\n{proc.stderr}")


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeCluster]:
    external = os.environ.get("VPOL_TEST_KUBECONFIG")
    if external:
        kubectl = os.environ.get("VPOL_KUBECTL") or shutil.which("kubectl")
        if kubectl is None:
            kubectl = str(request.getfixturevalue("controlplane_binary").parent / "kubectl")
        try:
            c = KubeCluster(external, kubectl)
            c.kubectl("get", "--raw", "/readyz", timeout=30)
        except Exception as exc:  # noqa: BLE001 - any failure means "no cluster"
            unavailable(f"VPOL_TEST_KUBECONFIG={external} is not usable: {exc}")
        yield c
        c.close()
        return

    yield from _local_cluster(request.getfixturevalue("controlplane_binary"), tmp_path_factory.mktemp("controlplane"))


def _local_cluster(binary: Path, state: Path, node: bool = False) -> Iterator[KubeCluster]:
    """A local control plane with its state in ``state`` (``node``: and a node) for as long as the generator
    runs."""
    import json

    try:
        start_local_cluster(state, node=node)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        try:
            stop_local_cluster(state)
        finally:
            unavailable(str(exc))
    try:
        info = json.loads((state / "ready.json").read_text())
        c = KubeCluster(state / "kubeconfig", binary.parent / "kubectl", state_dir=state, info=info)
    except Exception:
        stop_local_cluster(state)
        raise
    try:
        yield c
    finally:
        c.close()
        stop_local_cluster(state)
        shutil.rmtree(state / "etcd", ignore_errors=True)  # keep the logs, drop the data


class LocalClusters:
    """Start extra local control planes in a test; all are stopped at teardown."""

    def __init__(self, binary: Path) -> None:
        self.binary = binary
        self.started: list[Path] = []

    def start(self, state: Path, apiserver_args: Sequence[str] = (), node: bool = False) -> KubeCluster:
        """Start a fresh cluster with state in `state` (skips/fails like `cluster`)."""
        import json

        self.started.append(state)
        try:
            _, exports = start_local_cluster(state, apiserver_args=apiserver_args, node=node)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            self.stop(state)
            unavailable(str(exc))
        info = json.loads((state / "ready.json").read_text())
        return KubeCluster(state / "kubeconfig", self.binary.parent / "kubectl", state_dir=state, info=info,
                           exports=exports)

    def stop(self, state: Path) -> None:
        stop_local_cluster(state)

    def stop_all(self) -> None:
        for state in self.started:
            stop_local_cluster(state)


@pytest.fixture(scope="module")
def own_cluster(controlplane_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeCluster]:
    """A local control plane for one test module alone (for installs that would clash with the session
    cluster's, and for counts over a whole cluster); stopped after the module."""
    yield from _local_cluster(controlplane_binary, tmp_path_factory.mktemp("own-controlplane"))


@pytest.fixture(scope="module")
def node_cluster(controlplane_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeCluster]:
    """A local control plane with a scheduler and a node whose Pods run (`cluster start --node`), for one test
    module; stopped after it."""
    yield from _local_cluster(controlplane_binary, tmp_path_factory.mktemp("node-controlplane"), node=True)


@pytest.fixture
def local_clusters(controlplane_binary: Path) -> Iterator[LocalClusters]:
    clusters = LocalClusters(controlplane_binary)
    try:
        yield clusters
    finally:
        clusters.stop_all()


def unique_name(prefix: str, hint: str = "") -> str:
    """A DNS-1123 label: prefix, a slug of hint, and a random suffix."""
    slug = re.sub(r"[^a-z0-9-]+", "-", hint.lower()).strip("-")
    base = f"{prefix}-{slug}"[:50].rstrip("-") if slug else prefix
    return f"{base}-{uuid.uuid4().hex[:6]}"


@pytest.fixture(name="unique_name", scope="session")
def unique_name_fixture() -> Callable[..., str]:
    return unique_name


@pytest.fixture
def namespace(cluster: KubeCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    core = client.CoreV1Api(cluster.api_client)
    name = unique_name("e2e", request.node.name.removeprefix("test_"))
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels={"vpol-e2e": "true"})))
    yield name
    try:
        core.delete_namespace(name)
    except ApiException as exc:
        if exc.status != 404:
            raise


@pytest.fixture
def sa_client(cluster: KubeCluster) -> Iterator[Callable[..., Any]]:
    clients: list[Any] = []

    def make(namespace: str, name: str, *, create: bool = True, duration: str = "1h") -> Any:
        api_client = cluster.sa_api_client(namespace, name, create=create, duration=duration)
        clients.append(api_client)
        return api_client

    yield make
    for api_client in clients:
        api_client.close()


def crd_files() -> list[Path]:
    if not CRDS_DIR.is_dir():
        return []
    return sorted(p for p in CRDS_DIR.iterdir() if p.suffix in (".yaml", ".yml", ".json"))


def load_crds() -> list[dict[str, Any]]:
    import yaml

    docs: list[dict[str, Any]] = []
    for path in crd_files():
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                docs.append(doc)
    return docs


@pytest.fixture(scope="session")
def installed_crds(cluster: KubeCluster) -> list[dict[str, Any]]:
    crds = load_crds()
    if not crds:
        pytest.skip(f"no CustomResourceDefinition manifests in {CRDS_DIR}")
    apply_crds(cluster, crds)
    return crds


def apply_crds(cluster: KubeCluster, crds: list[dict[str, Any]]) -> None:
    """Apply the CRD documents (only: crds/ may also hold e.g. a kustomization) and wait until each is Established."""
    import json

    for crd in crds:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=vpol-e2e",
                        "-f", "-", input=json.dumps(crd))
    for crd in crds:
        cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                        f"customresourcedefinition/{crd['metadata']['name']}")
