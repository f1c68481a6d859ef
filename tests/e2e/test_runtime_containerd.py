"""netattach under a real container runtime: containerd 2.x, driven through the CRI as
the kubelet drives it (testbed/netattach_testbed/runtime.py), against the real API server.

The node is set up as the DaemonSet sets it up: `netattach install --once` puts the
built artifact in the node's CNI bin dir and writes 00-netattach.conflist (the only
file containerd loads) for a CNI 1.1.0 cluster default network (bridge, portmap,
bandwidth, and every capability containerd knows declared). What containerd sends is
the contract: CNI_ARGS in its order, the runtimeConfig of the declared capabilities,
libcni's result cache, STATUS on every CRI Status call, and DEL at StopPodSandbox and
again at RemovePodSandbox.
"""
from __future__ import annotations

import json
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from netattach_testbed import runtime as rt
from netattach_testbed import scenario as sc
from netattach_testbed.daemon import NodeDaemon
from netattach_testbed.serviceaccount import wait_for

pytestmark = pytest.mark.runtime

DEFAULT_SUBNET = sc.SUBNETS["default"]


@pytest.fixture
def node(cluster, host_env, cni_testbin, built_artifact):
    """A node with netattach installed and a running containerd; on teardown every
    sandbox left is stopped and removed through the CRI and containerd stops."""
    n = rt.node_setup(cluster, host_env, str(built_artifact), [cni_testbin],
                      host_env.bridge_name(), DEFAULT_SUBNET)
    rt.start_containerd(n, host_env.root / "containerd")
    try:
        yield n
    finally:
        n.containerd.stop()


def ifb_links() -> list[str]:
    """The bandwidth plugin's egress shaping devices on the host (ifb links it names
    bwp<hash>; the ifb module's own ifb0, ifb1 are not)."""
    p = subprocess.run(["ip", "-j", "link", "show", "type", "ifb"], capture_output=True,
                       text=True, check=True)
    return [link["ifname"] for link in json.loads(p.stdout or "[]")
            if link["ifname"].startswith("bwp")]


def problems(log: str) -> list[str]:
    """WARNING, ERROR and CRITICAL lines of netattach's log."""
    return [line for line in log.splitlines() if re.search(r"\b(WARNING|ERROR|CRITICAL)\b", line)]


# containerd's warning when runc's `delete` of a shim that already exited fails (exit
# status 255, the container's state already gone): seen once with sandboxes stopped in
# parallel on a loaded machine (2026-11-29). It is about the shim's own cleanup, after
# the network's teardown, and says nothing of the network.
DEAD_SHIM_CLEANUP = 'msg="warnings while cleaning up dead shim"'


def runtime_problems(node: rt.Node, sandbox_id: str) -> list[str]:
    """containerd's warning and error lines about a sandbox, but for DEAD_SHIM_CLEANUP."""
    return [line for line in node.containerd.log_text().splitlines()
            if sandbox_id in line and re.search(r"level=(warning|error|fatal)", line)
            and DEAD_SHIM_CLEANUP not in line]


def assert_freed(node: rt.Node, env, sandbox_id: str) -> None:
    """Nothing of the sandbox is left: no IP allocated, no netattach state, no libcni
    cache entry, no mount of its netns, and the runtime no longer lists it; the
    runtime logged no warning or error about it."""
    assert env.ipam_allocations() == []
    assert rt.mounts_under(node.containerd.workdir / "state") == []
    assert env.state_files() == []
    assert rt.libcni_cache_entries(sandbox_id) == []
    assert sandbox_id not in [s["id"] for s in node.cri.sandboxes()]
    assert runtime_problems(node, sandbox_id) == []


def invocations(log: str) -> list[dict[str, str]]:
    """netattach's record of each exec (its first DEBUG line): command, container,
    ifname, netns, args (CNI_ARGS keys in the runtime's order), runtimeConfig (keys)."""
    out = []
    for m in re.finditer(r"DEBUG netattach: (?P<command>[A-Z]+) container=(?P<container>\S*) "
                         r"ifname=(?P<ifname>\S*) netns=(?P<netns>\S*) args=(?P<args>\S*) "
                         r"runtimeConfig=(?P<runtimeConfig>\S*)", log):
        out.append(m.groupdict())
    return out


def netattach_log(env) -> str:
    path = env.log_dir / "netattach.log"
    return path.read_text() if path.exists() else ""


