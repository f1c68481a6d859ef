"""Multus CNI in the test bed, for the bench: the binaries `make testbin-multus` builds,
its identity in the API server, its thin plugin's configuration, and its thick mode's
daemon as a process of the bench.

Multus acts as its own ServiceAccounts, one per mode (so the audit log tells their
requests apart), each bound to a ClusterRole of exactly what that mode asks for:
netattach's (deploy/base/rbac.yaml) does not do, since Multus writes network-status with an
update of pods/status, not a patch, and its daemon lists and watches.

The daemon (`multus-daemon --config daemon-config.json`, "multusConfigFile": "auto", as
Multus deploys it) takes its API credentials only from the in-cluster paths
(/var/run/secrets/kubernetes.io/serviceaccount/) and KUBERNETES_SERVICE_HOST/PORT. It
runs in a mount namespace of its own where /run is a directory of the bench holding
those files, with the host's /run/netns bound in (slave propagation, so the pods' netns
made after its start are seen): nothing is written under the host's /run, and the
namespace ends with the process. On the real node (hack/bench_node.py) that mount
namespace is made from the node's (a slave of it): the node's /etc/cni/net.d,
/opt/cni/bin, /var/lib/cni and /run/netns, where the node's containerd execs the shim.
"""
from __future__ import annotations

import http.client
import json
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from netattach_testbed import cluster as cl

ROOT = Path(__file__).resolve().parents[2]
GOMOD = ROOT / "hack" / "testbin" / "multus" / "go.mod"
MODULE = "gopkg.in/k8snetworkplumbingwg/multus-cni.v4"
BINARIES = ("multus", "multus-shim", "multus-daemon")
NAMESPACE = "kube-system"
NODE_NAME = "test-node"  # scenario.pod's spec.nodeName
READY_TIMEOUT = 60.0  # hang guard for the daemon's caches and socket

# What each mode asks the API server for (Multus v4.2.3, pkg/k8sclient and the NAD
# client's SetNetworkStatus): the pod and its NADs, network-status by a GET of the pod
# then an update of pods/status, AddedInterface events (the recorder patches an event
# it sends again). The daemon reads pods and NADs from informers: list and watch.
RULES = {
    "thin": [
        ([""], ["pods"], ["get"]),
        ([""], ["pods/status"], ["update"]),
        (["k8s.cni.cncf.io"], ["network-attachment-definitions"], ["get"]),
        ([""], ["events"], ["create", "patch"]),
    ],
    "thick": [
        ([""], ["pods"], ["get", "list", "watch"]),
        ([""], ["pods/status"], ["update"]),
        (["k8s.cni.cncf.io"], ["network-attachment-definitions"], ["get", "list", "watch"]),
        ([""], ["events"], ["create", "patch"]),
    ],
}


def version() -> str:
    return cl.gomod_version(GOMOD, MODULE)


def bin_dir() -> Path:
    """$NETATTACH_MULTUS_BIN (as `make bench` sets it), else where `make testbin-multus`
    puts the binaries (same key as mk/testbin.mk: TESTBIN_MULTUS_DIR)."""
    env = os.environ.get("NETATTACH_MULTUS_BIN")
    if env:
        return Path(env)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "netattach" / "testbin" / f"multus-{version()}"


def require_binaries() -> Path:
    where = bin_dir()
    missing = [n for n in BINARIES if not os.access(where / n, os.X_OK)]
    if missing:
        raise cl.TestbinMissing(f"{', '.join(missing)} not found in {where} "
                                "(NETATTACH_MULTUS_BIN): run `make testbin-multus`")
    return where


def service_account(api: k8s.ApiClient, mode: str) -> str:
    """Create the ServiceAccount and ClusterRole(Binding) of Multus in `mode` ("thin" or
    "thick"); returns the ServiceAccount's name."""
    name = f"multus-{mode}"
    rbac = k8s.RbacAuthorizationV1Api(api)
    _create(lambda: k8s.CoreV1Api(api).create_namespaced_service_account(
        NAMESPACE, {"metadata": {"name": name}}))
    _create(lambda: rbac.create_cluster_role({"metadata": {"name": name}, "rules": [
        {"apiGroups": g, "resources": r, "verbs": v} for g, r, v in RULES[mode]]}))
    _create(lambda: rbac.create_cluster_role_binding({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}]}))
    return name


