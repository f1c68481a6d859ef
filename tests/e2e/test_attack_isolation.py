"""Issue 21, isolation and devices: pod annotations are tenant input, and a tenant must not
reach what belongs to another namespace or another pod through them.

* `namespaceIsolation` covers `v1.multus-cni.io/default-network` as it covers
  `k8s.v1.cni.cncf.io/networks`: a pod may not take another namespace's NAD as its eth0
  (spec §7.4; the pod's own namespace and `globalNamespaces` are allowed);
* a `deviceID` in the networks annotation is honoured only when the kubelet allocated that
  device to this pod for the NAD's `k8s.v1.cni.cncf.io/resourceName`; another pod's
  device, a NAD without a resourceName and a kubelet that cannot be asked are refused;
  hot-plug refuses any deviceID.

Each refusal is one CNI error (code 7; 11 when the kubelet cannot be asked) naming the
pod, the annotation, the NAD and the cause, with a Warning event on the pod, and nothing
ran: no child (no bridge on the host, no recorder call), no link or address in the pod's
netns, no IP allocated, no state saved. Real API server, real plugins, the built
artifact in thin and thick mode; the kubelet's PodResources API is the stand-in gRPC
server (testbed/netattach_testbed/kubelet.py). No assertion is about time.
"""
from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

from netattach_testbed import kubelet
from netattach_testbed import netns as tb
from netattach_testbed import scenario as sc
from tests.e2e.test_dra_devices_e2e import recorded_adds, write_dp_info
from tests.e2e.test_hotplug_e2e import NET_A, hotplug, snapshot, wait_attached, wait_event
from tests.e2e.test_spec_e2e import recorder

pytestmark = pytest.mark.e2e

ISOLATED = {"namespaceIsolation": True}
ALT_SUBNET = "198.18.5.0/24"
RESOURCE = "example.com/vf"
MINE = ["0000:18:02.2", "0000:18:02.3"]  # the devices the kubelet allocated to the pod
THEIRS = "0000:18:02.4"  # one it allocated to another pod (of another namespace)


def host_links() -> set[str]:
    return {link["ifname"] for link in tb.links()}


def refused(admin_api, s: sc.Scenario, run: sc.PluginRun, code: int, *texts: str) -> str:
    """Asserts `run` is the CNI error `code` (exit 1, one JSON error on stdout and
    nothing else) whose msg holds the pod and every one of `texts`, that nothing ran
    (the cluster default network's bridge was never made, the pod's netns holds lo only,
    no IP is allocated, no state saved), and that the pod got a Warning event saying so.
    Returns the msg."""
    assert run.code == 1, run.stdout + s.log_text()
    doc = run.doc
    assert set(doc) <= {"cniVersion", "code", "msg", "details"} and doc["code"] == code, doc
    msg = doc["msg"]
    for text in (f"pod {s.namespace}/{s.pod_name}", *texts):
        assert text in msg, (text, msg)
    assert s.bridges["default"] not in host_links()  # the default network's child never ran
    sc.assert_clean(s)
    sc.writes_sent(s)  # thick: the Warning event goes after the answer
    reason = "InvalidNetworkSelection" if code == 7 else "ErrorAddingNetwork"
    assert [m for t, r, m in sc.pod_events(admin_api, s.namespace, s.pod_name)
            if (t, r) == ("Warning", reason)] == [msg]
    return msg


def alt_default_nad(host_env, namespace: str, name: str) -> tuple[dict, str]:
    """A bridge NAD fit to be a pod's eth0 (gateway, default route); (NAD, bridge)."""
    bridge = host_env.bridge_name()
    return sc.nad(namespace, name, sc.bridge_conf(
        bridge, ALT_SUBNET, host_env.ipam_dir, name=name, version="1.0.0", gateway=True)), bridge


# ---------------------------------------------------------------- default-network

@contextlib.contextmanager
def their_nad(admin_api, host_env, name: str):
    """A NAD fit to be eth0 in the shared namespace `other` (another tenant's), deleted
    afterwards; yields its bridge's name."""
    nad, bridge = alt_default_nad(host_env, sc.OTHER_NS, name)
    sc.apply_nad(admin_api, nad)
    try:
        yield bridge
    finally:
        sc.delete_nad(admin_api, sc.OTHER_NS, name)


