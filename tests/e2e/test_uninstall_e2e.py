"""Uninstall or restart, end to end (docs/install-lifecycle.md): the built artifact runs
`netattach install` as a host process with a ServiceAccount volume holding a real
pod-bound token; the real API server answers its question on SIGTERM (its DaemonSet
there, deleted or being deleted; its ServiceAccount or RBAC deleted); the runtime's
calls exec what the installer left in the bin dir with the conf dir as it is at the
call, as containerd does (`Node.call`), on scenario 1 (real plugins, real netns, NADs
from the API server).

Each test has an identity of its own (`Identity`): a ServiceAccount bound to the
plugin's ClusterRole `netattach` and to a Role made from deploy/base/rbac.yaml's
`netattach-installer` for the test's own DaemonSet name, so that deleting the account,
the binding or the DaemonSet touches nothing another test uses. The deploy objects
themselves are read by `test_installer_rbac_is_get_on_its_own_daemonset`.
"""
from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from netattach.node.nodefiles import CONFLIST_NAME, KUBECONFIG_DIR_NAME
from netattach_testbed import cluster as cl
from netattach_testbed import scenario as sc
from netattach_testbed.daemon import NodeDaemon
from netattach_testbed.netns import addresses_by_link
from netattach_testbed.serviceaccount import wait_for, write_sa

NS = "kube-system"
HOLD = "netattach.test/hold"  # a finalizer: the DaemonSet stays, being deleted


def _deploy_role() -> dict:
    """deploy/base/rbac.yaml's Role netattach-installer."""
    for doc in yaml.safe_load_all((cl.DEPLOY_DIR / "base" / "rbac.yaml").read_text()):
        if doc and doc["kind"] == "Role" and doc["metadata"]["name"] == "netattach-installer":
            return doc
    raise AssertionError("deploy/base/rbac.yaml has no Role netattach-installer")


def _ignore_404(call, *args, **kwargs) -> None:
    try:
        call(*args, **kwargs)
    except ApiException as e:
        if e.status != 404:
            raise


@dataclasses.dataclass
class Identity:
    """One test's installer: ServiceAccount, DaemonSet and holder pod named `name` in
    kube-system, the plugin's ClusterRole bound to the account, deploy/base/rbac.yaml's Role
    netattach-installer for DaemonSet `name`, and a token bound to the holder pod."""
    api: k8s.ApiClient
    name: str
    token: str = ""

    def create(self, daemonset: bool = True) -> None:
        core, rbac = k8s.CoreV1Api(self.api), k8s.RbacAuthorizationV1Api(self.api)
        core.create_namespaced_service_account(NS, {"metadata": {"name": self.name}})
        subject = [{"kind": "ServiceAccount", "name": self.name, "namespace": NS}]
        rbac.create_cluster_role_binding({
            "metadata": {"name": self.name}, "subjects": subject,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "netattach"}})
        role = _deploy_role()
        [rule] = role["rules"]
        rbac.create_namespaced_role(NS, {"metadata": {"name": self.name},
                                         "rules": [{**rule, "resourceNames": [self.name]}]})
        rbac.create_namespaced_role_binding(NS, {
            "metadata": {"name": self.name}, "subjects": subject,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                        "name": self.name}})
        if daemonset:
            self.create_daemonset()
        pod = core.create_namespaced_pod(NS, {
            "metadata": {"name": self.name},
            "spec": {"serviceAccountName": self.name, "automountServiceAccountToken": False,
                     "containers": [{"name": "install",
                                     "image": "registry.invalid/netattach:0"}]}})
        req = k8s.AuthenticationV1TokenRequest(spec=k8s.V1TokenRequestSpec(
            audiences=[], expiration_seconds=3600,
            bound_object_ref=k8s.V1BoundObjectReference(
                api_version="v1", kind="Pod", name=self.name, uid=pod.metadata.uid)))
        self.token = core.create_namespaced_service_account_token(
            self.name, NS, req).status.token

    def create_daemonset(self, finalizer: bool = False) -> None:
        labels = {"app.kubernetes.io/name": self.name}
        k8s.AppsV1Api(self.api).create_namespaced_daemon_set(NS, {
            "metadata": {"name": self.name, "finalizers": [HOLD] if finalizer else []},
            "spec": {"selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "install",
                                         "image": "registry.invalid/netattach:0"}]}}}})

    def delete_daemonset(self) -> None:
        _ignore_404(k8s.AppsV1Api(self.api).delete_namespaced_daemon_set, self.name, NS)

    def delete_service_account(self) -> None:
        _ignore_404(k8s.CoreV1Api(self.api).delete_namespaced_service_account, self.name, NS)

    def delete_role_binding(self) -> None:
        _ignore_404(k8s.RbacAuthorizationV1Api(self.api).delete_namespaced_role_binding,
                    self.name, NS)

    def uninstall(self) -> None:
        """What `kubectl delete -k deploy/` does to what the installer relies on: its
        ServiceAccount, RBAC and DaemonSet deleted."""
        self.delete_service_account()
        self.delete_role_binding()
        self.delete_daemonset()

    def cleanup(self) -> None:
        apps, core = k8s.AppsV1Api(self.api), k8s.CoreV1Api(self.api)
        rbac = k8s.RbacAuthorizationV1Api(self.api)
        try:
            apps.patch_namespaced_daemon_set(self.name, NS, {"metadata": {"finalizers": None}})
        except ApiException as e:
            if e.status != 404:
                raise
        self.delete_daemonset()
        _ignore_404(core.delete_namespaced_pod, self.name, NS, grace_period_seconds=0)
        self.uninstall()
        _ignore_404(rbac.delete_namespaced_role, self.name, NS)
        _ignore_404(rbac.delete_cluster_role_binding, self.name)


