"""`netattach install` as the DaemonSet runs it: real files in temp dirs stand for the
host's CNI bin and conf dirs and the pod's ServiceAccount volume; the installer is a
real subprocess (the console script, or the PyInstaller artifact when NETATTACH_EXE is
set, see netattach_testbed.scenario.netattach_command). Waits poll with deadlines."""
from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml

from netattach import __version__, install
from netattach.cni.chain import NetworkConfig
from netattach.cni.errors import CniError
from netattach.cni.version import SUPPORTED_VERSIONS, config_version
from netattach.install import primary as install_primary
from netattach.node import atomicfile
from netattach.node.logsetup import LOG_LEVELS
from netattach.spec.netconf import parse_netconf
from netattach_testbed.scenario import netattach_command
from netattach_testbed.serviceaccount import CA, wait_for, write_sa

POLL = "0.1"
# netattach's own capability in every conflist it writes (networks.runtime_pod_annotations)
POD_ANNOTATIONS = "io.kubernetes.cri.pod-annotations"
PRIMARY = {"cniVersion": "0.3.1", "name": "k8s-pod-network", "plugins": [
    {"type": "bridge", "bridge": "cni0", "ipam": {"type": "host-local"},
     "capabilities": {"ips": True}},
    {"type": "portmap", "capabilities": {"portMappings": True, "bandwidth": False}},
    {"type": "bandwidth", "capabilities": {"bandwidth": True}}]}


def write_atomically(path: Path, doc: dict) -> None:
    tmp = path.parent / f".{path.name}.test-tmp"
    tmp.write_text(json.dumps(doc))
    os.rename(tmp, path)


def artifact_file(path: Path, tag: str, size: int = 4 << 20) -> bytes:
    """A fake single-file artifact: a real ELF executable (readlink; the kernel ignores
    bytes after its segments, as PyInstaller's onefile appends its archive) followed by
    `tag` and padding to `size` bytes, so that a torn copy would show."""
    elf = Path(shutil.which("readlink")).read_bytes()
    data = elf + tag.encode() + b"#" * (size - len(elf) - len(tag))
    path.write_bytes(data)
    path.chmod(0o755)
    return data


def artifact_dir(path: Path, tag: str) -> bytes:
    """A fake PyInstaller onedir: `netattach` is a real ELF executable (a copy of
    readlink: `netattach -f /proc/self/exe` prints the file the kernel exec'd, which is
    how the bootloader finds `_internal/` beside it), `_internal/` differs per `tag`.
    Returns the executable's bytes."""
    (path / "_internal" / "lib").mkdir(parents=True)
    shutil.copy(shutil.which("readlink"), path / "netattach")
    (path / "_internal" / "version").write_text(tag + "\n")
    (path / "_internal" / "lib" / "libfake.so").write_bytes(tag.encode() * 100_000)
    (path / "_internal" / "lib" / "libfake.so.1").symlink_to("libfake.so")
    return (path / "netattach").read_bytes()


def as_primary(config: dict, path: str = "/x") -> install_primary.Primary:
    """The Primary find_primary makes of `config` at `path`."""
    return install_primary.Primary(path, config, config_version(config))


def is_frozen_command() -> bool:
    with open(netattach_command(), "rb") as f:
        return f.read(2) != b"#!"


class Node:
    """The host paths of one test and the installer's command line for them."""

    def __init__(self, root: Path):
        self.root = root
        self.bin = root / "host/opt/cni/bin"
        self.conf = root / "host/etc/cni/net.d"
        self.sa = root / "serviceaccount"
        self.run_dir = root / "pod-run"  # the DaemonSet's emptyDir: the record (--check)
        self.conf.mkdir(parents=True)
        self.bin.mkdir(parents=True)
        write_sa(self.sa, "token-generation-1-3f9a", 1)
        self.source = root / "artifact"
        self.source_bytes = artifact_file(self.source, "v1", size=64 << 10)
        self.procs: list[tuple[subprocess.Popen, Path, Path]] = []
        # The API server: a loopback port bound and never listened on, so every request
        # is refused at once (and none leaves the machine): a stop gets no answer.
        # Plain HTTP: the ServiceAccount's CA here is no certificate.
        self.refusing = socket.socket()
        self.refusing.bind(("127.0.0.1", 0))
        self.api_server = f"http://127.0.0.1:{self.refusing.getsockname()[1]}"

    @property
    def ours(self) -> Path:
        return self.conf / "00-netattach.conflist"

    @property
    def kubeconfig(self) -> Path:
        return self.conf / "netattach.d/netattach.kubeconfig"

    def argv(self, *extra: str, source: bool = True) -> list[str]:
        return [netattach_command(), "install", "--bin-dir", str(self.bin),
                "--conf-dir", str(self.conf), "--service-account-dir", str(self.sa),
                "--api-server", self.api_server, "--poll-interval", POLL,
                "--uninstall-timeout", "1", "--run-dir", str(self.run_dir),
                *(("--source", str(self.source)) if source else ()), *extra]

    def run(self, *extra: str, source: bool = True, env: dict | None = None
            ) -> tuple[int, str]:
        """Run to completion; returns (exit status, stderr). stdout must stay empty."""
        p = subprocess.run(self.argv(*extra, source=source), capture_output=True, timeout=30,
                           env=env)
        assert p.stdout == b"", f"stdout is not empty: {p.stdout!r}"
        return p.returncode, p.stderr.decode()

    def start(self, *extra: str) -> subprocess.Popen:
        """Start the watching installer; its output goes to files (no pipe to fill)."""
        n = len(self.procs)
        out, err = self.root / f"stdout{n}", self.root / f"stderr{n}"
        with open(out, "wb") as o, open(err, "wb") as e:
            proc = subprocess.Popen(self.argv(*extra), stdout=o, stderr=e)
        self.procs.append((proc, out, err))
        return proc

    def stderr(self, proc: subprocess.Popen) -> str:
        return next(e for p, _o, e in self.procs if p is proc).read_text()

    def stop(self, proc: subprocess.Popen, sig: int = signal.SIGTERM) -> tuple[int, str]:
        """Signal, wait; returns (exit status, stderr). stdout must stay empty."""
        proc.send_signal(sig)
        code = proc.wait(timeout=10)
        out = next(o for p, o, _e in self.procs if p is proc).read_bytes()
        assert out == b"", f"stdout is not empty: {out!r}"
        return code, self.stderr(proc)

    def conf_doc(self) -> dict | None:
        try:
            return json.loads(self.ours.read_text())
        except (FileNotFoundError, ValueError):
            return None

    def plugin(self) -> dict | None:
        doc = self.conf_doc()
        return doc.get("plugins", [None])[0] if doc else None

    def polls(self, proc: subprocess.Popen, n: int) -> None:
        """Return once the watching installer `proc` has run at least `n` whole polls
        since the call: a count, where sleeping n x --poll-interval is not one on a
        loaded machine (issue 9, defect 11). Every poll syncs the kubeconfig, then the
        conflist; the kubeconfig is deleted and its rewrite awaited n + 1 times, and
        between two rewrites lies at least one whole conflist sync."""
        for i in range(n + 1):
            self.kubeconfig.unlink(missing_ok=True)
            wait_for(lambda: self.kubeconfig.exists() or proc.poll() is not None,
                     f"poll {i + 1} of {n + 1} (the installer rewrites a deleted kubeconfig)")
            assert proc.poll() is None, self.stderr(proc)

    def netattach_leftovers(self) -> list[str]:
        """Anything of ours in the conf dir: the conflist or a temp file of it."""
        return sorted(n for n in os.listdir(self.conf) if "netattach" in n and
                      n != "netattach.d")


