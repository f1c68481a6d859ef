"""`make bench-node` (issue 23, part 1): pod startup on the real node.

On the real single-node cluster of the test bed (testbed/netattach_testbed/node.py:
kubelet, scheduler, controller-manager, containerd, nothing leaves the machine), the
subjects, interleaved round by round as `make bench` does (A B C A B C ...):
  * floor: the cluster default network alone (no meta-plugin installed);
  * netattach_thin: `kubectl apply -k deploy/`, the image of `make image`;
  * netattach_thick: `kubectl apply -k deploy/thick/`;
  * multus_thin: the pinned Multus' `multus` in the CNI bin dir and its conf first
    in the conf dir, written by the harness (hack/benchlib/multus.py's thin_conf);
  * multus_thick: the pinned Multus' `multus-daemon` as a host process in the node's
    mount namespace (hack/benchlib/multus.py's Daemon: config "multusConfigFile":
    "auto", its own ServiceAccount's in-cluster credentials in a private /run), which
    writes the shim's 00-multus.conf into the node's conf dir; `multus-shim` in the
    node's CNI bin dir, exec'd by containerd.
Each subject is installed, one unmeasured warm-up pod runs, then for each burst size
N, N pods of scenario 1 (README: `net-a,other/net-b@data0`) are created at once, and
once all are Ready and checked, deleted at once (a burst of 1 SINGLE_REPEATS times,
so that its percentiles are over more than one pod a round); then the subject is
uninstalled.

Measured per pod (hack/benchlib/podstartup.py): creation -> Ready and deletion -> gone
from the API (the kubelet deletes the object once it stopped the sandbox: CNI DEL
done), on the harness's clock through a pod watch (ms), and creationTimestamp ->
Ready's lastTransitionTime on the API's (1 s resolution) as a cross check. CPU per pod:
containerd's reaped children (every CNI exec: plugins, netattach thin, the shim) and
the subject's daemon process (thick; its children too: multus-daemon execs the
delegates itself), from /proc, over the burst's ADD and DEL. The runtime's own time of
its CNI calls: containerd's metrics (set_up_pod, tear_down_pod), the mean per call.

Checked: every ADD gives the pod its interfaces (floor: eth0; netattach: eth0, net1,
data0) with addresses in their subnets; after every DEL no host-local allocation, no
netattach state and no file in Multus' cniDir is left. A failed check stops the bench
with an error, no number.

Usage: hack/bench_node.py [--rounds R] [--bursts 1,10,30,110] [--subjects a,b]
                          [--out DIR]
"""
from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import json
import os
import shutil
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "hack"))

from benchlib import measure, multus  # noqa: E402
from benchlib import podstartup as ps  # noqa: E402
from kubernetes import client as k8s  # noqa: E402
from kubernetes import watch  # noqa: E402

from netattach_testbed import cluster as cl  # noqa: E402
from netattach_testbed import netns as tb  # noqa: E402
from netattach_testbed import node as nd  # noqa: E402

NAMESPACE = "bench-node"
NETWORKS = "k8s.v1.cni.cncf.io/networks"
SELECTION = "net-a,other/net-b@data0"
# link -> subnet of scenario 1 on the node
EXPECTED = {"eth0": nd.POD_SUBNET, "net1": nd.NODE_SUBNETS["net-a"],
            "data0": nd.NODE_SUBNETS["net-b"]}
SUBJECTS = ("floor", "netattach_thin", "netattach_thick", "multus_thin", "multus_thick")
MULTUS_CONF = "/etc/cni/net.d/00-multus.conf"   # first in the dir: the runtime's network
MULTUS_CNI_DIR = "/var/lib/cni/multus"
MULTUS_SHIM = "/opt/cni/bin/multus-shim"
# The CPU its thick DaemonSet requests for the daemon (deployments/multus-daemonset-thick.yml:
# requests = limits = 100m, a Guaranteed pod); the host process gets that pod's weight,
# not its limit (RealNode.place_as_guaranteed_pod).
MULTUS_DAEMON_CPU_MILLIS = 100
READY_TIMEOUT = 600.0   # hang guard of one burst
MAX_BURST = 110         # the kubelet's default maxPods
SINGLE_REPEATS = 5      # a burst of 1 runs this many times a round (one pod each time)
# the bench's node admits a burst of MAX_BURST beside netattach thick's daemon pod (which
# Multus thick's host-process daemon does not have) and the warm-up pod being deleted
NODE_MAX_PODS = MAX_BURST + 4
CREATE_WORKERS = 16     # concurrent creates (deletes) of a burst


