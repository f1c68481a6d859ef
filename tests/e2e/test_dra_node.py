"""The node side of the DRA driver cni.dra.networking.x-k8s.io (issue 12), exercised the
way the kubelet calls it: the real `netattach daemon --dra` (the built artifact), a gRPC
client on its registration socket (GetInfo, then NotifyRegistrationStatus as the
kubelet's plugin watcher does), then on the endpoint GetInfo named
(NodePrepareResources / NodeUnprepareResources, API v1 and v1beta1), against ResourceClaims
on the real API server, allocated by the test as the scheduler would. The node's
ResourceSlice is read back from the API server. The daemon account's RBAC for this
(deploy/thick/rbac.yaml, netattach-daemon-dra) is proved against the same server: it can
do what the plugin does and no more.

Host interfaces with devices are veth ends the test makes (the kernel of the test bed has
no dummy driver), selected by name with --dra-interfaces. No assertion is about time:
every wait polls for its condition under a hang guard.
"""
from __future__ import annotations

import argparse
import os
import stat
import uuid
from pathlib import Path

import grpc
import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from netattach.daemon import dra
from netattach.daemon.draplugin import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    pluginregistration_v1_pb2,
    pluginregistration_v1_pb2_grpc,
)
from netattach_testbed import cluster as cl
from netattach_testbed import faults
from netattach_testbed import netns as tb
from netattach_testbed import scenario as sc
from netattach_testbed.daemon import NODE_NAME, NodeDaemon

pytestmark = pytest.mark.e2e

GROUP, VERSION = "resource.k8s.io", "v1"
CALL_TIMEOUT = 60.0  # hang guard of each gRPC call
SLICE = f"{NODE_NAME}-{dra.DRIVER_NAME}"


def host_veth(env: tb.HostEnv, name: str) -> str:
    """A veth end `name` (from tb.unique: registered for the leak check) on the host, its
    peer too, up; env.cleanup() removes them."""
    peer = tb.unique("p")
    env.host_links += [name, peer]
    tb.run("ip", "link", "add", name, "type", "veth", "peer", "name", peer)
    tb.run("ip", "link", "set", name, "up")
    return name


def mac_of(name: str) -> str:
    return Path(f"/sys/class/net/{name}/address").read_text().strip()


@pytest.fixture
def dra_node(daemon_kubeconfig, host_env, admin_api):
    """(daemon, registry dir, plugin dir, [host link, second link name not made yet],
    the HostEnv)."""
    first = host_veth(host_env, tb.unique("d"))
    second = tb.unique("e")
    registry = host_env.root / "plugins_registry"
    plugin = host_env.root / "plugins" / dra.DRIVER_NAME
    flags = ("--log-level", "debug", "--max-parallel", "4", "--dra",
             "--dra-registry-dir", str(registry), "--dra-plugin-dir", str(plugin),
             "--dra-interfaces", f"{first},{second}", "--dra-devices-per-interface", "2",
             "--dra-generic-devices", "3", "--dra-resync", "0.5")
    d = NodeDaemon.start(sc.netattach_command(), host_env, daemon_kubeconfig, flags)
    try:
        yield d, registry, plugin, [first, second], host_env
    finally:
        d.stop()
        try:  # the slice outlives the daemon on purpose; the next test starts afresh
            k8s.CustomObjectsApi(admin_api).delete_cluster_custom_object(
                GROUP, VERSION, "resourceslices", SLICE)
        except ApiException as e:
            if e.status != 404:
                raise


def wait_socket(path: Path) -> None:
    faults.wait_for(f"socket {path}", lambda: path.exists() and stat.S_ISSOCK(
        path.lstat().st_mode), timeout=120)


