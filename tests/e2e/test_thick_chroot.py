"""Thick mode with `netattach daemon --chroot-dir`, as deploy/thick runs it: the daemon
sees the host's `/` at a dir of its own (deploy/thick: /hostroot, a HostToContainer
mount) and runs every child in that root.

The daemon here runs in a mount namespace of its own (`unshare --mount`, every mount a
slave of this machine's, as HostToContainer makes them) where this machine's `/` is
bind-mounted at `<tmp>/hostroot`, and where its own view of /usr/lib/cni, the dir of
scenario 1's children (CNI_PATH), is an empty tmpfs: the children can only be found
and run in the root. Real API server, real plugins, the built artifact.
"""
from __future__ import annotations

import shlex

import pytest

from netattach_testbed import scenario as sc
from netattach_testbed.daemon import NodeDaemon

pytestmark = pytest.mark.e2e


def test_scenario_1_with_children_in_the_daemons_chroot_dir(
        admin_api, plugin_kubeconfig, daemon_kubeconfig, host_env, k8s_namespace, tmp_path):
    hostroot = tmp_path / "hostroot"
    hostroot.mkdir()
    inner = (f"mount --rbind / {shlex.quote(str(hostroot))} && "
             f"mount -t tmpfs -o size=1m netattach-test {sc.DEBIAN_CNI_DIR} && "
             'exec "$0" "$@"')
    wrapper = tmp_path / "daemon-in-a-container"
    wrapper.write_text("#!/bin/sh\nexec unshare --mount --propagation slave sh -c "
                       f"{shlex.quote(inner)} {shlex.quote(sc.netattach_command())} \"$@\"\n")
    wrapper.chmod(0o755)
    s = sc.setup(admin_api, plugin_kubeconfig, host_env, k8s_namespace)
    daemon = NodeDaemon.start(str(wrapper), host_env, daemon_kubeconfig,
                              flags=(*NodeDaemon.flags, "--chroot-dir", str(hostroot)))
    try:
        s = s.thick(daemon)
        assert f"children run in the root {hostroot} (--chroot-dir)" in daemon.log_text()
        run = s.run("ADD")
        assert run.code == 0, run.stdout + s.log_text()
        assert sc.pod_links(s) == ["data0", "eth0", "lo", "net1"]
        assert sc.network_status(admin_api, s.namespace, s.pod_name)
        run = s.run("DEL")
        assert run.code == 0, run.stdout + s.log_text()
        sc.assert_clean(s)
    finally:
        daemon.stop()
