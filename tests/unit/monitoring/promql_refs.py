"""Which series and labels a PromQL expression uses, checked against vpol's metric definitions.

The expression is parsed with ``promql-parser`` (a PromQL parser with Python
bindings) rather than scanned with regular expressions: names inside
strings, function names and grouping clauses would fool a regex. Prometheus's
own parser (promtool) remains the authority on validity; this module only
needs the syntax tree.

The catalogue of series comes from the collectors in
``vpol.controller.metrics`` and follows prometheus_client's exposition as the
operator serves it (without ``_created`` series): a counter ``x_total``
exposes ``x_total``; a histogram ``x`` exposes ``x_bucket`` (with ``le``),
``x_sum`` and ``x_count``.
"""

from __future__ import annotations

import types
from collections.abc import Iterable, Mapping
from typing import Any

import promql_parser as pp
from prometheus_client.metrics import MetricWrapperBase

# Labels every scraped series gets from its target. The ServiceMonitor adds
# more (pod, service, endpoint, container, operator_namespace), but the
# dashboard and rules must not depend on how Prometheus discovers the operator.
TARGET_LABELS = frozenset({"job", "instance"})


def series_catalogue(module: types.ModuleType) -> dict[str, frozenset[str]]:
    """Exposed series name -> label names, for every collector defined in `module`."""
    out: dict[str, frozenset[str]] = {}
    for value in vars(module).values():
        if not isinstance(value, MetricWrapperBase):
            continue
        # prometheus_client keeps the definition in these attributes (name
        # without the _total suffix for counters); there is no public getter
        # for label names that does not create a child series.
        name: str = value._name  # noqa: SLF001
        labels = frozenset(value._labelnames)  # noqa: SLF001
        kind = str(value._type)  # noqa: SLF001
        if kind == "counter":
            out[f"{name}_total"] = labels
        elif kind == "histogram":
            out[f"{name}_bucket"] = labels | {"le"}
            out[f"{name}_sum"] = labels
            out[f"{name}_count"] = labels
        elif kind == "summary":
            out[name] = labels | {"quantile"}
            out[f"{name}_sum"] = labels
            out[f"{name}_count"] = labels
        elif kind == "info":
            out[f"{name}_info"] = labels
        else:  # gauge, enum
            out[name] = labels
    return out


def _selector_name(vs: Any) -> str | None:
    if vs.name:
        return str(vs.name)
    for m in vs.matchers.matchers:
        if m.name == "__name__" and m.op == pp.MatchOp.Equal:
            return str(m.value)
    return None


def _children(node: Any) -> list[Any]:
    if isinstance(node, pp.MatrixSelector):
        return [node.vector_selector]
    if isinstance(node, (pp.AggregateExpr,)):
        return [c for c in (node.expr, node.param) if c is not None]
    if isinstance(node, pp.BinaryExpr):
        return [node.lhs, node.rhs]
    if isinstance(node, pp.Call):
        return list(node.args)
    if isinstance(node, (pp.ParenExpr, pp.UnaryExpr, pp.SubqueryExpr)):
        return [node.expr]
    return []


def _walk(node: Any) -> Iterable[Any]:
    yield node
    for child in _children(node):
        yield from _walk(child)


def _labels_available(node: Any, catalogue: Mapping[str, frozenset[str]]) -> set[str]:
    """Labels the series under `node` can carry (target labels and label_replace/label_join targets included)."""
    out = set(TARGET_LABELS)
    for sub in _walk(node):
        if isinstance(sub, pp.VectorSelector):
            out |= catalogue.get(_selector_name(sub) or "", frozenset())
        elif isinstance(sub, pp.Call) and sub.func.name in ("label_replace", "label_join"):
            dst = sub.args[1]
            if isinstance(dst, pp.StringLiteral):
                out.add(str(dst.val))
    return out


def metric_names(expr: str) -> set[str]:
    """Names of the series an expression selects (ValueError when it does not parse)."""
    return {name for sub in _walk(pp.parse(expr)) if isinstance(sub, pp.VectorSelector)
            for name in [_selector_name(sub)] if name}


def problems(expr: str, catalogue: Mapping[str, frozenset[str]]) -> list[str]:
    """Unknown series, label matchers and grouping labels in `expr`; [] when all exist."""
    try:
        tree = pp.parse(expr)
    except ValueError as exc:
        return [f"does not parse: {exc}"]
    out: list[str] = []
    for node in _walk(tree):
        if isinstance(node, pp.VectorSelector):
            name = _selector_name(node)
            if name is None:
                out.append(f"selector {node} has no metric name")
                continue
            if name not in catalogue:
                out.append(f"unknown series {name}")
                continue
            allowed = catalogue[name] | TARGET_LABELS | {"__name__"}
            for m in node.matchers.matchers:
                if m.name not in allowed:
                    out.append(f"{name} has no label {m.name!r} (labels: {sorted(catalogue[name])})")
        elif isinstance(node, pp.AggregateExpr) and node.modifier is not None:
            available = _labels_available(node.expr, catalogue)
            for label in node.modifier.labels:
                if label not in available:
                    out.append(f"{node.op} groups by {label!r}, which its input never has "
                               f"(available: {sorted(available)})")
        elif isinstance(node, pp.BinaryExpr) and node.modifier is not None:
            mod = node.modifier
            wanted = list(mod.matching.labels if mod.matching is not None else []) + list(mod.group_labels or [])
            lhs = _labels_available(node.lhs, catalogue)
            rhs = _labels_available(node.rhs, catalogue)
            for label in wanted:
                if label not in lhs | rhs:
                    out.append(f"vector matching on {label!r}, which neither side has")
    return out
