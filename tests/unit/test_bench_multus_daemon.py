"""Multus thick in the benches (hack/benchlib/multus.py, hack/bench_node.py): the daemon's
config is the one Multus deploys (multusConfigFile "auto") with the dirs it is given, so
that on the real node it reads the node's default network and writes the shim's
00-multus.conf where the node's runtime reads its networks; its process is found by its
command line for its CPU. On the node the daemon names the cluster network (Multus
v4.2.3 loses a .conflist's plugin keys at DEL when given its path)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hack"))

from benchlib import multus  # noqa: E402


def _node_config(**kw):
    return multus.daemon_config(
        log_file=Path("/tmp/w/multus-daemon.log"), socket_dir=Path("/tmp/w/socket"),
        autoconfig_dir=Path("/etc/cni/net.d"), cni_config_dir=Path("/etc/cni/net.d"),
        conf_dir=Path("/etc/cni/net.d"), cni_dir=Path("/var/lib/cni/multus"),
        bin_dir=Path("/opt/cni/bin"), **kw)


def test_daemon_config_is_multus_auto_mode_with_the_node_dirs():
    conf = _node_config(cni_version="1.0.0")
    assert conf["multusConfigFile"] == "auto"
    assert conf["multusAutoconfigDir"] == conf["cniConfigDir"] == "/etc/cni/net.d"
    assert conf["binDir"] == "/opt/cni/bin"
    assert conf["cniDir"] == "/var/lib/cni/multus"
    assert conf["cniVersion"] == "1.0.0"
    # the shim finds the daemon where the daemon listens
    assert conf["socketDir"] == conf["daemonSocketDir"] == "/tmp/w/socket"


def test_daemon_config_keeps_the_exec_bench_version_by_default():
    assert _node_config()["cniVersion"] == "0.3.1"


def test_daemon_config_names_the_cluster_network_only_when_asked():
    # the daemon copies its keys over each request's conf: by name, never auto's path to
    # the .conflist (v4.2.3 loses the list's plugin keys at DEL)
    assert _node_config(cluster_network="cluster-net")["clusterNetwork"] == "cluster-net"
    assert _node_config(cluster_network="cluster-net")["multusConfigFile"] == "auto"
    assert "clusterNetwork" not in _node_config()


def test_daemon_script_binds_netns_before_hiding_run_and_execs():
    script = multus.daemon_script()
    # /run/netns must be bound into the run dir before /run is covered by it
    assert script.index("/run/netns") < script.index('"$1" /run')
    assert 'exec "$2" --config "$3"' in script


def test_bench_node_finds_multus_daemon_by_its_command_line(tmp_path, monkeypatch):
    for name in multus.BINARIES:
        f = tmp_path / name
        f.write_text("")
        os.chmod(f, 0o755)
    monkeypatch.setenv("NETATTACH_MULTUS_BIN", str(tmp_path))
    import bench_node
    markers = bench_node.daemon_markers("multus_thick")
    assert markers == (f"{tmp_path}/multus-daemon\0--config\0".encode(),)
    # netattach's daemon and the spawner that execs and reaps its delegates
    assert bench_node.daemon_markers("netattach_thick") == (
        b"/opt/netattach/netattach\0daemon\0", b"/opt/netattach/netattach\0spawner\0")
    assert bench_node.daemon_markers("multus_thin") == ()
