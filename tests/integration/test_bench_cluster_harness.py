"""One round of `make bench-cluster` (hack/bench_cluster.py) with two daemons of each kind
and phases of a second or less: the harness runs end to end on the test bed (a fresh
audited API server per subject, restarted once), prints its table with every column
filled, and every daemon saw the NADs. Nothing here asserts a duration or a ratio:
only what the harness guarantees, so a loaded machine makes it slower, never red.

Needs root (Multus' daemon runs in a mount namespace of its own), the test bed
(`make testbin`) and Multus (`make testbin-multus`), as `make test` provides.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from netattach_testbed import cluster as cl

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "hack" / "bench_cluster.py"
HANG_GUARD = 600  # seconds; the round takes well under a minute on an idle machine
PROPAGATION = 2


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def test_one_round_with_two_daemons_per_subject(tmp_path):
    try:
        cl.require_k8s_binaries()
    except cl.TestbinMissing as e:
        pytest.fail(str(e), pytrace=False)
    out = tmp_path / "out"
    p = subprocess.run(
        # the least that runs every code path: 2 daemons (a half of 1: the slope's
        # windows), 6 churn ticks (tick 5 deletes a pod), each window short, no pause
        # after a fleet starts (start waits until every daemon watches)
        [sys.executable, str(HARNESS), "--daemons", "2", "--settle", "0.5", "--idle", "0.5",
         "--churn", "1", "--churn-rate", "6", "--quiet", "0", "--shared-rounds", "1",
         "--propagation", str(PROPAGATION), "--down", "0.5", "--pods", "3", "--nads", "20",
         "--out", str(out)],
        capture_output=True, text=True, timeout=HANG_GUARD, cwd=ROOT,
        env={**os.environ, "NETATTACH_KEEP_BENCH": "0"})
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]

    results = json.loads((out / "bench-cluster.json").read_text())
    table = (out / "bench-cluster.md").read_text()
    assert table.strip() in p.stdout
    rows = [cells(x) for x in table.splitlines() if x.startswith("| ") and not x.startswith("| -")]
    head, netattach, multus, ratio = rows
    assert netattach[0] == "netattach thick" and multus[0] == "Multus thick"
    assert ratio[0] == "netattach / Multus"
    for row in (netattach, multus):
        assert len(row) == len(head) and all(row), dict(zip(head, row, strict=True))
    multus_cells = dict(zip(head, multus, strict=True))
    assert multus_cells["NAD propagation p99 s"].startswith("n/a (")

    for key, process in (("netattach", "netattach"), ("multus", "multus-daemon")):
        r = results["subjects"][key]
        assert r["daemons"] == 2 and r["running_at_end"] == 2  # the second half back
        assert len(r["settle_cpu_per_s"]) == 1
        # idle and churn with the first daemon, both, then the first again: the slope's
        for phase in ("idle", "churn"):
            assert {f"{phase}_half", phase, f"{phase}_half2"} <= r.keys()
            assert "api_cpu_slope_per_daemon" in r[phase]
        assert r["watches_per_daemon"] >= 2  # pods and NADs, each daemon
        prop = r["propagation"]
        # the API server sent every NAD to every daemon: its NAD WATCH was open
        assert list(prop["watch_open_at_create"].values()) == [PROPAGATION] * 2
        assert r["restart"]["missing"] == 0  # every daemon came back after the restart
        assert r["rss"]["process"] == process and r["rss"]["kib"] > 0
    # one API server: each subject's windows and the no-daemon ones, each fleet stopped after
    (shared,) = results["shared"]["rounds"]
    assert set(shared) == {"netattach", "multus", "none"}
    assert all({"idle", "churn"} <= set(w) for w in shared.values())
    assert all(w["churn_ticks"] >= 1 for w in shared.values())
    assert len(results["shared"]["settle_cpu_per_s"]) == 1
    prop = results["subjects"]["netattach"]["propagation"]
    # every netattach daemon's cache stored every NAD (its metrics say so)
    assert prop["missing"] == 0 and len(prop["samples"]) == 2 * PROPAGATION
    assert len(prop["every_daemon"]) == PROPAGATION
    counts = results["subjects"]["netattach"]["rss"]["cache_counts"]
    assert counts[0] >= 3 and counts[1] >= 20
