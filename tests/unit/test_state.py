"""State files: atomic, 0600 in a 0700 dir, never following planted symlinks, lock file removed."""
import json
import os
import stat
import threading
import time

import pytest

from netattach.state import StateError, StateStore


def test_save_load_remove_modes(tmp_path):
    store = StateStore(str(tmp_path / "cni"))
    att = {"network": "n", "ifname": "eth0", "config": {"type": "bridge"}}
    store.save("abc", {"containerID": "abc", "ifname": "eth0", "attachments": [att]})
    assert stat.S_IMODE(os.stat(tmp_path / "cni").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tmp_path / "cni" / "abc.json").st_mode) == 0o600
    assert store.load("abc")["attachments"] == [att]
    assert store.exists("abc")
    store.remove("abc")
    assert store.load("abc") is None and not store.exists("abc")
    assert os.listdir(tmp_path / "cni") == []


def test_remove_takes_the_temp_files_a_killed_save_left(tmp_path):
    """A netattach SIGKILLed inside save() leaves <id>.json.tmp<pid>; the container's
    DEL (remove) takes it, and leaves other containers' files alone."""
    store = StateStore(str(tmp_path / "cni"))
    store.save("abc", {"containerID": "abc", "ifname": "eth0", "attachments": []})
    store.save("abcd", {"containerID": "abcd", "ifname": "eth0", "attachments": []})
    for name in ("abc.json.tmp4242", "abc.json.tmp7", "abcd.json.tmp9", "abc.json.tmpx"):
        (tmp_path / "cni" / name).write_text("{")
    store.remove("abc")
    assert sorted(os.listdir(tmp_path / "cni")) == ["abc.json.tmpx", "abcd.json",
                                                    "abcd.json.tmp9"]


@pytest.mark.parametrize("cid", ["../x", "a/b", "", ".hidden", "a\x00b", "x" * 300])
def test_container_id_never_becomes_a_path(tmp_path, cid):
    with pytest.raises(StateError):
        StateStore(str(tmp_path)).save(cid, {})


def test_planted_symlink_is_not_followed(tmp_path):
    target = tmp_path / "victim"
    target.write_text("keep")
    d = tmp_path / "cni"
    d.mkdir(mode=0o700)
    (d / "abc.json").symlink_to(target)
    store = StateStore(str(d))
    with pytest.raises(StateError):
        store.load("abc")
    assert target.read_text() == "keep"


def test_state_dir_that_is_a_symlink_is_refused(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "cni").symlink_to(tmp_path / "real")
    with pytest.raises(StateError, match="not a directory"):
        StateStore(str(tmp_path / "cni")).save("abc", {})


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
    with pytest.raises(StateError, match="abc.json"):
        store.save("abc", {})


def test_lock_serializes_and_leaves_no_file(tmp_path):
    store = StateStore(str(tmp_path))
    order = []

    def second():
        with store.lock("abc"):
            order.append("second")
            assert (tmp_path / "abc.lock").exists()

    with store.lock("abc"):
        t = threading.Thread(target=second)
        t.start()
        time.sleep(0.2)
        order.append("first")
    t.join(5)
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


def test_saved_json_is_compact_and_versioned(tmp_path):
    store = StateStore(str(tmp_path))
    state = {"containerID": "abc", "ifname": "eth0", "attachments": []}
    store.save("abc", state)
    assert json.loads((tmp_path / "abc.json").read_text()) == {**state, "format": 1}


def test_container_ids_lists_saved_states_only(tmp_path):
    store = StateStore(str(tmp_path / "cni"))
    assert store.container_ids() == []  # no dir yet
    store.save("b2", {})
    store.save("a1", {})
    for junk in ("a1.lock", "c3.json.tmp42", ".hidden.json", "notes.txt"):
        (tmp_path / "cni" / junk).write_text("")
    assert store.container_ids() == ["a1", "b2"]