def test_default_network_of_another_namespace_is_refused_under_isolation(
        make_scenario, admin_api, host_env, k8s_namespace, mode):
    """A pod of namespace A naming `other/<nad>` (another namespace's NAD) as its default
    network: refused with code 7 before anything runs, naming the pod, the annotation,
    the NAD and namespaceIsolation; the runtime's cleanup DEL succeeds. A NAD of the
    pod's own namespace, or that one with `other` in globalNamespaces, becomes eth0."""
    s = make_scenario(networks="net-a")
    theirs = f"alt-{s.pod_name}"
    with their_nad(admin_api, host_env, theirs) as their_bridge:
        sc.patch_pod_annotations(admin_api, s.namespace, s.pod_name,
                                 {sc.DEFAULT_NETWORK: f"{sc.OTHER_NS}/{theirs}"})
        isolated = {**s.netconf, **ISOLATED}
        msg = refused(admin_api, s, s.run("ADD", isolated), 7, sc.DEFAULT_NETWORK,
                      f"network {sc.OTHER_NS}/{theirs}",
                      "namespace isolation (namespaceIsolation)",
                      f"pods in namespace {k8s_namespace} to use NetworkAttachmentDefinitions "
                      f"in namespace {sc.OTHER_NS}")
        assert (f"allowed: the pod's namespace and globalNamespaces: {k8s_namespace}, "
                "default") in msg
        assert their_bridge not in host_links()
        assert s.run("DEL", isolated).code == 0, s.log_text()  # the runtime's cleanup DEL
        sc.assert_clean(s)

        # a NAD of the pod's own namespace: allowed
        mine, my_bridge = alt_default_nad(host_env, k8s_namespace, "alt")
        sc.apply_nad(admin_api, mine)
        sc.patch_pod_annotations(admin_api, s.namespace, s.pod_name,
                                 {sc.DEFAULT_NETWORK: f"{k8s_namespace}/alt"})
        run = s.run("ADD", isolated)
        assert run.code == 0, run.stdout + s.log_text()
        assert sc.in_subnet(tb.addresses(s.netns, "eth0")[0], ALT_SUBNET)
        assert my_bridge in host_links() and their_bridge not in host_links()
        assert [(e["name"], e["interface"]) for e in sc.network_status(
            admin_api, s.namespace, s.pod_name)] == [(f"{k8s_namespace}/alt", "eth0"),
                                                     (f"{k8s_namespace}/net-a", "net1")]
        assert s.run("DEL", isolated).code == 0, s.log_text()
        sc.assert_clean(s)

        # the other namespace made global: allowed
        sc.patch_pod_annotations(admin_api, s.namespace, s.pod_name,
                                 {sc.DEFAULT_NETWORK: f"{sc.OTHER_NS}/{theirs}"})
        shared = {**isolated, "globalNamespaces": [sc.OTHER_NS]}
        run = s.run("ADD", shared)
        assert run.code == 0, run.stdout + s.log_text()
        assert their_bridge in host_links()
        assert s.run("DEL", shared).code == 0, s.log_text()
        sc.assert_clean(s)


def test_an_unqualified_default_network_is_isolated_in_multus_namespace(
        make_scenario, admin_api, host_env, k8s_namespace, mode):
    """An unqualified default-network name resolves in multusNamespace (as in Multus), not
    in the pod's namespace: isolated, with multusNamespace neither the pod's nor global,
    it is refused, although the pod's namespace has a NAD of that name."""
    s = make_scenario(networks="net-a")
    mine, my_bridge = alt_default_nad(host_env, k8s_namespace, "alt")
    sc.apply_nad(admin_api, mine)
    sc.patch_pod_annotations(admin_api, s.namespace, s.pod_name, {sc.DEFAULT_NETWORK: "alt"})
    refused(admin_api, s, s.run("ADD", {**s.netconf, **ISOLATED}), 7, sc.DEFAULT_NETWORK,
            "network kube-system/alt", "in namespace kube-system")
    assert my_bridge not in host_links()


# ---------------------------------------------------------------- deviceID

