"""CNI protocol versions, CHECK, STATUS and error codes through the installed `netattach`
command, as a runtime calls it, with real plugins in real network namespaces (needs root).

No API server: CNI_ARGS carry no K8S_POD_*, so netattach attaches the cluster default
network alone. Debian's plugins (/usr/lib/cni) speak CNI up to 1.0.0, the reference
plugins v1.9.1 (`cni_testbin`) 1.1.0.
"""
from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from netattach_testbed import netns as tb
from netattach_testbed.netns import HostEnv
from netattach_testbed.scenario import (
    DEBIAN_CNI_DIR,
    PluginRun,
    bridge_conf,
    install_bin_dir,
    netattach_conf,
)

pytestmark = pytest.mark.integration

SUBNET = "198.18.50.0/24"

# A plugin that records each call in recordDir; answers ADD with its prevResult, and
# fails a command named in "failOn" with the given error object.
SCRIPT = """\
import json, os, sys
conf = json.load(sys.stdin)
cmd = os.environ["CNI_COMMAND"]
with open(os.path.join(conf["recordDir"], "calls.jsonl"), "a") as f:
    f.write(json.dumps({"command": cmd, "name": conf["name"]}) + "\\n")
fail = conf.get("failOn", {}).get(cmd)
if fail:
    print(json.dumps(dict(fail, cniVersion=conf["cniVersion"])))
    sys.exit(1)
if cmd == "ADD":
    if conf.get("sleep"):
        import time
        time.sleep(conf["sleep"])
    print(json.dumps(conf.get("prevResult") or {"cniVersion": conf["cniVersion"]}))
"""


@dataclass
class Bed:
    env: HostEnv
    bin_dir: Path
    record_dir: Path
    ref_bin: Path

    def conf(self, cluster: dict, version: str, filename: str = "10-cluster.conflist",
             **extra) -> dict:
        """netattach's config at `version` with `cluster` as the cluster default network."""
        path = self.env.conf_dir / filename
        path.write_text(json.dumps(cluster))
        return netattach_conf(self.env, self.env.root / "no-kubeconfig", str(path),
                              self.bin_dir, version=version, **extra)

    def run(self, command: str, netconf: dict, container_id: str = "", netns: str = "",
            cni_path: str = DEBIAN_CNI_DIR, args: str = "IgnoreUnknown=1") -> PluginRun:
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "CNI_COMMAND": command,
               "CNI_PATH": cni_path}
        if container_id:
            env.update(CNI_CONTAINERID=container_id, CNI_IFNAME="eth0", CNI_ARGS=args,
                       CNI_NETNS=tb.netns_path(netns) if netns else "/var/run/netns/none")
        p = subprocess.run([str(self.bin_dir / "netattach")], input=json.dumps(netconf),
                           capture_output=True, text=True, env=env, timeout=120)
        assert p.stdout.count("\n") <= 1, f"more than one line on stdout: {p.stdout!r}"
        return PluginRun(p.returncode, p.stdout, p.stderr)

    def calls(self) -> list[str]:
        path = self.record_dir / "calls.jsonl"
        return [json.loads(l)["command"] for l in path.read_text().splitlines()] \
            if path.exists() else []

    def script(self, **extra) -> dict:
        return {"type": "script", "recordDir": str(self.record_dir), **extra}


@pytest.fixture
def bed(host_env, cni_testbin) -> Bed:
    bin_dir = install_bin_dir(host_env)
    (bin_dir / "script").write_text(f"#!{sys.executable}\n{SCRIPT}")
    (bin_dir / "script").chmod(0o755)
    record_dir = host_env.root / "rec"
    record_dir.mkdir()
    return Bed(host_env, bin_dir, record_dir, cni_testbin)


def debian_bridge(bed: Bed, version: str) -> dict:
    return bridge_conf(bed.env.bridge_name(), SUBNET, bed.env.ipam_dir, name="cluster-net",
                       version=version, gateway=True)


def new_container(bed: Bed) -> tuple[str, str]:
    return uuid.uuid4().hex, bed.env.new_netns()


# ------------------------------------------------------------------ versions, ADD, CHECK

