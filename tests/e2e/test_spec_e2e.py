"""Multi-net spec behaviour end to end (issue 3): the pod's default-network annotation,
namespace isolation (§7.4), capability failure (§4.1.2.1.x.2), events, readiness (§6.1).
Real kube-apiserver, real plugins, the installed command, the deploy/ RBAC token."""
from __future__ import annotations

import json
import threading

from kubernetes.client import CoreV1Api

from tests.testbed import netns as tb
from tests.testbed import scenario as sc


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
        f"Add eth0 {tb.addresses(s.netns, 'eth0')} from cluster-net",
        f"Add net1 {tb.addresses(s.netns, 'net1')} from {s.namespace}/net-a",
        f"Add data0 {tb.addresses(s.netns, 'data0')} from other/net-b"])
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
    timer = threading.Timer(1.0, flag.touch)
    timer.start()
    try:
        run = s.run("ADD", {**conf, "readinessTimeout": 20})
    finally:
        timer.join()
    assert run.code == 0, run.stdout + s.log_text()
    assert s.run("DEL", conf).code == 0
    assert_clean(s)
