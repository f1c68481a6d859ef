"""Fault 7: many pods on one node at once, and ADD and DEL racing for one container.

The built executable is exec'd as a runtime would, from a pool of 20 threads, for 20
pods (one netns each) against real plugins and the real kube-apiserver, in both modes
(the `mode` fixture, tests/e2e/conftest.py): in thick mode the 20 shims at once are
served by one `netattach daemon` and its pool of parallel calls (--max-parallel 4 in
the test bed, so calls also wait in its queue). Operations on
different containers run in parallel; operations on one container are serialized by
its lock (spec §7.3; the timing of that is proven with a slow child in
tests/integration/test_serialization.py). Here the outcome is checked: every pod gets
exactly its interfaces with unique addresses from the right subnets, everything is
released after DEL, and an ADD racing a DEL of the same container ends either fully
attached or fully detached, never half.
"""
from __future__ import annotations

import dataclasses
import ipaddress
import json
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from netattach_testbed import netns as tb
from netattach_testbed import scenario as sc

POOL = 20
FULL = "net-a,other/net-b@data0"
# A pod's selection -> the interfaces it must get besides lo, with their subnets.
SELECTIONS = {
    "": {"eth0": sc.SUBNETS["default"]},
    "net-a": {"eth0": sc.SUBNETS["default"], "net1": sc.SUBNETS["net-a"]},
    "other/net-b@data0": {"eth0": sc.SUBNETS["default"], "data0": sc.SUBNETS["net-b"]},
    FULL: {"eth0": sc.SUBNETS["default"], "net1": sc.SUBNETS["net-a"],
           "data0": sc.SUBNETS["net-b"]},
}


def make_pods(make_scenario, admin_api, host_env, namespace,
              selections: list[str]) -> list[tuple[sc.Scenario, str]]:
    """One pod, netns and container ID per selection, all on scenario 1's networks, in
    the test's mode (thick: all share the test's one daemon).
    apiTimeout is generous: 20 processes share 2 cores with the API server."""
    base = make_scenario(networks=selections[0], pod_name="pod-00")
    base.netconf["apiTimeout"] = 60
    pods = [(base, selections[0])]
    for i, networks in enumerate(selections[1:], 1):
        name = f"pod-{i:02d}"
        uid = sc.create_pod(admin_api, sc.pod(namespace, name, networks))
        pods.append((dataclasses.replace(base, pod_name=name, pod_uid=uid,
                                         container_id=uuid.uuid4().hex + uuid.uuid4().hex,
                                         netns=host_env.new_netns()), networks))
    return pods


def run_all(calls: list[tuple[sc.Scenario, str]]) -> list[sc.PluginRun]:
    """Exec every (pod, command) at once from a pool of POOL threads, in order of submission."""
    with ThreadPoolExecutor(POOL) as pool:
        return list(pool.map(lambda call: call[0].run(call[1]), calls))


def allocations_by_container(env: tb.HostEnv) -> Counter:
    """container ID -> number of host-local addresses it holds (the first line of each
    allocation file is the container ID)."""
    return Counter(p.read_text().splitlines()[0].strip() for p in env.ipam_allocations())


def assert_attached(s: sc.Scenario, networks: str, admin_api) -> list[str]:
    """The pod has exactly its interfaces, each with one address in the right subnet, as
    network-status says; returns its addresses."""
    expected = SELECTIONS[networks]
    assert sc.pod_links(s) == sorted([*expected, "lo"]), (s.pod_name, networks)
    addrs = {}
    for ifname, subnet in expected.items():
        [addrs[ifname]] = tb.addresses(s.netns, ifname)
        assert sc.in_subnet(addrs[ifname], subnet), (s.pod_name, ifname, addrs[ifname])
    status = sc.network_status(admin_api, s.namespace, s.pod_name)  # thick: sent after ADD
    assert {e["interface"]: e["ips"] for e in status} == {i: tb.bare([a])
                                                          for i, a in addrs.items()}
    return list(addrs.values())