class Failure(Exception):
    """A subject did not do what a pod needs: the bench stops, no number is kept."""


class PodWatch:
    """A watch on the bench's namespace (a thread): for each pod, when it was first
    seen Ready and when it was seen gone, on this process's clock, and its last
    object (the API's condition times)."""

    def __init__(self, api: k8s.ApiClient):
        self.core = k8s.CoreV1Api(api)
        self.lock = threading.Condition()
        self.ready: dict[str, float] = {}
        self.gone: dict[str, float] = {}
        self.last: dict[str, dict[str, Any]] = {}
        self._stop = False
        self._w = watch.Watch()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> PodWatch:
        self._thread.start()
        return self

    def _run(self) -> None:
        rv = None
        while not self._stop:
            try:
                for ev in self._w.stream(self.core.list_namespaced_pod, NAMESPACE,
                                         resource_version=rv, timeout_seconds=60):
                    now = time.time()
                    pod = self.core.api_client.sanitize_for_serialization(ev["object"])
                    rv = pod["metadata"].get("resourceVersion", rv)
                    name = pod["metadata"]["name"]
                    with self.lock:
                        if ev["type"] == "DELETED":
                            self.gone.setdefault(name, now)
                        else:
                            if ps.condition_time(pod, "Ready") is not None and \
                                    name not in self.ready:
                                # the object as it turned Ready: its condition times
                                # (at deletion Ready turns False again)
                                self.ready[name], self.last[name] = now, pod
                        self.lock.notify_all()
                    if self._stop:
                        return
            except Exception as e:  # noqa: BLE001  (a dropped stream: watch again)
                if self._stop:
                    return
                if "410" in str(e) or "Expired" in str(e):
                    rv = None
                time.sleep(0.1)

    def wait(self, names: list[str], what: str, timeout: float) -> None:
        table = self.ready if what == "ready" else self.gone
        deadline = time.monotonic() + timeout
        with self.lock:
            while not all(n in table for n in names):
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = [n for n in names if n not in table]
                    raise Failure(f"{len(missing)} pods not {what} after {timeout:.0f} s: "
                                  f"{missing[:5]}")
                self.lock.wait(min(left, 1.0))

    def stop(self) -> None:
        self._stop = True
        self._w.stop()


# ---------------------------------------------------------------- CPU from /proc

def _ticks(pid: int, children: bool) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    # after ")": state(0) ... utime(11) stime(12) cutime(13) cstime(14)
    own = int(fields[11]) + int(fields[12])
    return own + (int(fields[13]) + int(fields[14]) if children else 0)


def containerd_children_cpu(node: nd.RealNode) -> float:
    """CPU (s) of every process containerd reaped so far (the CNI execs: it waits for
    each), the machine's view of /proc."""
    pid = node._procs["containerd"].popen.pid  # noqa: SLF001  (nsenter and env exec it)
    if Path(f"/proc/{pid}/comm").read_text().strip() != "containerd":
        raise Failure(f"pid {pid} is not containerd: no CPU of the CNI execs")
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / measure.CLOCK_TICKS


def daemon_markers(subject: str) -> tuple[bytes, ...]:
    """How the command lines of the subject's long-running CNI daemon's processes start
    (thick modes; none else): netattach's daemon and its spawner, which execs the
    delegates and reaps them (cni/chroot.py), so their CPU is in its counters, not the
    daemon's; Multus' daemon, which execs them itself."""
    if subject == "netattach_thick":
        return (b"/opt/netattach/netattach\0daemon\0", b"/opt/netattach/netattach\0spawner\0")
    if subject == "multus_thick":
        return (bytes(multus.require_binaries() / "multus-daemon") + b"\0--config\0",)
    return ()


def daemon_pids(subject: str) -> list[int]:
    """The subject's long-running CNI daemon's processes (thick mode), found by their
    command lines (daemon_markers)."""
    markers = daemon_markers(subject)
    if not markers:
        return []
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if d.joinpath("cmdline").read_bytes().startswith(markers):
                    out.append(int(d.name))
            except OSError:
                continue
    return out


