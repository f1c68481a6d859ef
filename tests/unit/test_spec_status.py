"""The network-status annotation (multi-net spec v1.3 §5)."""
from __future__ import annotations

import ipaddress
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netattach.spec.status import (
    NETWORK_STATUS_ANNOTATION,
    encode_status,
    interface_address,
    status_entry,
    status_ips,
)

SANDBOX = "/var/run/netns/cni-1234"


def test_annotation_name():
    assert NETWORK_STATUS_ANNOTATION == "k8s.v1.cni.cncf.io/network-status"


# ---------------------------------------------------------------- no result (§5.1.1)


@pytest.mark.parametrize("default", [True, False])
def test_minimal_entry_without_result(default):
    entry = status_entry("ns/net-a", None, ifname="net1", default=default)
    assert entry == {"name": "ns/net-a", "interface": "net1", "default": default}
    assert list(entry) == ["name", "interface", "default"]


# ---------------------------------------------------------------- results >= 0.3.0


def bridge_result(version="1.0.0", **extra):
    """What the bridge plugin returns: bridge, host veth, container veth."""
    return {
        "cniVersion": version,
        "interfaces": [
            {"name": "cni0", "mac": "0a:00:00:00:00:01"},
            {"name": "veth1234", "mac": "0a:00:00:00:00:02"},
            {"name": "eth1", "mac": "0a:00:00:00:00:03", "sandbox": SANDBOX},
        ],
        "ips": [
            {"address": "10.1.0.5/24", "gateway": "10.1.0.1", "interface": 2},
            {"address": "10.1.0.1/24", "interface": 0},  # host-side address: excluded
        ],
        "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.1"}],
        "dns": {},
        **extra,
    }


@pytest.mark.parametrize("version", ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"])
def test_sandbox_interface_of_a_bridge_result(version):
    # §5.3.2.1 interface, §5.3.3.1 rule 1 ips, §5.3.4.1 mac
    entry = status_entry("ns/br", bridge_result(version), ifname="net1", default=False)
    assert entry == {"name": "ns/br", "interface": "eth1", "ips": ["10.1.0.5"],
                     "mac": "0a:00:00:00:00:03", "default": False}


def test_all_addresses_of_the_sandbox_interface_are_listed():
    result = {
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "host"}, {"name": "net1", "sandbox": SANDBOX, "mac": "02:00:00:00:00:09"}],
        "ips": [
            {"address": "192.0.2.2/24", "interface": 1},
            {"address": "198.51.100.9/32", "interface": 0},
            {"address": "2001:db8::2230/32", "interface": 1},
        ],
    }
    entry = status_entry("n", result, ifname="net1", default=False)
    assert entry["ips"] == ["192.0.2.2", "2001:db8::2230"]


def test_first_sandbox_interface_wins():
    result = {
        "cniVersion": "1.0.0",
        "interfaces": [
            {"name": "host0"},
            {"name": "first", "sandbox": SANDBOX, "mac": "02:00:00:00:00:01", "mtu": 9000},
            {"name": "second", "sandbox": SANDBOX, "mac": "02:00:00:00:00:02", "mtu": 1400},
        ],
        "ips": [{"address": "10.0.0.2/24", "interface": 2}, {"address": "10.0.0.1/24", "interface": 1}],
    }
    entry = status_entry("n", result, ifname="net1", default=False)
    assert (entry["interface"], entry["mac"], entry["mtu"], entry["ips"]) == (
        "first", "02:00:00:00:00:01", 9000, ["10.0.0.1"])


def test_mtu_from_a_cni_1_1_result():
    # §5.3.5; CNI 1.1.0 interfaces carry "mtu"
    result = bridge_result("1.1.0")
    result["interfaces"][2]["mtu"] = 1450
    entry = status_entry("n", result, ifname="net1", default=False)
    assert entry["mtu"] == 1450
    assert list(entry) == ["name", "interface", "ips", "mac", "mtu", "default"]


