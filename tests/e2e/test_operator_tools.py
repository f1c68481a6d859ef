"""`netattach status` against the real kube-apiserver: a pod's network-status as a table
and as JSON, through the kubeconfig the way kubectl finds it, and a clear exit 1 for a
missing pod, a pod not attached yet, a malformed annotation and a forbidden read."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s

from netattach.spec.status import NETWORK_STATUS_ANNOTATION, encode_status, status_entry
from netattach_testbed import cluster as cl
from netattach_testbed.scenario import netattach_command

pytestmark = pytest.mark.e2e

SPEC_STATUS = Path(__file__).resolve().parents[1] / "data" / "spec_examples" / \
    "s5_4_status_single_gateway.yaml"

# What netattach writes for scenario 1 (README), through its own encoder: bare addresses,
# its default (the CIDR form of older pods and of networkStatusIPFormat "cidr" is shown by
# test_status_finds_kubeconfig_and_namespace_like_kubectl, from the spec's §5.4 example).
ENTRIES = [
    status_entry("cluster-net", {"cniVersion": "1.1.0", "interfaces": [
        {"name": "eth0", "mac": "0a:58:c6:12:01:02", "sandbox": "/var/run/netns/p", "mtu": 1500}],
        "ips": [{"address": "198.18.1.2/24", "interface": 0}]}, ifname="eth0", default=True),
    status_entry("demo/net-a", {"cniVersion": "1.0.0", "interfaces": [
        {"name": "net1", "mac": "0a:58:c6:12:02:02", "sandbox": "/var/run/netns/p"}],
        "ips": [{"address": "198.18.2.2/24", "interface": 0},
                {"address": "fd00:2::2/64", "interface": 0}]},
        ifname="net1", default=False, mtu=9000),
    status_entry("other/net-b", None, ifname="data0", default=False,
                 device_info={"type": "pci", "version": "1.1.0", "pci": {"pci-address": "0000:03:00.1"}}),
]


def make_pod(api: k8s.ApiClient, namespace: str, name: str, annotations: dict | None = None) -> None:
    """A Pod object (never scheduled: the test bed has no scheduler or kubelet)."""
    k8s.CoreV1Api(api).create_namespaced_pod(namespace, k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name=name, annotations=annotations),
        spec=k8s.V1PodSpec(containers=[k8s.V1Container(name="app", image="registry.invalid/app:1")])))


def status(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    return subprocess.run([netattach_command(), "status", *args], capture_output=True, text=True,
                          env={**base, **(env or {})}, timeout=60)


@pytest.fixture
def kubeconfig(cluster, k8s_namespace, tmp_path) -> Path:
    """The admin kubeconfig with the test namespace as its context's namespace."""
    doc = yaml.safe_load(cluster.admin_kubeconfig.read_text())
    for ctx in doc["contexts"]:
        ctx["context"]["namespace"] = k8s_namespace
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_status_table_and_json(admin_api, k8s_namespace, kubeconfig):
    make_pod(admin_api, k8s_namespace, "web", {NETWORK_STATUS_ANNOTATION: encode_status(ENTRIES)})
    done = status("web", "-n", k8s_namespace, "--kubeconfig", str(kubeconfig))
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == (
        "NETWORK      INTERFACE  IPS                   MAC                DEFAULT  MTU   DEVICE\n"
        "cluster-net  eth0       198.18.1.2            0a:58:c6:12:01:02  yes      1500  -\n"
        "demo/net-a   net1       198.18.2.2,fd00:2::2  0a:58:c6:12:02:02  no       9000  -\n"
        "other/net-b  data0      -                     -                  no       -     pci 0000:03:00.1\n")

    done = status("web", "-n", k8s_namespace, "--kubeconfig", str(kubeconfig), "-o", "json")
    assert done.returncode == 0
    assert json.loads(done.stdout) == {"namespace": k8s_namespace, "pod": "web", "networks": ENTRIES}


