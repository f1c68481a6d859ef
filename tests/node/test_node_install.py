"""netattach installed on the real node as the README says (`kubectl apply -k`), in both
modes (the `installed` fixture, tests/node/conftest.py): the DaemonSet rolls out and the
node stays Ready; a pod of scenario 1 runs with its three interfaces and network-status;
deleting it frees every IP and state file (on the oldest Kubernetes too:
tests/node/test_node_versions.py).
Thick mode: child plugins run in the host's root, and hot-plug changes a Running pod.
"""
from __future__ import annotations

import ipaddress
import json
import textwrap

import pytest

from netattach_testbed import netns as tb
from netattach_testbed import node as nd
from netattach_testbed import scenario as sc
from netattach_testbed.serviceaccount import wait_for

NETWORKS = "k8s.v1.cni.cncf.io/networks"


def _in(cidr: str, subnet: str) -> bool:
    return ipaddress.ip_interface(cidr).ip in ipaddress.ip_network(subnet)


def test_scenario_pod_gets_three_interfaces_and_delete_frees_everything(
        real_node, installed, node_scenario):
    namespace = node_scenario.namespace
    name = nd.unique_name("pod")
    nd.apply_objects(real_node, [nd.pod_manifest(
        namespace, name, {NETWORKS: "net-a,other/net-b@data0"})])
    nd.wait_running(real_node, namespace, name)
    addrs = real_node.pod_addresses(namespace, name)
    assert sorted(addrs) == ["data0", "eth0", "lo", "net1"]
    assert _in(addrs["eth0"][0], nd.POD_SUBNET)
    assert _in(addrs["net1"][0], nd.NODE_SUBNETS["net-a"])
    assert _in(addrs["data0"][0], nd.NODE_SUBNETS["net-b"])
    status = nd.network_status(real_node, namespace, name)
    # ips: bare addresses, as Multus writes them and its readers parse them
    assert [(e["name"], e["interface"], e["ips"], e.get("default", False)) for e in status] == [
        ("cluster-net", "eth0", tb.bare(addrs["eth0"]), True),
        (f"{namespace}/net-a", "net1", tb.bare(addrs["net1"]), False),
        ("other/net-b", "data0", tb.bare(addrs["data0"]), False)]
    sc.assert_bare_ips(status)
    # macvlan + tuning: the NAD's MTU reached the interface
    assert status[1]["mtu"] == nd.NET_A_MTU
    assert real_node.node_ready()
    assert len(real_node.ipam_allocations()) == 3
    assert nd.state_files(real_node)

    nd.delete_pod(real_node, namespace, name)
    assert real_node.ipam_allocations() == []
    nd.wait_state_clean(real_node)


HOSTPROBE = textwrap.dedent('''\
    #!/usr/bin/python3
    # A test plugin (chained): ADD reads a file only the host has and sets proxy_arp on
    # the interface inside the pod's netns (a netns-scoped /proc/sys entry, as macvlan
    # writes one), then passes prevResult on. Fails ADD if either cannot be done.
    import json, os, subprocess, sys
    conf = json.load(sys.stdin)
    cmd = os.environ["CNI_COMMAND"]
    if cmd == "VERSION":
        print(json.dumps({"cniVersion": "1.0.0", "supportedVersions": ["1.0.0"]}))
        sys.exit(0)
    if cmd == "ADD":
        try:
            host = open("/run/flannel/subnet.env").read()
            subprocess.run(["nsenter", "--net=" + os.environ["CNI_NETNS"], "sh", "-c",
                            "echo 1 > /proc/sys/net/ipv4/conf/%s/proxy_arp"
                            % os.environ["CNI_IFNAME"]], check=True, capture_output=True)
        except Exception as e:
            print(json.dumps({"cniVersion": "1.0.0", "code": 999, "msg": "hostprobe: %s" % e}))
            sys.exit(1)
        print(json.dumps(conf["prevResult"]))
    ''')


@pytest.fixture
def host_only_plugin(real_node):
    """The `hostprobe` plugin in the node's CNI bin dir and the host-only file it reads
    (flannel's /run/flannel/subnet.env), removed afterwards."""
    plugin = real_node.host_path("/opt/cni/bin/hostprobe")
    env = real_node.host_path("/run/flannel/subnet.env")
    plugin.write_text(HOSTPROBE)
    plugin.chmod(0o755)
    env.write_text("FLANNEL_NETWORK=198.19.192.0/18\nFLANNEL_SUBNET=198.19.193.1/24\n")
    try:
        yield "hostprobe"
    finally:
        plugin.unlink()
        env.unlink()


