"""The operator image, built for real (tests/image/build) and run: as the CLI, and as the operator against
the real control plane under the manifests' ServiceAccount.

Skipped without a Docker engine (and no way to start one) locally; a failure under CI=true.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests.e2e.conftest import e2e_required, unavailable
from tests.e2e.operator_process import REPO, free_port, sa_kubeconfig
from tests.e2e.test_admission import dry_cm
from tests.e2e.test_operator import CM_RULE, expect_denied
from tests.e2e.vpol_fixtures import Policies, policies, vpol_installed, wait_for  # noqa: F401 - fixtures

BUILD = REPO / "tests" / "image" / "build"
DEPLOYMENT = REPO / "manifests" / "operator" / "deployment.yaml"


def docker(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="session")
def image() -> str:
    """Build (or reuse: the engine caches layers) the runtime image; its tag."""
    can_start = shutil.which("dockerd") or shutil.which("apt-get")
    if not shutil.which("docker") and not can_start:
        unavailable("no Docker engine: install docker.io, or run tests/image/build")
    if not e2e_required() and subprocess.run(["docker", "info"], capture_output=True).returncode != 0 \
            and os.environ.get("VPOL_BUILD_IMAGE") != "1":
        unavailable("no Docker engine running (tests/image/build starts one; or set VPOL_BUILD_IMAGE=1)")
    proc = subprocess.run([str(BUILD)], capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise AssertionError(f"tests/image/build failed:\n{proc.stderr[-4000:]}")
    values = dict(line.split("=", 1) for line in proc.stdout.split() if "=" in line)
    return values["IMAGE"]


def deployment_container() -> tuple[dict[str, Any], dict[str, Any]]:
    deploy = yaml.safe_load(DEPLOYMENT.read_text())
    pod = deploy["spec"]["template"]["spec"]
    return pod, pod["containers"][0]


def in_image(image: str, *args: str, user: str | None = None) -> subprocess.CompletedProcess[str]:
    extra = ["--user", user] if user else []
    return docker("run", "--rm", "--network", "none", *extra, "--entrypoint", args[0], image, *args[1:],
                  check=False)


def test_runs_as_the_numeric_non_root_user_without_a_shell(image: str) -> None:
    config = json.loads(docker("image", "inspect", image).stdout)[0]["Config"]
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"][-1] == "run" and Path(config["Entrypoint"][0]).name == "vpol"
    ids = in_image(image, "/opt/vpol/bin/python", "-c", "import os; print(os.getuid(), os.getgid())")
    assert ids.stdout.split() == ["65532", "65532"], ids.stderr
    for shell in ("/bin/sh", "/bin/bash", "/usr/bin/sh"):
        proc = in_image(image, shell, "-c", "true")
        assert proc.returncode != 0, f"{shell} exists in the image"


def _normalised(text: str, examples: str) -> str:
    return text.replace(examples, "EXAMPLES")


def test_cli_in_the_image_agrees_with_the_host(image: str) -> None:
    host_version = subprocess.run(["vpol", "--version"], capture_output=True, text=True)
    image_version = in_image(image, "/opt/vpol/bin/vpol", "--version")
    assert image_version.returncode == 0 and image_version.stdout == host_version.stdout
    examples = str(REPO / "examples")
    for command in (["check"], ["test"]):
        host = subprocess.run(["vpol", *command, examples], capture_output=True, text=True, cwd=REPO)
        inside = docker("run", "--rm", "--network", "none", "--read-only", "-v", f"{examples}:/examples:ro",
                        "--entrypoint", "/opt/vpol/bin/vpol", image, *command, "/examples", check=False)
        assert inside.returncode == host.returncode, (command, inside.stderr)
        assert _normalised(inside.stdout + inside.stderr, "/examples") == \
            _normalised(host.stdout + host.stderr, examples), command


def test_every_port_and_path_the_deployment_names_exists_in_the_image(image: str) -> None:
    pod, container = deployment_container()
    config = json.loads(docker("image", "inspect", image).stdout)[0]["Config"]
    exposed = {int(p.split("/")[0]) for p in config.get("ExposedPorts") or {}}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert set(ports.values()) <= exposed, (ports, exposed)
    args = " ".join(container["args"])
    for flag, name in (("--metrics-port", "metrics"), ("--liveness-port", "health"), ("--webhook-port", "webhook")):
        assert f"{flag}={ports[name]}" in args, (flag, ports)
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["port"] in ports
    assert str(pod["securityContext"]["runAsUser"]) == config["User"].split(":")[0]
    assert str(pod["securityContext"]["runAsGroup"]) == config["User"].split(":")[1]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = [m["mountPath"] for m in container["volumeMounts"]]
    check = in_image(image, "/opt/vpol/bin/python", "-c",
                     f"import os, sys; sys.exit(0 if all(os.path.isdir(p) for p in {mounts!r}) else 1)")
    assert check.returncode == 0, f"mount points missing in the image: {mounts}"


@pytest.fixture(name="operator")
def operator_container(image: str, vpol_installed: Any, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """`vpol run` from the image: host network, read-only root, tmpfs /tmp, the ServiceAccount's token
    (the operator the `policies` fixture waits for, in this module)."""
    kubeconfig = sa_kubeconfig(vpol_installed, tmp_path / "kubeconfig")
    kubeconfig.chmod(0o644)
    ports = {"metrics": free_port(), "health": free_port(), "webhook": free_port()}
    name = f"vpol-e2e-{os.getpid()}-{ports['metrics']}"
    _pod, container = deployment_container()
    docker("run", "-d", "--name", name, "--network", "host", "--read-only", "--tmpfs", "/tmp:rw,size=64m",
           "-v", f"{kubeconfig}:/config/kubeconfig:ro", image,
           "--kubeconfig", "/config/kubeconfig", f"--metrics-port={ports['metrics']}",
           f"--liveness-port={ports['health']}", f"--webhook-port={ports['webhook']}",
           f"--webhook-url=https://127.0.0.1:{ports['webhook']}", "--scan-interval=30", "--resync=30")
    info = {"name": name, "ports": ports, "args": container["args"]}
    try:
        wait_for("the operator in the image to be live", lambda: _get(ports["health"], "/healthz"), 90, 0.5)
        yield info
    finally:
        logs = docker("logs", name, check=False)
        info["logs"] = logs.stdout + logs.stderr
        docker("rm", "-f", name, check=False)


def _get(port: int, path: str) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=3) as r:
            return r.read().decode() if r.status == 200 else ""
    except OSError:
        return ""


def test_the_image_runs_the_operator_against_the_real_control_plane(
        operator: dict[str, Any], policies: Policies, cluster: Any, namespace: str) -> None:
    operator_container = operator
    core = client.CoreV1Api(cluster.api_client)
    core.create_namespaced_config_map(namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="existing"), data={"x": "1"}))
    deny = policies.create("image-deny", {
        "matchConstraints": {"resourceRules": [CM_RULE]},
        "validations": [{"expression": "!has(object.data) || !('forbidden' in object.data)",
                         "message": "forbidden key (from the image)"}]})
    audit = policies.create("image-audit", {
        "validationActions": ["Audit"], "matchConstraints": {"resourceRules": [CM_RULE]},
        "validations": [{"expression": "has(object.data) && 'owner' in object.data", "message": "owner wanted"}]})
    policies.wait_condition(deny, "Ready", "True", timeout=90)
    assert policies.get(deny)["status"]["enforcement"] == "NativeVAP" and policies.vap(f"vpol-{deny}")
    expect_denied(lambda: dry_cm(cluster, namespace, "bad", {"forbidden": "1"}), "forbidden key (from the image)")

    custom = client.CustomObjectsApi(cluster.api_client)

    def report() -> Any:
        items = custom.list_namespaced_custom_object("wgpolicyk8s.io", "v1alpha2", namespace, "policyreports")["items"]
        return [r for i in items for r in i.get("results") or [] if r.get("policy") == audit]

    found = wait_for("a PolicyReport result from the scanner in the image", report, 120, 1)
    assert found[0]["result"] == "fail"
    ports = operator_container["ports"]
    assert "vpol_policies" in _get(ports["metrics"], "/metrics")
    assert _get(ports["health"], "/healthz")

    # SIGTERM: a clean stop within the Deployment's terminationGracePeriodSeconds (default 30)
    pod, _container = deployment_container()
    grace = int(pod.get("terminationGracePeriodSeconds", 30))
    started = time.monotonic()
    docker("stop", "-t", str(grace), operator_container["name"], timeout=grace + 30)
    took = time.monotonic() - started
    state = json.loads(docker("inspect", operator_container["name"]).stdout)[0]["State"]
    assert took < grace, f"stopping took {took:.1f}s"
    assert state["ExitCode"] == 0, state