@pytest.fixture
def identity(admin_api):
    ident = Identity(admin_api, f"ni-{uuid.uuid4().hex[:10]}")
    try:
        yield ident
    finally:
        ident.cleanup()


def _token_rejected(cluster, token: str) -> bool:
    """True once the API server answers 401 to `token` (it caches a token's successful
    authentication for a few seconds)."""
    path = cl.write_kubeconfig(cluster.workdir / f"probe-{uuid.uuid4().hex[:8]}.kubeconfig",
                               cluster.server, user={"token": token},
                               ca_data=cluster.ca_file.read_bytes(), name="probe")
    try:
        with cl.api_client(path) as api:
            try:
                k8s.VersionApi(api).get_code()
                k8s.CoreV1Api(api).list_namespaced_pod(NS, limit=1)
            except ApiException as e:
                return e.status == 401
        return False
    finally:
        path.unlink()


class Node:
    """The host paths of one test: the conf dir (holding the cluster default network's
    conf, scenario 1's), an empty bin dir, the state dir's parent, the installer."""

    def __init__(self, cluster, env, identity: Identity, tmp_path: Path):
        self.cluster, self.env, self.identity = cluster, env, identity
        self.conf, self.bin = env.conf_dir, env.root / "host-bin"
        self.bin.mkdir()
        env.state_dir.rmdir()  # made by the plugin at its first ADD, as on a node
        self.state = env.state_dir
        self.sa = tmp_path / "serviceaccount"
        self.logs = tmp_path
        self.procs: list[subprocess.Popen] = []

    @property
    def conflist(self) -> Path:
        return self.conf / CONFLIST_NAME

    def snapshot(self) -> dict[str, object]:
        """What an uninstall must restore: the conf and bin dirs' entries (the conf
        files' bytes) and whether the state dir exists."""
        return {"conf": {p.name: p.read_bytes() if p.is_file() else "dir"
                         for p in self.conf.iterdir()},
                "bin": sorted(p.name for p in self.bin.iterdir()),
                "state": self.state.exists()}

    def start(self, *extra: str, primary: bool = True, wait: bool = True) -> subprocess.Popen:
        """Start an installer; return once it installed (`primary`: the cluster default
        network's config is there) or, without one, once it waits for it; at once when
        not `wait`."""
        write_sa(self.sa, self.identity.token, len(self.procs) + 1,
                 ca=self.cluster.ca_file.read_bytes())
        argv = [sc.netattach_command(), "install", f"--bin-dir={self.bin}",
                f"--conf-dir={self.conf}", f"--host-conf-dir={self.conf}",
                f"--host-bin-dir={self.bin}", f"--cni-dir={self.state}",
                f"--state-dir={self.state}", f"--service-account-dir={self.sa}",
                f"--api-server={self.cluster.server}", f"--daemonset={self.identity.name}",
                "--poll-interval=0.1", "--log-level=debug", "--uninstall-timeout=10",
                f"--log-file={self.env.log_dir / 'netattach.log'}", *extra]
        with open(self.logs / f"installer{len(self.procs)}.log", "wb") as err:
            proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err)
        self.procs.append(proc)
        if not wait:
            return proc
        if not primary:
            wait_for(lambda: "waiting: no CNI config" in self.log(proc), "the installer waiting")
            return proc
        wait_for(lambda: self.installed() or proc.poll() is not None,
                 "the installer's conflist and binary", timeout=120)
        assert proc.poll() is None, self.log(proc)
        wait_for(lambda: "a stop of this installer" in self.log(proc), "its start-up check")
        return proc

    def installed(self) -> bool:
        doc = self.conf_doc()
        return (doc is not None and "retired" not in doc["plugins"][0]
                and (self.bin / "netattach").exists())

    def log(self, proc: subprocess.Popen) -> str:
        return (self.logs / f"installer{self.procs.index(proc)}.log").read_text()

    def stop(self, proc: subprocess.Popen) -> str:
        """SIGTERM and wait, as kubelet stops the container; returns its log."""
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, self.log(proc)
        return self.log(proc)

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def conf_doc(self) -> dict | None:
        try:
            return json.loads(self.conflist.read_text())
        except (FileNotFoundError, ValueError):
            return None

    def call(self, s: sc.Scenario, command: str) -> sc.PluginRun:
        """One CNI call as containerd makes it: the conf dir as it is now (the first
        config by name; one plugin), the plugin named by its type, looked up in the bin
        dir then the runtime's plugin dirs, the config on stdin with the list's name and
        cniVersion."""
        first = sorted(p for p in self.conf.iterdir()
                       if p.suffix in (".conf", ".conflist", ".json") and p.is_file())[0]
        doc = json.loads(first.read_text())
        plugin = doc["plugins"][0] if "plugins" in doc else doc
        netconf = {**plugin, "name": doc["name"], "cniVersion": doc["cniVersion"]}
        exe = next(p for p in [self.bin / plugin["type"]] + [
            Path(d) / plugin["type"] for d in sc.cni_plugin_dirs()] if p.exists())
        p = subprocess.run([str(exe)], input=json.dumps(netconf), capture_output=True,
                           text=True, env=s.cni_env(command), timeout=120)
        return sc.PluginRun(p.returncode, p.stdout, p.stderr)