def daemon_cpu(pids: list[int]) -> tuple[float, float]:
    """CPU (s) of the daemon's processes `pids`: (all of it, the part of it their reaped
    children spent: the delegates, netattach's through its spawner), so that what the
    daemons' own code costs is told apart from what the plugins they run cost."""
    total = children = 0
    for pid in pids:
        try:
            own, both = _ticks(pid, children=False), _ticks(pid, children=True)
        except OSError:
            continue
        total += both
        children += both - own
    return total / measure.CLOCK_TICKS, children / measure.CLOCK_TICKS


def loaded_network(node: nd.RealNode) -> str | None:
    """The name of the network containerd runs pods on now: the first it has loaded from
    the node's conf dir (CRI Status verbose, info "cniconfig", go-cni's loopback aside);
    None before it loaded one."""
    config = json.loads(node.cri.status()["info"]["cniconfig"])
    names = [n["Config"]["Name"] for n in config.get("Networks") or []]
    return next((n for n in names if n != "cni-loopback"), None)


def wait_loaded_network(node: nd.RealNode, name: str, timeout: float = 60.0) -> None:
    """Until containerd has reloaded its network config (fsnotify on the conf dir) and
    runs pods on the network `name`; `timeout` is a hang guard (Failure)."""
    deadline = time.monotonic() + timeout
    while (loaded := loaded_network(node)) != name:
        if time.monotonic() > deadline:
            raise Failure(f"containerd runs pods on {loaded!r}, not {name!r}, "
                          f"{timeout:.0f} s after the change of its conf dir")
        time.sleep(0.1)


def conf_name(path: Path) -> str:
    """The network name in the CNI config file `path` (a machine path)."""
    return json.loads(path.read_text())["name"]


# ---------------------------------------------------------------- the bench

