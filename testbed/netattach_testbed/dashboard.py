"""Holding the Grafana dashboard (deploy/grafana/netattach.json) to the metrics the node
daemon exports: every PromQL expression of it parsed (promql-parser, the Rust parser of
GreptimeDB's, the grammar of Prometheus'), each series selector's metric name and the
labels it matches on, set against a scrape of a real daemon's /metrics
(tests/e2e/test_thick_mode.py) and the reference table of docs/metrics.md
(tests/unit/test_dashboard.py).

    dash = load()
    for name, labels in selectors(dash): ...            # every selector of every query
    families = exported(text)                            # a scrape: sample name -> labels
    problems(dash, families)                             # [] when the dashboard holds
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import promql_parser
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "netattach.json"
METRICS_DOC = ROOT / "docs" / "metrics.md"

SCRAPE_LABELS = frozenset({"instance", "job"})
"""Labels Prometheus adds to every series it scrapes: a query may match on them."""
_VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")
_LABEL_VALUES = re.compile(r"^label_values\((\w+),\s*(\w+)\)$")


def load(path: Path = DASHBOARD) -> dict[str, Any]:
    with open(path) as f:
        return json.load(f)


def expressions(dash: dict[str, Any]) -> list[str]:
    """The PromQL of every panel's targets (rows' own panels too), in order."""
    out = []
    todo = list(dash.get("panels", []))
    while todo:
        panel = todo.pop(0)
        todo.extend(panel.get("panels", []))
        out.extend(target["expr"] for target in panel.get("targets", []))
    return out


def variable_metrics(dash: dict[str, Any]) -> list[tuple[str, str]]:
    """(metric, label) of each query variable, `label_values(metric, label)`; any other
    form of query raises ValueError (this check would not read it)."""
    out = []
    for var in dash.get("templating", {}).get("list", []):
        if var.get("type") != "query":
            continue
        query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        m = _LABEL_VALUES.match(query.strip())
        if not m:
            raise ValueError(f"variable {var['name']}: a query this check cannot read: {query}")
        out.append((m[1], m[2]))
    return out


def substitute(expr: str) -> str:
    """`expr` with Grafana's variables replaced as a query would have them: the interval
    ones by a duration, the others (regex matchers' values) by ".*"."""
    def value(m: re.Match[str]) -> str:
        name = m[1] or m[2]
        return "5m" if name in ("__rate_interval", "__interval", "__range") else ".*"
    return _VARIABLE.sub(value, expr)


def selector_labels(expr: str) -> list[tuple[str, frozenset[str]]]:
    """(metric name, label names matched) of each series selector of PromQL `expr`
    (Grafana variables substituted); a selector naming no metric gives "". Raises
    ValueError when `expr` does not parse."""
    try:
        tree = promql_parser.parse(substitute(expr))
    except Exception as e:  # the parser raises its own error types
        raise ValueError(f"{expr}: {e}") from None
    out: list[tuple[str, frozenset[str]]] = []

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            matchers = list(node.matchers.matchers)
            name = node.name or next((m.value for m in matchers if m.name == "__name__"), "")
            out.append((name, frozenset(m.name for m in matchers if m.name != "__name__")))

    promql_parser.walk(tree, visit)
    return out


def selectors(dash: dict[str, Any]) -> list[tuple[str, frozenset[str]]]:
    """Every (metric, labels matched) the dashboard reads: its panels' queries and its
    query variables'."""
    out = [s for expr in expressions(dash) for s in selector_labels(expr)]
    out += [(metric, frozenset()) for metric, _ in variable_metrics(dash)]
    return out


def exported(text: str) -> dict[str, frozenset[str]]:
    """Sample name -> label names of a /metrics scrape (Prometheus' text format), as
    queries see them: a histogram's _bucket, _sum and _count, a counter's _total."""
    out: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, set()).update(sample.labels)
    return {name: frozenset(labels) for name, labels in out.items()}


def problems(dash: dict[str, Any], families: dict[str, frozenset[str]]) -> list[str]:
    """What the dashboard reads that the scrape `families` (exported) does not have: a
    metric not exported, a label matched that the metric does not carry."""
    out = []
    for name, labels in selectors(dash):
        if name not in families:
            out.append(f"{name or '(no metric name)'}: not exported")
            continue
        missing = labels - families[name] - SCRAPE_LABELS
        if missing:
            out.append(f"{name}: no label {', '.join(sorted(missing))}")
    return out


def documented(path: Path = METRICS_DOC) -> dict[str, str]:
    """docs/metrics.md's reference table: metric name -> its type, from the rows whose
    first cell is a `netattach_...` or `process_...` name in backquotes."""
    out = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^\|\s*`((?:netattach|process)_\w+)`\s*\|\s*(\w+)\s*\|", line)
        if m:
            out[m[1]] = m[2]
    return out


def family_names(text: str) -> dict[str, str]:
    """Metric name -> type of each family of a scrape, the name as a query spells it (a
    counter's with its _total)."""
    out = {}
    for family in text_string_to_metric_families(text):
        name = family.name + ("_total" if family.type == "counter" else "")
        out[name] = family.type
    return out


def value(text: str, name: str, **labels: str) -> float | None:
    """The value of sample `name` with exactly `labels` in a scrape, None when absent."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return None


def samples(text: str, name: str) -> list[dict[str, str]]:
    """The labels of every sample `name` of a scrape."""
    return [dict(s.labels) for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == name]
