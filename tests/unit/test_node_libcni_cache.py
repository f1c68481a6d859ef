"""node.libcni_cache: reading libcni's result cache (libcni api.go cacheAdd's format) for
one container and interface, and nothing else of what may lie in that dir."""
from __future__ import annotations

import base64
import json
import os

import pytest

from netattach.node.libcni_cache import MAX_ENTRY_BYTES, CachedAdd, cached_adds, remove

CID, IF = "0123abcd", "eth0"
CONF = {"cniVersion": "1.0.0", "name": "cbr0",
        "plugins": [{"type": "bridge"}, {"type": "portmap", "capabilities": {"portMappings": True}}]}


def entry(**over) -> dict:
    doc = {"kind": "cniCacheV1", "containerId": CID, "ifName": IF, "networkName": "cbr0",
           "config": base64.b64encode(json.dumps(CONF).encode()).decode(),
           "netns": "/var/run/netns/cni-1", "cniArgs": [["K8S_POD_NAME", "p"]],
           "capabilityArgs": {"portMappings": []},
           "result": {"cniVersion": "1.0.0", "ips": [{"address": "10.1.0.5/24"}]}}
    doc.update(over)
    return {k: v for k, v in doc.items() if v is not None}


def write(tmp_path, name: str, doc) -> str:
    results = tmp_path / "results"
    results.mkdir(exist_ok=True)
    (results / name).write_bytes(doc if isinstance(doc, bytes) else json.dumps(doc).encode())
    return str(results / name)


def test_an_entry_is_read_whole(tmp_path):
    path = write(tmp_path, f"cbr0-{CID}-{IF}", entry())
    [got] = cached_adds(CID, IF, str(tmp_path))
    assert got == CachedAdd(path, "cbr0", CONF, {"portMappings": []},
                            {"cniVersion": "1.0.0", "ips": [{"address": "10.1.0.5/24"}]})
    assert got.plugin_types == {"bridge", "portmap"}
    single = CachedAdd(path, "x", {"type": "macvlan"})
    assert single.plugin_types == {"macvlan"}


def test_a_missing_dir_is_nothing(tmp_path):
    assert cached_adds(CID, IF, str(tmp_path / "none")) == []


@pytest.mark.parametrize("name,doc", [
    (f"cbr0-{CID}-lo", entry(ifName="lo")),                           # another interface
    (f"cbr0-x{CID}-{IF}", entry(containerId=f"x{CID}")),             # another container
    (f"cbr0-a-{CID}-{IF}", entry(containerId=f"a-{CID}")),           # its ID ends like ours
    (f"cbr0-{CID}-{IF}", entry(containerId="other")),                # named ours, says other
    (f"cbr0-{CID}-{IF}", entry(kind=None)),                           # a legacy bare result
    (f"cbr0-{CID}-{IF}", {"cniVersion": "0.3.1", "ips": []}),
    (f"cbr0-{CID}-{IF}", entry(networkName="")),
    (f"cbr0-{CID}-{IF}", entry(config="not base64!")),
    (f"cbr0-{CID}-{IF}", entry(config=base64.b64encode(b"[1]").decode())),
    (f"cbr0-{CID}-{IF}", entry(config=base64.b64encode(b"{").decode())),
    (f"cbr0-{CID}-{IF}", b"{not json"),
    (f"cbr0-{CID}-{IF}", b"[" * 500 + b"]" * 500),
    (f"-{CID}-{IF}"[1:], entry()),                                    # no network part
    (f"cbr0-{CID}-{IF}", b" " * (MAX_ENTRY_BYTES + 1)),
])
def test_anything_else_is_left_out(tmp_path, name, doc):
    write(tmp_path, name, doc)
    assert cached_adds(CID, IF, str(tmp_path)) == []


def test_symlinks_and_dirs_are_not_followed(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text(json.dumps(entry()))
    (tmp_path / "results").mkdir()
    os.symlink(target, tmp_path / "results" / f"cbr0-{CID}-{IF}")
    (tmp_path / "results" / f"net-{CID}-{IF}").mkdir()
    assert cached_adds(CID, IF, str(tmp_path)) == []


def test_several_entries_in_name_order_and_remove(tmp_path):
    b = write(tmp_path, f"b-{CID}-{IF}", entry(networkName="b", result={}))
    a = write(tmp_path, f"a-{CID}-{IF}", entry(networkName="a", capabilityArgs=[1]))
    got = cached_adds(CID, IF, str(tmp_path))
    assert [(g.network, g.capability_args, g.result is None) for g in got] == [
        ("a", {}, False), ("b", {"portMappings": []}, True)]
    remove(got[0])
    remove(got[0])  # already gone is fine
    assert not os.path.exists(a) and os.path.exists(b)
