"""A real single-node Kubernetes cluster on this machine (issue 20): the test bed's etcd
and kube-apiserver (Node and RBAC authorization, NodeRestriction), kube-controller-manager,
kube-scheduler, containerd and a kubelet, all built from the pinned tools modules
(`make testbin`), with the admin's real kubectl. The Kubernetes components and kubectl
are the main tools module's (hack/testbin/k8s) or, with `k8s_bin=cl.k8s_oldest_bin_dir()`,
those of the oldest minor still supported upstream (hack/testbin/k8s-oldest, `make
testbin-k8s-oldest`; etcd stays the main one, containerd and the CNI plugins too).

netattach is installed on it as admins install it: the image built by `make image`
imported into the node's containerd, deploy/ applied with `kubectl apply -k`. Nothing
here stands in for a Kubernetes component.

The node's own view of the machine. containerd, the kubelet and everything they start
(runc, the CNI plugins, the DaemonSet's containers) run in a mount namespace of the
node's own, where the paths a node owns are bind mounts of dirs under the node's
workdir (`fs/<path>`): /etc/cni, /opt/cni, /var/lib/cni, /var/lib/kubelet, /var/log,
/run/netns, /run/containerd, /run/netattach, /run/k8s.cni.cncf.io, /run/flannel, /run/cdi.
So deploy/ runs unchanged (its hostPaths are the standard ones) and nothing of the
machine's own dirs is read or written; a test reads the node's files through
`host_path()`. The namespace starts private (unshare's default), so no mount made or
undone in it reaches the machine: `ip netns` mounts of other tests' are never touched.
Then its root is made shared inside it, so volumes the kubelet mounts reach runc and
`mountPropagation: HostToContainer` passes containerd's check. Three global sysctls the
kubelet writes at start (vm.overcommit_memory, kernel.panic, kernel.panic_on_oops) are
files bind-mounted over /proc/sys in it: the machine keeps its values.

No traffic leaves the machine. The node's IP (NODE_IP) is a /32 on an empty bridge the
node owns (the kernel has no dummy links, and the kubelet refuses a loopback IP); the
Service range and the pod subnets are inside NODE_NET, which is blackholed, so without
kube-proxy nothing aimed at a Service IP follows the default route. The `kubernetes`
Service's IP (what pods get as KUBERNETES_SERVICE_HOST) is a second /32 on that bridge
where a forwarder (socat) passes port 443 to the loopback API server: in-cluster
clients, the installer's kubeconfig among them, reach it as on a real cluster.

cgroups: the kubelet's cgroupRoot is CGROUP_ROOT, made in every hierarchy, removed at
stop. Only one real node runs on a machine at a time (an flock on NODE_LOCK): its
addresses and routes are fixed.

    with RealNode.start(workdir) as node:
        node.import_image(tar)
        node.kubectl("apply", "-k", "deploy/")
"""
from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from . import cluster as cl
from . import runtime as rt
from .cluster import ClusterError, _Process, log_tail, started
from .netns import run, unique

NODE_NAME = "netattach-node"
# Everything the node addresses: blackholed as a whole, the bridges' own subnets and
# addresses inside it are more specific (or local) and win.
NODE_NET = "198.19.192.0/18"
SERVICE_CIDR = "198.19.240.0/24"
KUBERNETES_SERVICE_IP = str(next(ipaddress.ip_network(SERVICE_CIDR).hosts()))
CLUSTER_DNS_IP = "198.19.240.10"
NODE_IP = "198.19.255.1"
# The cluster default network of the node (its bridge plugin's subnet).
POD_SUBNET = "198.19.193.0/24"
NODE_LOCK = Path("/run/lock/netattach-real-node.lock")
CGROUP_ROOT = f"/netattach-node-{os.getpid()}"
CGROUP_FS = Path("/sys/fs/cgroup")
# What the node owns of the machine's paths: bind mounts of <workdir>/fs/<path>.
NODE_PATHS = ("/etc/cni", "/opt/cni", "/var/lib/cni", "/var/lib/kubelet", "/var/log",
              "/run/netns", "/run/containerd", "/run/netattach", "/run/k8s.cni.cncf.io",
              "/run/flannel", "/run/cdi")
# The global sysctls the kubelet sets at start (pkg/kubelet/cm: setupKernelTunables).
KUBELET_SYSCTLS = ("vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops")
CONTAINERD_SOCKET = "/run/containerd/containerd.sock"   # the node's view
CNI_PLUGINS = ("bridge", "host-local", "loopback", "macvlan", "ipvlan", "tuning", "portmap",
               "bandwidth", "ptp", "static", "vlan")
PAUSE_IMAGE = rt.SANDBOX_IMAGE
READY_TIMEOUT = 120.0   # hang guards, seconds
STOP_TIMEOUT = 120.0   # hang guard of the drain at stop

DEFAULT_MAX_PODS = 110  # the kubelet's own default


def kubelet_config(node: RealNode) -> dict[str, Any]:
    """The node's KubeletConfiguration (kubelet.config.k8s.io/v1beta1)."""
    pki = node.cluster.workdir / "pki"
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "address": NODE_IP, "port": node.kubelet_port, "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1", "healthzPort": node.kubelet_healthz_port,
        "tlsCertFile": str(pki / "kubelet.crt"), "tlsPrivateKeyFile": str(pki / "kubelet.key"),
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(pki / "ca.crt")}},
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{CONTAINERD_SOCKET}",
        "cgroupDriver": "cgroupfs", "cgroupRoot": CGROUP_ROOT, "cgroupsPerQOS": True,
        # this machine: cgroup v1, swap may be on
        "failCgroupV1": False, "failSwapOn": False,
        "makeIPTablesUtilChains": False,
        "protectKernelDefaults": False,
        "resolvConf": "",
        "serializeImagePulls": False,
        # the machine's disk and memory are shared: evict nothing for them, collect no
        # image (the images are imported, never pulled)
        "evictionHard": {"memory.available": "1Mi", "nodefs.available": "1%",
                         "nodefs.inodesFree": "1%", "imagefs.available": "1%"},
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "maxPods": node.max_pods,
        # a DNS Service IP (in the blackholed range: nothing answers, nothing leaves), so
        # pods get a cluster resolv.conf as on any cluster
        "clusterDNS": [CLUSTER_DNS_IP], "clusterDomain": "cluster.local",
        "shutdownGracePeriod": "0s",
        "registerNode": True,
        "rotateCertificates": False, "serverTLSBootstrap": False,
    }


