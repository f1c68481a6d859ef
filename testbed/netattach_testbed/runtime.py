"""A real container runtime in the test bed: containerd 2.x driven through the CRI, as
the kubelet drives it (issue 10).

`make testbin` builds containerd, its runc shim, `ctr`, the CRI client `criclient`
(hack/testbin/containerd/criclient: one RuntimeService call per exec, JSON in and out)
and `pause` (the sandbox image's program) from the pinned tools module
hack/testbin/containerd/go.mod; runc comes from Debian.

`Containerd.start(workdir, cni_bin_dirs, cni_conf_dir)` runs a test-owned containerd:
its own root, state, socket and config, the native snapshotter, network namespaces
under its state dir, sandboxes' cgroups under CGROUP_PARENT/<name>, the sandbox image
built here (`sandbox_image`) imported with `ctr` and pinned as its sandbox image, and
the CNI dirs the caller gives (netattach's conflist as `netattach install` writes it).
`Cri` is the kubelet's side of the socket: Status, RunPodSandbox, PodSandboxStatus,
StopPodSandbox, RemovePodSandbox, ListPodSandbox.

Nothing outlives `Containerd.stop()`: sandboxes still listed are stopped and removed
(as the kubelet's garbage collection would), the daemon and every shim end, mounts
under its dirs are undone and its cgroups removed; `leaks()` names whatever is left.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import subprocess
import tarfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .cluster import ClusterError, _Process, gomod_version, log_tail, started

ROOT = Path(__file__).resolve().parents[2]
CONTAINERD_GOMOD = ROOT / "hack" / "testbin" / "containerd" / "go.mod"
CONTAINERD_MODULE = "github.com/containerd/containerd/v2"
BINARIES = ("containerd", "containerd-shim-runc-v2", "ctr", "criclient", "pause")
RUNC = "/usr/sbin/runc"
SANDBOX_IMAGE = "netattach.test/pause:1"
# The kubelet's namespace in containerd: CRI objects live there.
K8S_NAMESPACE = "k8s.io"
# cgroupfs parent of every test sandbox's cgroup (the kubelet's is /kubepods/...): one
# per test process, so a second session on the machine neither sees nor removes ours.
CGROUP_PARENT = f"/netattach-test-{os.getpid()}"
CGROUP_ROOT = Path("/sys/fs/cgroup")
READY_TIMEOUT = 60.0
# Every containerd started in this process: its workdir, for leaks().
STARTED: list[Path] = []
# containerd's shims put their sockets under /run/containerd/s/ whatever the config
# says; when the dir is not there before the first test containerd, it is ours to remove.
SHIM_SOCKET_ROOT = Path("/run/containerd")
_SHIM_SOCKET_ROOT_OURS = not SHIM_SOCKET_ROOT.exists()


def containerd_version() -> str:
    """The containerd release the tools module pins ("v2.2.9")."""
    return gomod_version(CONTAINERD_GOMOD, CONTAINERD_MODULE)


def default_bin_dir() -> Path:
    """Where `make testbin` puts the runtime's binaries (same key as mk/testbin.mk)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "netattach" / "testbin" / f"containerd-{containerd_version()}"


def bin_dir() -> Path:
    """$NETATTACH_CONTAINERD_BIN if set (as `make test/demo` set it), else the default."""
    env = os.environ.get("NETATTACH_CONTAINERD_BIN")
    return Path(env) if env else default_bin_dir()


def require_binaries(where: Path | None = None) -> Path:
    """The runtime's bin dir; ClusterError naming what is missing (and `make testbin`)."""
    where = where or bin_dir()
    missing = [n for n in BINARIES if not os.access(where / n, os.X_OK)]
    if not os.access(RUNC, os.X_OK):
        missing.append(f"{RUNC} (Debian package runc)")
    if missing:
        raise ClusterError(f"{', '.join(missing)} not found in {where} "
                           "(NETATTACH_CONTAINERD_BIN): run `make testbin` "
                           "(or the tests through `make test`)")
    return where


# ---------------------------------------------------------------- the sandbox image

