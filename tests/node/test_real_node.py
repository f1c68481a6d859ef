"""The real node itself, before netattach: it is Ready, and a pod gets the cluster
default network from the runtime alone (what every later test builds on)."""
from __future__ import annotations

import ipaddress
import json
import subprocess

import pytest

from netattach_testbed import node as nd
from netattach_testbed.serviceaccount import wait_for


def _running(node: nd.RealNode, namespace: str, name: str) -> dict:
    def phase():
        pod = node.get("pod", "-n", namespace, name)
        return pod if pod["status"].get("phase") == "Running" else None
    return wait_for(phase, f"pod {namespace}/{name} Running", timeout=120)


def test_a_pod_gets_the_cluster_default_network_and_frees_it(real_node):
    name = nd.unique_name("plain")
    real_node.kubectl("apply", "-f", "-", stdin=json.dumps(nd.pod_manifest("default", name)))
    pod = _running(real_node, "default", name)
    assert pod["spec"]["nodeName"] == nd.NODE_NAME
    addrs = real_node.pod_addresses("default", name)
    assert sorted(addrs) == ["eth0", "lo"]
    [eth0] = addrs["eth0"]
    assert ipaddress.ip_interface(eth0).ip in ipaddress.ip_network(nd.POD_SUBNET)
    assert pod["status"]["podIP"] == eth0.split("/")[0]
    assert real_node.ipam_allocations() == [f"cluster-net/{pod['status']['podIP']}"]
    real_node.kubectl("delete", "pod", "-n", "default", name, "--wait=true")
    assert real_node.ipam_allocations() == []


def test_nothing_aimed_at_a_service_ip_leaves_the_machine(real_node):
    # the Service range is blackholed: a connection fails at once, locally
    p = subprocess.run(["ip", "route", "get", "198.19.240.77"], capture_output=True, text=True)
    assert p.returncode != 0 or "blackhole" in p.stdout or "unreachable" in p.stderr.lower(), p
    # ... but the `kubernetes` Service's IP answers, on the node's bridge
    out = subprocess.run(["ip", "route", "get", nd.KUBERNETES_SERVICE_IP], capture_output=True,
                         text=True, check=True).stdout
    assert out.startswith("local "), out


def test_a_node_without_the_plugins_variable_says_so(tmp_path, monkeypatch):
    # the guard must fire before any copy: Path("") would be "." and the copy of
    # "./bridge" fail with a message that names no variable
    monkeypatch.delenv("NETATTACH_CNI_BIN", raising=False)
    node = nd.RealNode(tmp_path / "node")
    with pytest.raises(nd.ClusterError, match="NETATTACH_CNI_BIN is not set"):
        node._cni_bin_dir()