def run_pod(node: rt.Node, api, env, namespace: str, **kw) -> tuple[str, str, dict]:
    """Scenario 1's pod through RunPodSandbox; (pod name, sandbox ID, its status)."""
    name, config = rt.scenario_sandbox(api, env, namespace, **kw)
    sid = node.cri.run_sandbox(config)
    return name, sid, node.cri.sandbox_status(sid)


def assert_attached(api, namespace: str, name: str, status: dict) -> None:
    """The sandbox is ready with scenario 1's three interfaces, the CRI reports the
    cluster default network's IP, and the Pod carries network-status."""
    assert status["status"]["state"] == "SANDBOX_READY"
    ip = status["status"]["network"]["ip"]
    assert sc.in_subnet(ip + "/32", DEFAULT_SUBNET)
    assert rt.netns_links(rt.sandbox_netns(status)) == ["data0", "eth0", "lo", "net1"]
    pod_status = json.loads(sc.read_pod_annotations(api, namespace, name)[sc.STATUS])
    assert [(s["name"], s["interface"]) for s in pod_status] == [
        ("cluster-net", "eth0"), (f"{namespace}/net-a", "net1"), ("other/net-b", "data0")]
    # network-status and the CRI give the same bare address (as Multus writes it)
    assert pod_status[0]["ips"] == [ip]


HOST_PORT = rt.HOST_PORT
RUNTIME_CONFIG = "bandwidth,cgroupPath,dns,io.kubernetes.cri.pod-annotations,portMappings"
K8S_ARGS = {"IgnoreUnknown", "K8S_POD_NAMESPACE", "K8S_POD_NAME", "K8S_POD_INFRA_CONTAINER_ID",
            "K8S_POD_UID"}


def test_scenario_1_through_run_pod_sandbox(node, admin_api, host_env, k8s_namespace):
    name, sid, status = run_pod(node, admin_api, host_env, k8s_namespace)
    assert_attached(admin_api, k8s_namespace, name, status)
    assert rt.libcni_cache_entries(sid)
    # runtimeConfig reached the cluster default network's plugins through netattach:
    # the port mapping is portmap's DNAT rule, the egress limit bandwidth's ifb device
    assert f"dport {HOST_PORT}" in rt.iptables_nat()
    assert len(ifb_links()) == 1

    node.cri.stop_sandbox(sid)
    assert host_env.ipam_allocations() == []
    node.cri.remove_sandbox(sid)
    assert_freed(node, host_env, sid)
    assert f"dport {HOST_PORT}" not in rt.iptables_nat()

    log = netattach_log(host_env)
    assert problems(log) == []
    calls = [c for c in invocations(log) if c["container"] == sid]
    # containerd: one ADD, a DEL at StopPodSandbox (with the netns) and another at
    # RemovePodSandbox (netns gone), CNI_ARGS with the kubelet's keys, runtimeConfig
    # only for the capabilities the conflist declares
    assert [(c["command"], bool(c["netns"])) for c in calls] == [
        ("ADD", True), ("DEL", True), ("DEL", False)]
    assert all(set(c["args"].split(",")) == K8S_ARGS for c in calls)
    assert [c["runtimeConfig"] for c in calls] == [RUNTIME_CONFIG] * 3
    # netattach's conflist declares io.kubernetes.cri.pod-annotations: the pod's
    # annotations came from containerd, so ADD asked the API server for the NADs only
    assert f"GET /api/v1/namespaces/{k8s_namespace}/pods/{name}" not in log
    assert f"pod {k8s_namespace}/{name}: annotations from the runtime" in log
    assert ifb_links() == []  # bandwidth's egress device went with the DEL


def test_stop_and_remove_with_the_api_server_stopped(node, cluster, admin_api, host_env,
                                                     k8s_namespace):
    name, sid, status = run_pod(node, admin_api, host_env, k8s_namespace)
    assert_attached(admin_api, k8s_namespace, name, status)
    cluster.stop_apiserver()
    try:
        node.cri.stop_sandbox(sid)
        node.cri.remove_sandbox(sid)
        assert_freed(node, host_env, sid)
    finally:
        cluster.start_apiserver()
    assert problems(netattach_log(host_env)) == []