def assert_state_dir(env: tb.HostEnv, container_ids: list[str]) -> None:
    """Exactly one state file per attached container, and no lock file left (tombstones
    of DEL-ed containers aside)."""
    assert env.state_files() == sorted(f"{c}.json" for c in container_ids)


def test_twenty_pods_add_then_del_in_parallel(admin_api, make_scenario, host_env,
                                              k8s_namespace):
    selections = [list(SELECTIONS)[i % len(SELECTIONS)] for i in range(20)]
    pods = make_pods(make_scenario, admin_api, host_env, k8s_namespace, selections)

    runs = run_all([(s, "ADD") for s, _ in pods])
    assert [r.code for r in runs] == [0] * 20, [r.stdout for r in runs if r.code]
    addresses = []
    for (s, networks), run in zip(pods, runs):
        addresses += assert_attached(s, networks, admin_api)
        assert run.doc["ips"][0]["address"] == tb.addresses(s.netns, "eth0")[0]
    assert len({ipaddress.ip_interface(a).ip for a in addresses}) == len(addresses) == 40
    assert allocations_by_container(host_env) == {
        s.container_id: len(SELECTIONS[networks]) for s, networks in pods}
    assert_state_dir(host_env, [s.container_id for s, _ in pods])

    runs = run_all([(s, "DEL") for s, _ in pods])
    assert [r.code for r in runs] == [0] * 20, [r.stdout for r in runs if r.code]
    assert all(sc.pod_links(s) == ["lo"] for s, _ in pods)
    assert host_env.ipam_allocations() == []
    assert_state_dir(host_env, [])
    log = pods[0][0].log_text()
    assert log.count("timing: ADD") == 20 and log.count("timing: DEL") == 20
    assert " ERROR " not in log and " WARNING " not in log
    daemon = pods[0][0].daemon
    if daemon is not None:  # every call served by the daemon, none by the shim's fallback
        assert log.count("(daemon), result 0") == 40
        assert daemon.metric("netattach_requests_total", command="ADD", code="0") == 20
        assert daemon.metric("netattach_requests_total", command="DEL", code="0") == 20


def test_add_and_del_racing_for_one_container_end_whole(admin_api, make_scenario,
                                                       host_env, k8s_namespace):
    """10 pods, each sent ADD and DEL at the same moment (20 execs at once). Whichever
    takes the container's lock first runs whole: ADD then DEL leaves nothing; DEL first
    (no state yet: rebuilt from the API, nothing to release) then ADD leaves the pod
    fully attached. Never a part of the interfaces, addresses or state."""
    pods = make_pods(make_scenario, admin_api, host_env, k8s_namespace, [FULL] * 10)
    calls = []
    for i, (s, _) in enumerate(pods):  # half submit ADD first, half DEL first
        calls += [(s, "ADD"), (s, "DEL")] if i % 2 else [(s, "DEL"), (s, "ADD")]
    runs = run_all(calls)
    assert [r.code for r in runs] == [0] * 20, [r.stdout for r in runs if r.code]

    held = allocations_by_container(host_env)
    attached = []
    for s, networks in pods:
        if (host_env.state_dir / f"{s.container_id}.json").exists():  # DEL ran first
            assert_attached(s, networks, admin_api)
            assert held[s.container_id] == 3
            saved = json.loads((host_env.state_dir / f"{s.container_id}.json").read_text())
            assert all(a["attempted"] and a["result"] for a in saved["attachments"])
            attached.append(s)
        else:  # ADD ran first
            assert sc.pod_links(s) == ["lo"], s.pod_name
            assert held[s.container_id] == 0, s.pod_name
    assert_state_dir(host_env, [s.container_id for s in attached])
    log = pods[0][0].log_text()
    assert log.count("no saved state; DEL rebuilt from the API (3 attachments)") == len(attached)

    runs = run_all([(s, "DEL") for s in attached])
    assert [r.code for r in runs] == [0] * len(attached)
    assert all(sc.pod_links(s) == ["lo"] for s, _ in pods)
    assert host_env.ipam_allocations() == []
    assert_state_dir(host_env, [])
