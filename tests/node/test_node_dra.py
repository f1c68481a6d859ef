"""DRA on the real node: docs/dra.md's complete example applied as written (DeviceClass,
ResourceClaimTemplate, pod) on a node whose netattach daemon runs the DRA driver. The
real scheduler allocates a device of the node's ResourceSlice, the real kubelet prepares
it through netattach's DRA plugin, the pod runs with the claim's interface, and the
claim's status has its networkData; deleting the pod frees it."""
from __future__ import annotations

import yaml

from netattach_testbed import cluster as cl
from netattach_testbed import node as nd

DRA_DOC = cl.REPO_ROOT / "docs" / "dra.md"
NETWORKS = "k8s.v1.cni.cncf.io/networks"


def test_the_docs_dra_example_runs_as_written(real_node, node_image, host_env, tmp_path):
    example = nd.doc_block(DRA_DOC, "dra-example")
    docs = list(yaml.safe_load_all(example))
    [pod] = [d for d in docs if d["kind"] == "Pod"]
    namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    # the image the example names, imported as every image here (no registry)
    real_node.ctr("images", "tag", "--force", nd.PAUSE_IMAGE, pod["spec"]["containers"][0]["image"])
    # the host interface the node's DRA driver offers: a test-made one, never the
    # machine's own NIC (`--dra-interfaces`, docs/dra.md)
    master, bridge = host_env.master_link(), host_env.bridge_name()
    overlay = nd.admin_overlay(tmp_path, "thick", patches=[nd.container_args_patch(
        real_node, "thick", "daemon", "--dra", f"--dra-interfaces={master}")])
    nd.install(real_node, "thick", overlay)
    try:
        nd.apply_objects(real_node, [{"apiVersion": "v1", "kind": "Namespace",
                                      "metadata": {"name": n}} for n in (namespace, "other")]
                         + nd.scenario_nads(namespace, master, bridge))
        real_node.kubectl("apply", "-f", "-", stdin=example)
        nd.wait_running(real_node, namespace, name, timeout=180)
        addrs = real_node.pod_addresses(namespace, name)
        assert sorted(addrs) == ["dra0", "eth0", "lo", "net1"], addrs
        status = nd.network_status(real_node, namespace, name)
        assert [e["interface"] for e in status] == ["eth0", "net1", "dra0"]
        claim_name = real_node.get("pod", "-n", namespace, name)["status"][
            "resourceClaimStatuses"][0]["resourceClaimName"]
        claim = real_node.get("resourceclaim", "-n", namespace, claim_name)
        [device] = claim["status"]["devices"]
        assert device["driver"] == "cni.dra.networking.x-k8s.io"
        assert device["networkData"]["interfaceName"] == "dra0"
        assert device["networkData"]["ips"] == addrs["dra0"]
        assert claim["status"]["allocation"]["devices"]["results"][0]["device"].startswith(
            f"{master}-")  # a device of the test-made interface

        nd.delete_pod(real_node, namespace, name)
        assert real_node.ipam_allocations() == []
        nd.wait_state_clean(real_node)
    finally:
        real_node.kubectl("delete", "namespace", namespace, "--wait=true", "--timeout=120s",
                          check=False, timeout=150)
        real_node.kubectl("delete", "deviceclass", docs[0]["metadata"]["name"],
                          "--ignore-not-found", check=False)
        nd.uninstall(real_node, "thick")
