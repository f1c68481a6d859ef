"""The DRA kubelet plugin's pure pieces (daemon/dra.py): the ResourceSlice's devices from
the host interfaces, their names, the slice's name and spec, and NodePrepareResources'
answer for a claim as read. The real-component test is tests/e2e/test_dra_node.py."""
from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from netattach.cni.names import is_dns1123_label, is_dns1123_subdomain
from netattach.daemon import dra
from netattach.kube.client import KubeError

NODE = "node-1"
H = dra.HostInterface


def test_protos_keep_the_kubelets_wire_names():
    """The method paths the kubelet calls (package + service + method) and the field
    numbers of the messages it sends and reads, as in k8s.io/kubelet v0.34.4."""
    from netattach.daemon.draplugin import dra_v1_pb2, dra_v1beta1_pb2, pluginregistration_v1_pb2
    reg = pluginregistration_v1_pb2.DESCRIPTOR.services_by_name["Registration"]
    assert reg.full_name == "pluginregistration.Registration"
    assert [m.name for m in reg.methods] == ["GetInfo", "NotifyRegistrationStatus"]
    info = pluginregistration_v1_pb2.PluginInfo.DESCRIPTOR
    assert [(f.name, f.number) for f in info.fields] == [
        ("type", 1), ("name", 2), ("endpoint", 3), ("supported_versions", 4)]
    for pb2, version in ((dra_v1_pb2, "v1"), (dra_v1beta1_pb2, "v1beta1")):
        svc = pb2.DESCRIPTOR.services_by_name["DRAPlugin"]
        assert svc.full_name == f"k8s.io.kubelet.pkg.apis.dra.{version}.DRAPlugin"
        assert [m.name for m in svc.methods] == ["NodePrepareResources",
                                                 "NodeUnprepareResources"]
        assert [(f.name, f.number) for f in pb2.Claim.DESCRIPTOR.fields] == [
            ("namespace", 1), ("uid", 2), ("name", 3)]
        assert [(f.name, f.number) for f in pb2.Device.DESCRIPTOR.fields] == [
            ("request_names", 1), ("pool_name", 2), ("device_name", 3), ("cdi_device_ids", 4)]
        assert f"{version}.DRAPlugin" in dra.SERVICES
    assert dra.SERVICES[0] == "v1.DRAPlugin"  # the kubelet takes the first it knows


def test_select_interfaces_default_is_the_device_backed_ones():
    ifs = [H("lo"), H("eth0", "aa:bb:cc:dd:ee:ff", True), H("br0"), H("veth1"),
           H("ens1f0", "", True)]
    assert [i.name for i in dra.select_interfaces(ifs, ())] == ["eth0", "ens1f0"]
    assert [i.name for i in dra.select_interfaces(ifs, ("br*", "veth1", "lo"))] == [
        "br0", "veth1"]
    assert dra.select_interfaces(ifs, ("nomatch",)) == []


def test_slice_devices_generic_then_per_interface():
    devices = dra.slice_devices([H("eth0", "aa:bb:cc:dd:ee:ff", True), H("eth1")], 2, 3)
    assert [d["name"] for d in devices] == ["cni-0", "cni-1", "cni-2", "eth0-0", "eth0-1",
                                            "eth1-0", "eth1-1"]
    assert devices[0]["attributes"] == {"kind": {"string": "generic"}}
    assert devices[3]["attributes"] == {
        "kind": {"string": "interface"}, "name": {"string": "eth0"},
        "interfaceName": {"string": "eth0"}, "macAddress": {"string": "aa:bb:cc:dd:ee:ff"}}
    assert "macAddress" not in devices[5]["attributes"]
    assert dra.slice_devices([], 4, 0) == []


def test_slice_devices_stop_at_the_apis_limit():
    ifs = [H(f"eth{n}") for n in range(20)]
    devices = dra.slice_devices(ifs, 8, 16)
    assert len(devices) == dra.MAX_DEVICES == 128
    assert devices[15]["name"] == "cni-15" and devices[16]["name"] == "eth0-0"
    assert devices[-1]["name"] == "eth13-7"


