"""charts/netattach/ installed on the real node with the test bed's Helm, as README's
install block and docs/helm.md's blocks say: `helm install` (thin mode, with one value
set: image.pullPolicy=Never) rolls the DaemonSet out and a pod of scenario 1 gets its
three networks; thin -> thick in place (the daemon container, the shim) and a pod gets its
networks again; thick -> thin, the two upgrades of docs/helm.md, with no node retired on
the way (each old installer's stop is a restart, not an uninstall) and thick mode's RBAC
gone after the second; the value set at install survives each upgrade; `helm uninstall`
leaves no netattach file on the node, and the CRD in place (crds/). And a `kubectl apply
-k` install taken over by `helm install --take-ownership` without restarting its pods.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from netattach_testbed import helm as hm
from netattach_testbed import netns as tb
from netattach_testbed import node as nd
from netattach_testbed import scenario as sc

NETWORKS = "k8s.v1.cni.cncf.io/networks"
# README's install command, and the value this test adds to it (a default it changes,
# which every upgrade of docs/helm.md must keep: the image is in the node's containerd)
INSTALL = "helm install netattach charts/netattach -n kube-system"
KEPT_VALUE = ("image.pullPolicy", "Never")
CONFLIST = "/etc/cni/net.d/00-netattach.conflist"
# the installer's verdict at its stop (install/loop.py)
RESTART = "netattach stays installed on this node"
UNINSTALL = "netattach is uninstalled"


def _pod_gets_its_networks(node: nd.RealNode, scenario) -> None:
    """A pod of scenario 1 runs with eth0, net1 and data0 and their network-status (bare
    addresses, docs/behaviour.md); its deletion leaves no netattach state."""
    namespace, name = scenario.namespace, nd.unique_name("pod")
    nd.apply_objects(node, [nd.pod_manifest(namespace, name,
                                            {NETWORKS: "net-a,other/net-b@data0"})])
    nd.wait_running(node, namespace, name)
    addrs = node.pod_addresses(namespace, name)
    assert sorted(addrs) == ["data0", "eth0", "lo", "net1"]
    status = nd.network_status(node, namespace, name)
    assert [(e["name"], e["interface"], e["ips"]) for e in status] == [
        ("cluster-net", "eth0", tb.bare(addrs["eth0"])),
        (f"{namespace}/net-a", "net1", tb.bare(addrs["net1"])),
        ("other/net-b", "data0", tb.bare(addrs["data0"]))]
    sc.assert_bare_ips(status)
    nd.delete_pod(node, namespace, name)
    nd.wait_state_clean(node)


def _release(node: nd.RealNode, home: Path) -> dict:
    """`helm status netattach -n kube-system -o json`, parsed."""
    assert node.cluster is not None
    out = hm.run(home, "status", "netattach", "--namespace", hm.NAMESPACE, "-o", "json",
                 kubeconfig=node.cluster.admin_kubeconfig).stdout
    return json.loads(out)


def _pod_spec(node: nd.RealNode) -> dict:
    return nd.daemonset(node)["spec"]["template"]["spec"]


def _pull_policies(node: nd.RealNode) -> set[str]:
    return {c["imagePullPolicy"] for c in _pod_spec(node)["containers"]}


def _netattach_pods(node: nd.RealNode) -> dict[str, str]:
    """netattach's pods: name -> uid."""
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in nd.netattach_pods(node)}


def _has_thick_rbac(node: nd.RealNode) -> bool:
    return node.kubectl("-n", nd.NAMESPACE, "get", "serviceaccount", "netattach-daemon",
                        check=False).returncode == 0


def _wait_for(read, *needles: str, timeout: float = 120) -> str:
    """read() once it holds one of `needles` (`timeout` is a hang guard); AssertionError
    with what was read otherwise."""
    deadline = time.monotonic() + timeout
    while not any(n in (text := read()) for n in needles):
        if time.monotonic() > deadline:
            raise AssertionError(f"none of {needles} in the installers' logs:\n{text[-8000:]}")
        time.sleep(0.3)
    return text


def _clean_up(node: nd.RealNode, home: Path, scenario, kustomize: bool = False) -> None:
    """After a failure: leave the node as the next test expects it, netattach not
    installed (the test's pods deleted, the release uninstalled, with `kustomize` also
    deploy/'s objects deleted), and waited for until its files are gone."""
    assert node.cluster is not None
    node.kubectl("-n", scenario.namespace, "delete", "pods", "--all", "--wait=true",
                 "--timeout=120s", check=False, timeout=150)
    nd.remove_stopped_sandboxes(node)
    with nd.uninstalling(node):
        hm.run(home, "uninstall", "netattach", "--namespace", hm.NAMESPACE, "--wait",
               "--ignore-not-found", kubeconfig=node.cluster.admin_kubeconfig, check=False)
        if kustomize:
            node.kubectl("delete", "-k", str(nd.OVERLAYS["thin"]), "--ignore-not-found",
                         "--wait=true", check=False, timeout=150)


