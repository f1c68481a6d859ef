"""State files: the typed record, atomic, 0600 in a 0700 dir, never following planted
symlinks, lock file removed; tombstones; every format an earlier release wrote stays
readable (tests/data/state_v1: files the release before issue 9 wrote)."""
import json
import os
import stat
import threading
import time
from pathlib import Path

import pytest

from netattach.node.state import (
    DelPending,
    HotplugContext,
    PendingStatus,
    SavedAttachment,
    SavedState,
    StateError,
)
from netattach.node.statestore import TOMBSTONE_SECONDS, StateStore
from netattach.spec.pod import PodRef

FIXTURES = Path(__file__).parent.parent / "data" / "state_v1"


def state(cid: str = "abc", *attachments: SavedAttachment) -> SavedState:
    return SavedState(container_id=cid, netns="/var/run/netns/x", ifname="eth0",
                      cni_args=(("K8S_POD_NAME", "p"),), pod=PodRef("ns", "p", "u"),
                      cni_version="1.0.0", attachments=list(attachments))


ATT = SavedAttachment(network="n", ifname="eth0", config={"type": "bridge"}, source="/x.conf",
                      default=True, attempted=True, result={"cniVersion": "1.0.0"},
                      device=("example.com/nic", "0000:18:02.5"))


def test_save_load_remove_modes(tmp_path):
    store = StateStore(str(tmp_path / "cni"))
    store.save(state("abc", ATT))
    assert stat.S_IMODE(os.stat(tmp_path / "cni").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tmp_path / "cni" / "abc.json").st_mode) == 0o600
    assert store.load("abc") == state("abc", ATT)
    store.remove("abc")
    assert store.load("abc") is None
    assert os.listdir(tmp_path / "cni") == []


def test_a_pending_del_round_trips(tmp_path):
    store = StateStore(str(tmp_path))
    pending = state("abc", ATT)
    pending.del_pending = DelPending(1700000000.5, "API server unreachable")
    store.save(pending)
    assert store.load("abc") == pending


def test_a_pending_status_round_trips_and_a_malformed_one_reads_as_none(tmp_path):
    """statusPending (thick mode's network-status not yet sent) is an optional key of
    format 1, in the header before the attachments; one that is not {uid, annotations of
    strings} reads as none rather than making the whole state damaged."""
    store = StateStore(str(tmp_path))
    pending = state("abc", ATT)
    pending.status_pending = PendingStatus("u", {"k8s.v1.cni.cncf.io/network-status": "[]"})
    store.save(pending)
    assert store.load("abc") == pending
    raw = json.loads((tmp_path / "abc.json").read_text())
    assert raw["format"] == 1 and list(raw).index("statusPending") < list(raw).index(
        "attachments")
    for bad in ({"uid": 1, "annotations": {}}, {"uid": "u", "annotations": {"a": 1}}, "x"):
        (tmp_path / "abc.json").write_text(json.dumps({**raw, "statusPending": bad}))
        loaded = store.load("abc")
        assert loaded is not None and loaded.status_pending is None
        assert loaded.attachments == pending.attachments


def test_the_hotplug_keys_round_trip_and_malformed_ones_are_caught(tmp_path):
    """A sandbox ADDed with `hotplug` (daemon/hotplug.py): the context (configuration,
    CNI_PATH, default-network annotation, network-status) is an optional header key of
    format 1, read as none when malformed; an element attachment's `selection` and a
    change in progress (`change`) are optional attachment keys, read as none when
    malformed or unknown (a later release's change): the attachment stays whole for
    DEL."""
    store = StateStore(str(tmp_path))
    element = SavedAttachment(network="ns/net-a", ifname="net1", config={"type": "macvlan"},
                              source="NetworkAttachmentDefinition ns/net-a",
                              attempted=True, selection={"requested": False,
                                                         "params": {"ips": ["10.1.1.1/24"]}},
                              change="add")
    saved = state("abc", ATT, element)
    saved.hotplug = HotplugContext({"type": "netattach-shim", "hotplug": True}, "/opt/cni/bin",
                                   "", "[]")
    store.save(saved)
    assert store.load("abc") == saved
    raw = json.loads((tmp_path / "abc.json").read_text())
    assert raw["format"] == 1 and list(raw).index("hotplug") < list(raw).index("attachments")
    for bad in ({"netconf": [], "cniPath": ""}, {"netconf": {}, "cniPath": 1}, "x"):
        (tmp_path / "abc.json").write_text(json.dumps({**raw, "hotplug": bad}))
        loaded = store.load("abc")
        assert loaded is not None and loaded.hotplug is None
        assert loaded.attachments == saved.attachments
    for key, bad in (("selection", {"requested": 1, "params": {}}), ("selection", []),
                     ("change", "replace")):
        read = SavedAttachment.from_dict({**element.to_dict(), key: bad})
        assert read is not None and getattr(read, key) is None  # DEL does not need them
        assert read.config == element.config and read.ifname == element.ifname


