"""charts/netattach/ installed on the real node with the test bed's Helm, as README's
install section says: `helm install` (thin mode, the defaults) rolls the DaemonSet out and
a pod of scenario 1 gets its three networks; `helm upgrade --set mode=thick` switches the
node to thick mode in place (the daemon container, the shim) and a pod gets its networks
again; `helm uninstall` leaves no netattach file on the node, and the CRD in place (crds/).
"""
from __future__ import annotations

import json

from netattach_testbed import helm as hm
from netattach_testbed import node as nd

NETWORKS = "k8s.v1.cni.cncf.io/networks"


def _pod_gets_its_networks(node: nd.RealNode, scenario) -> None:
    """A pod of scenario 1 runs with eth0, net1 and data0 and their network-status; its
    deletion leaves no netattach state."""
    namespace, name = scenario.namespace, nd.unique_name("pod")
    nd.apply_objects(node, [nd.pod_manifest(namespace, name,
                                            {NETWORKS: "net-a,other/net-b@data0"})])
    nd.wait_running(node, namespace, name)
    addrs = node.pod_addresses(namespace, name)
    assert sorted(addrs) == ["data0", "eth0", "lo", "net1"]
    status = nd.network_status(node, namespace, name)
    assert [(e["name"], e["interface"], e["ips"]) for e in status] == [
        ("cluster-net", "eth0", addrs["eth0"]), (f"{namespace}/net-a", "net1", addrs["net1"]),
        ("other/net-b", "data0", addrs["data0"])]
    nd.delete_pod(node, namespace, name)
    nd.wait_state_clean(node)


def _release(node: nd.RealNode, home) -> dict:
    """`helm status netattach -n kube-system -o json`, parsed."""
    assert node.cluster is not None
    out = hm.run(home, "status", "netattach", "--namespace", hm.NAMESPACE, "-o", "json",
                 kubeconfig=node.cluster.admin_kubeconfig).stdout
    return json.loads(out)


def test_readme_helm_install_upgrade_to_thick_and_uninstall(
        real_node, node_image, node_scenario, tmp_path):
    assert real_node.cluster is not None
    clone = nd.readme_clone(tmp_path)
    home = tmp_path / "helm-home"
    env = hm.helm_env(home)
    nd.run_readme_block(real_node, "readme-install-helm", clone, env=env)
    try:
        ds = nd.daemonset(real_node)
        assert ds["metadata"]["annotations"]["meta.helm.sh/release-name"] == "netattach"
        assert [c["name"] for c in ds["spec"]["template"]["spec"]["containers"]] == ["install"]
        assert real_node.node_ready()
        _pod_gets_its_networks(real_node, node_scenario)
        assert not real_node.host_path("/opt/cni/bin/netattach-shim").exists()

        nd.run_readme_block(real_node, "readme-upgrade-helm", clone, env=env)
        release = _release(real_node, home)
        assert (release["version"], release["info"]["status"]) == (2, "deployed")
        ds = nd.daemonset(real_node)
        spec = ds["spec"]["template"]["spec"]
        assert [c["name"] for c in spec["containers"]] == ["install", "daemon"]
        assert spec["serviceAccountName"] == "netattach-daemon"
        # the installer now writes the shim's conflist
        assert real_node.host_path("/opt/cni/bin/netattach-shim").exists()
        conflist = json.loads(real_node.host_path("/etc/cni/net.d/00-netattach.conflist")
                              .read_text())
        assert conflist["plugins"][0]["type"] == "netattach-shim"
        _pod_gets_its_networks(real_node, node_scenario)
    except BaseException:
        # leave the node as the next test expects it: netattach not installed
        hm.run(home, "uninstall", "netattach", "--namespace", hm.NAMESPACE, "--wait",
               "--ignore-not-found", kubeconfig=real_node.cluster.admin_kubeconfig,
               check=False)
        raise

    nd.remove_stopped_sandboxes(real_node)
    with nd.uninstalling(real_node):
        nd.run_readme_block(real_node, "readme-uninstall-helm", clone, env=env)
    assert not real_node.host_path("/etc/cni/net.d/00-netattach.conflist").exists()
    out = hm.run(home, "list", "--namespace", hm.NAMESPACE, "-q",
                 kubeconfig=real_node.cluster.admin_kubeconfig).stdout
    assert out.strip() == ""
    # crds/: Helm never deletes the CRD, so NADs outlive the release
    real_node.kubectl("get", "crd", "network-attachment-definitions.k8s.cni.cncf.io")
    real_node.kubectl("-n", node_scenario.namespace, "get",
                      "network-attachment-definitions", "net-a")
