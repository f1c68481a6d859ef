"""Scenario 1 of the main job, shared by the e2e tests, `make demo` and `make bench`.

Cluster default network: a bridge conf on disk (CNI 0.3.1), `clusterNetwork` is its path.
NAD `net-a` in the pod's namespace: conflist (1.0.0) macvlan on a host master + host-local, then tuning (mtu).
NAD `net-b` in namespace `other`: a bridge + host-local conf (0.3.1) without `name` (spec §3.4.2 injection).
Pod annotated `net-a,other/net-b@data0` -> eth0, net1, data0.

Subnets come from 198.18.0.0/15 (RFC 2544, benchmarking): never the host's own networks.
The plugin is invoked exactly as a runtime does: `<binDir>/netattach` (a symlink to
`netattach_command()`: the built artifact under `make test`), CNI env + stdin.
"""
from __future__ import annotations

import ipaddress
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .netns import HostEnv, links, netns_path

DEBIAN_CNI_DIR = "/usr/lib/cni"
NETWORKS = "k8s.v1.cni.cncf.io/networks"
STATUS = "k8s.v1.cni.cncf.io/network-status"
DEFAULT_NETWORK = "v1.multus-cni.io/default-network"
HOTPLUG_OPT_OUT = "netattach.io/hotplug"
OTHER_NS = "other"
SUBNETS = {"default": "198.18.1.0/24", "net-a": "198.18.2.0/24", "net-b": "198.18.3.0/24"}
NET_A_MTU = 1420


def venv_command() -> str:
    """The `netattach` console script of the running interpreter's environment (`make venv`).

    Raises RuntimeError when it is not installed there nor on PATH.
    """
    path = Path(sys.executable).parent / "netattach"
    if not path.exists():
        found = shutil.which("netattach")
        if not found:
            raise RuntimeError("netattach is not installed: run `make venv`")
        path = Path(found)
    return str(path)


def netattach_command() -> str:
    """The `netattach` executable the tests, `make demo` and `make bench` exec, as an
    absolute path: $NETATTACH_EXE when set (the built artifact, dist/netattach/netattach
    from `make build`; `make test` sets it), else `venv_command()`.

    Raises RuntimeError when NETATTACH_EXE names no executable file, or when it is
    unset and the console script is not installed.
    """
    exe = os.environ.get("NETATTACH_EXE")
    if not exe:
        return venv_command()
    path = Path(exe).absolute()
    if not path.is_file() or not os.access(path, os.X_OK):
        raise RuntimeError(f"NETATTACH_EXE={exe}: no executable file there; "
                           "run `make build` (it builds dist/netattach/netattach)")
    return str(path)


def cni_plugin_dirs() -> list[str]:
    """CNI_PATH for children: Debian's plugins (CNI <= 1.0.0)."""
    return [DEBIAN_CNI_DIR]