def test_no_container_can_write_its_image(real_node, installed):
    """readOnlyRootFilesystem holds on the node, in every container of the pod: a write
    into the image fails, at / and /tmp alike; in thick mode also at /var/log, which
    the daemon no longer mounts from the host (it logs to stderr)."""
    containers = [c["name"] for c in
                  nd.daemonset(real_node)["spec"]["template"]["spec"]["containers"]]
    assert containers == {"thin": ["install"], "thick": ["install", "daemon"]}[installed]

    def exec_in(container: str, *argv: str):
        return real_node.kubectl("-n", nd.NAMESPACE, "exec", f"daemonset/{nd.DAEMONSET}",
                                 "-c", container, "--", *argv, check=False)
    for container in containers:
        ran = exec_in(container, "true")
        assert ran.returncode == 0, ran.stderr  # the exec itself works
        for path in ("/probe", "/tmp/probe", "/var/log/probe"):
            touched = exec_in(container, "touch", path)
            assert touched.returncode != 0, (container, path)
            assert "Read-only file system" in touched.stderr, (container, path, touched.stderr)


def test_children_run_in_the_hosts_root(real_node, installed, node_scenario, host_only_plugin):
    """In both modes a child sees the host's files and writes the pod netns' /proc/sys:
    thin mode because the runtime execs it on the host; thick mode because the daemon
    (privileged) runs it in the host's root, as Multus' chrootDir does."""
    namespace = node_scenario.namespace
    conf = {"cniVersion": "1.0.0", "name": "probed", "plugins": [
        {"type": "macvlan", "master": node_scenario.master, "mode": "bridge",
         "ipam": {"type": "host-local", "subnet": "198.19.196.0/24"}},
        {"type": host_only_plugin}]}
    name = nd.unique_name("probed")
    nd.apply_objects(real_node, [
        {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
         "metadata": {"name": "probed", "namespace": namespace},
         "spec": {"config": json.dumps(conf)}},
        nd.pod_manifest(namespace, name, {NETWORKS: "probed"})])
    nd.wait_running(real_node, namespace, name)
    pid = real_node.pod_pid(namespace, name)
    proxy_arp = nd.run("nsenter", "-t", str(pid), "-n", "cat",
                       "/proc/sys/net/ipv4/conf/net1/proxy_arp").stdout.strip()
    assert proxy_arp == "1"
    nd.delete_pod(real_node, namespace, name)
    assert real_node.ipam_allocations() == []


@pytest.mark.parametrize("installed", ["thick"], indirect=True)  # the node daemon's
def test_hotplug_adds_and_removes_a_network_on_a_running_pod(real_node, installed,
                                                             node_scenario):
    namespace = node_scenario.namespace
    name = nd.unique_name("hot")
    nd.apply_objects(real_node, [nd.pod_manifest(namespace, name, {NETWORKS: "net-a"})])
    nd.wait_running(real_node, namespace, name)
    assert sorted(real_node.pod_addresses(namespace, name)) == ["eth0", "lo", "net1"]
    real_node.kubectl("-n", namespace, "annotate", "pod", name, "--overwrite",
                      f"{NETWORKS}=net-a,other/net-b@data0")
    wait_for(lambda: "data0" in real_node.pod_addresses(namespace, name),
             "hot-plug added data0", timeout=60)
    wait_for(lambda: [e["interface"] for e in nd.network_status(real_node, namespace, name)]
             == ["eth0", "net1", "data0"], "network-status lists data0", timeout=60)
    real_node.kubectl("-n", namespace, "annotate", "pod", name, "--overwrite",
                      f"{NETWORKS}=net-a")
    wait_for(lambda: "data0" not in real_node.pod_addresses(namespace, name),
             "hot-plug removed data0", timeout=60)
    # the bridge plugin releases the address after it removed the link
    wait_for(lambda: not any(a.startswith("net-b/") for a in real_node.ipam_allocations()),
             "hot-plug released net-b's address", timeout=60)
    wait_for(lambda: [e["interface"] for e in nd.network_status(real_node, namespace, name)]
             == ["eth0", "net1"], "network-status without data0", timeout=60)
    nd.delete_pod(real_node, namespace, name)
    assert real_node.ipam_allocations() == []
