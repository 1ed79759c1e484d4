"""Rendering vpol's Helm chart and its kustomize manifests for tests.

``helm_binary()`` builds (once, cached: tests/helm/build) the helm of the pinned version; locally a
machine without Go skips, under CI=true (or VPOL_REQUIRE_E2E=1) that is a failure, as for the
control plane.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import go_built

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "manifests" / "helm" / "vpol"
HERE = Path(__file__).resolve().parent
BUILD = HERE / "build"
#: Every documented value changed at once (except what excludes another: VARIANTS).
CHANGED = HERE / "changed-values.yaml"
#: The values CHANGED cannot change together with the others, one file each.
VARIANTS = {name: HERE / f"variant-{name}.yaml" for name in ("webhook-off", "no-metrics-service", "cert-secret",
                                                                   "no-disruption-budget")}
NAMESPACE = "vpol-system"
#: Labels Helm's conventions add to every object (the kustomize manifests carry the rest).
HELM_LABELS = ("helm.sh/chart", "app.kubernetes.io/instance", "app.kubernetes.io/version")

Doc = dict[str, Any]


@functools.cache
def helm_binary() -> str:
    return go_built(BUILD, "helm")


def helm(*args: str, check: bool = True, env: dict[str, str] | None = None,
         timeout: float = 300) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([helm_binary(), *args], capture_output=True, text=True, env=env, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def value_args(files: list[Path] = [], sets: list[str] = []) -> list[str]:  # noqa: B006 - read only
    out: list[str] = []
    for f in files:
        out += ["-f", str(f)]
    for s in sets:
        out += ["--set", s]
    return out


def template(files: list[Path] = [], sets: list[str] = [], namespace: str = NAMESPACE,  # noqa: B006
             check: bool = True) -> list[Doc]:
    proc = helm("template", "vpol", str(CHART), "-n", namespace, *value_args(files, sets), check=check)
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def kustomize(path: Path) -> list[Doc]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl is needed to render the kustomize manifests")
    out = subprocess.run([kubectl, "kustomize", str(path)], capture_output=True, text=True, check=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def without_helm_labels(doc: Doc) -> Doc:
    """The object without the labels only Helm's conventions add."""
    labels = doc["metadata"].get("labels") or {}
    for key in HELM_LABELS:
        labels.pop(key, None)
    if labels.get("app.kubernetes.io/managed-by") == "Helm":
        del labels["app.kubernetes.io/managed-by"]
    return doc


def key(doc: Doc) -> tuple[str, str, str]:
    md = doc["metadata"]
    return doc["kind"], md.get("namespace", ""), md["name"]


def by_key(docs: list[Doc]) -> dict[tuple[str, str, str], Doc]:
    out = {}
    for d in docs:
        assert key(d) not in out, f"rendered twice: {key(d)}"
        out[key(d)] = d
    return out


def find(docs: list[Doc], kind: str, name: str) -> Doc | None:
    return next((d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name), None)


def container(docs: list[Doc]) -> Doc:
    deployment = find(docs, "Deployment", "vpol")
    assert deployment is not None
    [c] = deployment["spec"]["template"]["spec"]["containers"]
    return dict(c)