def _blob(layout: dict[str, bytes], data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    layout[f"blobs/sha256/{digest[7:]}"] = data
    return digest


def sandbox_image(pause: Path, dest: Path, name: str = SANDBOX_IMAGE) -> Path:
    """Write an OCI image layout tarball holding one image, `name`: a single layer with
    `pause` as /pause (its entrypoint), for linux/amd64. Deterministic bytes (fixed
    mtimes and owners), so the image ID is the same on every run. Returns `dest`."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        data = pause.read_bytes()
        info = tarfile.TarInfo("pause")
        info.size, info.mode, info.mtime = len(data), 0o755, 0
        tar.addfile(info, io.BytesIO(data))
    layer_tar = raw.getvalue()
    layout: dict[str, bytes] = {}
    layer = gzip.compress(layer_tar, mtime=0)
    layer_digest = _blob(layout, layer)
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": ["/pause"], "User": "0:0"},
        "rootfs": {"type": "layers",
                   "diff_ids": ["sha256:" + hashlib.sha256(layer_tar).hexdigest()]},
    }, sort_keys=True).encode()
    config_digest = _blob(layout, config)
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": config_digest, "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": layer_digest, "size": len(layer)}],
    }, sort_keys=True).encode()
    manifest_digest = _blob(layout, manifest)
    layout["oci-layout"] = b'{"imageLayoutVersion":"1.0.0"}'
    layout["index.json"] = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                       "digest": manifest_digest, "size": len(manifest),
                       "platform": {"architecture": "amd64", "os": "linux"},
                       "annotations": {"io.containerd.image.name": name,
                                       "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1]}}],
    }, sort_keys=True).encode()
    with tarfile.open(dest, "w") as tar:
        for path, data in sorted(layout.items()):
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return dest


# ---------------------------------------------------------------- the CRI client

class CriError(RuntimeError):
    """A CRI call failed: `code` is the gRPC status code name, `message` its message."""

    def __init__(self, verb: str, code: str, message: str):
        super().__init__(f"CRI {verb}: {code}: {message}")
        self.verb, self.code, self.message = verb, code, message

    @property
    def not_initialized(self) -> bool:
        """gRPC's Unavailable, which containerd answers ("server is not initialized
        yet") between its socket's creation and the end of its CRI plugin's start: a
        start's readiness check waits it out (a loaded machine makes the gap longer)."""
        return self.code == "Unavailable"


def wait_cri_ready(proc: _Process, socket: Path, cri: Cri, timeout: float) -> None:
    """Until the containerd `proc` answers CRI Version on `socket` (the path as this
    process sees it) through `cri`'s client: its socket made and its CRI plugin started
    (CriError.not_initialized is waited out). ClusterError with the tail of its log when
    it exits first or is not ready within `timeout` s (a hang guard)."""
    deadline = time.monotonic() + timeout
    while True:
        if not proc.running:
            raise ClusterError(f"containerd exited while starting; last lines of "
                               f"{proc.log}:\n{log_tail(proc.log)}")
        if socket.exists():
            try:
                Cri(cri.client, cri.endpoint, timeout=5).version()
                return
            except (ClusterError, subprocess.TimeoutExpired):
                pass
            except CriError as e:
                if not e.not_initialized:
                    raise
        if time.monotonic() > deadline:
            raise ClusterError(f"containerd not ready after {timeout:.0f}s; last lines "
                               f"of {proc.log}:\n{log_tail(proc.log)}")
        time.sleep(0.2)


@dataclass
class Cri:
    """The kubelet's side of a CRI socket: each method is one RuntimeService call
    (criclient), returning the response as protobuf JSON (camelCase keys) or raising
    CriError with the runtime's status message."""
    client: Path
    endpoint: str
    timeout: float = 240.0

    def call(self, verb: str, *args: str, stdin: dict | None = None) -> dict[str, Any]:
        p = subprocess.run(
            [str(self.client), "-endpoint", self.endpoint, "-timeout", f"{self.timeout:.0f}s",
             verb, *args],
            input=json.dumps(stdin) if stdin is not None else "", capture_output=True,
            text=True, timeout=self.timeout + 30)
        if p.returncode == 2:
            err = json.loads(p.stdout)
            raise CriError(verb, err["code"], err["message"])
        if p.returncode != 0:
            raise ClusterError(f"criclient {verb} failed ({p.returncode}): {p.stderr.strip()}")
        return json.loads(p.stdout or "{}")

    def version(self) -> dict[str, Any]:
        return self.call("version")

    def status(self) -> dict[str, Any]:
        """Status (verbose): {"status": {"conditions": [{"type", "status", "reason",
        "message"}]}, "info": {...}}."""
        return self.call("status")

    def condition(self, kind: str = "NetworkReady") -> dict[str, Any]:
        """The Status condition of type `kind` (NetworkReady, RuntimeReady)."""
        for cond in self.status()["status"].get("conditions", []):
            if cond["type"] == kind:
                return cond
        raise AssertionError(f"the runtime reports no {kind} condition")

    def run_sandbox(self, config: dict[str, Any]) -> str:
        """RunPodSandbox with a PodSandboxConfig; returns the sandbox ID."""
        sandbox_id = self.call("runp", stdin=config)["podSandboxId"]
        SANDBOXES.add(sandbox_id)
        return sandbox_id

    def sandbox_status(self, sandbox_id: str) -> dict[str, Any]:
        """PodSandboxStatus (verbose): {"status": {...}, "info": {"info": "<json>"}}."""
        return self.call("inspectp", sandbox_id)

    def stop_sandbox(self, sandbox_id: str) -> None:
        self.call("stopp", sandbox_id)

    def remove_sandbox(self, sandbox_id: str) -> None:
        self.call("rmp", sandbox_id)

    def sandboxes(self) -> list[dict[str, Any]]:
        """ListPodSandbox: every sandbox the runtime knows, ready or not."""
        return self.call("pods").get("items", [])

    def remove_all(self, timeout: float = 60.0) -> None:
        """Stop and remove every sandbox listed, as the kubelet's garbage collection
        would. A removal the kubelet began before it was stopped may still run in
        containerd: its containers answer "already in removing state" until it ends, and
        a sandbox it finished is then NotFound. Those are waited out (polled every
        0.5 s, up to `timeout` seconds per sandbox); any other CriError is raised."""
        for sb in self.sandboxes():
            deadline = time.monotonic() + timeout
            while True:
                try:
                    self.stop_sandbox(sb["id"])
                    self.remove_sandbox(sb["id"])
                    break
                except CriError as e:
                    if e.code == "NotFound":
                        break
                    if "already in removing state" not in e.message \
                            or time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)


