"""Multi-net spec behaviour end to end (issue 3): the pod's default-network annotation,
namespace isolation (§7.4), capability failure (§4.1.2.1.x.2), events, readiness (§6.1).
Real kube-apiserver, real plugins, the installed command, the deploy/ RBAC token."""
from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

from kubernetes.client import CoreV1Api

from netattach_testbed import cluster as cl
from netattach_testbed import netns as tb
from netattach_testbed import scenario as sc

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hack"))
from benchlib import multus  # noqa: E402  (Multus in the test bed, as the bench runs it)


def links(s):
    return sorted(l["ifname"] for l in tb.links(s.netns))


def events(api, namespace, pod):
    return [(e.type, e.reason, e.message) for e in CoreV1Api(api).list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={pod}").items]


def assert_clean(s):
    assert links(s) == ["lo"]
    assert s.env.ipam_allocations() == []


def test_pod_default_network_annotation_replaces_cluster_network(
        admin_api, plugin_kubeconfig, host_env, k8s_namespace):
    """v1.multus-cni.io/default-network: the pod's eth0 comes from that NAD, not from
    clusterNetwork; its status entry is the default one."""
    s = sc.setup(admin_api, plugin_kubeconfig, host_env, k8s_namespace, networks="net-a")
    alt_bridge = host_env.bridge_name()
    sc.apply_nad(admin_api, sc.nad(k8s_namespace, "alt-default", sc.bridge_conf(
        alt_bridge, "198.18.5.0/24", host_env.ipam_dir, name="alt-default", version="1.0.0",
        gateway=True)))
    CoreV1Api(admin_api).patch_namespaced_pod(s.pod_name, s.namespace, {"metadata": {
        "annotations": {"v1.multus-cni.io/default-network": f"{k8s_namespace}/alt-default"}}})
    run = s.run("ADD")
    assert run.code == 0, run.stdout + s.log_text()
    assert run.doc["ips"][0]["address"].startswith("198.18.5.")
    assert tb.addresses(s.netns, "eth0")[0].startswith("198.18.5.")
    status = json.loads(sc.read_pod_annotations(admin_api, s.namespace, s.pod_name)[sc.STATUS])
    assert [(e["name"], e["interface"], e["default"]) for e in status] == [
        (f"{k8s_namespace}/alt-default", "eth0", True), (f"{k8s_namespace}/net-a", "net1", False)]
    assert s.run("DEL").code == 0
    assert_clean(s)


def test_namespace_isolation(admin_api, plugin_kubeconfig, host_env, k8s_namespace):
    """§7.4: with namespaceIsolation a pod may not use a NAD in another namespace unless
    that namespace is global; the message names both namespaces."""
    s = sc.setup(admin_api, plugin_kubeconfig, host_env, k8s_namespace)  # uses other/net-b
    isolated = {**s.netconf, "namespaceIsolation": True}
    run = s.run("ADD", isolated)
    assert run.code == 1 and run.doc["code"] == 7
    assert f"namespace {k8s_namespace}" in run.doc["msg"] and "namespace other" in run.doc["msg"]
    assert_clean(s)
    run = s.run("ADD", {**isolated, "globalNamespaces": "other"})
    assert run.code == 0, run.stdout + s.log_text()
    assert s.run("DEL", isolated).code == 0
    assert_clean(s)


def test_capability_missing_fails_whole_add_with_warning_event(
        admin_api, plugin_kubeconfig, host_env, k8s_namespace):
    s = sc.setup(admin_api, plugin_kubeconfig, host_env, k8s_namespace,
                 networks='[{"name": "net-a", "mac": "02:00:00:00:00:aa"}]')
    run = s.run("ADD")
    assert run.code == 1 and run.doc["code"] == 7
    assert "'mac'" in run.doc["msg"] and f"{k8s_namespace}/net-a" in run.doc["msg"]
    assert_clean(s)
    warnings = [e for e in events(admin_api, k8s_namespace, s.pod_name) if e[0] == "Warning"]
    assert warnings and warnings[0][1] == "ErrorAddingNetwork" and "'mac'" in warnings[0][2]


def test_invalid_annotation_warning_event_names_key_and_index(
        admin_api, plugin_kubeconfig, host_env, k8s_namespace):
    s = sc.setup(admin_api, plugin_kubeconfig, host_env, k8s_namespace,
                 networks='[{"name": "net-a"}, {"name": "net-a", "ips": ["300.1.1.1"]}]')
    run = s.run("ADD")
    assert run.code == 1 and run.doc["code"] == 7
    assert "ips" in run.doc["msg"] and "300.1.1.1" in run.doc["msg"] and "1" in run.doc["msg"]
    assert_clean(s)  # never a partial attach
    assert [e[1] for e in events(admin_api, k8s_namespace, s.pod_name)] == ["InvalidNetworkSelection"]


def test_added_interface_events(scenario, admin_api):
    s = scenario
    assert s.run("ADD").code == 0, s.log_text()
    got = events(admin_api, s.namespace, s.pod_name)
    assert sorted(m for t, r, m in got if r == "AddedInterface" and t == "Normal") == sorted([
        f"Add eth0 {tb.bare(tb.addresses(s.netns, 'eth0'))} from cluster-net",
        f"Add net1 {tb.bare(tb.addresses(s.netns, 'net1'))} from {s.namespace}/net-a",
        f"Add data0 {tb.bare(tb.addresses(s.netns, 'data0'))} from other/net-b"])
    assert s.run("DEL").code == 0


def test_readiness_indicator_file(scenario):
    """§6.1.2: ADD waits for the readiness indicator file; it fails naming the file when
    it does not appear in time, and proceeds once it does."""
    s = scenario
    flag = s.env.root / "ready"
    conf = {**s.netconf, "readinessindicatorfile": str(flag), "readinessTimeout": 1}
    run = s.run("ADD", conf)
    assert run.code == 1 and run.doc["code"] == 11 and str(flag) in run.doc["msg"]
    assert links(s) == ["lo"]
    # The file appears while the ADD waits for it: once the log says it waits, not after
    # a fixed second (on a loaded machine the ADD may not have got there yet, and then
    # finds the file at once without waiting: issue 9, defect 11).
    waiting = f"waiting up to 20 s for readiness indicator file {flag}"

    def touch_once_waiting() -> None:
        deadline = time.monotonic() + 60  # a hang guard; the ADD gives up after 20 s
        while waiting not in s.log_text() and time.monotonic() < deadline:
            time.sleep(0.02)
        flag.touch()

    toucher = threading.Thread(target=touch_once_waiting)
    toucher.start()
    try:
        run = s.run("ADD", {**conf, "readinessTimeout": 20})
    finally:
        toucher.join()
    assert run.code == 0, run.stdout + s.log_text()
    assert waiting in s.log_text()
    assert s.run("DEL", conf).code == 0
    assert_clean(s)


RECORDER = """#!{python}
import json, os, sys
conf = json.load(sys.stdin)
with open({log!r}, "a") as f:
    f.write(json.dumps({{"command": os.environ["CNI_COMMAND"], "conf": conf}}) + "\\n")
if os.environ["CNI_COMMAND"] == "ADD":
    print(json.dumps(conf.get("prevResult") or {{"cniVersion": conf["cniVersion"]}}))
"""


def recorder(bin_dir, log):
    import sys
    path = bin_dir / "recorder"
    path.write_text(RECORDER.format(python=sys.executable, log=str(log)))
    path.chmod(0o755)


def test_default_route_on_a_selected_network(admin_api, plugin_kubeconfig, host_env,
                                              k8s_namespace):
    """§4.1.2.1.9: the default route moves to net-a's gateway; the pod has exactly one
    default route; network-status carries default-route; CHECK and DEL still pass."""
    s = sc.setup(admin_api, plugin_kubeconfig, host_env, k8s_namespace,
                 networks='[{"name": "net-a", "default-route": ["198.18.2.1"]}]')
    run = s.run("ADD")
    assert run.code == 0, run.stdout + s.log_text()
    routes = json.loads(tb.run("ip", "-j", "-n", s.netns, "route", "show", "default").stdout)
    assert [(r["gateway"], r["dev"]) for r in routes] == [("198.18.2.1", "net1")]
    status = json.loads(sc.read_pod_annotations(admin_api, s.namespace, s.pod_name)[sc.STATUS])
    assert "default-route" not in status[0]
    assert status[1]["default-route"] == ["198.18.2.1"]
    assert s.run("CHECK").code == 0, s.log_text()
    assert s.run("DEL").code == 0
    assert_clean(s)


RESOURCE = "example.com/nic"
DEVICES = ("0000:18:02.5", "0000:18:02.6")


@contextlib.contextmanager
def two_device_attachments(admin_api, plugin_kubeconfig, host_env, k8s_namespace):
    """A pod selecting NAD `dev-net` (annotated with a device-plugin resource) twice, the
    kubelet's PodResources API (a real gRPC server on a unix socket) allocating it two
    devices, the device plugin's device-info files in place. Yields (scenario, netattach
    conf, devinfo dir, recorder log)."""
    from netattach.node import devices
    from netattach_testbed import kubelet

    s = sc.setup(admin_api, plugin_kubeconfig, host_env, k8s_namespace, networks="dev-net,dev-net")
    log = host_env.root / "recorder.log"
    recorder(s.bin_dir, log)
    nad = sc.nad(k8s_namespace, "dev-net", {"cniVersion": "1.0.0", "name": "dev-net", "plugins": [
        {"type": "macvlan", "master": s.master, "mode": "bridge",
         "ipam": {"type": "host-local", "subnet": "198.18.6.0/24", "dataDir": str(host_env.ipam_dir)}},
        {"type": "recorder", "capabilities": {"deviceID": True, "CNIDeviceInfoFile": True}}]})
    nad["metadata"]["annotations"] = {devices.RESOURCE_NAME_ANNOTATION: RESOURCE}
    sc.apply_nad(admin_api, nad)
    devinfo = host_env.root / "devinfo"
    info = {"type": "pci", "version": "1.1.0", "pci": {"pci-address": DEVICES[0]}}
    for dev in DEVICES:
        path = devices.dp_device_info_path(RESOURCE, dev, str(devinfo))
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps({**info, "pci": {"pci-address": dev}}))
    sock = str(host_env.root / "kubelet.sock")
    server = kubelet.serve(sock, kubelet.PodResourcesServer([kubelet.pod_resources(
        k8s_namespace, s.pod_name, ("app", [(RESOURCE, list(DEVICES))]))]))
    try:
        yield s, {**s.netconf, "podResourcesSocket": sock, "deviceInfoDir": str(devinfo)}, \
            devinfo, log
    finally:
        server.stop(None)