@pytest.mark.parametrize(
    "interfaces",
    [
        None,                                                       # no "interfaces" key
        [],
        [{"name": "host0"}, {"name": "host1", "sandbox": ""}],     # none with a sandbox
        [{"name": "x", "sandbox": None}],
        "garbage",
    ],
)
def test_rule_2_without_a_sandbox_interface(interfaces):
    # §5.3.3.1 rule 2: addresses with no "interface" or a negative one
    result = {
        "cniVersion": "1.0.0",
        "ips": [
            {"address": "10.0.0.1/24", "interface": 0},
            {"address": "10.0.0.2/24"},
            {"address": "10.0.0.3/24", "interface": -1},
            {"address": "10.0.0.4/24", "interface": None},
        ],
    }
    if interfaces is not None:
        result["interfaces"] = interfaces
    entry = status_entry("n", result, ifname="net7", default=False)
    assert entry["ips"] == ["10.0.0.2", "10.0.0.3", "10.0.0.4"]
    assert entry["interface"] == "net7"  # falls back to CNI_IFNAME
    assert "mac" not in entry


def test_unindexed_ips_are_used_when_the_sandbox_interface_has_none():
    # our fallback (Multus lists them too)
    result = {"cniVersion": "0.4.0",
              "interfaces": [{"name": "net1", "sandbox": SANDBOX}],
              "ips": [{"version": "4", "address": "10.0.0.2/24"}]}
    assert status_entry("n", result, ifname="net1", default=False)["ips"] == ["10.0.0.2"]


def test_unindexed_ips_are_not_added_when_rule_1_finds_addresses():
    result = {"cniVersion": "1.0.0",
              "interfaces": [{"name": "net1", "sandbox": SANDBOX}],
              "ips": [{"address": "10.0.0.2/24", "interface": 0}, {"address": "10.9.9.9/32"}]}
    assert status_entry("n", result, ifname="net1", default=False)["ips"] == ["10.0.0.2"]


def test_no_ips_key_when_there_are_none():
    result = {"cniVersion": "1.0.0", "interfaces": [{"name": "net1", "sandbox": SANDBOX}],
              "ips": [{"address": "10.0.0.1/24", "interface": 5}]}
    entry = status_entry("n", result, ifname="net1", default=False)
    assert "ips" not in entry
    assert status_entry("n", {"cniVersion": "1.0.0"}, ifname="net1", default=True) == {
        "name": "n", "interface": "net1", "default": True}


def test_sandbox_interface_without_a_name_uses_ifname():
    result = {"cniVersion": "1.0.0", "interfaces": [{"sandbox": SANDBOX, "mac": "02:00:00:00:00:01"}]}
    entry = status_entry("n", result, ifname="net3", default=False)
    assert (entry["interface"], entry["mac"]) == ("net3", "02:00:00:00:00:01")


@pytest.mark.parametrize(
    "dns, expected",
    [
        ({}, None),
        (None, None),
        ("x", None),
        ({"nameservers": [], "domain": "", "search": [], "options": ["ndots:5"]}, None),
        ({"nameservers": ["192.0.2.1", "2001:db8:4860::8888"]},
         {"nameservers": ["192.0.2.1", "2001:db8:4860::8888"]}),
        ({"nameservers": ["10.0.0.10"], "domain": "cluster.local", "search": ["a.svc", "svc"],
          "options": ["ndots:5"]},
         {"nameservers": ["10.0.0.10"], "domain": "cluster.local", "search": ["a.svc", "svc"]}),
        ({"search": ["eng.example.com", "example.com"], "nameservers": "10.0.0.1"},
         {"search": ["eng.example.com", "example.com"]}),
        ({"nameservers": ["", 5, "10.0.0.1"]}, {"nameservers": ["10.0.0.1"]}),
    ],
)
def test_dns(dns, expected):
    # §5.3.7
    result = bridge_result()
    result["dns"] = dns
    entry = status_entry("n", result, ifname="net1", default=False)
    assert entry.get("dns") == expected


