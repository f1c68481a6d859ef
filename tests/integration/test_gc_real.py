"""GC (CNI 1.1.0) through the installed `netattach` command, with the reference plugins
v1.9.1 (bridge + host-local, which implement GC) in real network namespaces (needs root).

No API server: CNI_ARGS carry no K8S_POD_*, so netattach attaches the cluster default
network alone: a 1.1.0 conflist file of bridge + host-local + a recording plugin that
captures what each call received.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from netattach.node.statestore import StateStore
from netattach_testbed import netns as tb
from netattach_testbed.netns import HostEnv
from netattach_testbed.scenario import PluginRun, install_bin_dir, netattach_conf

pytestmark = pytest.mark.integration

SUBNET = "198.18.40.0/24"
NETWORK = "gc-cluster"

RECORDER = """\
import json, os, sys
conf = json.load(sys.stdin)
cmd = os.environ["CNI_COMMAND"]
env = {k: v for k, v in os.environ.items() if k.startswith("CNI_")}
with open(os.path.join(conf["recordDir"], "calls.jsonl"), "a") as f:
    f.write(json.dumps({"command": cmd, "stdin": conf, "env": env}) + "\\n")
if os.path.exists(os.path.join(conf["recordDir"], f"fail-{cmd}-{env.get('CNI_CONTAINERID', '')}")):
    print(json.dumps({"cniVersion": conf["cniVersion"], "code": 111, "msg": f"{cmd} told to fail"}))
    sys.exit(1)
if cmd == "ADD":
    print(json.dumps(conf["prevResult"]))
"""


def write_plugin(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(0o755)


@dataclass
class Bed:
    env: HostEnv
    bin_dir: Path
    ref_bin: Path
    netconf: dict
    record_dir: Path

    def run(self, command: str, container_id: str = "", netns: str = "", stdin: dict | None = None,
            ifname: str = "eth0") -> PluginRun:
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "CNI_COMMAND": command,
               "CNI_PATH": str(self.ref_bin)}
        if container_id:
            env.update(CNI_CONTAINERID=container_id, CNI_IFNAME=ifname,
                       CNI_NETNS=tb.netns_path(netns) if netns else "",
                       CNI_ARGS="IgnoreUnknown=1;TEST_TAG=gc")
        p = subprocess.run([str(self.bin_dir / "netattach")], input=json.dumps(stdin or self.netconf),
                           capture_output=True, text=True, env=env, timeout=120)
        return PluginRun(p.returncode, p.stdout, p.stderr)

    def gc(self, *valid: tuple[str, str], key: str = "cni.dev/valid-attachments") -> PluginRun:
        return self.run("GC", stdin={**self.netconf, key: [
            {"containerID": c, "ifname": i} for c, i in valid]})

    def calls(self, command: str) -> list[dict]:
        path = self.record_dir / "calls.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        return [c for c in map(json.loads, lines) if c["command"] == command]

    def allocations(self) -> dict[str, str]:
        """host-local's reservations: IP -> container ID."""
        return {p.name: p.read_text().splitlines()[0].strip() for p in self.env.ipam_allocations()}

    def state_files(self) -> list[str]:
        return self.env.state_files()


@pytest.fixture
def bed(host_env, cni_testbin) -> Bed:
    bin_dir = install_bin_dir(host_env)
    write_plugin(bin_dir, "gcrec", RECORDER)
    record_dir = host_env.root / "rec"
    record_dir.mkdir()
    cluster = host_env.conf_dir / "10-cluster.conflist"
    cluster.write_text(json.dumps({"cniVersion": "1.1.0", "name": NETWORK, "plugins": [
        {"type": "bridge", "bridge": host_env.bridge_name(), "isGateway": True,
         "ipam": {"type": "host-local", "subnet": SUBNET, "dataDir": str(host_env.ipam_dir)}},
        {"type": "gcrec", "recordDir": str(record_dir)},
    ]}))
    netconf = netattach_conf(host_env, host_env.root / "no-kubeconfig", str(cluster), bin_dir,
                             version="1.1.0")
    return Bed(host_env, bin_dir, cni_testbin, netconf, record_dir)


