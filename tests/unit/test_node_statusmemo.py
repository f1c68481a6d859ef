"""Thin STATUS's memo (node/statusmemo.py): an identical call is answered "ready" from
it, and any input the full way reads, changed, is a miss. The calls run in-process as
the built executable would run them (sys.frozen and sys.executable set); the memo's
use by the built executable runs in tests/unit/test_import_check.py (its imports) and
in every thin STATUS of the e2e and node tiers."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from netattach.commands import call
from netattach.node import statusmemo
from netattach.node.statestore import StateStore


@pytest.fixture
def frozen(tmp_path, monkeypatch):
    """Run as the built executable, the clock RACY_NS ahead: every file written here
    is old enough to be remembered (but in the test of that rule)."""
    exe = tmp_path / "netattach"
    exe.write_text("")
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", str(exe))
    monkeypatch.setattr(statusmemo, "_now_ns", lambda: time.time_ns() + statusmemo.RACY_NS)
    monkeypatch.setattr(statusmemo, "_source_digest", lambda: "a" * 64)  # the bundle's
    return exe


class Node:
    """A state dir, a cluster default network below 1.1.0 and netattach's config."""

    def __init__(self, tmp_path: Path, **extra):
        self.state = tmp_path / "state"
        self.state.mkdir(mode=0o700)
        self.cluster = tmp_path / "10-c.conflist"
        self.write_cluster("1.0.0")
        self.conf = {"cniVersion": "1.1.0", "name": "n", "type": "netattach",
                     "clusterNetwork": str(self.cluster), "cniDir": str(self.state),
                     "logFile": str(tmp_path / "netattach.log"), "logToStderr": False,
                     **extra}
        self.env = {"CNI_COMMAND": "STATUS", "CNI_PATH": str(tmp_path / "bin")}

    def write_cluster(self, version: str) -> None:
        self.cluster.write_text(json.dumps({"cniVersion": version, "name": "c",
                                            "plugins": [{"type": "bridge"}]}))

    @property
    def stdin(self) -> bytes:
        return json.dumps(self.conf).encode()

    def status(self):
        """STATUS as cli.main runs it: the memo's answer, else the full way's."""
        if call.status_recalled(self.env, self.stdin):
            return "recalled"
        return call.cni_main(self.env, self.stdin)

    def recalled(self, env: dict | None = None, stdin: bytes | None = None) -> bool:
        return call.status_recalled(env or self.env, self.stdin if stdin is None else stdin)

    @property
    def memo(self) -> Path:
        return self.state / statusmemo.MEMO_NAME


def test_a_ready_status_is_remembered_for_the_same_call(tmp_path, frozen):
    node = Node(tmp_path)
    assert node.status() == (None, 0)
    assert node.memo.stat().st_mode & 0o777 == 0o600
    assert node.status() == "recalled"


def test_another_call_is_a_miss(tmp_path, frozen):
    node = Node(tmp_path)
    node.status()
    assert not node.recalled(env={**node.env, "CNI_PATH": "/elsewhere"})
    assert not node.recalled(env={**node.env, "CNI_ARGS": "K8S_POD_NAME=p"})
    assert not node.recalled(stdin=node.stdin + b" ")  # one byte more
    assert not node.recalled(stdin=b"[]") and not node.recalled(stdin=b"\xff")
    os.utime(frozen, ns=(1, 1))  # another build of the executable
    assert not node.recalled()


def test_other_code_is_a_miss(tmp_path, frozen, monkeypatch):
    """The bootloader is the same file in every build: the sources' digest tells."""
    node = Node(tmp_path)
    node.status()
    monkeypatch.setattr(statusmemo, "_source_digest", lambda: "b" * 64)
    assert not node.recalled()
    monkeypatch.setattr(statusmemo, "_source_digest", lambda: None)  # no digest: no memo
    assert node.status() == (None, 0) and not node.recalled()


