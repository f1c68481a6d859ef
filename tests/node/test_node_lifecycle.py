"""netattach's life on the real node with pods running: upgrades (an image tag to another,
thin to thick in place), restarts of the installer pod, the kubelet and containerd, and
the uninstall. Through all of it a running pod keeps its networks, a new pod gets all of
its networks, and every DEL frees everything, whichever version ADDed the pod."""
from __future__ import annotations

import json
import time

import pytest

from netattach_testbed import node as nd

NETWORKS = "k8s.v1.cni.cncf.io/networks"
SELECTION = "net-a,other/net-b@data0"


def _pod(node: nd.RealNode, namespace: str, prefix: str = "pod") -> tuple[str, dict]:
    """A scenario-1 pod, Running: (name, its addresses by link)."""
    name = nd.unique_name(prefix)
    nd.apply_objects(node, [nd.pod_manifest(namespace, name, {NETWORKS: SELECTION})])
    nd.wait_running(node, namespace, name)
    addrs = node.pod_addresses(namespace, name)
    assert sorted(addrs) == ["data0", "eth0", "lo", "net1"], addrs
    assert [e["interface"] for e in nd.network_status(node, namespace, name)] == \
        ["eth0", "net1", "data0"]
    return name, addrs


def _delete_all(node: nd.RealNode, namespace: str, *names: str) -> None:
    """Delete the pods: their DELs free every address and every saved state, whichever
    version ADDed them."""
    for name in names:
        nd.delete_pod(node, namespace, name)
    assert node.ipam_allocations() == []
    nd.wait_state_clean(node)


def _conflist_type(node: nd.RealNode) -> str:
    conf = json.loads(node.host_path("/etc/cni/net.d/00-netattach.conflist").read_text())
    return conf["plugins"][0]["type"]


def _saved(node: nd.RealNode) -> list[str]:
    """The saved states on the node (not the locks of commands running now)."""
    return [f for f in nd.state_files(node) if f.endswith(".json")]


def _snapshot(node: nd.RealNode) -> dict[str, list[str]]:
    """The node's CNI dirs: the names in the conf dir and the bin dir, and netattach's
    own in /var/lib/cni (host-local's `networks` and libcni's `results` are theirs)."""
    def names(d: str) -> list[str]:
        return sorted(p.name for p in node.host_path(d).iterdir()) \
            if node.host_path(d).exists() else []
    return {"/etc/cni/net.d": names("/etc/cni/net.d"), "/opt/cni/bin": names("/opt/cni/bin"),
            "/var/lib/cni": [n for n in names("/var/lib/cni") if n not in ("networks", "results")]}


@pytest.mark.parametrize("mode", ["thin", "thick"])
def test_readme_install_upgrade_to_another_image_and_uninstall_with_pods_running(
        real_node, node_image, node_scenario, mode, tmp_path):
    """README's install section as written (thick mode: the paths its comments give): the
    install, an overlay of the admin's own image (another tag, pushed: here imported)
    with pods running, the uninstall."""
    ns = node_scenario.namespace
    clone = nd.readme_clone(tmp_path)
    thick = ("../deploy]", "../deploy/thick]") if mode == "thick" else None
    before = _snapshot(real_node)
    out = nd.run_readme_block(real_node, f"readme-install-{mode}", clone)
    assert 'daemon set "netattach" successfully rolled out' in out
    try:
        old, old_addrs = _pod(real_node, ns, "old")
        real_node.ctr("images", "tag", "--force", node_image,
                      "registry.example.com/netattach:0.1.0")
        nd.run_readme_block(real_node, "readme-install-own-image", clone, thick)
        containers = nd.daemonset(real_node)["spec"]["template"]["spec"]["containers"]
        assert {c["name"]: c["image"] for c in containers} == {
            name: "registry.example.com/netattach:0.1.0"
            for name in (["install"] if mode == "thin" else ["install", "daemon"])}
        # the running pod kept its networks; a new one gets all of them
        assert real_node.pod_addresses(ns, old) == old_addrs
        new, _ = _pod(real_node, ns, "new")
        # the DEL of a pod the old version ADDed frees everything
        _delete_all(real_node, ns, old, new)
    finally:
        with nd.uninstalling(real_node):
            nd.run_readme_block(real_node, "readme-uninstall", clone,
                                ("deploy/ ", "deploy/thick/ ") if mode == "thick" else None)
    assert nd.netattach_files(real_node) == []
    assert _snapshot(real_node) == before


def test_thin_to_thick_in_place_with_pods_running(real_node, node_image, node_scenario):
    ns = node_scenario.namespace
    nd.install(real_node, "thin")
    try:
        thin_pod, thin_addrs = _pod(real_node, ns, "thin")
        assert _conflist_type(real_node) == "netattach"
        nd.install(real_node, "thick")
        assert _conflist_type(real_node) == "netattach-shim"
        assert real_node.pod_addresses(ns, thin_pod) == thin_addrs
        thick_pod, _ = _pod(real_node, ns, "thick")
        _delete_all(real_node, ns, thin_pod, thick_pod)
    finally:
        nd.uninstall(real_node, "thick")
        # the thin install's own objects (ServiceAccount, RBAC) outlive the thick overlay
        nd.uninstall(real_node, "thin")


