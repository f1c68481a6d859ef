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
    assert done.stderr.endswith(f"netattach status: the kubeconfig's user needs `get` on pods in "
                                f"namespace {k8s_namespace}\n")

    done = status("web", "--kubeconfig", str(tmp_path / "missing"))
    assert done.returncode == 1
    assert done.stderr.startswith(f"netattach status: cannot load kubeconfig {tmp_path}/missing")