def test_remove_takes_the_temp_files_a_killed_save_left(tmp_path):
    """A netattach SIGKILLed inside save() leaves .<id>.json.tmp-<pid> (releases before
    issue 9: <id>.json.tmp<pid>); the container's DEL (remove) takes both, and leaves
    other containers' files alone."""
    store = StateStore(str(tmp_path / "cni"))
    store.save(state("abc"))
    store.save(state("abcd"))
    for name in ("abc.json.tmp4242", "abc.json.tmp7", ".abc.json.tmp-99", "abcd.json.tmp9",
                 "abc.json.tmpx", ".abcd.json.tmp-5"):
        (tmp_path / "cni" / name).write_text("{")
    store.remove("abc")
    assert sorted(os.listdir(tmp_path / "cni")) == [".abcd.json.tmp-5", "abc.json.tmpx",
                                                    "abcd.json", "abcd.json.tmp9"]


@pytest.mark.parametrize("cid", ["../x", "a/b", "", ".hidden", "a\x00b", "x" * 300])
def test_container_id_never_becomes_a_path(tmp_path, cid):
    with pytest.raises(StateError):
        StateStore(str(tmp_path)).save(state(cid))
    with pytest.raises(StateError):
        StateStore(str(tmp_path)).mark_deleted(cid)


def planted(tmp_path, name: str) -> tuple[StateStore, Path]:
    """A state dir with a symlink planted at `name`, to a victim file holding "keep"."""
    victim = tmp_path / "victim"
    victim.write_text("keep")
    d = tmp_path / "cni"
    d.mkdir(mode=0o700)
    (d / name).symlink_to(victim)
    return StateStore(str(d)), victim


def test_planted_symlink_is_not_followed(tmp_path):
    store, target = planted(tmp_path, "abc.json")
    with pytest.raises(StateError):
        store.load("abc")
    assert target.read_text() == "keep"


def test_state_dir_that_is_a_symlink_is_refused(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "cni").symlink_to(tmp_path / "real")
    with pytest.raises(StateError, match="not a directory"):
        StateStore(str(tmp_path / "cni")).save(state("abc"))


@pytest.mark.parametrize("content", [b"{trunc", b"[]", b'{"format": 99}', b"", b'{"format": 1}',
                                     b'{"format": 1, "attachments": [{"network": "n"}]}'])
def test_corrupt_state_is_reported(tmp_path, content):
    store = StateStore(str(tmp_path))
    (tmp_path / "abc.json").write_bytes(content)
    with pytest.raises(StateError, match="abc.json"):
        store.load("abc")


def test_unwritable_state_fails_with_the_path(tmp_path):
    d = tmp_path / "cni"
    d.mkdir(mode=0o700)
    (d / "abc.json").mkdir()  # the rename fails, for root too (dir modes would not stop root)
    store = StateStore(str(d))
    with pytest.raises(StateError, match="abc.json") as e:
        store.save(state("abc"))
    assert e.value.code == 5


def flock_waiters(path: Path) -> int:
    """How many flock requests wait on the file at `path` (the kernel's /proc/locks
    lists a blocked request as `N: -> FLOCK ... MAJ:MIN:INODE ...`); 0 when it is gone."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return 0
    file_id = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    return sum(1 for line in Path("/proc/locks").read_text().splitlines()
               if " -> FLOCK " in line and file_id in line.split())


def wait_until(what: str, predicate, timeout: float = 60.0) -> None:
    """Poll `predicate`; fail naming `what` after `timeout` s (a hang guard only)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def test_lock_serializes_and_leaves_no_file(tmp_path):
    """The second taker waits until the first lets go. It is seen waiting in the kernel
    (/proc/locks) before the first lets go, so the order proves the lock, whatever the
    scheduling; a sleep standing for "long enough for the second to try" did not, on a
    loaded machine (issue 9, defect 11)."""
    store = StateStore(str(tmp_path))
    order = []

    def second():
        with store.lock("abc"):
            order.append("second")
            assert (tmp_path / "abc.lock").exists()

    with store.lock("abc"):
        t = threading.Thread(target=second)
        t.start()
        wait_until("the second taker to block on the lock",
                   lambda: flock_waiters(tmp_path / "abc.lock") == 1 or not t.is_alive())
        order.append("first")
    t.join(60)
    assert order == ["first", "second"]
    assert not (tmp_path / "abc.lock").exists()


def test_lock_is_exclusive_across_many_waiters(tmp_path):
    store = StateStore(str(tmp_path))
    inside, peak = [0], [0]

    def worker():
        for _ in range(20):
            with store.lock("abc"):
                inside[0] += 1
                peak[0] = max(peak[0], inside[0])
                time.sleep(0.001)
                inside[0] -= 1

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert peak[0] == 1
    assert os.listdir(tmp_path) == []


