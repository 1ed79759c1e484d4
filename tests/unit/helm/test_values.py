"""What needs no helm to check: the chart's values documented, in docs/install.md and true to `vpol run`; the Policy
Reporter configuration docs/operator.md shows."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from vpol.cli.main import build_parser

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "manifests" / "helm" / "vpol"
GENERATE = REPO / "manifests" / "helm" / "generate.py"


def schema() -> dict[str, Any]:
    return dict(json.loads((CHART / "values.schema.json").read_text()))


def values() -> dict[str, Any]:
    return dict(yaml.safe_load((CHART / "values.yaml").read_text()))


def leaves(node: Any, schema_node: dict[str, Any], path: str = "") -> list[str]:
    """Dotted paths of values.yaml, down to where the schema stops describing properties."""
    if isinstance(node, dict) and schema_node.get("properties") and "description" not in schema_node:
        return [p for k, v in node.items() for p in leaves(v, schema_node["properties"].get(k, {}),
                                                            f"{path}.{k}" if path else k)]
    return [path]


def test_the_chart_copies_and_the_readme_table_are_current():
    proc = subprocess.run([sys.executable, str(GENERATE), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr + "\n(run manifests/helm/generate.py)"


def test_every_value_is_described_and_every_described_value_exists():
    sys.path.insert(0, str(GENERATE.parent))
    try:
        import generate  # type: ignore[import-not-found]
    finally:
        sys.path.pop(0)
    documented = {path for path, _node in generate.documented(schema())} - {"global"}
    assert set(leaves(values(), schema())) == documented


def test_the_schema_refuses_unknown_keys_everywhere():
    def walk(node: dict[str, Any], path: str) -> None:
        if node.get("type") == "object" and node.get("properties"):
            assert node.get("additionalProperties") is False, path
            for key, child in node["properties"].items():
                walk(child, f"{path}.{key}")
        items = node.get("items")
        if isinstance(items, dict):
            walk(items, f"{path}[]")
    walk(schema(), "(root)")


def test_operator_defaults_are_vpol_runs_own():
    """The chart's defaults (rendered as explicit flags) are the defaults `vpol run` has without them."""
    args = build_parser().parse_args(["run"])
    v = values()
    expected = {
        "workers": v["operator"]["workers"], "resync": v["operator"]["resync"],
        "scan_interval": v["operator"]["scanInterval"], "eval_timeout": v["operator"]["evalTimeout"],
        "eval_memory_limit": v["operator"]["evalMemoryLimit"], "vap_generation": v["operator"]["vapGeneration"],
        "webhook": "on" if v["webhook"]["enabled"] else "off", "webhook_timeout": v["webhook"]["timeoutSeconds"],
        "webhook_workers": v["webhook"]["workers"], "webhook_eval_timeout": v["webhook"]["evalTimeout"],
        "webhook_url": v["webhook"]["url"], "webhook_cert_secret": v["webhook"]["certSecret"],
        "metrics_port": v["ports"]["metrics"], "liveness_port": v["ports"]["health"],
        "webhook_port": v["ports"]["webhook"], "http_allow": v["operator"]["httpAllow"] or None,
    }
    assert {k: getattr(args, k) for k in expected} == expected


def test_the_readme_shows_the_policy_reporter_configuration_the_test_runs():
    """The Policy Reporter snippet of docs/operator.md is examples/policy-reporter/values.yaml (which the e2e test
    uses)."""
    import re

    readme = (REPO / "docs" / "operator.md").read_text()
    section = readme[readme.index("**Policy Reporter**"):]
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block, "no yaml block after **Policy Reporter** in docs/operator.md"
    example = yaml.safe_load((REPO / "examples" / "policy-reporter" / "values.yaml").read_text())
    assert yaml.safe_load(block.group(1)) == example