@pytest.mark.parametrize("version", ["0.4.0", "1.0.0", "1.1.0"])
def test_031_default_network_under_each_netattach_version(bed, version):
    conf = bed.conf(debian_bridge(bed, "0.3.1"), version, "10-cluster.conf")
    cid, ns = new_container(bed)

    add = bed.run("ADD", conf, cid, ns)
    assert add.code == 0, add.stdout + add.stderr
    result = add.doc
    assert result["cniVersion"] == version  # converted from the child's 0.3.1
    (ip,) = result["ips"]
    assert ipaddress.ip_interface(ip["address"]) in ipaddress.ip_network(SUBNET)
    assert ("version" in ip) == (version == "0.4.0")  # dropped from 1.0.0 on
    eth0 = result["interfaces"][ip["interface"]]
    assert (eth0["name"], eth0["sandbox"]) == ("eth0", tb.netns_path(ns))
    assert tb.addresses(ns, "eth0") == [ip["address"]]

    check = bed.run("CHECK", conf, cid, ns)  # the 0.3.1 child has no CHECK: nothing to run
    assert (check.code, check.stdout) == (0, ""), check.stdout

    delete = bed.run("DEL", conf, cid, ns)
    assert (delete.code, delete.stdout) == (0, ""), delete.stdout
    assert "eth0" not in {l["ifname"] for l in tb.links(ns)}
    assert bed.env.ipam_allocations() == [] and bed.env.state_files() == []


def test_check_runs_on_a_100_default_network_and_reports_a_broken_one(bed):
    cluster = {"cniVersion": "1.0.0", "name": "cluster-net", "plugins": [
        debian_bridge(bed, "1.0.0"), bed.script()]}
    conf = bed.conf(cluster, "1.0.0")
    cid, ns = new_container(bed)
    assert bed.run("ADD", conf, cid, ns).code == 0

    check = bed.run("CHECK", conf, cid, ns)
    assert (check.code, check.stdout) == (0, ""), check.stdout
    assert bed.calls() == ["ADD", "CHECK"]

    tb.run("ip", "-n", ns, "addr", "flush", "dev", "eth0")
    check = bed.run("CHECK", conf, cid, ns)
    assert check.code == 1
    assert "plugin type='bridge'" in check.doc["msg"] and "(check)" in check.doc["msg"]
    assert check.doc["cniVersion"] == "1.0.0"
    assert bed.run("DEL", conf, cid, ns).code == 0
    assert bed.env.ipam_allocations() == []


def test_check_needs_netattach_040(bed):
    conf = bed.conf(debian_bridge(bed, "0.3.1"), "0.3.1", "10-cluster.conf")
    cid, ns = new_container(bed)
    assert bed.run("ADD", conf, cid, ns).code == 0
    check = bed.run("CHECK", conf, cid, ns)
    assert check.code == 1 and check.doc["code"] == 1 and "0.4.0" in check.doc["msg"]
    assert bed.run("DEL", conf, cid, ns).code == 0


# ------------------------------------------------------------------ STATUS

def ref_cluster(bed: Bed, version: str = "1.1.0", **script) -> dict:
    return {"cniVersion": version, "name": "cluster-net", "plugins": [
        {"type": "bridge", "bridge": bed.env.bridge_name(),
         "ipam": {"type": "host-local", "subnet": SUBNET, "dataDir": str(bed.env.ipam_dir)}},
        bed.script(**script)]}


def test_status_is_forwarded_to_a_110_default_network(bed):
    conf = bed.conf(ref_cluster(bed), "1.1.0")
    run = bed.run("STATUS", conf, cni_path=str(bed.ref_bin))
    assert (run.code, run.stdout) == (0, ""), run.stdout + run.stderr
    assert bed.calls() == ["STATUS"]  # after bridge (and its host-local) answered


@pytest.mark.parametrize("code", [50, 51])
def test_status_error_of_the_default_network_passes_through(bed, code):
    conf = bed.conf(ref_cluster(bed, failOn={"STATUS": {"code": code, "msg": "overlay down"}}),
                    "1.1.0")
    run = bed.run("STATUS", conf, cni_path=str(bed.ref_bin))
    assert run.code == 1
    assert run.doc["code"] == code and "overlay down" in run.doc["msg"]
    assert run.doc["cniVersion"] == "1.1.0"


def test_status_on_a_031_default_network_is_a_no_op(bed):
    # the script would fail STATUS if it ran; below 1.1.0 STATUS does not exist
    conf = bed.conf(bed.script(name="cluster-net", cniVersion="0.3.1",
                               failOn={"STATUS": {"code": 50, "msg": "must not run"}}),
                    "1.1.0", "10-cluster.conf")
    run = bed.run("STATUS", conf)
    assert (run.code, run.stdout) == (0, ""), run.stdout
    assert bed.calls() == []


def test_status_without_the_default_network_config_is_not_available(bed):
    conf = bed.conf(ref_cluster(bed), "1.1.0")
    conf["clusterNetwork"] = str(bed.env.conf_dir / "missing.conflist")
    run = bed.run("STATUS", conf, cni_path=str(bed.ref_bin))
    assert run.code == 1 and run.doc["code"] == 50 and "missing.conflist" in run.doc["msg"]


# ------------------------------------------------------------------ error codes

