"""The statistics and table of `make bench-node` (hack/benchlib/podstartup.py): percentiles
are measured values (nearest rank), the API's timestamps are read as the API writes them,
and the table has the overhead over the floor and the ratios netattach / Multus."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hack"))

from benchlib import podstartup as ps  # noqa: E402


def test_percentiles_are_nearest_rank():
    values = [float(v) for v in range(1, 101)]
    assert ps.percentile(values, 50) == 50.0
    assert ps.percentile(values, 90) == 90.0
    assert ps.percentile(values, 99) == 99.0
    assert ps.percentile([3.0], 99) == 3.0
    assert ps.percentile([2.0, 1.0], 50) == 1.0
    with pytest.raises(ValueError):
        ps.percentile([], 50)


def test_condition_times_only_of_true_conditions():
    pod = {"metadata": {"creationTimestamp": "2026-11-28T06:45:44Z"},
           "status": {"conditions": [
               {"type": "Ready", "status": "False", "lastTransitionTime": "2026-11-28T06:45:45Z"},
               {"type": "PodReadyToStartContainers", "status": "True",
                "lastTransitionTime": "2026-11-28T06:45:46Z"}]}}
    assert ps.condition_time(pod, "Ready") is None
    assert ps.condition_time(pod, "PodReadyToStartContainers") - \
        ps.api_time(pod["metadata"]["creationTimestamp"]) == 2.0
    assert ps.condition_time({"status": None}, "Ready") is None


def _burst(subject: str, startups: list[float], cpu: float = 0.0) -> ps.Burst:
    pods = [ps.PodTimes(f"p{i}", 100.0, ready_seen=100.0 + s, delete_sent=200.0,
                        gone_seen=201.0) for i, s in enumerate(startups)]
    return ps.Burst(subject, len(pods), 0, pods, cni_exec_cpu=cpu)


def test_table_has_overhead_over_floor_and_ratios():
    bursts = [_burst("floor", [1.0, 1.0]), _burst("netattach_thick", [1.5, 1.5], cpu=0.2),
              _burst("multus_thick", [2.0, 2.0])]
    st = ps.stats(bursts, "netattach_thick", 2)
    assert st is not None and st["p50"] == 1.5 and st["del_p50"] == 1.0
    assert st["cni_cpu_per_pod"] == pytest.approx(0.1)
    text = ps.table(bursts)
    assert "| 2 | netattach_thick | 2 | 1500 | 1500 | 1500 | 500 | 0.75x | 0.75x |" in text
    # Multus' own row and the floor's have no ratio
    assert "| 2 | multus_thick | 2 | 2000 | 2000 | 2000 | 1000 |  |  |" in text
    assert "| 2 | floor | 2 | 1000 | 1000 | 1000 |  |  |  |" in text
    assert "netattach_thick / multus_thick: p50 0.75x, p99 0.75x, overhead over floor 0.50x" \
        in text
    assert "No ratio" in ps.table(bursts[:2])


def test_ratio_columns_pair_each_netattach_mode_with_multus_same_mode():
    per = {"netattach_thin": {"p50": 3.0, "p99": 6.0}, "multus_thin": {"p50": 2.0, "p99": 4.0},
           "netattach_thick": {"p50": 1.0, "p99": 2.0}, "multus_thick": None}
    assert ps.ratio_columns(per, "netattach_thin") == ("1.50x", "1.50x")
    # the pair did not run: no ratio, never one against the other mode
    assert ps.ratio_columns(per, "netattach_thick") == ("", "")
    assert ps.ratio_columns(per, "multus_thin") == ("", "")
    assert ps.ratio_columns(per, "floor") == ("", "")


def test_runtime_cni_means_are_per_call_over_every_round():
    a, b = _burst("netattach_thick", [1.0]), _burst("netattach_thick", [1.0])
    a.runtime_cni = {"set_up_pod": (1, 0.100), "tear_down_pod": (2, 0.100)}
    b.runtime_cni = {"set_up_pod": (3, 0.500)}
    st = ps.stats([a, b], "netattach_thick", 1)
    assert st is not None
    assert st["runtime_add"] == pytest.approx(0.150)   # 0.6 s over 4 calls
    assert st["runtime_del"] == pytest.approx(0.050)
    # the floor ran no tear-down in this (made-up) data: NaN, an empty cell
    text = ps.table([_burst("floor", [1.0])])
    assert "| 1 | floor | 1 | 1000 | 1000 | 1000 |  |  |  | 1000 | 1000 |  |  |  |" in text
