"""`vpol apply` with ImageValidatingPolicies against the test registry: a row per (policy, resource), signed images
pass, unsigned ones fail naming the image and the attestor, pod controllers are checked by the autogen variants of a
policy on Pods, and a private registry is read with ``--registry-credentials``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from vpol.cli.main import main

from tests.signing.tools import RegistryProcess, Signer


def ivpol(public_key: str, host: str) -> dict[str, Any]:
    return {"apiVersion": "policies.kyverno.io/v1", "kind": "ImageValidatingPolicy", "metadata": {"name": "signed"},
            "spec": {"matchConstraints": {"resourceRules": [
                         {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                          "resources": ["pods"]}]},
                     "matchImageReferences": [{"glob": f"{host}/*"}],
                     "attestors": [{"name": "trusted", "cosign": {"key": {"data": public_key},
                                                                  "ctlog": {"insecureIgnoreTlog": True}}}],
                     "validations": [{"expression": "images.containers.map(i, verifyImageSignatures(i, "
                                                    "[attestors.trusted])).all(n, n > 0)",
                                      "message": "images must be signed"}]}}


def pod(name: str, image: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": image}]}}


def deployment(name: str, image: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "c", "image": image}]}}}}


def cronjob(name: str, image: str) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": name, "namespace": "default"},
            "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {"spec": {
                "restartPolicy": "Never", "containers": [{"name": "c", "image": image}]}}}}}}


def apply(tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: dict[str, Any],
          resources: list[dict[str, Any]], *extra: str) -> tuple[int, list[dict[str, Any]]]:
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(policy))
    (tmp_path / "resources.yaml").write_text(yaml.safe_dump_all(resources))
    code = main(["apply", "--policy", str(tmp_path / "policy.yaml"), "--resource", str(tmp_path / "resources.yaml"),
                 "-o", "json", "--no-progress", *extra])
    return code, json.loads(capsys.readouterr().out)


def test_signed_pass_unsigned_fail(tmp_path: Path, capsys: pytest.CaptureFixture[str], registry: RegistryProcess,
                                   signer: Signer, keys: dict[str, tuple[Path, str]]) -> None:
    host = registry.host
    signed = f"{host}/cli-signed@{signer.push_image(host, 'cli-signed')}"
    signer.sign(signed, keys["trusted"][0])
    unsigned = f"{host}/cli-unsigned@{signer.push_image(host, 'cli-unsigned')}"
    code, rows = apply(tmp_path, capsys, ivpol(keys["trusted"][1], host),
                       [pod("good", signed), pod("bad", unsigned), deployment("web", unsigned),
                        deployment("web-signed", signed), cronjob("nightly", unsigned),
                        pod("elsewhere", "registry.example/app:v1"),
                        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "default"}}])
    by_name = {row["name"]: row for row in rows}
    assert set(by_name) == {"good", "bad", "web", "web-signed", "nightly", "elsewhere"}
    assert by_name["good"]["result"] == by_name["web-signed"]["result"] == "pass"
    assert by_name["elsewhere"]["result"] == "pass"  # matchImageReferences select nothing there
    for name in ("bad", "web", "nightly"):
        assert by_name[name]["result"] == "fail"
        assert by_name[name]["message"].startswith(f"images must be signed (image {unsigned}: attestor trusted: ")
    assert code == 1


def test_a_private_registry_needs_its_credentials(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  keys: dict[str, tuple[Path, str]]) -> None:
    private = RegistryProcess(user="ci", password="pw").start()
    try:
        signer = Signer(tmp_path / "home")
        signer.login(private.host, "ci", "pw")
        image = f"{private.host}/app@{signer.push_image(private.host, 'app')}"
        signer.sign(image, keys["trusted"][0])
        policy = ivpol(keys["trusted"][1], private.host)
        code, rows = apply(tmp_path, capsys, policy, [pod("p", image)])
        assert code == 1 and rows[0]["result"] == "error" and "unauthorized" in rows[0]["message"].lower()
        code, rows = apply(tmp_path, capsys, policy, [pod("p", image)],
                           "--registry-credentials", str(signer.docker_config))
        assert code == 0 and rows[0]["result"] == "pass"
    finally:
        private.stop()


def test_vpol_test_verifies_against_the_registry(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 registry: RegistryProcess, signer: Signer,
                                                 keys: dict[str, tuple[Path, str]]) -> None:
    """Kyverno's test format for the kind, evaluated against the registry the images name."""
    host = registry.host
    signed = f"{host}/test-signed@{signer.push_image(host, 'test-signed')}"
    signer.sign(signed, keys["trusted"][0])
    stranger = f"{host}/test-stranger@{signer.push_image(host, 'test-stranger')}"
    signer.sign(stranger, keys["other"][0])
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(ivpol(keys["trusted"][1], host)))
    (tmp_path / "resources.yaml").write_text(yaml.safe_dump_all([pod("signed", signed), pod("stranger", stranger),
                                                                 deployment("web", stranger)]))
    results = [{"policy": "signed", "resources": ["signed"], "kind": "Pod", "result": "pass"},
               {"policy": "signed", "resources": ["stranger"], "kind": "Pod", "result": "fail"},
               {"policy": "signed", "resources": ["web"], "kind": "Deployment", "result": "fail"}]
    (tmp_path / "kyverno-test.yaml").write_text(yaml.safe_dump({
        "apiVersion": "cli.kyverno.io/v1alpha1", "kind": "Test", "metadata": {"name": "signed-images"},
        "policies": ["policy.yaml"], "resources": ["resources.yaml"], "results": results}))
    assert main(["test", str(tmp_path)]) == 0
    assert "3 agreed, 0 disagreed" in capsys.readouterr().out