def device_nad(s: sc.Scenario, host_env, name: str, resource: str | None) -> dict:
    """macvlan + host-local, then the recorder (declares deviceID and CNIDeviceInfoFile),
    annotated with `resource` as its resourceName (None: without)."""
    from netattach.node import devices

    nad = sc.nad(s.namespace, name, {"cniVersion": "1.0.0", "name": name, "plugins": [
        {"type": "macvlan", "master": s.master, "mode": "bridge",
         "ipam": {"type": "host-local", "subnet": "198.18.6.0/24",
                  "dataDir": str(host_env.ipam_dir)}},
        {"type": "recorder", "capabilities": {"deviceID": True, "CNIDeviceInfoFile": True}}]})
    if resource:
        nad["metadata"]["annotations"] = {devices.RESOURCE_NAME_ANNOTATION: resource}
    return nad


@contextlib.contextmanager
def devices_pod(admin_api, host_env, s: sc.Scenario, nads: list[dict]):
    """The NADs applied, the recorder in the bin dir, the device plugin's device-info for
    every device, and the stand-in kubelet: MINE allocated to the pod, THEIRS to a pod
    of another namespace. Yields (netattach conf, recorder log, devinfo dir)."""
    log = host_env.root / "recorder.log"
    recorder(s.bin_dir, log)
    for nad in nads:
        sc.apply_nad(admin_api, nad)
    devinfo = host_env.root / "devinfo"
    for device_id in [*MINE, THEIRS]:
        write_dp_info(devinfo, RESOURCE, device_id)
    sock = str(host_env.root / "kubelet.sock")
    server = kubelet.serve(sock, kubelet.PodResourcesServer([
        kubelet.pod_resources(s.namespace, s.pod_name, ("app", [(RESOURCE, list(MINE))])),
        kubelet.pod_resources(sc.OTHER_NS, "victim", ("app", [(RESOURCE, [THEIRS])]))]))
    try:
        yield ({**s.netconf, "podResourcesSocket": sock, "deviceInfoDir": str(devinfo)},
               log, devinfo)
    finally:
        server.stop(None)


def nothing_recorded(log: Path, devinfo: Path) -> None:
    assert not log.exists() or recorded_adds(log) == []
    assert not (devinfo / "cni").exists() or list((devinfo / "cni").iterdir()) == []


def test_another_pods_device_is_refused_and_an_allocated_one_is_honoured(
        make_scenario, admin_api, host_env, mode):
    """`deviceID` naming a device the kubelet allocated to another pod: code 7 naming the
    pod, the network, the deviceID and what the pod has, before anything runs. Naming the
    pod's own second device: that attachment gets it (config, runtimeConfig,
    device-info), and the element without a deviceID gets the pod's other one."""
    s = make_scenario(networks=json.dumps([{"name": "vf-net", "deviceID": THEIRS}]))
    nad = device_nad(s, host_env, "vf-net", RESOURCE)
    with devices_pod(admin_api, host_env, s, [nad]) as (conf, log, devinfo):
        msg = refused(admin_api, s, s.run("ADD", conf), 7, sc.NETWORKS, f"network {s.namespace}/vf-net",
                      f"deviceID '{THEIRS}' is not a device the kubelet allocated to the pod "
                      f"for resource {RESOURCE} (the pod has '{MINE[0]}', '{MINE[1]}')")
        assert "victim" not in msg
        nothing_recorded(log, devinfo)
        assert s.run("DEL", conf).code == 0, s.log_text()
        sc.assert_clean(s)

        sc.patch_pod_annotations(admin_api, s.namespace, s.pod_name, {sc.NETWORKS: json.dumps(
            [{"name": "vf-net", "deviceID": MINE[1]}, {"name": "vf-net"}])})
        run = s.run("ADD", conf)
        assert run.code == 0, run.stdout + s.log_text()
        adds = recorded_adds(log)
        assert [a["deviceID"] for a in adds] == [MINE[1], MINE[0]]
        assert [a["runtimeConfig"]["deviceID"] for a in adds] == [MINE[1], MINE[0]]
        status = sc.network_status(admin_api, s.namespace, s.pod_name)
        assert [(e["interface"], e.get("device-info", {}).get("pci", {}).get("pci-address"))
                for e in status] == [("eth0", None), ("net1", MINE[1]), ("net2", MINE[0])]
        assert s.run("DEL", conf).code == 0, s.log_text()
        assert list((devinfo / "cni").iterdir()) == []
        sc.assert_clean(s)