@pytest.fixture
def node(cluster, host_env, identity, tmp_path):
    n = Node(cluster, host_env, identity, tmp_path)
    try:
        yield n
    finally:
        n.kill_all()


def _sandbox(admin_api, s: sc.Scenario, networks: str | None = None) -> sc.Scenario:
    """Another sandbox of scenario 1's kind: a new pod (the same selection, or
    `networks`), container ID and netns."""
    name = f"pod-{uuid.uuid4().hex[:8]}"
    uid = sc.create_pod(admin_api, sc.pod(s.namespace, name, networks or
                                          "net-a,other/net-b@data0"))
    return dataclasses.replace(s, pod_name=name, pod_uid=uid,
                               container_id=uuid.uuid4().hex + uuid.uuid4().hex,
                               netns=s.env.new_netns())


def _ok(run: sc.PluginRun, s: sc.Scenario) -> sc.PluginRun:
    assert run.code == 0, run.stdout + run.stderr + s.log_text()
    return run


def _attached(s: sc.Scenario) -> list[str]:
    return sc.pod_links(s)


def _api_requests(s: sc.Scenario, command: str) -> int:
    """The API requests of the last `command` call in the plugin's log (its timing line)."""
    line = [x for x in s.log_text().splitlines() if f"timing: {command} took" in x][-1]
    return int(line.rsplit("api_requests ", 1)[1])


# ---------------------------------------------------------------- the rule, for real

def test_installer_rbac_is_get_on_its_own_daemonset(cluster, admin_api, daemon_kubeconfig):
    """deploy/base/rbac.yaml's Role netattach-installer, bound to kube-system/netattach (thin)
    and to kube-system/netattach-daemon (deploy/thick/rbac.yaml): each may get DaemonSet
    kube-system/netattach (200 when there, 404 when not: never 403), and nothing else
    of DaemonSets (another one, a list, a write: 403)."""
    for sa in ("netattach", "netattach-daemon"):
        with cl.api_client(cl.plugin_kubeconfig(cluster, sa=sa)) as api:
            apps = k8s.AppsV1Api(api)
            try:
                apps.read_namespaced_daemon_set("netattach", NS)
            except ApiException as e:
                assert e.status == 404, (sa, e.status)
            for call, args in ((apps.read_namespaced_daemon_set, ("kube-proxy", NS)),
                               (apps.list_namespaced_daemon_set, (NS,)),
                               (apps.delete_namespaced_daemon_set, ("netattach", NS))):
                with pytest.raises(ApiException) as e:
                    call(*args)
                assert e.value.status == 403, (sa, call.__name__)