def add(bed: Bed) -> tuple[str, str, str]:
    """ADD a new container; returns (container ID, netns name, its IP/prefix)."""
    cid, ns = uuid.uuid4().hex, bed.env.new_netns()
    run = bed.run("ADD", cid, ns)
    assert run.code == 0, run.stdout + run.stderr
    address = run.doc["ips"][0]["address"]
    assert tb.addresses(ns, "eth0") == [address]
    return cid, ns, address


def link_names(ns: str) -> set[str]:
    return {link["ifname"] for link in tb.links(ns)}


def test_gc_deletes_the_stale_container_and_reaches_the_children(bed):
    cid_a, ns_a, ip_a = add(bed)
    cid_b, ns_b, ip_b = add(bed)
    assert bed.allocations() == {ip_a.split("/")[0]: cid_a, ip_b.split("/")[0]: cid_b}
    assert bed.state_files() == sorted([f"{cid_a}.json", f"{cid_b}.json"])

    run = bed.gc((cid_a, "eth0"))
    assert (run.code, run.stdout) == (0, ""), run.stdout + run.stderr

    # the stale container: DEL-ed as the runtime's DEL would, with the ADD's own values
    assert "eth0" not in link_names(ns_b)
    assert bed.allocations() == {ip_a.split("/")[0]: cid_a}
    assert bed.state_files() == [f"{cid_a}.json"]  # no state, no lock file left
    dels = bed.calls("DEL")
    assert [d["env"]["CNI_CONTAINERID"] for d in dels] == [cid_b]
    assert dels[0]["env"]["CNI_NETNS"] == tb.netns_path(ns_b)
    assert dels[0]["env"]["CNI_IFNAME"] == "eth0"
    assert dels[0]["env"]["CNI_ARGS"] == "IgnoreUnknown=1;TEST_TAG=gc"
    assert dels[0]["stdin"]["prevResult"]["ips"][0]["address"] == ip_b

    # the valid container: untouched
    assert tb.addresses(ns_a, "eth0") == [ip_a]
    assert bed.run("CHECK", cid_a, ns_a).code == 0

    # the children got GC with their own pairs, name and version injected, only CNI_PATH
    (gc,) = bed.calls("GC")
    assert gc["stdin"]["cni.dev/valid-attachments"] == [{"containerID": cid_a, "ifname": "eth0"}]
    assert gc["stdin"]["cni.dev/attachments"] == gc["stdin"]["cni.dev/valid-attachments"]
    assert (gc["stdin"]["name"], gc["stdin"]["cniVersion"]) == (NETWORK, "1.1.0")
    assert gc["env"] == {"CNI_COMMAND": "GC", "CNI_PATH": str(bed.ref_bin)}

    assert bed.run("DEL", cid_a, ns_a).code == 0
    assert bed.allocations() == {} and bed.state_files() == []


def test_gc_accepts_the_older_key_and_keeps_every_valid_container(bed):
    """libcni sends the list under both keys; `cni.dev/attachments` alone works too.
    (bridge and host-local v1.9.1 answer GC without releasing anything ("FIXME GC" in
    their sources), so what the children got is checked through the recorder.)"""
    added = [add(bed) for _ in range(2)]
    run = bed.gc(*((cid, "eth0") for cid, _, _ in added), key="cni.dev/attachments")
    assert (run.code, run.stdout) == (0, ""), run.stdout + run.stderr
    for cid, ns, address in added:
        assert tb.addresses(ns, "eth0") == [address]
        assert bed.allocations()[address.split("/")[0]] == cid
    assert bed.calls("DEL") == []  # nothing of netattach's was stale
    (gc,) = bed.calls("GC")
    assert sorted(a["containerID"] for a in gc["stdin"]["cni.dev/valid-attachments"]) == sorted(
        cid for cid, _, _ in added)
    for cid, ns, _ in added:
        assert bed.run("DEL", cid, ns).code == 0


