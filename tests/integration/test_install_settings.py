"""`netattach install` as admins configure it: non-default CNI paths (k3s, RKE2, k0s,
microk8s) with the probes' flagless `install --check`, every documented conf key from
flags or from a document mounted from a ConfigMap (--netconf-file), and an admin's
edit of the conflist. Real files in temp dirs, the installer a real subprocess
(tests/integration/test_install.py's Node), waits polling under hang guards."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from netattach.spec.netconf import DEFAULT_CONF_DIR, MULTUS_CONF_DIR, parse_netconf
from netattach_testbed.scenario import netattach_command
from netattach_testbed.serviceaccount import wait_for
from tests.integration.test_install import PRIMARY, Node, write_atomically
from tests.integration.test_install import node as node  # noqa: F401 (the fixture)

pytestmark = pytest.mark.integration

# k3s' paths as its host sees them (the installer writes them into the conflist)
K3S = ("--host-conf-dir", "/var/lib/rancher/k3s/agent/etc/cni/net.d",
       "--host-bin-dir", "/var/lib/rancher/k3s/data/current/bin",
       "--cni-dir", "/var/lib/rancher/k3s/netattach")


def probe(node: Node) -> tuple[int, str]:
    """The DaemonSet's probe: `install --check` with no flag but the pod's own --run-dir
    (the emptyDir the probe shares with the installer; its default in the pod)."""
    p = subprocess.run([netattach_command(), "install", "--check", "--run-dir",
                        str(node.run_dir)], capture_output=True, timeout=30)
    assert p.stdout == b"", f"stdout is not empty: {p.stdout!r}"
    return p.returncode, p.stderr.decode()


def plugin_conf(node: Node) -> dict:
    """netattach's entry of the conflist as the plugin parses it (the conflist's
    cniVersion in it, as libcni passes it)."""
    doc = node.conf_doc()
    assert doc is not None
    return {**doc["plugins"][0], "cniVersion": doc["cniVersion"]}


def configmap(directory: Path, generation: int, text: str) -> Path:
    """A ConfigMap volume as kubelet's AtomicWriter fills it (a new `..<timestamp>` dir,
    `..data` swapped to it by rename, `netconf.yaml -> ..data/netconf.yaml`); returns
    the file's path, a symlink."""
    directory.mkdir(exist_ok=True)
    gen = directory / f"..2026_01_01_00_00_00.{generation:09d}"
    gen.mkdir()
    (gen / "netconf.yaml").write_text(text)
    old = os.readlink(directory / "..data") if (directory / "..data").is_symlink() else None
    (directory / "..data_tmp").symlink_to(gen.name)
    os.rename(directory / "..data_tmp", directory / "..data")
    path = directory / "netconf.yaml"
    if not path.is_symlink():
        path.symlink_to("..data/netconf.yaml")
    if old:
        shutil.rmtree(directory / old)
    return path


# ---------------------------------------------------------------- the probe

def test_flagless_check_checks_what_the_installer_was_told(node):
    """With k3s' paths and thick mode, the probe (no flags) is not ready without a record
    (and says so), not ready while the installer waits for the primary, ready once all
    is installed, not ready while a file is broken (the installer stopped: SIGSTOP), and
    ready again once the installer repaired it (the conflist and the kubeconfig; the
    binary and the shim script are installed at start only)."""
    code, err = probe(node)
    assert code == 1 and f"no record of the installer's settings at {node.run_dir}" in err

    proc = node.start("--mode", "thick", *K3S, "--source", str(node.root / "onedir"))
    _onedir_with_shim(node.root / "onedir")
    wait_for(lambda: (node.run_dir / "settings.json").exists() or proc.poll() is not None,
             "the installer's record")
    code, err = probe(node)
    assert code == 1 and "not ready: no CNI config" in err, err

    write_atomically(node.conf / "10-k8s.conflist", PRIMARY)
    wait_for(lambda: probe(node)[0] == 0, "the probe to pass")
    conf = plugin_conf(node)
    assert conf["type"] == "netattach-shim"
    assert conf["clusterNetwork"] == "/var/lib/rancher/k3s/agent/etc/cni/net.d/10-k8s.conflist"
    assert conf["binDir"] == "/var/lib/rancher/k3s/data/current/bin"

    proc.send_signal(signal.SIGSTOP)
    try:
        node.ours.write_text(node.ours.read_text().replace("netattach-shim", "netattach"))
        code, err = probe(node)
        assert code == 1 and f"{node.ours} is missing or not current" in err, err
        node.kubeconfig.unlink()
        code, err = probe(node)
        assert code == 1 and f"kubeconfig {node.kubeconfig} is missing" in err, err
    finally:
        proc.send_signal(signal.SIGCONT)
    wait_for(lambda: probe(node)[0] == 0, "the probe to pass after the repair")
    assert node.stop(proc)[0] == 0