def sandbox_config(namespace: str, name: str, uid: str, annotations: dict[str, str],
                   attempt: int = 0) -> dict[str, Any]:
    """A PodSandboxConfig as the kubelet builds it for a pod: metadata, the pod's
    annotations, log dir, DNS, a cgroup parent under CGROUP_PARENT, and hostname."""
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "attempt": attempt},
        "hostname": name,
        "labels": {"io.kubernetes.pod.name": name, "io.kubernetes.pod.namespace": namespace,
                   "io.kubernetes.pod.uid": uid},
        "annotations": dict(annotations),
        "dnsConfig": {"servers": ["198.18.0.10"], "searches": [f"{namespace}.svc.cluster.local"],
                      "options": ["ndots:5"]},
        "linux": {"cgroupParent": f"{CGROUP_PARENT}/pod{uid}",
                  "securityContext": {"namespaceOptions": {"network": "POD", "pid": "CONTAINER",
                                                           "ipc": "POD"}}},
    }


# Scenario 1 through the runtime: the pod also has the kubelet's bandwidth annotations
# (containerd turns them into runtimeConfig.bandwidth) and a hostPort (portMappings).
HOST_PORT = 18080
BANDWIDTH = {"kubernetes.io/ingress-bandwidth": "10M", "kubernetes.io/egress-bandwidth": "10M"}


def scenario_sandbox(api, env, namespace: str, networks: str = "net-a,other/net-b@data0",
                     name: str | None = None, nads: bool = True,
                     resource_claims: list[dict[str, Any]] | None = None,
                     ) -> tuple[str, dict[str, Any]]:
    """Scenario 1 (testbed/netattach_testbed/scenario.py) for the runtime: its NADs unless `nads` is
    False (scenario.apply_nads), a Pod selecting `networks` with BANDWIDTH annotations,
    and the PodSandboxConfig the kubelet builds for that Pod (same metadata and
    annotations, a TCP hostPort HOST_PORT on 127.0.0.1); `resource_claims`: the Pod's
    spec.resourceClaims (DRA). Returns (pod name, config)."""
    from . import scenario as sc
    if nads:
        sc.apply_nads(api, env, namespace)
    name = name or f"pod-{uuid.uuid4().hex[:8]}"
    obj = sc.pod(namespace, name, networks, resource_claims)
    obj["metadata"]["annotations"].update(BANDWIDTH)
    uid = sc.create_pod(api, obj)
    config = sandbox_config(namespace, name, uid, obj["metadata"]["annotations"])
    config["portMappings"] = [{"protocol": "TCP", "containerPort": 8080, "hostPort": HOST_PORT,
                               "hostIp": "127.0.0.1"}]
    return name, config


