"""spec/routes.py, the pure half: default-route validation (spec §4.1.2.1.9) and result
rewriting; node/routes.py's checks that come before the netns."""
from __future__ import annotations

import copy
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from netattach.node.routes import RouteTarget, apply_default_routes
from netattach.spec.routes import (
    DefaultRoutePlan,
    RouteError,
    plan_default_routes,
    with_default_routes,
)

MISSING_NETNS = "/var/run/netns/netattach-no-such-netns"


def elems(carrier=None, gateways=None, n=3):
    """n attachments eth0, net1, ...; the one at index `carrier` has `gateways`."""
    return [(("eth0" if i == 0 else f"net{i}"), (gateways if i == carrier else None),
             ("default" if i == 0 else f"ns/n{i}")) for i in range(n)]


# ------------------------------------------------------------------ plan_default_routes

@pytest.mark.parametrize("gateways, v4, v6", [
    (["198.18.1.1"], "198.18.1.1", None),
    (["fd00:1::1"], None, "fd00:1::1"),
    (["198.18.1.1", "fd00:1::1"], "198.18.1.1", "fd00:1::1"),
    (["fd00:1::1", "198.18.1.1"], "198.18.1.1", "fd00:1::1"),
    (["FD00:1:0::0001"], None, "fd00:1::1"),                       # normalized
    (["::ffff:198.18.1.1"], "198.18.1.1", None),                   # IPv4-mapped is IPv4
    (["fe80::1"], None, "fe80::1"),                                 # link-local v6 gateway
    ([], None, None),                                               # no default route at all
])
def test_plan_valid(gateways, v4, v6):
    plan = plan_default_routes(elems(2, gateways))
    assert plan == DefaultRoutePlan(index=2, ifname="net2", network="ns/n2",
                                    gateways=tuple(gateways), v4=v4, v6=v6)
    assert plan.by_family() == {f: g for f, g in ((4, v4), (6, v6)) if g}


@pytest.mark.parametrize("elements", [
    [],
    elems(n=1),
    elems(n=4),
    [("eth0", None), ("net1", None)],                               # pairs, no names
])
def test_plan_nothing_to_do(elements):
    assert plan_default_routes(elements) is None


@pytest.mark.parametrize("gateways, words", [
    (["198.18.1.1", "198.18.1.2"], ["ns/n1", "2 IPv4 gateways", "198.18.1.1, 198.18.1.2"]),
    (["198.18.1.1", "198.18.1.1"], ["ns/n1", "2 IPv4 gateways"]),
    (["198.18.1.1", "::ffff:198.18.1.2"], ["2 IPv4 gateways", "198.18.1.2"]),
    (["fd00::1", "198.18.1.1", "fd00::2"], ["2 IPv6 gateways", "fd00::1, fd00::2"]),
    (["198.18.1.0/24"], ["ns/n1", "'198.18.1.0/24'", "not an IPv4/IPv6 address"]),
    (["gw"], ["'gw'", "not an IPv4/IPv6 address"]),
    ([""], ["not an IPv4/IPv6 address"]),
    ([7], ["7", "not a string"]),
    (["0.0.0.0"], ["0.0.0.0", "not a unicast"]),
    (["::"], [":: is not a unicast"]),
    (["127.0.0.1"], ["not a unicast"]),
    (["224.0.0.1"], ["not a unicast"]),
    (["ff02::1"], ["not a unicast"]),
    (["255.255.255.255"], ["not a unicast"]),
    ("198.18.1.1", ["must be a list"]),
])
def test_plan_invalid_gateways(gateways, words):
    with pytest.raises(RouteError) as err:
        plan_default_routes(elems(1, gateways))
    for w in words:
        assert w in str(err.value)


def test_plan_two_carriers():
    elements = elems(1, ["198.18.1.1"])
    elements[2] = ("net2", ["198.18.2.1"], "ns/n2")
    with pytest.raises(RouteError, match=r"only one network may set default-route.*ns/n1, ns/n2"):
        plan_default_routes(elements)


def test_plan_default_network_cannot_carry_the_key():
    with pytest.raises(RouteError, match="default is the cluster default network"):
        plan_default_routes(elems(0, ["198.18.1.1"]))


def test_plan_names_the_ifname_without_network_name():
    with pytest.raises(RouteError, match="network net1: "):
        plan_default_routes([("eth0", None), ("net1", ["198.18.1.1", "198.18.1.2"])])


def test_route_error_is_a_value_error():
    assert issubclass(RouteError, ValueError)