@pytest.mark.parametrize("how", ["daemonset there", "daemonset deleted",
                                 "daemonset being deleted", "serviceaccount deleted",
                                 "rbac deleted"])
def test_a_stop_with_nothing_attached(admin_api, cluster, host_env, k8s_namespace, identity,
                                      node, how):
    """The rule against the real API server, with no sandbox on the node. The DaemonSet
    there is a restart: everything stays. Any of the four signs of an uninstall removes
    every netattach file at once: the conf and bin dirs are as before the install, and
    no state dir is left."""
    sc.setup(admin_api, cluster.workdir / "unused", host_env, k8s_namespace)
    identity.create(daemonset=how != "daemonset being deleted")
    if how == "daemonset being deleted":
        identity.create_daemonset(finalizer=True)
    before = node.snapshot()
    proc = node.start()
    installed = node.snapshot()
    if how == "daemonset deleted":
        identity.delete_daemonset()
    elif how == "daemonset being deleted":
        identity.delete_daemonset()  # held by the finalizer
    elif how == "serviceaccount deleted":
        identity.delete_service_account()
        wait_for(lambda: _token_rejected(cluster, identity.token), "the token rejected")
    elif how == "rbac deleted":
        identity.delete_role_binding()
    log = node.stop(proc)
    if how == "daemonset there":
        assert "netattach stays installed on this node: DaemonSet" in log, log
        assert node.snapshot() == installed
        return
    reason = {"daemonset deleted": "is deleted (404)",
              "daemonset being deleted": "is being deleted (since",
              "serviceaccount deleted": "token (401)",
              "rbac deleted": "(403)"}[how]
    assert "netattach is uninstalled: " in log and reason in log, log
    assert "no sandbox needs netattach: removed" in log, log
    assert node.snapshot() == before


def test_an_uninstall_before_the_cluster_default_network_came(cluster, identity, node):
    """Uninstalled while the installer still waits for the cluster default network's
    config (its binary and kubeconfig written, no conflist): all of it goes, the conf
    and bin dirs are as before."""
    identity.create()
    before = node.snapshot()
    proc = node.start(primary=False)
    assert (node.bin / "netattach").exists()
    identity.delete_daemonset()
    log = node.stop(proc)
    assert "no sandbox needs netattach: removed" in log, log
    assert node.snapshot() == before


def test_an_installer_starting_into_an_uninstall_retires_without_a_stop(
        admin_api, cluster, host_env, k8s_namespace, identity, node):
    """An installer that starts with its ServiceAccount deleted (its pod deleted by the
    uninstall as it started: the stop signal that came before its handler is lost)
    retires the node without being stopped: with nothing attached, every file goes;
    then it waits for its stop, which does nothing more."""
    sc.setup(admin_api, cluster.workdir / "unused", host_env, k8s_namespace)
    identity.create()
    before = node.snapshot()
    identity.delete_service_account()
    wait_for(lambda: _token_rejected(cluster, identity.token), "the token rejected")
    proc = node.start(wait=False)
    wait_for(lambda: "no sandbox needs netattach: removed" in node.log(proc) or
             proc.poll() is not None, "the installer's retire", timeout=120)
    log = node.log(proc)
    assert "netattach is uninstalled: the API server rejects this pod's ServiceAccount " \
           "token (401)" in log and "retiring this node now" in log, log
    assert node.snapshot() == before
    assert proc.poll() is None, log  # until its stop
    log = node.stop(proc)
    assert "netattach was already uninstalled from this node" in log, log
    assert node.snapshot() == before