class MountNamespace:
    """A mount namespace held open by a sleeping process (private, as `unshare --mount`
    makes it); `argv()` prefixes a command so that it runs inside."""

    def __init__(self, log: Path):
        self._proc = _Process("mount-namespace", ["unshare", "--mount", "--propagation",
                                                  "private", "--", "sleep", "infinity"], log)

    def start(self, timeout: float = 10.0) -> None:
        self._proc.start()
        deadline = time.monotonic() + timeout
        assert self._proc.popen is not None
        # setpriv execs unshare, which execs sleep: the same pid throughout
        pid = self._proc.popen.pid
        while os.readlink(f"/proc/{pid}/ns/mnt") == os.readlink("/proc/self/ns/mnt"):
            if not self._proc.running or time.monotonic() > deadline:
                raise ClusterError(f"no mount namespace: {log_tail(self._proc.log)}")
            time.sleep(0.02)
        self.pid = pid

    def argv(self, *argv: str) -> list[str]:
        return ["nsenter", "-t", str(self.pid), "-m", "--", *argv]

    def run(self, *argv: str) -> subprocess.CompletedProcess:
        return run(*self.argv(*argv))

    def stop(self) -> None:
        self._proc.stop()


class RealNode:
    """The cluster and its one node (a context manager); see the module doc.

    Attributes: workdir, cluster (the testbed Cluster: admin_api(), admin_kubeconfig),
    bridge (the node's bridge), logs under workdir/logs/.
    """

    def __init__(self, workdir: Path, max_pods: int = DEFAULT_MAX_PODS,
                 k8s_bin: Path | None = None):
        self.workdir = Path(workdir).resolve()
        self.max_pods = max_pods
        self.fs = self.workdir / "fs"
        self.logs = self.workdir / "logs"
        self.k8s_bin = k8s_bin or cl.k8s_bin_dir()
        for name in ("kube-apiserver", "kubelet", "kube-scheduler", "kube-controller-manager",
                     "kubectl"):
            if not os.access(self.k8s_bin / name, os.X_OK):
                raise cl.TestbinMissing(
                    f"{name} not found in {self.k8s_bin} (NETATTACH_K8S_BIN, "
                    "NETATTACH_K8S_BIN_OLDEST): run `make testbin` (`make testbin-k8s-oldest` "
                    "for the oldest Kubernetes; or the tests through `make test`)")
        self.etcd = cl.k8s_bin_dir() / "etcd"
        self.containerd_bin = rt.require_binaries()
        cni_bin = os.environ.get("NETATTACH_CNI_BIN")
        self.cni_bin = Path(cni_bin) if cni_bin else None
        self.cluster: cl.Cluster | None = None
        self.ns = MountNamespace(self.logs / "mount-namespace.log")
        self.bridge = unique("n")
        self.pod_bridge = unique("c")
        self.kubelet_port = cl.free_port()
        self.kubelet_healthz_port = cl.free_port()
        self.containerd_metrics_port = cl.free_port()
        self._lock_fd: int | None = None
        self._procs: dict[str, _Process] = {}
        self._made_mountpoints: list[Path] = []
        self._routes: list[list[str]] = []
        self._bridge_made = False

    # ------------------------------------------------------------ lifecycle

    @classmethod
    def start(cls, workdir: Path, timeout: float = READY_TIMEOUT,
              max_pods: int = DEFAULT_MAX_PODS, k8s_bin: Path | None = None) -> RealNode:
        """Start everything and wait until the node is Ready (hang guard `timeout` s);
        the kubelet admits `max_pods` pods (its maxPods). `k8s_bin`: the dir of the
        Kubernetes components and kubectl (default cl.k8s_bin_dir(); etcd is always
        that one's). ClusterError (with the log tails) on failure, after stopping what
        started."""
        return started(cls(workdir, max_pods, k8s_bin), timeout)

    def __enter__(self) -> RealNode:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _start(self, timeout: float) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._take_lock(timeout)
        self._network()
        self.cluster = cl.Cluster.start(self.workdir / "cluster", self.k8s_bin,
                                        service_cidr=SERVICE_CIDR, nodes=True, etcd=self.etcd)
        self._node_certs()
        self._forwarder()
        self._mount_namespace()
        self._cgroups()
        self._cni_bin_dir()
        self._primary_network()
        self._control_plane()
        self._containerd(timeout)
        self._kubelet()
        self.wait_node_ready(timeout)

    def stop(self) -> None:
        """Delete every pod the node runs (their CNI DELs run), stop the kubelet, the
        runtime (sandboxes left are stopped and removed), the control plane, and undo
        the cgroups, mounts, routes, addresses and the bridge. Idempotent; ClusterError
        naming what failed."""
        errors: list[str] = []
        kubelet = self._procs.get("kubelet")
        if kubelet is not None and kubelet.running and self.cluster is not None:
            try:
                self._drain(STOP_TIMEOUT)
            except Exception as e:  # noqa: BLE001  (teardown: go on, report)
                errors.append(f"deleting the node's pods: {e}")
        for name in ("kubelet", "kube-scheduler", "kube-controller-manager"):
            self._stop_proc(name, errors)
        self._stop_containerd(errors)
        self._stop_proc("forwarder", errors)
        self.ns.stop()
        if self.cluster is not None:
            try:
                self.cluster.stop()
            except ClusterError as e:
                errors.append(str(e))
        self._kill_leftovers(errors)
        self._remove_cgroups(errors)
        for d in reversed(self._made_mountpoints):
            with contextlib.suppress(OSError):
                d.rmdir()
        self._made_mountpoints = []
        for route in self._routes:
            run("ip", "route", "del", *route, check=False)
        self._routes = []
        if self._bridge_made:
            run("ip", "link", "del", self.bridge, check=False)
            self._bridge_made = False
        if Path(f"/sys/class/net/{self.pod_bridge}").exists():
            run("ip", "link", "del", self.pod_bridge, check=False)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        if errors:
            raise ClusterError("; ".join(errors))

    def _stop_proc(self, name: str, errors: list[str]) -> None:
        proc = self._procs.pop(name, None)
        if proc is not None:
            try:
                proc.stop()
            except ClusterError as e:
                errors.append(str(e))

    # ------------------------------------------------------------ pieces

    def _take_lock(self, timeout: float) -> None:
        NODE_LOCK.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(NODE_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    os.close(fd)
                    raise ClusterError(
                        f"another real node runs on this machine ({NODE_LOCK})") from None
                time.sleep(0.5)
        self._lock_fd = fd

    def _network(self) -> None:
        run("ip", "link", "add", self.bridge, "type", "bridge")
        self._bridge_made = True
        run("ip", "link", "set", self.bridge, "up")
        for addr in (NODE_IP, KUBERNETES_SERVICE_IP):
            run("ip", "addr", "add", f"{addr}/32", "dev", self.bridge)
        route = ["blackhole", NODE_NET]
        run("ip", "route", "replace", *route)
        self._routes.append(route)

    def _node_certs(self) -> None:
        assert self.cluster is not None
        pki = self.cluster.workdir / "pki"
        crt, key = cl.issue_client_cert(pki, "kubelet-client", f"system:node:{NODE_NAME}",
                                        "system:nodes")
        cl.issue_serving_cert(pki, "kubelet", NODE_NAME, [NODE_IP], [NODE_NAME])
        cl.write_kubeconfig(self.workdir / "kubelet.kubeconfig", self.cluster.server,
                            ca_file=self.cluster.ca_file,
                            user={"client-certificate": str(crt), "client-key": str(key)},
                            name=NODE_NAME)

    def _forwarder(self) -> None:
        assert self.cluster is not None
        if shutil.which("socat") is None:
            raise ClusterError("socat not found: install the Debian package socat "
                               "(`make test` does)")
        # nodelay on both sides: socat relays each TLS record as it reads it, often in
        # two writes; with Nagle the second waited for the API server's delayed ACK,
        # adding 40-50 ms to one request in three or so (measured). kube-proxy's NAT,
        # which this stands in for, adds nothing.
        self._spawn("forwarder", [
            "socat", f"TCP-LISTEN:443,bind={KUBERNETES_SERVICE_IP},reuseaddr,fork,nodelay",
            f"TCP:127.0.0.1:{self.cluster.apiserver_port},nodelay"])

    def _mount_namespace(self) -> None:
        self.ns.start()
        for path in NODE_PATHS:
            src = self.host_path(path)
            src.mkdir(parents=True, exist_ok=True, mode=0o755)
            if not Path(path).exists():
                self._mkdirs(Path(path))
            self.ns.run("mount", "--bind", str(src), path)
        sysctls = self.workdir / "sysctl"
        sysctls.mkdir(exist_ok=True)
        for key in KUBELET_SYSCTLS:
            f = sysctls / key.replace("/", ".")
            f.write_text(Path("/proc/sys", key).read_text())
            self.ns.run("mount", "--bind", str(f), f"/proc/sys/{key}")
        self.ns.run("mount", "--make-rshared", "/")

    def _mkdirs(self, path: Path) -> None:
        """mkdir -p `path` on the machine (a mount point), remembering what it made."""
        missing = []
        p = path
        while not p.exists():
            missing.append(p)
            p = p.parent
        for d in reversed(missing):
            d.mkdir(mode=0o755)
            self._made_mountpoints.append(d)

    def host_path(self, node_path: str | Path) -> Path:
        """Where the machine sees `node_path` of the node (one of NODE_PATHS or below)."""
        p = str(node_path)
        if not any(p == n or p.startswith(n + "/") for n in NODE_PATHS):
            raise ValueError(f"{p} is not a path the node owns ({', '.join(NODE_PATHS)})")
        return self.fs / p.lstrip("/")

    def _cgroups(self) -> None:
        _remove_stale_cgroups()
        for hierarchy in _cgroup_hierarchies():
            d = hierarchy / CGROUP_ROOT.lstrip("/")
            d.mkdir(exist_ok=True)
            if hierarchy.name == "cpuset":
                for f in ("cpuset.cpus", "cpuset.mems"):
                    (d / f).write_text((hierarchy / f).read_text())

    def place_as_guaranteed_pod(self, name: str, cpu_millis: int, pids: list[int]) -> None:
        """Move the processes `pids` (and so the children they start later) into
        `<cgroupRoot>/kubepods/<name>` of the cpu controller, weighted as the kubelet
        weights a Guaranteed pod that requests `cpu_millis` CPU (cpu.shares = millis *
        1024 / 1000, at least 2: the kubelet's MilliCPUToShares; cpu.weight from those
        shares on cgroup v2, as runc converts them). No CPU quota. For a host process
        that stands in for a DaemonSet's pod (bench-node's Multus thick daemon), so that
        it competes for CPU with the node's system processes as that pod would, not as
        one of them. The kubelet leaves the cgroup alone (its name is no `pod<UID>`);
        stop() removes it with the node's. ClusterError when a pid cannot be moved."""
        shares = max(2, cpu_millis * 1024 // 1000)
        for hierarchy in _cgroup_hierarchies():
            controllers = hierarchy / "cgroup.controllers"
            v2 = controllers.exists()
            if (v2 and "cpu" not in controllers.read_text().split()) or \
                    (not v2 and not (hierarchy / "cpu.shares").exists()):
                continue  # the cpu controller is elsewhere (v1 beside v2, or cpuacct)
            d = hierarchy / CGROUP_ROOT.lstrip("/") / "kubepods" / name
            d.mkdir(exist_ok=True)
            if v2:
                (d / "cpu.weight").write_text(str(1 + ((shares - 2) * 9999) // 262142))
            else:
                (d / "cpu.shares").write_text(str(shares))
            for pid in pids:
                try:
                    (d / "cgroup.procs").write_text(str(pid))
                except OSError as e:
                    raise ClusterError(f"cannot move pid {pid} into {d}: {e}") from None

    def _kill_leftovers(self, errors: list[str]) -> None:
        """SIGKILL what still runs in the node's cgroups once the kubelet and containerd
        are gone (a container whose shim died), naming it among the errors: nothing of
        the node may outlive stop()."""
        left: set[int] = set()
        for cg in node_cgroups():
            try:
                left |= {int(p) for p in (cg / "cgroup.procs").read_text().split()}
            except OSError:
                continue
        for pid in sorted(left):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                os.kill(pid, 9)
            except (OSError, ProcessLookupError):
                continue
            errors.append(f"process {pid} ({cmd.strip()}) left in the node's cgroups")

    def _remove_cgroups(self, errors: list[str]) -> None:
        for cg in node_cgroups():
            for _ in range(50):
                try:
                    cg.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)
            else:
                errors.append(f"cgroup {cg} not removed")

    def _cni_bin_dir(self) -> None:
        """The node's /opt/cni/bin: the reference plugins (copies, as a node has them)."""
        src = self.cni_bin  # Path("") would be ".", a directory that exists
        if src is None:
            raise ClusterError("NETATTACH_CNI_BIN is not set: run the tests through `make test`")
        dest = self.host_path("/opt/cni/bin")
        dest.mkdir(parents=True, exist_ok=True)
        for name in CNI_PLUGINS:
            shutil.copy2(src / name, dest / name)

    @property
    def primary_conflist(self) -> Path:
        """The cluster default network's conflist on the node (machine path)."""
        return self.host_path("/etc/cni/net.d/10-cluster.conflist")

    def _primary_network(self) -> None:
        """The cluster default network, as a cluster's network add-on installs it: a
        bridge conflist in /etc/cni/net.d (bridge + host-local on POD_SUBNET, the
        pods' default route through it; portmap), CNI 1.0.0."""
        path = self.primary_conflist
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"cniVersion": "1.0.0", "name": "cluster-net", "plugins": [
            {"type": "bridge", "bridge": self.pod_bridge, "isGateway": True, "ipMasq": False,
             "ipam": {"type": "host-local", "subnet": POD_SUBNET,
                      "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ]}, indent=2))

    def _spawn(self, name: str, argv: list[str]) -> _Process:
        proc = _Process(name, argv, self.logs / f"{name}.log")
        proc.start()
        self._procs[name] = proc
        return proc

    def _control_plane(self) -> None:
        assert self.cluster is not None
        kc, pki = str(self.cluster.admin_kubeconfig), self.cluster.workdir / "pki"
        self._spawn("kube-controller-manager", [
            str(self.k8s_bin / "kube-controller-manager"), f"--kubeconfig={kc}",
            "--leader-elect=false", "--secure-port=0", "--use-service-account-credentials=false",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'ca.crt'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}", "--v=1"])
        self._spawn("kube-scheduler", [
            str(self.k8s_bin / "kube-scheduler"), f"--kubeconfig={kc}", "--leader-elect=false",
            "--secure-port=0", "--v=1"])

    def _containerd(self, timeout: float) -> None:
        d = self.workdir / "containerd"
        for sub in ("root", "tmp", "opt", "runc"):
            (d / sub).mkdir(parents=True, exist_ok=True, mode=0o700)
        config = d / "config.toml"
        config.write_text(rt.containerd_config(
            d, socket=CONTAINERD_SOCKET, state="/run/containerd/state",
            cni_bin_dirs=["/opt/cni/bin"], cni_conf_dir="/etc/cni/net.d",
            cdi_spec_dirs=["/run/cdi"],
            metrics_address=f"127.0.0.1:{self.containerd_metrics_port}"))
        env_path = f"{self.containerd_bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        proc = self._spawn("containerd", self.ns.argv(
            "env", f"PATH={env_path}", str(self.containerd_bin / "containerd"),
            "--config", str(config)))
        rt.wait_cri_ready(proc, self.host_path(CONTAINERD_SOCKET), self.cri, timeout)
        self.import_image(rt.sandbox_image(self.containerd_bin / "pause", d / "pause.tar"))

    def cni_operations(self) -> dict[str, tuple[int, float]]:
        """containerd's own count and total seconds of its CNI calls so far, from its
        metrics (`containerd_cri_network_plugin_operations_duration_seconds...`, the CRI
        plugin's timer around each call into go-cni): {"set_up_pod": (n, s),
        "tear_down_pod": (n, s), ...}, successful calls only; an operation not run yet is
        absent. ClusterError when the metrics cannot be read."""
        url = f"http://127.0.0.1:{self.containerd_metrics_port}/v1/metrics"
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                text = r.read().decode()
        except OSError as e:
            raise ClusterError(f"cannot read containerd's metrics at {url}: {e}") from None
        count: dict[str, int] = {}
        total: dict[str, float] = {}
        for fam in text_string_to_metric_families(text):
            # go-metrics appends the unit to the timer's name:
            # ..._duration_seconds_seconds_{count,sum}
            if not fam.name.startswith(_CNI_TIMER):
                continue
            for sample in fam.samples:
                op = sample.labels.get("operation_type", "")
                if sample.name.endswith("_count"):
                    count[op] = int(sample.value)
                elif sample.name.endswith("_sum"):
                    total[op] = sample.value
        return {op: (n, total.get(op, 0.0)) for op, n in count.items()}

    @property
    def cri(self) -> rt.Cri:
        """The kubelet's side of the node's CRI socket (for what a test inspects)."""
        return rt.Cri(self.containerd_bin / "criclient",
                      f"unix://{self.host_path(CONTAINERD_SOCKET)}", timeout=60)

    def ctr(self, *args: str, timeout: float = 300) -> str:
        """`ctr` against the node's containerd, in the kubelet's namespace; stdout."""
        p = subprocess.run([str(self.containerd_bin / "ctr"), "--address",
                            str(self.host_path(CONTAINERD_SOCKET)), "--namespace",
                            rt.K8S_NAMESPACE, *args], capture_output=True, text=True,
                           timeout=timeout)
        if p.returncode != 0:
            raise ClusterError(f"ctr {' '.join(args)} failed: {p.stderr.strip()}")
        return p.stdout

    def import_image(self, tar: Path) -> None:
        """Import an image archive (OCI layout or docker-archive) into the node's
        containerd, where `imagePullPolicy: IfNotPresent` finds it with no registry."""
        self.ctr("images", "import", "--all-platforms", str(tar))

    def _kubelet(self) -> None:
        d = self.workdir / "kubelet"
        d.mkdir(exist_ok=True, mode=0o700)
        config = d / "config.yaml"
        config.write_text(yaml.safe_dump(kubelet_config(self)))
        self._spawn("kubelet", self.ns.argv(
            str(self.k8s_bin / "kubelet"), f"--config={config}",
            f"--kubeconfig={self.workdir / 'kubelet.kubeconfig'}",
            "--root-dir=/var/lib/kubelet", f"--hostname-override={NODE_NAME}",
            f"--node-ip={NODE_IP}", f"--cert-dir={d / 'pki'}", "--v=2"))

    def restart(self, component: str, timeout: float = READY_TIMEOUT) -> None:
        """Stop `component` ("kubelet" or "containerd") and start it again, as a
        node's service manager restarts it (the daemon alone: containerd's shims, and so
        the pods, keep running), then wait until the node has taken it back (hang guard
        `timeout` s): the new kubelet has reported the node Ready since it started, and
        every pod on the node is Ready again; so one restart is over before a test does
        the next (an admin's restart of containerd while the kubelet starts up is
        another story)."""
        if component not in ("kubelet", "containerd"):
            raise ValueError(component)
        errors: list[str] = []
        self._stop_proc(component, errors)
        if errors:
            raise ClusterError("; ".join(errors))
        started_at = time.time()
        if component == "kubelet":
            self._kubelet()
        else:
            self._containerd(timeout)
        self.wait_settled(started_at, timeout)

    def wait_settled(self, since: float, timeout: float = READY_TIMEOUT) -> None:
        """Until the kubelet answers its /healthz, has renewed the node's Lease after
        `since` (epoch seconds; it renews every 10 s), the node is Ready and every pod on
        it is Ready (hang guard `timeout` s)."""
        import datetime as dt
        deadline = time.monotonic() + timeout
        while True:
            kubelet = self._procs.get("kubelet")
            if kubelet is None or not kubelet.running:
                raise ClusterError(f"the kubelet exited:\n{log_tail(self.logs / 'kubelet.log')}")
            healthz = cl._probe(f"http://127.0.0.1:{self.kubelet_healthz_port}/healthz")
            lease = self.get("lease", "-n", "kube-node-lease", NODE_NAME)["spec"]
            renewed = dt.datetime.fromisoformat(
                lease.get("renewTime", "1970-01-01T00:00:00Z").replace("Z", "+00:00"))
            pods = [p["metadata"]["name"] for p in self.get("pods", "--all-namespaces")["items"]
                    if not any(c["type"] == "Ready" and c["status"] == "True"
                               for c in p["status"].get("conditions", []))]
            if healthz[0] == 200 and renewed.timestamp() >= since and self.node_ready() \
                    and not pods:
                return
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"the node did not settle after {timeout:.0f}s: kubelet /healthz "
                    f"{healthz[0]}, lease renewed {lease.get('renewTime')}, pods not Ready: "
                    f"{pods}")
            time.sleep(0.5)

    def _stop_containerd(self, errors: list[str]) -> None:
        proc = self._procs.get("containerd")
        if proc is not None and proc.running:
            try:
                self.cri.remove_all()
            except (rt.CriError, ClusterError, subprocess.TimeoutExpired) as e:
                errors.append(f"removing sandboxes: {e}")
        self._stop_proc("containerd", errors)
        rt.kill_shims(Path(CONTAINERD_SOCKET))

    # ------------------------------------------------------------ the API

    def admin_api(self):
        assert self.cluster is not None
        return self.cluster.admin_api()

    def kubectl(self, *args: str, check: bool = True, timeout: float = 300,
                stdin: str | None = None) -> subprocess.CompletedProcess:
        """The real kubectl as the cluster's admin; the finished process (ClusterError
        naming the command and its stderr when `check` and it failed)."""
        assert self.cluster is not None
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        env["KUBECONFIG"] = str(self.cluster.admin_kubeconfig)
        p = subprocess.run([str(self.k8s_bin / "kubectl"), *args], capture_output=True,
                           text=True, timeout=timeout, env=env, input=stdin,
                           cwd=cl.REPO_ROOT)
        if check and p.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)} failed ({p.returncode}): "
                               f"{p.stderr.strip()}")
        return p

    def get(self, *args: str) -> dict[str, Any]:
        """`kubectl get ... -o json`, parsed."""
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def versions(self) -> dict[str, str]:
        """What the node runs, as its components report it: {"kube-apiserver": the API
        server's /version gitVersion, "kubelet": the Node's nodeInfo.kubeletVersion,
        "kubectl": the client's gitVersion, "containerd": nodeInfo.containerRuntimeVersion}
        ("v1.35.4", "containerd://v2.2.9")."""
        both = json.loads(self.kubectl("version", "-o", "json").stdout)
        info = self.get("node", NODE_NAME)["status"]["nodeInfo"]
        return {"kube-apiserver": both["serverVersion"]["gitVersion"],
                "kubelet": info["kubeletVersion"],
                "kubectl": both["clientVersion"]["gitVersion"],
                "containerd": info["containerRuntimeVersion"]}

    def node_ready(self) -> bool:
        """The node's Ready condition is True now."""
        conds = self.get("node", NODE_NAME)["status"].get("conditions", [])
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)

    def wait_node_ready(self, timeout: float = READY_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        last = "not registered"
        while True:
            kubelet = self._procs.get("kubelet")
            if kubelet is None or not kubelet.running:
                raise ClusterError(f"the kubelet exited:\n{log_tail(self.logs / 'kubelet.log')}")
            p = self.kubectl("get", "node", NODE_NAME, "-o", "json", check=False)
            if p.returncode == 0:
                conds = {c["type"]: c for c in json.loads(p.stdout)["status"].get("conditions", [])}
                ready = conds.get("Ready", {})
                if ready.get("status") == "True":
                    return
                last = f"Ready={ready.get('status')} ({ready.get('reason')}: {ready.get('message')})"
            if time.monotonic() > deadline:
                raise ClusterError(f"node {NODE_NAME} not Ready after {timeout:.0f}s: {last}; "
                                   f"kubelet log:\n{log_tail(self.logs / 'kubelet.log')}")
            time.sleep(0.5)

    def _drain(self, timeout: float) -> None:
        """Delete every pod (all namespaces) and wait until the kubelet removed them."""
        self.kubectl("delete", "pods", "--all", "--all-namespaces", "--wait=false",
                     "--grace-period=1", check=False)
        deadline = time.monotonic() + timeout
        while self.get("pods", "--all-namespaces")["items"]:
            if time.monotonic() > deadline:
                raise ClusterError("pods left after the drain")
            time.sleep(0.5)

    def pod_sandbox(self, namespace: str, name: str) -> dict[str, Any]:
        """The CRI sandbox of a pod (ListPodSandbox item of the Ready one)."""
        for sb in self.cri.sandboxes():
            meta = sb["metadata"]
            if (meta["namespace"], meta["name"]) == (namespace, name) and \
                    sb.get("state") == "SANDBOX_READY":
                return sb
        raise AssertionError(f"pod {namespace}/{name} has no ready sandbox on the node")

    def pod_pid(self, namespace: str, name: str) -> int:
        """The pid of a pod's sandbox process (its netns is /proc/<pid>/ns/net)."""
        sb = self.pod_sandbox(namespace, name)
        info = json.loads(self.cri.sandbox_status(sb["id"])["info"]["info"])
        return int(info["pid"])

    def pod_addresses(self, namespace: str, name: str) -> dict[str, list[str]]:
        """Every link in the pod's netns -> its CIDR addresses (link-local v6 excluded)."""
        pid = self.pod_pid(namespace, name)
        p = run("nsenter", "-t", str(pid), "-n", "ip", "-j", "addr", "show")
        return {link["ifname"]: [f"{a['local']}/{a['prefixlen']}"
                                 for a in link.get("addr_info", []) if a.get("scope") != "link"]
                for link in json.loads(p.stdout or "[]")}

    def ipam_allocations(self) -> list[str]:
        """host-local allocations on the node (/var/lib/cni/networks/<net>/<ip>)."""
        d = self.host_path("/var/lib/cni/networks")
        if not d.is_dir():
            return []
        return sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file()
                      and p.name != "lock" and not p.name.startswith("last_reserved_ip"))

    def log(self, component: str) -> str:
        path = self.logs / f"{component}.log"
        return path.read_text(errors="replace") if path.exists() else ""