def test_status_finds_kubeconfig_and_namespace_like_kubectl(admin_api, k8s_namespace, kubeconfig):
    """$KUBECONFIG (first existing path) and the context's namespace, no flags; the
    spec's own §5.4 example annotation, its addresses in CIDR form shown as written."""
    spec_pod = yaml.safe_load(SPEC_STATUS.read_text())
    annotation = spec_pod["metadata"]["annotations"][NETWORK_STATUS_ANNOTATION]
    make_pod(admin_api, k8s_namespace, "my-pod", {NETWORK_STATUS_ANNOTATION: annotation})
    done = status("my-pod", env={"KUBECONFIG": f"/nonexistent/config{os.pathsep}{kubeconfig}"})
    assert done.returncode == 0, done.stderr
    assert [line.split()[:3] for line in done.stdout.splitlines()] == [
        ["NETWORK", "INTERFACE", "IPS"],
        ["namespace-a/cluster-wide-default", "eth5", "192.0.2.2/24,2001:db8::2230/32"],
        ["namespace-b/some-network", "eth1", "192.0.2.2/24,2001:db8::2234/32"],
        ["namespace-a/an-ip-over-infiniband-network", "ib0", "198.51.100.1/24"]]


def test_pod_missing(k8s_namespace, kubeconfig):
    done = status("nope", "--kubeconfig", str(kubeconfig))
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == f"netattach status: pod {k8s_namespace}/nope not found\n"


def test_pod_without_annotation(admin_api, k8s_namespace, kubeconfig):
    make_pod(admin_api, k8s_namespace, "bare")
    done = status("bare", "-n", k8s_namespace, "--kubeconfig", str(kubeconfig), "-o", "json")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.startswith(f"netattach status: pod {k8s_namespace}/bare has no "
                                  f"{NETWORK_STATUS_ANNOTATION} annotation yet")
    assert "not have been attached yet" in done.stderr and "patch pods/status" in done.stderr


def test_malformed_annotation(admin_api, k8s_namespace, kubeconfig):
    make_pod(admin_api, k8s_namespace, "odd", {NETWORK_STATUS_ANNOTATION: '{"name": "x"}'})
    done = status("odd", "--kubeconfig", str(kubeconfig))
    assert done.returncode == 1
    assert done.stderr == (f"netattach status: pod {k8s_namespace}/odd: malformed "
                           f"{NETWORK_STATUS_ANNOTATION} annotation: must be a JSON list of "
                           "objects (§5), not an object\n")


def test_forbidden_and_unreadable_kubeconfig(cluster, admin_api, k8s_namespace, tmp_path):
    make_pod(admin_api, k8s_namespace, "web", {NETWORK_STATUS_ANNOTATION: "[]"})
    nobody = cl.plugin_kubeconfig(cluster, namespace=k8s_namespace, sa="nobody",
                                  path=tmp_path / "nobody.kubeconfig")
    done = status("web", "-n", k8s_namespace, "--kubeconfig", str(nobody))
    assert done.returncode == 1
    assert f"get pod {k8s_namespace}/web: HTTP 403" in done.stderr
    assert "rbac.yaml" not in done.stderr and "bind the ClusterRole" not in done.stderr
    assert done.stderr.endswith(f"netattach status: the kubeconfig's user needs `get` on pods in "
                                f"namespace {k8s_namespace}\n")

    done = status("web", "--kubeconfig", str(tmp_path / "missing"))
    assert done.returncode == 1
    assert done.stderr.startswith(f"netattach status: cannot load kubeconfig {tmp_path}/missing")


# ---------------------------------------------------------------- validate --cluster

NETWORKS = "k8s.v1.cni.cncf.io/networks"
DEFAULT_NETWORK = "v1.multus-cni.io/default-network"
NA = f"metadata.annotations[{NETWORKS}]"
MACVLAN = {"cniVersion": "1.0.0", "type": "macvlan", "master": "eth0",
           "ipam": {"type": "static"}}
WITH_IPS = {"cniVersion": "1.0.0", "plugins": [
    {"type": "macvlan", "master": "eth0", "ipam": {"type": "static"},
     "capabilities": {"ips": True}}]}


