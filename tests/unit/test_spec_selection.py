"""The network selection annotation parser (multi-net spec v1.3 §4)."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netattach.cni.names import is_dns1123_label, is_valid_ifname
from netattach.spec.selection import (
    DEFAULT_NETWORK_ANNOTATION,
    MAX_ANNOTATION_BYTES,
    NETWORKS_ANNOTATION,
    NetworkSelectionElement,
    SelectionError,
    parse_network_selection,
)

NS = "my-namespace"


def parse(value: str) -> list[NetworkSelectionElement]:
    return parse_network_selection(value, NS)


def one(obj: dict) -> NetworkSelectionElement:
    (element,) = parse(json.dumps([obj]))
    return element


def test_annotation_names():
    assert NETWORKS_ANNOTATION == "k8s.v1.cni.cncf.io/networks"
    assert DEFAULT_NETWORK_ANNOTATION == "v1.multus-cni.io/default-network"


# ---------------------------------------------------------------- §4.1.1


@pytest.mark.parametrize(
    "value, expected",
    [
        # §4.1.1 example
        ("net-a,net-b,other-ns/net-c",
         [("my-namespace", "net-a", None), ("my-namespace", "net-b", None),
          ("other-ns", "net-c", None)]),
        # §3.3.1 examples
        ("example-namespace/attachment-name", [("example-namespace", "attachment-name", None)]),
        ("attachment-name", [("my-namespace", "attachment-name", None)]),
        # §4.2.2: the same network twice is two attachments
        ("net-a,net-a", [("my-namespace", "net-a", None), ("my-namespace", "net-a", None)]),
        # Multus @ifname forms
        ("net-a@eth5", [("my-namespace", "net-a", "eth5")]),
        ("ns1/net-a@net_1", [("ns1", "net-a", "net_1")]),
        # whitespace around items and separators is trimmed (as Multus does)
        ("  net-a ,  ns1 / net-b @ eth1  ", [("my-namespace", "net-a", None), ("ns1", "net-b", "eth1")]),
        ("\tnet-a\n", [("my-namespace", "net-a", None)]),
        # digits-only and single-character labels are valid DNS-1123 labels
        ("0,a,9z", [("my-namespace", "0", None), ("my-namespace", "a", None),
                    ("my-namespace", "9z", None)]),
        ("a" * 63, [("my-namespace", "a" * 63, None)]),
        ("x/" + "b" * 63 + "@" + "i" * 15, [("x", "b" * 63, "i" * 15)]),
        # interface names may hold characters a DNS label may not
        ("net-a@Eth.0-x_y", [("my-namespace", "net-a", "Eth.0-x_y")]),
    ],
)
def test_comma_format(value, expected):
    elements = parse(value)
    assert [(e.namespace, e.name, e.interface) for e in elements] == expected
    assert [e.index for e in elements] == list(range(len(expected)))
    for e in elements:
        assert e.ips is e.mac is e.default_route is e.port_mappings is None
        assert e.bandwidth is e.cni_args is e.infiniband_guid is None
        assert e.ipam_claim_reference is e.device_id is None


@pytest.mark.parametrize(
    "value, key, index",
    [
        ("net-a,,net-b", None, 1),          # empty item
        ("net-a,", None, 1),                # trailing comma
        (",net-a", None, 0),
        ("net-a, ,net-b", None, 1),
        ("a/b/c", None, 0),                 # two '/'
        ("a@b@c", None, 0),                 # two '@'
        ("net-a,ns/x/y", None, 1),
        ("/net-a", "namespace", 0),          # empty namespace
        ("ns/", "name", 0),                  # empty name
        ("net-a@", "interface", 0),          # empty interface
        ("@eth0", "name", 0),
        ("Net-A", "name", 0),                # upper case
        ("net_a", "name", 0),
        ("-net", "name", 0),
        ("net-", "name", 0),
        ("a" * 64, "name", 0),               # > 63
        ("net.a", "name", 0),                # dots: not a label
        ("Other/net", "namespace", 0),
        ("a" * 64 + "/net", "namespace", 0),
        ("a@b/c", "namespace", 0),           # '@' before '/'
        ("net-a@" + "i" * 16, "interface", 0),  # > 15 bytes
        ("net-a@.", "interface", 0),
        ("net-a@..", "interface", 0),
        ("net-a@e:1", "interface", 0),
        ("net-a@e t", "interface", 0),
        ("net-a,net-b@eth1,net-c@eth1", "interface", 2),  # duplicate interface
        ("net a", "name", 0),
        ('"net-a"', "name", 0),
        ("ünï", "name", 0),
    ],
)
def test_comma_format_errors(value, key, index):
    with pytest.raises(SelectionError) as info:
        parse(value)
    assert info.value.key == key
    assert info.value.index == index
    assert NETWORKS_ANNOTATION in str(info.value)
    assert f"element {index}" in str(info.value)


@pytest.mark.parametrize("value", ["", " ", "\n\t ", "[]", " [ ] ", "[\n]\n"])
def test_empty_annotation_selects_nothing(value):
    assert parse(value) == []


def test_ref_and_frozen():
    (e,) = parse("other-ns/net-c")
    assert e.ref == "other-ns/net-c"
    with pytest.raises(AttributeError):
        e.name = "x"  # type: ignore[misc]


def test_elements_are_hashable_even_with_dict_fields():
    value = json.dumps([{"name": "a", "cni-args": {"x": 1}, "bandwidth": {"ingressRate": 1},
                         "portMappings": [{"hostPort": 1, "containerPort": 1}]}])
    first, second = parse(value)[0], parse(value)[0]
    assert first == second and hash(first) == hash(second)
    assert len({first, second, *parse("a,a")}) == 3


# ---------------------------------------------------------------- §4.1.2


def test_spec_example_json_list():
    # §4.1.2 example, as YAML "|" delivers it
    value = """[
  {"name": "net-a"},
  {
    "name": "net-b",
    "ips": ["1.2.3.4"],
    "mac": "aa:bb:cc:dd:ee:ff"
  },
  {
    "name": "net-c",
    "namespace": "other-ns"
  }
]
"""
    a, b, c = parse(value)
    assert (a.ref, a.index) == ("my-namespace/net-a", 0)
    assert (b.ref, b.ips, b.mac, b.index) == ("my-namespace/net-b", ("1.2.3.4",), "aa:bb:cc:dd:ee:ff", 1)
    assert (c.ref, c.index) == ("other-ns/net-c", 2)


def test_spec_example_ips():
    # §4.1.2.1.3.1
    (e,) = parse('[{"name": "net-b", "ips": ["10.2.2.42/24", "2001:db8::5/64"]}]')
    assert e.ips == ("10.2.2.42/24", "2001:db8::5/64")


def test_spec_example_mac():
    # §4.1.2.1.4.1
    assert one({"name": "net-b", "mac": "02:23:45:67:89:01"}).mac == "02:23:45:67:89:01"


def test_spec_example_cni_args():
    # §4.1.2.1.6.1
    assert one({"name": "net-b", "cni-args": {"spoofchk": "on"}}).cni_args == {"spoofchk": "on"}


def test_spec_example_port_mappings():
    # §4.1.2.1.7.1: protocol is case-insensitive and normalized
    e = one({"name": "net-b", "portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]})
    assert e.port_mappings == ({"hostPort": 8080, "containerPort": 80, "protocol": "TCP"},)


def test_spec_example_bandwidth():
    # §4.1.2.1.8.1 verbatim has // comments, which JSON does not allow
    verbatim = """[
      {
        "name": "net-b",
        "bandwidth": {
          "ingressRate": 2048, // Limit ingress to 2Kbps
          "ingressBurst": 300, // Allow small egress bursts of 300b
          "egressRate": 8000, // Limit egress to 8000bps
          "egressBurst": 200  // Allow small egress bursts of 200b
        }
      }
    ]"""
    with pytest.raises(SelectionError) as info:
        parse(verbatim)
    assert "not valid JSON" in str(info.value)
    without_comments = "\n".join(line.split("//")[0] for line in verbatim.splitlines())
    (e,) = parse(without_comments)
    assert e.bandwidth == {"ingressRate": 2048, "ingressBurst": 300, "egressRate": 8000, "egressBurst": 200}


def test_spec_example_default_route():
    # §4.1.2.1.9.1
    a, b = parse('[{ "name": "net-a" }, {"name": "net-b", "default-route": ["10.0.0.1"]}]')
    assert a.default_route is None
    assert b.default_route == ("10.0.0.1",)


def test_spec_example_infiniband_guid():
    # §4.1.2.1.10.1
    e = one({"name": "net-b", "infiniband-guid": "24:8a:07:03:00:8d:ae:2f"})
    assert e.infiniband_guid == "24:8a:07:03:00:8d:ae:2f"


def test_spec_example_ipam_claim_reference():
    # §4.1.2.1.11.1
    a, b = parse('[{ "name": "net-a" }, { "name": "net-b", "ipam-claim-reference": "vm123.tenantblue" }]')
    assert a.ipam_claim_reference is None
    assert b.ipam_claim_reference == "vm123.tenantblue"


def test_spec_example_multiple_attachments_json():
    # §4.2: the same network twice, two elements
    a, b = parse('[{"name": "net-a"}, {"name": "net-a"}]')
    assert a.ref == b.ref and (a.index, b.index) == (0, 1)


@pytest.mark.parametrize(
    "obj, field, expected",
    [
        ({"name": "n", "namespace": ""}, "namespace", NS),            # §4.1.2.1.1: empty = pod's
        ({"name": "n", "namespace": None}, "namespace", NS),
        ({"name": "n", "namespace": "x"}, "namespace", "x"),
        ({"name": "n", "interface": "eth9"}, "interface", "eth9"),
        ({"name": "n", "interface": ""}, "interface", None),
        ({"name": "n", "interface": None}, "interface", None),
        ({"name": "n", "interfaceRequest": "net7"}, "interface", "net7"),  # Multus pre-3.2 alias
        ({"name": "n", "interface": "a", "interfaceRequest": "b"}, "interface", "a"),
        ({"name": "n", "interface": "", "interfaceRequest": "b"}, "interface", "b"),
        ({"name": "n", "ips": ["10.0.0.1"]}, "ips", ("10.0.0.1",)),
        ({"name": "n", "ips": ["10.0.0.1/32", "10.0.0.2/0"]}, "ips", ("10.0.0.1/32", "10.0.0.2/0")),
        ({"name": "n", "ips": ["fe80::1", "::/0", "::ffff:1.2.3.4/128"]}, "ips",
         ("fe80::1", "::/0", "::ffff:1.2.3.4/128")),
        ({"name": "n", "ips": None}, "ips", None),
        ({"name": "n", "mac": "02:AB:cd:00:00:01"}, "mac", "02:ab:cd:00:00:01"),
        ({"name": "n", "mac": "02-ab-cd-00-00-01"}, "mac", "02:ab:cd:00:00:01"),
        ({"name": "n", "mac": "02ab.cd00.0001"}, "mac", "02:ab:cd:00:00:01"),
        ({"name": "n", "mac": ""}, "mac", None),
        ({"name": "n", "infiniband-guid": "24-8A-07-03-00-8D-AE-2F"}, "infiniband_guid",
         "24:8a:07:03:00:8d:ae:2f"),
        ({"name": "n", "infiniband-guid": "248a.0703.008d.ae2f"}, "infiniband_guid",
         "24:8a:07:03:00:8d:ae:2f"),
        ({"name": "n", "infiniband-guid": "00:00:00:00:00:00:00:00"}, "infiniband_guid",
         "00:00:00:00:00:00:00:00"),
        ({"name": "n", "default-route": []}, "default_route", ()),     # §4.1.2.1.9: may be empty
        ({"name": "n", "default-route": ["10.0.0.1", "2001:db8::1"]}, "default_route",
         ("10.0.0.1", "2001:db8::1")),
        ({"name": "n", "cni-args": {}}, "cni_args", {}),
        ({"name": "n", "cni-args": {"a": [1, {"b": None}], "c": True}}, "cni_args",
         {"a": [1, {"b": None}], "c": True}),
        ({"name": "n", "deviceID": "0000:18:02.5"}, "device_id", "0000:18:02.5"),
        ({"name": "n", "deviceID": ""}, "device_id", None),
        ({"name": "n", "ipam-claim-reference": "claim-1"}, "ipam_claim_reference", "claim-1"),
        ({"name": "n", "ipam-claim-reference": ""}, "ipam_claim_reference", None),
        ({"name": "n", "portMappings": [{"hostPort": 1, "containerPort": 65535}]}, "port_mappings",
         ({"hostPort": 1, "containerPort": 65535, "protocol": "TCP"},)),
        ({"name": "n", "portMappings": [{"hostPort": 53, "containerPort": 53, "protocol": "Udp"},
                                        {"hostPort": 9, "containerPort": 9, "protocol": "sctp",
                                         "hostIP": "192.0.2.1"}]}, "port_mappings",
         ({"hostPort": 53, "containerPort": 53, "protocol": "UDP"},
          {"hostPort": 9, "containerPort": 9, "protocol": "SCTP", "hostIP": "192.0.2.1"})),
        ({"name": "n", "portMappings": [{"hostPort": 1, "containerPort": 2, "protocol": None,
                                         "hostIP": ""}]}, "port_mappings",
         ({"hostPort": 1, "containerPort": 2, "protocol": "TCP"},)),
        ({"name": "n", "bandwidth": {"ingressRate": 1}}, "bandwidth", {"ingressRate": 1}),
        ({"name": "n", "bandwidth": {"egressBurst": 5, "egressRate": 2**63 - 1}}, "bandwidth",
         {"egressRate": 2**63 - 1, "egressBurst": 5}),
        # vendor keys (with a period) and reserved unknown keys are ignored
        ({"name": "n", "org.foo.bar.key-name": {"x": 1}}, "name", "n"),
        ({"name": "n", "future-key": 1, "Name": "ignored"}, "name", "n"),
    ],
)
def test_json_keys(obj, field, expected):
    assert getattr(one(obj), field) == expected


def test_all_keys_together():
    e = one({
        "name": "net-b", "namespace": "other", "interface": "ib0",
        "mac": "02:00:00:00:00:01", "infiniband-guid": "24:8a:07:03:00:8d:ae:2f",
        "portMappings": [{"hostPort": 8080, "containerPort": 80}],
        "bandwidth": {"ingressRate": 10, "ingressBurst": 20},
        "cni-args": {"spoofchk": "on"}, "default-route": ["10.0.0.1"],
        "ipam-claim-reference": "vm123.tenantblue", "deviceID": "0000:18:02.5",
    })
    assert e == NetworkSelectionElement(
        name="net-b", namespace="other", interface="ib0", ips=None, mac="02:00:00:00:00:01",
        default_route=("10.0.0.1",),
        port_mappings=({"hostPort": 8080, "containerPort": 80, "protocol": "TCP"},),
        bandwidth={"ingressRate": 10, "ingressBurst": 20}, cni_args={"spoofchk": "on"},
        infiniband_guid="24:8a:07:03:00:8d:ae:2f", ipam_claim_reference="vm123.tenantblue",
        device_id="0000:18:02.5", index=0,
    )
    assert e.ref == "other/net-b"


@pytest.mark.parametrize(
    "obj, key",
    [
        ({}, "name"),                                          # name missing
        ({"namespace": "x"}, "name"),
        ({"name": None}, "name"),
        ({"name": ""}, "name"),
        ({"name": 5}, "name"),
        ({"name": ["a"]}, "name"),
        ({"name": "Net"}, "name"),
        ({"name": "a" * 64}, "name"),
        ({"name": "a.b"}, "name"),
        ({"name": "ns/net"}, "name"),
        ({"name": "n", "namespace": 1}, "namespace"),
        ({"name": "n", "namespace": "Bad"}, "namespace"),
        ({"name": "n", "interface": 0}, "interface"),
        ({"name": "n", "interface": "x" * 16}, "interface"),
        ({"name": "n", "interface": "é" * 8}, "interface"),    # 16 bytes of UTF-8
        ({"name": "n", "interface": "a/b"}, "interface"),
        ({"name": "n", "interface": "a:b"}, "interface"),
        ({"name": "n", "interface": "a b"}, "interface"),
        ({"name": "n", "interface": "a\tb"}, "interface"),
        ({"name": "n", "interface": "a\nb"}, "interface"),
        ({"name": "n", "interface": "a\x00b"}, "interface"),
        ({"name": "n", "interface": "a\x7fb"}, "interface"),
        ({"name": "n", "interface": "\u00e0"}, "interface"),   # UTF-8 c3 a0: kernel isspace(0xa0)
        ({"name": "n", "interface": "."}, "interface"),
        ({"name": "n", "interface": ".."}, "interface"),
        ({"name": "n", "interfaceRequest": "a b"}, "interfaceRequest"),
        ({"name": "n", "ips": "10.0.0.1"}, "ips"),
        ({"name": "n", "ips": []}, "ips"),
        ({"name": "n", "ips": [1]}, "ips"),
        ({"name": "n", "ips": [None]}, "ips"),
        ({"name": "n", "ips": ["10.0.0.256"]}, "ips"),
        ({"name": "n", "ips": ["10.0.0.1/33"]}, "ips"),
        ({"name": "n", "ips": ["10.0.0.1/"]}, "ips"),
        ({"name": "n", "ips": ["10.0.0.1/-1"]}, "ips"),
        ({"name": "n", "ips": ["10.0.0.1/024"]}, "ips"),
        ({"name": "n", "ips": ["10.0.0.1/ 24"]}, "ips"),
        ({"name": "n", "ips": ["10.0.0.1/255.255.255.0"]}, "ips"),
        ({"name": "n", "ips": ["2001:db8::1/129"]}, "ips"),
        ({"name": "n", "ips": ["fe80::1%eth0"]}, "ips"),
        ({"name": "n", "ips": ["010.0.0.1"]}, "ips"),
        ({"name": "n", "ips": [" 10.0.0.1"]}, "ips"),
        ({"name": "n", "ips": ["10.0.0.1", "host"]}, "ips"),
        ({"name": "n", "mac": 1}, "mac"),
        ({"name": "n", "mac": "02:00:00:00:00"}, "mac"),
        ({"name": "n", "mac": "02:00:00:00:00:00:00"}, "mac"),
        ({"name": "n", "mac": "02:00:00:00:00:0g"}, "mac"),
        ({"name": "n", "mac": "02:00-00:00:00:00"}, "mac"),
        ({"name": "n", "mac": "2:0:0:0:0:1"}, "mac"),
        ({"name": "n", "mac": "020000000001"}, "mac"),
        ({"name": "n", "mac": "01:00:5e:00:00:01"}, "mac"),   # multicast
        ({"name": "n", "mac": "ff:ff:ff:ff:ff:ff"}, "mac"),   # broadcast
        ({"name": "n", "mac": "00:00:00:00:00:00"}, "mac"),
        ({"name": "n", "mac": "80:00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff:00:11:22"}, "mac"),
        ({"name": "n", "infiniband-guid": 1}, "infiniband-guid"),
        ({"name": "n", "infiniband-guid": "24:8a:07:03:00:8d:ae"}, "infiniband-guid"),
        ({"name": "n", "infiniband-guid": "02:23:45:67:89:01"}, "infiniband-guid"),
        ({"name": "n", "cni-args": []}, "cni-args"),
        ({"name": "n", "cni-args": "spoofchk=on"}, "cni-args"),
        ({"name": "n", "portMappings": {}}, "portMappings"),
        ({"name": "n", "portMappings": []}, "portMappings"),
        ({"name": "n", "portMappings": [1]}, "portMappings"),
        ({"name": "n", "portMappings": [{"hostPort": 80}]}, "portMappings"),
        ({"name": "n", "portMappings": [{"containerPort": 80}]}, "portMappings"),
        ({"name": "n", "portMappings": [{"hostPort": 0, "containerPort": 80}]}, "portMappings"),
        ({"name": "n", "portMappings": [{"hostPort": 65536, "containerPort": 80}]}, "portMappings"),
        ({"name": "n", "portMappings": [{"hostPort": 80.0, "containerPort": 80}]}, "portMappings"),
        ({"name": "n", "portMappings": [{"hostPort": "80", "containerPort": 80}]}, "portMappings"),
        ({"name": "n", "portMappings": [{"hostPort": True, "containerPort": 80}]}, "portMappings"),
        ({"name": "n", "portMappings": [{"hostPort": 1, "containerPort": 2, "protocol": "icmp"}]},
         "portMappings"),
        ({"name": "n", "portMappings": [{"hostPort": 1, "containerPort": 2, "protocol": 6}]},
         "portMappings"),
        ({"name": "n", "portMappings": [{"hostPort": 1, "containerPort": 2, "hostport": 3}]},
         "portMappings"),
        ({"name": "n", "portMappings": [{"hostPort": 1, "containerPort": 2, "hostIP": "x"}]},
         "portMappings"),
        ({"name": "n", "bandwidth": []}, "bandwidth"),
        ({"name": "n", "bandwidth": {}}, "bandwidth"),
        ({"name": "n", "bandwidth": {"ingressRate": 0}}, "bandwidth"),
        ({"name": "n", "bandwidth": {"ingressRate": -1}}, "bandwidth"),
        ({"name": "n", "bandwidth": {"ingressRate": 1.5}}, "bandwidth"),
        ({"name": "n", "bandwidth": {"ingressRate": "1"}}, "bandwidth"),
        ({"name": "n", "bandwidth": {"ingressRate": True}}, "bandwidth"),
        ({"name": "n", "bandwidth": {"ingressRate": 2**63}}, "bandwidth"),
        ({"name": "n", "bandwidth": {"ingressBurst": 1}}, "bandwidth"),       # burst needs rate
        ({"name": "n", "bandwidth": {"egressBurst": 1, "ingressRate": 1}}, "bandwidth"),
        ({"name": "n", "bandwidth": {"ingressRate": 1, "latency": 1}}, "bandwidth"),
        ({"name": "n", "default-route": "10.0.0.1"}, "default-route"),
        ({"name": "n", "default-route": ["10.0.0.1/24"]}, "default-route"),
        ({"name": "n", "default-route": ["gw"]}, "default-route"),
        ({"name": "n", "default-route": [1]}, "default-route"),
        ({"name": "n", "ipam-claim-reference": 1}, "ipam-claim-reference"),
        ({"name": "n", "ipam-claim-reference": "Bad_Claim"}, "ipam-claim-reference"),
        ({"name": "n", "ipam-claim-reference": "a" * 254}, "ipam-claim-reference"),
        ({"name": "n", "ipam-claim-reference": "c", "ips": ["10.0.0.1"]}, "ipam-claim-reference"),
        ({"name": "n", "deviceID": 5}, "deviceID"),
        ({"name": "n", "deviceID": {"pci": "x"}}, "deviceID"),
    ],
)
def test_json_errors(obj, key):
    with pytest.raises(SelectionError) as info:
        parse(json.dumps([{"name": "first"}, obj]))
    assert info.value.key == key
    assert info.value.index == 1
    assert "element 1" in str(info.value)
    if key is not None:
        assert f'"{key}"' in str(info.value)
        assert info.value.value == obj.get(key)


@pytest.mark.parametrize(
    "value",
    [
        "[",
        "[{]",
        '[{"name": "a"},]',
        '{"name": "a"}',                   # an object, not a list
        ' {"name": "a"}',
        '[{"name": "a", "bandwidth": {"ingressRate": NaN}}]',
        '[{"name": "a", "cni-args": {"x": Infinity}}]',
        '[{"name": "a", "cni-args": {"x": -Infinity}}]',
        '[{"name": "a"}] trailing',
        "[" * 100_000,                       # too big
        "[" * 30_000 + "]" * 30_000,          # too deep for the decoder
        '[{"name": "a", "cni-args": {"x": 1' + "0" * 5000 + "}}]",  # int beyond str-digits limit
    ],
)
def test_whole_annotation_errors(value):
    with pytest.raises(SelectionError) as info:
        parse(value)
    assert info.value.index is None


@pytest.mark.parametrize("item, typename", [("1", "a number"), ('"net-a"', "a string"),
                                             ("null", "null"), ("[]", "a list"), ("true", "a boolean")])
def test_json_element_must_be_object(item, typename):
    with pytest.raises(SelectionError) as info:
        parse(f'[{{"name": "a"}}, {item}]')
    assert info.value.index == 1
    assert typename in str(info.value)


def test_default_route_on_one_element_only():
    # §4.1.2.1.9: more than one element with the key invalidates the annotation
    value = json.dumps([{"name": "a", "default-route": []}, {"name": "b"},
                        {"name": "c", "default-route": ["10.0.0.1"]}])
    with pytest.raises(SelectionError) as info:
        parse(value)
    assert (info.value.key, info.value.index) == ("default-route", 2)
    assert "elements 0, 2" in str(info.value)
    # a null default-route does not count as set
    assert len(parse(json.dumps([{"name": "a", "default-route": None},
                                 {"name": "b", "default-route": ["10.0.0.1"]}]))) == 2


def test_duplicate_interface_names():
    value = json.dumps([{"name": "a", "interface": "net1"}, {"name": "b", "interface": "net1"}])
    with pytest.raises(SelectionError) as info:
        parse(value)
    assert (info.value.key, info.value.value, info.value.index) == ("interface", "net1", 1)
    assert "element 0" in str(info.value)


def test_size_cap():
    names = ",".join(["n"] * (MAX_ANNOTATION_BYTES // 2))  # 2*N-1 bytes: just under
    assert len(parse(names)) == MAX_ANNOTATION_BYTES // 2
    with pytest.raises(SelectionError) as info:
        parse(names + ",nn")
    assert str(MAX_ANNOTATION_BYTES) in str(info.value)
    # bytes of UTF-8, not characters
    with pytest.raises(SelectionError):
        parse("é" * (MAX_ANNOTATION_BYTES // 2 + 1))


def test_non_string_value():
    with pytest.raises(SelectionError):
        parse_network_selection(None, NS)  # type: ignore[arg-type]


def test_error_carries_fields_and_truncates_value():
    with pytest.raises(SelectionError) as info:
        parse(json.dumps([{"name": "n", "cni-args": "x" * 500}]))
    err = info.value
    assert isinstance(err, ValueError)
    assert (err.key, err.value, err.index) == ("cni-args", "x" * 500, 0)
    assert len(str(err)) < 300
    assert "must be an object" in err.reason


def test_element_values_do_not_alias_across_calls():
    value = json.dumps([{"name": "n", "cni-args": {"a": 1}}])
    first, second = parse(value)[0], parse(value)[0]
    assert first.cni_args is not second.cni_args


# ---------------------------------------------------------------- helpers


# ---------------------------------------------------------------- properties

_KEYS = ["name", "namespace", "interface", "interfaceRequest", "ips", "mac", "infiniband-guid",
         "cni-args", "portMappings", "bandwidth", "default-route", "ipam-claim-reference",
         "deviceID", "org.example.key", "hostPort", "containerPort", "protocol", "hostIP",
         "ingressRate", "ingressBurst", "egressRate", "egressBurst"]

_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20),
    st.sampled_from(["net-a", "10.0.0.1", "10.0.0.1/24", "2001:db8::1/64", "02:00:00:00:00:01",
                     "24:8a:07:03:00:8d:ae:2f", "eth0", "tcp", "", ".", "a" * 64]),
)
_json_values = st.recursive(
    _scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(_KEYS), st.text(max_size=8)), children, max_size=6),
    ),
    max_leaves=25,
)
_small_json_values = st.recursive(
    _scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(st.sampled_from(_KEYS), children, max_size=4),
    ),
    max_leaves=8,
)


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=200))
def test_property_arbitrary_text_only_raises_selection_error(text):
    try:
        result = parse_network_selection(text, NS)
    except SelectionError:
        return
    assert all(isinstance(e, NetworkSelectionElement) for e in result)


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="ab-/@, \t.[]{}\":0Z", max_size=40))
def test_property_comma_like_text(text):
    try:
        result = parse_network_selection(text, NS)
    except SelectionError:
        return
    for e in result:
        assert is_dns1123_label(e.name) and is_dns1123_label(e.namespace)
        assert e.interface is None or is_valid_ifname(e.interface)


@settings(max_examples=300, deadline=None)
@given(_json_values)
def test_property_arbitrary_json_only_raises_selection_error(value):
    try:
        result = parse_network_selection(json.dumps(value), NS)
    except SelectionError:
        return
    assert isinstance(value, list) or value in ("", None) or isinstance(value, (int, float, str))
    for e in result:
        assert is_dns1123_label(e.name)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(_KEYS), _small_json_values, max_size=6).map(
    lambda d: {"name": "net-a", **d}), max_size=4))
def test_property_element_objects_only_raise_selection_error(elements):
    try:
        result = parse_network_selection(json.dumps(elements), NS)
    except SelectionError as e:
        assert e.index is None or 0 <= e.index < len(elements)
        return
    assert len(result) == len(elements)
    assert [e.index for e in result] == list(range(len(elements)))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["", "ns-1/"]), st.sampled_from(["a", "net-b", "x9"]),
                          st.sampled_from(["", "@eth1", "@net2", "@veth-x"])), min_size=1, max_size=5))
def test_property_comma_round_trip(items):
    value = ", ".join(f"{ns}{name}{iface}" for ns, name, iface in items)
    ifaces = [iface for _, _, iface in items if iface]
    try:
        result = parse_network_selection(value, NS)
    except SelectionError as e:
        assert e.key == "interface" and len(set(ifaces)) < len(ifaces)
        return
    assert [(e.namespace, e.name, e.interface) for e in result] == [
        (ns[:-1] or NS, name, iface[1:] or None) for ns, name, iface in items
    ]


def test_selection_counts_count_each_network_once_per_element():
    """What maxSameNetworkPerPod bounds: elements per `ns/name`, in first-seen order;
    the namespace is resolved first (§4.1.1), the interface does not matter."""
    from netattach.spec.selection import selection_counts
    elements = parse_network_selection("a, ns1/a@x, b, other/a, a@y", "ns1")
    assert selection_counts(elements) == {"ns1/a": 3, "ns1/b": 1, "other/a": 1}
    assert list(selection_counts(elements)) == ["ns1/a", "ns1/b", "other/a"]
    assert selection_counts([]) == {}