_CNI_TIMER = "containerd_cri_network_plugin_operations_duration_seconds"


def _cgroup_hierarchies() -> list[Path]:
    """The mounted cgroup hierarchies (v1 controllers and the v2/unified one)."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        sep = fields.index("-")
        if fields[sep + 1] in ("cgroup", "cgroup2") and fields[4].startswith(str(CGROUP_FS)):
            out.append(Path(fields[4]))
    return out


def _remove_stale_cgroups() -> None:
    """Remove the empty cgroup trees of earlier nodes whose process is gone
    (`netattach-node-<pid>`: a run killed before its stop()). Runs under the node
    lock, so no other node is starting; a tree that still holds a process stays."""
    stale = {base.name for hierarchy in _cgroup_hierarchies()
             for base in hierarchy.glob("netattach-node-*")
             if (pid := base.name.rsplit("-", 1)[1]).isdigit()
             and not Path(f"/proc/{pid}").exists()}
    for name in stale:
        for d in node_cgroups(f"/{name}"):
            with contextlib.suppress(OSError):
                d.rmdir()


def node_cgroups(root: str = CGROUP_ROOT) -> list[Path]:
    """The node's cgroup dirs (those of the kubelet cgroupRoot `root`) in every
    hierarchy, deepest first."""
    out: list[Path] = []
    for hierarchy in _cgroup_hierarchies():
        base = hierarchy / root.lstrip("/")
        if base.is_dir():
            out += [p for p in base.rglob("*") if p.is_dir()] + [base]
    return sorted(set(out), key=lambda p: len(p.parts), reverse=True)


def pod_manifest(namespace: str, name: str, annotations: dict[str, str] | None = None,
                 **spec: Any) -> dict[str, Any]:
    """A pod of the test bed's pause image (imported, never pulled), annotated."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace,
                         "annotations": dict(annotations or {})},
            "spec": {"containers": [{"name": "pause", "image": PAUSE_IMAGE,
                                     "imagePullPolicy": "Never"}],
                     "terminationGracePeriodSeconds": 5,
                     "automountServiceAccountToken": False, **spec}}