def test_missing_nad_fails_run_pod_sandbox_and_leaves_nothing(node, admin_api, host_env,
                                                              k8s_namespace):
    cache_before = rt.libcni_cache()
    name, config = rt.scenario_sandbox(admin_api, host_env, k8s_namespace,
                                       networks="net-a,no-such-net")
    with pytest.raises(rt.CriError) as failed:
        node.cri.run_sandbox(config)
    # containerd passes on netattach's own message: pod, network, cause
    assert f"pod {k8s_namespace}/{name}" in failed.value.message
    assert f"{k8s_namespace}/no-such-net" in failed.value.message
    assert "not found" in failed.value.message
    assert node.cri.sandboxes() == []
    assert host_env.ipam_allocations() == []
    assert host_env.state_files() == []
    assert rt.libcni_cache() == cache_before
    assert rt.mounts_under(node.containerd.workdir / "state") == []
    assert sc.STATUS not in sc.read_pod_annotations(admin_api, k8s_namespace, name)


PARALLEL = 4


def test_sandboxes_in_parallel(node, admin_api, host_env, k8s_namespace):
    sc.apply_nads(admin_api, host_env, k8s_namespace)
    pods = [rt.scenario_sandbox(admin_api, host_env, k8s_namespace, name=f"par-{i}", nads=False)
            for i in range(PARALLEL)]
    configs = [config for _, config in pods]
    with ThreadPoolExecutor(PARALLEL) as pool:
        sids = list(pool.map(node.cri.run_sandbox, configs))
        statuses = list(pool.map(node.cri.sandbox_status, sids))
    for (name, _), status in zip(pods, statuses):
        assert_attached(admin_api, k8s_namespace, name, status)
    ips = {s["status"]["network"]["ip"] for s in statuses}
    assert len(ips) == PARALLEL
    with ThreadPoolExecutor(PARALLEL) as pool:
        list(pool.map(node.cri.stop_sandbox, sids))
        list(pool.map(node.cri.remove_sandbox, sids))
    for sid in sids:
        assert_freed(node, host_env, sid)
    assert problems(netattach_log(host_env)) == []


def test_status_through_the_cri(node, built_artifact, host_env):
    # CNI 1.1.0 conflist: every CRI Status call execs netattach STATUS
    before = len([c for c in invocations(netattach_log(host_env)) if c["command"] == "STATUS"])
    assert node.cri.condition("NetworkReady")["status"] is True
    after = [c for c in invocations(netattach_log(host_env)) if c["command"] == "STATUS"]
    assert len(after) > before

    # the DaemonSet re-installs with a readiness indicator file that does not exist yet
    indicator = host_env.root / "ready"
    p = node.install(str(built_artifact), "--readiness-indicator-file", str(indicator))
    assert p.returncode == 0, p.stderr
    cond = wait_for(lambda: (c := node.cri.condition("NetworkReady"))["status"] is not True and c,
                    "containerd to load the new conflist and report NetworkReady false")
    assert cond["reason"] == "NetworkPluginNotReady"
    assert f"readiness indicator file {indicator} does not exist" in cond["message"]

    indicator.write_text("")
    wait_for(lambda: node.cri.condition("NetworkReady")["status"] is True,
             "NetworkReady true once the indicator file exists")
    # the only problems logged are the failed STATUS calls, each naming the file
    lines = problems(netattach_log(host_env))
    assert lines and all(f"readiness indicator file {indicator}" in line for line in lines)


def loaded_networks(node: rt.Node) -> list[str]:
    """The names of the networks containerd has loaded from its CNI conf dir (CRI Status
    verbose, info "cniconfig": go-cni's config, the loopback network first)."""
    config = json.loads(node.cri.status()["info"]["cniconfig"])
    return [n["Config"]["Name"] for n in config.get("Networks") or []]


