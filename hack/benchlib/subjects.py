"""What the bench runs side by side: netattach thin (the built artifact), netattach thick
(its daemon + shim, when the build has `netattach daemon`), Multus thin, Multus thick
(daemon + shim) and the children alone (the floor: each network's own plugin config
exec'd with cnitool, as a meta-plugin would exec it, with nothing around it).

Every subject attaches the same pod the same way: the same cluster default network
config on disk, the same NADs, the same child plugins (CNI_PATH), exec'd with the CNI
environment a runtime sets (`Subject.run`). The bench (`hack/bench.py`) checks what each
left in the pod's netns and on the host; a subject that fails is an error.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from netattach_testbed import cluster as cl
from netattach_testbed import runtime as rt
from netattach_testbed import scenario as sc
from netattach_testbed import statefiles
from netattach_testbed.netns import HostEnv

from . import multus
from .measure import Exec, spawn

CNI_VERSION_STDIN = json.dumps({"cniVersion": "1.0.0"}).encode()


def deployed_daemon_flags(workdir: Path) -> tuple[str, ...]:
    """The flags deploy/thick gives `netattach daemon` that change how it runs (log
    level, pool size, the DRA kubelet plugin), so the bench measures the daemon as a
    node runs it; the paths (the kubelet's plugin dirs: in `workdir`) and the metrics
    address stay the test bed's (and it runs the children in this machine's root: no
    --chroot-dir)."""
    [doc] = [d for d in cl.kustomize(cl.THICK_DIR) if d["kind"] == "DaemonSet"]
    [container] = [c for c in doc["spec"]["template"]["spec"]["containers"]
                   if c["name"] == "daemon"]
    flags = tuple(a for a in container["args"]
                  if a.split("=")[0] in ("--log-level", "--max-parallel", "--dra"))
    if "--dra" in flags:
        flags += ("--dra-registry-dir", str(workdir / "plugins_registry"),
                  "--dra-plugin-dir", str(workdir / "dra-plugin"))
    return flags


@dataclass(frozen=True)
class Attachment:
    """One network of a pod: its config's name (the floor's cnitool names it), the
    interface it gets, and the subnet its address must be in."""
    network: str
    ifname: str
    subnet: str


@dataclass
class Pod:
    """A pod of the bench: its sandbox (a scenario.Scenario: names, UID, container ID,
    netns, CNI env) and the attachments it must get."""
    s: sc.Scenario
    attachments: list[Attachment]


@dataclass
class Bed:
    """What every subject shares: the API server, the host env and scenario 1 set up on
    both (`base`), the bench's workdir, and the floor's conf dir."""
    cluster: cl.Cluster
    env: HostEnv
    base: sc.Scenario
    workdir: Path
    floor_dir: Path


class Subject:
    """One way of attaching a pod. `key` names it in the results, `label` in the table,
    `user` is who it is in the API server's audit log (None: it makes no request), `pid`
    its daemon's process (None: nothing runs between calls). `skipped` says why it
    does not run (None: it runs)."""
    key = ""
    label = ""
    user: str | None = None
    skipped: str | None = None

    def start(self, bed: Bed, api: Any) -> None:
        """Set up what it needs (after scenario 1 is on the bed)."""

    def stop(self) -> None:
        """End what start() started; idempotent."""

    @property
    def pid(self) -> int | None:
        return None

    def executables(self) -> list[tuple[str, str]]:
        """(label, path) of what a runtime execs for it, for the VERSION exec."""
        raise NotImplementedError

    def run(self, pod: Pod, command: str, prefix: Sequence[str] = ()) -> Exec:
        """ADD or DEL of `pod`, as the runtime would exec it (`prefix` before each argv)."""
        raise NotImplementedError

    def leftovers(self, pod: Pod) -> list[str]:
        """What it still keeps on the host after `pod`'s DEL (nothing, when it works)."""
        return []

    def wait_writes_sent(self) -> None:
        """Until the API writes of its last ADD are all sent (a plugin that answers the
        runtime only after sending them: at once)."""


