"""The main job end to end (issue 2 acceptance 1-5): the installed `netattach` command,
real CNI plugins in a real netns, a real kube-apiserver, the plugin on a ServiceAccount
token bound only by deploy/base/rbac.yaml.

Every test runs in both modes (the `mode` fixture, tests/e2e/conftest.py): thin (the
runtime execs `netattach`) and thick (it execs `netattach-shim`, which forwards to a
running `netattach daemon`)."""
from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
import subprocess
from pathlib import Path

import pytest

from netattach_testbed import netns as tb
from netattach_testbed import scenario as sc


@pytest.fixture
def scenario(make_scenario):
    """Scenario 1 in the test's mode."""
    return make_scenario()


def test_add_three_networks_status_and_del(scenario, admin_api):
    """Acceptance 1: eth0, net1, data0 with their addresses; bridge result at 1.0.0;
    network-status with three matching entries; then DEL leaves nothing."""
    s = scenario
    run = s.run("ADD")
    assert run.code == 0, run.stdout + run.stderr + s.log_text()
    assert run.stderr == ""
    result = run.doc
    assert result["cniVersion"] == "1.0.0"
    assert {"version"} & set(result["ips"][0]) == set()  # 1.0.0 form: no per-IP version
    assert sc.in_subnet(result["ips"][0]["address"], sc.SUBNETS["default"])

    assert sc.pod_links(s) == ["data0", "eth0", "lo", "net1"]
    addrs = {ifname: tb.addresses(s.netns, ifname) for ifname in ("eth0", "net1", "data0")}
    assert sc.in_subnet(addrs["eth0"][0], sc.SUBNETS["default"])
    assert sc.in_subnet(addrs["net1"][0], sc.SUBNETS["net-a"])
    assert sc.in_subnet(addrs["data0"][0], sc.SUBNETS["net-b"])
    mtu = json.loads(tb.run("ip", "-j", "-n", s.netns, "link", "show", "net1").stdout)[0]["mtu"]
    assert mtu == sc.NET_A_MTU  # the conflist's second plugin (tuning) ran on net1
    assert result["ips"][0]["address"] == addrs["eth0"][0]

    status = sc.network_status(admin_api, s.namespace, s.pod_name)
    assert [(e["name"], e["interface"], e["default"]) for e in status] == [
        ("cluster-net", "eth0", True),
        (f"{s.namespace}/net-a", "net1", False),
        ("other/net-b", "data0", False),
    ]
    sc.assert_bare_ips(status)  # what Multus writes and its readers parse
    for entry in status:
        assert entry["ips"] == tb.bare(addrs[entry["interface"]])
        assert entry["mac"] == tb.link_mac(s.netns, entry["interface"])
    assert [e["mtu"] for e in status] == [1500, sc.NET_A_MTU, 1500]  # read from the netns

    state_files = os.listdir(s.env.state_dir)
    assert state_files == [f"{s.container_id}.json"]
    assert os.stat(s.env.state_dir / state_files[0]).st_mode & 0o777 == 0o600

    run = s.run("CHECK")
    assert run.code == 0 and run.stdout == "", run.stdout + s.log_text()

    run = s.run("DEL")
    assert run.code == 0 and run.stdout == "", run.stdout + s.log_text()
    sc.assert_clean(s)


def test_status_ips_in_cidr_form_when_the_node_conf_asks(scenario, admin_api):
    """networkStatusIPFormat "cidr" (the node's conf, docs/configuration.md): every
    network-status `ips` entry is the address with its prefix length, as on the link (the
    spec's §5.4 examples' form), not a bare address; the runtime's result is the same."""
    s = scenario
    conf = {**s.netconf, "networkStatusIPFormat": "cidr"}
    run = s.run("ADD", netconf=conf)
    assert run.code == 0, run.stdout + run.stderr + s.log_text()
    status = sc.network_status(admin_api, s.namespace, s.pod_name)
    assert [e["interface"] for e in status] == ["eth0", "net1", "data0"]
    for entry in status:
        assert entry["ips"] == tb.addresses(s.netns, entry["interface"])
        for ip in entry["ips"]:
            assert "/" in ip and str(ipaddress.ip_interface(ip)) == ip
    with pytest.raises(AssertionError, match="is not a bare address"):
        sc.assert_bare_ips(status)
    assert run.doc["ips"][0]["address"] == status[0]["ips"][0]
    run = s.run("DEL", netconf=conf)
    assert run.code == 0 and run.stdout == "", run.stdout + s.log_text()
    sc.assert_clean(s)


