"""CNI result versions and conversion between every pair of versions. Pure."""
from __future__ import annotations

import copy
import ipaddress
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netattach.cni.errors import CniError
from netattach.cni.result import convert_result, result_version
from netattach.cni.version import SUPPORTED_VERSIONS

V020 = ("0.1.0", "0.2.0")
V040 = ("0.3.0", "0.3.1", "0.4.0")

def test_result_version():
    assert result_version({"cniVersion": "0.4.0"}, "1.0.0") == "0.4.0"
    assert result_version({}, "1.0.0") == "1.0.0"
    assert result_version({"cniVersion": ""}, "0.3.1") == "0.3.1"
    with pytest.raises(CniError) as e:
        result_version({"cniVersion": 1}, "1.0.0")
    assert e.value.code == 6


# ------------------------------------------------------------------ one logical result
# in the shape of every version: two interfaces, two IPv4 and one IPv6 address,
# routes of both families, DNS.

IFACES = [{"name": "br0", "mac": "aa:bb:cc:00:00:01"},
          {"name": "eth0", "mac": "aa:bb:cc:00:00:02", "sandbox": "/var/run/netns/x"}]
IFACE_110 = {"mtu": 1400, "socketPath": "/run/vhost.sock", "pciID": "0000:00:01.0"}
IPS = [{"v": "4", "address": "10.1.0.5/24", "gateway": "10.1.0.1", "interface": 1},
       {"v": "6", "address": "fd00::5/64", "gateway": "fd00::1", "interface": 1},
       {"v": "4", "address": "10.2.0.5/16", "interface": 1}]
ROUTES = [{"dst": "0.0.0.0/0", "gw": "10.1.0.1"}, {"dst": "fd00:1::/64"},
          {"dst": "10.9.0.0/16", "gw": "10.2.0.1"}]
ROUTE_110 = {"mtu": 1300, "advmss": 1200, "priority": 10, "table": 100, "scope": 0}
DNS = {"nameservers": ["10.1.0.53"], "domain": "example.org", "search": ["example.org"],
       "options": ["ndots:2"]}


def lossy(ips, routes, ifaces):
    """What survives a 0.1.0/0.2.0 representation: first v4, first v6, their routes."""
    v4 = next((ip for ip in ips if ip["v"] == "4"), None)
    v6 = next((ip for ip in ips if ip["v"] == "6"), None)
    keep = [{k: v for k, v in ip.items() if k != "interface"} for ip in (v4, v6) if ip]
    is4 = lambda r: ipaddress.ip_network(r["dst"]).version == 4  # noqa: E731
    rts = ([r for r in routes if is4(r)] if v4 else []) + \
        ([r for r in routes if not is4(r)] if v6 else [])
    return keep, rts, []


def build(version, ips=IPS, routes=ROUTES, ifaces=IFACES, dns=DNS, extras=False):
    out = {"cniVersion": version}
    if version in V020:
        ips, routes, _ = lossy(ips, routes, ifaces)
        for key, fam in (("ip4", "4"), ("ip6", "6")):
            ip = next((i for i in ips if i["v"] == fam), None)
            if ip is None:
                continue
            ipc = {"ip": ip["address"]}
            if "gateway" in ip:
                ipc["gateway"] = ip["gateway"]
            rts = [r for r in routes if (ipaddress.ip_network(r["dst"]).version == 4) == (fam == "4")]
            if rts:
                ipc["routes"] = [dict(r) for r in rts]
            out[key] = ipc
    else:
        if ifaces:
            out["interfaces"] = [dict(i, **(IFACE_110 if extras else {})) for i in ifaces]
        out["ips"] = []
        for ip in ips:
            new = {"version": ip["v"]} if version in V040 else {}
            new.update({k: v for k, v in ip.items() if k != "v"})
            out["ips"].append(new)
        if routes:
            out["routes"] = [dict(r, **(ROUTE_110 if extras else {})) for r in routes]
    if dns:
        out["dns"] = dict(dns)
    return out


def expected(src, dst):
    if src == dst:
        return build(dst, extras=src == "1.1.0")
    ips, routes, ifaces = IPS, ROUTES, IFACES
    if src in V020:
        ips, routes, ifaces = lossy(ips, routes, ifaces)
    return build(dst, ips, routes, ifaces)


PAIRS = list(itertools.product(SUPPORTED_VERSIONS, SUPPORTED_VERSIONS))