def validate(*args: str, env: dict | None = None, command: list[str] | None = None
             ) -> subprocess.CompletedProcess:
    """`netattach validate ARGS` (the built artifact), or `command ARGS`."""
    base = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    return subprocess.run([*(command or [netattach_command(), "validate"]), *args],
                          capture_output=True, text=True, env={**base, **(env or {})},
                          timeout=120)


def make_nad(api: k8s.ApiClient, namespace: str, name: str, config: dict | str | None) -> None:
    spec = {} if config is None else {
        "config": config if isinstance(config, str) else json.dumps(config)}
    k8s.CustomObjectsApi(api).create_namespaced_custom_object(
        cl.NAD_GROUP, cl.NAD_VERSION, namespace, cl.NAD_PLURAL,
        {"apiVersion": f"{cl.NAD_GROUP}/{cl.NAD_VERSION}",
         "kind": "NetworkAttachmentDefinition",
         "metadata": {"name": name, "namespace": namespace}, "spec": spec})


def make_raw_pod(api: k8s.ApiClient, namespace: str, name: str, annotations: dict,
                 host_network: bool = False, owner: str | None = None) -> None:
    meta: dict = {"name": name, "annotations": annotations}
    if owner:  # no controller-manager: nothing collects a pod whose owner does not exist
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                    "name": owner, "uid": f"00000000-0000-0000-0000-{owner}",
                                    "controller": True}]
    k8s.CoreV1Api(api).create_namespaced_pod(namespace, {
        "apiVersion": "v1", "kind": "Pod", "metadata": meta,
        "spec": {"hostNetwork": host_network,
                 "containers": [{"name": "app", "image": "registry.invalid/app:1"}]}})


@pytest.fixture
def other_namespace(admin_api) -> str:
    """A second fresh namespace (deleted after the test as k8s_namespace's is)."""
    import uuid

    from tests.fixtures_cluster import _delete_namespace
    name = f"nat-{uuid.uuid4().hex[:10]}"
    k8s.CoreV1Api(admin_api).create_namespace(k8s.V1Namespace(
        metadata=k8s.V1ObjectMeta(name=name)))
    try:
        yield name
    finally:
        _delete_namespace(admin_api, name)


@pytest.fixture
def migrating(admin_api, k8s_namespace, other_namespace) -> str:
    """NADs and pods (never scheduled: the test bed has no kubelet here) that trigger each
    check of the pre-flight, in k8s_namespace (and a NAD in other_namespace)."""
    ns, other = k8s_namespace, other_namespace
    make_nad(admin_api, ns, "plain", MACVLAN)
    make_nad(admin_api, ns, "capable", WITH_IPS)
    make_nad(admin_api, ns, "old", {"cniVersion": "9.9.9", "type": "macvlan"})
    make_nad(admin_api, ns, "meta", {"cniVersion": "1.0.0", "type": "multus"})
    make_nad(admin_api, ns, "disk", None)
    make_nad(admin_api, other, "shared", MACVLAN)
    pods = {
        "db": {NETWORKS: json.dumps([{"name": "plain", "ips": ["10.1.0.5/24"]}])},
        "ok": {NETWORKS: json.dumps([{"name": "capable", "ips": ["10.2.0.5/24"]}])},
        "cross": {NETWORKS: f"{other}/shared"},
        "keys": {NETWORKS: json.dumps([{"name": "capable", "Interface": "data0"}])},
        "eth": {DEFAULT_NETWORK: f"{other}/shared"},
        "legacy": {NETWORKS: "capable", "k8s.v1.cni.cncf.io/networks-status": "[]"},
        "old-user": {NETWORKS: "old"},
        "meta-user": {NETWORKS: "meta"},
        "lost": {NETWORKS: "gone"},
        "plain-user": {NETWORKS: "capable"},
    }
    for name, wanted in pods.items():
        make_raw_pod(admin_api, ns, name, wanted)
    make_raw_pod(admin_api, ns, "host", {NETWORKS: "gone"}, host_network=True)
    for i in (1, 2, 3):
        make_raw_pod(admin_api, ns, f"web-{i}", {NETWORKS: "gone"}, owner="000000000abc")
    return ns