def test_gc_with_nothing_valid_deletes_everything(bed):
    added = [add(bed) for _ in range(2)]
    run = bed.gc()
    assert (run.code, run.stdout) == (0, ""), run.stdout + run.stderr
    for _, ns, _ in added:
        assert "eth0" not in link_names(ns)
    assert bed.allocations() == {} and bed.state_files() == []
    (gc,) = bed.calls("GC")
    assert gc["stdin"]["cni.dev/valid-attachments"] == []


def test_gc_after_the_netns_is_gone_still_releases_the_ip(bed):
    cid_a, ns_a, _ = add(bed)
    tb.run("ip", "netns", "del", ns_a)
    run = bed.gc()
    assert (run.code, run.stdout) == (0, ""), run.stdout + run.stderr
    assert bed.allocations() == {} and bed.state_files() == []
    assert bed.calls("DEL")[0]["env"].get("CNI_NETNS", "") == ""


def test_gc_refuses_a_request_without_valid_attachments(bed):
    cid_a, ns_a, _ = add(bed)
    run = bed.run("GC")  # netattach's config alone: no cni.dev/valid-attachments
    assert run.code == 1 and run.doc["code"] == 7
    assert "cni.dev/valid-attachments" in run.doc["msg"]
    assert bed.state_files() == [f"{cid_a}.json"] and bed.calls("GC") == []
    assert bed.run("DEL", cid_a, ns_a).code == 0


@pytest.mark.parametrize("version", ["1.0.0", "0.4.0"])
def test_gc_needs_cni_110(bed, version):
    run = bed.run("GC", stdin={**bed.netconf, "cniVersion": version,
                               "cni.dev/valid-attachments": []})
    assert run.code == 1 and run.doc["code"] == 1
    assert "GC needs cniVersion 1.1.0" in run.doc["msg"] and version in run.doc["msg"]


def test_gc_keeps_children_away_from_a_valid_container_without_state(bed):
    """The runtime says a container is valid but netattach has no state for it: its
    children's interfaces are unknown, so no child GC (it would free that pod's IP)."""
    cid_a, ns_a, ip_a = add(bed)
    (bed.env.state_dir / f"{cid_a}.json").unlink()
    run = bed.gc((cid_a, "eth0"))
    assert run.code == 1 and run.doc["code"] == 3 and cid_a in run.doc["msg"]
    assert bed.calls("GC") == []
    assert bed.allocations() == {ip_a.split("/")[0]: cid_a}
    assert tb.addresses(ns_a, "eth0") == [ip_a]


def test_a_failed_stale_del_is_reported_and_the_rest_still_happens(bed):
    cid_a, ns_a, ip_a = add(bed)
    cid_b, ns_b, ip_b = add(bed)
    cid_c, ns_c, ip_c = add(bed)
    fail = bed.record_dir / f"fail-DEL-{cid_b}"
    fail.touch()

    run = bed.gc((cid_a, "eth0"))
    assert run.code == 1 and run.doc["code"] == 11, run.stdout
    assert f"DEL of stale container {cid_b}" in run.doc["msg"]
    assert "DEL told to fail" in run.doc["msg"]
    # C (stale too) is gone, B's state is kept for the next GC or the runtime's DEL
    assert "eth0" not in link_names(ns_c)
    assert bed.state_files() == sorted([f"{cid_a}.json", f"{cid_b}.json"])
    assert ip_c.split("/")[0] not in bed.allocations()
    # the children were still asked, with A's pair only
    (gc,) = bed.calls("GC")
    assert gc["stdin"]["cni.dev/valid-attachments"] == [{"containerID": cid_a, "ifname": "eth0"}]

    fail.unlink()
    assert bed.gc((cid_a, "eth0")).code == 0
    assert bed.state_files() == [f"{cid_a}.json"]
    assert bed.allocations() == {ip_a.split("/")[0]: cid_a}
    assert bed.run("DEL", cid_a, ns_a).code == 0


