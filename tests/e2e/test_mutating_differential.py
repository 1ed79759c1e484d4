"""`vpol apply` mutates exactly as the API server does through the MutatingAdmissionPolicies vpol generates.

For every MutatingPolicy of examples/mutating, the objects `vpol generate map`
makes are created (limited to a namespace of the policy's own), and every
resource of its suite, plus variations of each (a second container, an init
container, no labels or annotations, no security context), is sent through
the API server as a server-side dry-run create in that namespace. The same
resource, defaulted by the API server in a namespace without policies (what
admission sees), goes through vpol's engine offline; vpol's result is then
defaulted by the API server too (the API server re-defaults after mutating),
and both must be equal, field for field, list order included, once the
server-set metadata is removed. A policy that the API server refuses to apply
(an error, a denial) must be an `error` in vpol.
"""

from __future__ import annotations

import copy
import difflib
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, dynamic
from kubernetes.client.rest import ApiException

from tests.e2e.operator_process import REPO
from vpol.engine.subjects import subject_for
from vpol.policies.mutating.engine import MutatingPolicyEngine, mutate_all
from vpol.policies.mutating.map import desired_map_objects
from vpol.policies.mutating.model import parse_mutating_policy

EXAMPLES = REPO / "examples" / "mutating"

_POD_SPEC_PATHS = (("spec",), ("spec", "template", "spec"), ("spec", "jobTemplate", "spec", "template", "spec"))


def _pod_spec(obj: dict[str, Any]) -> dict[str, Any] | None:
    for path in _POD_SPEC_PATHS:
        node: Any = obj
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict) and isinstance(node.get("containers"), list):
            return node
    return None