@pytest.fixture
def node(tmp_path):
    n = Node(tmp_path)
    yield n
    for proc, _o, _e in n.procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    n.refusing.close()


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under `root` with its kind, mode, size, mtime and link target."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            out[p] = (st.st_mode, st.st_size, st.st_mtime_ns,
                      os.readlink(p) if os.path.islink(p) else None)
    return out


# ---------------------------------------------------------------- one pass

def test_help_documents_every_flag():
    p = subprocess.run([netattach_command(), "install", "--help"], capture_output=True,
                       timeout=30)
    assert p.returncode == 0
    text = p.stdout.decode()
    for flag in ("--bin-dir", "--conf-dir", "--host-conf-dir", "--host-bin-dir", "--source",
                 "--service-account-dir", "--api-server", "--kubeconfig-name",
                 "--primary-config", "--primary-timeout", "--poll-interval",
                 "--namespace-isolation", "--global-namespaces", "--multus-namespace",
                 "--system-namespaces", "--log-level", "--log-file", "--installer-log-level",
                 "--readiness-indicator-file", "--no-cleanup-on-exit", "--cni-dir",
                 "--once", "--check", "--run-dir", "--netconf-file", "--default-networks",
                 "--plugin-conf-dir", "--auxiliary-cni-chain-name", "--api-timeout",
                 "--delegate-timeout", "--readiness-timeout", "--allowed-plugin-types",
                 "--max-networks-per-pod", "--max-same-network-per-pod",
                 "--claim-config-sources"):
        assert flag in text, flag


def test_once_installs_binary_kubeconfig_and_conflist(node):
    write_atomically(node.conf / "10-k8s.conflist", PRIMARY)
    env = {**os.environ, "KUBERNETES_SERVICE_HOST": "fd00:10:96::1",
           "KUBERNETES_SERVICE_PORT": "6443"}
    code, err = node.run("--once", "--namespace-isolation", "--global-namespaces", "default,shared",
                         "--log-file", "/var/log/netattach.log", "--log-level", "debug",
                         "--readiness-indicator-file", "/run/flannel/subnet.env",
                         "--allowed-plugin-types", "macvlan, host-local,macvlan",
                         "--claim-config-sources", "class",
                         "--cni-dir", "/var/lib/cni/na", "--api-server", "", env=env)
    assert code == 0, err
    # its first line: the release and the commit it was built from, as --version says
    version = subprocess.run([netattach_command(), "--version"], capture_output=True,
                             text=True, timeout=30).stdout
    commit = re.search(r"\(commit (\S+);", version)[1]
    assert f"netattach install {__version__} (commit {commit})" in err, err

    installed = node.bin / "netattach"
    assert installed.read_bytes() == node.source_bytes
    assert installed.stat().st_mode & 0o777 == 0o755

    assert node.kubeconfig.stat().st_mode & 0o777 == 0o600
    assert node.kubeconfig.parent.stat().st_mode & 0o777 == 0o700
    kc = yaml.safe_load(node.kubeconfig.read_text())
    cluster = kc["clusters"][0]["cluster"]
    assert cluster["server"] == "https://[fd00:10:96::1]:6443"
    assert cluster["certificate-authority"] == "/etc/cni/net.d/netattach.d/ca.crt"  # host path
    assert (node.kubeconfig.parent / "ca.crt").read_bytes() == CA
    assert kc["users"][0]["user"]["token"] == "token-generation-1-3f9a"
    assert kc["current-context"] == kc["contexts"][0]["name"]
    from lightkube.config.kubeconfig import KubeConfig  # the plugin's own loader
    loaded = KubeConfig.from_file(node.kubeconfig).get()
    assert loaded.cluster.server == "https://[fd00:10:96::1]:6443"
    assert loaded.user.token == "token-generation-1-3f9a"

    doc = node.conf_doc()
    assert doc["cniVersion"] == "0.3.1" and doc["name"] == "netattach-cni-network"
    assert doc["plugins"] == [{
        "type": "netattach", "name": "netattach-cni-network",
        "kubeconfig": "/etc/cni/net.d/netattach.d/netattach.kubeconfig",
        "clusterNetwork": "/etc/cni/net.d/10-k8s.conflist",
        # no confDir: the plugin searches /etc/cni/net.d, then /etc/cni/multus/net.d
        "cniDir": "/var/lib/cni/na", "binDir": "/opt/cni/bin",
        "logLevel": "debug", "logFile": "/var/log/netattach.log",
        "namespaceIsolation": True, "globalNamespaces": "default,shared",
        "readinessindicatorfile": "/run/flannel/subnet.env",
        "claimConfigSources": "class",
        "allowedPluginTypes": ["host-local", "macvlan"],
        "capabilities": {"bandwidth": True, "ips": True, "portMappings": True,
                         POD_ANNOTATIONS: True}}]
    conf = parse_netconf({**doc["plugins"][0], "cniVersion": doc["cniVersion"]})
    assert conf.cluster_network == "/etc/cni/net.d/10-k8s.conflist"
    assert conf.global_namespaces == ("default", "shared")
    assert conf.allowed_plugin_types == frozenset({"host-local", "macvlan"})
    assert conf.claim_config_sources == "class"

    assert node.netattach_leftovers() == ["00-netattach.conflist"]
    assert sorted(os.listdir(node.bin)) == ["netattach"]
    assert "token-generation-1" not in err


