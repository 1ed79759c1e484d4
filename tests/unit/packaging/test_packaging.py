"""Packaging checks that need no cluster: vpol's own Deployment passes vpol's example policies,
the Dockerfile follows the rules the README promises, and the manifests hang together."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from vpol.cli.main import main

REPO = Path(__file__).resolve().parents[3]


def test_own_deployment_passes_every_example_policy(capsys):
    code = main(["apply", "--policy", str(REPO / "examples" / "pod-security"), str(REPO / "examples" / "best-practices"),
                 "--resource", str(REPO / "manifests" / "operator" / "deployment.yaml"), "-o", "json"])
    results = json.loads(capsys.readouterr().out)
    assert code == 0, [r for r in results if r["result"] != "pass"]
    assert len(results) >= 20 and all(r["result"] == "pass" for r in results)


def test_dockerfile_rules():
    text = (REPO / "Dockerfile").read_text()
    bases = re.findall(r"^ARG PYTHON_IMAGE=(\S+)", text, re.M)
    assert bases and ":latest" not in bases[0] and re.search(r":\d+\.\d+\.\d+", bases[0])
    runtime = text[text.index("AS runtime"):text.index("AS dev")]
    assert re.search(r"^USER \d+:\d+$", runtime, re.M)
    assert 'ENTRYPOINT ["/opt/vpol/bin/vpol", "run"]' in runtime
    # a whole virtual environment moves between stages: no dependence on the base's pip scheme
    assert "python3 -m venv /opt/vpol" in text and "COPY --from=build /opt/vpol /opt/vpol" in runtime
    assert "/opt/vpol/bin/pip install --no-deps ." in text  # the project metadata the README installs from
    assert "org.opencontainers.image.source" in text and "org.opencontainers.image.version" in text


def test_deployment_matches_the_entrypoint_and_rbac():
    docs = list(yaml.safe_load_all((REPO / "manifests" / "operator" / "deployment.yaml").read_text()))
    [deploy] = docs
    pod = deploy["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert "command" not in container  # the image's entrypoint (vpol run) is used
    assert deploy["spec"]["replicas"] == 2 and "--peering=vpol" in container["args"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    rbac = list(yaml.safe_load_all((REPO / "manifests" / "operator" / "rbac.yaml").read_text()))
    sa = next(d for d in rbac if d["kind"] == "ServiceAccount")
    assert pod["serviceAccountName"] == sa["metadata"]["name"]
    for folder in ("manifests", "manifests/operator", "manifests/monitoring"):
        kustomization = yaml.safe_load((REPO / folder / "kustomization.yaml").read_text())
        for res in kustomization["resources"]:
            assert (REPO / folder / res).exists(), (folder, res)


def test_the_operator_does_not_load_the_generated_core_api():
    """kubernetes.client's CoreV1Api module costs the operator 21 MiB of resident memory (its models), for three
    calls that vpol.kube.dynamic makes generically: no operator source names it, and building the objects that
    used it does not load it. The same for EventsV1Api (PolicyViolation Events are created generically)."""
    import subprocess
    import sys
    from pathlib import Path

    sources = Path(__file__).resolve().parents[3] / "operator" / "vpol"
    assert [str(p) for p in sources.rglob("*.py") if "CoreV1Api(" in p.read_text()
            or "EventsV1Api(" in p.read_text()] == []
    code = ("import sys\n"
            "from kubernetes import client\n"
            "from vpol.kube.webhook_tls import WebhookTLS\n"
            "from vpol.controller.admission.namespaces import Namespaces\n"
            "from vpol.kube.objects import Objects\n"
            "import vpol.controller.run, vpol.controller.handlers, vpol.controller.scanner\n"
            "api = client.ApiClient()\n"
            "WebhookTLS(api, 'vpol-system'); Namespaces(api); Objects(api)\n"
            "print(sorted(m for m in sys.modules if m.endswith(('core_v1_api', 'events_v1_api'))))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