def test_default_route_and_device_info():
    # §5.3.7.4, §5.3.8 (device-info as in the §5.4 example)
    device = {"type": "pci", "version": "1.0.0",
              "pci": {"pci-address": "0000:18:02.5", "pf-pci-address": "0000:18:00.0"}}
    result = bridge_result()
    result["dns"] = {"nameservers": ["10.0.0.10"]}
    result["interfaces"][2]["mtu"] = 1500
    entry = status_entry("ns/sriov", result, ifname="net1", default=False,
                         default_route=["10.1.0.1", "2001:db8::1"], device_info=device)
    assert list(entry) == ["name", "interface", "ips", "mac", "mtu", "default", "dns",
                           "default-route", "device-info"]
    assert entry["default-route"] == ["10.1.0.1", "2001:db8::1"]
    assert entry["device-info"] == device


@pytest.mark.parametrize("default_route", [None, []])
def test_empty_default_route_is_left_out(default_route):
    entry = status_entry("n", bridge_result(), ifname="net1", default=False, default_route=default_route)
    assert "default-route" not in entry


def test_default_route_and_device_info_without_result():
    entry = status_entry("n", None, ifname="net1", default=False, default_route=["10.0.0.1"],
                         device_info={"type": "pci"})
    assert entry == {"name": "n", "interface": "net1", "default": False,
                     "default-route": ["10.0.0.1"], "device-info": {"type": "pci"}}


def test_default_is_a_bool():
    assert status_entry("n", None, ifname="eth0", default=1)["default"] is True  # type: ignore[arg-type]
    assert status_entry("n", bridge_result(), ifname="eth0", default=0)["default"] is False  # type: ignore[arg-type]


def test_result_is_not_modified():
    result = bridge_result()
    before = json.dumps(result)
    entry = status_entry("n", result, ifname="net1", default=False)
    entry["ips"].append("x")
    assert json.dumps(result) == before


# ---------------------------------------------------------------- results < 0.3.0


@pytest.mark.parametrize("version", ["0.1.0", "0.2.0", None])
def test_legacy_result(version):
    # §5.3.2.1 / §5.3.3.1 for results < 0.3.0: ifname, ip4 + ip6
    result = {"ip4": {"ip": "10.1.0.5/24", "gateway": "10.1.0.1"},
              "ip6": {"ip": "2001:db8::5/64"},
              "dns": {"nameservers": ["10.1.0.1"]}}
    if version:
        result["cniVersion"] = version
    entry = status_entry("ns/old", result, ifname="net2", default=False)
    assert entry == {"name": "ns/old", "interface": "net2", "ips": ["10.1.0.5", "2001:db8::5"],
                     "default": False, "dns": {"nameservers": ["10.1.0.1"]}}
    cidr = status_entry("ns/old", result, ifname="net2", default=False, cidr=True)
    assert cidr["ips"] == ["10.1.0.5/24", "2001:db8::5/64"]


@pytest.mark.parametrize("result, ips", [
    ({"cniVersion": "0.2.0", "ip4": {"ip": "10.0.0.1/8"}}, ["10.0.0.1"]),
    ({"cniVersion": "0.2.0", "ip6": {"ip": "fd00::1/64"}}, ["fd00::1"]),
    ({"cniVersion": "0.2.0"}, None),
    ({"cniVersion": "0.2.0", "ip4": "x", "ip6": {"ip": 5}}, None),
    ({"cniVersion": "0.2", "ip4": {"ip": "10.0.0.1/8"}}, ["10.0.0.1"]),
    ({"cniVersion": "garbage", "ip4": {"ip": "10.0.0.1/8"}}, ["10.0.0.1"]),   # by shape
    # a 1.0.0 result that happens to carry ip4 is read as 1.0.0
    ({"cniVersion": "1.0.0", "ip4": {"ip": "10.0.0.1/8"}, "ips": [{"address": "10.0.0.2/8"}]},
     ["10.0.0.2"]),
    # no version and no ip4/ip6: the current shape
    ({"ips": [{"address": "10.0.0.2/8"}]}, ["10.0.0.2"]),
])
def test_version_detection(result, ips):
    assert status_entry("n", result, ifname="net1", default=False).get("ips") == ips