def unique_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# ---------------------------------------------------------------- scenario 1 on the node

# Scenario 1's secondary networks on the real node (testbed/netattach_testbed/scenario.py has the
# same shape on 198.18/15 for the tiers without a kubelet).
NODE_SUBNETS = {"net-a": "198.19.194.0/24", "net-b": "198.19.195.0/24"}
NET_A_MTU = 1420


def scenario_nads(namespace: str, master: str, net_b_bridge: str) -> list[dict[str, Any]]:
    """Scenario 1's NetworkAttachmentDefinitions as the README shows them: `net-a` in
    `namespace` (a 1.0.0 conflist: macvlan on `master` + host-local, then tuning with an
    MTU) and `net-b` in namespace `other` (a 0.3.1 bridge conf without `name`, which
    netattach injects, spec §3.4.2). host-local keeps its store in its default dir on
    the node (/var/lib/cni/networks)."""
    def nad(ns: str, name: str, config: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"config": json.dumps(config)}}
    net_a = {"cniVersion": "1.0.0", "name": "net-a", "plugins": [
        {"type": "macvlan", "master": master, "mode": "bridge",
         "ipam": {"type": "host-local", "subnet": NODE_SUBNETS["net-a"]}},
        {"type": "tuning", "mtu": NET_A_MTU}]}
    net_b = {"cniVersion": "0.3.1", "type": "bridge", "bridge": net_b_bridge, "isGateway": False,
             "ipMasq": False, "ipam": {"type": "host-local", "subnet": NODE_SUBNETS["net-b"]}}
    return [nad(namespace, "net-a", net_a), nad("other", "net-b", net_b)]