class _Plugin(Subject):
    """A meta-plugin exec'd from the bed's CNI bin dir with its config on stdin; `state`
    is its state dir (cniDir)."""
    exe: Path
    conf: dict[str, Any]
    state: Path

    def leftovers(self, pod: Pod) -> list[str]:
        """Files in its state dir that hold or guard an attachment (statefiles): not
        netattach's tombstones, its prune stamp nor its STATUS memo."""
        return [f"state {p}" for p in _files(self.state) if statefiles.holds_attachment(p.name)]

    def executables(self) -> list[tuple[str, str]]:
        return [(self.exe.name, str(self.exe))]

    def run(self, pod: Pod, command: str, prefix: Sequence[str] = ()) -> Exec:
        return spawn([*prefix, str(self.exe)], pod.s.cni_env(command),
                     json.dumps(self.conf).encode())


class _Daemonised(_Plugin):
    """A plugin in thick mode: `daemon` (with .pid and .stop()) serves its shim."""
    daemon: Any = None

    def stop(self) -> None:
        if self.daemon is not None:
            self.daemon.stop()
            self.daemon = None

    @property
    def pid(self) -> int | None:
        return self.daemon.pid if self.daemon is not None else None


def _link(bin_dir: Path, name: str, target: Path) -> Path:
    """`<bin_dir>/<name>`, a symlink to `target` (what an installer puts in the CNI bin dir)."""
    link = bin_dir / name
    link.unlink(missing_ok=True)
    link.symlink_to(target)
    return link


class NetattachThin(_Plugin):
    key, label = "netattach_thin", "netattach thin"

    def start(self, bed: Bed, api: Any) -> None:
        self.state = bed.env.state_dir
        self.exe = bed.base.bin_dir / "netattach"  # scenario.install_bin_dir's link
        # the default log level, as a node runs it (the scenario's is debug, for tests)
        self.conf = dict(bed.base.netconf, logLevel="info")
        self.user = multus.username("netattach")


class NetattachThick(_Daemonised):
    """netattach's thick mode: `netattach daemon` and its shim. Skipped, with the reason,
    while the build has no `netattach daemon` or the test bed no way to run it
    (testbed/netattach_testbed/daemon.py)."""
    key, label = "netattach_thick", "netattach thick"

    def __init__(self) -> None:
        probe = subprocess.run([sc.netattach_command(), "daemon", "--help"],
                               capture_output=True, text=True)
        if probe.returncode != 0:
            self.skipped = (f"`netattach daemon --help` exits {probe.returncode}: "
                            "this build has no thick mode yet")
            return
        try:
            from netattach_testbed import daemon as node_daemon
        except ImportError:
            self.skipped = ("the build has `netattach daemon`, the test bed no "
                            "testbed/netattach_testbed/daemon.py to run it")
            return
        self.node_daemon = node_daemon

    def start(self, bed: Bed, api: Any) -> None:
        self.state = bed.env.state_dir
        command = sc.netattach_command()
        # the daemon's own ServiceAccount (deploy/thick/rbac.yaml): it lists and watches
        # pods and NADs, which the thin plugin's account may not
        cl.apply_manifests(api, [cl.THICK_DIR / "rbac.yaml"])
        self.daemon = self.node_daemon.NodeDaemon.start(
            command, bed.env, cl.plugin_kubeconfig(bed.cluster, sa="netattach-daemon"),
            flags=deployed_daemon_flags(bed.workdir))
        self.exe = self.node_daemon.install_shim(bed.base.bin_dir, command)
        self.conf = dict(bed.base.netconf, logLevel="info",
                         daemonSocketDir=str(self.daemon.socket_dir))
        self.user = multus.username("netattach-daemon")

    def wait_writes_sent(self) -> None:
        """The daemon sends network-status and the Events after answering the ADD: until
        its queue is empty (its publish_pending metric)."""
        self.daemon.wait_writes_sent()