@pytest.mark.parametrize("extra", [
    {},
    {"log_file": "/var/log/na.log", "namespace_isolation": True, "global_namespaces": "a,b",
     "multus_namespace": "netattach", "system_namespaces": "kube-system, infra",
     "readiness_indicator_file": "/run/ready"},
])
@pytest.mark.parametrize("primary", [
    {"cniVersion": "1.0.0", "name": "one", "type": "ptp", "capabilities": {"mac": True}},
    {"name": "legacy", "type": "bridge"},
    {"cniVersion": "1.0.0", "cniVersions": ["1.1.0", "1.3.0"], "name": "future",
     "plugins": [{"type": "x"}]},
    PRIMARY,
])
def test_generated_conf_passes_parse_netconf(primary, extra):
    settings = install_primary.PluginSettings(
        conf_dir="/etc/cni/net.d", bin_dir="/opt/cni/bin", cni_dir="/var/lib/cni/netattach",
        kubeconfig="/etc/cni/net.d/netattach.d/netattach.kubeconfig", log_level="verbose",
        **extra)
    doc = json.loads(install_primary.render_conflist(
        "/etc/cni/net.d/10-x.conf", as_primary(primary, "/host/10-x.conf"), settings))
    assert doc["cniVersion"] in SUPPORTED_VERSIONS
    conf = parse_netconf({**doc["plugins"][0], "cniVersion": doc["cniVersion"]})
    assert conf.cluster_network == "/etc/cni/net.d/10-x.conf"
    assert conf.kubeconfig == settings.kubeconfig and conf.log_level == "verbose"
    if extra:
        assert conf.system_namespaces == ("kube-system", "infra")
        assert conf.multus_namespace == "netattach"
        assert conf.readiness_indicator_file == "/run/ready"


@pytest.mark.parametrize("level", sorted(LOG_LEVELS))
def test_every_plugin_log_level_is_a_log_level_flag_and_parses(level):
    parser = argparse.ArgumentParser()
    install.add_arguments(parser)
    args = parser.parse_args(["--log-level", level])
    settings = install_primary.PluginSettings(
        conf_dir="/etc/cni/net.d", bin_dir="/opt/cni/bin", cni_dir="/var/lib/cni/netattach",
        kubeconfig="/k", log_level=args.log_level)
    doc = json.loads(install_primary.render_conflist(
        "/etc/cni/net.d/10-x.conf", as_primary(PRIMARY), settings))
    conf = parse_netconf({**doc["plugins"][0], "cniVersion": doc["cniVersion"]})
    assert conf.log_level == level


def test_capabilities_of_the_primary():
    assert as_primary(PRIMARY).capabilities() == {
        "bandwidth": True, "ips": True, "portMappings": True}
    assert as_primary({"type": "x"}).capabilities() == {}


def test_meta_plugin_configs_are_not_the_primary(node):
    write_atomically(node.conf / "00-multus.conf",
                     {"cniVersion": "0.3.1", "name": "multus-cni-network", "type": "multus"})
    write_atomically(node.conf / "05-old-netattach.conflist", {
        "cniVersion": "1.0.0", "name": "x", "plugins": [{"type": "netattach"}]})
    (node.conf / "07-dir.conf").mkdir()  # directories are not configs (libcni)
    write_atomically(node.conf / "10-flannel.conflist", PRIMARY)
    write_atomically(node.conf / "99-loopback.conf",
                     {"cniVersion": "1.0.0", "name": "lo", "type": "loopback"})
    code, err = node.run("--once")
    assert code == 0, err
    assert node.plugin()["clusterNetwork"] == "/etc/cni/net.d/10-flannel.conflist"
    assert "00-multus.conf sorts before 00-netattach.conflist" in err


def test_candidates_are_libcnis_conf_files(node):
    """delegates.list_conf_files' rule (libcni ConfFiles), as the runtime sees the dir: a
    symlink is a candidate wherever it points, so one to a directory sorting first is a
    first config that cannot be read, waited for like a half-written one; a symlink to a
    config is read through; hidden names count; other extensions and real directories
    do not."""
    (node.root / "a-dir").mkdir()
    (node.conf / "07-dir.conf").mkdir()
    write_atomically(node.conf / "02-notes.txt", PRIMARY)
    write_atomically(node.root / "flannel.conflist", PRIMARY)
    write_atomically(node.conf / "10-flannel.conflist", PRIMARY)
    (node.conf / "05-link.conf").symlink_to(node.root / "a-dir")
    why = f"the first CNI config in {node.conf}, 05-link.conf, cannot be read (Is a directory)"
    code, err = node.run("--once", "--primary-timeout", "0.2")
    assert code == 1 and f"waiting: {why}" in err, err
    assert not node.ours.exists()
    code, err = node.run("--check")
    assert code == 1 and f"not ready: {why}" in err, err

    (node.conf / "05-link.conf").unlink()
    (node.conf / ".04-hidden.conflist").symlink_to(node.root / "flannel.conflist")
    code, err = node.run("--once")
    assert code == 0, err
    assert node.plugin()["clusterNetwork"] == "/etc/cni/net.d/.04-hidden.conflist"


def test_explicit_primary_config(node):
    write_atomically(node.conf / "10-a.conf", {"cniVersion": "1.0.0", "name": "a", "type": "a"})
    write_atomically(node.conf / "20-b.conf", {"cniVersion": "1.1.0", "name": "b", "type": "b"})
    code, err = node.run("--once", "--primary-config", "20-b.conf")
    assert code == 0, err
    assert node.plugin()["clusterNetwork"] == "/etc/cni/net.d/20-b.conf"
    assert node.conf_doc()["cniVersion"] == "1.1.0"


