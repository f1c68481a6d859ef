"""`netattach status`: the table of a network-status annotation (spec §5), its parsing,
and where the kubeconfig comes from. The command against a real API server is in
tests/e2e/test_operator_tools.py."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from netattach.spec.status import NETWORK_STATUS_ANNOTATION, encode_status, status_entry
from netattach.tools.podstatus import (
    StatusError,
    format_table,
    kubeconfig_path,
    parse_network_status,
    table_rows,
)

SPEC_EXAMPLES = Path(__file__).resolve().parents[1] / "data" / "spec_examples"


def spec_status(name: str) -> list[dict]:
    pod = yaml.safe_load((SPEC_EXAMPLES / f"s5_4_status_{name}.yaml").read_text())
    return parse_network_status(pod["metadata"]["annotations"][NETWORK_STATUS_ANNOTATION])


def test_table_of_the_spec_single_gateway_example():
    assert format_table(spec_status("single_gateway")) == (
        "NETWORK                                    INTERFACE  IPS                             "
        "MAC                DEFAULT  MTU   DEVICE\n"
        "namespace-a/cluster-wide-default           eth5       192.0.2.2/24,2001:db8::2230/32  "
        "02:11:22:33:44:54  yes      1500  -\n"
        "namespace-b/some-network                   eth1       192.0.2.2/24,2001:db8::2234/32  "
        "02:11:22:33:44:55  no       -     -\n"
        "namespace-a/an-ip-over-infiniband-network  ib0        198.51.100.1/24                 "
        "-                  no       -     -\n")


def test_rows_of_the_spec_device_info_example():
    """No "default" reads as no (§5.3.6 makes it required; the example omits it); the
    device column names the device-info type and its address; the misspelt "device"
    key of the spec's vhost-user entry is not device-info; MACs are stripped."""
    assert table_rows(spec_status("device_info")) == [
        ("namespace-a/cluster-wide-default", "eth0", "192.0.2.2/24,2001:db8::2230/32",
         "02:11:22:33:44:54", "no", "1500", "-"),
        ("namespace-b/sriov-network_a", "net1", "-", "-", "no", "-", "pci 0000:18:02.5"),
        ("namespace-b/sriov-network_b", "net2", "-", "-", "no", "-", "pci 0000:18:0a.2"),
        ("namespace-c/userspace_net1", "net3", "-", "64:1f:74:32:2e:6d", "no", "-", "-"),
        ("namespace-d/vdpa_net1", "virtio0", "-", "64:1f:74:32:2e:6e", "no", "-",
         "vdpa 0000:04:02.7"),
    ]


@pytest.mark.parametrize("cidr, ips", [
    (False, "198.18.1.2,fd00:12::2"),          # the default: bare addresses, as Multus
    (True, "198.18.1.2/24,fd00:12::2/64"),     # networkStatusIPFormat cidr, and older pods
])
def test_rows_of_what_the_plugin_writes(cidr, ips):
    """The annotation exactly as netattach encodes it (status.encode_status), in either
    form of its addresses (docs/configuration.md, networkStatusIPFormat): shown as
    written."""
    entries = [
        status_entry("cluster-net", {"cniVersion": "1.1.0", "interfaces": [
            {"name": "eth0", "mac": "0a:58:c6:12:01:02", "sandbox": "/var/run/netns/x", "mtu": 1450}],
            "ips": [{"address": "198.18.1.2/24", "interface": 0},
                    {"address": "fd00:12::2/64", "interface": 0}]},
            ifname="eth0", default=True, cidr=cidr),
        status_entry("demo/net-a", None, ifname="net1", default=False),
        status_entry("demo/sriov", None, ifname="net2", default=False,
                     device_info={"type": "pci", "version": "1.1.0", "pci": {"pci-address": "0000:03:00.1"}}),
        status_entry("demo/user", None, ifname="net3", default=False,
                     device_info={"type": "vhost-user", "version": "1.1.0",
                                  "vhost-user": {"mode": "client", "path": "/run/vu.sock"}}),
    ]
    assert table_rows(parse_network_status(encode_status(entries))) == [
        ("cluster-net", "eth0", ips, "0a:58:c6:12:01:02", "yes", "1450", "-"),
        ("demo/net-a", "net1", "-", "-", "no", "-", "-"),
        ("demo/sriov", "net2", "-", "-", "no", "-", "pci 0000:03:00.1"),
        ("demo/user", "net3", "-", "-", "no", "-", "vhost-user /run/vu.sock"),
    ]


def test_empty_status_is_a_header_only():
    assert format_table([]) == "NETWORK  INTERFACE  IPS  MAC  DEFAULT  MTU  DEVICE\n"


@pytest.mark.parametrize("entry,row", [
    ({}, ("-", "-", "-", "-", "no", "-", "-")),
    ({"name": "n", "default": "true", "ips": []}, ("n", "-", "-", "-", "no", "-", "-")),
    ({"name": "n", "mtu": 9000, "ips": ["fd00::1/64"]}, ("n", "-", "fd00::1/64", "-", "no", "9000", "-")),
    ({"name": "n", "device-info": {"type": "pci"}}, ("n", "-", "-", "-", "no", "-", "pci")),
    ({"name": "n", "device-info": "pci"}, ("n", "-", "-", "-", "no", "-", "-")),
])
def test_rows_tolerate_missing_and_odd_fields(entry, row):
    assert table_rows([entry]) == [row]


@pytest.mark.parametrize("value,fragment", [
    ("", "not valid JSON"),
    ("[{\"name\": \"a\",}]", "not valid JSON"),
    ("[NaN]", "not valid JSON"),
    ("{\"name\": \"a\"}", "must be a JSON list of objects (§5), not an object"),
    ("[\"a\"]", "entry 0 must be an object (§5.3), not a string"),
    (7, "the annotation is a number, not a string"),
])
def test_malformed_annotations(value, fragment):
    with pytest.raises(StatusError) as e:
        parse_network_status(value)
    assert fragment in str(e.value)


def test_json_round_trip_keeps_every_field():
    entries = spec_status("multiple_gateways")
    assert parse_network_status(json.dumps(entries)) == entries
    assert entries[0]["default-route"] == ["192.0.2.1", "2001:db8::1", "2001:db8::2"]


def test_kubeconfig_lookup_like_kubectl(tmp_path):
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    a, b = tmp_path / "a", tmp_path / "b"
    b.write_text("")
    assert kubeconfig_path("/x", {"KUBECONFIG": str(b)}) == "/x"
    assert kubeconfig_path(None, {"KUBECONFIG": f"{a}:{b}", "HOME": str(home)}) == str(b)
    assert kubeconfig_path(None, {"KUBECONFIG": f"{a}", "HOME": str(home)}) == str(a)
    assert kubeconfig_path(None, {"KUBECONFIG": "", "HOME": str(home)}) is None  # in-cluster
    (home / ".kube" / "config").write_text("")
    assert kubeconfig_path(None, {"HOME": str(home)}) == str(home / ".kube" / "config")
