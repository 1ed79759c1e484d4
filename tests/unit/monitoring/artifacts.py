"""vpol's monitoring artifacts (manifests/monitoring/) as data for tests.

Loads the alerting rules and the Grafana dashboard, lists every PromQL
expression they hold, substitutes Grafana's dashboard variables so an
expression can run against a plain Prometheus, and renders
``prometheusrule.yaml`` from ``rules.yaml`` (the two must stay identical).

Run ``python -m tests.unit.monitoring.artifacts`` to rewrite
``prometheusrule.yaml`` after editing ``rules.yaml``.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[3]
MONITORING = REPO / "manifests" / "monitoring"
RULES_FILE = MONITORING / "rules.yaml"
DASHBOARD_FILE = MONITORING / "dashboard.json"
PROMETHEUS_RULE_FILE = MONITORING / "prometheusrule.yaml"
SERVICE_MONITOR_FILE = MONITORING / "servicemonitor.yaml"

PROMETHEUS_RULE_HEADER = (
    "# Generated from rules.yaml by `python -m tests.unit.monitoring.artifacts`;\n"
    "# edit rules.yaml, not this file (a unit test compares the two).\n"
)


@dataclass(frozen=True)
class Query:
    """One PromQL expression and where it comes from (for messages)."""

    source: str
    expr: str


def load_rule_groups(path: Path = RULES_FILE) -> list[dict[str, Any]]:
    doc = yaml.safe_load(path.read_text())
    return list(doc["groups"])


def rules(path: Path = RULES_FILE) -> list[dict[str, Any]]:
    """Every rule (alerting or recording) of every group."""
    return [rule for group in load_rule_groups(path) for rule in group["rules"]]


def rule_queries(path: Path = RULES_FILE) -> list[Query]:
    out = []
    for rule in rules(path):
        name = rule.get("alert") or rule.get("record")
        out.append(Query(f"rule {name}", str(rule["expr"]).strip()))
    return out


def load_dashboard(path: Path = DASHBOARD_FILE) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


def panels(dashboard: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every panel, including those nested in collapsed rows."""
    out: list[dict[str, Any]] = []
    for panel in dashboard.get("panels", []):
        out.append(panel)
        out.extend(panel.get("panels", []))
    return out


def dashboard_queries(dashboard: Mapping[str, Any] | None = None) -> list[Query]:
    dashboard = dashboard if dashboard is not None else load_dashboard()
    out = []
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            if target.get("expr"):
                out.append(Query(f"panel {panel.get('title')!r} target {target.get('refId')}",
                                 str(target["expr"]).strip()))
    return out


def variable_queries(dashboard: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Query variables: name -> Grafana query (e.g. ``label_values(metric, label)``)."""
    dashboard = dashboard if dashboard is not None else load_dashboard()
    out = {}
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("type") == "query":
            query = var.get("query")
            out[var["name"]] = str(query.get("query") if isinstance(query, dict) else query)
    return out


LABEL_VALUES = re.compile(r"^label_values\(\s*(?P<selector>[^,]+?)\s*,\s*(?P<label>[a-zA-Z_][a-zA-Z0-9_]*)\s*\)$")


def parse_label_values(query: str) -> tuple[str, str]:
    """``label_values(selector, label)`` -> (selector, label); ValueError for other variable queries."""
    m = LABEL_VALUES.match(query.strip())
    if not m:
        raise ValueError(f"not a label_values(selector, label) query: {query!r}")
    return m.group("selector"), m.group("label")


# Grafana's built-in interval variables, and the values used when a
# dashboard expression runs outside Grafana.
BUILTIN_DEFAULTS = {"__rate_interval": "1m", "__interval": "15s", "__range": "1h"}
# $name, ${name} or ${name:format}, and the deprecated [[name]].
VARIABLE = re.compile(r"\$\{(?P<braced>\w+)(?::\w+)?\}|\[\[(?P<old>\w+)\]\]|\$(?P<plain>\w+)")


def substitute(expr: str, variables: Mapping[str, str], builtins: Mapping[str, str] | None = None) -> str:
    """Replace dashboard variables the way Grafana interpolates them into PromQL.

    Raises KeyError naming a variable that has no value (an undefined variable
    in a panel is a bug of the dashboard).
    """
    values = {**BUILTIN_DEFAULTS, **(builtins or {}), **variables}

    def repl(m: re.Match[str]) -> str:
        name = m.group("braced") or m.group("old") or m.group("plain")
        if name not in values:
            raise KeyError(f"dashboard variable ${name} has no value (in {expr!r})")
        return values[name]

    return VARIABLE.sub(repl, expr)


def variable_names(expr: str) -> set[str]:
    return {m.group("braced") or m.group("old") or m.group("plain") for m in VARIABLE.finditer(expr)}


def defined_variables(dashboard: Mapping[str, Any] | None = None) -> set[str]:
    dashboard = dashboard if dashboard is not None else load_dashboard()
    return {var["name"] for var in dashboard.get("templating", {}).get("list", [])}


# ------------------------------------------------------------------ PrometheusRule


class _LiteralDumper(yaml.SafeDumper):
    """Writes multi-line strings (expressions, descriptions) as block literals."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    if "\n" in value:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_LiteralDumper.add_representer(str, _str)


def prometheus_rule(groups: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The PrometheusRule object carrying rules.yaml's groups."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "vpol", "namespace": "vpol-system", "labels": {"app.kubernetes.io/name": "vpol"}},
        "spec": {"groups": groups if groups is not None else load_rule_groups()},
    }


def render_prometheus_rule() -> str:
    body = yaml.dump(prometheus_rule(), Dumper=_LiteralDumper, sort_keys=False, width=1000,
                     allow_unicode=True)
    return PROMETHEUS_RULE_HEADER + body


def main(argv: list[str]) -> int:
    if argv[1:] == ["--check"]:
        same = PROMETHEUS_RULE_FILE.read_text() == render_prometheus_rule()
        print("prometheusrule.yaml is " + ("up to date" if same else "stale"))
        return 0 if same else 1
    PROMETHEUS_RULE_FILE.write_text(render_prometheus_rule())
    print(f"wrote {PROMETHEUS_RULE_FILE.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
