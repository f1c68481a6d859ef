"""GC over hand-written state files and a recording script plugin (no root, no netns):
which containers are stale, what each delegate's GC receives, what is refused."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from netattach.cli import cni_main
from netattach.cni.errors import CniError
from netattach.commands.garbage import child_attachments, del_request, valid_attachments
from netattach.node.state import SavedAttachment, SavedState
from netattach.node.statestore import StateStore

RECORDER = """\
import json, os, sys
conf = json.load(sys.stdin)
env = {k: v for k, v in os.environ.items() if k.startswith("CNI_")}
with open(conf["recordDir"] + "/calls.jsonl", "a") as f:
    f.write(json.dumps({"command": os.environ["CNI_COMMAND"], "stdin": conf, "env": env}) + "\\n")
"""


def delegate(name: str, version: str, rec: Path, **extra) -> dict:
    return {"cniVersion": version, "name": name,
            "plugins": [{"type": "rec", "recordDir": str(rec), **extra}]}


def state(cid: str, netns: str, ifname: str,
          attachments: list[tuple[str, str, dict]]) -> SavedState:
    """A state as ADD saves it, every attachment attempted and added."""
    return SavedState(
        container_id=cid, netns=netns, ifname=ifname,
        cni_args=(("IgnoreUnknown", "1"), ("K8S_POD_NAMESPACE", "ns1")), pod=None,
        cni_version="1.1.0",
        attachments=[SavedAttachment(network=net, ifname=ifn, default=i == 0, source=net,
                                     config=config, attempted=True,
                                     result={"cniVersion": config.get("cniVersion", "1.1.0")})
                     for i, (net, ifn, config) in enumerate(attachments)])


@pytest.fixture
def bed(tmp_path):
    bin_dir, rec, state_dir = tmp_path / "bin", tmp_path / "rec", tmp_path / "state"
    bin_dir.mkdir()
    rec.mkdir()
    plugin = bin_dir / "rec"
    plugin.write_text(f"#!{sys.executable}\n{RECORDER}")
    plugin.chmod(0o755)
    cluster = delegate("clu", "1.1.0", rec)
    (tmp_path / "10-clu.conflist").write_text(json.dumps(cluster))
    conf = {"cniVersion": "1.1.0", "name": "na", "type": "netattach",
            "clusterNetwork": str(tmp_path / "10-clu.conflist"), "cniDir": str(state_dir),
            "binDir": str(bin_dir), "confDir": str(tmp_path), "logToStderr": False}

    class Bed:
        store = StateStore(str(state_dir))
        secondary = delegate("sec", "1.1.0", rec)
        old = delegate("old", "0.3.1", rec)

        def gc(self, valid: list | None, key: str = "cni.dev/valid-attachments",
               **overrides) -> tuple[dict | None, int]:
            stdin = {**conf, **overrides}
            if valid is not None:
                stdin[key] = [{"containerID": c, "ifname": i} for c, i in valid]
            return cni_main({"CNI_COMMAND": "GC", "CNI_PATH": "/nonexistent"},
                            json.dumps(stdin).encode())

        def calls(self, command: str) -> list[dict]:
            path = rec / "calls.jsonl"
            return [c for c in map(json.loads, path.read_text().splitlines())
                    if c["command"] == command] if path.exists() else []

    b = Bed()
    b.cluster = cluster
    return b


def test_children_get_their_own_pairs_and_stale_containers_are_deleted(bed):
    bed.store.save(state("live", "/var/run/netns/live", "eth0", [
        ("clu", "eth0", bed.cluster), ("ns1/sec", "net1", bed.secondary),
        ("ns1/old", "data0", bed.old)]))
    bed.store.save(state("gone", "/nonexistent/netns", "eth0", [
        ("clu", "eth0", bed.cluster), ("ns1/sec", "net1", bed.secondary)]))

    doc, code = bed.gc([("live", "eth0")])
    assert (doc, code) == (None, 0)

    # the stale container: DEL of every attachment in reverse, as the runtime's DEL would
    dels = bed.calls("DEL")
    assert [(d["stdin"]["name"], d["env"]["CNI_IFNAME"]) for d in dels] == [
        ("sec", "net1"), ("clu", "eth0")]
    assert {d["env"]["CNI_CONTAINERID"] for d in dels} == {"gone"}
    assert dels[0]["env"]["CNI_ARGS"] == "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns1"
    assert "CNI_NETNS" not in dels[0]["env"]  # netns gone: children get none
    assert bed.store.container_ids() == ["live"]

    # each distinct 1.1.0 delegate once (the cluster file and its saved copy are one);
    # each gets every interface of the valid container, not the runtime's eth0 alone
    gcs = bed.calls("GC")
    assert [g["stdin"]["name"] for g in gcs] == ["clu", "sec"]
    expected = [{"containerID": "live", "ifname": n} for n in ("eth0", "net1", "data0")]
    for g in gcs:
        assert g["stdin"]["cni.dev/valid-attachments"] == expected
        assert g["env"] == {"CNI_COMMAND": "GC", "CNI_PATH": "/nonexistent"}


def test_a_changed_cluster_config_and_its_saved_copy_both_get_gc(bed, tmp_path):
    saved = {**bed.cluster, "plugins": [{**bed.cluster["plugins"][0], "v": 1}]}
    bed.store.save(state("live", "", "eth0", [("clu", "eth0", saved)]))
    assert bed.gc([("live", "eth0")]) == (None, 0)
    gcs = bed.calls("GC")
    assert [g["stdin"].get("v") for g in gcs] == [None, 1]


def test_disable_gc_and_old_versions_are_skipped(bed):
    no_gc = {**bed.secondary, "disableGC": True}
    bed.store.save(state("live", "", "eth0", [
        ("clu", "eth0", bed.cluster), ("ns1/sec", "net1", no_gc), ("ns1/old", "n2", bed.old)]))
    assert bed.gc([("live", "eth0")]) == (None, 0)
    assert [g["stdin"]["name"] for g in bed.calls("GC")] == ["clu"]


def test_a_valid_pair_with_another_ifname_is_not_this_state(bed):
    """The state was saved for (c1, eth1); (c1, eth0) valid means eth1 is stale, and eth0's
    children are unknown: DEL it, ask no child."""
    bed.store.save(state("c1", "", "eth1", [("clu", "eth1", bed.cluster)]))
    doc, code = bed.gc([("c1", "eth0")])
    assert code == 1 and doc["code"] == 3 and "c1/eth0" in doc["msg"]
    assert [d["env"]["CNI_IFNAME"] for d in bed.calls("DEL")] == ["eth1"]
    assert bed.calls("GC") == []


def test_a_corrupt_state_is_reported_and_protects_its_container(bed):
    bed.store.save(state("live", "", "eth0", [("clu", "eth0", bed.cluster)]))
    Path(bed.store.dir, "bad.json").write_text("{not json")
    doc, code = bed.gc([("live", "eth0"), ("bad", "eth0")])
    assert code == 1 and doc["code"] == 5
    assert "bad" in doc["msg"] and "GC not forwarded" in doc["msg"]
    assert bed.calls("GC") == [] and bed.calls("DEL") == []
    assert Path(bed.store.dir, "bad.json").exists()


def test_a_damaged_state_of_a_stale_container_is_salvaged_as_del_does(bed):
    """Defect 9 of issue 9: GC used to report a damaged state and leave it. Now a stale
    container's damaged file goes through DEL's recovery: moved aside as .corrupt, the
    attachments whole in it DEL-ed (here all of them: no API request), with the netns,
    ifname and CNI_ARGS read before the damage."""
    bed.store.save(state("gone", "/nonexistent/netns", "eth0", [
        ("clu", "eth0", bed.cluster), ("ns1/sec", "net1", bed.secondary)]))
    path = Path(bed.store.dir, "gone.json")
    path.write_bytes(path.read_bytes()[:-len(b',"format":1}')])  # cut after the attachments
    assert bed.gc([]) == (None, 0)
    dels = bed.calls("DEL")
    assert [(d["stdin"]["name"], d["env"]["CNI_IFNAME"], d["env"]["CNI_CONTAINERID"])
            for d in dels] == [("sec", "net1", "gone"), ("clu", "eth0", "gone")]
    assert dels[0]["env"]["CNI_ARGS"] == "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns1"
    assert sorted(p.name for p in Path(bed.store.dir).iterdir()) == [
        ".tombstones-pruned", "gone.deleted", "gone.json.corrupt"]


def test_no_state_dir_is_nothing_to_delete(bed):
    assert bed.gc([]) == (None, 0)
    assert [g["stdin"]["cni.dev/valid-attachments"] for g in bed.calls("GC")] == [[]]


@pytest.mark.parametrize("stdin,problem", [
    ({}, "GC without 'cni.dev/valid-attachments'"),
    ({"cni.dev/valid-attachments": {"containerID": "a"}}, "must be a list"),
    ({"cni.dev/valid-attachments": [{"containerID": "a"}]}, "string 'containerID' and 'ifname'"),
    ({"cni.dev/valid-attachments": ["a"]}, "string 'containerID' and 'ifname'"),
])
def test_malformed_valid_attachments_are_refused(stdin, problem):
    with pytest.raises(CniError) as e:
        valid_attachments(stdin)
    assert e.value.code == 7 and problem in e.value.msg


def test_valid_attachments_keys():
    pair = [{"containerID": "a", "ifname": "eth0"}]
    assert valid_attachments({"cni.dev/attachments": pair}) == {("a", "eth0")}
    assert valid_attachments({"cni.dev/valid-attachments": [],
                              "cni.dev/attachments": pair}) == set()


def test_gc_through_the_command_needs_110(bed):
    doc, code = bed.gc([], cniVersion="1.0.0")
    assert code == 1 and doc["code"] == 1 and "GC needs cniVersion 1.1.0" in doc["msg"]


def test_del_request_and_child_attachments():
    s = state("c9", "/run/netns/x", "eth0", [("clu", "eth0", {}), ("s", "net1", {})])
    req = del_request(s, ("/opt/cni/bin",))
    assert (req.command, req.container_id, req.netns, req.ifname, req.path) == (
        "DEL", "c9", "/run/netns/x", "eth0", ("/opt/cni/bin",))
    assert req.args == (("IgnoreUnknown", "1"), ("K8S_POD_NAMESPACE", "ns1"))
    assert child_attachments({"c9": s}, {("c9", "eth0")}) == [
        {"containerID": "c9", "ifname": "eth0"}, {"containerID": "c9", "ifname": "net1"}]
    assert child_attachments({"c9": s}, {("c9", "eth1")}) == []