def test_timeout_waiting_for_the_primary_exits_1(node):
    """It gives up when the timeout is spent, not before (the run's own 30 s timeout is
    the guard against never giving up; how soon after 0.5 s it exits depends on the
    machine's load, which is no property of the installer)."""
    write_atomically(node.conf / "README.txt", {})
    started = time.monotonic()
    code, err = node.run("--primary-timeout", "0.5")
    assert code == 1
    assert time.monotonic() - started >= 0.5
    assert "gave up after 0.5 s (--primary-timeout)" in err and str(node.conf) in err
    assert "waiting: no CNI config" in err
    assert node.netattach_leftovers() == []


def test_missing_service_account_token_exits_1(node):
    write_atomically(node.conf / "10-a.conf", {"cniVersion": "1.0.0", "name": "a", "type": "a"})
    (node.sa / "token").unlink()
    code, err = node.run("--once")
    assert code == 1
    assert str(node.sa / "token") in err
    assert not node.ours.exists()


# ---------------------------------------------------------------- the binary

def test_binary_replaced_atomically_under_concurrent_readers(node):
    """Readers open and exec <bin>/netattach in a loop while the installer replaces it,
    file and onedir sources in turn: every read is one whole version, every exec works."""
    files = {tag: artifact_file(node.root / f"file-{tag}", tag) for tag in ("fa", "fb")}
    dirs = {tag: artifact_dir(node.root / f"dir-{tag}", tag) for tag in ("da", "db")}
    target = node.bin / "netattach"
    assert node.run("--once", "--source", str(node.root / "file-fa"), "--primary-timeout",
                    "0.1")[0] == 1  # no primary: binary and kubeconfig only
    assert target.read_bytes() == files["fa"]

    stop = threading.Event()
    bad: list[str] = []
    reads = execs = 0

    def reader():
        nonlocal reads
        valid = set(files.values()) | set(dirs.values())
        while not stop.is_set():
            try:
                data = target.read_bytes()
            except FileNotFoundError:
                bad.append("target missing")
                continue
            reads += 1
            if data not in valid:
                bad.append(f"torn read of {len(data)} bytes")

    # what `netattach -f /proc/self/exe` prints: the file the kernel exec'd, " (deleted)"
    # when a copy replaced it while it ran (the process runs on, from the old inode)
    exec_says = re.compile(rf"^{re.escape(str(node.bin))}/(\.netattach-[0-9a-f]{{12}}/)?"
                           r"netattach( \(deleted\))?$")

    def executor():
        nonlocal execs
        while not stop.is_set():
            p = subprocess.run([str(target), "-f", "/proc/self/exe"], capture_output=True)
            execs += 1
            if p.returncode != 0 or not exec_says.match(p.stdout.decode().strip()):
                bad.append(f"exec: {p.returncode} {p.stdout!r} {p.stderr!r}")

    threads = [threading.Thread(target=reader), threading.Thread(target=executor)]
    for t in threads:
        t.start()
    try:
        for source in ["file-fb", "dir-da", "dir-db", "file-fa", "dir-da", "file-fb",
                       "dir-db", "dir-da"]:
            code, err = node.run("--once", "--source", str(node.root / source),
                                 "--primary-timeout", "0.1")
            assert code == 1 and ("copied" in err or "pointed" in err), err
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not bad, bad[:5]
    assert reads > 10 and execs > 5
    assert os.readlink(target).endswith("/netattach")
    exe = subprocess.run([str(target), "-f", "/proc/self/exe"], capture_output=True).stdout
    assert exe.decode().strip() == os.path.realpath(target)
    assert (Path(os.path.realpath(target)).parent / "_internal/version").read_text() == "da\n"
    # the current version and the one just replaced (an ADD may still run from it)
    versions = sorted(n for n in os.listdir(node.bin) if n.startswith(".netattach-"))
    assert len(versions) == 2
    assert {os.readlink(target).split("/")[0]} < set(versions)
    assert sorted(os.listdir(node.bin)) == sorted(versions + ["netattach"])  # no temps


def test_onedir_copy_is_identical_and_skipped_when_current(node):
    artifact_dir(node.root / "dir-a", "a")
    artifact_dir(node.root / "dir-b", "b")
    artifact_dir(node.root / "dir-c", "c")
    for tag in "abc":
        assert node.run("--once", "--source", str(node.root / f"dir-{tag}"),
                        "--primary-timeout", "0.1")[0] == 1
    link = node.bin / "netattach"
    current = node.bin / os.readlink(link).split("/")[0]
    src = node.root / "dir-c"
    for path in src.rglob("*"):
        copy = current / path.relative_to(src)
        if path.is_symlink():
            assert os.readlink(copy) == os.readlink(path)
        elif path.is_file():
            assert copy.read_bytes() == path.read_bytes()
            assert copy.stat().st_mode & 0o777 == (0o755 if os.access(path, os.X_OK) else 0o644)
    assert len([n for n in os.listdir(node.bin) if n.startswith(".netattach-")]) == 2  # a pruned
    before = snapshot(node.bin)
    code, err = node.run("--once", "--source", str(src), "--primary-timeout", "0.1")
    assert "already the artifact" in err
    after = snapshot(node.bin)
    assert all(after[p] == before[p] for p in after)  # nothing copied or relinked
    gone = {os.path.relpath(p, node.bin).split("/")[0] for p in set(before) - set(after)}
    assert len(gone) == 1 and gone != {current.name}  # only the replaced version (b)


def test_default_source_is_the_frozen_artifact(node):
    write_atomically(node.conf / "10-a.conf", {"cniVersion": "1.0.0", "name": "a", "type": "a"})
    code, err = node.run("--once", source=False)
    assert code == 0, err
    installed = node.bin / "netattach"
    if is_frozen_command():
        artifact = Path(os.path.realpath(netattach_command()))
        assert Path(os.path.realpath(installed)).read_bytes() == artifact.read_bytes()
        if (artifact.parent / "_internal").is_dir():  # onedir: the whole bundle beside it
            assert (Path(os.path.realpath(installed)).parent / "_internal").is_dir()
        p = subprocess.run([str(installed), "--version"], capture_output=True, timeout=30)
        assert p.returncode == 0 and p.stdout.startswith(b"netattach ")
    else:
        assert "not a frozen build and no --source" in err
        assert not os.path.lexists(installed)


