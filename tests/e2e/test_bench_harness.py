"""`make bench`'s harness (hack/bench.py) runs one round of every measurement, with the
subjects `make test` has built (netattach thin and thick, the built artifact, and the
children alone; Multus is built by `make bench` only), checks every ADD and DEL it makes, writes
its results and leaves nothing behind. No duration is asserted: only that each
measurement produced its numbers."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
HANG_GUARD = 900  # s; one round takes well under a minute on 2 idle cores


def test_one_round_of_every_measurement(tmp_path):
    # one round, and the parallel and loaded phases at a few pods (3 at once; 3 pods and
    # 10 NADs loaded) rather than 20 and 110 + 500: the same code, a fraction of the time
    p = subprocess.run([sys.executable, str(ROOT / "hack" / "bench.py"), "--only",
                        "netattach_thin,netattach_thick,floor", "--parallel-pods", "3",
                        "--load", "3,10", "--out", str(tmp_path), "1"],
                       capture_output=True, text=True, timeout=HANG_GUARD, env=os.environ)
    assert p.returncode == 0, p.stdout[-5000:] + p.stderr[-5000:]
    assert "cleanup: nothing left behind" in p.stdout
    results = json.loads((tmp_path / "bench-results.json").read_text())
    table = (tmp_path / "bench-results.md").read_text()
    assert "scenario 1 ADD wall" in table
    assert "3 pods ADD in parallel, total" in table and "3 pods + 10 NADs" in table
    assert results["sizes"] == {"parallel_pods": 3, "load_pods": 3, "load_nads": 10}
    for key in ("netattach_thin", "netattach_thick", "floor"):
        for command in ("ADD", "DEL"):
            assert len(results["scenario_1"][key][command]["wall"]) == 1
            assert len(results["parallel"][key][command]["cpu_per_pod"]) == 1
        assert all(len(walls) == 1 for walls in results["sweep"][key].values())
    assert set(results["version"]["wall"]) == {"netattach", "netattach-shim", "bridge"}
    assert not results["repeated"], results["repeated"]  # no call failed
    # netattach reads the pod and both NADs and writes network-status, as the audit log saw
    api = results["api_requests"]["netattach_thin"]
    assert api["ADD"][0] >= 4, api
    assert api["ADD_kinds"]["patch pods/status"] == 1, api