def apply_objects(node: RealNode, objects: list[dict[str, Any]]) -> None:
    """`kubectl apply -f -` of `objects` (a List), as an admin applies YAML."""
    node.kubectl("apply", "-f", "-", stdin=json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": objects}))


def apply_scenario(node: RealNode, namespace: str, master: str, net_b_bridge: str) -> None:
    """Scenario 1 on the node: the NAD CRD (deploy/base's, whether netattach is
    installed or not, as where Multus' was), established; namespaces `namespace` and
    `other`; the two NADs (`scenario_nads`)."""
    node.kubectl("apply", "-f", "deploy/base/crd.yaml")
    node.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                 "crd/network-attachment-definitions.k8s.cni.cncf.io")
    apply_objects(node, [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}}
        for n in (namespace, "other")] + scenario_nads(namespace, master, net_b_bridge))


# ---------------------------------------------------------------- netattach on the node

NAMESPACE = "kube-system"
DAEMONSET = "netattach"
IMAGE = "ghcr.io/netattach/netattach"
OVERLAYS = {"thin": "deploy/", "thick": "deploy/thick/"}
STATE_DIR = "/var/lib/cni/netattach"   # cniDir, the node's view
NETATTACH_FILES = ("/opt/cni/bin/netattach", "/opt/cni/bin/netattach-shim",
                   "/etc/cni/net.d/00-netattach.conflist", "/etc/cni/net.d/netattach.d")