@pytest.mark.parametrize("ifname, label", [
    ("eth0", "eth0"), ("ens1f0", "ens1f0"), ("bond0", "bond0")])
def test_device_label_keeps_valid_names(ifname, label):
    assert dra.device_label(ifname) == label


@given(st.text(alphabet=st.characters(blacklist_characters="/\0 \t\n:", codec="utf-8"),
               min_size=1, max_size=15))
def test_device_label_is_a_dns_label_and_never_collides(ifname):
    label = dra.device_label(ifname)
    assert is_dns1123_label(f"{label}-127")
    if label != ifname:  # changed names carry a hash of the name: distinct names differ
        assert re.fullmatch(r".*-[0-9a-f]{6}", label)


def test_device_label_of_changed_names():
    assert dra.device_label("Eth_0") != dra.device_label("eth-0")
    assert dra.device_label("Eth_0").startswith("eth-0-")
    assert dra.device_label("cni") != "cni"  # "cni-0" is a generic device
    assert dra.device_label("eth0.100").startswith("eth0-100-")


def test_slice_name_and_spec():
    assert dra.slice_name("node-1") == "node-1-cni.dra.networking.x-k8s.io"
    long = ".".join(["a" * 63] * 3) + ".bb"
    assert is_dns1123_subdomain(long)
    name = dra.slice_name(long)
    assert is_dns1123_subdomain(name) and name.endswith(dra.DRIVER_NAME)
    assert name != dra.slice_name(long[:-1] + "c")
    assert dra.slice_spec("n", [{"name": "cni-0"}], 3) == {
        "driver": "cni.dra.networking.x-k8s.io", "nodeName": "n",
        "pool": {"name": "n", "generation": 3, "resourceSliceCount": 1},
        "devices": [{"name": "cni-0"}]}


