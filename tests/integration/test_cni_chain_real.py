"""The chain engine with real CNI plugins in real network namespaces (needs root).

Debian's plugins (/usr/lib/cni, CNI <= 1.0.0) and the reference plugins v1.9.1
(CNI 1.1.0, built by `make testbin` into $NETATTACH_CNI_BIN) are run exactly as a
runtime would; what they did is checked with `ip`, like an admin would.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from netattach.cni import chain
from netattach.cni.chain import NetworkConfig, RuntimeConf
from netattach.cni.errors import ChildError, CniError
from netattach_testbed import netns as tb

pytestmark = pytest.mark.integration

DEBIAN_BIN = "/usr/lib/cni"
DEFAULT_REF_BIN = "~/.cache/netattach/testbin/cni-v1.9.1"
NEEDED = ("bridge", "host-local", "macvlan", "tuning")


def _require(bin_dir: str, what: str) -> str:
    missing = [p for p in NEEDED if not os.access(os.path.join(bin_dir, p), os.X_OK)]
    if missing:
        pytest.fail(f"{what} missing in {bin_dir}: {', '.join(missing)} "
                    "(run `make test`, which installs and builds them)")
    return bin_dir


@pytest.fixture(scope="module")
def debian_bin() -> str:
    """Debian's containernetworking-plugins (CNI up to 1.0.0); fails if not installed."""
    return _require(DEBIAN_BIN, "Debian CNI plugins")


@pytest.fixture(scope="module")
def ref_bin() -> str:
    """Reference plugins v1.9.1 (CNI 1.1.0); fails (never skips) when not built."""
    d = os.path.expanduser(os.environ.get("NETATTACH_CNI_BIN") or DEFAULT_REF_BIN)
    return _require(d, "reference CNI plugins v1.9.1")


RECORDER = """\
import json, os, sys
conf = json.load(sys.stdin)
cmd = os.environ["CNI_COMMAND"]
rec = {"stdin": conf, "env": {k: v for k, v in os.environ.items() if k.startswith("CNI_")}}
path = os.path.join(conf["recordDir"], f"{conf['tag']}-{cmd}.json")
with open(path, "w") as f:
    json.dump(rec, f)
fail = conf.get("failOn", {}).get(cmd)
if fail:
    print(json.dumps(dict(fail, cniVersion=conf["cniVersion"])))
    sys.exit(1)
if cmd == "ADD":
    prev = conf.get("prevResult") or {
        "cniVersion": conf["cniVersion"],
        "interfaces": [{"name": os.environ["CNI_IFNAME"], "sandbox": os.environ["CNI_NETNS"]}],
        "ips": [{"address": conf.get("address", "192.0.2.10/24"), "interface": 0}]}
    print(json.dumps(prev))
"""


def write_plugin(bin_dir: Path, name: str, body: str) -> Path:
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(0o755)
    return path


@pytest.fixture
def recorder(tmp_path):
    """(bin dir with a `recorder` plugin, dir where it records each call)."""
    bin_dir, rec_dir = tmp_path / "bin", tmp_path / "rec"
    rec_dir.mkdir()
    write_plugin(bin_dir, "recorder", RECORDER)
    return str(bin_dir), rec_dir


def recorded(rec_dir: Path, tag: str, command: str) -> dict:
    return json.loads((rec_dir / f"{tag}-{command}.json").read_text())


def rt_for(ns: str, bin_dirs: tuple[str, ...], cni_path: tuple[str, ...], cid: str = "cid1",
           ifname: str = "eth0", **kw) -> RuntimeConf:
    return RuntimeConf(container_id=cid, netns=tb.netns_path(ns), ifname=ifname,
                       args=(("IgnoreUnknown", "1"), ("K8S_POD_NAME", "pod1")),
                       bin_dirs=bin_dirs, cni_path=cni_path, timeout=kw.pop("timeout", 30.0),
                       **kw)


def link_names(ns: str) -> set[str]:
    return {link["ifname"] for link in tb.links(ns)}


# ------------------------------------------------------------------ Debian plugins