def test_a_device_chosen_twice_is_refused(make_scenario, admin_api, host_env, mode):
    """One of the pod's devices named by two elements: code 7, nothing runs."""
    s = make_scenario(networks=json.dumps([{"name": "vf-net", "deviceID": MINE[0]},
                                  {"name": "vf-net", "deviceID": MINE[0]}]))
    with devices_pod(admin_api, host_env, s, [device_nad(s, host_env, "vf-net", RESOURCE)]) \
            as (conf, log, devinfo):
        refused(admin_api, s, s.run("ADD", conf), 7, f"network {s.namespace}/vf-net",
                f"deviceID '{MINE[0]}' of resource {RESOURCE} is chosen by an earlier element")
        nothing_recorded(log, devinfo)


def test_a_device_id_for_a_nad_without_resource_name_is_refused(make_scenario, admin_api, host_env,
                                                                 mode):
    """A NAD without k8s.v1.cni.cncf.io/resourceName (host-device would move whatever
    device of the node the deviceID names into the pod): the kubelet allocated the pod
    nothing for it, so the deviceID cannot be verified: code 7, nothing runs."""
    s = make_scenario(networks=json.dumps([{"name": "plain", "deviceID": THEIRS}]))
    with devices_pod(admin_api, host_env, s, [device_nad(s, host_env, "plain", None)]) \
            as (conf, log, devinfo):
        refused(admin_api, s, s.run("ADD", conf), 7, sc.NETWORKS, f"network {s.namespace}/plain",
                f"deviceID '{THEIRS}' cannot be verified",
                f"NetworkAttachmentDefinition {s.namespace}/plain has no "
                "k8s.v1.cni.cncf.io/resourceName annotation")
        nothing_recorded(log, devinfo)


def test_a_device_id_that_the_kubelet_cannot_verify_is_refused(make_scenario, admin_api, host_env,
                                                               mode):
    """The kubelet's PodResources socket does not answer: the chosen deviceID cannot be
    verified, so it is refused (code 11: the runtime tries again), naming the network
    and the deviceID; nothing runs."""
    s = make_scenario(networks=json.dumps([{"name": "vf-net", "deviceID": MINE[0]}]))
    with devices_pod(admin_api, host_env, s, [device_nad(s, host_env, "vf-net", RESOURCE)]) \
            as (conf, log, devinfo):
        gone = str(host_env.root / "no-kubelet.sock")
        refused(admin_api, s, s.run("ADD", {**conf, "podResourcesSocket": gone}), 11,
                f"network {s.namespace}/vf-net deviceID '{MINE[0]}' cannot be verified "
                "against the pod's allocation, so it is refused", gone)
        nothing_recorded(log, devinfo)


@pytest.mark.parametrize("mode", ["thick"], indirect=True)
def test_hot_plug_refuses_a_device_id(make_scenario, admin_api, host_env, mode):
    """Hot-plug (the node daemon) adds no element that names a deviceID: a Warning
    HotplugRefused event says why, and the pod is left as it was."""
    s = hotplug(make_scenario(networks="net-a"))
    with devices_pod(admin_api, host_env, s, [device_nad(s, host_env, "plain", None)]) \
            as (conf, log, devinfo):
        run = s.run("ADD", conf)
        assert run.code == 0, run.stdout + s.log_text()
        wait_attached(admin_api, s, NET_A)
        s.settle()
        before = snapshot(admin_api, s)
        sc.patch_pod_annotations(admin_api, s.namespace, s.pod_name, {sc.NETWORKS: json.dumps(
            [{"name": "net-a"}, {"name": "plain", "deviceID": THEIRS}])})
        wait_event(admin_api, s, "Warning", "HotplugRefused", f"network {s.namespace}/plain",
                   f"deviceID '{THEIRS}' is honoured at pod creation only")
        s.settle()
        assert snapshot(admin_api, s) == before
        nothing_recorded(log, devinfo)
        assert s.run("DEL", conf).code == 0, s.log_text()
        sc.assert_clean(s)