def sandbox_netns(status: dict[str, Any]) -> str:
    """The sandbox's network namespace path, from a verbose PodSandboxStatus."""
    info = json.loads(status["info"]["info"])
    path = info["runtimeSpec"]["linux"]["namespaces"]
    for ns in path:
        if ns["type"] == "network":
            return ns["path"]
    raise AssertionError("the sandbox has no network namespace")


# ---------------------------------------------------------------- containerd

CONFIG = """\
version = 3
root = "{root}"
state = "{state}"
temp = "{tmp}"
# the daemon's own cgroup stays ours; sandboxes get theirs from the CRI cgroupParent
oom_score = 0

[grpc]
  address = "{socket}"

[ttrpc]
  address = "{socket}.ttrpc"

[debug]
  level = "info"
{metrics}
[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "{opt}"

  [plugins."io.containerd.nri.v1.nri"]
    disable = true

  [plugins."io.containerd.cri.v1.images"]
    snapshotter = "native"
    [plugins."io.containerd.cri.v1.images".pinned_images]
      sandbox = "{image}"

  [plugins."io.containerd.cri.v1.runtime"]
    # runc cannot lower oom_score_adj below our own without CAP_SYS_RESOURCE
    restrict_oom_score_adj = true
    disable_apparmor = true
    enable_cdi = {enable_cdi}
    cdi_spec_dirs = {cdi_spec_dirs}
    netns_mounts_under_state_dir = {netns_under_state}

    [plugins."io.containerd.cri.v1.runtime".containerd]
      default_runtime_name = "runc"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
          BinaryName = "{runc}"
          Root = "{runc_root}"
          SystemdCgroup = false

    [plugins."io.containerd.cri.v1.runtime".cni]
      bin_dirs = {cni_bin_dirs}
      conf_dir = "{cni_conf_dir}"
      max_conf_num = 1

  [plugins."io.containerd.grpc.v1.cri"]
    disable_tcp_service = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
"""


def containerd_config(workdir: Path, *, socket: Path | str, state: Path | str,
                      cni_bin_dirs: list[str], cni_conf_dir: Path | str,
                      cdi_spec_dirs: list[str] | None = None,
                      netns_under_state: bool = False,
                      metrics_address: str | None = None) -> str:
    """The config.toml of a test-owned containerd whose root/, tmp/, opt/ and runc/ are
    under `workdir`: the CRI with the sandbox image, runc (cgroupfs) and the CNI dirs
    given; CDI on for `cdi_spec_dirs` (the kubelet passes the devices a DRA driver
    prepared), off when None; the sandboxes' netns mounts under `state` when
    `netns_under_state` (else /run/netns); its Prometheus metrics (the CRI's
    network_plugin_operations among them) served at `metrics_address` ("host:port",
    loopback) when given, else none."""
    return CONFIG.format(
        root=workdir / "root", state=state, tmp=workdir / "tmp", opt=workdir / "opt",
        socket=socket, image=SANDBOX_IMAGE, runc=RUNC, runc_root=workdir / "runc",
        enable_cdi=json.dumps(cdi_spec_dirs is not None),
        cdi_spec_dirs=json.dumps(cdi_spec_dirs or []),
        netns_under_state=json.dumps(netns_under_state),
        metrics=(f'\n[metrics]\n  address = "{metrics_address}"\n' if metrics_address else ""),
        cni_bin_dirs=json.dumps(cni_bin_dirs), cni_conf_dir=cni_conf_dir)