def test_bridge_host_local_031_add_del(host_env, debian_bin):
    ns, br = host_env.new_netns(), host_env.bridge_name()
    net = NetworkConfig.from_dict({
        "cniVersion": "0.3.1", "name": "brnet", "type": "bridge", "bridge": br,
        "ipam": {"type": "host-local", "subnet": "10.81.0.0/24",
                 "dataDir": str(host_env.ipam_dir)}}, "test")
    rt = rt_for(ns, (), (debian_bin,))

    result = chain.add(net, rt)
    assert result["cniVersion"] == "0.3.1"
    assert result["ips"][0]["version"] == "4" and result["ips"][0]["address"] == "10.81.0.2/24"
    assert tb.addresses(ns, "eth0") == ["10.81.0.2/24"]
    assert [p.name for p in host_env.ipam_allocations()] == ["10.81.0.2"]

    chain.delete(net, rt, result)
    assert "eth0" not in link_names(ns)
    assert host_env.ipam_allocations() == []


def test_macvlan_tuning_100_add_check_del(host_env, debian_bin, recorder):
    rec_bin, rec_dir = recorder
    ns, master = host_env.new_netns(), host_env.master_link()
    net = NetworkConfig.from_dict({"cniVersion": "1.0.0", "name": "mvnet", "plugins": [
        {"type": "macvlan", "master": master, "mode": "bridge",
         "ipam": {"type": "host-local", "subnet": "10.82.0.0/24",
                  "dataDir": str(host_env.ipam_dir)}},
        {"type": "tuning", "mac": "c2:00:00:00:82:01"},  # fails without a prevResult
        {"type": "recorder", "tag": "last", "recordDir": str(rec_dir)},
    ]}, "test")
    rt = rt_for(ns, (rec_bin,), (debian_bin,))

    result = chain.add(net, rt)
    assert tb.addresses(ns, "eth0") == ["10.82.0.2/24"]
    assert tb.link_mac(ns, "eth0") == "c2:00:00:00:82:01"
    assert result["cniVersion"] == "1.0.0"
    assert result["ips"] == [{"interface": 0, "address": "10.82.0.2/24",
                              "gateway": "10.82.0.1"}]
    # the recorder (last) got tuning's result, which carries macvlan's, as prevResult
    seen = recorded(rec_dir, "last", "ADD")
    assert seen["stdin"]["prevResult"]["ips"] == result["ips"]
    assert seen["stdin"]["prevResult"]["interfaces"][0]["mac"] == "c2:00:00:00:82:01"
    assert seen["stdin"]["name"] == "mvnet" and seen["stdin"]["cniVersion"] == "1.0.0"
    assert seen["env"]["CNI_ARGS"] == "IgnoreUnknown=1;K8S_POD_NAME=pod1"
    assert seen["env"]["CNI_PATH"] == debian_bin
    assert seen["env"]["CNI_NETNS"] == tb.netns_path(ns)

    chain.check(net, rt, result)  # macvlan and tuning verify against prevResult
    assert recorded(rec_dir, "last", "CHECK")["stdin"]["prevResult"] == result

    chain.delete(net, rt, result)
    assert recorded(rec_dir, "last", "DEL")["stdin"]["prevResult"] == result
    assert "eth0" not in link_names(ns)
    assert host_env.ipam_allocations() == []


def test_check_reports_a_broken_attachment(host_env, debian_bin):
    ns, master = host_env.new_netns(), host_env.master_link()
    net = NetworkConfig.from_dict({"cniVersion": "1.0.0", "name": "mvnet2", "plugins": [
        {"type": "macvlan", "master": master,
         "ipam": {"type": "host-local", "subnet": "10.83.0.0/24",
                  "dataDir": str(host_env.ipam_dir)}}]}, "test")
    rt = rt_for(ns, (), (debian_bin,))
    result = chain.add(net, rt)
    tb.run("ip", "-n", ns, "link", "del", "eth0")
    with pytest.raises(ChildError) as e:
        chain.check(net, rt, result)
    assert e.value.plugin == "macvlan" and e.value.command == "CHECK"
    chain.delete(net, rt, result)
    assert host_env.ipam_allocations() == []


# ------------------------------------------------------------------ reference plugins, CNI 1.1.0