def _onedir_with_shim(path: Path) -> None:
    """A fake onedir artifact with the shim's interpreter (binary.install_shim)."""
    path.mkdir()
    shutil.copy(shutil.which("readlink"), path / "netattach")
    (path / "_internal").mkdir()
    (path / "shim" / "bin").mkdir(parents=True)
    shutil.copy(shutil.which("readlink"), path / "shim" / "bin" / "python3")


def test_check_flags_override_the_record_and_a_bad_record_is_not_ready(node):
    write_atomically(node.conf / "10-k8s.conflist", PRIMARY)
    assert node.run("--once", "--log-level", "debug")[0] == 0
    assert probe(node) == (0, "")
    # a flag of the check with a value other than its default: checked instead
    code, err = node.run("--check", "--log-level", "verbose")
    assert code == 1 and "checking with this command's --log-level" in err
    assert f"{node.ours} is missing or not current" in err
    (node.run_dir / "settings.json").write_text('{"settings": {}}')
    code, err = probe(node)
    assert code == 1 and "is not a record of version 1 of the installer's settings" in err


def test_no_writable_run_dir_is_a_warning_not_a_failure(node):
    """An init container (--once) without the pod's emptyDir still installs; only the
    probes could not pass, and the warning says so."""
    write_atomically(node.conf / "10-k8s.conflist", PRIMARY)
    (node.root / "a-file").write_text("")
    code, err = node.run("--once", "--run-dir", str(node.root / "a-file" / "run"))
    assert code == 0 and node.ours.exists(), err
    assert "WARNING" in err and "`install --check` (the probes) will not be ready" in err


# ---------------------------------------------------------------- conf keys

def test_every_conf_key_flag_is_written_and_confdir_only_when_set(node):
    write_atomically(node.conf / "10-k8s.conflist", PRIMARY)
    assert node.run("--once")[0] == 0
    assert "confDir" not in plugin_conf(node)
    assert parse_netconf(plugin_conf(node)).conf_dirs == (DEFAULT_CONF_DIR, MULTUS_CONF_DIR)

    code, err = node.run("--once", "--default-networks", "net-a, other/net-b@data0",
                         "--plugin-conf-dir", "/etc/cni/multus/net.d",
                         "--auxiliary-cni-chain-name", "aux", "--api-timeout", "7",
                         "--delegate-timeout", "90", "--readiness-timeout", "12.5",
                         "--max-networks-per-pod", "40", "--max-same-network-per-pod", "2")
    assert code == 0, err
    assert (plugin_conf(node)["maxNetworksPerPod"], plugin_conf(node)["maxSameNetworkPerPod"]) \
        == (40, 2)
    conf = parse_netconf(plugin_conf(node))
    assert (conf.max_networks_per_pod, conf.max_same_network_per_pod) == (40, 2)
    assert conf.default_networks == ("net-a", "other/net-b@data0")
    assert conf.conf_dirs == ("/etc/cni/multus/net.d",)
    assert conf.auxiliary_chain == "aux"
    assert (conf.api_timeout, conf.delegate_timeout, conf.readiness_timeout) == (7, 90, 12.5)
    assert probe(node) == (0, "")