def test_a_start_answered_404_retires_only_once_the_serviceaccount_goes(
        admin_api, cluster, host_env, k8s_namespace, identity, node):
    """404 at the start is also a wrong --daemonset: it never retires a node by itself
    (a WARNING, everything stays); asked again after the start, it retires the node
    once the ServiceAccount is deleted too (an uninstall that deletes the DaemonSet
    first, as helm's does)."""
    sc.setup(admin_api, cluster.workdir / "unused", host_env, k8s_namespace)
    identity.create(daemonset=False)
    before = node.snapshot()
    proc = node.start()
    log = node.log(proc)
    assert "WARNING: a stop of this installer would be taken for an uninstall: DaemonSet " \
           f"kube-system/{identity.name} is deleted (404)" in log, log
    assert node.installed() and proc.poll() is None
    identity.delete_service_account()
    wait_for(lambda: "no sandbox needs netattach: removed" in node.log(proc) or
             proc.poll() is not None, "the installer's retire", timeout=120)
    assert "asked again: the API server rejects this pod's ServiceAccount token (401)" \
        in node.log(proc), node.log(proc)
    assert node.snapshot() == before


# ---------------------------------------------------------------- restart

def test_a_restart_keeps_the_node_attaching_pods_with_netattach(
        admin_api, cluster, host_env, k8s_namespace, identity, node):
    """SIGTERM with the DaemonSet there (a pod restart, an update): the conflist, the
    binary and the kubeconfig stay as they were, byte for byte; a pod created after the
    installer stopped gets all its networks from netattach; its DEL frees them."""
    s = sc.setup(admin_api, cluster.workdir / "unused", host_env, k8s_namespace)
    identity.create()
    proc = node.start()
    installed = node.snapshot()
    kubeconfig = (node.conf / KUBECONFIG_DIR_NAME / "netattach.kubeconfig").read_bytes()
    log = node.stop(proc)
    assert "stays installed on this node: DaemonSet kube-system/" in log, log
    assert node.snapshot() == installed
    assert (node.conf / KUBECONFIG_DIR_NAME / "netattach.kubeconfig").read_bytes() == kubeconfig
    _ok(node.call(s, "ADD"), s)
    assert _attached(s) == ["data0", "eth0", "lo", "net1"]
    _ok(node.call(s, "DEL"), s)
    sc.assert_clean(s)


# ---------------------------------------------------------------- uninstall

@pytest.mark.parametrize("mode", ["thin", "thick"])
def test_uninstall_with_a_running_sandbox_leaves_the_node_as_before(
        admin_api, cluster, host_env, k8s_namespace, identity, node, daemon_kubeconfig, mode):
    """`kubectl delete -k` (ServiceAccount, RBAC, DaemonSet) while a pod netattach
    attached runs: the installer retires the conflist (thin netattach, also in thick
    mode, whose daemon goes away) and leaves the rest; a pod created then gets the
    cluster default network alone (no state, no network-status); the running pod's DEL
    goes through netattach from its saved state and frees every IP, and being the last
    sandbox netattach attached, removes every netattach file: the conf and bin dirs are
    as before the install. The other pod's DEL, the runtime's with the cluster default
    network's conf alone, frees its IP: host-local's store is empty."""
    s = sc.setup(admin_api, cluster.workdir / "unused", host_env, k8s_namespace)
    identity.create()
    before = node.snapshot()
    daemon = None
    extra: tuple[str, ...] = ()
    if mode == "thick":
        daemon = NodeDaemon.start(sc.netattach_command(), host_env, daemon_kubeconfig)
        extra = ("--mode=thick", f"--daemon-socket-dir={daemon.socket_dir}")
    try:
        proc = node.start(*extra)
        assert node.conf_doc()["plugins"][0]["type"] == (
            "netattach-shim" if mode == "thick" else "netattach")
        _ok(node.call(s, "ADD"), s)
        assert _attached(s) == ["data0", "eth0", "lo", "net1"]
        sc.network_status(admin_api, s.namespace, s.pod_name)

        identity.uninstall()
        log = node.stop(proc)
        if daemon is not None:
            daemon.stop()  # the DaemonSet's pod goes, with its daemon container
    finally:
        if daemon is not None:
            daemon.kill()
    assert "netattach is uninstalled: " in log and "sandbox(es) attached by netattach" in log
    plugin = node.conf_doc()["plugins"][0]
    assert plugin["type"] == "netattach" and "daemonSocketDir" not in plugin
    assert plugin["retired"] == {"conflist": str(node.conflist)}
    assert (node.bin / "netattach").exists() and node.state.exists()

    # a pod created now: the cluster default network alone, nothing saved, no API write
    late = _sandbox(admin_api, s)
    run = _ok(node.call(late, "ADD"), late)
    assert [i["name"] for i in run.doc["interfaces"] if i.get("sandbox")] == ["eth0"]
    assert _attached(late) == ["eth0", "lo"]
    assert sc.in_subnet(addresses_by_link(late.netns)["eth0"][0],
                        sc.SUBNETS["default"])
    assert not (node.state / f"{late.container_id}.json").exists()
    assert sc.STATUS not in sc.read_pod_annotations(admin_api, late.namespace, late.pod_name)
    assert _api_requests(late, "ADD") == 0
    assert node.conflist.exists()  # the first pod still needs netattach

    _ok(node.call(s, "DEL"), s)
    assert _attached(s) == ["lo"]
    assert node.snapshot() == before  # every netattach file gone with the last DEL
    assert "no sandbox needs it any more: removed" in s.log_text()

    _ok(node.call(late, "DEL"), late)  # the runtime's, with the default network's conf
    assert _attached(late) == ["lo"]
    assert host_env.ipam_allocations() == []
    assert node.snapshot() == before