def test_device_from_kubelet_reaches_the_delegate_and_status(
        admin_api, plugin_kubeconfig, host_env, k8s_namespace):
    """A NAD annotated k8s.v1.cni.cncf.io/resourceName: the pod's allocated devices come
    from the kubelet PodResources API (gRPC), one per attachment in order, as deviceID in
    the delegate's config and runtimeConfig; the device plugin's device-info lands in
    network-status and the attachment's device-info file is gone after DEL."""
    with two_device_attachments(admin_api, plugin_kubeconfig, host_env,
                                k8s_namespace) as (s, conf, devinfo, log):
        run = s.run("ADD", conf)
        assert run.code == 0, run.stdout + s.log_text()
        adds = [json.loads(l)["conf"] for l in log.read_text().splitlines()
                if json.loads(l)["command"] == "ADD"]
        assert [a["deviceID"] for a in adds] == list(DEVICES)
        assert [a["runtimeConfig"]["deviceID"] for a in adds] == list(DEVICES)
        assert adds[0]["runtimeConfig"]["CNIDeviceInfoFile"].endswith(f"{s.container_id}_net1")
        status = json.loads(sc.read_pod_annotations(admin_api, s.namespace, s.pod_name)[sc.STATUS])
        assert [e.get("device-info", {}).get("pci", {}).get("pci-address") for e in status] == [
            None, *DEVICES]
        assert len(list((devinfo / "cni").iterdir())) == 2
        assert s.run("DEL", conf).code == 0, s.log_text()
        assert list((devinfo / "cni").iterdir()) == []
        assert_clean(s)