@pytest.mark.parametrize("mode", ["thin", "thick"])
def test_a_sandbox_added_before_netattach_is_deleted_through_it_quietly(
        mode, cluster, host_env, cni_testbin, built_artifact, daemon_kubeconfig, admin_api,
        k8s_namespace):
    """Issue 20: a pod that ran before netattach was installed on the node. containerd
    ADDs its sandbox with the primary's conflist alone (libcni caches that as
    cluster-net-<sandbox>-eth0); then netattach is installed (`netattach install
    --once`: 00-netattach.conflist, which containerd loads instead) and the pod is
    deleted. StopPodSandbox's DEL goes through netattach, which has no state of it: it
    releases the primary as libcni cached it, asks the API nothing and logs nothing
    above INFO; the IP, the cache entry and everything else of the sandbox are freed."""
    thick = ("--mode", "thick", "--daemon-socket-dir", str(host_env.root / "run")) \
        if mode == "thick" else ()
    n = rt.node_setup(cluster, host_env, str(built_artifact), [cni_testbin],
                      host_env.bridge_name(), DEFAULT_SUBNET, *thick)
    # before netattach: the conf dir holds the primary's conflist only
    n.conflist.unlink()
    (n.conf_dir / "10-cluster.conflist").write_bytes(n.primary.read_bytes())
    daemon = NodeDaemon.start(str(built_artifact), host_env, daemon_kubeconfig) if thick \
        else None
    rt.start_containerd(n, host_env.root / "containerd")
    try:
        assert loaded_networks(n) == ["cni-loopback", "cluster-net"]
        ifbs = set(ifb_links())
        name, sid, status = run_pod(n, admin_api, host_env, k8s_namespace)
        ifbs = set(ifb_links()) - ifbs  # bandwidth's egress device for this sandbox
        assert rt.netns_links(rt.sandbox_netns(status)) == ["eth0", "lo"]
        assert len(ifbs) == 1 and sid in rt.iptables_nat()  # portmap's rules name it
        assert sorted(p.name for p in rt.libcni_cache_entries(sid)) == [
            f"cluster-net-{sid}-eth0", f"cni-loopback-{sid}-lo"]
        assert len(host_env.ipam_allocations()) == 1
        assert [c for c in invocations(netattach_log(host_env)) if c["container"] == sid] == []

        p = n.install(str(built_artifact), *thick)  # the DaemonSet's installer
        assert p.returncode == 0, p.stderr
        wait_for(lambda: loaded_networks(n) == ["cni-loopback", "netattach-cni-network"],
                 "containerd to load netattach's conflist")
        n.cri.stop_sandbox(sid)
        assert host_env.ipam_allocations() == []
        # the cached runtimeConfig reached portmap's and bandwidth's DEL
        assert sid not in rt.iptables_nat() and not ifbs & set(ifb_links())
        n.cri.remove_sandbox(sid)
        assert_freed(n, host_env, sid)
        log = netattach_log(host_env)
        assert "the runtime ADDed it with network 'cluster-net' alone, without netattach" in log
        assert problems(log) == []
        calls = [c for c in invocations(log) if c["container"] == sid]
        assert [(c["command"], bool(c["netns"])) for c in calls] == [("DEL", True),
                                                                     ("DEL", False)]
        if daemon is None:  # (the daemon's own watches write the same log)
            assert "GET /api/v1/namespaces" not in log.split(f"container={sid}", 1)[1]
        else:
            assert daemon.metric("netattach_requests_total", command="DEL", code="0") == 2
    finally:
        n.containerd.stop()
        if daemon is not None:
            daemon.stop()


@pytest.fixture
def thick_node(cluster, host_env, cni_testbin, built_artifact, daemon_kubeconfig):
    """A node set up by `netattach install --once --mode thick` (the conflist names
    netattach-shim, written by the installer) with `netattach daemon` running, and
    containerd; on teardown containerd and the daemon stop."""
    n = rt.node_setup(cluster, host_env, str(built_artifact), [cni_testbin],
                      host_env.bridge_name(), DEFAULT_SUBNET, "--mode", "thick",
                      "--daemon-socket-dir", str(host_env.root / "run"))
    daemon = NodeDaemon.start(str(built_artifact), host_env, daemon_kubeconfig)
    rt.start_containerd(n, host_env.root / "containerd")
    try:
        yield n, daemon
    finally:
        n.containerd.stop()
        daemon.stop()


