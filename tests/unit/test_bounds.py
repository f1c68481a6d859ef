"""Issue 21, "Bounded work per pod": a tenant's annotation cannot cost a node unbounded
work. The caps on a pod's networks (networks.check_caps, the conf keys
maxNetworksPerPod and maxSameNetworkPerPod), refused with code 7 before any NAD is read
or any child runs; and the state an ADD writes, linear in its attachments
(state.py "Progress"), measured in bytes the process wrote, never in time. Through the
fakes of test_attach (fake API and executor, real state files)."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from netattach.cni.errors import CniError
from netattach.commands import networks
from netattach.spec.netconf import parse_netconf
from netattach.spec.pod import PodRef
from tests.unit.test_attach import CID, NS, POD, Bed
from tests.unit.test_attach_claims import CLAIM, ClaimApi

ANNOTATION = "k8s.v1.cni.cncf.io/networks"
BASE = {"type": "netattach", "clusterNetwork": "/etc/cni/net.d/10-bridge.conf"}
PODREF = PodRef(NS, POD, "uid-1")


def conf(**keys):
    return parse_netconf({**BASE, **keys})


def comma(n: int, network: str = "net-a") -> str:
    """n elements of `network` in the comma form, each with its own interface."""
    return ",".join(f"{network}@if{i}" for i in range(n))


def as_json(n: int, network: str = "net-a") -> str:
    return json.dumps([{"name": network, "interface": f"if{i}"} for i in range(n)])


def distinct(n: int, form=comma) -> str:
    """n elements, each of another network (so only the count cap applies)."""
    if form is comma:
        return ",".join(f"net{i}" for i in range(n))
    return json.dumps([{"name": f"net{i}"} for i in range(n)])


# ---------------------------------------------------------------- the caps, pure

@pytest.mark.parametrize("form", [comma, as_json], ids=["comma", "json"])
def test_the_default_count_cap_is_32_elements_in_either_form(form):
    c = conf()
    assert (c.max_networks_per_pod, c.max_same_network_per_pod) == (32, 4)
    elements, _ = networks.selected_elements(c, PODREF, {ANNOTATION: distinct(32, form)})
    assert len(elements) == 32
    with pytest.raises(networks.OverCap) as e:
        networks.selected_elements(c, PODREF, {ANNOTATION: distinct(33, form)})
    assert e.value.code == 7 and isinstance(e.value, networks.InvalidSelection)
    assert e.value.msg == (f"pod {NS}/{POD}: {ANNOTATION} selects 33 networks; at most 32 "
                           "are allowed per pod (maxNetworksPerPod=32 in netattach's "
                           "configuration)")


@pytest.mark.parametrize("form", [comma, as_json], ids=["comma", "json"])
def test_the_default_same_network_cap_is_4_in_either_form(form):
    c = conf()
    assert len(networks.selected_elements(c, PODREF, {ANNOTATION: form(4)})[0]) == 4
    with pytest.raises(networks.OverCap) as e:
        networks.selected_elements(c, PODREF, {ANNOTATION: form(5)})
    assert e.value.code == 7
    assert e.value.msg == (f"pod {NS}/{POD}: {ANNOTATION} selects network {NS}/net-a 5 "
                           "times; at most 4 attachments of one network are allowed per pod "
                           "(maxSameNetworkPerPod=4 in netattach's configuration)")


def test_one_network_is_one_whatever_the_spelling():
    """`net-a`, `ns1/net-a` and {"name": "net-a", "namespace": "ns1"} in a pod of ns1
    all select ns1/net-a (§4.1.1): they count together."""
    value = f"net-a,{NS}/net-a@x"
    c = conf(maxSameNetworkPerPod=2)
    networks.selected_elements(c, PODREF, {ANNOTATION: value})
    with pytest.raises(networks.OverCap, match=f"network {NS}/net-a 3 times"):
        networks.selected_elements(c, PODREF, {ANNOTATION: value + ",net-a@y"})
    # the same name in another namespace is another network
    networks.selected_elements(c, PODREF, {ANNOTATION: value + ",other/net-a"})


def test_default_networks_and_claim_networks_count_with_the_annotation():
    c = conf(defaultNetworks=["net-a", "net-b"], maxNetworksPerPod=5, maxSameNetworkPerPod=2)
    networks.selected_elements(c, PODREF, {ANNOTATION: "x,y"}, claims=1)
    with pytest.raises(networks.OverCap) as e:
        networks.selected_elements(c, PODREF, {ANNOTATION: "x,y"}, claims=2)
    assert e.value.msg == (f"pod {NS}/{POD}: {ANNOTATION} selects 2 networks (and 2 from "
                           "defaultNetworks and 2 from ResourceClaims: 6 in all); at most 5 are "
                           "allowed per pod (maxNetworksPerPod=5 in netattach's configuration)")
    with pytest.raises(networks.OverCap) as e:
        networks.selected_elements(c, PODREF,
                                   {ANNOTATION: "kube-system/net-a@x,kube-system/net-a@y"})
    assert e.value.msg.startswith(
        f"pod {NS}/{POD}: {ANNOTATION} selects network kube-system/net-a 2 times (and "
        "defaultNetworks 1 time: 3 in all); at most 2 ")
    # a pod in a system namespace gets no defaultNetworks: they do not count for it
    system = PodRef("kube-system", "p")
    assert len(networks.selected_elements(c, system, {ANNOTATION: distinct(5)})[0]) == 5


def test_a_pod_not_read_is_only_its_default_networks():
    """DEL and STATUS paths that do not read the pod: defaultNetworks alone, which
    parse_netconf already held to the caps."""
    c = conf(defaultNetworks=["net-a"], maxNetworksPerPod=1)
    assert len(networks.selected_elements(c, PODREF, None)[0]) == 1


@pytest.mark.parametrize("keys, key", [
    ({"maxNetworksPerPod": 0}, "maxNetworksPerPod"),
    ({"maxNetworksPerPod": 1025}, "maxNetworksPerPod"),
    ({"maxNetworksPerPod": "8"}, "maxNetworksPerPod"),
    ({"maxNetworksPerPod": 2.5}, "maxNetworksPerPod"),
    ({"maxSameNetworkPerPod": True}, "maxSameNetworkPerPod"),
    ({"maxSameNetworkPerPod": -1}, "maxSameNetworkPerPod"),
    ({"defaultNetworks": ["a", "b", "c"], "maxNetworksPerPod": 2}, "defaultNetworks"),
    ({"defaultNetworks": ["a@x", "a@y"], "maxSameNetworkPerPod": 1}, "defaultNetworks"),
])
def test_bad_cap_settings_fail_naming_the_key(keys, key):
    with pytest.raises(CniError) as e:
        conf(**keys)
    assert e.value.code == 7 and f"key {key!r}" in e.value.msg


def test_caps_take_any_integer_in_range():
    c = conf(maxNetworksPerPod=1024, maxSameNetworkPerPod=1.0)
    assert (c.max_networks_per_pod, c.max_same_network_per_pod) == (1024, 1)
    assert isinstance(c.max_same_network_per_pod, int)


# ---------------------------------------------------------------- an ADD over a cap

@pytest.fixture
def bed(tmp_path):
    return Bed(tmp_path)


@pytest.mark.parametrize("value, keys, text", [
    (distinct(33), {}, "maxNetworksPerPod=32"),
    (as_json(5), {}, "maxSameNetworkPerPod=4"),
    (comma(3), {"maxNetworksPerPod": 2}, "maxNetworksPerPod=2"),
    (comma(2), {"maxSameNetworkPerPod": 1}, "maxSameNetworkPerPod=1"),
], ids=["count-default", "same-default", "count-set", "same-set"])
def test_an_add_over_a_cap_runs_nothing_reads_no_nad_and_reports(bed, value, keys, text):
    bed.api.networks = value
    with pytest.raises(CniError) as e:
        bed.run("ADD", **keys)
    assert e.value.code == 7 and text in e.value.msg and ANNOTATION in e.value.msg
    assert e.value.msg.startswith(f"pod {NS}/{POD}: ")
    assert bed.exe.calls == []  # no child, not even the cluster default network's
    assert [c[0] for c in bed.api.calls] == ["GET pod", "POST event"]
    assert bed.api.events == [("InvalidNetworkSelection", e.value.msg)]
    assert bed.files() == [f"{CID}.deleted"]  # nothing attached: DEL has nothing to do


def test_an_add_at_the_caps_attaches_every_network(bed):
    bed.api.networks = "net-a@a0,net-a@a1,other/net-b@b0"
    bed.run("ADD", maxNetworksPerPod=3, maxSameNetworkPerPod=2)
    assert [a.ifname for a in bed.store.load(CID).attachments] == ["eth0", "a0", "a1", "b0"]


@pytest.mark.parametrize("claim_networks", [1, 2])
def test_claim_networks_count_once_they_are_known(tmp_path, claim_networks):
    """A claim with `claim_networks` CNI devices and the pod's net-a, with a cap of 2:
    one claim network fits; two make three networks, refused before any child runs."""
    api = ClaimApi(networks="net-a")
    claim = copy.deepcopy(CLAIM)
    alloc = claim["status"]["allocation"]["devices"]
    claim["spec"]["devices"]["requests"] = [
        {"name": f"r{i}", "exactly": claim["spec"]["devices"]["requests"][0]["exactly"]}
        for i in range(claim_networks)]
    alloc["results"] = [{**alloc["results"][0], "request": f"r{i}"}
                        for i in range(claim_networks)]
    alloc["config"] = [{**alloc["config"][0], "requests": [f"r{i}"],
                        "opaque": {**alloc["config"][0]["opaque"], "parameters": {
                            **alloc["config"][0]["opaque"]["parameters"], "ifName": f"dra{i}"}}}
                       for i in range(claim_networks)]
    api.claim = claim
    bed = Bed(tmp_path, api=api)
    if claim_networks == 1:
        bed.run("ADD", maxNetworksPerPod=2)
        assert [a.ifname for a in bed.store.load(CID).attachments] == ["eth0", "net1", "dra0"]
        return
    with pytest.raises(CniError) as e:
        bed.run("ADD", maxNetworksPerPod=2)
    assert e.value.code == 7 and "(and 2 from ResourceClaims: 3 in all)" in e.value.msg
    assert bed.exe.calls == [] and bed.files() == [f"{CID}.deleted"]
    assert ("InvalidNetworkSelection", e.value.msg) in api.events


# ---------------------------------------------------------------- bytes an ADD writes

def _bytes_written() -> int:
    """Bytes this thread passed to write(2) and friends so far (the kernel's task I/O
    accounting, `wchar` of /proc/thread-self/io): the state files' writes, whatever
    the code that makes them."""
    for line in Path("/proc/thread-self/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise AssertionError("no wchar in /proc/thread-self/io")


UNCAPPED = {"maxNetworksPerPod": 1024, "maxSameNetworkPerPod": 1024}


def _add_bytes(tmp: Path, n: int) -> tuple[int, int]:
    """(bytes written by one ADD of a pod with n selection elements, the size of the
    state it leaves)."""
    tmp.mkdir()
    bed = Bed(tmp)
    bed.api.networks = comma(n)
    bed.conf()  # its files are written before the count starts
    before = _bytes_written()
    bed.run("ADD", **UNCAPPED)
    written = _bytes_written() - before
    assert len(bed.store.load(CID).attachments) == n + 1
    return written, (tmp / "state" / f"{CID}.json").stat().st_size


def test_an_add_writes_bytes_linear_in_its_attachments(tmp_path):
    """Issue 21: the state was rewritten whole after each child, so an ADD of n
    attachments wrote O(n^2) bytes (measured with this test before the change: 3.4 MB
    for 100 elements, 13.5 MB for 200, 53 MB for 400; about 758 MB for 1000 with real
    NADs). Now the plan is saved once, each child appends its record, the end saves
    once: doubling the attachments at most doubles the bytes (plus a constant), and
    the ADD writes a small multiple of the state it leaves."""
    _add_bytes(tmp_path / "warm", 2)  # lazy imports and their .pyc files, not counted
    w100, size100 = _add_bytes(tmp_path / "a", 100)
    w200, size200 = _add_bytes(tmp_path / "b", 200)
    assert w200 <= 2.2 * w100 + 8192, (w100, w200)
    assert w200 <= 3 * size200 + 8192, (w200, size200)
    assert w100 <= 3 * size100 + 8192, (w100, size100)


def test_a_kill_between_children_leaves_what_del_needs(bed):
    """The crash guarantee the appended progress keeps (tests/e2e/test_faults_children.py
    ::test_netattach_killed_between_children on the real thing): the state file as it
    is when the 3rd child starts, which is what a SIGKILL then leaves, reads as the
    first two attachments attempted with their results and the third attempted without
    one; DEL from it undoes exactly those three, in reverse."""
    snapshots: list[bytes] = []
    run = bed.exe.run

    def run_and_snapshot(path, command, config, env, timeout):
        if command == "ADD":
            snapshots.append((bed.tmp / "state" / f"{CID}.json").read_bytes())
        return run(path, command, config, env, timeout)

    bed.exe.run = run_and_snapshot  # type: ignore[method-assign]
    bed.api.networks = "net-a,other/net-b@data0,net-a@x"
    bed.run("ADD")
    # children: cluster (1 plugin), net-a (2), net-b (1), net-a (2): the 5th starts net-a@x
    (bed.tmp / "state" / f"{CID}.json").write_bytes(snapshots[4])
    saved = bed.store.load(CID)
    assert [(a.ifname, a.attempted, a.result is not None) for a in saved.attachments] == [
        ("eth0", True, True), ("net1", True, True), ("data0", True, True), ("x", True, False)]
    (bed.tmp / "state" / f"{CID}.json").write_bytes(snapshots[3])
    saved = bed.store.load(CID)
    assert [(a.ifname, a.attempted, a.result is not None) for a in saved.attachments] == [
        ("eth0", True, True), ("net1", True, True), ("data0", True, False), ("x", False, False)]
    bed.exe.calls.clear()
    bed.run("DEL")
    assert bed.dels() == [("fake-ptp", "data0"), ("fake-tuning", "net1"),
                          ("fake-macvlan", "net1"), ("fake-bridge", "eth0")]
    assert bed.files() == [f"{CID}.deleted"]