def test_the_retired_conflist_dels_a_sandbox_netattach_did_not_attach(
        admin_api, cluster, host_env, k8s_namespace, identity, node):
    """During the retired phase a DEL through netattach of a pod it did not attach (the
    retired ADD's, or one older than netattach) is the cluster default network's DEL
    alone: it succeeds, writes no state and no tombstone, and asks no API server; so
    does the runtime's second DEL. The state dir stays as it was while a pod netattach
    attached is left."""
    s = sc.setup(admin_api, cluster.workdir / "unused", host_env, k8s_namespace)
    identity.create()
    proc = node.start()
    _ok(node.call(s, "ADD"), s)
    identity.uninstall()
    node.stop(proc)
    late = _sandbox(admin_api, s)
    _ok(node.call(late, "ADD"), late)
    states = sorted(p.name for p in node.state.iterdir())
    _ok(node.call(late, "DEL"), late)
    assert _attached(late) == ["lo"] and _api_requests(late, "DEL") == 0
    assert sorted(p.name for p in node.state.iterdir()) == states
    assert node.conf_doc()["plugins"][0]["retired"]
    _ok(node.call(late, "DEL"), late)  # containerd's second DEL
    _ok(node.call(s, "DEL"), s)
    assert not node.conflist.exists()
    assert host_env.ipam_allocations() == []


def test_reinstall_during_the_retired_phase_wins(
        admin_api, cluster, host_env, k8s_namespace, identity, node):
    """Uninstalled while a pod runs (the DaemonSet deleted), then installed again before
    that pod goes: the new installer rewrites the active conflist over the retired one
    and holds the presence lock, so the old pod's DEL (even one the runtime made with
    the retired conflist it had read) removes nothing; pods get every network again, and
    a later stop with the DaemonSet there keeps everything."""
    s = sc.setup(admin_api, cluster.workdir / "unused", host_env, k8s_namespace)
    identity.create()
    proc = node.start()
    _ok(node.call(s, "ADD"), s)
    identity.delete_daemonset()
    log = node.stop(proc)
    assert "netattach is uninstalled: DaemonSet" in log, log
    retired_conf = node.conflist.read_text()
    assert json.loads(retired_conf)["plugins"][0]["retired"]

    identity.create_daemonset()
    proc = node.start()
    assert "installing it again" in node.log(proc)
    assert "retired" not in node.conf_doc()["plugins"][0]
    installed = node.snapshot()

    # the runtime read the retired conflist before the reinstall: its DEL of the old pod
    run = subprocess.run([str(node.bin / "netattach")], capture_output=True, text=True,
                         input=json.dumps({**json.loads(retired_conf)["plugins"][0],
                                           "name": "netattach-cni-network",
                                           "cniVersion": json.loads(retired_conf)["cniVersion"]}),
                         env=s.cni_env("DEL"), timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert _attached(s) == ["lo"]
    assert node.snapshot()["conf"] == installed["conf"]
    assert node.snapshot()["bin"] == installed["bin"]

    again = _sandbox(admin_api, s)
    _ok(node.call(again, "ADD"), again)
    assert _attached(again) == ["data0", "eth0", "lo", "net1"]
    _ok(node.call(again, "DEL"), again)
    log = node.stop(proc)
    assert "stays installed on this node: DaemonSet" in log, log
    assert node.conflist.exists() and (node.bin / "netattach").exists()
    assert host_env.ipam_allocations() == []