# ---------------------------------------------------------------- the address form


@pytest.mark.parametrize("text, parsed", [
    ("10.1.1.2/24", ("10.1.1.2", 24)),
    ("0.0.0.0/0", ("0.0.0.0", 0)),
    ("255.255.255.255/32", ("255.255.255.255", 32)),
    ("10.1.1.2/024", ("10.1.1.2", 24)),                   # Go's ParseCIDR reads it too
    ("2001:db8::5/64", ("2001:db8::5", 64)),
    ("2001:DB8:0:0:0:0:0:5/64", ("2001:db8::5", 64)),     # canonical, as Go prints it
    ("2001:db8:0:1:0:0:0:5/128", ("2001:db8:0:1::5", 128)),
    ("2001:db8::1:0:0:5/64", ("2001:db8::1:0:0:5", 64)),  # the first longest run only
    ("fe80::1/64", ("fe80::1", 64)),
    ("::ffff:192.0.2.5/120", ("192.0.2.5", 24)),          # IPv4-mapped: as IPv4
    ("::ffff:192.0.2.5/64", ("192.0.2.5", None)),         # ... with no IPv4 prefix
    ("::/0", ("::", 0)),
])
def test_interface_address(text, parsed):
    assert interface_address(text) == parsed


@pytest.mark.parametrize("text", [
    "10.1.1.2", "2001:db8::5",                       # no prefix length: not a CNI address
    "10.1.1.2/33", "2001:db8::5/129", "10.1.1.2/", "10.1.1.2/-1", "10.1.1.2/ 24",
    "10.1.1.2/255.255.255.0", "10.1.1.2/２４",        # a mask; non-ASCII digits
    "10.1.1/24", "10.1.1.2.3/24", "10.1.1.256/24", "10.01.1.2/24", "10.1.1.-2/24",
    "10.1.1.２/24", "fe80::1%eth0/64", "2001:db8::5::1/64", "gg::1/64", "", "/24", "x",
    None, 5, ["10.1.1.2/24"], "10.1.1.2/" + "1" * 5000, "2001:db8::5/" + "9" * 5000,
    "10.1.1.2/0033",
])
def test_interface_address_refuses(text):
    assert interface_address(text) is None


def test_status_ips_bare_or_cidr_in_order_each_once():
    given = ["10.1.1.2/24", "bad", "2001:DB8::5/64", "10.1.1.2/32", "::ffff:10.1.1.9/64"]
    assert status_ips(given) == ["10.1.1.2", "2001:db8::5", "10.1.1.9"]
    assert status_ips(given, cidr=True) == ["10.1.1.2/24", "2001:db8::5/64", "10.1.1.2/32"]
    assert status_ips([]) == [] and status_ips(["x", None]) == []


def test_an_entry_of_a_result_with_an_address_that_does_not_parse():
    result = {"cniVersion": "1.0.0", "interfaces": [{"name": "net1", "sandbox": SANDBOX}],
              "ips": [{"address": "10.1.1.2", "interface": 0},
                      {"address": "10.1.1.3/24", "interface": 0}]}
    assert status_entry("n", result, ifname="net1", default=False)["ips"] == ["10.1.1.3"]
    result["ips"].pop()
    assert "ips" not in status_entry("n", result, ifname="net1", default=False)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.ip_addresses(v=4).map(lambda a: (a, 32)),
                 st.ip_addresses(v=6).map(lambda a: (a, 128))).flatmap(
    lambda ab: st.tuples(st.just(ab[0]), st.integers(0, ab[1]))),
    st.booleans())