def test_thick_scenario_1_then_stop_and_remove_with_the_daemon_stopped(
        thick_node, admin_api, host_env, k8s_namespace):
    """Thick mode under containerd: the installed netattach-shim forwards the ADD to the
    daemon; with the daemon stopped, StopPodSandbox and RemovePodSandbox still free
    everything (the shim runs the DELs in thin mode from the saved state)."""
    node, daemon = thick_node
    plugin = json.loads(node.conflist.read_text())["plugins"][0]
    assert plugin["type"] == "netattach-shim"
    shim = node.bin_dir / "netattach-shim"  # the script naming the artifact's interpreter
    assert shim.read_text().startswith(f"#!{node.bin_dir}/.netattach-")
    name, sid, status = run_pod(node, admin_api, host_env, k8s_namespace)
    sc.network_status(admin_api, k8s_namespace, name)  # written right after the answer
    assert_attached(admin_api, k8s_namespace, name, status)
    assert f"dport {HOST_PORT}" in rt.iptables_nat()
    assert daemon.metric("netattach_requests_total", command="ADD", code="0") == 1
    daemon.stop()

    node.cri.stop_sandbox(sid)
    assert host_env.ipam_allocations() == []
    node.cri.remove_sandbox(sid)
    assert_freed(node, host_env, sid)
    assert f"dport {HOST_PORT}" not in rt.iptables_nat()
    assert ifb_links() == []

    log = netattach_log(host_env)
    assert problems(log) == []
    calls = [c for c in invocations(log) if c["container"] == sid]
    assert [(c["command"], bool(c["netns"])) for c in calls] == [
        ("ADD", True), ("DEL", True), ("DEL", False)]
    assert [c["runtimeConfig"] for c in calls] == [RUNTIME_CONFIG] * 3


@pytest.fixture(params=["thin", "thick"])
def claims_node(request, cluster, host_env, cni_testbin, built_artifact, daemon_kubeconfig):
    """(mode, node): thin, a node as `node` installed with --resource-claims
    (resourceClaims: true); thick, one installed with --mode thick and no such flag, its
    daemon running."""
    thick = request.param == "thick"
    flags = ("--mode", "thick", "--daemon-socket-dir", str(host_env.root / "run")) if thick \
        else ("--resource-claims",)
    n = rt.node_setup(cluster, host_env, str(built_artifact), [cni_testbin],
                      host_env.bridge_name(), DEFAULT_SUBNET, *flags)
    daemon = NodeDaemon.start(str(built_artifact), host_env, daemon_kubeconfig) if thick \
        else None
    rt.start_containerd(n, host_env.root / "containerd")
    try:
        yield request.param, n
    finally:
        n.containerd.stop()
        if daemon is not None:
            daemon.stop()


def test_claim_network_under_containerd(claims_node, admin_api, host_env, k8s_namespace):
    """containerd passes the pod's annotations, not its spec: with resourceClaims the thin
    ADD reads the pod anyway, and the node daemon reads it from its cache without the
    key; the sandbox gets the claim's interface beside net-a, the claim's
    status.devices is Ready True, and StopPodSandbox's DEL clears it."""
    from tests.e2e import test_dra_claims as dra
    mode, node = claims_node
    master = host_env.master_link()
    pool = dra.publish_slice(admin_api, master)
    dra.device_class(admin_api)
    dra.subnets_configmap(admin_api, k8s_namespace)
    claim = dra.create_claim(admin_api, k8s_namespace,
                             dra.claim_body("net", dra.cni_config(host_env.ipam_dir)))
    name, config = rt.scenario_sandbox(admin_api, host_env, k8s_namespace, networks="net-a",
                                       resource_claims=[{"name": "net",
                                                         "resourceClaimName": "net"}])
    dra.allocate(admin_api, k8s_namespace, claim, pool, [(name, config["metadata"]["uid"])])
    sid = node.cri.run_sandbox(config)
    status = node.cri.sandbox_status(sid)
    assert rt.netns_links(rt.sandbox_netns(status)) == ["dra0", "eth0", "lo", "net1"]
    if mode == "thin":
        log = netattach_log(host_env)
        assert f"GET /api/v1/namespaces/{k8s_namespace}/pods/{name}" in log
    [entry] = dra.wait_devices(admin_api, k8s_namespace, "net", lambda d: bool(d))
    assert entry["conditions"][0]["status"] == "True"
    assert entry["networkData"]["interfaceName"] == "dra0"
    node.cri.stop_sandbox(sid)
    assert host_env.ipam_allocations() == []
    node.cri.remove_sandbox(sid)
    assert_freed(node, host_env, sid)
    dra.wait_devices(admin_api, k8s_namespace, "net", lambda d: not d)
    assert problems(netattach_log(host_env)) == []
    from kubernetes.client import CustomObjectsApi
    CustomObjectsApi(admin_api).delete_cluster_custom_object(dra.GROUP, dra.VERSION,
                                                             "resourceslices", pool)
