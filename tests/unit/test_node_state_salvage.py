"""What DEL can still read of a damaged state file (state.salvage), and the damaged file
kept aside for the admin (StateStore.set_aside)."""
import json
import os
import stat

import pytest

from netattach.node.state import STATE_FORMAT, CorruptState, SavedAttachment, salvage
from netattach.node.statestore import StateStore

CID = "c0ffee"
ATTACHMENTS = [
    {"network": "cluster-net", "ifname": "eth0", "default": True, "source": "/etc/cni/10.conf",
     "config": {"cniVersion": "0.3.1", "name": "cluster-net", "type": "bridge",
                "ipam": {"type": "host-local", "subnet": "198.18.1.0/24"}},
     "capabilityArgs": {}, "attempted": True, "result": {"cniVersion": "0.3.1", "ips": []}},
    {"network": "ns/net-a", "ifname": "net1", "default": False, "source": "ns/net-a",
     "config": {"cniVersion": "1.0.0", "name": "net-a", "plugins": [{"type": "macvlan"}]},
     "capabilityArgs": {"mac": "0a:58:00:00:00:01"}, "attempted": True, "result": None},
    {"network": "other/net-b", "ifname": "data0", "default": False, "source": "other/net-b",
     "config": {"cniVersion": "0.3.1", "name": "net-b", "type": "bridge"},
     "capabilityArgs": {}, "attempted": False, "result": None},
]


TYPED = [SavedAttachment.from_dict(a) for a in ATTACHMENTS]
HEADER = {"containerID": CID, "netns": "/var/run/netns/x", "ifname": "eth0",
          "cniArgs": [["K8S_POD_NAME", "p"]], "pod": None, "cniVersion": "1.0.0"}


def saved_bytes(attachments=ATTACHMENTS, cid=CID) -> bytes:
    """The file exactly as StateStore.save writes it."""
    state = {"containerID": cid, "netns": "/var/run/netns/x", "ifname": "eth0",
             "cniArgs": [["K8S_POD_NAME", "p"]], "pod": None, "cniVersion": "1.0.0",
             "attachments": attachments}
    return json.dumps({**state, "format": STATE_FORMAT}, separators=(",", ":")).encode()


def test_every_truncation_yields_a_prefix_of_whole_attachments():
    """Cut anywhere: what comes back is the attachments complete before the cut, in
    order and exactly as saved; `complete` only once the list's `]` was read."""
    raw = saved_bytes()
    list_end = raw.index(b']', raw.rindex(b'"result"')) + 1
    seen = set()
    for cut in range(len(raw) + 1):
        found, complete, _ = salvage(raw[:cut], CID)
        assert found == TYPED[:len(found)], cut
        assert complete == (cut >= list_end), cut
        seen.add(len(found))
    assert seen == {0, 1, 2, 3}


@pytest.mark.parametrize("damage,expected,complete", [
    (lambda raw: b"\0" * len(raw), 0, False),                   # zero-filled after a crash
    (lambda raw: b"", 0, False),
    (lambda raw: raw.replace(b'"net1"', b'"net1\xff'), 1, False),  # bad byte inside net1
    (lambda raw: raw.replace(b'"format":1}', b'"format":1'), 3, True),  # only the end lost
    (lambda raw: raw.replace(b'"format":1', b'"format":2'), 3, True),   # unknown format
])
def test_damage_in_the_middle_keeps_what_precedes_it(damage, expected, complete):
    found, whole, _ = salvage(damage(saved_bytes()), CID)
    assert found == TYPED[:expected] and whole is complete


def test_a_malformed_attachment_is_dropped_and_the_list_is_not_complete():
    atts = [ATTACHMENTS[0], {"network": "x", "ifname": 3, "config": {}}, ATTACHMENTS[1]]
    assert salvage(saved_bytes(atts), CID)[:2] == ([TYPED[0], TYPED[1]], False)


def test_another_containers_state_gives_nothing():
    assert salvage(saved_bytes(cid="someone-else"), CID) == ([], False, {})


def test_the_members_before_the_damage_are_read_too():
    """GC rebuilds the runtime's DEL of a damaged state from them (netns, ifname, CNI_ARGS)."""
    raw = saved_bytes()
    assert salvage(raw, CID).header == {**HEADER, "format": STATE_FORMAT}
    assert salvage(raw[:raw.index(b'"pod"')], CID).header == {
        k: HEADER[k] for k in ("containerID", "netns", "ifname", "cniArgs")}


def test_load_raises_corrupt_state_with_the_bytes_and_set_aside_keeps_them_0600(tmp_path):
    store = StateStore(str(tmp_path))
    raw = saved_bytes()[:200]
    path = tmp_path / f"{CID}.json"
    path.write_bytes(raw)
    os.chmod(path, 0o644)  # e.g. a foreign writer's mode
    with pytest.raises(CorruptState) as info:
        store.load(CID)
    assert info.value.raw == raw
    aside = store.set_aside(CID)
    assert aside == f"{path}.corrupt"
    assert os.listdir(tmp_path) == [f"{CID}.json.corrupt"]
    assert stat.S_IMODE(os.stat(aside).st_mode) == 0o600
    assert open(aside, "rb").read() == raw
    assert store.load(CID) is None and store.container_ids() == []