def _create(call) -> None:
    try:
        call()
    except ApiException as e:
        if e.status != 409:
            raise


def username(sa: str) -> str:
    """The user the API server (and its audit log) knows ServiceAccount `sa` as."""
    return f"system:serviceaccount:{NAMESPACE}:{sa}"


def thin_conf(kubeconfig: Path, cluster_network: str, conf_dir: Path, cni_dir: Path,
              bin_dir: Path, log_file: Path) -> dict[str, Any]:
    """The thin plugin's configuration: the keys netattach's own config shares with it,
    the same values, Multus' deployed log level."""
    return {"cniVersion": "1.0.0", "name": "multus-cni-network", "type": "multus",
            "kubeconfig": str(kubeconfig), "clusterNetwork": cluster_network,
            "confDir": str(conf_dir), "cniDir": str(cni_dir), "binDir": str(bin_dir),
            "logFile": str(log_file), "logLevel": "verbose"}


def daemon_config(*, log_file: Path, socket_dir: Path, autoconfig_dir: Path,
                  cni_config_dir: Path, conf_dir: Path, cni_dir: Path, bin_dir: Path,
                  cni_version: str = "0.3.1",
                  cluster_network: str | None = None) -> dict[str, Any]:
    """multus-daemon's config (`--config`) as Multus deploys it (multusConfigFile "auto":
    it finds the cluster default network in `autoconfig_dir` and writes the shim's
    00-multus.conf into `cni_config_dir`), with the given dirs. Its socket dir is the
    daemon's and the shim's (the shim reads it from 00-multus.conf). `cni_version`: the
    default network's: in auto mode Multus refuses a newer top-level version over an
    older primary.

    `cluster_network`: the cluster default network by name (looked up in `conf_dir`).
    The daemon copies every key of its config over each request's conf (pkg/server:
    overrideCNIConfigWithServerConfig), so this replaces what auto mode writes into
    00-multus.conf, the path of the default network's file. With a path to a .conflist
    Multus v4.2.3 keeps for DEL a re-encoding of the list that drops every
    plugin-specific key (types.LoadDelegateNetConfFromConfList): the default network's
    DEL fails (bridge: "no IP ranges specified") and its IP leaks; fixed upstream after
    v4.2.3 (k8snetworkplumbingwg/multus-cni#1521). By name Multus reads the file's own
    bytes, as in thin mode. (A shim conf of one's own, multusConfigFile not "auto", is
    no way out: v4.2.3's daemon then exits once its socket is up, nothing holds it.)"""
    conf = {"cniVersion": cni_version, "logFile": str(log_file), "logLevel": "verbose",
            "socketDir": str(socket_dir), "daemonSocketDir": str(socket_dir),
            "multusConfigFile": "auto", "multusAutoconfigDir": str(autoconfig_dir),
            "cniConfigDir": str(cni_config_dir), "confDir": str(conf_dir),
            "cniDir": str(cni_dir), "binDir": str(bin_dir)}
    if cluster_network is not None:
        conf["clusterNetwork"] = cluster_network
    return conf


def daemon_script() -> str:
    """sh -c script ($1 the daemon's run dir, $2 the binary, $3 its config), run in a
    new mount namespace (slave of the one it starts in): the in-cluster credentials'
    /run is the run dir, with the starting namespace's /run/netns bound in (slave, so
    the pods' netns mounted later are seen), then exec the daemon (same pid)."""
    return ('mount --rbind /run/netns "$1/netns" && mount --rbind "$1" /run && '
            'exec "$2" --config "$3"')