def test_cnitool_drives_netattach(scenario, cni_testbin):
    """Acceptance 2: cnitool (libcni) with a conflist whose only plugin is netattach."""
    s = scenario
    netdir = s.env.root / "cnitool-net.d"
    netdir.mkdir()
    conflist = {"cniVersion": "1.0.0", "name": "netattach-list",
                "plugins": [{k: v for k, v in s.netconf.items() if k not in ("cniVersion", "name")}]}
    (netdir / "netattach.conflist").write_text(json.dumps(conflist))
    env = s.cni_env("ADD")
    cnitool_env = {"PATH": env["PATH"], "NETCONFPATH": str(netdir), "CNI_PATH": env["CNI_PATH"],
                   "CNI_ARGS": env["CNI_ARGS"], "CNI_IFNAME": "eth0"}
    cnitool = str(Path(cni_testbin) / "cnitool")
    p = subprocess.run([cnitool, "add", "netattach-list", s.netns_path], env=cnitool_env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr + s.log_text()
    assert json.loads(p.stdout)["cniVersion"] == "1.0.0"
    assert sc.pod_links(s) == ["data0", "eth0", "lo", "net1"]
    p = subprocess.run([cnitool, "check", "netattach-list", s.netns_path], env=cnitool_env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr + s.log_text()
    p = subprocess.run([cnitool, "del", "netattach-list", s.netns_path], env=cnitool_env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr + s.log_text()
    sc.assert_clean(s)


def test_del_with_api_server_stopped(scenario, cluster):
    """Acceptance 3: DEL needs neither the pod nor the API server."""
    s = scenario
    assert s.run("ADD").code == 0, s.log_text()
    assert len(s.env.ipam_allocations()) == 3
    cluster.stop_apiserver()
    try:
        run = s.run("DEL")
        assert run.code == 0, run.stdout + s.log_text()
        sc.assert_clean(s)
    finally:
        cluster.start_apiserver()


def test_missing_nad_fails_cleanly(admin_api, make_scenario, host_env, k8s_namespace):
    """Acceptance 4: a NAD that does not exist; error names it; nothing attached or allocated."""
    s = make_scenario(networks="net-a,no-such-net")
    run = s.run("ADD")
    assert run.code == 1
    err = run.doc
    assert set(err) >= {"cniVersion", "code", "msg"}
    assert f"{k8s_namespace}/no-such-net" in err["msg"] and "not found" in err["msg"]
    assert f"pod {k8s_namespace}/{s.pod_name}" in err["msg"]
    sc.assert_clean(s)
    assert s.run("DEL").code == 0  # the runtime's DEL after a failed ADD succeeds
    sc.assert_clean(s)


def test_failing_delegate_rolls_back(admin_api, make_scenario, host_env, k8s_namespace):
    """Acceptance 5: a macvlan whose master does not exist fails after two attachments;
    both are rolled back, the error carries the child's own message."""
    s = make_scenario(networks="net-a,net-bad")
    missing = tb.unique("x")
    sc.apply_nad(admin_api, sc.nad(k8s_namespace, "net-bad", {
        "cniVersion": "1.0.0", "type": "macvlan", "master": missing,
        "ipam": {"type": "host-local", "subnet": "198.18.9.0/24", "dataDir": str(host_env.ipam_dir)}}))
    run = s.run("ADD")
    assert run.code == 1
    err = run.doc
    assert f"{k8s_namespace}/net-bad" in err["msg"] and "net2" in err["msg"]
    assert "plugin type='macvlan'" in err["msg"] and "Link not found" in err["msg"]  # child's own
    assert err["code"] == 999  # the child's own code, passed through
    sc.assert_clean(s)


def test_cluster_network_as_nad_default_networks_and_same_network_twice(
        admin_api, make_scenario, host_env, k8s_namespace):
    """clusterNetwork names a NAD in multusNamespace; defaultNetworks adds one more to
    every pod; the pod selects net-a twice (§4.2): eth0, net1 (default), net2, net3."""
    s = make_scenario(networks="net-a,net-a")
    cluster_conf = json.loads(Path(s.netconf["clusterNetwork"]).read_text())
    del cluster_conf["name"]  # §3.4.2: injected from the NAD name
    sc.apply_nad(admin_api, sc.nad("kube-system", "cluster-nad", cluster_conf))
    dn_bridge = host_env.bridge_name()
    sc.apply_nad(admin_api, sc.nad("kube-system", "everyone", sc.bridge_conf(
        dn_bridge, "198.18.4.0/24", host_env.ipam_dir, name="everyone", version="1.0.0",
        gateway=False)))
    conf = {**s.netconf, "clusterNetwork": "cluster-nad", "defaultNetworks": ["everyone"]}
    try:
        run = s.run("ADD", conf)
        assert run.code == 0, run.stdout + s.log_text()
        assert sc.pod_links(s) == ["eth0", "lo", "net1", "net2", "net3"]
        status = sc.network_status(admin_api, s.namespace, s.pod_name)
        assert [(e["name"], e["interface"]) for e in status] == [
            ("kube-system/cluster-nad", "eth0"), ("kube-system/everyone", "net1"),
            (f"{s.namespace}/net-a", "net2"), (f"{s.namespace}/net-a", "net3")]
        assert status[2]["ips"] != status[3]["ips"]
        assert s.run("DEL", conf).code == 0, s.log_text()
        sc.assert_clean(s)
    finally:
        for name in ("cluster-nad", "everyone"):
            sc.delete_nad(admin_api, "kube-system", name)


def test_cluster_network_as_directory_and_as_name(admin_api, make_scenario, host_env,
                                                   k8s_namespace):
    """clusterNetwork as the conf dir (first config, netattach's own skipped) and as the
    `name` of a config in confDir."""
    s = make_scenario(networks="")
    own = {**s.netconf}
    (host_env.conf_dir / "00-netattach.conf").write_text(json.dumps(own))  # sorts first
    for cluster_network in (str(host_env.conf_dir), "cluster-net"):
        conf = {**s.netconf, "clusterNetwork": cluster_network}
        run = s.run("ADD", conf)
        assert run.code == 0, run.stdout + s.log_text()
        assert sc.pod_links(s) == ["eth0", "lo"]
        assert s.run("DEL", conf).code == 0
        sc.assert_clean(s)


def test_pod_not_visible_is_code_11(admin_api, make_scenario, host_env, k8s_namespace):
    s = make_scenario()
    s = dataclasses.replace(s, pod_name="no-such-pod")
    run = s.run("ADD")
    assert run.code == 1 and run.doc["code"] == 11
    assert f"pod {k8s_namespace}/no-such-pod" in run.doc["msg"]
    sc.assert_clean(s)


def test_pod_uid_mismatch_refused_unless_mirror_pod(admin_api, make_scenario, host_env,
                                                    k8s_namespace):
    s = make_scenario()
    stale = dataclasses.replace(s, pod_uid="00000000-0000-0000-0000-000000000000")
    run = stale.run("ADD")
    assert run.code == 1 and run.doc["code"] == 3 and "UID" in run.doc["msg"]
    sc.assert_clean(s)
    mirror = sc.pod(k8s_namespace, "static-web", "net-a")
    mirror["metadata"]["annotations"]["kubernetes.io/config.mirror"] = "static-hash"
    sc.create_pod(admin_api, mirror)  # what a kubelet creates for a static pod
    static = dataclasses.replace(stale, pod_name="static-web")  # its UID differs from the mirror's
    run = static.run("ADD")
    assert run.code == 0, run.stdout + s.log_text()
    assert static.run("DEL").code == 0
    sc.assert_clean(s)


def test_del_without_state_rebuilds_from_the_api(scenario):
    s = scenario
    assert s.run("ADD").code == 0, s.log_text()
    s.settle()  # thick: the daemon rewrites the state once the network-status is sent
    (s.env.state_dir / f"{s.container_id}.json").unlink()
    run = s.run("DEL")
    assert run.code == 0, run.stdout + s.log_text()
    assert "no saved state; DEL rebuilt from the API (3 attachments)" in s.log_text()
    sc.assert_clean(s)


def test_del_after_the_netns_is_gone(scenario):
    """DEL succeeds when the sandbox's netns was already removed, and still releases
    every IP (children get an empty CNI_NETNS and release IPAM)."""
    s = scenario
    assert s.run("ADD").code == 0, s.log_text()
    tb.run("ip", "netns", "del", s.netns)
    run = s.run("DEL")
    assert run.code == 0, run.stdout + s.log_text()
    assert s.env.ipam_allocations() == []
    assert s.env.state_files() == []