def read_slice(admin_api) -> dict | None:
    try:
        return k8s.CustomObjectsApi(admin_api).get_cluster_custom_object(
            GROUP, VERSION, "resourceslices", SLICE)
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def wait_slice(admin_api, generation: int) -> dict:
    """The node's ResourceSlice once its pool generation is `generation` (hang guard)."""
    got: list[dict] = []

    def ready() -> bool:
        s = read_slice(admin_api)
        got[:] = [s] if s else []
        return bool(s) and s["spec"]["pool"]["generation"] == generation

    faults.wait_for(f"ResourceSlice {SLICE} of pool generation {generation}", ready,
                    timeout=120)
    return got[0]


def register(registry: Path) -> pluginregistration_v1_pb2.PluginInfo:
    """What the kubelet's plugin watcher does with a new socket in plugins_registry:
    GetInfo, then NotifyRegistrationStatus with its verdict (here: registered)."""
    with grpc.insecure_channel(f"unix:{registry / dra.REGISTRATION_SOCKET}") as ch:
        stub = pluginregistration_v1_pb2_grpc.RegistrationStub(ch)
        info = stub.GetInfo(pluginregistration_v1_pb2.InfoRequest(), timeout=CALL_TIMEOUT)
        stub.NotifyRegistrationStatus(pluginregistration_v1_pb2.RegistrationStatus(
            plugin_registered=True), timeout=CALL_TIMEOUT)
    return info


def allocated_claim(admin_api, namespace: str, name: str, device: str,
                    node: str = NODE_NAME) -> dict:
    """A ResourceClaim with one CNI request (seed 004's example), allocated device
    `device` of pool `node` in its status, as the scheduler writes it."""
    api = k8s.CustomObjectsApi(admin_api)
    claim = api.create_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaims", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {
            "requests": [{"name": "macvlan0", "exactly": {
                "deviceClassName": "cni.networking.x-k8s.io", "allocationMode": "ExactCount",
                "count": 1}}],
            "config": [{"requests": ["macvlan0"], "opaque": {
                "driver": dra.DRIVER_NAME, "parameters": {
                    "apiVersion": "cni.networking.x-k8s.io/v1alpha1", "kind": "CNI",
                    "ifName": "net1", "cniVersion": "1.0.0",
                    "plugins": [{"type": "macvlan", "config": {"mode": "bridge"},
                                 "arguments": [{"fieldPath": "master", "valueFrom": {
                                     "attributeRef": "name"}}]}]}}}]}}})
    if device:
        claim = api.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, "resourceclaims", name, {"status": {"allocation": {
                "devices": {"results": [{"request": "macvlan0", "driver": dra.DRIVER_NAME,
                                         "pool": node, "device": device}]},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}})
    return claim