@pytest.mark.parametrize("src,dst", PAIRS, ids=[f"{a}->{b}" for a, b in PAIRS])
def test_convert_every_pair(src, dst):
    source = build(src, extras=src == "1.1.0")
    before = copy.deepcopy(source)
    out = convert_result(source, dst)
    assert out == expected(src, dst)
    assert out["cniVersion"] == dst
    assert source == before  # input untouched


def test_build_shapes_sanity():
    assert set(build("0.2.0")) == {"cniVersion", "ip4", "ip6", "dns"}
    assert build("0.4.0")["ips"][0]["version"] == "4"
    assert "version" not in build("1.0.0")["ips"][0]


def test_110_fields_dropped_below_110():
    src = build("1.1.0", extras=True)
    for dst in ("1.0.0", "0.4.0", "0.3.1"):
        out = convert_result(src, dst)
        for iface in out["interfaces"]:
            assert set(iface) <= {"name", "mac", "sandbox"}
        for route in out["routes"]:
            assert set(route) <= {"dst", "gw"}
    assert convert_result(src, "1.1.0")["interfaces"][0]["mtu"] == 1400


def test_110_fields_kept_from_100_to_110_absent():
    out = convert_result(build("1.0.0"), "1.1.0")
    assert out == build("1.1.0")  # nothing invented


def test_020_keeps_first_ip_of_each_family():
    src = {"cniVersion": "1.0.0", "ips": [
        {"address": "fd00::9/64"}, {"address": "10.0.0.2/24", "gateway": "10.0.0.1"},
        {"address": "10.0.1.2/24"}, {"address": "fd01::9/64"}],
        "routes": [{"dst": "10.5.0.0/16"}, {"dst": "::/0", "gw": "fd00::1"}]}
    assert convert_result(src, "0.2.0") == {
        "cniVersion": "0.2.0",
        "ip4": {"ip": "10.0.0.2/24", "gateway": "10.0.0.1", "routes": [{"dst": "10.5.0.0/16"}]},
        "ip6": {"ip": "fd00::9/64", "routes": [{"dst": "::/0", "gw": "fd00::1"}]}}


def test_020_routes_of_a_family_without_ip_are_dropped():
    src = {"cniVersion": "0.4.0", "ips": [{"version": "4", "address": "10.0.0.2/24"}],
           "routes": [{"dst": "::/0"}, {"dst": "0.0.0.0/0"}]}
    assert convert_result(src, "0.1.0") == {
        "cniVersion": "0.1.0", "ip4": {"ip": "10.0.0.2/24", "routes": [{"dst": "0.0.0.0/0"}]}}


def test_ipv4_mapped_address_counts_as_v4():
    src = {"cniVersion": "1.0.0", "ips": [{"address": "::ffff:10.0.0.2/120"}]}
    assert convert_result(src, "0.4.0")["ips"][0]["version"] == "4"


@pytest.mark.parametrize("dst", V020)
def test_020_without_any_ip_fails(dst):
    src = {"cniVersion": "1.0.0", "interfaces": [{"name": "eth0"}]}
    with pytest.raises(CniError) as e:
        convert_result(src, dst)
    assert e.value.code == 1 and "no IP" in e.value.msg


def test_up_conversion_from_020_without_ips():
    assert convert_result({"cniVersion": "0.2.0", "dns": {}}, "1.0.0") == {"cniVersion": "1.0.0"}


def test_missing_cni_version_read_as_default():
    src = {"ips": [{"version": "4", "address": "10.0.0.2/24"}]}
    out = convert_result(src, "1.0.0", default_version="0.3.1")
    assert out == {"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.2/24"}]}
    # no default: taken as already in the target version
    assert convert_result({"ips": [{"address": "10.0.0.2/24"}]}, "1.0.0") == \
        {"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.2/24"}]}
    # a 0.2.0 result without version read as 0.2.0
    old = {"ip4": {"ip": "10.0.0.2/24"}}
    assert convert_result(old, "0.4.0", default_version="0.2.0")["ips"] == \
        [{"version": "4", "address": "10.0.0.2/24"}]


def test_same_version_is_a_deep_copy_keeping_unknown_keys():
    src = {"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.2/24"}], "x-extra": {"a": 1}}
    out = convert_result(src, "1.0.0")
    assert out == src and out is not src
    out["x-extra"]["a"] = 2
    assert src["x-extra"]["a"] == 1


def test_cross_version_drops_unknown_keys():
    src = {"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.2/24", "foo": 1}], "extra": 1,
           "dns": {"nameservers": ["1.1.1.1"], "bogus": 2}}
    assert convert_result(src, "0.4.0") == {
        "cniVersion": "0.4.0", "ips": [{"version": "4", "address": "10.0.0.2/24"}],
        "dns": {"nameservers": ["1.1.1.1"]}}