# ------------------------------------------------------------------ with_default_routes

SANDBOX = "/var/run/netns/x"
V4_DEFAULT = {"dst": "0.0.0.0/0", "gw": "198.18.0.1"}
V6_DEFAULT = {"dst": "::/0", "gw": "fd00::1"}
OTHER = {"dst": "198.19.0.0/16", "gw": "198.18.0.1"}


def current(version, routes=None, **extra):
    """A bridge-like result of version >= 0.3.0 (routes=None: no routes key)."""
    ip = {"address": "198.18.0.5/24", "gateway": "198.18.0.1", "interface": 1}
    if version in ("0.3.0", "0.3.1", "0.4.0"):
        ip = {"version": "4", **ip}
    out = {"cniVersion": version,
           "interfaces": [{"name": "br"}, {"name": "eth0", "sandbox": SANDBOX}],
           "ips": [ip], "dns": {}}
    if routes is not None:
        out["routes"] = routes
    out.update(extra)
    return out


CURRENT = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]


@pytest.mark.parametrize("version", CURRENT)
@pytest.mark.parametrize("routes, gateways, expected", [
    # a non-chosen attachment loses its default routes
    ([V4_DEFAULT], [], None),
    ([V4_DEFAULT, V6_DEFAULT, OTHER], [], [OTHER]),
    ([OTHER, {"dst": "0.0.0.0/0"}], [], [OTHER]),                   # default without gw
    ([{"dst": "0.0.0.0/1", "gw": "198.18.0.1"}], [],                # not a default route
     [{"dst": "0.0.0.0/1", "gw": "198.18.0.1"}]),
    ([{"dst": "::0/0"}, {"dst": "0::/0", "gw": "fd00::9"}], [], None),
    (None, [], None),                                               # no routes key at all
    ([], [], None),                                                 # empty list dropped
    # the chosen attachment: its own defaults replaced by the gateways
    (None, ["198.18.0.254"], [{"dst": "0.0.0.0/0", "gw": "198.18.0.254"}]),
    ([OTHER, V4_DEFAULT], ["198.18.0.254"], [OTHER, {"dst": "0.0.0.0/0", "gw": "198.18.0.254"}]),
    ([V6_DEFAULT], ["198.18.0.254", "fd00::fe"],
     [{"dst": "0.0.0.0/0", "gw": "198.18.0.254"}, {"dst": "::/0", "gw": "fd00::fe"}]),
])
def test_rewrite_current_versions(version, routes, gateways, expected):
    result = current(version, routes)
    before = copy.deepcopy(result)
    out = with_default_routes(result, gateways)
    assert result == before                                          # input untouched
    assert out.get("routes") == expected
    assert ("routes" in out) == (expected is not None)
    # everything but routes is kept as is, ips[].gateway included
    assert {k: v for k, v in out.items() if k != "routes"} == \
        {k: v for k, v in before.items() if k != "routes"}


def test_rewrite_110_keeps_other_tables_and_drops_main_table_defaults():
    routes = [
        {"dst": "0.0.0.0/0", "gw": "198.18.0.1", "table": 100},      # policy routing: kept
        {"dst": "0.0.0.0/0", "gw": "198.18.0.1", "table": 254},      # main table: dropped
        {"dst": "0.0.0.0/0", "gw": "198.18.0.1", "priority": 100},   # main table: dropped
        {"dst": "198.19.0.0/16", "gw": "198.18.0.1", "mtu": 1400, "scope": 0},
    ]
    out = with_default_routes(current("1.1.0", routes), ["198.18.0.254"])
    assert out["routes"] == [routes[0], routes[3], {"dst": "0.0.0.0/0", "gw": "198.18.0.254"}]


@pytest.mark.parametrize("version", ["0.1.0", "0.2.0", None])
def test_rewrite_legacy_results(version):
    result = {"ip4": {"ip": "198.18.0.5/24", "gateway": "198.18.0.1",
                      "routes": [V4_DEFAULT, OTHER]},
              "dns": {"nameservers": ["198.18.0.1"]}}
    if version:
        result["cniVersion"] = version
    cleared = with_default_routes(result, [])
    assert cleared["ip4"] == {"ip": "198.18.0.5/24", "gateway": "198.18.0.1", "routes": [OTHER]}
    assert "ip6" not in cleared and cleared["dns"] == result["dns"]

    # a v6 gateway has no ip6 block to go to: left out of the result
    chosen = with_default_routes(result, ["198.18.0.254", "fd00::fe"])
    assert chosen["ip4"]["routes"] == [OTHER, {"dst": "0.0.0.0/0", "gw": "198.18.0.254"}]
    assert "ip6" not in chosen