def test_reference_plugins_110_add_status_gc_check_del(host_env, ref_bin, recorder):
    rec_bin, rec_dir = recorder
    br = host_env.bridge_name()
    net = NetworkConfig.from_dict({"cniVersion": "1.1.0", "name": "refnet", "plugins": [
        {"type": "bridge", "bridge": br,
         "ipam": {"type": "host-local", "subnet": "10.84.0.0/24",
                  "dataDir": str(host_env.ipam_dir)}},
        {"type": "tuning", "sysctl": {"net.ipv4.conf.eth0.arp_notify": "1"}},
        {"type": "recorder", "tag": "rec", "recordDir": str(rec_dir)},
    ]}, "test")
    rts = []
    for cid in ("cidA", "cidB"):
        rt = rt_for(host_env.new_netns(), (rec_bin,), (ref_bin,), cid=cid)
        result = chain.add(net, rt)
        assert result["cniVersion"] == "1.1.0"
        # CHECK right away: the bridge's MAC is in the result and the kernel may change
        # it when the next port joins (lowest port MAC), which bridge CHECK then reports
        chain.check(net, rt, result)
        rts.append((rt, result))
    ns_a = Path(rts[0][0].netns).name
    assert tb.addresses(ns_a, "eth0") == ["10.84.0.2/24"]
    assert sorted(p.name for p in host_env.ipam_allocations()) == ["10.84.0.2", "10.84.0.3"]

    chain.status(net, rts[0][0])
    status = recorded(rec_dir, "rec", "STATUS")
    assert status["env"] == {"CNI_COMMAND": "STATUS", "CNI_PATH": ref_bin}
    assert status["stdin"]["name"] == "refnet" and status["stdin"]["cniVersion"] == "1.1.0"
    assert "prevResult" not in status["stdin"] and "runtimeConfig" not in status["stdin"]

    valid = [{"containerID": "cidA", "ifname": "eth0"}]
    chain.gc(net, rts[0][0], valid)
    gc = recorded(rec_dir, "rec", "GC")
    assert gc["env"] == {"CNI_COMMAND": "GC", "CNI_PATH": ref_bin}
    assert gc["stdin"]["cni.dev/valid-attachments"] == valid

    for rt, result in rts:
        chain.delete(net, rt, result)
    assert host_env.ipam_allocations() == []
    assert "eth0" not in link_names(ns_a)


def test_status_failure_is_raised(host_env, ref_bin, recorder):
    rec_bin, rec_dir = recorder
    net = NetworkConfig.from_dict({"cniVersion": "1.1.0", "name": "stnet", "plugins": [
        {"type": "tuning"},
        {"type": "recorder", "tag": "down", "recordDir": str(rec_dir),
         "failOn": {"STATUS": {"code": 50, "msg": "plugin not available", "details": "no IPs"}}},
    ]}, "test")
    with pytest.raises(ChildError) as e:
        chain.status(net, RuntimeConf("", "", "", bin_dirs=(rec_bin,), cni_path=(ref_bin,)))
    assert (e.value.code, e.value.details, e.value.plugin) == (50, "no IPs", "recorder")
    assert "plugin not available" in e.value.msg


def test_status_gc_noop_below_110(host_env, recorder):
    rec_bin, rec_dir = recorder
    net = NetworkConfig.from_dict({"cniVersion": "1.0.0", "name": "old", "plugins": [
        {"type": "recorder", "tag": "old", "recordDir": str(rec_dir)}]}, "test")
    rt = RuntimeConf("", "", "", bin_dirs=(rec_bin,))
    chain.status(net, rt)
    chain.gc(net, rt, [])
    assert list(rec_dir.iterdir()) == []


def test_gc_runs_every_plugin_despite_failures(host_env, recorder):
    rec_bin, rec_dir = recorder
    fail = {"GC": {"code": 117, "msg": "gc broke"}}
    net = NetworkConfig.from_dict({"cniVersion": "1.1.0", "name": "gcnet", "plugins": [
        {"type": "recorder", "tag": "one", "recordDir": str(rec_dir), "failOn": fail},
        {"type": "recorder", "tag": "two", "recordDir": str(rec_dir)},
        {"type": "recorder", "tag": "three", "recordDir": str(rec_dir), "failOn": fail}]}, "test")
    with pytest.raises(CniError) as e:
        chain.gc(net, RuntimeConf("", "", "", bin_dirs=(rec_bin,)), [])
    assert e.value.code == 117 and "2 plugins" in e.value.msg
    assert {p.name for p in rec_dir.iterdir()} == {"one-GC.json", "two-GC.json", "three-GC.json"}