def test_saved_json_is_compact_versioned_and_ends_with_the_attachments(tmp_path):
    store = StateStore(str(tmp_path))
    store.save(state("abc", ATT))
    text = (tmp_path / "abc.json").read_text()
    assert " " not in text.replace("K8S_POD_NAME", "")
    doc = json.loads(text)
    assert list(doc)[-2:] == ["attachments", "format"] and doc["format"] == 1
    assert doc["attachments"][0]["device"] == {"resourceName": "example.com/nic",
                                               "deviceID": "0000:18:02.5"}


def test_container_ids_lists_saved_states_only(tmp_path):
    store = StateStore(str(tmp_path / "cni"))
    assert store.container_ids() == []  # no dir yet
    store.save(state("b2"))
    store.save(state("a1"))
    store.mark_deleted("d4")
    for junk in ("a1.lock", "c3.json.tmp42", ".c3.json.tmp-42", ".hidden.json", "notes.txt"):
        (tmp_path / "cni" / junk).write_text("")
    assert store.container_ids() == ["a1", "b2"]


# ---------------------------------------------------------------- tombstones

def test_a_tombstone_remembers_the_del_for_its_lifetime(tmp_path):
    now = [1_000_000.0]
    store = StateStore(str(tmp_path), clock=lambda: now[0])
    assert store.deleted_since("abc") is None
    store.mark_deleted("abc")
    assert stat.S_IMODE(os.stat(tmp_path / "abc.deleted").st_mode) == 0o600
    assert os.path.getsize(tmp_path / "abc.deleted") == 0
    now[0] += TOMBSTONE_SECONDS - 1
    assert store.deleted_since("abc") == 1_000_000.0
    now[0] += 2
    assert store.deleted_since("abc") is None  # expired: the slow path again
    store.forget_deleted("abc")
    assert not (tmp_path / "abc.deleted").exists()
    store.forget_deleted("abc")  # idempotent


def test_expired_tombstones_are_pruned_at_most_hourly(tmp_path):
    now = [1_000_000.0]
    store = StateStore(str(tmp_path), clock=lambda: now[0])
    store.mark_deleted("old")  # prunes (nothing) and stamps
    now[0] += TOMBSTONE_SECONDS + 10
    store.mark_deleted("new")  # an hour and more since the last prune: prunes "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".tombstones-pruned", "new.deleted"]
    os.utime(tmp_path / "new.deleted", (0, 0))  # long expired
    store.mark_deleted("newer")  # within the hour: no listing
    assert (tmp_path / "new.deleted").exists()
    assert store.prune_tombstones(force=True) == 1
    assert not (tmp_path / "new.deleted").exists()


def test_a_planted_tombstone_symlink_is_not_followed(tmp_path):
    store, victim = planted(tmp_path, "abc.deleted")
    store.mark_deleted("abc")  # best effort: refused, not followed
    assert victim.read_text() == "keep" and store.deleted_since("abc") is None


# ---------------------------------------------------------------- earlier formats

@pytest.mark.parametrize("name, attempted, with_result, device", [
    ("whole.json", [True, True, True], [True, True, True], [None, None, None]),
    ("mid-add.json", [True, True, False], [True, False, False], [None, None, None]),
    ("with-devices.json", [True, True, True], [True, True, True],
     [None, ("example.com/nic", "0000:18:02.5"), ("example.com/nic", "0000:18:02.6")]),
])
def test_files_the_release_before_issue_9_wrote_are_read_whole(tmp_path, name, attempted,
                                                                 with_result, device):
    text = (FIXTURES / name).read_text().replace("{{CID}}", "c1").replace("{{ROOT}}", "/r")
    (tmp_path / "c1.json").write_text(text)
    loaded = StateStore(str(tmp_path)).load("c1")
    assert loaded is not None and loaded.container_id == "c1" and loaded.ifname == "eth0"
    assert loaded.pod == PodRef("{{NS}}", "{{POD}}", "{{UID}}")
    assert [a.attempted for a in loaded.attachments] == attempted
    assert [a.result is not None for a in loaded.attachments] == with_result
    assert [a.device for a in loaded.attachments] == device
    assert loaded.attachments[0].default and loaded.attachments[0].config["type"] == "bridge"
    assert loaded.status_pending is None
    # written again by this release, it reads back the same
    StateStore(str(tmp_path)).save(loaded)
    assert StateStore(str(tmp_path)).load("c1") == loaded


# ---------------------------------------------------------------- an ADD's progress (issue 21)

