"""`make bench-node`'s harness (hack/bench_node.py) for one round on the session's real
node: every subject (the floor, netattach thin and thick from deploy/, Multus thin and
thick from the pinned module) installed, one burst of pods created, Ready, checked
(links and subnets), deleted, checked (no IP allocation, no state left), uninstalled.
What is asserted is what the harness guarantees, not a timing: every pod measured, the
table holding a row per subject and the ratios of both modes."""
from __future__ import annotations

import sys

from netattach_testbed import cluster as cl

sys.path.insert(0, str(cl.REPO_ROOT / "hack"))

import bench_node  # noqa: E402
from benchlib import podstartup as ps  # noqa: E402

BURST = 2


def test_one_round_of_the_pod_startup_bench(real_node, node_image, host_env):
    subjects = list(bench_node.SUBJECTS)
    try:
        results = bench_node.run(real_node, host_env, subjects, rounds=1, bursts=[BURST])
    finally:
        real_node.kubectl("delete", "namespace", bench_node.NAMESPACE, "--wait=false",
                          check=False)
    assert [(b.subject, b.size, len(b.pods)) for b in results] == [
        (s, BURST, BURST) for s in subjects]
    for burst in results:
        for pod in burst.pods:  # each measured from the watch, in order
            assert pod.create_sent < pod.ready_seen, (burst.subject, pod)
            assert pod.ready_seen < pod.delete_sent < pod.gone_seen, (burst.subject, pod)
            assert pod.api_ready is not None, (burst.subject, pod)
        assert burst.cni_exec_cpu > 0, burst.subject  # containerd exec'd the plugins
        # containerd timed one CNI set-up and at least one tear-down per pod
        added, add_s = burst.runtime_cni["set_up_pod"]
        deleted, del_s = burst.runtime_cni["tear_down_pod"]
        assert added == BURST and add_s > 0, (burst.subject, burst.runtime_cni)
        assert deleted >= BURST and del_s > 0, (burst.subject, burst.runtime_cni)
        if burst.subject.endswith("_thick"):
            assert burst.daemon_cpu > 0, burst.subject  # the daemon did the work
            # and ran the delegates: their CPU is its reaped children's, part of its own
            assert 0 < burst.daemon_child_cpu < burst.daemon_cpu, burst
    table = ps.table(results)
    rows = [line.split("|")[2].strip() for line in table.splitlines()
            if line.startswith(f"| {BURST} |")]
    assert rows == subjects, table
    assert f"burst {BURST}: netattach_thin / multus_thin: p50 " in table, table
    assert f"burst {BURST}: netattach_thick / multus_thick: p50 " in table, table