def test_refuses_a_directory_as_the_binary_and_never_follows_planted_temps(node):
    victim = node.root / "victim"
    victim.write_text("untouched")
    (node.bin / ".netattach.tmp-99999").symlink_to(victim)
    (node.conf / ".00-netattach.conflist.tmp-99999").symlink_to(victim)
    (node.conf / "netattach.d").mkdir(mode=0o700)
    (node.conf / "netattach.d/.netattach.kubeconfig.tmp-99999").symlink_to(victim)
    write_atomically(node.conf / "10-a.conf", {"cniVersion": "1.0.0", "name": "a", "type": "a"})
    code, err = node.run("--once")
    assert code == 0, err
    assert victim.read_text() == "untouched"
    assert sorted(os.listdir(node.bin)) == ["netattach"]
    assert node.netattach_leftovers() == ["00-netattach.conflist"]
    assert sorted(os.listdir(node.conf / "netattach.d")) == ["ca.crt", "netattach.kubeconfig"]

    (node.bin / "netattach").unlink()
    (node.bin / "netattach").mkdir()
    code, err = node.run("--once")
    assert code == 1
    assert f"{node.bin / 'netattach'} is a directory" in err
    (node.bin / "netattach").rmdir()

    elsewhere = node.root / "elsewhere"
    elsewhere.mkdir()
    shutil.rmtree(node.conf / "netattach.d")
    (node.conf / "netattach.d").symlink_to(elsewhere)  # the token would land elsewhere
    code, err = node.run("--once")
    assert code == 1
    assert f"{node.conf / 'netattach.d'} is not a directory" in err
    assert os.listdir(elsewhere) == []


def test_stale_temps_named_as_atomicfile_names_them_are_removed(node):
    """An installer killed mid-write leaves temps named by atomicfile.temp_path (another
    pid: this test's): the next one removes every kind, so the cleanup patterns match
    what is written."""
    kube_dir = node.conf / "netattach.d"
    kube_dir.mkdir(mode=0o700)
    bin_temp = atomicfile.temp_path(str(node.bin / "netattach"))
    stale = [atomicfile.temp_path(str(p)) for p in
             (node.ours, node.kubeconfig, kube_dir / "ca.crt")] + [bin_temp, bin_temp + ".link"]
    for path in stale:
        Path(path).write_text("stale")
    os.mkdir(bin_temp + ".d")  # a tree half copied
    (Path(bin_temp + ".d") / "netattach").write_text("stale")
    stale.append(bin_temp + ".d")
    write_atomically(node.conf / "10-a.conf", {"cniVersion": "1.0.0", "name": "a", "type": "a"})
    code, err = node.run("--once")
    assert code == 0, err
    assert all(not os.path.lexists(p) for p in stale), sorted(os.listdir(node.bin))
    assert err.count("removed stale temp") == len(stale)
    assert sorted(os.listdir(node.bin)) == ["netattach"]
    assert node.netattach_leftovers() == ["00-netattach.conflist"]
    assert sorted(os.listdir(kube_dir)) == ["ca.crt", "netattach.kubeconfig"]


# ---------------------------------------------------------------- watching

def test_kubeconfig_follows_token_rotation(node):
    write_atomically(node.conf / "10-a.conf", {"cniVersion": "1.0.0", "name": "a", "type": "a"})
    proc = node.start()

    def token():
        try:
            return yaml.safe_load(node.kubeconfig.read_text())["users"][0]["user"]["token"]
        except (FileNotFoundError, TypeError):
            return None
    assert wait_for(token, "the first kubeconfig") == "token-generation-1-3f9a"
    write_sa(node.sa, "token-generation-2-77c1", 2)
    wait_for(lambda: token() == "token-generation-2-77c1", "the rotated token")
    assert node.kubeconfig.stat().st_mode & 0o777 == 0o600
    write_sa(node.sa, "token-generation-3-0b2e", 3, ca=CA + CA)
    wait_for(lambda: token() == "token-generation-3-0b2e", "the second rotation")
    wait_for(lambda: (node.kubeconfig.parent / "ca.crt").read_bytes() == CA + CA,
             "the rotated CA")
    node.kubeconfig.unlink()
    wait_for(lambda: token() == "token-generation-3-0b2e", "the deleted kubeconfig rewritten")

    code, err = node.stop(proc)
    assert code == 0
    assert err.count("ServiceAccount token rotated") == 2
    assert "was deleted or edited" in err
    assert "token-generation" not in err  # never the token itself
    assert node.kubeconfig.exists()  # kept: DEL of running pods needs it


def test_conflist_follows_the_primary(node):
    proc = node.start()
    wait_for(lambda: "waiting: no CNI config" in node.stderr(proc), "the installer waiting")
    assert not node.ours.exists()  # §6.1: nothing before the default network

    write_atomically(node.conf / "10-calico.conflist", PRIMARY)
    plugin = wait_for(node.plugin, "our conflist after the primary")
    assert plugin["clusterNetwork"] == "/etc/cni/net.d/10-calico.conflist"
    assert plugin["capabilities"] == {"bandwidth": True, "ips": True, "portMappings": True,
                                      POD_ANNOTATIONS: True}
    assert node.conf_doc()["cniVersion"] == "0.3.1"

    changed = {**PRIMARY, "cniVersion": "1.0.0",
               "plugins": [{"type": "calico", "capabilities": {"mac": True}}]}
    write_atomically(node.conf / "10-calico.conflist", changed)
    wait_for(lambda: node.conf_doc() and node.conf_doc()["cniVersion"] == "1.0.0",
             "the primary's new cniVersion")
    assert node.plugin()["capabilities"] == {"mac": True, POD_ANNOTATIONS: True}

    write_atomically(node.conf / "05-cilium.conf", {"cniVersion": "1.1.0", "name": "c",
                                                    "type": "cilium-cni"})
    wait_for(lambda: node.plugin()["clusterNetwork"] == "/etc/cni/net.d/05-cilium.conf",
             "the switch to the earlier-sorting primary")
    # netattach's own capability only: the pod's annotations, without a GET
    assert node.plugin()["capabilities"] == {POD_ANNOTATIONS: True}
    (node.conf / "05-cilium.conf").unlink()
    wait_for(lambda: node.plugin()["clusterNetwork"] == "/etc/cni/net.d/10-calico.conflist",
             "the switch back")

    node.ours.unlink()
    wait_for(node.plugin, "our deleted conflist rewritten")
    node.ours.write_text('{"edited": true}')
    wait_for(lambda: node.plugin() and node.plugin()["type"] == "netattach",
             "our edited conflist rewritten")

    (node.conf / "10-calico.conflist").unlink()
    wait_for(lambda: not node.ours.exists(), "our conflist removed with the primary")
    write_atomically(node.conf / "20-again.conf", {"cniVersion": "1.0.0", "name": "a",
                                                   "type": "a"})
    wait_for(node.plugin, "our conflist for the next primary")

    code, err = node.stop(proc)
    assert code == 0
    assert node.netattach_leftovers() == ["00-netattach.conflist"]  # a restart keeps it
    for said in ("is now", "changed: rewrote", "was deleted: rewrote",
                 "was edited by someone else", "there is no cluster default network config"):
        assert said in err, said