def test_kubelet_registers_prepares_and_reads_the_slice(dra_node, admin_api, k8s_namespace):
    d, registry, plugin, (link, later), env = dra_node
    reg_sock, dra_sock = registry / dra.REGISTRATION_SOCKET, plugin / dra.DRA_SOCKET
    wait_socket(reg_sock)
    assert d.metric("netattach_dra_registered") == -1  # no verdict yet
    assert grpc_loaded(d)

    # the kubelet's plugin watcher: GetInfo, then its verdict
    info = register(registry)
    assert (info.type, info.name, info.endpoint) == ("DRAPlugin", dra.DRIVER_NAME,
                                                     str(dra_sock))
    assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
    assert d.metric("netattach_dra_registered") == 1
    # only root may connect: sockets 0600, the driver's own dir 0700
    for path, mode in ((reg_sock, 0o600), (dra_sock, 0o600), (plugin, 0o700)):
        assert stat.S_IMODE(path.stat().st_mode) == mode, path
        assert path.stat().st_uid == 0

    # the published slice, read back from the API server
    published = wait_slice(admin_api, 1)
    spec = published["spec"]
    assert (spec["driver"], spec["nodeName"]) == (dra.DRIVER_NAME, NODE_NAME)
    assert spec["pool"] == {"name": NODE_NAME, "generation": 1, "resourceSliceCount": 1}
    assert [x["name"] for x in spec["devices"]] == ["cni-0", "cni-1", "cni-2",
                                                   f"{link}-0", f"{link}-1"]
    assert spec["devices"][0]["attributes"] == {"kind": {"string": "generic"}}
    assert spec["devices"][3]["attributes"] == {
        "kind": {"string": "interface"}, "name": {"string": link},
        "interfaceName": {"string": link}, "macAddress": {"string": mac_of(link)}}

    # NodePrepareResources as the kubelet sends it: all claims of a pod in one call
    good = allocated_claim(admin_api, k8s_namespace, "macvlan", f"{link}-1")
    other_uid = allocated_claim(admin_api, k8s_namespace, "recreated", "cni-0")
    unallocated = allocated_claim(admin_api, k8s_namespace, "pending", "")
    elsewhere = allocated_claim(admin_api, k8s_namespace, "elsewhere", "cni-1", "node-b")
    stale_uid = str(uuid.uuid4())
    missing_uid = str(uuid.uuid4())
    for pb2, grpc_mod in ((dra_v1_pb2, dra_v1_pb2_grpc),
                          (dra_v1beta1_pb2, dra_v1beta1_pb2_grpc)):
        with grpc.insecure_channel(f"unix:{info.endpoint}") as ch:
            stub = grpc_mod.DRAPluginStub(ch)
            request = pb2.NodePrepareResourcesRequest(claims=[
                pb2.Claim(namespace=k8s_namespace, name="macvlan",
                          uid=good["metadata"]["uid"]),
                pb2.Claim(namespace=k8s_namespace, name="nosuchclaim", uid=missing_uid),
                pb2.Claim(namespace=k8s_namespace, name="recreated", uid=stale_uid),
                pb2.Claim(namespace=k8s_namespace, name="pending",
                          uid=unallocated["metadata"]["uid"]),
                pb2.Claim(namespace=k8s_namespace, name="elsewhere",
                          uid=elsewhere["metadata"]["uid"])])
            for _ in range(2):  # the kubelet retries: the same answer
                answer = stub.NodePrepareResources(request, timeout=CALL_TIMEOUT).claims
                assert set(answer) == {c.uid for c in request.claims}
                ok = answer[good["metadata"]["uid"]]
                assert ok.error == ""
                assert [(list(x.request_names), x.pool_name, x.device_name,
                         list(x.cdi_device_ids)) for x in ok.devices] == [
                    (["macvlan0"], NODE_NAME, f"{link}-1", [])]
                ref = f"ResourceClaim {k8s_namespace}/"
                assert answer[missing_uid].error == (
                    f"{ref}nosuchclaim (UID {missing_uid}) not found in the API server")
                assert (f"{ref}recreated (UID {stale_uid}): the API server has UID "
                        f"{other_uid['metadata']['uid']}") in answer[stale_uid].error
                assert "is not allocated" in answer[unallocated["metadata"]["uid"]].error
                assert (f"{ref}elsewhere (UID {elsewhere['metadata']['uid']}) is allocated "
                        f"to another node than {NODE_NAME}") in answer[
                            elsewhere["metadata"]["uid"]].error
                for failed in (missing_uid, stale_uid, unallocated["metadata"]["uid"]):
                    assert not answer[failed].devices
            unprepare = pb2.NodeUnprepareResourcesRequest(claims=request.claims[:2])
            for _ in range(2):
                undone = stub.NodeUnprepareResources(unprepare, timeout=CALL_TIMEOUT).claims
                assert {uid: e.error for uid, e in undone.items()} == {
                    good["metadata"]["uid"]: "", missing_uid: ""}
    assert d.metric("netattach_dra_prepared_claims_total", result="ok") == 4
    assert d.metric("netattach_dra_prepared_claims_total", result="error") == 16

    # a new host interface: the slice is updated, the pool's generation bumped
    host_veth(env, later)
    updated = wait_slice(admin_api, 2)
    assert [x["name"] for x in updated["spec"]["devices"]][-2:] == [f"{later}-0",
                                                                   f"{later}-1"]
    assert d.metric("netattach_dra_slice_generation") == 2

    # stop: sockets gone, the slice left; a restart republishes nothing new
    d.stop()
    assert not reg_sock.exists() and not dra_sock.exists()
    assert read_slice(admin_api)["spec"] == updated["spec"]
    d.launch()
    wait_socket(reg_sock)
    register(registry)
    faults.wait_for("the restarted daemon to check its slice",
                    lambda: d.metric("netattach_dra_slice_generation") == 2, timeout=120)
    assert read_slice(admin_api)["metadata"]["resourceVersion"] == \
        updated["metadata"]["resourceVersion"]

    # a kubelet that starts deletes its node's slices, then registers the plugins again
    k8s.CustomObjectsApi(admin_api).delete_cluster_custom_object(
        GROUP, VERSION, "resourceslices", SLICE)
    register(registry)
    assert wait_slice(admin_api, 1)["spec"]["devices"] == updated["spec"]["devices"]


