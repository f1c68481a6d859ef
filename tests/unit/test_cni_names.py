"""names: the one rule for each kind of name that becomes a path, an API path or a link
name. Pure. Issue 9 defect 5: CNI_IFNAME and the selection annotation used to disagree."""
from __future__ import annotations

import json

import pytest

from netattach.cni.names import (
    MAX_CONTAINER_ID,
    container_id_problem,
    ifname_problem,
    is_dns1123_label,
    is_dns1123_subdomain,
    is_valid_ifname,
)
from netattach.cni.request import parse_request
from netattach.spec.selection import SelectionError, parse_network_selection

ENV = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_NETNS": "/var/run/netns/x",
       "CNI_IFNAME": "eth0", "CNI_PATH": "/opt/cni/bin"}
CONF = json.dumps({"cniVersion": "1.0.0", "name": "n", "type": "netattach"}).encode()


@pytest.mark.parametrize("name, ok", [("a", True), ("a-b", True), ("0", True), ("a" * 63, True),
                                      ("", False), ("A", False), ("a" * 64, False), ("a-", False),
                                      ("a\n", False), (None, False), ("a.b", False)])
def test_is_dns1123_label(name, ok):
    assert is_dns1123_label(name) is ok


@pytest.mark.parametrize("name, ok", [("a", True), ("a.b", True), ("web-0.x", True),
                                      ("a" * 100, True),  # a pod name part is not bounded by 63
                                      ("a" * 253, True), ("a" * 254, False), ("", False),
                                      ("a..b", False), (".a", False), ("A", False),
                                      ("a_b", False), (None, False)])
def test_is_dns1123_subdomain(name, ok):
    assert is_dns1123_subdomain(name) is ok


IFNAMES = [("eth0", True), ("x" * 15, True), ("é" * 7, True), ("...", True), ("a@b", True),
           ("x" * 16, False), ("é" * 8, False), ("", False), (".", False), ("..", False),
           ("a/b", False), ("a:b", False), ("a b", False), ("a\tb", False), ("a\vb", False),
           ("a\rb", False), ("a\fb", False), ("\ud800", False), (None, False),
           ("a\u00a0", False), ("à", False),  # à is C3 A0: the kernel's isspace(0xA0)
           ("a\x01b", False), ("a\x1b", False), ("a\x7f", False), ("a\x85", False),
           ("a\u2003", False)]


@pytest.mark.parametrize("name, ok", IFNAMES)
def test_ifname_rule(name, ok):
    assert is_valid_ifname(name) is ok
    assert (ifname_problem(name) is None) is ok


@pytest.mark.parametrize("name, ok", [n for n in IFNAMES if isinstance(n[0], str) and n[0]
                                      and "\ud800" not in n[0]])
def test_cni_ifname_and_the_selection_annotation_agree(name, ok):
    """The same rule for CNI_IFNAME (code 4) and for an annotation's `interface` (7):
    before issue 9 a control character passed in CNI_IFNAME."""
    try:
        parse_request({**ENV, "CNI_IFNAME": name}, CONF)
        env_ok = True
    except Exception as e:
        assert getattr(e, "code", None) == 4
        env_ok = False
    try:
        parse_network_selection(json.dumps([{"name": "n", "interface": name}]), "ns")
        annotation_ok = True
    except SelectionError as e:
        assert e.code == 7
        annotation_ok = False
    assert env_ok is annotation_ok is ok


@pytest.mark.parametrize("cid, ok", [("a", True), ("f" * 64, True), ("a" * MAX_CONTAINER_ID, True),
                                     ("a" * (MAX_CONTAINER_ID + 1), False), ("", False),
                                     ("-a", False), ("a/b", False), ("a\n", False), (None, False)])
def test_container_id_rule(cid, ok):
    assert (container_id_problem(cid) is None) is ok


def test_every_file_named_after_a_container_id_fits_a_file_name():
    longest = "a" * MAX_CONTAINER_ID
    for suffix in (".json", ".lock", ".deleted", ".json.corrupt", ".json.tmp4194304"):
        assert len(longest + suffix) <= 255
    assert len(f".{longest}.json.tmp-4194304") <= 255  # atomicfile's temp name