def test_a_state_dir_that_cannot_be_a_path_is_a_miss_not_an_error(tmp_path, frozen):
    """A cniDir the validator takes but the OS cannot encode (a lone surrogate): the
    memo is neither written nor read, and STATUS answers as before."""
    node = Node(tmp_path)
    node.conf["cniDir"] = str(tmp_path / "state\ud800")
    assert node.status() == (None, 0) and node.status() == (None, 0)


def test_a_changed_cluster_default_network_is_forwarded_again(tmp_path, frozen):
    """From 1.1.0 on, STATUS is forwarded: the memo of "nothing to forward" no longer
    holds, and the full way asks the network (whose plugin is not in CNI_PATH here)."""
    node = Node(tmp_path)
    node.status()
    node.write_cluster("1.1.0")
    assert not node.recalled()
    doc, code = node.status()
    assert code == 1 and "bridge" in doc["msg"], doc


def test_a_missing_readiness_indicator_file_is_refused_again(tmp_path, frozen):
    ready = tmp_path / "ready"
    ready.write_text("")
    node = Node(tmp_path, readinessindicatorfile=str(ready))
    assert node.status() == (None, 0) and node.status() == "recalled"
    ready.unlink()
    doc, code = node.status()
    assert (code, doc["code"]) == (1, 50) and "readiness indicator file" in doc["msg"]


def test_a_memo_others_may_write_or_a_symlink_is_not_trusted(tmp_path, frozen):
    node = Node(tmp_path)
    node.status()
    node.memo.chmod(0o622)
    assert not node.recalled()
    node.memo.chmod(0o600)
    assert node.recalled()
    node.memo.rename(tmp_path / "elsewhere")
    node.memo.symlink_to(tmp_path / "elsewhere")
    assert not node.recalled()


@pytest.mark.parametrize("text", ["", "{", "[]", '{"key": 1}', '{"files": [["/x", 1]]}'])
def test_a_damaged_memo_is_a_miss(tmp_path, frozen, text):
    node = Node(tmp_path)
    node.memo.write_text(text)
    node.memo.chmod(0o600)
    assert not node.recalled()
    assert node.status() == (None, 0) and node.status() == "recalled"  # written afresh


def test_the_state_dir_is_made_when_its_parent_exists(tmp_path, frozen):
    node = Node(tmp_path)
    node.state.rmdir()
    assert node.status() == (None, 0) and node.status() == "recalled"
    assert node.state.stat().st_mode & 0o777 == 0o700
    node.memo.unlink()
    node.state.rmdir()
    node.conf["cniDir"] = str(tmp_path / "absent" / "state")
    assert node.status() == (None, 0) and not (tmp_path / "absent").exists()


def test_no_memo_in_a_state_dir_others_may_write(tmp_path, frozen):
    node = Node(tmp_path)
    node.state.chmod(0o777)
    assert node.status() == (None, 0) and not node.memo.exists()


def test_no_memo_when_run_from_source(tmp_path, monkeypatch, frozen):
    node = Node(tmp_path)
    monkeypatch.setattr(sys, "frozen", False)
    assert node.status() == (None, 0)
    assert not node.memo.exists() and node.status() == (None, 0)


def test_the_memo_is_netattachs_own_in_the_state_dir(tmp_path, frozen):
    """An uninstall removes it with the dir (StateStore.remove_dir)."""
    node = Node(tmp_path)
    node.status()
    (node.state / f".{statusmemo.MEMO_NAME}.tmp-123").write_text("")  # a killed write
    assert StateStore(str(node.state)).container_ids() == []
    assert StateStore(str(node.state)).remove_dir() == []
    assert not node.state.exists()


def test_a_file_changed_just_before_it_was_read_is_not_remembered(tmp_path, frozen,
                                                                   monkeypatch):
    """A second write in the same tick of the file system's clock could leave its size,
    mtime and ctime as they were: such a file is read the full way until it is older."""
    node = Node(tmp_path)
    monkeypatch.setattr(statusmemo, "_now_ns", time.time_ns)
    assert node.status() == (None, 0)
    assert not node.memo.exists() and node.status() == (None, 0)