def test_kubelet_refusal_is_logged_and_a_killed_daemons_sockets_replaced(dra_node):
    d, registry, _, _, _ = dra_node
    wait_socket(registry / dra.REGISTRATION_SOCKET)
    with grpc.insecure_channel(f"unix:{registry / dra.REGISTRATION_SOCKET}") as ch:
        stub = pluginregistration_v1_pb2_grpc.RegistrationStub(ch)
        stub.GetInfo(pluginregistration_v1_pb2.InfoRequest(), timeout=CALL_TIMEOUT)
        stub.NotifyRegistrationStatus(pluginregistration_v1_pb2.RegistrationStatus(
            plugin_registered=False, error="no supported version"), timeout=CALL_TIMEOUT)
    assert d.metric("netattach_dra_registered") == 0
    assert any("ERROR" in line and "the kubelet refused to register DRA driver "
               f"{dra.DRIVER_NAME}: no supported version" in line
               for line in d.log_text().splitlines())

    # a daemon killed leaves its sockets; the next one replaces them
    d.kill()
    assert (registry / dra.REGISTRATION_SOCKET).exists()
    d.launch()
    assert register(registry).name == dra.DRIVER_NAME
    assert d.metric("netattach_dra_registered") == 1


def grpc_loaded(d: NodeDaemon) -> bool:
    """grpc's extension module is mapped in the daemon's process (it was imported)."""
    return "cygrpc" in Path(f"/proc/{d.pid}/maps").read_text()


def test_without_dra_nothing_of_it_runs(daemon_kubeconfig, host_env, admin_api):
    """--dra off (the default): no socket, no slice, no DRA metric, grpc not even
    imported."""
    d = NodeDaemon.start(sc.netattach_command(), host_env, daemon_kubeconfig)
    try:
        assert not grpc_loaded(d)
        status, text = d.endpoint("/metrics")
        assert status == 200 and "netattach_dra_" not in text
        assert read_slice(admin_api) is None
        assert "DRA driver" not in d.log_text()
    finally:
        d.stop()


def assert_forbidden(call) -> None:
    with pytest.raises(ApiException) as ei:
        call()
    assert ei.value.status == 403, (ei.value.status, ei.value.body)