def test_property_each_address_is_what_go_and_python_parse(address_prefix, upper):
    """Every written entry parses as a bare address (Python's ip_address, which refuses
    a prefix length as Go's net.ParseIP does) or as address/prefix, and is the canonical
    text of the address the result gave, whatever its case."""
    address, prefix = address_prefix
    text = f"{address.exploded}/{prefix}"
    text = text.upper() if upper else text
    (bare,) = status_ips([text])
    (cidr,) = status_ips([text], cidr=True) or [None]
    mapped = getattr(address, "ipv4_mapped", None)
    expected = mapped or address
    assert ipaddress.ip_address(bare) == expected and str(expected) == bare
    with pytest.raises(ValueError):
        ipaddress.ip_address(f"{bare}/{prefix}")  # what a reader of bare addresses refuses
    if mapped is None:
        assert cidr == f"{address}/{prefix}"
        assert ipaddress.ip_interface(cidr) == ipaddress.ip_interface(text.lower())
    elif prefix >= 96:
        assert cidr == f"{mapped}/{prefix - 96}"
    else:
        assert cidr is None


# ---------------------------------------------------------------- the §5.4 examples


def test_spec_example_single_gateway():
    # with the opt-in CIDR form (networkStatusIPFormat: cidr) the §5.4 example exactly
    default = status_entry(
        "namespace-a/cluster-wide-default",
        {"cniVersion": "1.1.0",
         "interfaces": [{"name": "veth9", "mac": "aa:00:00:00:00:01"},
                        {"name": "eth5", "mac": "02:11:22:33:44:54", "mtu": 1500, "sandbox": SANDBOX}],
         "ips": [{"address": "192.0.2.2/24", "gateway": "192.0.2.1", "interface": 1},
                 {"address": "2001:db8::2230/32", "interface": 1}]},
        ifname="eth5", default=True, default_route=["192.0.2.1"], cidr=True)
    secondary = status_entry(
        "namespace-b/some-network",
        {"cniVersion": "1.0.0",
         "interfaces": [{"name": "eth1", "mac": "02:11:22:33:44:55", "sandbox": SANDBOX}],
         "ips": [{"address": "192.0.2.2/24", "interface": 0},
                 {"address": "2001:db8::2234/32", "interface": 0}],
         "dns": {"nameservers": ["192.0.2.1", "2001:db8:4860::8888"],
                 "search": ["eng.example.com", "example.com"]}},
        ifname="eth1", default=False, cidr=True)
    expected = json.loads("""[
        {
          "name": "namespace-a/cluster-wide-default",
          "interface": "eth5",
          "ips": [ "192.0.2.2/24", "2001:db8::2230/32" ],
          "mac": "02:11:22:33:44:54",
          "mtu": 1500,
          "default-route": ["192.0.2.1"],
          "default": true
        },
        {
          "name": "namespace-b/some-network",
          "interface": "eth1",
          "ips": [ "192.0.2.2/24", "2001:db8::2234/32" ],
          "mac": "02:11:22:33:44:55",
          "dns": {
            "nameservers": [ "192.0.2.1", "2001:db8:4860::8888" ],
            "search": [ "eng.example.com", "example.com" ]
          }
        }
    ]""")
    expected[1]["default"] = False  # §5.3.6: required; the example leaves it out
    assert [default, secondary] == expected
    assert json.loads(encode_status([default, secondary])) == expected


@pytest.mark.parametrize("cidr, ips", [
    (False, ["192.0.2.2", "2001:db8::2230"]),         # the default: bare, as Multus
    (True, ["192.0.2.2/24", "2001:db8::2230/32"]),    # the §5.4 example's form
])


def test_spec_example_multiple_gateways(cidr, ips):
    entry = status_entry(
        "namespace-a/cluster-wide-default",
        {"cniVersion": "1.0.0",
         "interfaces": [{"name": "eth5", "mac": "02:11:22:33:44:54", "sandbox": SANDBOX}],
         "ips": [{"address": "192.0.2.2/24", "interface": 0},
                 {"address": "2001:db8::2230/32", "interface": 0}]},
        ifname="eth5", default=True, default_route=["192.0.2.1", "2001:db8::1", "2001:db8::2"],
        cidr=cidr)
    assert entry == {"name": "namespace-a/cluster-wide-default", "interface": "eth5",
                     "ips": ips, "mac": "02:11:22:33:44:54",
                     "default-route": ["192.0.2.1", "2001:db8::1", "2001:db8::2"], "default": True}