class Containerd:
    """A test-owned containerd (a context manager): everything under `workdir`
    (config.toml, root/, state/, containerd.sock, logs/containerd.log).

    Attributes: workdir, bin_dir, socket, log, cri (a Cri on its socket)."""

    def __init__(self, workdir: Path, cni_bin_dirs: list[Path], cni_conf_dir: Path,
                 bins: Path | None = None):
        self.workdir = Path(workdir).resolve()
        self.bin_dir = require_binaries(bins)
        self.cni_bin_dirs = [Path(d) for d in cni_bin_dirs]
        self.cni_conf_dir = Path(cni_conf_dir)
        self.socket = self.workdir / "containerd.sock"
        self.log = self.workdir / "logs" / "containerd.log"
        self.config = self.workdir / "config.toml"
        self.cri = Cri(self.bin_dir / "criclient", f"unix://{self.socket}")
        self._proc: _Process | None = None

    @classmethod
    def start(cls, workdir: Path, cni_bin_dirs: list[Path], cni_conf_dir: Path,
              bins: Path | None = None, timeout: float = READY_TIMEOUT) -> Containerd:
        """Write the config, start containerd, wait until its CRI answers Version
        (up to `timeout` s), import and pin the sandbox image. ClusterError (with the
        log's tail) on failure, after stopping what started."""
        return started(cls(workdir, cni_bin_dirs, cni_conf_dir, bins), timeout)

    def __enter__(self) -> Containerd:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _start(self, timeout: float) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True, mode=0o700)
        STARTED.append(self.workdir)
        for d in ("root", "state", "tmp", "opt", "runc"):
            (self.workdir / d).mkdir(exist_ok=True, mode=0o700)
        self.config.write_text(containerd_config(
            self.workdir, socket=self.socket, state=self.workdir / "state",
            cni_bin_dirs=[str(d) for d in self.cni_bin_dirs],
            cni_conf_dir=self.cni_conf_dir, netns_under_state=True))
        # The shim is found on PATH, next to containerd itself.
        env_path = f"{self.bin_dir}:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"
        self._proc = _Process("containerd", [
            "env", f"PATH={env_path}", str(self.bin_dir / "containerd"),
            "--config", str(self.config)], self.log)
        self._proc.start()
        wait_cri_ready(self._proc, self.socket, self.cri, timeout)
        image = sandbox_image(self.bin_dir / "pause", self.workdir / "pause.tar")
        self.ctr("images", "import", "--all-platforms", str(image))

    def ctr(self, *args: str) -> str:
        """Run `ctr` against this containerd in the kubelet's namespace; stdout."""
        p = subprocess.run([str(self.bin_dir / "ctr"), "--address", str(self.socket),
                            "--namespace", K8S_NAMESPACE, *args],
                           capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            raise ClusterError(f"ctr {' '.join(args)} failed: {p.stderr.strip()}")
        return p.stdout

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.running

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> None:
        """Stop and remove every sandbox still listed (the kubelet's garbage
        collection), stop containerd, end leftover shims, undo mounts under workdir and
        remove the sandboxes' cgroups. Idempotent; ClusterError naming what failed."""
        errors = []
        if self.running:
            try:
                self.cri.remove_all()
            except (CriError, ClusterError, subprocess.TimeoutExpired) as e:
                errors.append(f"removing sandboxes: {e}")
        if self._proc is not None:
            try:
                self._proc.stop()
            except ClusterError as e:
                errors.append(str(e))
            self._proc = None
        kill_shims(self.socket)
        unmount_under(self.workdir)
        remove_cgroups()
        if _SHIM_SOCKET_ROOT_OURS:
            for d in (SHIM_SOCKET_ROOT / "s", SHIM_SOCKET_ROOT):
                try:
                    d.rmdir()  # only when empty: another containerd's sockets stay
                except OSError:
                    pass
        if errors:
            raise ClusterError("; ".join(errors))


# ---------------------------------------------------------------- cleanup and leaks

def shim_pids(socket: Path) -> list[int]:
    """PIDs of containerd-shim-runc-v2 processes serving the containerd at `socket`."""
    out = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"containerd-shim-runc-v2") and str(socket).encode() in argv:
            out.append(int(cmdline.parent.name))
    return out


def kill_shims(socket: Path) -> None:
    for pid in shim_pids(socket):
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass


def mounts_under(path: Path) -> list[str]:
    """Mount points at or below `path`, deepest first."""
    prefix = str(path)
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mnt = line.split()[4].replace("\\040", " ")
        if mnt == prefix or mnt.startswith(prefix + "/"):
            out.append(mnt)
    return sorted(out, key=len, reverse=True)


def unmount_under(path: Path) -> None:
    for mnt in mounts_under(path):
        subprocess.run(["umount", "-l", mnt], capture_output=True)


def test_cgroups() -> list[Path]:
    """cgroup dirs below CGROUP_PARENT in every v1 hierarchy (and v2), deepest first."""
    out: list[Path] = []
    for top in [CGROUP_ROOT, *CGROUP_ROOT.iterdir()] if CGROUP_ROOT.exists() else []:
        base = top / CGROUP_PARENT.lstrip("/")
        if base.is_dir():
            out += [p for p in base.rglob("*") if p.is_dir()] + [base]
    return sorted(set(out), key=lambda p: len(p.parts), reverse=True)


test_cgroups.__test__ = False  # type: ignore[attr-defined]  # not a pytest test


def remove_cgroups() -> None:
    for cg in test_cgroups():
        try:
            cg.rmdir()
        except OSError:
            pass


def leaks() -> list[str]:
    """What the test-owned containerds of this process left: shims, mounts under their
    dirs, sandbox cgroups, libcni cache entries and portmap rules of their sandboxes,
    and /run/containerd when it was not there before and this process started one."""
    out = []
    for workdir in STARTED:
        out += [f"process {pid} containerd-shim-runc-v2"
                for pid in shim_pids(workdir / "containerd.sock")]
        out += [f"mount {m}" for m in mounts_under(workdir)]
    out += [f"cgroup {cg}" for cg in test_cgroups()]
    out += [f"libcni cache {p}" for sid in sorted(SANDBOXES) for p in libcni_cache_entries(sid)]
    if SANDBOXES:
        nat = iptables_nat().splitlines()
        out += [f"iptables nat rule {rule}" for rule in nat if any(sid in rule for sid in SANDBOXES)]
    # only a process that started a containerd here can have left it: a real node
    # (node.py) makes the dir as its mount point while it runs, in another test session
    if STARTED and _SHIM_SOCKET_ROOT_OURS and SHIM_SOCKET_ROOT.exists():
        out.append(f"dir {SHIM_SOCKET_ROOT}")
    return out


# ---------------------------------------------------------------- a node

LIBCNI_CACHE = Path("/var/lib/cni/results")  # libcni's result cache (containerd sets no other)
# Sandbox IDs run through a Cri in this process, for leaks() of libcni cache entries.
SANDBOXES: set[str] = set()


def libcni_cache() -> set[str]:
    """The names of libcni's cached results on this host."""
    return {p.name for p in LIBCNI_CACHE.iterdir()} if LIBCNI_CACHE.is_dir() else set()


def netns_links(netns_path: str) -> list[str]:
    """Interface names in the netns at `netns_path` (containerd's bind mount under its
    state dir, not in /var/run/netns, so `ip -n` cannot name it)."""
    p = subprocess.run(["nsenter", f"--net={netns_path}", "ip", "-j", "link", "show"],
                       capture_output=True, text=True, check=True)
    return sorted(link["ifname"] for link in json.loads(p.stdout))


def iptables_nat() -> str:
    """The nat table's rules (`iptables -t nat -S`), where portmap puts its DNAT rules."""
    return subprocess.run(["iptables", "-t", "nat", "-S"], capture_output=True, text=True,
                          check=True).stdout


def libcni_cache_entries(sandbox_id: str) -> list[Path]:
    """libcni's cached results for a sandbox (<network>-<container ID>-<ifname>)."""
    if not LIBCNI_CACHE.is_dir():
        return []
    return [p for p in LIBCNI_CACHE.iterdir() if f"-{sandbox_id}-" in p.name]


