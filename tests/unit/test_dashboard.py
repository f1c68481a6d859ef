"""The Grafana dashboard (deploy/grafana/netattach.json) reads only metrics of
docs/metrics.md's reference table, and the check (netattach_testbed.dashboard) sees a
metric or a label that is not there. The e2e test
(tests/e2e/test_thick_mode.py::test_the_dashboard_reads_only_what_the_daemon_exports)
holds it to a real daemon's scrape."""
from __future__ import annotations

import pytest

from netattach_testbed import dashboard as db

HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")


def documented_series() -> dict[str, frozenset[str]]:
    """The series a query may name, from the reference table: a histogram's _bucket,
    _sum and _count, the other names as they are; labels not compared here."""
    out = {}
    for name, kind in db.documented().items():
        for suffix in (HISTOGRAM_SERIES if kind == "histogram" else ("",)):
            out[name + suffix] = frozenset()
    return out


def test_every_query_parses_and_names_a_documented_metric():
    dash = db.load()
    exprs = db.expressions(dash)
    assert len(exprs) >= 20 and all(exprs)
    named = {name for name, _ in db.selectors(dash)}
    assert "netattach_delegate_duration_seconds_bucket" in named
    assert "netattach_build_info" in named
    assert sorted(named - set(documented_series())) == []
    assert "" not in named  # every selector names its metric


def test_the_reference_table_has_every_kind_of_metric():
    documented = db.documented()
    assert documented["netattach_delegate_duration_seconds"] == "histogram"
    assert documented["netattach_requests_total"] == "counter"
    assert documented["netattach_build_info"] == "gauge"
    assert all(name.endswith("_total") == (kind == "counter")
               for name, kind in documented.items())


def test_the_check_sees_what_is_not_exported():
    dash = {"panels": [{"type": "row", "panels": [{"targets": [
        {"expr": 'sum by (x) (rate(netattach_nope_total{instance=~"$instance"}[$__rate_interval]))'},
        {"expr": 'netattach_requests_total{colour="red", job="j"}'},
        {"expr": '{__name__="netattach_gone"}'}]}]}],
        "templating": {"list": [{"name": "v", "type": "query",
                                 "query": {"query": "label_values(netattach_other, instance)"}}]}}
    families = {"netattach_requests_total": frozenset({"command", "code"})}
    assert db.problems(dash, families) == [
        "netattach_nope_total: not exported", "netattach_requests_total: no label colour",
        "netattach_gone: not exported", "netattach_other: not exported"]


def test_a_query_that_does_not_parse_is_an_error():
    with pytest.raises(ValueError, match="sum by"):
        db.selector_labels("sum by (x (rate(a[5m]))")


def test_the_readme_links_the_reference():
    assert "[docs/metrics.md](docs/metrics.md)" in (db.ROOT / "README.md").read_text()