# ------------------------------------------------------------------ failures and timeouts

def test_failing_plugin_raises_childs_error(host_env, ref_bin):
    ns = host_env.new_netns()
    conf = {"cniVersion": "1.1.0", "name": "badnet", "type": "macvlan", "master": "natnosuch0",
            "ipam": {"type": "host-local", "subnet": "10.85.0.0/24",
                     "dataDir": str(host_env.ipam_dir)}}
    # what the plugin itself answers, run by hand
    direct = subprocess.run([os.path.join(ref_bin, "macvlan")], input=json.dumps(conf),
                            capture_output=True, text=True,
                            env={"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "cidX",
                                 "CNI_NETNS": tb.netns_path(ns), "CNI_IFNAME": "eth0",
                                 "CNI_PATH": ref_bin})
    assert direct.returncode != 0
    child = json.loads(direct.stdout)

    net = NetworkConfig.from_dict(conf, "test")
    with pytest.raises(ChildError) as e:
        chain.add(net, rt_for(ns, (), (ref_bin,), cid="cidX"))
    assert e.value.code == child["code"]
    assert child["msg"] in e.value.msg and "macvlan" in e.value.msg and "badnet" in e.value.msg
    assert e.value.details == child.get("details", "")
    assert (e.value.plugin, e.value.network, e.value.command) == ("macvlan", "badnet", "ADD")
    assert host_env.ipam_allocations() == []


def test_add_stops_at_first_failure(host_env, recorder):
    rec_bin, rec_dir = recorder
    net = NetworkConfig.from_dict({"cniVersion": "1.0.0", "name": "stop", "plugins": [
        {"type": "recorder", "tag": "a", "recordDir": str(rec_dir)},
        {"type": "recorder", "tag": "b", "recordDir": str(rec_dir),
         "failOn": {"ADD": {"code": 7, "msg": "bad b"}}},
        {"type": "recorder", "tag": "c", "recordDir": str(rec_dir)}]}, "test")
    with pytest.raises(ChildError) as e:
        chain.add(net, rt_for(host_env.new_netns(), (rec_bin,), ()))
    assert e.value.code == 7 and e.value.plugin_index == 1
    assert {p.name for p in rec_dir.iterdir()} == {"a-ADD.json", "b-ADD.json"}


def test_del_reverse_order_prev_result_only_from_040(host_env, recorder):
    rec_bin, rec_dir = recorder
    prev = {"cniVersion": "1.0.0", "ips": [{"address": "192.0.2.7/24"}]}
    for version, expect_prev in (("0.3.1", False), ("0.4.0", True)):
        net = NetworkConfig.from_dict({"cniVersion": version, "name": "d", "plugins": [
            {"type": "recorder", "tag": f"first{version}", "recordDir": str(rec_dir)},
            {"type": "recorder", "tag": f"second{version}", "recordDir": str(rec_dir)}]}, "t")
        chain.delete(net, rt_for(host_env.new_netns(), (rec_bin,), ()), prev)
        first = rec_dir / f"first{version}-DEL.json"
        second = rec_dir / f"second{version}-DEL.json"
        assert second.stat().st_mtime_ns <= first.stat().st_mtime_ns
        assert ("prevResult" in json.loads(first.read_text())["stdin"]) is expect_prev
    got = recorded(rec_dir, "first0.4.0", "DEL")["stdin"]["prevResult"]
    assert got == {"cniVersion": "0.4.0", "ips": [{"version": "4", "address": "192.0.2.7/24"}]}