def image_archive() -> Path:
    """The image `make image` built ($NETATTACH_IMAGE: its docker-archive)."""
    path = os.environ.get("NETATTACH_IMAGE")
    if not path or not Path(path).is_file():
        raise ClusterError(f"NETATTACH_IMAGE={path!r}: no image archive there; run "
                           "`make image` (or the tests through `make test`)")
    return Path(path)


def image_ref() -> str:
    """The image reference deploy/ names: IMAGE at the version in pyproject.toml."""
    import tomllib
    version = tomllib.loads((cl.REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]
    return f"{IMAGE}:{version}"


def rollout(node: RealNode, timeout: float = 300) -> None:
    """`kubectl rollout status` of netattach's DaemonSet: returns when every node runs
    an updated, available pod (ClusterError with the pods' state otherwise)."""
    p = node.kubectl("-n", NAMESPACE, "rollout", "status", f"daemonset/{DAEMONSET}",
                     f"--timeout={timeout:.0f}s", check=False, timeout=timeout + 30)
    if p.returncode != 0:
        pods = node.kubectl("-n", NAMESPACE, "get", "pods", "-o", "wide", check=False).stdout
        describe = node.kubectl("-n", NAMESPACE, "describe", "pods", check=False).stdout
        raise ClusterError(f"rollout of {DAEMONSET} did not complete: {p.stderr.strip()}\n"
                           f"{pods}\n{describe[-6000:]}")


def admin_overlay(directory: Path, mode: str, *, images: list[dict[str, str]] | None = None,
                  patches: list[dict[str, Any]] | None = None) -> Path:
    """An admin's own kustomization in `directory` on top of the mode's overlay in the
    repo (thin: deploy/, thick: deploy/thick/), with kustomize `images:` and `patches:`
    entries. Returns `directory`, for `kubectl apply -k`."""
    base = os.path.relpath(cl.REPO_ROOT / OVERLAYS[mode], directory)
    doc: dict[str, Any] = {"apiVersion": "kustomize.config.k8s.io/v1beta1",
                           "kind": "Kustomization", "resources": [base]}
    if images:
        doc["images"] = images
    if patches:
        doc["patches"] = patches
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(doc))
    return directory