def test_a_child_gc_error_reaches_the_runtime(bed):
    (bed.record_dir / "fail-GC-").touch()
    run = bed.gc()
    assert run.code == 1 and run.doc["code"] == 111
    assert f"network {NETWORK}" in run.doc["msg"] and "GC told to fail" in run.doc["msg"]


def test_gc_recovers_a_damaged_state_of_a_stale_container_as_del_does(bed):
    """Issue 9, defect 9: GC reported a damaged state and left it, with its interface and
    IP. Now a stale container's damaged file goes through DEL's recovery: kept aside as
    .corrupt, the attachments still whole in it (here all: the file lost its end only)
    released with the netns and ifname read before the damage; no API server needed."""
    cid_a, ns_a, ip_a = add(bed)
    cid_b, ns_b, ip_b = add(bed)
    path = bed.env.state_dir / f"{cid_b}.json"
    path.write_bytes(path.read_bytes()[:-len(b',"format":1}')])
    run = bed.gc((cid_a, "eth0"))
    assert run.code == 0, run.stdout + run.stderr
    assert "eth0" not in link_names(ns_b) and bed.allocations() == {ip_a.split("/")[0]: cid_a}
    assert bed.state_files() == sorted([f"{cid_a}.json", f"{cid_b}.json.corrupt"])
    assert bed.run("DEL", cid_a, ns_a).code == 0


def _waiting_on(path: Path) -> bool:
    """A process waits for the flock of `path` (/proc/locks marks waiters with "->")."""
    ino = path.stat().st_ino
    return any("->" in line and line.split()[-3].endswith(f":{ino}")
               for line in Path("/proc/locks").read_text().splitlines())


def test_gc_never_deletes_a_container_an_add_ran_on_meanwhile(bed):
    """An operation holds container B's lock (here the test, as an ADD still attaching
    would) and rewrites B's state before it lets go: GC, which waited for the lock,
    leaves B alone although the runtime's list lacks it, and asks no child to GC (B's
    attachments may be newer than the list); the next GC, with B unchanged, DELs it."""
    cid_a, ns_a, ip_a = add(bed)
    cid_b, ns_b, ip_b = add(bed)
    store = StateStore(str(bed.env.state_dir))
    with ThreadPoolExecutor(1) as pool:
        with store.lock(cid_b):
            lock = bed.env.state_dir / f"{cid_b}.lock"
            gc = pool.submit(bed.gc, (cid_a, "eth0"))
            wait_until(lambda: _waiting_on(lock), "GC waiting for B's lock")
            store.save(store.load(cid_b))  # the ADD's last save
        run = gc.result(timeout=120)
    assert (run.code, run.stdout) == (0, ""), run.stdout + run.stderr
    assert tb.addresses(ns_b, "eth0") == [ip_b]
    assert sorted(bed.allocations().values()) == sorted([cid_a, cid_b])
    assert bed.calls("DEL") == [] and bed.calls("GC") == []
    run = bed.gc((cid_a, "eth0"))
    assert (run.code, run.stdout) == (0, ""), run.stdout + run.stderr
    assert [d["env"]["CNI_CONTAINERID"] for d in bed.calls("DEL")] == [cid_b]
    assert bed.allocations() == {ip_a.split("/")[0]: cid_a} and len(bed.calls("GC")) == 1
    assert bed.run("DEL", cid_a, ns_a).code == 0


def wait_until(condition, what: str, timeout: float = 60) -> None:
    """Poll `condition` until true; `timeout` is a hang guard."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not reached: {what}"
        time.sleep(0.05)