def mine(doc: dict, ns: str) -> set[tuple]:
    """(kind, name, key, severity) of the findings about namespace `ns`'s objects (the
    session's cluster holds other tests' NADs too)."""
    return {(f["kind"], f["name"], f["key"], f["severity"]) for f in doc["findings"]
            if f["namespace"] == ns}


def test_preflight_lists_each_difference(migrating, kubeconfig, tmp_path):
    ns = migrating
    netconf = tmp_path / "netconf.yaml"  # the ConfigMap's keys (deploy/components/netconf)
    netconf.write_text("namespaceIsolation: true\nlogFile: /var/log/netattach.log\n")
    done = validate("--cluster", "-n", ns, "--kubeconfig", str(kubeconfig), "--conf",
                    str(netconf), "-o", "json")
    assert done.returncode == 1, done.stderr
    doc = json.loads(done.stdout)
    nad, pod = "NetworkAttachmentDefinition", "Pod"
    assert mine(doc, ns) == {
        (nad, "old", "spec.config", "warning"),
        (nad, "meta", "spec.config", "warning"),
        (nad, "disk", "spec.config", "note"),
        (pod, "db", f"{NA}[0].ips", "error"),
        (pod, "cross", f"{NA}[0].namespace", "error"),
        (pod, "keys", f"{NA}[0].Interface", "warning"),
        (pod, "eth", f"metadata.annotations[{DEFAULT_NETWORK}]", "error"),
        (pod, "legacy", "metadata.annotations[k8s.v1.cni.cncf.io/networks-status]", "note"),
        (pod, "old-user", f"{NA}[0].name", "error"),
        (pod, "meta-user", f"{NA}[0].name", "error"),
        (pod, "lost", f"{NA}[0].name", "error"),
        (pod, "web-1", f"{NA}[0].name", "error"),
    }
    conf_findings = [(f["name"], f["key"], f["severity"]) for f in doc["findings"]
                     if f["kind"] == "NetConf"]
    assert conf_findings == [(str(netconf), "logFile", "warning")]
    by_pod = {f["name"]: f for f in doc["findings"] if f["namespace"] == ns}
    assert by_pod["web-1"]["also"] == ["web-2", "web-3"]
    assert "no plugin of NetworkAttachmentDefinition " f"{ns}/plain declares the capability" \
        in by_pod["db"]["message"] and "Multus ignored the request" in by_pod["db"]["message"]
    assert "9.9.9" in by_pod["old-user"]["message"]
    assert f"NetworkAttachmentDefinition {ns}/gone not found" in by_pod["lost"]["message"]
    # 13 pods with a selection (host is hostNetwork: no CNI call, not counted)
    assert doc["summary"]["pods"] == 13 and doc["summary"]["errors"] == 7
    assert doc["summary"]["conf"] == str(netconf)
    assert doc["summary"]["settings"]["namespaceIsolation"] is True

    # netattach's defaults (no --conf): no namespaceIsolation, so cross and eth are
    # fine; text output, one line per finding, a count on stderr
    done = validate("--cluster", "-n", ns, "--kubeconfig", str(kubeconfig))
    assert done.returncode == 1
    lines = [line for line in done.stdout.splitlines() if f" {ns}/" in line]
    assert not [line for line in lines if f"{ns}/cross:" in line or f"{ns}/eth:" in line]
    assert f"Pod {ns}/db: error: {NA}[0].ips: network {ns}/plain: the selection asks for " \
        "'ips'" in done.stdout
    assert (f"Pod {ns}/web-1: error: {NA}[0].name: NetworkAttachmentDefinition {ns}/gone not "
            "found: the ADD fails (also 2 other pods of the same controller and annotations: "
            "web-2, web-3)") in lines
    assert "pod(s) with a selection checked; judged with namespaceIsolation false, " \
        in done.stderr and done.stderr.endswith("(netattach defaults)\n")