def variations(obj: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The resource and generated variations of it (pod-bearing kinds only)."""
    out = [("as written", obj)]
    if _pod_spec(obj) is None:
        return out
    extra = copy.deepcopy(obj)
    _pod_spec(extra)["containers"].append({"name": "extra", "image": "registry.example/extra:1.0"})  # type: ignore[index]
    out.append(("second container", extra))
    init = copy.deepcopy(obj)
    _pod_spec(init).setdefault("initContainers", []).append(  # type: ignore[union-attr]
        {"name": "init", "image": "busybox:1.36"})
    out.append(("init container", init))
    bare = copy.deepcopy(obj)
    bare["metadata"].pop("labels", None)
    bare["metadata"].pop("annotations", None)
    out.append(("no labels or annotations", bare))
    plain = copy.deepcopy(obj)
    spec = _pod_spec(plain)
    assert spec is not None
    spec.pop("securityContext", None)
    for container in spec["containers"]:
        container.pop("securityContext", None)
        container.pop("resources", None)
    out.append(("no security context or resources", plain))
    return out


_UID_LABELS = ("controller-uid", "batch.kubernetes.io/controller-uid")


def _clean(obj: dict[str, Any]) -> dict[str, Any]:
    """Without what the API server sets per object: metadata it owns, a Job's uid-derived selector and labels
    (made again on every create), and the ServiceAccount plugin's token volume and mounts (another admission
    plugin's, which also runs again after mutating policies changed a Pod)."""
    # The ServiceAccount admission plugin names the token volume at random on every create.
    obj = json.loads(re.sub(r"kube-api-access-[a-z0-9]{5}", "kube-api-access", json.dumps(obj)))
    md = obj.setdefault("metadata", {})
    for key in ("resourceVersion", "uid", "creationTimestamp", "generation", "managedFields", "namespace"):
        md.pop(key, None)
    obj.pop("status", None)
    spec = _pod_spec(obj)
    if spec is not None:  # the ServiceAccount plugin's token volume and mounts: another plugin's doing
        if isinstance(spec.get("volumes"), list):
            spec["volumes"] = [v for v in spec["volumes"] if v.get("name") != "kube-api-access"]
            if not spec["volumes"]:
                del spec["volumes"]
        for container in [*spec.get("containers", []), *spec.get("initContainers", [])]:
            if isinstance(container.get("volumeMounts"), list):
                container["volumeMounts"] = [m for m in container["volumeMounts"] if m.get("name") != "kube-api-access"]
                if not container["volumeMounts"]:
                    del container["volumeMounts"]
    if obj.get("kind") == "Job":
        spec = obj.get("spec") or {}
        spec.pop("selector", None)
        for labels in (md.get("labels"), ((spec.get("template") or {}).get("metadata") or {}).get("labels")):
            if isinstance(labels, dict):
                for key in _UID_LABELS:
                    labels.pop(key, None)
    return obj


def _suites() -> list[tuple[Path, list[dict[str, Any]]]]:
    out = []
    for policy_file in sorted(EXAMPLES.glob("*/policy.yaml")):
        resources = [d for d in yaml.safe_load_all((policy_file.parent / "resources.yaml").read_text()) if d]
        out.append((policy_file, resources))
    return out


@pytest.mark.slow
def test_vpol_apply_mutates_like_the_generated_maps(cluster: Any, unique_name: Any) -> None:
    suites = _suites()
    assert len(suites) >= 6, "the mutating examples are missing"
    dyn = dynamic.DynamicClient(cluster.api_client)
    core = client.CoreV1Api(cluster.api_client)
    run = unique_name("mdiff")
    neutral = f"{run}-neutral"
    namespaces = [neutral]
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=neutral)))
    generated: list[tuple[str, str, str]] = []  # (apiVersion, kind, name)
    compared = changed = errors = 0
    disagreements: list[str] = []
    ineligible: list[str] = []
    try:
        for index, (policy_file, resources) in enumerate(suites):
            raw = yaml.safe_load(policy_file.read_text())
            ns = f"{run}-{index}"
            if raw["kind"].startswith("Namespaced"):  # moved into the test's namespace, as every object is
                raw["metadata"]["namespace"] = ns
            policy, problems = parse_mutating_policy(raw)
            assert policy is not None, problems
            engine = MutatingPolicyEngine(policy)
            plan = desired_map_objects(policy, force=True)
            if not plan.objects:  # not expressible natively (a Kyverno-only function): nothing to compare with
                ineligible.append(f"{policy.name}: {plan.reason}")
                continue
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
            namespaces.append(ns)
            for obj in plan.objects:
                obj = copy.deepcopy(obj)
                obj["metadata"]["name"] = f"{run}-{index}-{obj['metadata']['name']}"[:253]
                if obj["kind"] == "MutatingAdmissionPolicy":
                    obj["spec"]["matchConstraints"]["namespaceSelector"] = {
                        "matchLabels": {"kubernetes.io/metadata.name": ns}}
                else:
                    obj["spec"]["policyName"] = f"{run}-{index}-{obj['spec']['policyName']}"[:253]
                dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"]).create(body=obj)
                generated.append((obj["apiVersion"], obj["kind"], obj["metadata"]["name"]))

            cases = []
            for resource in resources:
                for label, variant in variations(resource):
                    try:
                        api = dyn.resources.get(api_version=variant.get("apiVersion"), kind=variant.get("kind"))
                    except Exception:  # noqa: BLE001 - a kind this cluster does not serve
                        continue
                    if not api.namespaced:
                        continue
                    body = _clean(variant)
                    defaulted = _clean(api.create(body=body, namespace=neutral, dry_run="All").to_dict())
                    cases.append((f"{policy.name} {variant['kind']}/{body['metadata'].get('name')} ({label})",
                                  api, body, defaulted))

            def server(api: Any, body: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
                try:
                    return _clean(api.create(body=body, namespace=ns, dry_run="All").to_dict()), ""
                except ApiException as exc:
                    return None, f"{exc.status}: {exc.body}"

            def offline(defaulted: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
                obj, results = mutate_all([engine], subject_for({**defaulted, "metadata": {
                    **defaulted["metadata"], "namespace": ns}}))
                if any(r.result == "error" for r in results):
                    return None, "; ".join(r.message for r in results)
                assert obj is not None
                api = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
                return _clean(api.create(body=_clean(obj), namespace=neutral, dry_run="All").to_dict()), ""

            expected = [(name, api, body, defaulted, *offline(defaulted)) for name, api, body, defaulted in cases]
            # The API server picks new admission policies up within a few seconds, each generated MAP and
            # binding (one pair per autogen variant, so per kind) on its own: for every kind, wait until one
            # object that vpol says changes does so, then compare everything. (Waiting for one kind only let a
            # CronJob variant created a moment later be compared before the API server had loaded it.)
            changing = {c[2].get("kind"): c for c in expected if c[4] is not None and c[4] != c[3]}
            deadline = time.monotonic() + 30
            for probe in changing.values():
                while server(probe[1], probe[2])[0] == probe[3] and time.monotonic() < deadline:
                    time.sleep(0.5)
            for name, api, body, defaulted, vpol_obj, vpol_error in expected:
                got, server_error = server(api, body)
                compared += 1
                if vpol_obj is None or got is None:
                    errors += 1
                    if (vpol_obj is None) != (got is None):
                        disagreements.append(f"{name}: vpol error={vpol_error!r}, server error={server_error!r}")
                    continue
                changed += got != defaulted
                if got != vpol_obj:
                    diff = "\n".join(
                        difflib.unified_diff(
                            yaml.safe_dump(got, sort_keys=True).splitlines(),
                            yaml.safe_dump(vpol_obj, sort_keys=True).splitlines(), "api-server", "vpol",
                            lineterm=""))
                    disagreements.append(f"{name}:\n{diff}")
    finally:
        for api_version, kind, name in reversed(generated):
            try:
                dyn.resources.get(api_version=api_version, kind=kind).delete(name=name)
            except ApiException:
                pass
        for ns_name in namespaces:
            try:
                core.delete_namespace(ns_name)
            except ApiException:
                pass
    assert len(ineligible) <= len(suites) // 3, ineligible
    assert not disagreements, f"{len(disagreements)} of {compared} disagree:\n" + "\n\n".join(disagreements[:10])
    # The comparison must mean something: most objects are changed by their policy.
    assert compared >= 60 and changed >= compared // 3, (compared, changed, errors)