def test_api_unreachable_is_11(bed, tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:9",
                                               "insecure-skip-tls-verify": True}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}]}))
    conf = {**bed.conf(debian_bridge(bed, "0.3.1"), "1.0.0", "10-cluster.conf"),
            "kubeconfig": str(kubeconfig), "apiTimeout": 2}
    cid, ns = new_container(bed)
    pod_args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns1;K8S_POD_NAME=p1"
    run = bed.run("ADD", conf, cid, ns, args=pod_args)
    assert run.code == 1 and run.doc["code"] == 11 and "ns1/p1" in run.doc["msg"]
    conf["kubeconfig"] = str(tmp_path / "missing")
    run = bed.run("ADD", conf, cid, ns, args=pod_args)
    assert run.code == 1 and run.doc["code"] == 11 and "kubeconfig" in run.doc["msg"]
    assert bed.calls() == [] and bed.env.ipam_allocations() == []


@pytest.mark.parametrize("command", ["ADD", "DEL", "CHECK"])
def test_unusable_state_dir_is_5(bed, command):
    conf = bed.conf(debian_bridge(bed, "0.3.1"), "1.0.0", "10-cluster.conf")
    conf["cniDir"] = str(bed.env.root / "a-file")
    Path(conf["cniDir"]).write_text("")
    cid, ns = new_container(bed)
    run = bed.run(command, conf, cid, ns)
    assert run.code == 1 and run.doc["code"] == 5 and "a-file" in run.doc["msg"]


@pytest.mark.parametrize("command", ["DEL", "CHECK"])
def test_a_state_path_that_is_a_directory_is_5_not_999(bed, command):
    conf = bed.conf(debian_bridge(bed, "0.3.1"), "1.0.0", "10-cluster.conf")
    cid, ns = new_container(bed)
    (bed.env.state_dir / f"{cid}.json").mkdir()
    run = bed.run(command, conf, cid, ns)
    assert run.code == 1 and run.doc["code"] == 5, run.stdout
    assert "Is a directory" in run.doc["msg"]


@pytest.mark.parametrize("command,code", [("DEL", 0), ("CHECK", 5)])
def test_a_state_of_the_wrong_shape_is_classified(bed, command, code):
    conf = bed.conf(debian_bridge(bed, "0.3.1"), "1.0.0", "10-cluster.conf")
    cid, ns = new_container(bed)
    (bed.env.state_dir / f"{cid}.json").write_text('{"format": 1}')
    run = bed.run(command, conf, cid, ns)
    assert run.code == (1 if code else 0)
    assert (run.doc.get("code") if run.stdout else 0) == code


@pytest.mark.parametrize("content", [None, "{broken", '{"name": "x", "type": "bridge", "cniVersion": "9.9.9"}'])
def test_an_unusable_default_network_config_is_7(bed, content):
    conf = bed.conf(debian_bridge(bed, "0.3.1"), "1.0.0", "10-cluster.conf")
    path = Path(conf["clusterNetwork"])
    if content is None:
        path.unlink()
    else:
        path.write_text(content)
    cid, ns = new_container(bed)
    run = bed.run("ADD", conf, cid, ns)
    assert run.code == 1 and run.doc["code"] == 7 and str(path) in run.doc["msg"]
    assert bed.env.state_files() == []


def test_a_missing_plugin_is_7(bed):
    conf = bed.conf({"cniVersion": "1.0.0", "name": "cluster-net", "type": "no-such-plugin"},
                    "1.0.0", "10-cluster.conf")
    cid, ns = new_container(bed)
    run = bed.run("ADD", conf, cid, ns)
    assert run.code == 1 and run.doc["code"] == 7 and "no-such-plugin" in run.doc["msg"]
    assert bed.env.state_files() == []  # rolled back: nothing left


def test_a_childs_own_code_and_a_timeout(bed):
    conf = bed.conf(bed.script(name="cluster-net", cniVersion="1.0.0",
                               failOn={"ADD": {"code": 123, "msg": "no capacity"}}),
                    "1.0.0", "10-cluster.conf")
    cid, ns = new_container(bed)
    run = bed.run("ADD", conf, cid, ns)
    assert run.code == 1 and run.doc["code"] == 123 and "no capacity" in run.doc["msg"]

    conf = bed.conf(bed.script(name="cluster-net", cniVersion="1.0.0", sleep=30),
                    "1.0.0", "10-cluster.conf", delegateTimeout=1)
    run = bed.run("ADD", conf, cid, ns)
    assert run.code == 1 and run.doc["code"] == 11 and "timed out" in run.doc["msg"]
    # each failed ADD rolled back. The timed-out child records its ADD once its Python
    # has started, which a loaded machine can delay past the 1 s: that it was run is
    # what "timed out" says; that it got as far as recording is no business of netattach
    assert bed.calls() in (["ADD", "DEL", "ADD", "DEL"], ["ADD", "DEL", "DEL"])
    assert bed.env.state_files() == []


# ------------------------------------------------------------------ Multus keys