def test_daemon_rbac_is_what_the_plugin_needs(admin_api, daemon_kubeconfig, k8s_namespace):
    """deploy/thick/rbac.yaml, applied to the real API server: the daemon's account gets
    claims and gets, creates and updates slices; it cannot list, change or delete
    claims, nor delete slices. (Claim networks add listing slices and applying a
    claim's status: tests/e2e/test_dra_claims.py proves those.)"""
    claim = allocated_claim(admin_api, k8s_namespace, "rbac", "cni-0")
    mine = cl.api_client(daemon_kubeconfig)
    api = k8s.CustomObjectsApi(mine)
    got = api.get_namespaced_custom_object(GROUP, VERSION, k8s_namespace, "resourceclaims",
                                           "rbac")
    assert got["metadata"]["uid"] == claim["metadata"]["uid"]
    name = f"rbac-{uuid.uuid4().hex[:8]}"
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceSlice",
            "metadata": {"name": name},
            "spec": dra.slice_spec(NODE_NAME, [{"name": "cni-0"}], 1)}
    try:  # (of its own node: the token is bound to a pod there, see the admission policy)
        created = api.create_cluster_custom_object(GROUP, VERSION, "resourceslices", body)
        created["spec"] = dra.slice_spec(NODE_NAME, [{"name": "cni-0"}, {"name": "cni-1"}], 2)
        api.replace_cluster_custom_object(GROUP, VERSION, "resourceslices", name, created)
        assert api.get_cluster_custom_object(GROUP, VERSION, "resourceslices", name)[
            "spec"]["pool"]["generation"] == 2
        assert_forbidden(lambda: api.delete_cluster_custom_object(
            GROUP, VERSION, "resourceslices", name))
    finally:
        k8s.CustomObjectsApi(admin_api).delete_cluster_custom_object(
            GROUP, VERSION, "resourceslices", name)
    assert_forbidden(lambda: api.list_namespaced_custom_object(
        GROUP, VERSION, k8s_namespace, "resourceclaims"))
    assert_forbidden(lambda: api.delete_namespaced_custom_object(
        GROUP, VERSION, k8s_namespace, "resourceclaims", "rbac"))
    assert_forbidden(lambda: api.patch_namespaced_custom_object(
        GROUP, VERSION, k8s_namespace, "resourceclaims", "rbac",
        {"metadata": {"labels": {"x": "y"}}}))
    assert_forbidden(lambda: api.create_namespaced_custom_object(
        GROUP, VERSION, k8s_namespace, "resourceclaims", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceClaim",
            "metadata": {"name": "nope"}, "spec": {"devices": {}}}))


def test_thick_overlay_mounts_the_kubelets_dirs_for_the_dra_driver():
    """deploy/thick: the daemon runs without --dra (opt-in: docs/dra.md), and the dirs it uses
    by default (the kubelet's plugins_registry, the driver's plugin dir) are mounted from
    the host, so adding `--dra` to its args is all it takes."""
    from netattach import daemon
    from tests.e2e.test_deploy import _thick_daemonset
    spec = _thick_daemonset()["spec"]["template"]["spec"]
    d = {c["name"]: c for c in spec["containers"]}["daemon"]
    parser = argparse.ArgumentParser(prog="netattach daemon", exit_on_error=False)
    daemon.add_arguments(parser)
    args = parser.parse_args(d["args"])
    assert not args.dra
    args = parser.parse_args([*d["args"], "--dra"])
    assert args.dra and args.dra_registry_dir is None and args.dra_plugin_dir is None
    volumes = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    mounts = {m["mountPath"]: volumes.get(m["name"]) for m in d["volumeMounts"]}
    for path in (dra.DEFAULT_REGISTRY_DIR, dra.DEFAULT_PLUGIN_DIR):
        assert mounts.get(path) == path
    assert os.path.dirname(dra.DEFAULT_PLUGIN_DIR) == "/var/lib/kubelet/plugins"


def slice_body(name: str, node: str, driver: str = dra.DRIVER_NAME) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceSlice",
            "metadata": {"name": name},
            "spec": {**dra.slice_spec(node, [{"name": "cni-0"}], 1), "driver": driver}}


def try_create_slice(mine, admin_api, body: dict) -> ApiException | None:
    """Create `body` as the daemon's account: None when stored (then deleted again by the
    admin), else the refusal."""
    try:
        k8s.CustomObjectsApi(mine).create_cluster_custom_object(GROUP, VERSION,
                                                                "resourceslices", body)
    except ApiException as e:
        return e
    k8s.CustomObjectsApi(admin_api).delete_cluster_custom_object(
        GROUP, VERSION, "resourceslices", body["metadata"]["name"])
    return None


