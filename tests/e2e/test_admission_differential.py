"""The webhook decides like `vpol apply`: every example and Kyverno CLI corpus policy, through the real API server.

Each policy of examples/ and ../shared/conformance/kyverno-cli (Kubernetes
mode, no context files, exceptions or request-only data: those need inputs a
live request does not have) is created once, limited to a namespace of its
own, with native generation off so vpol's webhook enforces it, and with
validationActions [Deny] so every violation shows as a denial. Every
namespaced resource of its suite is then sent through the API server as a
server-side dry-run create in that namespace. The API server defaults objects
before validating admission, so `vpol apply` is run on the defaulted objects
(as a dry run in a namespace without policies returns them), and its results
must give the same decision for every pair: denied when the result is `fail`
(or `warn`), or `error` under failurePolicy Fail.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, dynamic
from kubernetes.client.rest import ApiException

from tests.e2e.operator_process import REPO
from tests.e2e.vpol_fixtures import operator, vpol_installed, wait_for  # noqa: F401 - fixtures
from vpol.cli.inputs import Loaded, load_policies, load_resources
from vpol.cli.kyverno_test import find_test_files

CORPUS = REPO.parent / "shared" / "conformance" / "kyverno-cli"
#: Test-file keys whose inputs a live admission request cannot reproduce.
NEEDS_CONTEXT = ("context", "clusterResources", "apiCallResponses", "variables", "exceptions", "jsonPayloads",
                 "userinfo")
#: Expression fragments that read request-only or external data.
NEEDS_REQUEST = ("userInfo", "http.", "globalContext.", "GetMetadata", "resource.")


def _cases() -> list[tuple[dict[str, Any], list[dict[str, Any]], str]]:
    """(policy body, namespaced resources of its suite, origin) for every usable policy."""
    out = []
    for test_file in find_test_files([str(REPO / "examples"), str(CORPUS)]):
        for spec in yaml.safe_load_all(test_file.read_text()):
            out.extend(_suite_cases(test_file, spec or {}))
    return out


def _suite_cases(test_file: Path, spec: dict[str, Any]) -> list[tuple[dict[str, Any], list[dict[str, Any]], str]]:
    out = []
    if any(spec.get(k) for k in NEEDS_CONTEXT):
        return out
    base = test_file.parent
    rel = lambda items: [str(base / i) for i in ([items] if isinstance(items, str) else items or [])]  # noqa
    loaded = load_policies(rel(spec.get("policies")), Loaded(), strict_kinds=False)
    load_resources(rel(spec.get("resources")), loaded)
    resources = [d.data for d in loaded.resources if isinstance(d.data, dict)]
    for policy in loaded.policies:
        text = json.dumps(policy.raw.get("spec", {}))
        m = policy.spec.match_constraints
        if policy.kind != "ValidatingPolicy" or policy.json_mode or any(f in text for f in NEEDS_REQUEST) or \
                m is None or (m.namespace_selector is not None and not m.namespace_selector.empty) or \
                not policy.spec.evaluation.admission_enabled:
            continue
        out.append((policy.raw, resources, f"{test_file.parent.name}/{policy.name}"))
    return out


def _prepare(raw: dict[str, Any], name: str, namespace: str) -> dict[str, Any]:
    body = json.loads(json.dumps(raw))
    body["apiVersion"] = "policies.kyverno.io/v1"  # every served version has the same schema
    body["metadata"] = {"name": name, "annotations": (raw.get("metadata") or {}).get("annotations") or {}}
    body.pop("status", None)
    spec = body["spec"]
    spec["validationActions"] = ["Deny"]
    spec.setdefault("autogen", {})["validatingAdmissionPolicy"] = {"enabled": False}
    spec["matchConstraints"]["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    return body


def _clean(obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    obj = json.loads(json.dumps(obj))
    md = obj.setdefault("metadata", {})
    for key in ("resourceVersion", "uid", "creationTimestamp", "generation", "managedFields", "ownerReferences"):
        md.pop(key, None)
    md["namespace"] = namespace
    obj.pop("status", None)
    return obj


@pytest.mark.slow
def test_webhook_decisions_agree_with_vpol_apply(vpol_installed: Any, operator: Any, tmp_path: Path,
                                                 unique_name: Any) -> None:
    cluster = vpol_installed
    cases = _cases()
    assert len(cases) >= 25, f"only {len(cases)} usable policies found"
    dyn = dynamic.DynamicClient(cluster.api_client)
    core = client.CoreV1Api(cluster.api_client)
    custom = client.CustomObjectsApi(cluster.api_client)
    run = unique_name("diff")
    neutral = f"{run}-neutral"
    namespaces = [neutral]
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=neutral)))
    created: list[str] = []
    pairs: list[tuple[str, str, dict[str, Any], str]] = []  # (policy, namespace, defaulted object, origin)
    skipped: dict[str, int] = {}
    try:
        for i, (raw, resources, origin) in enumerate(cases):
            ns, name = f"{run}-{i}", f"{run}-{i}"
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
            namespaces.append(ns)
            custom.create_cluster_custom_object("policies.kyverno.io", "v1", "validatingpolicies",
                                                _prepare(raw, name, ns))
            created.append(name)
            for obj in resources:
                try:
                    api = dyn.resources.get(api_version=obj.get("apiVersion"), kind=obj.get("kind"))
                except Exception:  # noqa: BLE001 - a kind this cluster does not serve
                    skipped["kind not served"] = skipped.get("kind not served", 0) + 1
                    continue
                if not api.namespaced:
                    skipped["cluster-scoped"] = skipped.get("cluster-scoped", 0) + 1
                    continue
                try:
                    defaulted = api.create(body=_clean(obj, neutral), namespace=neutral, dry_run="All").to_dict()
                except ApiException as exc:
                    skipped[f"invalid object ({exc.status})"] = skipped.get(f"invalid object ({exc.status})", 0) + 1
                    continue
                pairs.append((name, ns, _clean(defaulted, ns), origin))
        assert len(pairs) >= 150, (len(pairs), skipped)

        def all_enforced() -> bool:
            for name in created:
                status = custom.get_cluster_custom_object("policies.kyverno.io", "v1", "validatingpolicies",
                                                          name).get("status") or {}
                if status.get("enforcement") != "Webhook":
                    return False
            return True

        wait_for("every policy enforced by the webhook", all_enforced, 180, 1)
        time.sleep(3)  # every replica's server reloads within a second of a change

        # vpol apply on the same (defaulted) objects
        policy_file, resource_file = tmp_path / "policies.yaml", tmp_path / "resources.yaml"
        policy_file.write_text(yaml.safe_dump_all(
            [custom.get_cluster_custom_object("policies.kyverno.io", "v1", "validatingpolicies", n)
             for n in created]))
        resource_file.write_text(yaml.safe_dump_all([obj for _n, _ns, obj, _o in pairs]))
        proc = subprocess.run([sys.executable, "-m", "vpol.cli.main", "apply", "--policy", str(policy_file),
                               "--resource", str(resource_file), "-o", "json"], capture_output=True, text=True,
                              cwd=REPO, timeout=600)
        assert proc.returncode in (0, 1), proc.stderr
        results = json.loads(proc.stdout)
        by_policy = {n: fp for n, fp in ((p["metadata"]["name"], p["spec"].get("failurePolicy", "Fail"))
                                         for p in yaml.safe_load_all(policy_file.read_text()))}
        offline: dict[tuple[str, str, str, str], bool] = {}
        for r in results:
            denied = r["result"] in ("fail", "warn") or (r["result"] == "error" and by_policy[r["policy"]] == "Fail")
            offline[(r["policy"], r["kind"], r["namespace"], r["name"])] = denied

        disagreements = []
        decided = denials = 0
        for name, ns, obj, origin in pairs:
            api = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
            try:
                api.create(body=obj, namespace=ns, dry_run="All")
                denied = False
            except ApiException as exc:
                if exc.status != 403 or f"Policy {name} " not in (exc.body or ""):
                    skipped[f"API server refused ({exc.status})"] = skipped.get(f"API server refused ({exc.status})",
                                                                                0) + 1
                    continue
                denied = True
            decided += 1
            denials += denied
            expected = offline.get((name, obj["kind"], ns, obj["metadata"]["name"]), False)
            if expected != denied:
                disagreements.append(f"{origin} {obj['kind']}/{obj['metadata']['name']}: "
                                     f"vpol apply says {'deny' if expected else 'allow'}, "
                                     f"the webhook {'denied' if denied else 'allowed'}")
        print(f"{len(cases)} policies, {decided} (policy, resource) decisions compared, {denials} denials; "
              f"skipped: {skipped}")
        assert decided >= 150 and denials >= 30 and decided - denials >= 30, (decided, denials, skipped)
        assert not disagreements, "\n".join(disagreements)
    finally:
        for name in created:
            try:
                custom.delete_cluster_custom_object("policies.kyverno.io", "v1", "validatingpolicies", name)
            except ApiException:
                pass
        for ns in namespaces:
            try:
                core.delete_namespace(ns)
            except ApiException:
                pass