class NodeBench:
    def __init__(self, node: nd.RealNode, api: k8s.ApiClient, env: tb.HostEnv):
        self.node, self.api, self.env = node, api, env
        self.core = k8s.CoreV1Api(api)
        self.watch = PodWatch(api).start()
        self.counter = 0
        self.installed: str | None = None
        self.multus_daemon: multus.Daemon | None = None

    # -- subjects

    def install(self, subject: str) -> None:
        if subject.startswith("netattach_"):
            nd.install(self.node, subject.split("_", 1)[1])
        elif subject == "multus_thin":
            self.install_multus_thin()
        elif subject == "multus_thick":
            self.install_multus_thick()
        self.installed = subject

    def install_multus_thin(self) -> None:
        """Multus thin as its thin deployment leaves a node: the `multus` binary in the
        CNI bin dir, its configuration first in the conf dir (a kubeconfig of its own
        ServiceAccount, the cluster default network by name), its cniDir. Installed
        by the harness, not by a DaemonSet: the daemonset's only job in thin mode is to
        copy these files, which is not part of pod startup."""
        assert self.node.cluster is not None
        sa = multus.service_account(self.api, "thin")
        kubeconfig = cl.plugin_kubeconfig(self.node.cluster, multus.NAMESPACE, sa)
        binary = self.node.host_path("/opt/cni/bin/multus")
        shutil.copy2(multus.require_binaries() / "multus", binary)
        conf = multus.thin_conf(kubeconfig, "cluster-net", Path("/etc/cni/net.d"),
                                Path(MULTUS_CNI_DIR), Path("/opt/cni/bin"),
                                Path("/var/log/multus.log"))
        path = self.node.host_path(MULTUS_CONF)
        path.with_suffix(".tmp").write_text(json.dumps(conf))
        path.with_suffix(".tmp").rename(path)
        # the runtime reloads its network config on the change (fsnotify)
        wait_loaded_network(self.node, conf_name(self.node.host_path(MULTUS_CONF)))

    def uninstall_multus_thin(self) -> None:
        nd.remove_stopped_sandboxes(self.node)
        for p in (MULTUS_CONF, "/opt/cni/bin/multus"):
            self.node.host_path(p).unlink(missing_ok=True)
        shutil.rmtree(self.node.host_path(MULTUS_CNI_DIR), ignore_errors=True)
        # the runtime goes back to the cluster default network (fsnotify)
        wait_loaded_network(self.node, conf_name(self.node.primary_conflist))

    def install_multus_thick(self) -> None:
        """Multus thick with what its thick DaemonSet gives a node, its daemon a host
        process rather than a container of its image: multus-daemon with its deployed
        config (multusConfigFile "auto": it reads the cluster default network in the
        node's /etc/cni/net.d and writes the shim's 00-multus.conf there; binDir
        /opt/cni/bin, cniDir /var/lib/cni/multus) plus one key, clusterNetwork by name
        (multus.daemon_config: auto's path to the .conflist makes v4.2.3 leak the default
        network's IP at DEL); as its own ServiceAccount with the
        RBAC it asks for (multus.RULES["thick"]), in a mount namespace of its own slaved
        to the node's (the node's CNI dirs and /run/netns, the in-cluster credentials
        in a private /run); `multus-shim` copied into the node's CNI bin dir. The daemon
        (and the delegates it execs) run in a cgroup beside the kubelet's pods with the
        CPU weight of its DaemonSet's pod (MULTUS_DAEMON_CPU_MILLIS; no CPU limit)."""
        assert self.node.cluster is not None
        sa = multus.service_account(self.api, "thick")
        shutil.copy2(multus.require_binaries() / "multus-shim",
                     self.node.host_path(MULTUS_SHIM))
        workdir = self.node.workdir / f"multus-thick-{self.counter}"
        workdir.mkdir(mode=0o700)
        self.multus_daemon = multus.Daemon.start(
            workdir, self.node.cluster, sa, Path("/etc/cni/net.d"), Path("/etc/cni/net.d"),
            Path("/opt/cni/bin"), self.node.logs / "multus-daemon.log",
            cni_config_dir=Path("/etc/cni/net.d"), cni_dir=Path(MULTUS_CNI_DIR),
            cni_version="1.0.0", node_name=nd.NODE_NAME, ns_argv=self.node.ns.argv,
            host_path=self.node.host_path, cluster_network="cluster-net")
        # it competes for CPU as its DaemonSet's pod would, not as a system process
        pids = daemon_pids("multus_thick")
        if not pids:
            raise Failure("multus-daemon started, but no process has its command line")
        self.node.place_as_guaranteed_pod("multus-thick-daemon", MULTUS_DAEMON_CPU_MILLIS, pids)
        # the runtime reloads its network config on the change (fsnotify)
        wait_loaded_network(self.node, conf_name(self.node.host_path(MULTUS_CONF)))

    def uninstall_multus_thick(self) -> None:
        nd.remove_stopped_sandboxes(self.node)
        if self.multus_daemon is not None:
            self.multus_daemon.stop()
            self.multus_daemon = None
        for p in (MULTUS_CONF, MULTUS_SHIM):
            self.node.host_path(p).unlink(missing_ok=True)
        shutil.rmtree(self.node.host_path(MULTUS_CNI_DIR), ignore_errors=True)
        # the runtime goes back to the cluster default network (fsnotify)
        wait_loaded_network(self.node, conf_name(self.node.primary_conflist))

    def uninstall(self, subject: str) -> None:
        if subject == "netattach_thin":
            nd.uninstall(self.node, "thin")
        elif subject == "netattach_thick":
            nd.uninstall(self.node, "thick")
            # the base's own objects (ServiceAccount, RBAC) outlive the thick overlay
            nd.uninstall(self.node, "thin")
        elif subject == "multus_thin":
            self.uninstall_multus_thin()
        elif subject == "multus_thick":
            self.uninstall_multus_thick()
        self.installed = None

    # -- pods

    def _names(self, n: int) -> list[str]:
        out = [f"p{self.counter + i}" for i in range(n)]
        self.counter += n
        return out

    def burst(self, subject: str, size: int, rnd: int) -> ps.Burst:
        """`size` scenario-1 pods at once, Ready and checked, then deleted at once,
        gone and checked."""
        names = self._names(size)
        times = {n: ps.PodTimes(n, 0.0) for n in names}
        pids = daemon_pids(subject)
        cpu0, (dcpu0, dchild0) = containerd_children_cpu(self.node), daemon_cpu(pids)
        ops0 = self.node.cni_operations()

        def create(name: str) -> None:
            times[name].create_sent = time.time()
            self.core.create_namespaced_pod(
                NAMESPACE, nd.pod_manifest(NAMESPACE, name, {NETWORKS: SELECTION}))

        with ThreadPoolExecutor(min(size, CREATE_WORKERS)) as ex:
            list(ex.map(create, names))
        self.watch.wait(names, "ready", READY_TIMEOUT)
        self.check_added(subject, names)

        def delete(name: str) -> None:
            times[name].delete_sent = time.time()
            self.core.delete_namespaced_pod(name, NAMESPACE)

        with ThreadPoolExecutor(min(size, CREATE_WORKERS)) as ex:
            list(ex.map(delete, names))
        self.watch.wait(names, "gone", READY_TIMEOUT)
        cpu1, (dcpu1, dchild1) = containerd_children_cpu(self.node), daemon_cpu(pids)
        self.check_deleted(subject)
        with self.watch.lock:
            for n in names:
                t, pod = times[n], self.watch.last.get(n, {})
                t.ready_seen, t.gone_seen = self.watch.ready[n], self.watch.gone[n]
                t.api_created = ps.api_time(pod.get("metadata", {}).get("creationTimestamp"))
                t.api_ready = ps.condition_time(pod, "Ready")
                t.api_sandbox_ready = ps.condition_time(pod, "PodReadyToStartContainers")
        # the kubelet's garbage collection removes stopped sandboxes within a minute or
        # so; done here, so the next burst meets no runtime busy with the last one's
        nd.remove_stopped_sandboxes(self.node)
        ops1 = self.node.cni_operations()
        runtime_cni = {op: (n - n0, s - s0) for op, (n, s) in ops1.items()
                       for n0, s0 in [ops0.get(op, (0, 0.0))]}
        return ps.Burst(subject, size, rnd, [times[n] for n in names],
                        cni_exec_cpu=cpu1 - cpu0, daemon_cpu=dcpu1 - dcpu0,
                        daemon_child_cpu=dchild1 - dchild0,
                        runtime_cni=runtime_cni)

    def check_added(self, subject: str, names: list[str]) -> None:
        want = ["eth0", "lo"] if subject == "floor" else ["data0", "eth0", "lo", "net1"]
        for name in names:
            addrs = self.node.pod_addresses(NAMESPACE, name)
            if sorted(addrs) != want:
                raise Failure(f"{subject}: pod {name} has links {sorted(addrs)}, not {want}")
            for link, cidrs in addrs.items():
                if link == "lo":
                    continue
                ips = [ipaddress.ip_interface(c).ip for c in cidrs]
                if not ips or not all(ip in ipaddress.ip_network(EXPECTED[link]) for ip in ips):
                    raise Failure(f"{subject}: pod {name} {link} has {cidrs}, not in "
                                  f"{EXPECTED[link]}")

    def check_deleted(self, subject: str) -> None:
        deadline = time.monotonic() + 60
        while (left := self.node.ipam_allocations()):
            if time.monotonic() > deadline:
                raise Failure(f"{subject}: IP allocations left after the DELs: {left}")
            time.sleep(0.2)
        if subject.startswith("netattach_"):
            nd.wait_state_clean(self.node)
        elif subject.startswith("multus_"):
            cache = self.node.host_path(MULTUS_CNI_DIR)
            # its delegates' cache (one file per container) and libcni's results/ in it
            while cache.is_dir() and (left := [str(p.relative_to(cache))
                                               for p in cache.rglob("*") if p.is_file()]):
                if time.monotonic() > deadline:
                    raise Failure(f"{subject}: Multus' cniDir holds {left} after the DELs")
                time.sleep(0.2)

    def warm_up(self, subject: str) -> None:
        """One pod, unmeasured: the first pod after an install pays the image's first
        start, caches, the daemon's informers."""
        name = self._names(1)[0]
        self.core.create_namespaced_pod(
            NAMESPACE, nd.pod_manifest(NAMESPACE, name, {NETWORKS: SELECTION}))
        self.watch.wait([name], "ready", READY_TIMEOUT)
        self.check_added(subject, [name])
        self.core.delete_namespaced_pod(name, NAMESPACE)
        self.watch.wait([name], "gone", READY_TIMEOUT)
        self.check_deleted(subject)