def test_netconf_file_sets_the_other_keys_and_follows_the_configmap(node):
    """Keys from a ConfigMap's file: merged over the flags' (logLevel), checked by the
    plugin's rules, and re-read while the installer runs: a new ConfigMap generation is
    in the conflist at the next poll, and a bad one is refused (the conflist left as it
    was, the error and the probe naming the key) until it is fixed."""
    write_atomically(node.conf / "10-k8s.conflist", PRIMARY)
    cm = node.root / "configmap"
    path = configmap(cm, 1, """\
# the admin's keys
logLevel: debug
logToStderr: false
logOptions: {maxSize: 50, maxBackups: 2}
defaultNetworks: [monitoring]
podResourcesSocket: /var/lib/kubelet/pod-resources/kubelet.sock
deviceInfoDir: /var/run/k8s.cni.cncf.io/devinfo
retryDeleteOnError: true
networkStatusIPFormat: cidr
""")
    proc = node.start("--netconf-file", str(path), "--log-level", "error")
    wait_for(lambda: probe(node)[0] == 0, "the probe to pass")
    conf = parse_netconf(plugin_conf(node))
    assert conf.log_level == "debug" and conf.log_to_stderr is False
    assert conf.log_options == {"maxSize": 50, "maxBackups": 2}
    assert conf.default_networks == ("monitoring",)
    assert conf.network_status_cidr is True

    configmap(cm, 2, '{"logLevel": "verbose", "apiTimeout": 3}\n')  # JSON is YAML too
    wait_for(lambda: plugin_conf(node).get("apiTimeout") == 3, "the new keys in the conflist")
    assert plugin_conf(node)["logLevel"] == "verbose"
    assert "defaultNetworks" not in plugin_conf(node)
    assert "the keys of --netconf-file" in node.stderr(proc)

    before = node.ours.read_bytes()
    configmap(cm, 3, "defaultNetworks: [Not_A_Name]\n")
    wait_for(lambda: "defaultNetworks.0" in node.stderr(proc), "the refusal in the log")
    code, err = probe(node)
    assert code == 1 and "key 'defaultNetworks.0'" in err and str(path) in err, err
    assert node.ours.read_bytes() == before
    configmap(cm, 4, "defaultNetworks: [monitoring]\n")
    wait_for(lambda: probe(node)[0] == 0, "the probe to pass again")
    assert plugin_conf(node)["defaultNetworks"] == ["monitoring"]
    assert node.stop(proc)[0] == 0


@pytest.mark.parametrize(("text", "extra", "says"), [
    ("clusterNetwork: /etc/cni/net.d/99-other.conf\n", (),
     "key 'clusterNetwork': the installer writes it"),
    ("type: multus\n", (), "key 'type': the installer writes it"),
    ("kubeconfig: /root/.kube/config\n", (), "key 'kubeconfig': the installer writes it"),
    ("chrootDir: /hostroot\n", (), "key 'chrootDir': a Multus key netattach does not honour"),
    ("logLevle: debug\n", (), "key 'logLevle': not a netattach conf key"),
    ("hotplug: true\n", (), "key 'hotplug': hot-plug needs thick mode"),
    ("- logLevel\n", (), "must be a mapping of netattach conf keys"),
    ("logLevel: [\n", (), "is not JSON or YAML"),
    ("apiTimeout: 0\n", (), "key 'apiTimeout'"),
    ("logOptions: {maxSize: -1}\n", (), "key 'logOptions.maxSize'"),
    ("multusNamespace: Kube_System\n", (), "key 'multusNamespace'"),
    ("networkStatusIPFormat: prefix\n", (), "key 'networkStatusIPFormat'"),
    ("{}\n", ("--default-networks", "a,,b@"), "the installer's flags"),
    ("maxNetworksPerPod: 0\n", (), "key 'maxNetworksPerPod'"),
    ("maxSameNetworkPerPod: 1\n", ("--default-networks", "a@x,a@y"), "key 'defaultNetworks'"),
    ("{}\n", ("--default-networks", "a,b", "--max-networks-per-pod", "1"),
     "the installer's flags): invalid netattach configuration: key 'defaultNetworks'"),
])
def test_refused_settings_fail_the_installer_naming_the_key(node, text, extra, says):
    """A refused key or value fails the installer at start (exit 1, nothing written but
    the binary, the kubeconfig and the record) with the key's name, before any ADD could
    fail on it; the probe says the same."""
    write_atomically(node.conf / "10-k8s.conflist", PRIMARY)
    path = node.root / "netconf.yaml"
    path.write_text(text)
    code, err = node.run("--netconf-file", str(path), *extra)
    assert code == 1 and says in err, err
    assert not node.ours.exists()
    code, err = probe(node)
    assert code == 1 and says in err, err


def test_an_admins_edit_is_reverted_with_a_warning(node):
    write_atomically(node.conf / "10-k8s.conflist", PRIMARY)
    proc = node.start()
    wait_for(lambda: probe(node)[0] == 0, "the probe to pass")
    written = node.ours.read_bytes()
    doc = json.loads(written)
    doc["plugins"][0]["logLevel"] = "debug"
    write_atomically(node.ours, doc)
    warning = wait_for(lambda: next((line for line in node.stderr(proc).splitlines()
                                     if "WARNING" in line), None), "the warning")
    assert node.ours.read_bytes() == written
    assert f"{node.ours} was edited by someone else: rewrote it" in warning
    assert "--netconf-file" in warning and "docs/install.md" in warning
    assert node.stop(proc)[0] == 0