def test_half_written_primary_is_ignored_until_valid(node):
    write_atomically(node.conf / "99-loopback.conf",
                     {"cniVersion": "1.0.0", "name": "lo", "type": "loopback"})
    full = json.dumps(PRIMARY)
    primary = node.conf / "10-flannel.conflist"
    primary.write_text(full[:40])  # written in place, not yet complete
    proc = node.start()
    wait_for(lambda: "10-flannel.conflist, is not valid JSON yet" in node.stderr(proc),
             "the installer waiting for the half-written file")
    node.polls(proc, 5)  # five more: still nothing, and never the later loopback conf
    assert not node.ours.exists()
    with open(primary, "a") as f:
        f.write(full[40:])
    plugin = wait_for(node.plugin, "our conflist once the primary is whole")
    assert plugin["clusterNetwork"] == "/etc/cni/net.d/10-flannel.conflist"

    primary.write_text(full[:10])  # rewritten in place again: ours stays as it is
    node.polls(proc, 5)
    assert node.plugin()["clusterNetwork"] == "/etc/cni/net.d/10-flannel.conflist"
    code, _err = node.stop(proc)
    assert code == 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_without_an_answer_keeps_everything(node, sig):
    """A signal while the primary churns, and the API server refuses every connection:
    no answer is no uninstall (uninstall.py), so the node keeps attaching pods with
    netattach: the conflist stays, whole and current, with no temp file beside it, and
    so do the binary and the kubeconfig. The API server was asked more than once."""
    primary = node.conf / "10-a.conflist"
    write_atomically(primary, PRIMARY)
    proc = node.start()
    wait_for(node.plugin, "our conflist")
    stop = threading.Event()

    def churn():
        n = 0
        while not stop.is_set():
            n += 1
            write_atomically(primary, {**PRIMARY, "name": f"n{n}",
                                       "cniVersion": ("0.3.1", "1.0.0")[n % 2]})
            time.sleep(0.005)
    t = threading.Thread(target=churn)
    t.start()
    try:
        # the installer is following the churn (not merely started) when the signal comes
        wait_for(lambda: "changed: rewrote" in node.stderr(proc), "a rewrite for the churn")
        code, err = node.stop(proc, sig)
    finally:
        stop.set()
        t.join()
    assert code == 0, err
    assert node.netattach_leftovers() == ["00-netattach.conflist"]
    assert node.plugin()["clusterNetwork"] == "/etc/cni/net.d/10-a.conflist"
    assert node.plugin()["type"] == "netattach"  # whole, never torn
    assert (node.bin / "netattach").read_bytes() == node.source_bytes
    assert node.kubeconfig.exists()
    name = signal.Signals(sig).name
    assert f"{name} received; netattach stays installed on this node: no answer" in err
    assert "asking again" in err and "ConnectionRefusedError" in err


def test_sigterm_without_cleanup_keeps_the_conflist(node):
    write_atomically(node.conf / "10-a.conf", {"cniVersion": "1.0.0", "name": "a", "type": "a"})
    proc = node.start("--no-cleanup-on-exit")
    wait_for(node.plugin, "our conflist")
    code, err = node.stop(proc)
    assert code == 0, err
    assert node.netattach_leftovers() == ["00-netattach.conflist"]
    assert "--no-cleanup-on-exit" in err


def test_rolling_update_old_installer_leaves_the_conflist_to_the_new_one(node):
    """maxSurge: the new installer runs before the old one gets SIGTERM. The old one
    sees it is not the last (installer.lock) and keeps everything without asking the
    API server; so does the last one when no answer comes."""
    write_atomically(node.conf / "10-a.conf", {"cniVersion": "1.0.0", "name": "a", "type": "a"})
    old = node.start()
    wait_for(node.plugin, "our conflist")
    new = node.start()
    wait_for(lambda: "presence held" in node.stderr(new), "the new installer running")
    code, err = node.stop(old)
    assert code == 0, err
    assert "another netattach installer runs on this node" in err
    assert "no answer" not in err  # the API server was not asked
    assert node.netattach_leftovers() == ["00-netattach.conflist"]
    code, err = node.stop(new)
    assert code == 0, err
    assert "stays installed on this node: no answer" in err
    assert node.netattach_leftovers() == ["00-netattach.conflist"]


