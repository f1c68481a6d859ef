"""Uninstall under a real container runtime: containerd 2.x driven through the CRI
(testbed/netattach_testbed/runtime.py), the installer a host process asked by the real API server
(tests/e2e/test_uninstall_e2e.py's identity). What this adds to test_uninstall_e2e.py:
containerd itself reloads the conf dir when the installer retires the conflist and
removes it, and DELs each sandbox with the conf dir as it is then."""
from __future__ import annotations

import json
import shutil
import signal
import subprocess

import pytest

from netattach_testbed import runtime as rt
from netattach_testbed import scenario as sc
from netattach_testbed.serviceaccount import wait_for, write_sa
from tests.e2e.test_uninstall_e2e import identity  # noqa: F401 (a fixture)

pytestmark = pytest.mark.runtime


def _loaded(node: rt.Node) -> list[dict]:
    """The network configs containerd has loaded (CRI Status, verbose `cniconfig`): the
    config of each network, loopback first."""
    info = json.loads(node.cri.status()["info"]["cniconfig"])
    return [json.loads(n["Config"]["Source"]) for n in info.get("Networks") or []]


def _retired_loaded(node: rt.Node) -> bool:
    return any(p.get("retired") for c in _loaded(node) for p in c.get("plugins", []))


def test_uninstall_under_containerd(cluster, admin_api, host_env, k8s_namespace, cni_testbin,
                                    built_artifact, identity):  # noqa: F811
    """`kubectl delete -k` while a sandbox netattach attached runs: containerd loads the
    retired conflist; a sandbox run then gets the cluster default network alone; the
    first sandbox's StopPodSandbox DEL goes through netattach from saved state, frees
    everything and, the last one, removes netattach's files, and containerd goes back
    to the cluster default network's conflist for the second one's DEL. At the end the
    conf and bin dirs are as before netattach, no IP is allocated, no netattach state
    dir and no libcni cache entry of either sandbox is left (the second one's, under
    netattach's network name, which containerd's DEL through the cluster default
    network's name does not remove, goes with netattach's files)."""
    node = rt.node_setup(cluster, host_env, str(built_artifact), [cni_testbin],
                         host_env.bridge_name(), sc.SUBNETS["default"])
    # on a node the cluster default network's conflist is in the conf dir (the test bed
    # keeps it beside; --primary-config still names that copy)
    shutil.copy(node.primary, node.conf_dir / "10-cluster.conflist")
    identity.create()
    sa = host_env.root / "installer-sa"
    write_sa(sa, identity.token, 1, ca=cluster.ca_file.read_bytes())
    log = host_env.root / "installer.log"
    with open(log, "wb") as err:
        installer = subprocess.Popen(
            [str(built_artifact), "install", *node.install_args, "--service-account-dir",
             str(sa), "--daemonset", identity.name, "--state-dir", str(host_env.state_dir),
             "--poll-interval", "0.1", "--uninstall-timeout", "10"],
            stdout=subprocess.DEVNULL, stderr=err)
    rt.start_containerd(node, host_env.root / "containerd")
    try:
        wait_for(lambda: "a stop of this installer keeps netattach" in log.read_text(),
                 "the installer running")
        name, config = rt.scenario_sandbox(admin_api, host_env, k8s_namespace)
        first = node.cri.run_sandbox(config)
        status = node.cri.sandbox_status(first)
        assert rt.netns_links(rt.sandbox_netns(status)) == ["data0", "eth0", "lo", "net1"]

        identity.uninstall()
        installer.send_signal(signal.SIGTERM)
        assert installer.wait(timeout=60) == 0, log.read_text()
        assert "netattach is uninstalled" in log.read_text()
        wait_for(lambda: _retired_loaded(node), "containerd to load the retired conflist")

        _, late_config = rt.scenario_sandbox(admin_api, host_env, k8s_namespace)
        late = node.cri.run_sandbox(late_config)
        late_status = node.cri.sandbox_status(late)
        assert rt.netns_links(rt.sandbox_netns(late_status)) == ["eth0", "lo"]

        node.cri.stop_sandbox(first)
        node.cri.remove_sandbox(first)
        assert sorted(p.name for p in node.conf_dir.iterdir()) == ["10-cluster.conflist"]
        assert list(node.bin_dir.iterdir()) == [] and not host_env.state_dir.exists()
        assert rt.libcni_cache_entries(first) == []
        wait_for(lambda: not _retired_loaded(node), "containerd to load the primary again")

        node.cri.stop_sandbox(late)
        node.cri.remove_sandbox(late)
        assert host_env.ipam_allocations() == []
        assert rt.libcni_cache_entries(late) == []  # its netattach entry went with the files
        assert late not in [s["id"] for s in node.cri.sandboxes()]
    finally:
        if installer.poll() is None:
            installer.kill()
            installer.wait()
        for s in node.cri.sandboxes():
            node.cri.stop_sandbox(s["id"])
            node.cri.remove_sandbox(s["id"])
        node.containerd.stop()