class Daemon:
    """multus-daemon of the bench, serving multus-shim on `<workdir>/socket`.

    Its config is daemon_config(): by default the bench's dirs, the shim's 00-multus.conf
    written into `<workdir>/net.d`. On a node (bench-node): `cni_config_dir`, `cni_dir`
    are the node's paths, `ns_argv` the prefix that runs a command in the node's mount
    namespace (its private mount namespace is then a slave of the node's: it sees the
    node's /etc/cni/net.d, /opt/cni/bin, /var/lib/cni, /run/netns) and `host_path` maps
    a node path to where this process sees it. The default (0.3.1) `cni_version` is the
    exec bench's default network's. `cluster_network`: daemon_config's (by name).
    """

    def __init__(self, workdir: Path, cluster: cl.Cluster, sa: str, autoconfig_dir: Path,
                 conf_dir: Path, bin_dir: Path, log_file: Path, *,
                 cni_config_dir: Path | None = None, cni_dir: Path | None = None,
                 cni_version: str = "0.3.1", node_name: str = NODE_NAME,
                 ns_argv: Callable[..., list[str]] | None = None,
                 host_path: Callable[[Path], Path] | None = None,
                 cluster_network: str | None = None):
        self.workdir = workdir
        self.socket_dir = workdir / "socket"
        self.conf_dir = cni_config_dir or workdir / "net.d"
        self.run_dir = workdir / "run"
        self.log_file = log_file
        self.host_conf_dir = host_path(self.conf_dir) if host_path else self.conf_dir
        secrets = self.run_dir / "secrets" / "kubernetes.io" / "serviceaccount"
        for d in (secrets, self.run_dir / "netns"):
            d.mkdir(parents=True, mode=0o700)
        self.host_conf_dir.mkdir(parents=True, mode=0o700, exist_ok=True)
        cl._write(secrets / "token", cl.service_account_token(cluster, NAMESPACE, sa), 0o600)
        cl._write(secrets / "ca.crt", cluster.ca_file.read_bytes())
        cl._write(secrets / "namespace", NAMESPACE)
        config = cl._write(workdir / "daemon-config.json", json.dumps(daemon_config(
            log_file=log_file, socket_dir=self.socket_dir, autoconfig_dir=autoconfig_dir,
            cni_config_dir=self.conf_dir, conf_dir=conf_dir,
            cni_dir=cni_dir or workdir / "state", bin_dir=bin_dir,
            cni_version=cni_version, cluster_network=cluster_network), indent=2))
        self.binary = require_binaries() / "multus-daemon"
        argv = ["unshare", "--mount", "--propagation", "slave", "sh", "-c", daemon_script(),
                "sh", str(self.run_dir), str(self.binary), str(config)]
        self.process = cl._Process("multus-daemon", [
            "env", f"MULTUS_NODE_NAME={node_name}", "KUBERNETES_SERVICE_HOST=127.0.0.1",
            f"KUBERNETES_SERVICE_PORT={cluster.apiserver_port}",
            *(ns_argv(*argv) if ns_argv else argv)], workdir / "daemon.out")

    @classmethod
    def start(cls, *args: Any, **kwargs: Any) -> Daemon:
        """Start it and wait until its caches are synced and its socket answers."""
        return cl.started(cls(*args, **kwargs), READY_TIMEOUT)

    def _start(self, timeout: float) -> None:
        self.process.start()
        deadline = time.monotonic() + timeout
        while not (self.healthy() and (self.host_conf_dir / "00-multus.conf").exists()):
            if not self.process.running or time.monotonic() > deadline:
                raise cl.ClusterError(
                    f"multus-daemon not ready after {timeout:.0f} s (running: "
                    f"{self.process.running}); {self.log_file}:\n{cl.log_tail(self.log_file)}"
                    f"\n{cl.log_tail(self.process.log)}")
            time.sleep(0.1)

    @property
    def pid(self) -> int:
        assert self.process.popen is not None
        return self.process.popen.pid

    def healthy(self) -> bool:
        """GET /healthz on the daemon's socket answers 200."""
        conn = _UnixHTTPConnection(str(self.socket_dir / "multus.sock"))
        try:
            conn.request("GET", "/healthz")
            return conn.getresponse().status == 200
        except OSError:
            return False
        finally:
            conn.close()

    def shim_conf(self) -> dict[str, Any]:
        """The shim's configuration, as the daemon wrote it for the runtime."""
        return json.loads((self.host_conf_dir / "00-multus.conf").read_text())

    def stop(self) -> None:
        self.process.stop()


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str):
        super().__init__("localhost", timeout=5)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(5)
        self.sock.connect(self.path)