def plan(cid: str = "abc", n: int = 3) -> SavedState:
    """An ADD's plan: n attachments, none attempted yet."""
    return state(cid, *(SavedAttachment(network=f"ns/net{i}", ifname=f"net{i}",
                                        source=f"ns/net{i}", config={"type": "bridge"})
                         for i in range(n)))


def progress(loaded: SavedState) -> list[tuple[bool, object]]:
    return [(a.attempted, a.result) for a in loaded.attachments]


def test_a_plan_and_its_appended_progress_read_as_the_add_left_them(tmp_path):
    """save_plan, then one record_progress per child (the ADD's order: this mark with
    the result of the one before): load gives exactly the attempted marks and results
    recorded so far, never a mark from the document itself."""
    store = StateStore(str(tmp_path))
    s = plan()
    store.save_plan(s)
    assert progress(store.load("abc")) == [(False, None)] * 3
    s.attachments[0].attempted = True
    store.record_progress(s, [0])
    assert progress(store.load("abc")) == [(True, None), (False, None), (False, None)]
    s.attachments[0].result = {"cniVersion": "1.0.0", "ips": []}
    s.attachments[1].attempted = True
    store.record_progress(s, [0, 1])
    assert progress(store.load("abc")) == [
        (True, {"cniVersion": "1.0.0", "ips": []}), (True, None), (False, None)]
    # the final save rewrites the whole state: the records are gone, the flags are its own
    store.save(s)
    assert b"progress" not in (tmp_path / "abc.json").read_bytes()
    assert store.load("abc") == s


def test_the_plan_document_alone_takes_every_attachment_as_attempted(tmp_path):
    """Readers that do not know the records (an earlier release, which takes the file for
    damaged and salvages it; salvage itself) DEL every planned attachment, never fewer
    than ran: every attachment is written attempted in the document."""
    from netattach.node.state import salvage
    store = StateStore(str(tmp_path))
    s = plan()
    store.save_plan(s)
    s.attachments[0].attempted = True
    store.record_progress(s, [0])
    raw = (tmp_path / "abc.json").read_bytes()
    with pytest.raises(ValueError):
        json.loads(raw)  # what an earlier release's load does: then it salvages
    salvaged = salvage(raw, "abc")
    assert salvaged.complete and [a.attempted for a in salvaged.attachments] == [True] * 3
    assert salvaged.header["progress"] == "appended"


def test_a_record_cut_short_by_a_kill_is_skipped_and_spoils_nothing_else(tmp_path):
    """A kill may cut the last write anywhere: a record that does not parse is skipped,
    and the ones before it hold."""
    store = StateStore(str(tmp_path))
    s = plan()
    store.save_plan(s)
    for i in range(2):
        s.attachments[i].attempted = True
        store.record_progress(s, [i])
    s.attachments[1].result = {"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.2/24"}]}
    s.attachments[2].attempted = True
    path = tmp_path / "abc.json"
    before = path.read_bytes()
    store.record_progress(s, [1, 2])
    whole = path.read_bytes()
    for cut in range(len(before), len(whole)):
        path.write_bytes(whole[:cut])
        got = progress(store.load("abc"))
        assert got[0] == (True, None)
        assert got[1][0] is True and got[2] == (False, None), cut
    path.write_bytes(whole)
    assert progress(store.load("abc"))[1:] == [(True, s.attachments[1].result), (True, None)]


@pytest.mark.parametrize("tail", [b'\n{"i":7}', b'\n{"i":-1}', b'\n{"i":true}', b"\n[1]",
                                  b'\n{"i":"0"}', b"\n\xff"])
def test_records_that_name_no_attachment_are_skipped(tmp_path, tail):
    store = StateStore(str(tmp_path))
    store.save_plan(plan())
    with open(tmp_path / "abc.json", "ab") as f:
        f.write(tail)
    if tail == b"\n\xff":  # not UTF-8: the file is damaged
        with pytest.raises(StateError, match="corrupt"):
            store.load("abc")
    else:
        assert progress(store.load("abc")) == [(False, None)] * 3


def test_anything_after_a_whole_state_is_damage(tmp_path):
    """Only a plan (`progress` in its header) may have records after it."""
    store = StateStore(str(tmp_path))
    store.save(state("abc", ATT))
    with open(tmp_path / "abc.json", "ab") as f:
        f.write(b'\n{"i":0}')
    with pytest.raises(StateError, match="corrupt"):
        store.load("abc")


def test_progress_of_a_state_file_that_is_gone_fails_naming_it(tmp_path):
    store = StateStore(str(tmp_path))
    s = plan()
    store.save_plan(s)
    (tmp_path / "abc.json").unlink()
    s.attachments[0].attempted = True
    with pytest.raises(StateError, match="abc.json") as e:
        store.record_progress(s, [0])
    assert e.value.code == 5 and not (tmp_path / "abc.json").exists()