def test_a_device_info_file_that_cannot_be_written_is_an_io_failure(
        admin_api, plugin_kubeconfig, host_env, k8s_namespace):
    """Issue 9, defect 6: it was reported as code 7 (invalid config). It is an I/O
    failure, code 5, naming the file; the attachments made so far are rolled back."""
    with two_device_attachments(admin_api, plugin_kubeconfig, host_env,
                                k8s_namespace) as (s, conf, devinfo, log):
        (devinfo / "cni").write_text("a file where the device-info dir should be")
        run = s.run("ADD", conf)
        assert run.code == 1 and run.doc["code"] == 5, run.stdout + s.log_text()
        assert "cannot write device-info file" in run.doc["msg"] and "dev-net" in run.doc["msg"]
        assert_clean(s)  # eth0 and its IP were released


def test_status_ips_as_multus_writes_them(scenario, cluster, admin_api, tmp_path):
    """Scenario 1's pod attached by the test bed's Multus v4.2.3 (its thin `multus`, run
    as the runtime would, with the NADs and the cluster network netattach uses), then by
    netattach: each writes one entry per interface whose `ips` are the bare addresses of
    that link in the pod, which the annotation's readers parse (docs/behaviour.md, "The
    addresses in network-status"). Addresses differ between the two (host-local hands
    out the next one), the form does not."""
    s = scenario
    sa = multus.service_account(admin_api, "thin")
    exe = s.bin_dir / "multus"
    exe.symlink_to(multus.require_binaries() / "multus")
    conf = multus.thin_conf(cl.plugin_kubeconfig(cluster, multus.NAMESPACE, sa),
                            s.netconf["clusterNetwork"], s.env.conf_dir, tmp_path / "multus",
                            s.bin_dir, s.env.log_dir / "multus.log")

    def run_multus(command):
        p = subprocess.run([str(exe)], input=json.dumps(conf), env=s.cni_env(command),
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stdout + p.stderr
        return p

    def status_and_links():
        status = json.loads(sc.read_pod_annotations(admin_api, s.namespace, s.pod_name)[
            sc.STATUS])
        return ({e["interface"]: e["ips"] for e in status},
                {i: tb.addresses(s.netns, i) for i in ("eth0", "net1", "data0")}, status)

    run_multus("ADD")
    by_multus, links, status = status_and_links()
    run_multus("DEL")
    assert by_multus == {i: tb.bare(a) for i, a in links.items()}, (by_multus, links)
    sc.assert_bare_ips(status)

    assert s.run("ADD").code == 0, s.log_text()
    by_netattach, links, status = status_and_links()
    assert by_netattach == {i: tb.bare(a) for i, a in links.items()}, (by_netattach, links)
    sc.assert_bare_ips(status)
    assert s.run("DEL").code == 0, s.log_text()
    assert_clean(s)


def test_status_fields_and_mixed_versions_in_one_pod(admin_api, plugin_kubeconfig, host_env,
                                                     k8s_namespace, cni_testbin):
    """One pod, delegates at 0.2.0, 0.3.1, 1.0.0 and 1.1.0 (reference plugins v1.9.1),
    and the network-status fields each produces (spec §5.3): a 0.2.0 result gives the
    interface from CNI_IFNAME and ips from ip4 (§5.3.2.1, §5.3.3.1); dns from IPAM's
    resolvConf (§5.3.7); mtu on every entry; mac from the sandbox interface."""
    s = sc.setup(admin_api, plugin_kubeconfig, host_env, k8s_namespace,
                 networks="net-a,other/net-b@data0,net-old,net-dns")
    resolv = host_env.root / "resolv.conf"
    resolv.write_text("nameserver 198.18.7.53\nsearch corp.example example\ndomain corp.example\n")
    old_bridge, dns_bridge = host_env.bridge_name(), host_env.bridge_name()
    sc.apply_nad(admin_api, sc.nad(k8s_namespace, "net-old", sc.bridge_conf(
        old_bridge, "198.18.8.0/24", host_env.ipam_dir, name="net-old", version="0.2.0",
        gateway=False)))
    dns_conf = {"cniVersion": "1.1.0", "name": "net-dns", "plugins": [sc.bridge_conf(
        dns_bridge, "198.18.7.0/24", host_env.ipam_dir, name=None, version="1.1.0", gateway=False)]}
    del dns_conf["plugins"][0]["cniVersion"]
    dns_conf["plugins"][0]["ipam"]["resolvConf"] = str(resolv)
    sc.apply_nad(admin_api, sc.nad(k8s_namespace, "net-dns", dns_conf))
    env = {"CNI_PATH": f"{s.bin_dir}:{cni_testbin}"}  # reference plugins speak 0.1.0 .. 1.1.0
    run = s.run("ADD", env_overrides=env)
    assert run.code == 0, run.stdout + s.log_text()
    status = json.loads(sc.read_pod_annotations(admin_api, s.namespace, s.pod_name)[sc.STATUS])
    by_if = {e["interface"]: e for e in status}
    assert list(by_if) == ["eth0", "net1", "data0", "net3", "net4"]
    sc.assert_bare_ips(status)  # every result version's addresses, as Multus writes them
    for ifname, entry in by_if.items():
        assert entry["ips"] == tb.bare(tb.addresses(s.netns, ifname))
        assert entry["mtu"] == json.loads(tb.run("ip", "-j", "-n", s.netns, "link", "show",
                                                 ifname).stdout)[0]["mtu"]
    assert "mac" not in by_if["net3"]  # a 0.2.0 result has no interfaces (§5.3.4.1)
    for ifname in ("eth0", "net1", "data0", "net4"):
        assert by_if[ifname]["mac"] == tb.link_mac(s.netns, ifname)
    assert by_if["net4"]["dns"] == {"nameservers": ["198.18.7.53"], "domain": "corp.example",
                                    "search": ["corp.example", "example"]}
    assert [e["default"] for e in status] == [True, False, False, False, False]
    assert s.run("CHECK", env_overrides=env).code == 0, s.log_text()
    assert s.run("DEL", env_overrides=env).code == 0, s.log_text()
    assert_clean(s)


def test_default_networks_skipped_in_system_namespaces(admin_api, plugin_kubeconfig, host_env,
                                                       k8s_namespace):
    """defaultNetworks attach to every pod except those in systemNamespaces."""
    s = sc.setup(admin_api, plugin_kubeconfig, host_env, k8s_namespace, networks="")
    everyone = host_env.bridge_name()
    sc.apply_nad(admin_api, sc.nad(k8s_namespace, "everyone", sc.bridge_conf(
        everyone, "198.18.4.0/24", host_env.ipam_dir, name="everyone", version="1.0.0",
        gateway=False)))
    conf = {**s.netconf, "defaultNetworks": [f"{k8s_namespace}/everyone"]}
    assert s.run("ADD", conf).code == 0, s.log_text()
    assert links(s) == ["eth0", "lo", "net1"]
    assert s.run("DEL", conf).code == 0
    assert s.run("ADD", {**conf, "systemNamespaces": [k8s_namespace]}).code == 0, s.log_text()
    assert links(s) == ["eth0", "lo"]
    assert s.run("DEL", conf).code == 0
    assert_clean(s)