def test_daemon_writes_only_its_drivers_and_nodes_slices(cluster, admin_api,
                                                        daemon_kubeconfig, tmp_path):
    """deploy/thick/rbac.yaml's ValidatingAdmissionPolicy: the daemon's account cannot
    create or update a slice of another driver, nor, with a token bound to a pod on a
    node (as the DaemonSet's pods have), another node's slice. A denial is HTTP 422
    (reason Invalid), naming the policy's message."""
    other = slice_body(f"other-{uuid.uuid4().hex[:8]}", NODE_NAME, "gpu.example.com")
    mine = cl.api_client(daemon_kubeconfig)
    refused: list[ApiException] = []

    def policy_in_force() -> bool:  # the API server loads a new policy in the background
        e = try_create_slice(mine, admin_api, other)
        refused[:] = [e] if e else []
        return e is not None

    faults.wait_for("the admission policy to refuse another driver's slice", policy_in_force,
                    timeout=120)
    assert refused[0].status == 422 and "of driver cni.dra.networking.x-k8s.io only" in \
        refused[0].body, refused[0].body
    # with the policy in force, the test bed's daemon token (bound to a pod on NODE_NAME,
    # as the DaemonSet pod's is) still writes our driver's slices of its node, as
    # test_kubelet_registers_... needs
    assert try_create_slice(mine, admin_api, slice_body(f"ours-{uuid.uuid4().hex[:8]}",
                                                        NODE_NAME)) is None
    # updating another driver's slice is refused too (its driver is immutable)
    theirs = k8s.CustomObjectsApi(admin_api).create_cluster_custom_object(
        GROUP, VERSION, "resourceslices", other)
    try:
        theirs["spec"]["devices"].append({"name": "cni-1"})
        with pytest.raises(ApiException) as ei:
            k8s.CustomObjectsApi(mine).replace_cluster_custom_object(
                GROUP, VERSION, "resourceslices", other["metadata"]["name"], theirs)
        assert ei.value.status == 422 and "of driver" in ei.value.body, ei.value.body
    finally:
        k8s.CustomObjectsApi(admin_api).delete_cluster_custom_object(
            GROUP, VERSION, "resourceslices", other["metadata"]["name"])

    # a token bound to a pod on node "vap-node": that node's slice only
    core = k8s.CoreV1Api(admin_api)
    node = f"vap-{uuid.uuid4().hex[:8]}"
    core.create_node({"metadata": {"name": node}})
    pod = core.create_namespaced_pod("kube-system", {
        "metadata": {"name": f"netattach-{node}"},
        "spec": {"nodeName": node, "serviceAccountName": "netattach-daemon",
                 "containers": [{"name": "c", "image": "example.invalid/none"}]}})
    try:
        token = core.create_namespaced_service_account_token(
            "netattach-daemon", "kube-system", {"spec": {
                "audiences": [], "expirationSeconds": 3600, "boundObjectRef": {
                    "apiVersion": "v1", "kind": "Pod", "name": pod.metadata.name,
                    "uid": pod.metadata.uid}}}).status.token
        bound = cl.api_client(cl.write_kubeconfig(
            tmp_path / "bound.kubeconfig", cluster.server, user={"token": token},
            ca_data=cluster.ca_file.read_bytes()))
        who = k8s.AuthenticationV1Api(bound).create_self_subject_review({})
        assert who.status.user_info.extra["authentication.kubernetes.io/node-name"] == [node]
        assert try_create_slice(bound, admin_api, slice_body(f"{node}-own", node)) is None
        e = try_create_slice(bound, admin_api, slice_body(f"{node}-else", "node-x"))
        assert e is not None and e.status == 422 and "its own node only" in e.body, e
    finally:
        core.delete_namespaced_pod(pod.metadata.name, "kube-system", grace_period_seconds=0)
        core.delete_node(node)