def claim(uid="u1", results=None, node_selector=None, allocated=True) -> dict:
    """A ResourceClaim as the API server returns it, allocated as the scheduler does."""
    c = {"metadata": {"namespace": "ns", "name": "c", "uid": uid}, "spec": {}, "status": {}}
    if allocated:
        c["status"]["allocation"] = {
            "devices": {"results": results if results is not None else [
                {"request": "macvlan0", "driver": dra.DRIVER_NAME, "pool": NODE,
                 "device": "eth0-0"}]},
            "nodeSelector": node_selector if node_selector is not None else {
                "nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [NODE]}]}]}}
    return c


def test_prepare_answers_our_drivers_devices():
    results = [{"request": "macvlan0", "driver": dra.DRIVER_NAME, "pool": NODE,
                "device": "eth0-0"},
               {"request": "gpu", "driver": "gpu.example.com", "pool": "x", "device": "g0"},
               {"request": "bridge", "driver": dra.DRIVER_NAME, "pool": NODE, "device": "cni-3"}]
    got = dra.prepare_claim(claim(results=results), "ns", "c", "u1", NODE)
    assert got == dra.Prepared(devices=(("macvlan0", NODE, "eth0-0"),
                                        ("bridge", NODE, "cni-3")))
    # no nodeSelector (a device reachable from every node): still ours to prepare
    assert not dra.prepare_claim(claim(node_selector={}), "ns", "c", "u1", NODE).error


@pytest.mark.parametrize("doc, words", [
    (None, "not found"),
    (claim(uid="u2"), "has UID u2"),
    (claim(allocated=False), "is not allocated"),
    (claim(node_selector={"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["node-2"]}]}]}),
     "allocated to another node"),
    (claim(results=[{"request": "r", "driver": "other.example.com", "pool": NODE,
                     "device": "d"}]), "no allocation result of driver"),
    (claim(results=[{"request": "r", "driver": dra.DRIVER_NAME, "pool": "node-2",
                     "device": "cni-0"}]), "of pool node-2, not of this node's pool node-1"),
])
def test_prepare_errors_name_the_claim_and_the_cause(doc, words):
    got = dra.prepare_claim(doc, "ns", "c", "u1", NODE)
    assert got.devices == ()
    assert "ResourceClaim ns/c (UID u1)" in got.error and words in got.error, got.error


class FakeKube:
    """kube.Kube's DRA calls on a dict of claims; `fail` raises KubeError instead."""

    def __init__(self, claims=None, fail=None):
        self.claims = claims or {}
        self.fail = fail
        self.calls = []

    def get_resource_claim(self, namespace, name):
        self.calls.append((namespace, name))
        if self.fail:
            raise KubeError(self.fail, 503)
        return self.claims.get((namespace, name))


def test_plugin_prepare_reads_the_claim_and_counts():
    kube = FakeKube({("ns", "c"): claim()})
    plugin = dra.KubeletPlugin(NODE, lambda timeout, setting: kube, 5.0,
                               list_interfaces=lambda: [])
    assert plugin.prepare("ns", "c", "u1").devices == (("macvlan0", NODE, "eth0-0"),)
    assert plugin.prepare("ns", "c", "u1") == plugin.prepare("ns", "c", "u1")  # idempotent
    assert "not a valid namespace" in plugin.prepare("NS/..", "c", "u1").error
    assert "lacks the namespace" in plugin.prepare("ns", "c", "").error
    assert kube.calls == [("ns", "c")] * 3
    assert (plugin.prepares.ok, plugin.prepares.failed) == (3, 2)
    down = dra.KubeletPlugin(NODE, lambda t, s: FakeKube(fail="API server unreachable"), 5.0)
    err = down.prepare("ns", "c", "u1").error
    assert "ResourceClaim ns/c (UID u1): cannot read it: API server unreachable" in err


def test_plugin_refuses_a_node_name_that_cannot_name_a_pool():
    with pytest.raises(dra.DraError, match="not a DNS subdomain"):
        dra.KubeletPlugin("Node_1", lambda t, s: FakeKube(), 5.0)


class FakeSliceKube:
    """The slice calls of kube.Kube on one stored object, as the API server keeps it."""

    def __init__(self):
        self.stored = None
        self.writes = []

    def get_resource_slice(self, name):
        return None if self.stored is None else {**self.stored, "spec": dict(self.stored["spec"])}

    def create_resource_slice(self, body):
        self.writes.append("create")
        self.stored = body
        return body

    def update_resource_slice(self, body):
        self.writes.append("update")
        self.stored = body
        return body


def test_publisher_creates_then_updates_only_on_change():
    kube = FakeSliceKube()
    ifs = [H("eth0", "", True)]
    pub = dra.SlicePublisher(NODE, lambda t, s: kube, 5.0, (), 1, 2, 10.0, lambda: list(ifs))
    assert pub.reconcile() and kube.writes == ["create"] and pub.generation == 1
    assert kube.stored["metadata"]["name"] == f"{NODE}-{dra.DRIVER_NAME}"
    assert pub.reconcile() and kube.writes == ["create"]  # nothing changed: no request
    ifs.append(H("eth1", "", True))
    assert pub.reconcile() and kube.writes == ["create", "update"] and pub.generation == 2
    assert [d["name"] for d in kube.stored["spec"]["devices"]] == [
        "cni-0", "cni-1", "eth0-0", "eth1-0"]
    # a restarted daemon finds its slice as it would publish it: no write, same generation
    again = dra.SlicePublisher(NODE, lambda t, s: kube, 5.0, (), 1, 2, 10.0, lambda: list(ifs))
    assert again.reconcile() and kube.writes == ["create", "update"] and again.generation == 2


def test_publisher_puts_back_a_deleted_slice_when_poked():
    """The kubelet deletes its node's slices when it starts, then registers the driver
    again: NotifyRegistrationStatus pokes the publisher, which reads and re-creates."""
    kube = FakeSliceKube()
    pub = dra.SlicePublisher(NODE, lambda t, s: kube, 5.0, (), 1, 1, 10.0, lambda: [])
    assert pub.reconcile() and kube.writes == ["create"]
    kube.stored = None  # wiped
    assert pub.reconcile() and kube.writes == ["create"]  # not looked at: nothing changed
    plugin = dra.KubeletPlugin(NODE, lambda t, s: kube, 5.0, list_interfaces=lambda: [])
    plugin.publisher = pub
    plugin.notify(True, "")
    assert pub.reconcile() and kube.writes == ["create", "create"]
    assert kube.stored["spec"]["pool"]["generation"] == 1


def test_publisher_failure_is_counted_and_retried():
    class Down(FakeSliceKube):
        def get_resource_slice(self, name):
            raise KubeError("get ResourceSlice: HTTP 403 (RBAC forbids it)", 403)

    pub = dra.SlicePublisher(NODE, lambda t, s: Down(), 5.0, (), 1, 1, 10.0, lambda: [])
    assert not pub.reconcile() and not pub.reconcile()
    assert pub.failures == 2 and pub.generation == 0


def test_importing_the_daemon_and_dra_does_not_load_grpc():
    """grpc and the generated modules load in KubeletPlugin.start only (--dra)."""
    code = ("import sys, argparse, netattach.daemon as d, netattach.daemon.dra, "
            "netattach.daemon.server, netattach.daemon.metrics; "
            "d.add_arguments(argparse.ArgumentParser()); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('grpc', 'google') "
            "or m.startswith('netattach.daemon.draplugin')))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60, check=True)
    assert p.stdout.strip() == "[]", p.stdout


@pytest.fixture
def short_dir():
    """A temp dir whose sockets' paths fit sun_path (pytest's tmp_path may not)."""
    import shutil
    import tempfile
    d = tempfile.mkdtemp(prefix="dra", dir="/tmp")
    yield Path(d)
    shutil.rmtree(d, ignore_errors=True)


def test_plugin_refuses_a_socket_path_too_long(tmp_path):
    plugin = dra.KubeletPlugin(NODE, lambda t, s: FakeSliceKube(), 5.0,
                               registry_dir=str(tmp_path / ("r" * 100)),
                               plugin_dir=str(tmp_path / "p"), list_interfaces=lambda: [])
    with pytest.raises(dra.DraError, match="longer than 107 bytes"):
        plugin.start()
    assert not os.path.exists(plugin.dra_socket)  # the one made first is removed again


def test_plugin_sockets_a_second_plugin_and_a_stale_socket(short_dir):
    """Real gRPC servers on sockets in temp dirs (the API is a fake): a second plugin on
    the same sockets is refused and removes nothing of the first's; a socket left by a
    plugin that died is replaced; stop removes the sockets it made."""
    import socket as sk

    def plugin():
        return dra.KubeletPlugin(NODE, lambda t, s: FakeSliceKube(), 5.0,
                                 registry_dir=str(short_dir / "registry"),
                                 plugin_dir=str(short_dir / "plugins" / dra.DRIVER_NAME),
                                 list_interfaces=lambda: [], resync=3600)

    first = plugin()
    first.start()
    try:
        reg, endpoint = first.registration_socket, first.dra_socket
        with pytest.raises(dra.DraError, match="another process answers on"):
            plugin().start()
        assert os.path.exists(reg) and os.path.exists(endpoint)
        assert first.info()[2] == endpoint
    finally:
        first.stop()
    assert not os.path.exists(reg) and not os.path.exists(endpoint)
    dead = sk.socket(sk.AF_UNIX, sk.SOCK_STREAM)
    dead.bind(endpoint)  # bound, never listening: what a killed plugin leaves
    dead.close()
    again = plugin()
    again.start()
    try:
        assert stat.S_IMODE(os.stat(endpoint).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(os.path.dirname(endpoint)).st_mode) == 0o700
    finally:
        again.stop()