def install(node: RealNode, mode: str, overlay: Path | str | None = None) -> None:
    """`kubectl apply -k` of the mode's overlay (thin: deploy/, thick: deploy/thick/) or
    of an admin's `overlay` of it, then `kubectl rollout status`, as the README's install
    section says."""
    node.kubectl("apply", "-k", str(overlay or OVERLAYS[mode]))
    rollout(node)


@contextlib.contextmanager
def following_logs(node: RealNode):
    """Follows the logs of every container of netattach's pods there are now (`kubectl
    logs -f`, from their start; pods created later are not followed) while the body runs;
    yields a function returning what was read so far (str)."""
    assert node.cluster is not None
    env = {**os.environ, "KUBECONFIG": str(node.cluster.admin_kubeconfig)}
    with tempfile.TemporaryFile("w+") as logs:
        follow = subprocess.Popen(
            [str(node.k8s_bin / "kubectl"), "-n", NAMESPACE, "logs", "-f", "--prefix",
             "--all-containers", "--max-log-requests=20", "--tail=-1",
             "-l", "app.kubernetes.io/name=netattach"],
            stdout=logs, stderr=subprocess.STDOUT, env=env)

        def read() -> str:
            logs.seek(0)
            return logs.read()
        try:
            yield read
        finally:
            follow.kill()
            follow.wait()


@contextlib.contextmanager
def uninstalling(node: RealNode, clean: bool = True, timeout: float = 120):
    """Around an uninstall (the body deletes netattach's objects): the installers' logs
    are followed meanwhile; afterwards, until netattach's pods are gone and, when `clean`
    (no pod netattach attached is left), until its files are gone from the node, as
    docs/install-lifecycle.md promises. AssertionError naming what is left, with the
    conflist and the installers' last log lines, when `timeout` (a hang guard) passes."""
    with following_logs(node) as logs:
        yield
        wait_gone(node, timeout)
        deadline = time.monotonic() + timeout
        while clean and (left := netattach_files(node)):
            if time.monotonic() > deadline:
                conflist = node.host_path("/etc/cni/net.d/00-netattach.conflist")
                text = conflist.read_text() if conflist.exists() else "(none)"
                raise AssertionError(
                    f"netattach's files left on the node after its uninstall: {left}\n"
                    f"00-netattach.conflist: {text}\ninstallers' logs:\n{logs()[-8000:]}")
            time.sleep(0.3)


def uninstall(node: RealNode, mode: str, overlay: Path | str | None = None,
              clean: bool = True, timeout: float = 120) -> None:
    """`kubectl delete -k` of the mode's overlay or of the admin's `overlay` of it that
    installed netattach, then until netattach's pods and (when `clean`: no pod it
    attached is left) its files are gone (`uninstalling`)."""
    remove_stopped_sandboxes(node)
    with uninstalling(node, clean, timeout):
        node.kubectl("delete", "-k", str(overlay or OVERLAYS[mode]), "--ignore-not-found",
                     "--wait=true", timeout=timeout)


def remove_stopped_sandboxes(node: RealNode, timeout: float = 120) -> None:
    """RemovePodSandbox of every sandbox the kubelet stopped (its pod deleted), as the
    kubelet's garbage collection does within a minute or so. The runtime DELs a sandbox
    again when it removes it; done before an uninstall, that DEL meets the netattach
    that DELed it first (its tombstone: quiet) rather than, a test later, an uninstall
    under way (a dying token: a DEL pending) or another install (no tombstone: rebuilt).
    `timeout` is a hang guard: until then, a sandbox the kubelet is removing meanwhile is
    waited for."""
    stopped = {s["id"] for s in node.cri.sandboxes() if s.get("state") == "SANDBOX_NOTREADY"}
    for sandbox_id in stopped:
        try:
            node.cri.remove_sandbox(sandbox_id)
        except rt.CriError:
            pass  # gone, or the kubelet is removing it now: waited for below
    deadline = time.monotonic() + timeout
    while (left := stopped & {s["id"] for s in node.cri.sandboxes()}):
        if time.monotonic() > deadline:
            raise AssertionError(f"stopped sandboxes not removed in {timeout:.0f} s: {left}")
        time.sleep(0.5)


def netattach_pods(node: RealNode) -> list[dict[str, Any]]:
    """netattach's pods (its DaemonSet's), as the API lists them."""
    return list(node.get("pods", "-n", NAMESPACE, "-l",
                         "app.kubernetes.io/name=netattach")["items"])


def wait_gone(node: RealNode, timeout: float = 120) -> None:
    """Until netattach's pods are gone from the node (their installers have exited)."""
    deadline = time.monotonic() + timeout
    while netattach_pods(node):
        if time.monotonic() > deadline:
            raise ClusterError("netattach's pods still there after its uninstall")
        time.sleep(0.5)


def wait_running(node: RealNode, namespace: str, name: str,
                 timeout: float = 120) -> dict[str, Any]:
    """The pod once Running (its object); AssertionError with its events if it fails
    or `timeout` (a hang guard) passes."""
    deadline = time.monotonic() + timeout
    while True:
        pod = node.get("pod", "-n", namespace, name)
        phase = pod["status"].get("phase")
        if phase == "Running":
            return pod
        if phase in ("Failed", "Succeeded") or time.monotonic() > deadline:
            events = node.kubectl("-n", namespace, "get", "events", "--field-selector",
                                  f"involvedObject.name={name}", check=False).stdout
            raise AssertionError(f"pod {namespace}/{name} is {phase}, not Running:\n{events}")
        time.sleep(0.3)