class MultusThin(_Plugin):
    key, label = "multus_thin", "Multus thin"

    def start(self, bed: Bed, api: Any) -> None:
        sa = multus.service_account(api, "thin")
        self.user = multus.username(sa)
        self.state = bed.workdir / "multus-thin-state"
        self.exe = _link(bed.base.bin_dir, "multus", multus.require_binaries() / "multus")
        self.conf = multus.thin_conf(
            cl.plugin_kubeconfig(bed.cluster, multus.NAMESPACE, sa),
            bed.base.netconf["clusterNetwork"], bed.env.conf_dir, self.state, bed.base.bin_dir,
            bed.env.log_dir / "multus-thin.log")


class MultusThick(_Daemonised):
    key, label = "multus_thick", "Multus thick"

    def start(self, bed: Bed, api: Any) -> None:
        sa = multus.service_account(api, "thick")
        self.user = multus.username(sa)
        self.state = bed.workdir / "multus-thick" / "state"
        # The daemon ignores the runtime's CNI_PATH: its binDir is the children's dir.
        self.daemon = multus.Daemon.start(
            bed.workdir / "multus-thick", bed.cluster, sa, bed.env.conf_dir, bed.env.conf_dir,
            Path(sc.DEBIAN_CNI_DIR), bed.env.log_dir / "multus-daemon.log")
        self.exe = _link(bed.base.bin_dir, "multus-shim", multus.require_binaries() / "multus-shim")
        self.conf = self.daemon.shim_conf()


class Floor(Subject):
    """The children alone: each attachment's own config (the on-disk default network, the
    NADs' spec.config, net-b with the name a meta-plugin injects) in `Bed.floor_dir`,
    exec'd by cnitool one network after the other (DEL in reverse), with the pod's
    CNI_ARGS and CNI_PATH."""
    key, label = "floor", "children alone"

    def start(self, bed: Bed, api: Any) -> None:
        self.cnitool = cni_bin_dir() / "cnitool"
        if not os.access(self.cnitool, os.X_OK):
            raise cl.TestbinMissing(f"no cnitool at {self.cnitool} (NETATTACH_CNI_BIN): "
                                    "run `make testbin`")
        self.floor_dir = bed.floor_dir

    def executables(self) -> list[tuple[str, str]]:
        return [("bridge", f"{sc.DEBIAN_CNI_DIR}/bridge")]

    def run(self, pod: Pod, command: str, prefix: Sequence[str] = ()) -> Exec:
        base = pod.s.cni_env(command)
        order = pod.attachments if command == "ADD" else pod.attachments[::-1]
        return Exec.chain([spawn(
            [*prefix, str(self.cnitool), command.lower(), a.network, pod.s.netns_path],
            {"PATH": base["PATH"], "NETCONFPATH": str(self.floor_dir),
             "CNI_PATH": base["CNI_PATH"], "CNI_ARGS": base["CNI_ARGS"], "CNI_IFNAME": a.ifname})
            for a in order])

    def leftovers(self, pod: Pod) -> list[str]:
        return [f"libcni cache {p}" for p in rt.libcni_cache_entries(cnitool_id(pod.s.netns))]


def cni_bin_dir() -> Path:
    """$NETATTACH_CNI_BIN (as `make bench` sets it), else where `make testbin` puts
    cnitool and the reference plugins (mk/testbin.mk: TESTBIN_CNI_DIR)."""
    env = os.environ.get("NETATTACH_CNI_BIN")
    if env:
        return Path(env)
    version = cl.gomod_version(rt.ROOT / "hack" / "testbin" / "cni" / "go.mod",
                               "github.com/containernetworking/plugins")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "netattach" / "testbin" / f"cni-{version}"


def cnitool_id(netns: str) -> str:
    """The container ID cnitool gives a netns (a hash of its path, cnitool.go)."""
    return "cnitool-" + hashlib.sha512(sc.netns_path(netns).encode()).hexdigest()[:20]


def _files(d: Path) -> list[Path]:
    return sorted(p for p in d.rglob("*") if p.is_file()) if d.exists() else []


def all_subjects() -> list[Subject]:
    """Every subject, in the order each round runs them."""
    return [NetattachThin(), NetattachThick(), MultusThin(), MultusThick(), Floor()]