@pytest.mark.parametrize("mode", ["thin", "thick"])
def test_installer_kubelet_and_containerd_restarts_with_pods_running(real_node, node_image, node_scenario,
                                                          mode):
    ns = node_scenario.namespace
    nd.install(real_node, mode)
    try:
        name, addrs = _pod(real_node, ns, "steady")
        sandbox = real_node.pod_sandbox(ns, name)["id"]
        # the installer's pod deleted (its DaemonSet makes another): a pod created while
        # it goes and comes back gets every network, never the primary network alone
        # (thin: the conflist stayed; thick: the runtime retries the ADD until the
        # daemon answers)
        real_node.kubectl("-n", nd.NAMESPACE, "delete", "pod", "-l",
                          "app.kubernetes.io/name=netattach", "--wait=false")
        during, _ = _pod(real_node, ns, "during")
        nd.rollout(real_node)
        allocations, states = real_node.ipam_allocations(), _saved(real_node)
        for component in ("kubelet", "containerd"):
            real_node.restart(component)
            nd.rollout(real_node)
            # nothing was DEL'ed that is still in use
            assert real_node.pod_sandbox(ns, name)["id"] == sandbox, component
            assert real_node.pod_addresses(ns, name) == addrs, component
            assert real_node.ipam_allocations() == allocations, component
            assert _saved(real_node) == states, component
        # and a pod created now gets all its networks
        after, _ = _pod(real_node, ns, "after")
        _delete_all(real_node, ns, name, during, after)
    finally:
        nd.uninstall(real_node, mode)


@pytest.mark.parametrize("mode", ["thin", "thick"])
def test_uninstall_with_a_multi_network_pod_running_leaks_nothing(real_node, node_image,
                                                                  node_scenario, mode):
    ns = node_scenario.namespace
    before = _snapshot(real_node)
    nd.install(real_node, mode)
    name, _ = _pod(real_node, ns, "stays")
    nd.uninstall(real_node, mode, clean=False)  # the pod's DEL removes the files
    # a pod created now gets the cluster default network alone, as without netattach
    plain = nd.unique_name("plain")
    nd.apply_objects(real_node, [nd.pod_manifest(ns, plain, {NETWORKS: SELECTION})])
    nd.wait_running(real_node, ns, plain)
    assert sorted(real_node.pod_addresses(ns, plain)) == ["eth0", "lo"]
    _delete_all(real_node, ns, name, plain)
    assert nd.netattach_files(real_node) == []
    assert _snapshot(real_node) == before


def test_an_uninstall_while_an_installer_starts_leaves_no_files(real_node, node_image,
                                                                 node_scenario, tmp_path):
    """`kubectl delete -k` while the DaemonSet's replacement of an installer pod starts
    (an uninstall during a rolling update, or right after an eviction): the kubelet's
    stop signal reaches the new container before its process has a handler, and the
    container's PID 1 ignores it, so the installer never hears its stop. It starts with
    its ServiceAccount deleted (401) and retires the node itself
    (docs/install-lifecycle.md, "An uninstall while an installer starts").

    The start is held at a gate (a shell, PID 1 like the installer, waiting for a file)
    until the kubelet has signalled the container, so the signal is lost every time;
    the grace period is long enough that the kill never comes before the installer
    has answered (a hang guard, not a timing)."""
    gate = real_node.host_path("/etc/cni/net.d/.test-installer-gate")
    script = ("while [ ! -e /host/etc/cni/net.d/.test-installer-gate ]; do sleep 0.2; done; "
              'exec /opt/netattach/netattach install "$@"')
    overlay = nd.admin_overlay(tmp_path, "thin", patches=[{
        "target": {"kind": "DaemonSet", "name": nd.DAEMONSET},
        "patch": json.dumps([
            {"op": "replace", "path": "/spec/template/spec/containers/0/command",
             "value": ["/bin/sh", "-c", script, "sh"]},
            {"op": "replace", "path": "/spec/template/spec/terminationGracePeriodSeconds",
             "value": 30}])}])
    before = _snapshot(real_node)
    gate.touch()
    try:
        nd.install(real_node, "thin", overlay)
        [old] = nd.netattach_pods(real_node)
        gate.unlink()
        real_node.kubectl("-n", nd.NAMESPACE, "delete", "pod", old["metadata"]["name"],
                          "--wait=false")
        new = _wait_for(real_node, lambda: [
            p for p in nd.netattach_pods(real_node) if p["metadata"]["name"] !=
            old["metadata"]["name"] and "running" in _state(p)])
        name = new["metadata"]["name"]
        container = new["status"]["containerStatuses"][0]["containerID"]
        assert nd.netattach_files(real_node), "the old installer's stop keeps the files"
        with nd.uninstalling(real_node, clean=True, timeout=120):
            real_node.kubectl("delete", "-k", str(overlay), "--ignore-not-found",
                              "--wait=true")
            # the kubelet stops the new container as the garbage collector deletes its pod
            _wait_for(real_node, lambda: [
                line for line in real_node.log("kubelet").splitlines()
                if "Killing container with a grace period" in line and container in line])
            gate.touch()  # the installer starts now; its stop signal has come and gone
        events = real_node.kubectl("get", "events", "-A", "--field-selector",
                                   f"involvedObject.name={name}", check=False).stdout
        assert nd.netattach_files(real_node) == [], events
        gate.unlink()
        assert _snapshot(real_node) == before
    finally:
        gate.unlink(missing_ok=True)


def _state(pod: dict) -> dict:
    statuses = pod.get("status", {}).get("containerStatuses") or [{}]
    return statuses[0].get("state") or {}


def _wait_for(node: nd.RealNode, found, timeout: float = 120):
    """The first of what `found()` returns once it returns something (hang guard
    `timeout` seconds: AssertionError with netattach's pods)."""
    deadline = time.monotonic() + timeout
    while not (items := found()):
        if time.monotonic() > deadline:
            pods = node.kubectl("-n", nd.NAMESPACE, "get", "pods", "-o", "wide",
                                check=False).stdout
            raise AssertionError(f"not seen within {timeout:.0f} s:\n{pods}")
        time.sleep(0.3)
    return items[0]