@dataclass
class Node:
    """A node as a cluster admin sets it up with netattach's DaemonSet, under `root`:
    bin/ (netattach installed by `netattach install --once` from the built artifact;
    the runtime also searches `plugin_dirs` for the children), net.d/ (only
    00-netattach.conflist, and the kubeconfig under netattach.d/), primary/ (the
    cluster default network's conflist, `clusterNetwork`), sa/ (the ServiceAccount
    volume), and containerd (`Containerd`) pointed at them.

    The netattach state dir, the host-local data dir and the log dir are the HostEnv's
    (state_dir, ipam_dir, log_dir), so its checks apply."""
    root: Path
    primary: Path
    plugin_dirs: list[Path]
    install_args: list[str]
    containerd: Containerd | None = None

    @property
    def bin_dir(self) -> Path:
        return self.root / "bin"

    @property
    def conf_dir(self) -> Path:
        return self.root / "net.d"

    @property
    def conflist(self) -> Path:
        return self.conf_dir / "00-netattach.conflist"

    @property
    def cri(self) -> Cri:
        assert self.containerd is not None, "the node's containerd is not running"
        return self.containerd.cri

    def install(self, netattach: str, *extra: str) -> subprocess.CompletedProcess:
        """Run `netattach install --once` as the DaemonSet's init container would, with
        the node's paths and `extra` options; returns the finished process (check it)."""
        return subprocess.run([netattach, "install", "--once", *self.install_args, *extra],
                              capture_output=True, text=True, timeout=120)


def node_setup(cluster, env, netattach: str, plugin_dirs: list[Path], bridge: str,
               subnet: str, *install_extra: str) -> Node:
    """Lay out a node under env.root/node for `cluster` and install netattach (the
    artifact `netattach`) on it; containerd is not started yet (`start_containerd`).

    The cluster default network is a CNI 1.1.0 conflist (bridge `bridge` with
    host-local on `subnet`, gateway and default route, then portmap and bandwidth with
    their capabilities, as a kubeadm-style node has; the bridge also declares dns,
    cgroupPath and io.kubernetes.cri.pod-annotations), so the runtime sends STATUS and
    the runtimeConfig of every capability containerd knows. Raises ClusterError with the installer's
    output if it fails."""
    from .cluster import service_account_token
    from .daemon import NODE_NAME
    from .serviceaccount import write_sa
    root = env.root / "node"
    for d in ("bin", "net.d", "primary", "sa"):
        (root / d).mkdir(parents=True, exist_ok=True, mode=0o700)
    primary = root / "primary" / "10-cluster.conflist"
    primary.write_text(json.dumps({"cniVersion": "1.1.0", "name": "cluster-net", "plugins": [
        {"type": "bridge", "bridge": bridge, "isGateway": True, "ipMasq": False,
         "ipam": {"type": "host-local", "subnet": subnet, "dataDir": str(env.ipam_dir),
                  "routes": [{"dst": "0.0.0.0/0"}]},
         # declared so the runtime sends them too (the bridge ignores them)
         "capabilities": {"dns": True, "cgroupPath": True,
                          "io.kubernetes.cri.pod-annotations": True}},
        {"type": "portmap", "capabilities": {"portMappings": True}},
        {"type": "bandwidth", "capabilities": {"bandwidth": True}},
    ]}, indent=2))
    # bound to a pod on the node, as the installer pod's projected token is
    write_sa(root / "sa", service_account_token(cluster, node=NODE_NAME), 1,
             cluster.ca_file.read_bytes())
    node = Node(root=root, primary=primary, plugin_dirs=list(plugin_dirs), install_args=[
        "--bin-dir", str(root / "bin"), "--host-bin-dir", str(root / "bin"),
        "--conf-dir", str(root / "net.d"), "--host-conf-dir", str(root / "net.d"),
        "--cni-dir", str(env.state_dir), "--service-account-dir", str(root / "sa"),
        "--api-server", cluster.server, "--primary-config", str(primary),
        "--primary-timeout", "30", "--log-level", "debug",
        "--log-file", str(env.log_dir / "netattach.log"),
        "--run-dir", str(root / "installer-run")])  # the pod's own dir: the record
    p = node.install(netattach, *install_extra)
    if p.returncode != 0:
        raise ClusterError(f"netattach install --once failed ({p.returncode}): "
                           f"{p.stderr.strip()[-3000:]}")
    return node


def start_containerd(node: Node, workdir: Path) -> Containerd:
    """Start the node's containerd (CNI bin dirs: the node's, then `plugin_dirs`)."""
    node.containerd = Containerd.start(workdir, [node.bin_dir, *node.plugin_dirs],
                                       node.conf_dir)
    return node.containerd