def sysctl(ns: str, key: str) -> str:
    return tb.run("ip", "netns", "exec", ns, "sysctl", "-n", key).stdout.strip()


def test_auxiliary_cni_chain_runs_the_plugins_of_its_subdirectory(bed):
    """Multus' auxiliaryCNIChainName: the plugin configs in
    <dir of clusterNetwork>/<name>/*.conf run last as one chain (the reference tuning
    here, which needs a prevResult: netattach starts the chain from an empty one, where
    Multus runs its passthru plugin), with CNI_IFNAME net<N>; it is saved and DEL-ed
    like any attachment."""
    chain_dir = bed.env.conf_dir / "pod-tuning"
    chain_dir.mkdir(parents=True)
    (chain_dir / "10-arp.conf").write_text(json.dumps(
        {"type": "tuning", "name": "arp", "sysctl": {"net.ipv4.conf.eth0.arp_filter": "1"}}))
    conf = bed.conf(debian_bridge(bed, "1.0.0"), "1.0.0", "10-cluster.conf",
                    auxiliaryCNIChainName="pod-tuning")
    cid, ns = new_container(bed)
    assert sysctl(ns, "net.ipv4.conf.all.arp_filter") == "0"
    add = bed.run("ADD", conf, cid, ns, cni_path=str(bed.ref_bin))
    assert add.code == 0, add.stdout + (bed.env.log_dir / "netattach.log").read_text()
    assert sysctl(ns, "net.ipv4.conf.eth0.arp_filter") == "1"
    assert add.doc["interfaces"][add.doc["ips"][0]["interface"]]["name"] == "eth0"
    state = json.loads((bed.env.state_dir / f"{cid}.json").read_text())
    assert [(a["network"], a["ifname"]) for a in state["attachments"]] == [
        ("cluster-net", "eth0"), ("pod-tuning", "net1")]
    delete = bed.run("DEL", conf, cid, ns, cni_path=str(bed.ref_bin))
    assert (delete.code, delete.stdout) == (0, ""), delete.stdout
    assert bed.env.ipam_allocations() == [] and bed.env.state_files() == []


def test_multus_keys_not_honoured_are_named_in_one_warning(bed):
    conf = bed.conf(debian_bridge(bed, "1.0.0"), "1.0.0", "10-cluster.conf",
                    delegates=[{"type": "flannel"}], socketDir="/run/multus")
    cid, ns = new_container(bed)
    assert bed.run("ADD", conf, cid, ns).code == 0
    assert bed.run("DEL", conf, cid, ns).code == 0
    warnings = [l for l in (bed.env.log_dir / "netattach.log").read_text().splitlines()
                if " WARNING " in l]
    assert len(warnings) == 2 and all(  # one per invocation, naming both keys
        "not honoured" in w and "delegates (" in w and "socketDir (" in w
        for w in warnings), warnings


# ------------------------------------------------------------------ netattach's own version

@pytest.mark.parametrize("version", ["2.0.0", "1.2.0", "1.0"])
def test_an_unsupported_netattach_version_runs_no_child(bed, version):
    """Issue 9, defect 1: netattach's own cniVersion was checked only for its format;
    with 2.0.0 an ADD ran every child and failed afterwards. Now: code 1 first."""
    conf = bed.conf(bed.script(name="cluster-net", cniVersion="1.0.0"), version,
                    "10-cluster.conf")
    cid, ns = new_container(bed)
    for command in ("ADD", "DEL", "CHECK"):
        run = bed.run(command, conf, cid, ns)
        assert run.code == 1 and run.doc["code"] == 1 and version in run.doc["msg"], run.stdout
        assert run.doc["cniVersion"] == "1.1.0"  # an error in a version netattach speaks
    assert bed.calls() == [] and bed.env.state_files() == []


def test_a_result_that_cannot_be_given_in_the_asked_version_rolls_back(bed):
    """Issue 9, defect 1: a 0.2.0 netattach config whose cluster default network (a
    bridge without IPAM) returns no IP address: results of 0.1.0/0.2.0 need one, so the
    ADD fails with code 1, and now every attachment is DEL-ed first (it used to be left
    attached, its state saved, with the runtime told the ADD failed)."""
    cluster = {"cniVersion": "0.3.1", "name": "cluster-net", "type": "bridge",
               "bridge": bed.env.bridge_name()}
    conf = bed.conf(cluster, "0.2.0", "10-cluster.conf")
    cid, ns = new_container(bed)
    run = bed.run("ADD", conf, cid, ns)
    assert run.code == 1 and run.doc["code"] == 1, run.stdout
    assert "no IP address" in run.doc["msg"]
    assert {l["ifname"] for l in tb.links(ns)} == {"lo"}  # eth0 was created, then DEL-ed
    assert bed.env.state_files() == []
    assert bed.run("DEL", conf, cid, ns).code == 0  # the runtime's cleanup DEL: nothing left
