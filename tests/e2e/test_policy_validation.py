"""vpol's kinds are validated at apply time, on the real API server (the operator runs as its ServiceAccount).

`kubectl apply` of a policy that does not compile is refused with the messages,
field paths and positions `vpol check` prints for the same file; type-check
findings come back as warnings. The configuration has failurePolicy Ignore: with
the operator stopped the policy is admitted, and its status reports the errors
once the operator is back.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from tests.e2e.operator_process import REPO, OperatorProcess
from tests.e2e.test_operator import CM_RULE
from tests.e2e.vpol_fixtures import Policies, operator, policies, vpol_installed, wait_for  # noqa: F401

CONFIGURATION = "vpol-policy-validation"


def vpol_check(path: Path) -> list[str]:
    """The problem lines `vpol check` prints for ``path``, without their ``file:line:col:`` prefix (the API
    server hands the webhook an object, not a file), and the caret excerpts under them."""
    proc = subprocess.run([sys.executable, "-m", "vpol.cli.main", "check", str(path)], capture_output=True,
                          text=True, cwd=REPO)
    out = []
    for line in proc.stdout.splitlines():
        if " checked: " in line or not line.strip():
            continue
        for label in ("error: ", "warning: "):
            if line.startswith(str(path)) and label in line:
                line = line[line.index(label):]
                break
        out.append(line.strip())
    return out


def configuration(cluster: Any) -> Any:
    return client.AdmissionregistrationV1Api(cluster.api_client).read_validating_webhook_configuration(
        CONFIGURATION)


def served_by(cluster: Any, operator: OperatorProcess) -> Any:
    """The configuration, once it sends requests to this operator (the leader rewrites what an earlier one wrote)."""
    config = configuration(cluster)
    url = config.webhooks[0].client_config.url or ""
    return config if url.startswith(f"https://127.0.0.1:{operator.webhook_port}/") else None


def broken_policies(namespace: str, name: str) -> list[dict[str, Any]]:
    """A ValidatingPolicy with a syntax error, and a MutatingPolicy with an undeclared reference."""
    ns = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    return [
        {"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy", "metadata": {"name": f"{name}-v"},
         "spec": {"matchConstraints": {"resourceRules": [CM_RULE], "namespaceSelector": ns},
                  "validations": [{"expression": "object.data.owner ==", "message": "owner"}]}},
        {"apiVersion": "policies.kyverno.io/v1", "kind": "MutatingPolicy", "metadata": {"name": f"{name}-m"},
         "spec": {"matchConstraints": {"resourceRules": [CM_RULE], "namespaceSelector": ns},
                  "mutations": [{"patchType": "ApplyConfiguration",
                                 "applyConfiguration": {"expression": "Object{data: nosuchvar}"}}]}},
    ]


def test_a_policy_that_does_not_compile_is_refused_with_vpol_checks_messages(
        operator: OperatorProcess, cluster: Any, namespace: str, unique_name: Any, tmp_path: Path) -> None:
    wait_for("the policy-validation webhook configuration", lambda: served_by(cluster, operator), 90)
    for doc in broken_policies(namespace, unique_name("invalid")):
        path = tmp_path / f"{doc['kind']}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        expected = vpol_check(path)
        assert any(line.startswith("error: ") for line in expected), expected
        proc = cluster.kubectl("apply", "-f", str(path), check=False)
        assert proc.returncode != 0, f"{doc['kind']} was admitted: {proc.stdout}"
        assert "is invalid" in proc.stderr, proc.stderr
        for line in expected:  # every problem line, with its field path and CEL position, and the caret excerpt
            assert line in proc.stderr, (line, proc.stderr)
        kind = "vpol" if doc["kind"] == "ValidatingPolicy" else "mpol"
        assert cluster.kubectl("get", kind, doc["metadata"]["name"], check=False).returncode != 0


def test_type_check_findings_are_warnings(operator: OperatorProcess, policies: Policies, cluster: Any,
                                          namespace: str, unique_name: Any) -> None:
    wait_for("the policy-validation webhook configuration", lambda: served_by(cluster, operator), 90)
    name = unique_name("warned")
    body = policies.body(name, {"matchConstraints": {"resourceRules": [CM_RULE]},
                                "validations": [{"expression": "object.spec.nosuchfield == 'x'"}]})
    proc = cluster.kubectl("create", "-f", "-", input=json.dumps(body))
    policies.created.append(name)
    assert "Warning:" in proc.stderr and "spec.validations[0].expression" in proc.stderr, proc.stderr
    assert "undefined field 'spec'" in proc.stderr, proc.stderr


def test_with_the_operator_stopped_the_policy_is_admitted_and_reported_when_it_returns(
        operator: OperatorProcess, policies: Policies, cluster: Any, namespace: str, unique_name: Any) -> None:
    config = wait_for("the policy-validation webhook configuration", lambda: served_by(cluster, operator), 90)
    assert config.webhooks[0].failure_policy == "Ignore"
    operator.stop()
    try:
        docs = broken_policies(namespace, unique_name("down"))
        for doc in docs:
            cluster.kubectl("create", "-f", "-", input=json.dumps(doc))
    finally:
        operator.start()
    vpol = docs[0]["metadata"]["name"]
    policies.created.append(vpol)
    compiled = policies.wait_condition(vpol, "Compiled", "False")
    assert "spec.validations[0].expression (1:" in compiled["message"], compiled
    mpol = docs[1]["metadata"]["name"]
    mutating = Policies(cluster, namespace, unique_name, kind="MutatingPolicy", plural="mutatingpolicies")
    mutating.created.append(mpol)
    try:
        cond = mutating.wait_condition(mpol, "Compiled", "False")
        assert "undeclared reference to 'nosuchvar'" in cond["message"], cond
    finally:
        mutating.cleanup()