def test_rewrite_legacy_dual_stack_per_family():
    result = {"cniVersion": "0.2.0",
              "ip4": {"ip": "198.18.0.5/24", "routes": [V4_DEFAULT]},
              "ip6": {"ip": "fd00::5/64"}}
    out = with_default_routes(result, ["fd00::fe"])
    assert "routes" not in out["ip4"]
    assert out["ip6"] == {"ip": "fd00::5/64", "routes": [{"dst": "::/0", "gw": "fd00::fe"}]}


def test_rewrite_none_and_bad_shapes():
    assert with_default_routes(None, ["198.18.0.1"]) is None
    with pytest.raises(RouteError, match="ns/a: result routes is not a list"):
        with_default_routes({"cniVersion": "1.0.0", "routes": {"dst": "0.0.0.0/0"}}, [], "ns/a")
    with pytest.raises(RouteError, match="ip4 is not an object"):
        with_default_routes({"cniVersion": "0.2.0", "ip4": "198.18.0.5/24"}, [])
    with pytest.raises(RouteError, match="not an object"):
        with_default_routes(["x"], [])  # type: ignore[arg-type]


def test_rewrite_keeps_unparsable_routes():
    odd = [{"dst": "not-a-cidr"}, "junk", {"gw": "198.18.0.1"}]
    assert with_default_routes(current("1.0.0", odd), [])["routes"] == odd


route_st = st.one_of(
    st.sampled_from([V4_DEFAULT, V6_DEFAULT, OTHER, {"dst": "::/0"},
                     {"dst": "0.0.0.0/0", "table": 7}, {"dst": "fd00::/8", "gw": "fd00::1"}]),
    st.builds(lambda a: {"dst": f"198.18.{a}.0/24"}, st.integers(0, 255)))


@given(routes=st.lists(route_st, max_size=6),
       gateways=st.sampled_from([[], ["198.18.9.1"], ["fd00::9"], ["198.18.9.1", "fd00::9"]]),
       version=st.sampled_from(CURRENT))
def test_rewrite_properties(routes, gateways, version):
    out = with_default_routes(current(version, routes), gateways)
    got = out.get("routes", [])
    main_defaults = [r for r in got if r["dst"] in ("0.0.0.0/0", "::/0") and "table" not in r]
    assert [r["gw"] for r in main_defaults] == gateways              # exactly the gateways
    assert with_default_routes(out, gateways) == out                 # idempotent
    others = [r for r in routes if r not in (V4_DEFAULT, V6_DEFAULT, {"dst": "::/0"})]
    assert [r for r in got if r not in main_defaults] == others      # order kept


# ------------------------------------------------------------------ apply, before any netlink

def test_apply_without_key_does_nothing_and_copies():
    results = [current("1.0.0", [V4_DEFAULT]), None]
    targets = [RouteTarget("eth0", results[0], None, "default"),
               RouteTarget("net1", None, None, "ns/n1")]
    out = apply_default_routes(MISSING_NETNS, targets)               # netns never opened
    assert out == results and out[0] is not results[0]


def test_apply_validates_before_touching_the_netns():
    targets = [RouteTarget("eth0", None, None, "default"),
               RouteTarget("net1", None, ("198.18.1.1", "198.18.1.2"), "ns/n1")]
    with pytest.raises(RouteError, match="2 IPv4 gateways"):
        apply_default_routes(MISSING_NETNS, targets)
    targets = [RouteTarget("eth0", {"cniVersion": "1.0.0", "routes": 5}, None, "default"),
               RouteTarget("net1", None, ("198.18.1.1",), "ns/n1")]
    with pytest.raises(RouteError, match="default: result routes is not a list"):
        apply_default_routes(MISSING_NETNS, targets)


def test_apply_missing_netns_is_an_error_and_not_created():
    targets = [RouteTarget("eth0", None, None, "default"),
               RouteTarget("net1", None, (), "ns/n1")]
    with pytest.raises(RouteError, match=f"cannot open network namespace {MISSING_NETNS}"):
        apply_default_routes(MISSING_NETNS, targets)
    import os
    assert not os.path.exists(MISSING_NETNS)


def test_importing_routes_does_not_import_pyroute2():
    code = "import sys, netattach.node.routes; print('pyroute2' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