def test_spec_example_device_info():
    device = {"type": "vdpa", "version": "1.0.0",
              "vdpa": {"parent-device": "/sys/bus/vdpa/devices", "driver": "vhost", "device": "vdpa2",
                       "path": "/dev/vhost-vdpa0", "pci-address": "0000:04:02.7",
                       "pf-pci-address": "0000:04:00.0"}}
    entry = status_entry("namespace-d/vdpa_net1", None, ifname="virtio0", default=False,
                         device_info=device)
    assert entry == {"name": "namespace-d/vdpa_net1", "interface": "virtio0", "default": False,
                     "device-info": device}


# ---------------------------------------------------------------- encode_status


def test_encode_like_multus():
    entries = [
        {"name": "cbr0", "interface": "eth0", "ips": ["10.244.1.2/24"], "default": True},
        {"name": "ns/macvlan", "interface": "net1", "default": False, "dns": {}},
    ]
    assert encode_status(entries) == (
        '[{\n'
        '    "name": "cbr0",\n'
        '    "interface": "eth0",\n'
        '    "ips": [\n'
        '        "10.244.1.2/24"\n'
        '    ],\n'
        '    "default": true\n'
        '},{\n'
        '    "name": "ns/macvlan",\n'
        '    "interface": "net1",\n'
        '    "default": false,\n'
        '    "dns": {}\n'
        '}]'
    )


def test_encode_empty_and_unicode():
    assert encode_status([]) == "[]"
    text = encode_status([{"name": "ns/réseau", "default": False}])
    assert "réseau" in text and json.loads(text) == [{"name": "ns/réseau", "default": False}]


def test_encode_rejects_non_json():
    with pytest.raises(ValueError):
        encode_status([{"name": "n", "mtu": float("nan")}])
    with pytest.raises(TypeError):
        encode_status([{"name": object()}])


# ---------------------------------------------------------------- properties

_leaf = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=6),
                  st.sampled_from(["0.2.0", "0.3.1", "1.0.0", "1.1.0", "x", SANDBOX, "10.0.0.1/24"]))
_keys = st.sampled_from(["cniVersion", "interfaces", "ips", "ip4", "ip6", "dns", "name", "mac",
                         "sandbox", "mtu", "address", "interface", "ip", "nameservers", "domain",
                         "search", "routes"])
_values = st.recursive(_leaf, lambda c: st.one_of(st.lists(c, max_size=4),
                                                  st.dictionaries(_keys, c, max_size=5)),
                       max_leaves=20)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(_keys, _values, max_size=6), st.booleans())
def test_property_any_result_gives_a_valid_entry(result, default):
    entry = status_entry("ns/n", result, ifname="net1", default=default)
    assert entry["name"] == "ns/n" and entry["default"] is default
    assert isinstance(entry["interface"], str) and entry["interface"]
    order = ["name", "interface", "ips", "mac", "mtu", "default", "dns", "default-route", "device-info"]
    assert [k for k in order if k in entry] == list(entry)
    assert all(isinstance(ip, str) and ip for ip in entry.get("ips", ["x"]))
    for ip in entry.get("ips", []):  # bare addresses, the canonical text
        assert str(ipaddress.ip_address(ip)) == ip
    assert isinstance(entry.get("mtu", 1), int) and entry.get("mtu", 1) > 0
    assert json.loads(encode_status([entry])) == [entry]


def test_mtu_from_netns_only_when_the_result_has_none():
    r10 = {"cniVersion": "1.0.0", "interfaces": [{"name": "net1", "sandbox": "/ns"}], "ips": []}
    assert status_entry("n", r10, ifname="net1", default=False, mtu=1400)["mtu"] == 1400
    r11 = {"cniVersion": "1.1.0", "interfaces": [{"name": "net1", "sandbox": "/ns", "mtu": 9000}]}
    assert status_entry("n", r11, ifname="net1", default=False, mtu=1400)["mtu"] == 9000
    assert "mtu" not in status_entry("n", r10, ifname="net1", default=False)