@dataclass
class Scenario:
    env: HostEnv
    namespace: str
    pod_name: str
    pod_uid: str
    container_id: str
    netns: str
    bin_dir: Path
    netconf: dict[str, Any]
    bridges: dict[str, str]
    master: str
    extra_args: list[tuple[str, str]] = field(default_factory=list)
    daemon: Any = None
    """Thick mode: the running testbed.daemon.NodeDaemon; the runtime execs the shim."""

    @property
    def plugin(self) -> str:
        """The CNI plugin the runtime execs: `netattach` (thin), `netattach-shim` (thick)."""
        return "netattach-shim" if self.daemon is not None else "netattach"

    def thick(self, daemon: Any) -> Scenario:
        """This scenario in thick mode: the conf names the shim and the daemon's socket
        dir, as `netattach install --mode thick` writes it."""
        return replace(self, daemon=daemon, netconf={
            **self.netconf, "type": "netattach-shim", "daemonSocketDir": str(daemon.socket_dir)})

    @property
    def netns_path(self) -> str:
        return netns_path(self.netns)

    def cni_env(self, command: str, ifname: str = "eth0") -> dict[str, str]:
        """The environment a runtime sets for one CNI call on this pod's sandbox."""
        args = [("IgnoreUnknown", "1"), ("K8S_POD_NAMESPACE", self.namespace),
                ("K8S_POD_NAME", self.pod_name), ("K8S_POD_INFRA_CONTAINER_ID", self.container_id),
                ("K8S_POD_UID", self.pod_uid)] + self.extra_args
        return {
            "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
            "CNI_COMMAND": command,
            "CNI_CONTAINERID": self.container_id,
            "CNI_NETNS": self.netns_path,
            "CNI_IFNAME": ifname,
            "CNI_PATH": ":".join([str(self.bin_dir)] + cni_plugin_dirs()),
            "CNI_ARGS": ";".join(f"{k}={v}" for k, v in args),
        }

    def run(self, command: str, netconf: dict | None = None,
            env_overrides: dict[str, str] | None = None, timeout: float = 120) -> PluginRun:
        """Exec `<binDir>/<plugin>` with CNI env + stdin, as a runtime does."""
        env = {**self.cni_env(command), **(env_overrides or {})}
        p = subprocess.run([str(self.bin_dir / self.plugin)], input=json.dumps(netconf or self.netconf),
                           capture_output=True, text=True, env=env, timeout=timeout)
        return PluginRun(p.returncode, p.stdout, p.stderr)

    def settle(self, timeout: float = 60.0) -> None:
        """Thick mode: until the daemon sent what the ADD queued (network-status, events)
        and recorded the status sent in the state file, which it rewrites then
        (daemon/podapi.py); thin mode sends before answering. For a test that changes the
        state file by hand after an ADD. `timeout` is a hang guard."""
        if self.daemon is None:
            return
        path = self.env.state_dir / f"{self.container_id}.json"
        deadline = time.monotonic() + timeout
        while self.daemon.metric("netattach_publish_pending") != 0 or (
                path.exists() and "statusPending" in json.loads(path.read_text())):
            if time.monotonic() > deadline:
                raise AssertionError(f"the daemon's writes not sent after {timeout:.0f} s")
            time.sleep(0.05)

    def log_text(self) -> str:
        path = Path(self.netconf["logFile"])
        return path.read_text() if path.exists() else ""


def in_subnet(cidr: str, subnet: str) -> bool:
    """True when the address of `cidr` ("198.18.2.5/24") lies in `subnet`."""
    return ipaddress.ip_interface(cidr).ip in ipaddress.ip_network(subnet)


def pod_links(s: Scenario) -> list[str]:
    """The names of the links in the pod's netns, sorted."""
    return sorted(link["ifname"] for link in links(s.netns))


def assert_clean(s: Scenario) -> None:
    """Nothing of the pod is left: only lo in the netns, no IP allocated, no state, lock
    or temp file (a tombstone, which holds nothing, may be: statefiles)."""
    assert pod_links(s) == ["lo"]
    assert s.env.ipam_allocations() == []
    assert s.env.state_files() == []


@dataclass
class PluginRun:
    code: int
    stdout: str
    stderr: str

    @property
    def doc(self) -> dict:
        """stdout as the one JSON document it must be (asserts exactly one)."""
        return json.loads(self.stdout)


def bridge_conf(bridge: str, subnet: str, ipam_dir: Path, *, name: str | None, version: str,
                gateway: bool) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "cniVersion": version, "type": "bridge", "bridge": bridge, "isGateway": gateway,
        "ipMasq": False,
        "ipam": {"type": "host-local", "subnet": subnet, "dataDir": str(ipam_dir),
                 **({"routes": [{"dst": "0.0.0.0/0"}]} if gateway else {})},
    }
    if name:
        conf["name"] = name
    return conf


def net_a_conflist(master: str, ipam_dir: Path) -> dict[str, Any]:
    return {"cniVersion": "1.0.0", "name": "net-a", "plugins": [
        {"type": "macvlan", "master": master, "mode": "bridge",
         "ipam": {"type": "host-local", "subnet": SUBNETS["net-a"], "dataDir": str(ipam_dir)}},
        {"type": "tuning", "mtu": NET_A_MTU},
    ]}


def nad(namespace: str, name: str, config: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"config": json.dumps(config)}}