@pytest.mark.parametrize("src,dst", [({"cniVersion": "0.5.0"}, "1.0.0"),
                                     ({"cniVersion": "1.0.0"}, "2.0.0"),
                                     ({"cniVersion": "1.0.0"}, "1.0")])
def test_unsupported_versions(src, dst):
    with pytest.raises(CniError) as e:
        convert_result(src, dst)
    assert e.value.code == 1


@pytest.mark.parametrize("src", [
    [], "x", {"cniVersion": "1.0.0", "ips": {"address": "10.0.0.1/24"}},
    {"cniVersion": "1.0.0", "ips": [{"gateway": "10.0.0.1"}]},
    {"cniVersion": "1.0.0", "ips": [{"address": "nonsense"}]},
    {"cniVersion": "1.0.0", "interfaces": ["eth0"]},
    {"cniVersion": "0.2.0", "ip4": "10.0.0.2/24"},
    {"cniVersion": "0.2.0", "ip4": {"gateway": "10.0.0.1"}},
    {"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.1/24"}], "dns": []},
])
def test_malformed_results_are_decode_failures(src):
    with pytest.raises(CniError) as e:
        convert_result(src, "0.2.0" if isinstance(src, dict) and src.get("cniVersion") == "1.0.0"
                       else "1.0.0")
    assert e.value.code == 6


# ------------------------------------------------------------------ properties

_v4 = st.ip_addresses(v=4).map(str)
_v6 = st.ip_addresses(v=6).filter(lambda a: a.ipv4_mapped is None).map(str)
_iface = st.fixed_dictionaries({"name": st.text("abcdef0123", min_size=1, max_size=15)},
                               optional={"mac": st.just("02:00:00:00:00:01"),
                                         "sandbox": st.just("/var/run/netns/p")})


@st.composite
def results_100(draw):
    ifaces = draw(st.lists(_iface, max_size=3))
    ips = []
    for _ in range(draw(st.integers(0, 4))):
        v4 = draw(st.booleans())
        addr = draw(_v4 if v4 else _v6)
        ip = {"address": f"{addr}/{draw(st.integers(1, 32 if v4 else 128))}"}
        if draw(st.booleans()):
            ip["gateway"] = draw(_v4 if v4 else _v6)
        if ifaces and draw(st.booleans()):
            ip["interface"] = draw(st.integers(0, len(ifaces) - 1))
        ips.append(ip)
    routes = []
    for _ in range(draw(st.integers(0, 3))):
        v4 = draw(st.booleans())
        route = {"dst": f"{draw(_v4 if v4 else _v6)}/{draw(st.integers(0, 32 if v4 else 128))}"}
        if draw(st.booleans()):
            route["gw"] = draw(_v4 if v4 else _v6)
        routes.append(route)
    dns = draw(st.fixed_dictionaries({}, optional={
        "nameservers": st.lists(_v4, min_size=1, max_size=2),
        "domain": st.just("example.org"),
        "search": st.lists(st.just("a.example"), min_size=1, max_size=2),
        "options": st.lists(st.just("ndots:5"), min_size=1, max_size=2)}))
    out: dict = {"cniVersion": "1.0.0"}
    for key, value in (("interfaces", ifaces), ("ips", ips), ("routes", routes), ("dns", dns)):
        if value:
            out[key] = value
    return out


@settings(max_examples=300, deadline=None)
@given(results_100())
def test_roundtrip_100_031_100(result):
    down = convert_result(result, "0.3.1")
    for ip in down.get("ips", []):
        assert ip["version"] == str(ipaddress.ip_interface(ip["address"]).version)
    assert convert_result(down, "1.0.0") == result


@settings(max_examples=200, deadline=None)
@given(results_100(), st.sampled_from(SUPPORTED_VERSIONS[2:]))
def test_roundtrip_through_any_040_or_later(result, via):
    assert convert_result(convert_result(result, via), "1.0.0") == result


@settings(max_examples=200, deadline=None)
@given(results_100())
def test_020_keeps_at_most_one_ip_per_family(result):
    has_ip = bool(result.get("ips"))
    try:
        out = convert_result(result, "0.2.0")
    except CniError as e:
        assert not has_ip and e.code == 1
        return
    assert set(out) <= {"cniVersion", "ip4", "ip6", "dns"}
    back = convert_result(out, "1.0.0")
    assert len(back.get("ips", [])) <= 2