def test_del_goes_on_past_a_failure_unlike_libcni(host_env, recorder):
    """libcni's DelNetworkList returns at y's failure and x's DEL never runs (issue 21:
    a bridge's interface and address left behind); netattach DELs x too, then raises
    y's error."""
    rec_bin, rec_dir = recorder
    net = NetworkConfig.from_dict({"cniVersion": "1.0.0", "name": "d2", "plugins": [
        {"type": "recorder", "tag": "x", "recordDir": str(rec_dir)},
        {"type": "recorder", "tag": "y", "recordDir": str(rec_dir),
         "failOn": {"DEL": {"code": 11, "msg": "busy"}}}]}, "t")
    with pytest.raises(ChildError) as e:
        chain.delete(net, rt_for(host_env.new_netns(), (rec_bin,), ()), None)
    assert e.value.code == 11 and e.value.command == "DEL" and e.value.plugin_index == 1
    assert {p.name for p in rec_dir.iterdir()} == {"x-DEL.json", "y-DEL.json"}
    x, y = rec_dir / "x-DEL.json", rec_dir / "y-DEL.json"
    assert y.stat().st_mtime_ns <= x.stat().st_mtime_ns  # still in reverse order


def _dead(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1].startswith("Z")  # zombie: killed, not reaped
    except FileNotFoundError:
        return True


HUNG_SECONDS = 300  # how long the hanging plugin's child sleeps unless killed


def test_hanging_plugin_killed_at_timeout(host_env, tmp_path):
    """A plugin that hangs is killed at delegateTimeout with its own child, and what it
    wrote to stderr is in the error. The plugin is a shell script: it has started its
    child and written its line within milliseconds, long before the 1.5 s deadline even
    on a loaded machine (a Python plugin spent part of it starting up: issue 9,
    defect 11)."""
    pidfile = tmp_path / "grandchild.pid"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "hang").write_text(f"#!/bin/sh\nsleep {HUNG_SECONDS} &\n"
                                  f"echo $! > {pidfile}\n"
                                  "echo 'waiting forever' >&2\nwait\n")
    (bin_dir / "hang").chmod(0o755)
    net = NetworkConfig.from_dict({"cniVersion": "1.0.0", "name": "slow", "type": "hang"}, "t")
    rt = rt_for(host_env.new_netns(), (str(bin_dir),), (), timeout=1.5)
    start = time.monotonic()
    with pytest.raises(ChildError) as e:
        chain.add(net, rt)
    took = time.monotonic() - start
    assert e.value.code == 11 and "timed out after 1.5 seconds" in e.value.msg
    assert "waiting forever" in e.value.details
    # abandoned at the deadline, not before; the ceiling is a hang guard far below what
    # waiting for the child (which holds the plugin's pipes) would take
    assert 1.5 <= took < HUNG_SECONDS / 5, took
    grandchild = int(pidfile.read_text())
    deadline = time.monotonic() + 60  # a hang guard: it is normally dead already
    while not _dead(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _dead(grandchild), "the plugin's own child survived the timeout"


# ------------------------------------------------------------------ runtimeConfig injection

def test_runtime_config_only_to_declaring_plugins(host_env, recorder):
    rec_bin, rec_dir = recorder
    ports = [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]
    net = NetworkConfig.from_dict({"cniVersion": "1.0.0", "name": "caps", "plugins": [
        {"type": "recorder", "tag": "ports", "recordDir": str(rec_dir),
         "capabilities": {"portMappings": True}},
        {"type": "recorder", "tag": "none", "recordDir": str(rec_dir),
         "runtimeConfig": {"portMappings": "static, must not reach the plugin"}},
        {"type": "recorder", "tag": "off", "recordDir": str(rec_dir),
         "capabilities": {"portMappings": False, "ips": True, "mac": True}},
    ]}, "test")
    rt = rt_for(host_env.new_netns(), (rec_bin,), (), capability_args={
        "portMappings": ports, "ips": ["10.86.0.9/24"], "bandwidth": {"ingressRate": 10}})
    result = chain.add(net, rt)
    assert recorded(rec_dir, "ports", "ADD")["stdin"]["runtimeConfig"] == {"portMappings": ports}
    assert "runtimeConfig" not in recorded(rec_dir, "none", "ADD")["stdin"]
    assert recorded(rec_dir, "off", "ADD")["stdin"]["runtimeConfig"] == {"ips": ["10.86.0.9/24"]}
    # prevResult chained through all three, converted to the list version
    assert recorded(rec_dir, "off", "ADD")["stdin"]["prevResult"] == result
    chain.delete(net, rt, result)
    assert recorded(rec_dir, "ports", "DEL")["stdin"]["runtimeConfig"] == {"portMappings": ports}