def test_an_installer_starting_during_a_removal_waits_then_installs_afresh(node):
    """The race of a reinstall with the removal of netattach's files: while a removal
    holds the presence lock exclusively (here the test, as
    nodefiles.remove_when_unused does), a starting installer waits and writes nothing;
    when the removal ends having removed netattach.d with the lock file in it, the
    installer installs afresh on a new lock file (never on the removed one, which
    would let the next removal run beside it)."""
    write_atomically(node.conf / "10-a.conf", {"cniVersion": "1.0.0", "name": "a", "type": "a"})
    kube_dir = node.conf / "netattach.d"
    kube_dir.mkdir(mode=0o700)
    lock = os.open(kube_dir / "installer.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        proc = node.start()
        wait_for(lambda: "lock" in Path(f"/proc/{proc.pid}/wchan").read_text(),
                 "the installer waiting for the presence lock")
        assert not node.ours.exists() and not (node.bin / "netattach").exists()
        shutil.rmtree(kube_dir)  # the removal's last step
    finally:
        os.close(lock)
    wait_for(node.plugin, "the installer installing afresh")
    assert "installing afresh" in node.stderr(proc)
    held = (kube_dir / "installer.lock").stat().st_ino
    probe = os.open(kube_dir / "installer.lock", os.O_RDWR)
    try:
        with pytest.raises(BlockingIOError):  # the installer holds the new one
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert os.fstat(probe).st_ino == held
    finally:
        os.close(probe)
    assert node.stop(proc)[0] == 0


def test_sigterm_while_waiting_for_the_primary(node):
    proc = node.start()
    wait_for(lambda: "waiting:" in node.stderr(proc), "the installer waiting")
    code, _err = node.stop(proc)
    assert code == 0
    assert node.netattach_leftovers() == []


# ---------------------------------------------------------------- the primary's CNI version

SUPPORTED = ", ".join(SUPPORTED_VERSIONS)


def conflist(version: object = None, **more) -> dict:
    doc = {"name": "p", "plugins": [{"type": "bridge"}], **more}
    return doc if version is None else {**doc, "cniVersion": version}


@pytest.mark.parametrize("primary", [
    conflist("0.3.1"), conflist(), conflist("1.1.0"), conflist("0.4.0"),
    conflist("0.4.0", cniVersions=["1.0.0", "1.1.0", "1.2.0"]),  # the highest supported
    conflist("1.2.0", cniVersions=["0.3.1", "1.0.0"]),
    conflist(cniVersions=["1.0.0"]), conflist("1.1.0", cniVersions=[]),
    conflist("1.2.0"), conflist("1.0"), conflist("2.0.0"), conflist("0.3.5"), conflist("x"),
    conflist(1), conflist("1.2.0", cniVersions=["1.2.0", "2.0.0"]),
])
def test_conflist_version_is_the_one_the_plugin_runs_the_primary_with(tmp_path, primary):
    """The conflist's cniVersion is the version the plugin's own config parser
    (chain.NetworkConfig) runs the primary with; a primary it refuses is no primary,
    and the reason names the file, its version and the supported list."""
    write_atomically(tmp_path / "10-p.conflist", primary)
    found = install_primary.find_primary(str(tmp_path))
    try:
        want = NetworkConfig.from_dict(primary, "10-p.conflist").cni_version
    except CniError:
        assert found.primary is None and not found.absent
        assert f"{tmp_path}, 10-p.conflist, has " in found.why
        assert repr(primary["cniVersion"]) in found.why and SUPPORTED in found.why
        return
    assert found.primary is not None, found.why
    settings = install_primary.PluginSettings(
        conf_dir="/etc/cni/net.d", bin_dir="/opt/cni/bin", cni_dir="/var/lib/cni/netattach",
        kubeconfig="/k", log_level="info")
    doc = json.loads(install_primary.render_conflist("/p", found.primary, settings))
    assert doc["cniVersion"] == want


@pytest.mark.parametrize("version", ["1.2.0", "1.0"])
def test_primary_with_a_version_the_plugin_refuses_is_not_used(node, version):
    """No conflist for it (an existing one is left as it is, as for a half-written
    primary), never a later file instead, the wait says why and --check is not ready."""
    primary = node.conf / "10-a.conflist"
    write_atomically(node.conf / "99-loopback.conf",
                     {"cniVersion": "1.0.0", "name": "lo", "type": "loopback"})
    write_atomically(primary, {**PRIMARY, "cniVersion": version})
    why = (f"the first CNI config in {node.conf}, 10-a.conflist, has unsupported "
           f"cniVersion '{version}'")

    def refused(*extra: str) -> str:
        code, err = node.run(*extra)
        assert code == 1, err
        assert why in err and SUPPORTED in err, err
        return err

    assert "waiting: " + why in refused("--once", "--primary-timeout", "0.2")
    assert not node.ours.exists()
    assert "not ready: " + why in refused("--check")

    write_atomically(primary, PRIMARY)
    assert node.run("--once")[0] == 0
    ours = node.ours.read_bytes()
    write_atomically(primary, {**PRIMARY, "cniVersion": version})
    refused("--once", "--primary-timeout", "0.2")
    assert node.ours.read_bytes() == ours
    refused("--check")

    code, err = node.run("--check", "--primary-config", str(primary))
    assert code == 1 and f"primary config {primary} has unsupported cniVersion" in err, err


def test_primary_cni_versions_list_is_honoured(node):
    write_atomically(node.conf / "10-a.conflist",
                     {**PRIMARY, "cniVersion": "0.4.0", "cniVersions": ["1.0.0", "1.2.0"]})
    code, err = node.run("--once")
    assert code == 0, err
    assert node.conf_doc()["cniVersion"] == "1.0.0"
    assert node.run("--check") == (0, "")


# ---------------------------------------------------------------- --check

def test_check_exit_codes_and_no_writes(node):
    write_atomically(node.conf / "10-a.conf", {"cniVersion": "1.0.0", "name": "a", "type": "a"})
    before = snapshot(node.root)
    code, err = node.run("--check")
    assert code == 1 and "not ready" in err
    assert snapshot(node.root) == before  # --check writes nothing

    assert node.run("--once")[0] == 0
    assert node.run("--check") == (0, "")

    write_sa(node.sa, "token-generation-2-aaaa", 2)  # rotated, nobody rewrote it
    code, err = node.run("--check")
    assert code == 1 and "kubeconfig" in err and "token-generation" not in err
    assert node.run("--once")[0] == 0 and node.run("--check")[0] == 0

    write_atomically(node.conf / "10-a.conf", {"cniVersion": "1.1.0", "name": "a", "type": "a"})
    code, err = node.run("--check")
    assert code == 1 and "00-netattach.conflist is missing or not current" in err
    assert node.run("--once")[0] == 0 and node.run("--check")[0] == 0

    artifact_file(node.source, "v2", size=64 << 10)  # a new image
    code, err = node.run("--check")
    assert code == 1 and "differs from the artifact" in err
    assert node.run("--once")[0] == 0 and node.run("--check")[0] == 0

    artifact_dir(node.root / "onedir", "d")
    assert node.run("--once", "--source", str(node.root / "onedir"))[0] == 0
    assert node.run("--check", "--source", str(node.root / "onedir"))[0] == 0
    assert node.run("--check")[0] == 1  # the file artifact is not what is installed

    (node.conf / "10-a.conf").unlink()
    code, err = node.run("--check", "--source", str(node.root / "onedir"))
    assert code == 1 and "no CNI config" in err


@pytest.mark.parametrize("config, why", [
    ({"cniVersion": "1.0.0", "type": "bridge"}, "missing 'name'"),
    ({"cniVersion": "1.0.0", "name": "x", "type": "bridge", "cniVersions": "1.0.0"},
     "cniVersions must be a list"),
])
def test_a_primary_the_plugin_cannot_load_is_not_used(tmp_path, config, why):
    """One owner: the installer asks the plugin's own loader (delegates.load_conf_file),
    so a primary every ADD would refuse never gets a conflist or a ready probe."""
    from netattach.install.primary import find_primary
    (tmp_path / "10-primary.conf").write_text(json.dumps(config))
    found = find_primary(str(tmp_path))
    assert found.primary is None and why in found.why and "every ADD would fail" in found.why


def _shim_prefix(src: Path) -> None:
    """The shim's interpreter in a fake onedir artifact (netattach.spec: shim/bin/python3)."""
    (src / "shim" / "bin").mkdir(parents=True)
    shutil.copy(shutil.which("readlink"), src / "shim" / "bin" / "python3")


def test_thick_mode_writes_the_shim_and_its_conflist(node):
    """--mode thick: the conflist names netattach-shim and the daemon's socket dir; the
    shim is a script whose `#!` names the installed artifact's interpreter by its host
    path (--host-bin-dir), rewritten when the artifact changes; --check sees both."""
    write_atomically(node.conf / "10-a.conf", {"cniVersion": "1.0.0", "name": "a", "type": "a"})
    thick = ("--mode", "thick", "--daemon-socket-dir", "/run/na", "--host-bin-dir", "/opt/b")
    for tag in ("a", "b"):
        src = node.root / f"dir-{tag}"
        artifact_dir(src, tag)
        _shim_prefix(src)
        code, err = node.run("--once", "--source", str(src), *thick)
        assert code == 0, err
        version = os.readlink(node.bin / "netattach").split("/")[0]
        shim = node.bin / "netattach-shim"
        assert not shim.is_symlink() and stat.S_IMODE(shim.stat().st_mode) == 0o755
        assert shim.read_text().startswith(f"#!/opt/b/{version}/shim/bin/python3 -SI\n")
        plugin = node.plugin()
        assert (plugin["type"], plugin["daemonSocketDir"]) == ("netattach-shim", "/run/na")
        assert node.run("--check", "--source", str(src), *thick)[0] == 0
    # a shim edited by hand (or left by an older release, a symlink) is not current
    shim.write_text(shim.read_text().replace("-SI", "-S"))
    code, err = node.run("--check", "--source", str(src), *thick)
    assert code == 1 and "netattach-shim is not the shim script for" in err, err
    shim.unlink()
    shim.symlink_to(f"{version}/shim/bin/python3")
    code, err = node.run("--check", "--source", str(src), *thick)
    assert code == 1 and "netattach-shim is not the shim script for" in err, err
    assert node.run("--once", "--source", str(src), *thick)[0] == 0
    assert not shim.is_symlink() and node.run("--check", "--source", str(src), *thick)[0] == 0
    shim.unlink()
    code, err = node.run("--check", "--source", str(src), *thick)
    assert code == 1 and "netattach-shim is not the shim script for" in err, err
    # thin mode on the same node: a thin conflist, no daemonSocketDir
    assert node.run("--once", "--source", str(src))[0] == 0
    assert node.plugin()["type"] == "netattach" and "daemonSocketDir" not in node.plugin()


def test_hotplug_is_written_in_thick_mode_and_refused_in_thin(node):
    """--hotplug writes the conflist key `hotplug` (the node daemon then changes running
    pods' attachments); thin mode has no daemon, so the flag is refused there."""
    write_atomically(node.conf / "10-a.conf", {"cniVersion": "1.0.0", "name": "a", "type": "a"})
    src = node.root / "dir"
    artifact_dir(src, "a")
    _shim_prefix(src)
    assert node.run("--once", "--source", str(src), "--mode", "thick")[0] == 0
    assert "hotplug" not in node.plugin()
    code, err = node.run("--once", "--source", str(src), "--mode", "thick", "--hotplug")
    assert code == 0, err
    assert node.plugin()["hotplug"] is True
    code, err = node.run("--once", "--source", str(src), "--hotplug")
    assert code == 1 and "--hotplug needs --mode thick" in err


def test_thick_mode_refuses_an_artifact_without_the_shim(node):
    write_atomically(node.conf / "10-a.conf", {"cniVersion": "1.0.0", "name": "a", "type": "a"})
    artifact_dir(node.root / "dir", "a")
    code, err = node.run("--once", "--source", str(node.root / "dir"), "--mode", "thick")
    assert code == 1 and "has no shim/bin/python3" in err


@pytest.mark.parametrize("host_bin_dir", ["opt/cni/bin", "/opt/cni bin", "/opt/cni\nbin",
                                          "/" + "d" * 100])
def test_thick_mode_refuses_a_host_bin_dir_no_shebang_can_name(node, host_bin_dir):
    """The shim's `#!` line holds the host path of its interpreter: a relative path, a
    blank or a newline (the kernel splits or ends the line there), or a line over 127
    bytes (kernels before 5.1 cut it) is refused at start, naming the flag."""
    write_atomically(node.conf / "10-a.conf", {"cniVersion": "1.0.0", "name": "a", "type": "a"})
    src = node.root / "dir"
    artifact_dir(src, "a")
    _shim_prefix(src)
    code, err = node.run("--once", "--source", str(src), "--mode", "thick",
                         "--host-bin-dir", host_bin_dir)
    assert code == 1 and "--host-bin-dir" in err and "`#!` line" in err, err
    assert not (node.bin / "netattach-shim").exists()
