"""The installer's conf keys on the real node: from a ConfigMap (deploy/examples/netconf/
as written, thick mode) and from flags plus the component in an admin's overlay (thin
mode), with an admin's hand edit of the conflist reverted with a WARNING in the
installer's log; confDir left unset unless asked. And the DEL of a pod that predates netattach on
the node is quiet."""
from __future__ import annotations

import json
import os

import yaml

from netattach_testbed import cluster as cl
from netattach_testbed import node as nd
from netattach_testbed.serviceaccount import wait_for

NETWORKS = "k8s.v1.cni.cncf.io/networks"
CONFLIST = "/etc/cni/net.d/00-netattach.conflist"


def _entry(node: nd.RealNode) -> dict:
    return json.loads(node.host_path(CONFLIST).read_text())["plugins"][0]


def test_conf_keys_from_the_configmap_example(real_node, node_image, node_scenario):
    """deploy/examples/netconf/ applied as written: its ConfigMap's keys are in the
    conflist, and pods get their networks with it."""
    keys = yaml.safe_load((cl.DEPLOY_DIR / "examples" / "netconf" / "netconf.yaml").read_text())
    nd.install(real_node, "thick", cl.DEPLOY_DIR / "examples" / "netconf")
    try:
        entry = _entry(real_node)
        assert {k: entry.get(k) for k in keys} == keys
        assert "confDir" not in entry
        name = nd.unique_name("conf")
        nd.apply_objects(real_node, [nd.pod_manifest(node_scenario.namespace, name,
                                                     {NETWORKS: "net-a"})])
        nd.wait_running(real_node, node_scenario.namespace, name)
        assert sorted(real_node.pod_addresses(node_scenario.namespace, name)) == \
            ["eth0", "lo", "net1"]
        nd.delete_pod(real_node, node_scenario.namespace, name)
        assert real_node.ipam_allocations() == []
    finally:
        nd.uninstall(real_node, "thick", cl.DEPLOY_DIR / "examples" / "netconf")


def test_conf_keys_from_flags_and_a_configmap_in_thin_mode(real_node, node_image, node_scenario,
                                                           tmp_path):
    """An admin's overlay of deploy/ with the netconf component and a flag: every pod gets
    the cluster's `defaultNetworks` (a NAD in kube-system) after its default network."""
    ns = node_scenario.namespace
    nd.apply_objects(real_node, nd.scenario_nads("kube-system", node_scenario.master,
                                                 node_scenario.net_b_bridge)[:1])
    (tmp_path / "netconf.yaml").write_text("defaultNetworks: [net-a]\n")
    overlay = nd.admin_overlay(tmp_path, "thin", patches=[
        nd.container_args_patch(real_node, "thin", "install", "--delegate-timeout=30")])
    doc = yaml.safe_load((overlay / "kustomization.yaml").read_text())
    doc["components"] = [os.path.relpath(cl.DEPLOY_DIR / "components" / "netconf", tmp_path)]
    doc["configMapGenerator"] = [{"name": "netattach-netconf", "namespace": "kube-system",
                                  "files": ["netconf.yaml"]}]
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(doc))
    nd.install(real_node, "thin", overlay)
    try:
        entry = _entry(real_node)
        assert entry["defaultNetworks"] == ["net-a"] and entry["delegateTimeout"] == 30
        assert "confDir" not in entry
        name = nd.unique_name("defaults")
        nd.apply_objects(real_node, [nd.pod_manifest(ns, name, {NETWORKS: "other/net-b@data0"})])
        nd.wait_running(real_node, ns, name)
        assert [(e["name"], e["interface"]) for e in nd.network_status(real_node, ns, name)] == [
            ("cluster-net", "eth0"), ("kube-system/net-a", "net1"), ("other/net-b", "data0")]
        nd.delete_pod(real_node, ns, name)
        assert real_node.ipam_allocations() == []
        # an admin's hand edit of the conflist: the installer owns it, rewrites it and
        # says so (docs/install.md, "Your edits of 00-netattach.conflist")
        path = real_node.host_path(CONFLIST)
        written = path.read_text()
        edited = json.loads(written)
        edited["plugins"][0]["logLevel"] = "debug"
        path.write_text(json.dumps(edited))
        wait_for(lambda: path.read_text() == written, "the installer rewrote its conflist",
                 timeout=60)
        logs = real_node.kubectl("-n", nd.NAMESPACE, "logs", f"daemonset/{nd.DAEMONSET}",
                                 "-c", "install").stdout
        assert any("WARNING" in line and "00-netattach.conflist" in line
                   for line in logs.splitlines()), logs
    finally:
        nd.uninstall(real_node, "thin", overlay)
        real_node.kubectl("-n", "kube-system", "delete", "net-attach-def", "net-a",
                          "--ignore-not-found", check=False)


def test_a_pod_that_predates_netattach_is_deleted_quietly(real_node, node_image, node_scenario):
    ns = node_scenario.namespace
    name = nd.unique_name("before")
    nd.apply_objects(real_node, [nd.pod_manifest(ns, name, {NETWORKS: "net-a"})])
    nd.wait_running(real_node, ns, name)
    assert sorted(real_node.pod_addresses(ns, name)) == ["eth0", "lo"]  # no netattach yet
    nd.install(real_node, "thin")
    try:
        before = len(real_node.log("containerd"))
        nd.delete_pod(real_node, ns, name)
        assert real_node.ipam_allocations() == []
        said = real_node.log("containerd")[before:]
        assert "netattach" in said  # the DEL went through netattach, which logs to stderr
        # only this pod's lines: the kubelet's garbage collection may DEL the sandboxes of
        # earlier tests' pods again meanwhile, whose state an uninstall removed
        mine = [line for line in said.splitlines()
                if "netattach" in line and f"pod {ns}/{name}" in line]
        assert mine, said
        assert not [line for line in mine if "WARNING" in line or "ERROR" in line], said
    finally:
        nd.uninstall(real_node, "thin")