def test_helm_install_thin_to_thick_to_thin_and_uninstall(
        real_node, node_image, node_scenario, tmp_path):
    assert real_node.cluster is not None
    clone = nd.readme_clone(tmp_path)
    home = tmp_path / "helm-home"
    env = hm.helm_env(home)
    key, value = KEPT_VALUE
    try:
        nd.run_readme_block(real_node, "readme-install-helm", clone, env=env,
                            replace=(INSTALL, f"{INSTALL} --set {key}={value}"))
        ds = nd.daemonset(real_node)
        assert ds["metadata"]["annotations"]["meta.helm.sh/release-name"] == "netattach"
        assert [c["name"] for c in _pod_spec(real_node)["containers"]] == ["install"]
        assert _pull_policies(real_node) == {value}
        assert real_node.node_ready()
        _pod_gets_its_networks(real_node, node_scenario)
        assert not real_node.host_path("/opt/cni/bin/netattach-shim").exists()

        # thin -> thick
        nd.run_readme_block(real_node, "helm-upgrade-thick", clone, env=env, doc=nd.HELM_DOC)
        release = _release(real_node, home)
        assert (release["version"], release["info"]["status"]) == (2, "deployed")
        spec = _pod_spec(real_node)
        assert [c["name"] for c in spec["containers"]] == ["install", "daemon"]
        assert spec["serviceAccountName"] == "netattach-daemon"
        assert _pull_policies(real_node) == {value}     # --reset-then-reuse-values kept it
        # the installer now writes the shim's conflist
        assert real_node.host_path("/opt/cni/bin/netattach-shim").exists()
        conflist = json.loads(real_node.host_path(CONFLIST).read_text())
        assert conflist["plugins"][0]["type"] == "netattach-shim"
        _pod_gets_its_networks(real_node, node_scenario)

        # thick -> thin: the old thick pods' installers stop with their account still
        # there, so each reads its stop as a restart, and no node is retired
        old = _netattach_pods(real_node)
        with nd.following_logs(real_node) as logs:
            # the follower reads the old pods (every installer logs this at its start)
            # before the upgrade replaces them
            _wait_for(logs, "presence held on")
            nd.run_readme_block(real_node, "helm-upgrade-thin", clone, env=env,
                                doc=nd.HELM_DOC)
            text = _wait_for(logs, RESTART, UNINSTALL)
        assert UNINSTALL not in text and "wrote the retired" not in text, text[-8000:]
        assert text.count(RESTART) == len(old)
        assert not set(_netattach_pods(real_node).values()) & set(old.values())
        release = _release(real_node, home)
        assert (release["version"], release["info"]["status"]) == (4, "deployed")
        spec = _pod_spec(real_node)
        assert [c["name"] for c in spec["containers"]] == ["install"]
        assert spec["serviceAccountName"] == "netattach"
        assert _pull_policies(real_node) == {value}
        # the second upgrade removed thick mode's RBAC, unused by then
        assert not _has_thick_rbac(real_node)
        conflist = json.loads(real_node.host_path(CONFLIST).read_text())
        assert conflist["plugins"][0]["type"] == "netattach"
        assert "retired" not in conflist["plugins"][0]
        _pod_gets_its_networks(real_node, node_scenario)

        nd.remove_stopped_sandboxes(real_node)
        with nd.uninstalling(real_node):
            nd.run_readme_block(real_node, "helm-uninstall", clone, env=env, doc=nd.HELM_DOC)
    except BaseException:
        _clean_up(real_node, home, node_scenario)
        raise
    assert not real_node.host_path(CONFLIST).exists()
    out = hm.run(home, "list", "--namespace", hm.NAMESPACE, "-q",
                 kubeconfig=real_node.cluster.admin_kubeconfig).stdout
    assert out.strip() == ""
    # crds/: Helm never deletes the CRD, so NADs outlive the release
    real_node.kubectl("get", "crd", "network-attachment-definitions.k8s.cni.cncf.io")
    real_node.kubectl("-n", node_scenario.namespace, "get",
                      "network-attachment-definitions", "net-a")


def test_helm_takes_over_a_kubectl_apply_install_in_place(
        real_node, node_image, node_scenario, tmp_path):
    """docs/helm.md, "From kubectl apply -k to Helm": the release takes deploy/'s objects
    over; the DaemonSet's pods are not replaced (no node sees a stop), pods get their
    networks, and `helm uninstall` then removes netattach as usual."""
    assert real_node.cluster is not None
    clone = nd.readme_clone(tmp_path)
    home = tmp_path / "helm-home"
    env = hm.helm_env(home)
    try:
        nd.install(real_node, "thin")
        before = _netattach_pods(real_node)
        assert before
        nd.run_readme_block(real_node, "helm-adopt", clone, env=env, doc=nd.HELM_DOC)
        release = _release(real_node, home)
        assert (release["version"], release["info"]["status"]) == (1, "deployed")
        for kind, name in (("daemonset", "netattach"), ("serviceaccount", "netattach")):
            obj = real_node.get(kind, "-n", nd.NAMESPACE, name)["metadata"]
            assert obj["annotations"]["meta.helm.sh/release-name"] == "netattach"
            assert obj["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        assert _netattach_pods(real_node) == before
        _pod_gets_its_networks(real_node, node_scenario)
        nd.remove_stopped_sandboxes(real_node)
        with nd.uninstalling(real_node):
            nd.run_readme_block(real_node, "helm-uninstall", clone, env=env, doc=nd.HELM_DOC)
    except BaseException:
        _clean_up(real_node, home, node_scenario, kustomize=True)
        raise
    assert not real_node.host_path(CONFLIST).exists()