def test_preflight_exit_0_paginated(admin_api, k8s_namespace, kubeconfig):
    """A namespace whose pods all carry over: exit 0; pages of 2 objects (the API
    server's continue tokens) reach every pod."""
    make_nad(admin_api, k8s_namespace, "capable", WITH_IPS)
    for i in range(5):
        make_raw_pod(admin_api, k8s_namespace, f"p{i}", {NETWORKS: json.dumps(
            [{"name": "capable", "ips": [f"10.2.0.{i + 1}/24"]}])})
    make_raw_pod(admin_api, k8s_namespace, "bare", {})
    done = validate("--cluster", "-n", k8s_namespace, "--kubeconfig", str(kubeconfig),
                    "--chunk-size", "2", "-o", "json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert mine(doc, k8s_namespace) == set()
    assert doc["summary"]["pods"] == 5 and doc["summary"]["errors"] == 0


def test_preflight_exit_2_when_the_cluster_cannot_be_read(cluster, k8s_namespace, tmp_path):
    nobody = cl.plugin_kubeconfig(cluster, namespace=k8s_namespace, sa="nobody",
                                  path=tmp_path / "nobody.kubeconfig")
    done = validate("--cluster", "--kubeconfig", str(nobody))
    assert (done.returncode, done.stdout) == (2, "")
    assert "list NetworkAttachmentDefinitions in all namespaces: HTTP 403" in done.stderr
    # the operator's own credentials: no advice to bind the plugin's ClusterRole
    assert "rbac.yaml" not in done.stderr and "bind the ClusterRole" not in done.stderr
    assert done.stderr.endswith(
        "netattach validate: the kubeconfig's user needs `list` on pods in all namespaces "
        "and on network-attachment-definitions.k8s.cni.cncf.io in all namespaces\n")
    done = validate("--cluster", "--kubeconfig", str(tmp_path / "missing"))
    assert done.returncode == 2
    assert done.stderr.startswith(f"netattach validate: cannot load kubeconfig {tmp_path}/missing")
    done = validate("--cluster", "--conf", str(tmp_path / "nope.yaml"))
    assert (done.returncode, done.stderr) == (
        2, f"netattach validate: --conf {tmp_path}/nope.yaml: No such file or directory\n")


# ---------------------------------------------------------------- kubectl netattach

def test_kubectl_plugin(admin_api, migrating, kubeconfig, tmp_path):
    """The real kubectl finds `kubectl-netattach` (a symlink to the artifact) on PATH and
    runs it with the arguments after `netattach` and its environment ($KUBECONFIG)."""
    ns = migrating
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "kubectl-netattach").symlink_to(netattach_command())
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "KUBECONFIG": str(kubeconfig)}
    kubectl = [str(cl.kubectl()), "netattach"]
    done = validate("plugin", "list", command=[str(cl.kubectl())], env=env)
    assert f"{bin_dir}/kubectl-netattach" in done.stdout, done.stderr

    done = validate("validate", "--cluster", "-n", ns, "-o", "json", command=kubectl, env=env)
    assert done.returncode == 1, done.stderr
    assert (("Pod", "db", f"{NA}[0].ips", "error") in mine(json.loads(done.stdout), ns))

    make_pod(admin_api, ns, "web", {NETWORK_STATUS_ANNOTATION: encode_status(ENTRIES)})
    done = validate("status", "web", "-n", ns, command=kubectl, env=env)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines()[1].split()[:2] == ["cluster-net", "eth0"]

    # kubectl hands the plugin no flag of its own, and refuses them before its name:
    # --kubeconfig and -n go after the subcommand (or $KUBECONFIG), as docs/tools.md says
    done = validate("status", "web", "-n", ns, "--kubeconfig", str(kubeconfig), "-o", "json",
                    command=kubectl, env={"PATH": env["PATH"]})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["networks"] == ENTRIES
    done = validate("--kubeconfig", str(kubeconfig), "netattach", "status", "web",
                    command=[str(cl.kubectl())], env=env)
    assert done.returncode != 0
    assert "flags cannot be placed before plugin name: --kubeconfig" in done.stderr

    done = validate("install", command=kubectl, env=env)
    assert done.returncode == 2
    assert "invalid choice: 'install' (choose from 'validate', 'status')" in done.stderr