def pod(namespace: str, name: str, networks: str | None,
        resource_claims: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A pod on "test-node"; `resource_claims`: its spec.resourceClaims (DRA)."""
    spec: dict[str, Any] = {"nodeName": "test-node", "automountServiceAccountToken": False,
                            "containers": [{"name": "c", "image": "registry.invalid/pause:1"}]}
    if resource_claims:
        spec["resourceClaims"] = resource_claims
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace,
                         "annotations": {NETWORKS: networks} if networks is not None else {}},
            "spec": spec}


def install_bin_dir(env: HostEnv) -> Path:
    """A CNI bin dir holding `netattach`, a symlink to `netattach_command()`, and
    `netattach-shim`, the shim of that artifact (testbed.daemon.install_shim)."""
    from .daemon import install_shim
    bin_dir = env.root / "bin"
    bin_dir.mkdir(exist_ok=True)
    link = bin_dir / "netattach"
    if not link.exists():
        link.symlink_to(netattach_command())
    if not (bin_dir / "netattach-shim").exists():
        install_shim(bin_dir, netattach_command())
    return bin_dir


def netattach_conf(env: HostEnv, kubeconfig: Path, cluster_network: str, bin_dir: Path,
                   version: str = "1.0.0", **extra: Any) -> dict[str, Any]:
    return {"cniVersion": version, "name": "netattach-test", "type": "netattach",
            "kubeconfig": str(kubeconfig), "clusterNetwork": cluster_network,
            "confDir": str(env.conf_dir), "cniDir": str(env.state_dir), "binDir": str(bin_dir),
            "logFile": str(env.log_dir / "netattach.log"), "logLevel": "debug",
            "logToStderr": False, **extra}


def ensure_namespace(api, name: str) -> None:
    from kubernetes.client import CoreV1Api
    from kubernetes.client.exceptions import ApiException
    try:
        CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    except ApiException as e:
        if e.status != 409:
            raise


def apply_nad(api, obj: dict[str, Any]) -> None:
    """Create or replace a NetworkAttachmentDefinition (admin client)."""
    from kubernetes.client import CustomObjectsApi
    ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    delete_nad(api, ns, name)
    CustomObjectsApi(api).create_namespaced_custom_object(
        "k8s.cni.cncf.io", "v1", ns, "network-attachment-definitions", obj)


def create_pod(api, obj: dict[str, Any]) -> str:
    """Create the pod; returns its UID."""
    from kubernetes.client import CoreV1Api
    created = CoreV1Api(api).create_namespaced_pod(obj["metadata"]["namespace"], obj)
    return created.metadata.uid


def read_pod_annotations(api, namespace: str, name: str) -> dict[str, str]:
    from kubernetes.client import CoreV1Api
    return CoreV1Api(api).read_namespaced_pod(name, namespace).metadata.annotations or {}


def patch_pod_annotations(api, namespace: str, name: str,
                          annotations: dict[str, str | None]) -> str:
    """Merge `annotations` into the running pod's (a None value removes that key), as
    `kubectl annotate --overwrite` does (admin client); returns the pod's new
    resourceVersion, which the node daemon's cache logs when its watch delivers it."""
    from kubernetes.client import CoreV1Api
    patched = CoreV1Api(api).patch_namespaced_pod(
        name, namespace, {"metadata": {"annotations": annotations}})
    return patched.metadata.resource_version


def pod_events(api, namespace: str, name: str) -> list[tuple[str, str, str]]:
    """(type, reason, message) of every Event recorded on the pod, as `kubectl describe
    pod` lists them."""
    from kubernetes.client import CoreV1Api
    return [(e.type, e.reason, e.message) for e in CoreV1Api(api).list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name}").items]


def network_status(api, namespace: str, name: str, timeout: float = 60.0) -> list[dict]:
    """The pod's network-status, once there: thin mode writes it before the ADD answers,
    the thick daemon right after (daemon/podapi.py). `timeout` is a hang guard."""
    deadline = time.monotonic() + timeout
    while True:
        value = read_pod_annotations(api, namespace, name).get(STATUS)
        if value is not None:
            return json.loads(value)
        if time.monotonic() > deadline:
            raise AssertionError(f"pod {namespace}/{name}: no {STATUS} after {timeout:.0f} s")
        time.sleep(0.05)


def assert_bare_ips(status: list[dict]) -> None:
    """Every `ips` entry of the network-status entries `status` is a bare IPv4 or IPv6
    address, as the annotation's readers parse it (Go's net.ParseIP in
    multi-networkpolicy-iptables, whereabouts, KubeVirt; Python's ip_address refuses a
    prefix length as ParseIP does), in canonical form (docs/behaviour.md, "The addresses
    in network-status"). Raises AssertionError naming the entry."""
    for entry in status:
        for ip in entry.get("ips", []):
            try:
                parsed = ipaddress.ip_address(ip)
            except ValueError:
                raise AssertionError(f"{entry.get('name')}: {ip!r} is not a bare address") \
                    from None
            assert str(parsed) == ip, f"{entry.get('name')}: {ip!r} is not canonical"


def writes_sent(s: Scenario) -> None:
    """Thick mode: until the daemon sent every queued network-status PATCH and Event
    (they go after the runtime's answer); thin mode sent them before it: nothing to wait."""
    if s.daemon is not None:
        s.daemon.wait_writes_sent()


def apply_nads(api, env: HostEnv, namespace: str) -> tuple[str, str]:
    """Scenario 1's NetworkAttachmentDefinitions: `net-a` in `namespace` (macvlan on a
    new master link), `net-b` in `other` (a new bridge), replaced if there. Returns
    (net-b's bridge name, net-a's master link name); `env` owns both."""
    net_b_bridge, master = env.bridge_name(), env.master_link()
    ensure_namespace(api, OTHER_NS)
    apply_nad(api, nad(namespace, "net-a", net_a_conflist(master, env.ipam_dir)))
    apply_nad(api, nad(OTHER_NS, "net-b", bridge_conf(
        net_b_bridge, SUBNETS["net-b"], env.ipam_dir, name=None, version="0.3.1",
        gateway=False)))
    return net_b_bridge, master


def setup(api, kubeconfig: Path, env: HostEnv, namespace: str,
          networks: str = "net-a,other/net-b@data0", pod_name: str | None = None,
          resource_claims: list[dict[str, Any]] | None = None) -> Scenario:
    """Build scenario 1 on the host and in the API server; returns the Scenario.

    The caller owns `env` (its cleanup removes netns, bridges and dirs) and the
    namespace. NADs: `net-a` in `namespace`, `net-b` in `other` (replaced each time).
    `resource_claims`: the pod's spec.resourceClaims (DRA, tests/e2e/test_dra_claims.py).
    """
    bridges = {"default": env.bridge_name()}
    cluster_conf = env.conf_dir / "10-cluster.conf"
    cluster_conf.write_text(json.dumps(bridge_conf(
        bridges["default"], SUBNETS["default"], env.ipam_dir, name="cluster-net",
        version="0.3.1", gateway=True)))
    net_b_bridge, master = apply_nads(api, env, namespace)
    bridges["net-b"] = net_b_bridge
    pod_name = pod_name or f"pod-{uuid.uuid4().hex[:8]}"
    uid = create_pod(api, pod(namespace, pod_name, networks, resource_claims))
    bin_dir = install_bin_dir(env)
    return Scenario(env=env, namespace=namespace, pod_name=pod_name, pod_uid=uid,
                    container_id=uuid.uuid4().hex + uuid.uuid4().hex, netns=env.new_netns(),
                    bin_dir=bin_dir,
                    netconf=netattach_conf(env, kubeconfig, str(cluster_conf), bin_dir),
                    bridges=bridges, master=master)


def delete_nad(api, namespace: str, name: str) -> None:
    """Delete a NetworkAttachmentDefinition if it exists (admin client)."""
    from kubernetes.client import CustomObjectsApi
    from kubernetes.client.exceptions import ApiException
    try:
        CustomObjectsApi(api).delete_namespaced_custom_object(
            "k8s.cni.cncf.io", "v1", namespace, "network-attachment-definitions", name)
    except ApiException as e:
        if e.status != 404:
            raise