def setup_scenario(node: nd.RealNode, master: str, bridge: str) -> None:
    """Scenario 1's NADs (tests/node/conftest.py's node_scenario, in NAMESPACE). Again
    before each subject: netattach's uninstall (`kubectl delete -k`) deletes the NAD CRD
    deploy/base has, and with it every NAD."""
    nd.apply_scenario(node, NAMESPACE, master, bridge)
    # the namespace's default ServiceAccount (the pods mount no token, but admission
    # waits for it)
    deadline = time.monotonic() + 60
    while node.kubectl("-n", NAMESPACE, "get", "serviceaccount", "default",
                       check=False).returncode != 0:
        if time.monotonic() > deadline:
            raise Failure(f"no default ServiceAccount in {NAMESPACE}")
        time.sleep(0.3)


def run(node: nd.RealNode, env: tb.HostEnv, subjects: list[str], rounds: int,
        bursts: list[int]) -> list[ps.Burst]:
    """The rounds on a running node (netattach's image already imported when a netattach
    subject runs): every subject in turn each round, each installed, warmed up, its
    bursts run and checked, uninstalled. Returns every burst measured, in order. Raises
    Failure when a subject does not give a pod what it needs, ClusterError (test bed)
    when the node does not do its part. tests/node/test_bench_node_harness.py runs one
    round of it on the session's node."""
    master, bridge = env.master_link(), env.bridge_name()
    results: list[ps.Burst] = []
    with node.admin_api() as api:
        bench = NodeBench(node, api, env)
        try:
            for rnd in range(rounds):
                for subject in subjects:
                    t0 = time.monotonic()
                    setup_scenario(node, master, bridge)
                    bench.install(subject)
                    try:
                        bench.warm_up(subject)
                        for size in bursts:
                            for _ in range(SINGLE_REPEATS if size == 1 else 1):
                                results.append(bench.burst(subject, size, rnd))
                    finally:
                        bench.uninstall(subject)
                    print(f"round {rnd + 1}/{rounds} {subject}: "
                          f"{time.monotonic() - t0:.0f} s", flush=True)
        finally:
            bench.watch.stop()
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=int(os.environ.get("ROUNDS") or 3))
    ap.add_argument("--bursts", default=os.environ.get("BURSTS") or "1,10,30,110")
    ap.add_argument("--subjects", default=",".join(SUBJECTS))
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "bench-node")
    args = ap.parse_args()
    bursts = [int(b) for b in args.bursts.split(",")]
    if max(bursts) > MAX_BURST:
        ap.error(f"a burst is at most the kubelet's default maxPods, {MAX_BURST}")
    subjects = [s for s in args.subjects.split(",") if s]
    unknown = set(subjects) - set(SUBJECTS)
    if unknown:
        ap.error(f"unknown subjects {sorted(unknown)} (known: {', '.join(SUBJECTS)})")
    args.out.mkdir(parents=True, exist_ok=True)
    started = dt.datetime.now(dt.UTC)
    host = measure.machine_text(measure.machine())
    env = tb.new_host_env()
    try:
        with cl.workdir("netattach-bench-node-", "NETATTACH_KEEP_NODE", "bench node") as wd, \
                nd.RealNode.start(wd, max_pods=NODE_MAX_PODS) as node:
            if any(s.startswith("netattach_") for s in subjects):
                node.import_image(nd.image_archive())
            results = run(node, env, subjects, args.rounds, bursts)
    finally:
        env.cleanup()
    head = (f"bench-node {started:%Y-%m-%d %H:%M} UTC, {host}; rounds {args.rounds}, "
            f"bursts {bursts}, scenario 1 pods (`{SELECTION}`)\n\n")
    text = head + ps.table(results)
    print("\n" + text)
    (args.out / "bench-node-results.md").write_text(text)
    ps.plot(results, args.out / "bench-node-startup.png",
            f"pod startup on the real node, {started:%Y-%m-%d %H:%M} UTC, "
            f"{args.rounds} round{'s' * (args.rounds > 1)}\n{host}")
    (args.out / "bench-node-results.json").write_text(json.dumps(
        {"started": started.isoformat(), "machine": host, "rounds": args.rounds,
         "bursts": bursts, "subjects": subjects,
         "results": [b.as_dict() for b in results]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