def delete_pod(node: RealNode, namespace: str, name: str, timeout: float = 120) -> None:
    """Delete the pod and wait until it is gone (its sandbox torn down: CNI DEL done)."""
    node.kubectl("-n", namespace, "delete", "pod", name, "--wait=true",
                 f"--timeout={timeout:.0f}s", timeout=timeout + 30)


def network_status(node: RealNode, namespace: str, name: str,
                   timeout: float = 60) -> list[dict[str, Any]]:
    """The pod's k8s.v1.cni.cncf.io/network-status, once written (hang guard `timeout`)."""
    deadline = time.monotonic() + timeout
    while True:
        value = node.get("pod", "-n", namespace, name)["metadata"].get(
            "annotations", {}).get("k8s.v1.cni.cncf.io/network-status")
        if value is not None:
            return json.loads(value)
        if time.monotonic() > deadline:
            raise AssertionError(f"pod {namespace}/{name}: no network-status after {timeout:.0f} s")
        time.sleep(0.2)


def state_files(node: RealNode) -> list[str]:
    """netattach's live state files on the node (tombstones, which hold nothing, aside)."""
    from .statefiles import live
    return live(node.host_path(STATE_DIR))


def netattach_files(node: RealNode) -> list[str]:
    """Which of netattach's own files are on the node (NETATTACH_FILES, the onedir
    builds `.netattach-*` in the bin dir, the state dir)."""
    found = [f for f in NETATTACH_FILES if os.path.lexists(node.host_path(f))]
    found += [f"/opt/cni/bin/{p.name}" for p in node.host_path("/opt/cni/bin").glob(".netattach-*")]
    if node.host_path(STATE_DIR).exists():
        found.append(STATE_DIR)
    return sorted(found)


def daemonset(node: RealNode) -> dict[str, Any]:
    """netattach's DaemonSet object."""
    return node.get("daemonset", "-n", NAMESPACE, DAEMONSET)


def rendered(node: RealNode, overlay: Path | str) -> list[dict[str, Any]]:
    """The objects `kubectl kustomize <overlay>` renders."""
    return list(yaml.safe_load_all(node.kubectl("kustomize", str(overlay)).stdout))


def container_args_patch(node: RealNode, mode: str, container: str,
                         *args: str) -> dict[str, Any]:
    """A kustomize `patches:` entry appending `args` to the `container` of netattach's
    DaemonSet in the mode's overlay (a JSON patch at that container's index)."""
    [ds] = [o for o in rendered(node, OVERLAYS[mode]) if o and o["kind"] == "DaemonSet"]
    names = [c["name"] for c in ds["spec"]["template"]["spec"]["containers"]]
    i = names.index(container)
    ops = [{"op": "add", "path": f"/spec/template/spec/containers/{i}/args/-", "value": a}
           for a in args]
    return {"target": {"kind": "DaemonSet", "name": DAEMONSET}, "patch": json.dumps(ops)}


def doc_block(path: Path, marker: str, lang: str = "yaml") -> str:
    """The fenced ```<lang> block right after `<!-- marker -->` in a Markdown file."""
    import re
    m = re.search(rf"<!-- {re.escape(marker)} -->\n```{lang}\n(.*?)```", path.read_text(), re.S)
    if not m:
        raise AssertionError(f"{path} has no block after <!-- {marker} -->")
    return m.group(1)


def wait_state_clean(node: RealNode, timeout: float = 60) -> None:
    """Until netattach's state dir on the node holds nothing live: no state file, and no
    container lock (a lock file exists while a command runs, e.g. the runtime's second
    DEL at RemovePodSandbox, which the kubelet sends after the pod is gone). `timeout`
    is a hang guard: what is still there then fails the test."""
    deadline = time.monotonic() + timeout
    while (left := state_files(node)):
        if time.monotonic() > deadline:
            raise AssertionError(f"netattach state left on the node: {left}\n"
                                 + _describe_state(node, left))
        time.sleep(0.1)


def _describe_state(node: RealNode, names: list[str], limit: int = 4000) -> str:
    """What the state files `names` hold (pod, sandbox, pending DEL), and the runtime's
    log lines about their containers, for a failure message."""
    out = []
    said = node.log("containerd")
    for name in names:
        path = node.host_path(STATE_DIR) / name
        try:
            text = path.read_text()[:limit]
        except OSError as e:
            text = f"({e})"
        out.append(f"--- {name}: {text}")
        cid = name.split(".", 1)[0]
        out += [f"    {line}" for line in said.splitlines() if cid in line][-30:]
    return "\n".join(out)


README = cl.REPO_ROOT / "README.md"
HELM_DOC = cl.REPO_ROOT / "docs" / "helm.md"


def readme_clone(directory: Path) -> Path:
    """The reader's clone of this repository under `directory` (what README's install
    commands need of it: deploy/ and charts/); returns its path."""
    clone = directory / "netattach"
    shutil.copytree(cl.DEPLOY_DIR, clone / "deploy")
    shutil.copytree(cl.REPO_ROOT / "charts", clone / "charts")
    return clone


def run_readme_block(node: RealNode, marker: str, cwd: Path,
                     replace: tuple[str, str] | None = None,
                     env: dict[str, str] | None = None, doc: Path = README) -> str:
    """Run the shell block after `<!-- marker -->` of the Markdown file `doc` (README, or
    a page of docs/ such as docs/helm.md) with bash (-e: every line must succeed) in
    `cwd`, as an admin with the test bed's kubectl first on PATH; stdout.
    `replace` (old, new): the alternative a comment of the block gives (thick mode's
    path), taken before running it. `env`: the environment instead of this process's
    (its PATH after kubectl's dir; KUBECONFIG is the admin's whatever it says), e.g.
    netattach_testbed.helm.helm_env for the Helm blocks. AssertionError with the output
    on failure."""
    script = doc_block(doc, marker, "sh")
    if replace:
        assert replace[0] in script, f"{doc.name} block {marker} has no {replace[0]!r}"
        script = script.replace(replace[0], replace[1])
    assert node.cluster is not None
    base = dict(os.environ if env is None else env)
    env = {**base, "KUBECONFIG": str(node.cluster.admin_kubeconfig),
           "PATH": f"{node.k8s_bin}:{base.get('PATH', '/usr/bin:/bin')}"}
    p = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, \
        f"{doc.name} block {marker} failed:\n{script}\n{p.stdout}\n{p.stderr}"
    return p.stdout
